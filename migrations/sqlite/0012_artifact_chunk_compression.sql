-- PostgreSQL's migration 12 compresses artifact chunks with lz4; SQLite stores them as
-- given. Kept so both engines have the same version numbers.
SELECT 1;
