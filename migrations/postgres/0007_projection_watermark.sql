-- Staleness moves from a per-entry column to a per-tenant watermark. Every entry write
-- takes the tenant's next `change_seq` under the heads row lock, so committed sequences
-- form a prefix and a rewritten entry always moves above everything embedded so far.
-- `projected_seq` is the change sequence up to which every active entry has a vector of
-- its current version; the stale set is `change_seq > projected_seq`, a range of the
-- existing (tenant, change_seq) index. A vector write no longer rewrites the wide entry
-- row (a non-HOT update that cost more than the vector insert itself).
ALTER TABLE context_entry_heads ADD COLUMN projected_seq BIGINT NOT NULL DEFAULT 0;

UPDATE context_entry_heads h SET projected_seq = COALESCE(
    (SELECT MIN(e.change_seq) - 1 FROM context_entries e
      WHERE e.tenant = h.tenant AND e.status = 'active' AND e.projected_version <> e.version),
    h.source_version);

DROP INDEX context_entries_stale;
ALTER TABLE context_entries DROP COLUMN projected_version;
