-- Wake-ups: the statements of the listener's connection (listen.go). The
-- notification a publish sends is publish.sql's publishWake. Part of the
-- store's one template set: see sql.go. The channel is made of the
-- validated schema and prefix (letters, digits, "_" and one "."): it is
-- quoted and needs no escaping.

-- The listener's session listens on the store's channel.
{{define "wakeListen" -}}
LISTEN "{{.Channel}}"
{{- end}}

-- The listener gives its LISTEN up when it found that notifications do
-- not come back (a pooler without sessions): the LISTEN went to a server
-- connection that others now use, and should not stay there.
{{define "wakeUnlisten" -}}
UNLISTEN "{{.Channel}}"
{{- end}}
