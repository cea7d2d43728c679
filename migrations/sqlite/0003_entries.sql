-- Context entries, their versions and vectors (issue: entries and vector projection).
SELECT 1;
