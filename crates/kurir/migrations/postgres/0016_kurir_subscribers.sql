-- Subscribers (issue 29): the sender's customers, each with its own endpoints and events. The id
-- is the sender's own (its customer id, 1 to 255 visible ASCII characters), so an application can
-- write its customer row and the subscriber in one transaction. A deleted subscriber stays as a
-- tombstone (`deleted_at`): its id cannot be taken again while its history remains.
CREATE TABLE kurir_subscribers (
    id          TEXT        NOT NULL PRIMARY KEY
                CONSTRAINT kurir_subscribers_id_format CHECK (id ~ '^[!-~]{1,255}$'),
    name        TEXT        NOT NULL
                CONSTRAINT kurir_subscribers_name_format CHECK (length(name) <= 255),
    metadata    TEXT        NOT NULL DEFAULT '{}',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    disabled_at TIMESTAMPTZ,
    deleted_at  TIMESTAMPTZ
);
CREATE INDEX kurir_subscribers_name ON kurir_subscribers (name, id);

-- An event addressed to a subscriber. The foreign key refuses, at the application's INSERT, a
-- subscriber that does not exist, and its error names the rule (`kurir_outbox_subscriber`).
-- NOT VALID: every existing row has no subscriber, so a scan under this statement's lock would
-- prove nothing; new rows are checked all the same.
ALTER TABLE kurir_outbox ADD COLUMN subscriber_id TEXT;
ALTER TABLE kurir_outbox ADD CONSTRAINT kurir_outbox_subscriber
    FOREIGN KEY (subscriber_id) REFERENCES kurir_subscribers (id) NOT VALID;
CREATE INDEX kurir_outbox_subscriber_id ON kurir_outbox (subscriber_id, id DESC)
    WHERE subscriber_id IS NOT NULL;

-- The subscriber an endpoint belongs to (NULL: the operator's own). Set at creation, never moved.
ALTER TABLE kurir_endpoints ADD COLUMN subscriber_id TEXT
    CONSTRAINT kurir_endpoints_subscriber REFERENCES kurir_subscribers (id);
CREATE INDEX kurir_endpoints_subscriber_id ON kurir_endpoints (subscriber_id)
    WHERE subscriber_id IS NOT NULL;

-- A token scoped to one subscriber: it sees and changes only that subscriber's endpoints,
-- events and deliveries (`access::Actor::may`). NULL: an operator token.
ALTER TABLE kurir_tokens ADD COLUMN subscriber_id TEXT
    CONSTRAINT kurir_tokens_subscriber REFERENCES kurir_subscribers (id);

-- The subscriber a replay was scoped to (its token's), so a subscriber's audit lists its own.
ALTER TABLE kurir_replays ADD COLUMN subscriber_id TEXT;
