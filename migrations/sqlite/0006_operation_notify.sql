-- PostgreSQL notifies other processes of operation changes (LISTEN/NOTIFY); SQLite has no
-- such channel, so this version is empty here: an SQLite deployment is one process, whose
-- long-polls are woken in memory.
SELECT 1;
