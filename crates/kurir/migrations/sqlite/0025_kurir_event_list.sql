-- The application's INSERT pays only for what refuses a bad row and what the relay reads (issue
-- 27, item 3; PostgreSQL's migration of the same number says why). The listings' indexes move
-- from kurir_outbox to kurir_event_list, written by the relay in the batch that fans an event out.
-- Rows still waiting for the relay are read from the outbox past the cursor (a primary-key
-- range). What stays on kurir_outbox: the primary key, the unique event_id, the contract's
-- triggers and the subscriber check.
CREATE TABLE kurir_event_list (
    outbox_id     INTEGER PRIMARY KEY,
    event_type    TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    aggregate_id  TEXT,
    subscriber_id TEXT,
    created_at    TEXT    NOT NULL,
    refused       BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX kurir_event_list_event_type ON kurir_event_list (event_type, outbox_id DESC);
CREATE INDEX kurir_event_list_aggregate ON kurir_event_list (aggregate_id, outbox_id DESC)
    WHERE aggregate_id IS NOT NULL;
CREATE INDEX kurir_event_list_subscriber ON kurir_event_list (subscriber_id, outbox_id DESC)
    WHERE subscriber_id IS NOT NULL;
CREATE INDEX kurir_event_list_created ON kurir_event_list (created_at, outbox_id);
CREATE INDEX kurir_event_list_refused ON kurir_event_list (outbox_id) WHERE refused;

-- Every row the relay has passed (`store::cursor::relayed`).
INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, subscriber_id,
        created_at, refused)
    SELECT o.id, o.event_type, o.version, o.aggregate_id, o.subscriber_id, o.created_at,
        o.refused_reason IS NOT NULL
    FROM kurir_outbox o
    WHERE o.dispatched_at IS NOT NULL OR o.id <= (SELECT outbox_id FROM kurir_relay_cursor);

DROP INDEX kurir_outbox_created;
DROP INDEX kurir_outbox_aggregate;
DROP INDEX kurir_outbox_event_type;
DROP INDEX kurir_outbox_refused;
DROP INDEX kurir_outbox_subscriber_id;
