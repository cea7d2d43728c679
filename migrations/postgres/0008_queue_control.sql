-- Queue control: priority, deadlines, the worker that holds a lease, attempt history, the
-- fair-share bookkeeping, pauses, worker liveness, and the embedded rate limiter.
ALTER TABLE operations ADD COLUMN priority BIGINT NOT NULL DEFAULT 5;
ALTER TABLE operations ADD COLUMN deadline_ms BIGINT;
ALTER TABLE operations ADD COLUMN lease_owner TEXT;
ALTER TABLE operations ADD COLUMN attempt_started_at_ms BIGINT;
-- JSON array of finished attempts (bounded by the writer).
ALTER TABLE operations ADD COLUMN attempts TEXT;
-- What a rate limit keys this operation by (an inference turn's model), if anything.
ALTER TABLE operations ADD COLUMN rate_key TEXT;

-- The scheduler's walk: tenants with queued work of a kind, each tenant's next operation
-- by priority then age, and running counts per kind and tenant — all one index.
CREATE INDEX operations_schedule ON operations (kind, state, tenant, priority DESC, created_at_ms, id);
-- Admins list every tenant's operations, newest first.
CREATE INDEX operations_recent ON operations (created_at_ms DESC, id DESC);

-- Pauses: tenant '' pauses the kind for everyone.
CREATE TABLE queue_controls (
    kind           TEXT    NOT NULL,
    tenant         TEXT    NOT NULL,
    paused         BIGINT  NOT NULL DEFAULT 0,
    updated_at_ms  BIGINT  NOT NULL,
    PRIMARY KEY (kind, tenant)
);

-- Fair share: when each tenant last had an operation of a kind started.
CREATE TABLE queue_shares (
    kind           TEXT    NOT NULL,
    tenant         TEXT    NOT NULL,
    last_claim_ms  BIGINT  NOT NULL DEFAULT 0,
    claims         BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, tenant)
);

-- Worker processes announce themselves every second; an operation whose lease owner has
-- gone silent is recovered without waiting out its lease.
CREATE TABLE worker_heartbeats (
    holder         TEXT    PRIMARY KEY,
    started_at_ms  BIGINT  NOT NULL,
    seen_at_ms     BIGINT  NOT NULL
);

-- Rate limits of the embedded deployment (GCRA: the theoretical arrival time per key, µs).
CREATE TABLE rate_limits (
    key               TEXT    PRIMARY KEY,
    tat_us            BIGINT  NOT NULL,
    blocked_until_ms  BIGINT  NOT NULL DEFAULT 0
);
