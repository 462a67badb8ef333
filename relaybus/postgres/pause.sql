-- Pausing handlers: the statements of pause.go. Part of the store's one
-- template set: see sql.go.

-- Pause a handler: a second pause keeps the first's time and reason.
{{define "pause" -}}
INSERT INTO {{.Paused}} (handler, reason, paused_at) VALUES ($1, $2, $3)
ON CONFLICT (handler) DO NOTHING
{{- end}}

-- Resume a handler: RETURNING says whether it was paused.
{{define "resume" -}}
DELETE FROM {{.Paused}} WHERE handler = $1 RETURNING handler
{{- end}}

-- The paused handlers, in name order: every dispatcher reads them once
-- per poll.
{{define "pausedList" -}}
SELECT handler, reason, paused_at FROM {{.Paused}} ORDER BY handler
{{- end}}
