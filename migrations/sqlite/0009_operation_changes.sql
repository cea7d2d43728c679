-- Event streams of operation changes (`GET …/operations/events`). Every change of an
-- operation — its insert, or its `version` moving — takes the next number of one counter
-- (`change_seq`), stamped by the database so no writer can forget it. SQLite has one writer
-- at a time, across processes too, so the numbers follow commit order: a stream's position
-- is the last number it delivered (`jobs/src/operation/change_position.rs`). Rows from
-- before this migration have no number: no stream position precedes them.
ALTER TABLE operations ADD COLUMN change_seq INTEGER;

CREATE TABLE operation_change_clock (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL
);
INSERT INTO operation_change_clock (id, seq) VALUES (1, 0);

CREATE TRIGGER operations_stamp_insert AFTER INSERT ON operations
BEGIN
    UPDATE operation_change_clock SET seq = seq + 1 WHERE id = 1;
    UPDATE operations SET change_seq = (SELECT seq FROM operation_change_clock WHERE id = 1) WHERE id = NEW.id;
END;

CREATE TRIGGER operations_stamp_update AFTER UPDATE OF version ON operations
    WHEN NEW.version IS NOT OLD.version
BEGIN
    UPDATE operation_change_clock SET seq = seq + 1 WHERE id = 1;
    UPDATE operations SET change_seq = (SELECT seq FROM operation_change_clock WHERE id = 1) WHERE id = NEW.id;
END;

-- A tenant's changes since a position; every tenant's for an admin's stream.
CREATE INDEX operations_changes ON operations (tenant, change_seq);
CREATE INDEX operations_changes_all ON operations (change_seq);
