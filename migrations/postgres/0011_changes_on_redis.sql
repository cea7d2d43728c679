-- Operation changes are announced on Redis by the writers (src/changes/relay.rs), no longer
-- by NOTIFY: a notifying transaction takes a database-wide lock at commit and holds it
-- through the WAL flush, so every operation change queued behind every other (pgbench,
-- 8 clients, one-row UPDATE: 1,200–1,460 tps without, 370–460 with a pg_notify). The
-- change stamp of migration 9 stays: event streams resume by it.
DROP TRIGGER IF EXISTS operations_changed ON operations;
DROP TRIGGER IF EXISTS operations_inserted ON operations;
DROP FUNCTION IF EXISTS context_ops_operation_changed();
