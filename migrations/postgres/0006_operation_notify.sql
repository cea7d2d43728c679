-- Every change of an operation (its `version` moves) notifies channel
-- `context_ops_operations` with the operation id, delivered at commit: long-polls held by
-- other processes (a split `api` + `worker` deployment) wake at once instead of at their
-- next periodic re-read.
CREATE FUNCTION context_ops_operation_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('context_ops_operations', NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER operations_changed AFTER UPDATE ON operations
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version)
    EXECUTE FUNCTION context_ops_operation_changed();
