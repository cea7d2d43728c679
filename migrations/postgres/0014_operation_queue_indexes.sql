-- The scheduler's indexes as partial ones, one per state it reads. `operations_schedule`
-- (kind, state, tenant, …) served the view and the claim only while the planner believed
-- it: analyzed when no row was queued (after a drain, before a burst), PostgreSQL read the
-- queued rows through `operations_dispatch` (state, then a filter on kind and tenant) — a
-- pass over the whole backlog per view read (10,000 queued: 16 ms, 1,247 buffers). These
-- hold queued (or running) rows only, and the statements that use them spell the state
-- as the same literal, so they are the one index that matches, whatever the statistics
-- say (the same view: 0.15 ms, 30 buffers, with stale, missing or fresh statistics). An
-- operation's queued and running versions take one entry each here instead of three in
-- `operations_schedule` (22 index entries per operation, now 21).
--
-- A tenant's queue is ordered by priority (highest first), then age; the priority is
-- negated so that a claim can start from a queue position, `(-priority, created_at_ms)
-- >= (…)`, with one row comparison that bounds the index range (past the entries of
-- operations already claimed, which stay in the index until vacuum).
CREATE INDEX operations_queued ON operations (kind, tenant, (-priority), created_at_ms, id)
    WHERE state = 'queued';
CREATE INDEX operations_running ON operations (kind, tenant) WHERE state = 'running';
DROP INDEX operations_schedule;
