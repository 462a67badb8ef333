-- StoreHealth (health.go): the store's upkeep, from the statistics
-- views, not from the store's tables. Part of the store's one template
-- set: see sql.go.

-- One row: the database's clock; the deliveries table's live and dead
-- rows and last vacuums; the lanes table's updates and HOT updates; and
-- what holds the xmin horizon furthest back. The ::regclass casts fail
-- with undefined_table when the store was never set up (ErrNotSetUp).
--
-- The holder is the oldest of: the sessions of this database with a
-- snapshot (backend_xmin) or a transaction ID (backend_xid), and
-- walsenders, whose standby's snapshot (hot_standby_feedback) holds back
-- every database; and the prepared transactions of this database. The
-- reading's own session, whose snapshot this statement is, and
-- autovacuum workers, whose snapshots vacuum ignores, are left out.
-- Replication slots (pg_replication_slots.xmin) hold it back too and are
-- not reported. Sessions of other roles show their snapshot only to a
-- role with pg_read_all_stats (pg_monitor); to any other role they are
-- invisible here.
{{define "storeHealth" -}}
SELECT clock_timestamp(),
	coalesce(d.n_live_tup, 0), coalesce(d.n_dead_tup, 0), d.last_autovacuum, d.last_vacuum,
	coalesce(l.n_tup_upd, 0), coalesce(l.n_tup_hot_upd, 0),
	x.kind, x.pid, x.name, x.usename, x.state, x.backend_type, x.xact_start, x.query_start, x.xmin_age
FROM (SELECT '{{.Deliveries}}'::regclass AS deliveries, '{{.Lanes}}'::regclass AS lanes) t
LEFT JOIN pg_catalog.pg_stat_all_tables d ON d.relid = t.deliveries
LEFT JOIN pg_catalog.pg_stat_all_tables l ON l.relid = t.lanes
LEFT JOIN LATERAL (
	SELECT h.* FROM (
		SELECT 'session' AS kind, a.pid, a.application_name AS name, a.usename::text, a.state, a.backend_type,
			a.xact_start, a.query_start, greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS xmin_age
		FROM pg_catalog.pg_stat_activity a
		WHERE a.pid <> pg_backend_pid()
			AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
			AND (a.datname = current_database() OR a.backend_type = 'walsender')
			AND a.backend_type <> 'autovacuum worker'
		UNION ALL
		SELECT 'prepared transaction', 0, p.gid, p.owner::text, NULL, NULL,
			p.prepared, NULL, age(p.transaction)::bigint
		FROM pg_catalog.pg_prepared_xacts p
		WHERE p.database = current_database()
	) h
	ORDER BY h.xmin_age DESC, h.xact_start
	LIMIT 1
) x ON true
{{- end}}
