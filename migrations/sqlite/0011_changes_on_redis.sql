-- PostgreSQL's migration 11 drops its NOTIFY triggers (changes are announced on Redis);
-- SQLite never had them. Kept so both engines have the same version numbers.
SELECT 1;
