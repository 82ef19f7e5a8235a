-- Subscribers (issue 29): the sender's customers, each with its own endpoints and events. The id
-- is the sender's own (its customer id, 1 to 255 visible ASCII characters), so an application can
-- write its customer row and the subscriber in one transaction. A deleted subscriber stays as a
-- tombstone (`deleted_at`): its id cannot be taken again while its history remains.
CREATE TABLE kurir_subscribers (
    id          TEXT NOT NULL PRIMARY KEY
                CONSTRAINT kurir_subscribers_id_format
                CHECK (length(id) BETWEEN 1 AND 255 AND id NOT GLOB '*[^!-~]*'),
    name        TEXT NOT NULL
                CONSTRAINT kurir_subscribers_name_format CHECK (length(name) <= 255),
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    disabled_at TEXT,
    deleted_at  TEXT
);
CREATE INDEX kurir_subscribers_name ON kurir_subscribers (name, id);

-- An event addressed to a subscriber. kurir's connections check foreign keys, an application's
-- may not (SQLite's default is off), so a trigger refuses an unknown subscriber at the INSERT
-- whatever the connection, naming the rule as migration 0005's triggers do.
ALTER TABLE kurir_outbox ADD COLUMN subscriber_id TEXT REFERENCES kurir_subscribers (id);
CREATE INDEX kurir_outbox_subscriber_id ON kurir_outbox (subscriber_id, id DESC)
    WHERE subscriber_id IS NOT NULL;
CREATE TRIGGER kurir_outbox_subscriber_insert BEFORE INSERT ON kurir_outbox
WHEN NEW.subscriber_id IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'kurir_outbox_subscriber: subscriber_id must name a row of kurir_subscribers')
        WHERE NOT EXISTS (SELECT 1 FROM kurir_subscribers WHERE id = NEW.subscriber_id);
END;
CREATE TRIGGER kurir_outbox_subscriber_update BEFORE UPDATE OF subscriber_id ON kurir_outbox
WHEN NEW.subscriber_id IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'kurir_outbox_subscriber: subscriber_id must name a row of kurir_subscribers')
        WHERE NOT EXISTS (SELECT 1 FROM kurir_subscribers WHERE id = NEW.subscriber_id);
END;

-- The subscriber an endpoint belongs to (NULL: the operator's own). Set at creation, never moved.
ALTER TABLE kurir_endpoints ADD COLUMN subscriber_id TEXT REFERENCES kurir_subscribers (id);
CREATE INDEX kurir_endpoints_subscriber_id ON kurir_endpoints (subscriber_id)
    WHERE subscriber_id IS NOT NULL;

-- A token scoped to one subscriber: it sees and changes only that subscriber's endpoints,
-- events and deliveries (`access::Actor::may`). NULL: an operator token.
ALTER TABLE kurir_tokens ADD COLUMN subscriber_id TEXT REFERENCES kurir_subscribers (id);

-- The subscriber a replay was scoped to (its token's), so a subscriber's audit lists its own.
ALTER TABLE kurir_replays ADD COLUMN subscriber_id TEXT;
