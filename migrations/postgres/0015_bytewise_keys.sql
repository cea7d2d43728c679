-- Text compares bytewise ("C"), as SQLite's BINARY does: both engines order ids, tenants
-- and cursors alike whatever the database's locale, and b-tree comparisons of text keys
-- become memcmp instead of strcoll (HTTP append +7-10 %, see docs/operations-engine.md).
-- Changing a column's collation keeps its rows and rebuilds the indexes that use it.
DO $$
DECLARE t record;
BEGIN
    FOR t IN
        SELECT c.table_name, string_agg(format('ALTER COLUMN %I TYPE TEXT COLLATE "C"', c.column_name), ', ') AS alters
        FROM information_schema.columns c
        JOIN information_schema.tables r ON r.table_schema = c.table_schema AND r.table_name = c.table_name
        WHERE c.table_schema = current_schema() AND r.table_type = 'BASE TABLE'
          AND c.table_name <> '_sqlx_migrations'
          AND c.data_type = 'text' AND c.collation_name IS DISTINCT FROM 'C'
        GROUP BY c.table_name
    LOOP
        EXECUTE format('ALTER TABLE %I %s', t.table_name, t.alters);
    END LOOP;
END $$;
