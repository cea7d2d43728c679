-- Artifacts: export results and client uploads, tenant-scoped, stored as byte chunks.
-- An artifact is `writing` (an export is producing it) or `uploading` (a client is sending
-- it) until it is `ready`: sealed with its digest, immutable, downloadable, importable.
CREATE TABLE artifacts (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    origin          TEXT    NOT NULL,   -- export | upload
    state           TEXT    NOT NULL,   -- writing | uploading | ready
    operation_id    TEXT,               -- the export operation that writes it
    size_bytes      BIGINT  NOT NULL DEFAULT 0,
    digest          TEXT,               -- sha256:<hex> once ready
    messages        BIGINT,             -- record counts, known for exports
    entries         BIGINT,
    created_at_ms   BIGINT  NOT NULL,
    updated_at_ms   BIGINT  NOT NULL,
    expires_at_ms   BIGINT  NOT NULL
);
CREATE INDEX artifacts_listing ON artifacts (tenant, created_at_ms DESC, id DESC);
CREATE INDEX artifacts_expiry ON artifacts (expires_at_ms);

-- The bytes, as contiguous chunks keyed by their offset. Exports write fixed-size chunks
-- (the last one shorter); uploads store each appended piece as it came.
CREATE TABLE artifact_chunks (
    artifact_id     TEXT    NOT NULL REFERENCES artifacts (id) ON DELETE CASCADE,
    start_offset    BIGINT  NOT NULL,
    length          BIGINT  NOT NULL,
    data            BYTEA   NOT NULL,
    PRIMARY KEY (artifact_id, start_offset)
);
-- Stored out of line without compression: chunks are written and read whole, and
-- compressing a megabyte per row costs more CPU than the export itself.
ALTER TABLE artifact_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
