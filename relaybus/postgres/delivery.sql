-- The delivery as deliveryRow.scan (delivery.go) reads it, and DeliveryList.
-- Part of the store's one template set: see sql.go.

-- deliveryColumns are the columns deliveryRow.scan reads: d = deliveries,
-- e = events, f = the lane the delivery is in flight in (NULL columns
-- when it is not).
{{define "deliveryColumns" -}}
d.id, d.event_id, d.event_type, d.key, d.sequence,
	e.payload, e.headers, e.created_at,
	d.handler, d.status, d.attempts, d.max_attempts, d.available_at, d.last_error,
	d.created_at, d.updated_at, d.completed_at, d.lane, d.claims, d.suspect,
	f.lease_owner, f.epoch, f.lease_expires_at
{{- end}}

-- historyColumns are deliveryColumns for a history row h: completed, in
-- no lane.
{{define "historyColumns" -}}
h.id, h.event_id, h.event_type, h.key, h.sequence,
	e.payload, e.headers, e.created_at,
	h.handler, 'completed', h.attempts, h.max_attempts, h.available_at, h.last_error,
	h.created_at, h.completed_at, h.completed_at, 0::smallint, 0::bigint, false,
	NULL::text, NULL::bigint, NULL::timestamptz
{{- end}}

-- inFlight is the lateral subquery that finds the lane a pending delivery
-- d is in flight in: a lane with an owner that lists it. A lane whose
-- lease expired still counts until another claimer takes it over (the
-- delivery's attempt is charged then), so a listing between a crash and
-- the takeover shows the delivery as processing.
{{define "inFlight" -}}
LEFT JOIN LATERAL (
	SELECT l.lease_owner, l.epoch, l.lease_expires_at FROM {{.Lanes}} l
	WHERE l.lane = d.lane AND l.lease_owner IS NOT NULL AND d.id = ANY (l.in_flight)
) f ON d.status = 'pending'
{{- end}}

-- DeliveryList: a page of deliveries in id order after the cursor, from
-- the deliveries table and, when .WithHistory, the completion history,
-- each part a scan ordered by the primary key (an admin call). Rendered
-- per call with listSQL (admin.go): the filters are fixed fragments,
-- and only their values are parameters. $1 the cursor, $2 the page size
-- + 1 (one row more tells whether there is a next page); .Handler, .Key,
-- .EventID and .Status are the numbers of the filters' parameters (0:
-- no such filter); .Pending and .Processing filter by whether a pending
-- delivery is in flight.
{{define "deliveryList" -}}
{{if .WithHistory}}SELECT * FROM ({{end -}}
(SELECT {{template "deliveryColumns"}} FROM {{.Deliveries}} d JOIN {{.Events}} e ON e.id = d.event_id {{template "inFlight" .}} WHERE d.id > $1
{{- with .Handler}} AND d.handler = ${{.}}{{end}}
{{- with .Key}} AND d.key = ${{.}}{{end}}
{{- with .EventID}} AND d.event_id = ${{.}}{{end}}
{{- if .Pending}} AND d.status = 'pending' AND f.lease_owner IS NULL{{end}}
{{- if .Processing}} AND d.status = 'pending' AND f.lease_owner IS NOT NULL{{end}}
{{- with .Status}} AND d.status = ${{.}}{{end}} ORDER BY d.id LIMIT $2)
{{- if .WithHistory}} UNION ALL (SELECT {{template "historyColumns"}} FROM {{.History}} h LEFT JOIN {{.Events}} e ON e.id = h.event_id WHERE h.id > $1
{{- with .Handler}} AND h.handler = ${{.}}{{end}}
{{- with .Key}} AND h.key = ${{.}}{{end}}
{{- with .EventID}} AND h.event_id = ${{.}}{{end}} ORDER BY h.id LIMIT $2)) u ORDER BY 1 LIMIT $2
{{- end}}
{{- end}}
