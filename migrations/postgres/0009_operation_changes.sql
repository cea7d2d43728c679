-- Event streams of operation changes (`GET …/operations/events`). Every change of an
-- operation — its insert, or its `version` moving — records the id of the transaction that
-- made it (`change_xid`), stamped by the database so no writer can forget it. A stream's
-- position is a snapshot: the changes after it are those a newer snapshot sees and it did
-- not, which is commit order across every process without a counter that all writers would
-- queue on (`jobs/src/operation/change_position.rs`). Rows from before this migration have
-- no stamp: no stream position precedes them.
ALTER TABLE operations ADD COLUMN change_xid xid8;

CREATE FUNCTION context_ops_operation_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE TRIGGER operations_stamp_insert BEFORE INSERT ON operations
    FOR EACH ROW EXECUTE FUNCTION context_ops_operation_stamp();
CREATE TRIGGER operations_stamp_update BEFORE UPDATE ON operations
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version)
    EXECUTE FUNCTION context_ops_operation_stamp();

-- A tenant's changes since a position; every tenant's for an admin's stream.
CREATE INDEX operations_changes ON operations (tenant, change_xid);
CREATE INDEX operations_changes_all ON operations (change_xid);

-- The notification (migration 6) names the tenant too, after the id and a space (ids are
-- ULIDs, without spaces): a tenant's event streams wake on its changes, long-polls on
-- their operation's. New operations notify as well.
CREATE OR REPLACE FUNCTION context_ops_operation_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('context_ops_operations', NEW.id || ' ' || NEW.tenant);
    RETURN NULL;
END
$$;

CREATE TRIGGER operations_inserted AFTER INSERT ON operations
    FOR EACH ROW EXECUTE FUNCTION context_ops_operation_changed();
