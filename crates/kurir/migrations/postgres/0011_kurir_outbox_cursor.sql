-- An append-only outbox (issue 19). The relay no longer marks the rows it fans out: that update
-- could not be HOT (it removed the row from `kurir_outbox_undispatched`) and wrote every index
-- of the table again. It reads through a cursor instead, kept in a one-row table that it updates
-- in the transaction that writes the deliveries.
--
-- The cursor orders rows by `(txid, id)`: `txid` is the inserting transaction's top-level id
-- (`pg_current_xact_id()`, PostgreSQL 13 or later). Ids are handed out when rows are inserted,
-- not when they commit, so a cursor over ids alone would step over a row whose transaction
-- commits after a later id's. The relay reads only rows whose transaction is below the xmin of
-- its snapshot: every such transaction has ended, so no row can appear below the cursor later.
--
-- Added nullable without a default, then given one: no rewrite of the table. Rows that were still
-- waiting for the relay get this migration's transaction id, so the relay fans them out; rows it
-- already fanned out keep NULL, which no comparison with the cursor ever selects.
ALTER TABLE kurir_outbox ADD COLUMN txid xid8;
ALTER TABLE kurir_outbox ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
UPDATE kurir_outbox SET txid = pg_current_xact_id() WHERE dispatched_at IS NULL;
CREATE INDEX kurir_outbox_cursor ON kurir_outbox (txid, id);
-- Nothing reads `dispatched_at IS NULL` any more: one index write less per insert.
DROP INDEX kurir_outbox_undispatched;

-- The last row fanned out. One process relays at a time: it holds this row locked (`FOR UPDATE
-- SKIP LOCKED`) for its batch; another that finds it locked has nothing to do, and takes over
-- when the lock goes, with the transaction or the connection of a process that died.
CREATE TABLE kurir_relay_cursor (
    one       BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    txid      xid8    NOT NULL,
    outbox_id BIGINT  NOT NULL
);
INSERT INTO kurir_relay_cursor (txid, outbox_id) VALUES ('0', 0);
