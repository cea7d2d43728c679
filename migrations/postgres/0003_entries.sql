-- Context entries ("insights"), every version of them, their vectors, and the per-tenant
-- heads that give the index watermark. Every row carries the tenant key ("tenant/project").

-- Per tenant: `source_version` counts entry writes (each written entry takes the next value
-- as its `change_seq`); `vector_seq` orders vector writes (the recall index syncs by it);
-- `projected_at_ms` is when a vector was last written for the tenant.
CREATE TABLE context_entry_heads (
    tenant          TEXT    PRIMARY KEY,
    source_version  BIGINT  NOT NULL DEFAULT 0,
    vector_seq      BIGINT  NOT NULL DEFAULT 0,
    projected_at_ms BIGINT  NOT NULL DEFAULT 0
);

-- The current version of each entry.
CREATE TABLE context_entries (
    tenant            TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    content           TEXT    NOT NULL,   -- JSON
    attributes        TEXT,               -- JSON, NULL when absent
    version           BIGINT  NOT NULL,
    status            TEXT    NOT NULL,   -- active | corrected | merged | expired
    conversation_id   TEXT    NOT NULL,   -- provenance.conversationId, for filtering
    provenance        TEXT    NOT NULL,   -- JSON
    superseded_by     TEXT,
    expires_at_ms     BIGINT,
    created_at_ms     BIGINT  NOT NULL,
    updated_at_ms     BIGINT  NOT NULL,
    change_seq        BIGINT  NOT NULL,   -- the tenant's source_version at the last write
    projected_version BIGINT  NOT NULL DEFAULT 0, -- entry version the stored vector embeds (0: none)
    PRIMARY KEY (tenant, id)
);
-- Changes in order (the recall index syncs by it) and the stale set (the projector's queue,
-- the watermark's lower bound).
CREATE INDEX context_entries_changes ON context_entries (tenant, change_seq);
CREATE INDEX context_entries_stale ON context_entries (tenant, change_seq)
    WHERE status = 'active' AND projected_version <> version;

-- Every version ever written: an immutable snapshot per (entry, version).
CREATE TABLE context_entry_versions (
    tenant          TEXT    NOT NULL,
    entry_id        TEXT    NOT NULL,
    version         BIGINT  NOT NULL,
    change          TEXT    NOT NULL,   -- create | update | correct | expire | merge | merged | import
    reason          TEXT,
    entry           TEXT    NOT NULL,   -- JSON ContextInsight as of this version
    recorded_at_ms  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, entry_id, version)
);

-- At most one vector per entry: the embedding of `version` (current when it equals the
-- entry's version). Little-endian f32 × dim.
CREATE TABLE context_entry_vectors (
    tenant          TEXT    NOT NULL,
    entry_id        TEXT    NOT NULL,
    version         BIGINT  NOT NULL,
    model           TEXT    NOT NULL,
    dim             INTEGER NOT NULL,
    vector          BYTEA   NOT NULL,
    written_seq     BIGINT  NOT NULL,
    written_at_ms   BIGINT  NOT NULL,
    PRIMARY KEY (tenant, entry_id)
);
CREATE INDEX context_entry_vectors_sync ON context_entry_vectors (tenant, written_seq);
