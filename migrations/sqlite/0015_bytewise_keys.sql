-- PostgreSQL's migration 15 makes its text columns compare bytewise ("C"). SQLite's
-- columns compare bytewise already (BINARY, the default collation): nothing to change.
SELECT 1;
