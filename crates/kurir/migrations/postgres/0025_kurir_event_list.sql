-- The application's INSERT pays only for what refuses a bad row and what the relay reads (issue
-- 27, item 3). Every outbox INSERT maintained five indexes that only kurir's own listings read
-- (by creation time, aggregate, event type, refusal and subscriber). They move to a table kurir
-- writes itself: the relay adds an event's row here in the batch transaction that fans it out
-- (`store::event_list`), and the dashboard's and the API's listings, the activity chart, the
-- catalog's counts, the refused gauge and retention read through its indexes.
--
-- A row is listed here exactly when the relay has passed it. Rows still waiting for the relay
-- (those waiting at this migration too) are read from the outbox past the relay's cursor,
-- through the cursor's index, and join the listings from there until the relay lists them.
--
-- What stays on kurir_outbox: the primary key (the relay's and the listings' lookups by id),
-- the unique event_id (idempotency, and `GET /v1/events/{id}`), `kurir_outbox_cursor` (the
-- relay's read past its cursor: without it each batch would scan the table), every CHECK of
-- migration 0005 and the subscriber foreign key (they refuse a bad row at the INSERT).
CREATE TABLE kurir_event_list (
    outbox_id     BIGINT      PRIMARY KEY,
    event_type    TEXT        NOT NULL,
    version       INTEGER     NOT NULL,
    aggregate_id  TEXT,
    subscriber_id TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    -- The outbox row carries a `refused_reason` (kept in step by the relay and a recheck).
    refused       BOOLEAN     NOT NULL DEFAULT FALSE
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
    WHERE o.dispatched_at IS NOT NULL OR o.txid IS NULL
       OR (o.txid, o.id) <= (SELECT txid, outbox_id FROM kurir_relay_cursor);

DROP INDEX kurir_outbox_created;
DROP INDEX kurir_outbox_aggregate;
DROP INDEX kurir_outbox_event_type;
DROP INDEX kurir_outbox_refused;
DROP INDEX kurir_outbox_subscriber_id;
