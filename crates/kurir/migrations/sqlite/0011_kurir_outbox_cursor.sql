-- An append-only outbox (issue 19). The relay no longer marks the rows it fans out; it reads
-- past a cursor, the last id it fanned out, kept in a one-row table that it updates in its
-- `BEGIN IMMEDIATE` transaction. SQLite has one writer at a time, so ids are handed out in commit
-- order, and AUTOINCREMENT never hands one out twice: every row committed after the relay's
-- batch has a larger id.
CREATE TABLE kurir_relay_cursor (
    one       INTEGER PRIMARY KEY CHECK (one = 1),
    outbox_id INTEGER NOT NULL
);
-- Just below the first row still waiting for the relay, or past every row when none waits. The
-- rows fanned out above it (only those migration 0005 refused: the relay always took the oldest
-- rows first) keep their `dispatched_at`, and the relay passes over them.
INSERT INTO kurir_relay_cursor (one, outbox_id) VALUES (1, COALESCE(
    (SELECT min(id) - 1 FROM kurir_outbox WHERE dispatched_at IS NULL),
    (SELECT max(id) FROM kurir_outbox),
    0));
-- Nothing reads `dispatched_at IS NULL` through it any more: one index write less per insert.
DROP INDEX kurir_outbox_undispatched;

-- A row inserted with an explicit id at or below the cursor would never be fanned out: refused,
-- as migration 0005's rules refuse a row. AFTER INSERT, where NEW.id is the id the row got.
CREATE TRIGGER kurir_outbox_id_past_cursor AFTER INSERT ON kurir_outbox
WHEN NEW.id <= (SELECT outbox_id FROM kurir_relay_cursor)
BEGIN
    SELECT RAISE(ABORT, 'kurir_outbox_id: id must be above every id the relay has fanned out; leave it to the database');
END;
