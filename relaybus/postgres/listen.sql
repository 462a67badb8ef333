-- Wake-ups: the statements of the listener's connection, and the
-- notification sent outside a publish (listen.go); the one a publish
-- sends is publish.sql's publishWake. Part of the
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

-- A notification outside any transaction of the caller's: an owed
-- publish's, the listener's probe, WakeSend. $1 is the payload: '' for a
-- wake-up, the probe's token. A transaction that only notifies has no
-- transaction id and writes no WAL: it holds NOTIFY's lock for no flush.
{{define "wakeNotify" -}}
SELECT pg_notify('{{.Channel}}', $1)
{{- end}}
