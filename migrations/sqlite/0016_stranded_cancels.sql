-- Operations stranded by a cancel (see PostgreSQL's migration 16): queued with the cancel
-- request set, never claimed again. They end `cancelled`, their barriers released.
UPDATE conversations SET deleting_operation = NULL
 WHERE EXISTS (SELECT 1 FROM operations o
                WHERE o.state = 'queued' AND o.cancel_requested = 1
                  AND o.tenant = conversations.tenant AND o.id = conversations.deleting_operation);

UPDATE operations
   SET state = 'cancelled', phase = 'cancelled', pushed_at_ms = NULL,
       finished_at_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
       updated_at_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
       version = version + 1
 WHERE state = 'queued' AND cancel_requested = 1;
