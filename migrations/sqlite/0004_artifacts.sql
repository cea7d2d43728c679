-- Artifacts and their chunks (issue: export and import).
SELECT 1;
