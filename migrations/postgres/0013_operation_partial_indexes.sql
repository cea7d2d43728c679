-- Index only the rows a lookup can find. Every state change of an operation rewrites a new
-- row version with an entry in each of its indexes (none of them is a HOT update: state,
-- change_xid and pushed_at_ms are indexed). Most operations carry no idempotency key, and
-- only a finished one has a finish time; as partial indexes these two take no entry for
-- those versions (27 index entries per operation's queued → running → finished, now 22).
-- Their lookups (`tenant = … AND idempotency_key = …`, `finished_at_ms < …`) imply the
-- predicates, so both engines' planners still use them; uniqueness of a key is unchanged
-- (NULL keys never collided).
DROP INDEX operations_idempotency;
CREATE UNIQUE INDEX operations_idempotency ON operations (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX operations_finished;
CREATE INDEX operations_finished ON operations (finished_at_ms) WHERE finished_at_ms IS NOT NULL;
