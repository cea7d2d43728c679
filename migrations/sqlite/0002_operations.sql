-- Operations: the source of truth of every long-running operation. The queue only says
-- "look at operation X"; every state change is a compare-and-set on this row.
CREATE TABLE operations (
    id                  TEXT    PRIMARY KEY,
    tenant              TEXT    NOT NULL,
    kind                TEXT    NOT NULL,
    state               TEXT    NOT NULL,
    phase               TEXT    NOT NULL,
    processed           INTEGER NOT NULL DEFAULT 0,
    total               INTEGER NOT NULL DEFAULT 0,
    request             TEXT    NOT NULL,
    request_fingerprint TEXT    NOT NULL,
    idempotency_key     TEXT,
    checkpoint          TEXT,
    result              TEXT,
    error               TEXT,
    error_code          TEXT,
    artifact_ref        TEXT,
    attempt             INTEGER NOT NULL DEFAULT 0,
    lease_token         TEXT,
    lease_expires_at_ms BIGINT,
    cancel_requested    INTEGER NOT NULL DEFAULT 0,
    not_before_ms       INTEGER NOT NULL DEFAULT 0,
    pushed_at_ms        BIGINT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    started_at_ms       BIGINT,
    finished_at_ms      BIGINT,
    version             INTEGER NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX operations_idempotency ON operations (tenant, idempotency_key);
CREATE INDEX operations_listing ON operations (tenant, created_at_ms DESC, id DESC);
CREATE INDEX operations_dispatch ON operations (state, pushed_at_ms);
CREATE INDEX operations_finished ON operations (finished_at_ms);

-- Singleton maintenance loops (retention sweep, projector, pruning): who runs the next
-- tick, and what the last one did.
CREATE TABLE maintenance (
    name            TEXT    PRIMARY KEY,
    holder          TEXT,
    lease_until_ms  INTEGER NOT NULL DEFAULT 0,
    last_run_ms     BIGINT,
    processed       INTEGER NOT NULL DEFAULT 0
);
