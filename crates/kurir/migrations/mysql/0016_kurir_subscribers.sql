-- Subscribers (issue 29): the sender's customers, each with its own endpoints and events. The id
-- is the sender's own (its customer id, 1 to 255 visible ASCII characters), so an application can
-- write its customer row and the subscriber in one transaction. A deleted subscriber stays as a
-- tombstone (`deleted_at`): its id cannot be taken again while its history remains.
CREATE TABLE kurir_subscribers (
    id          VARCHAR(255) NOT NULL PRIMARY KEY,
    name        VARCHAR(255) NOT NULL,
    metadata    LONGTEXT     NOT NULL DEFAULT ('{}'),
    created_at  DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    updated_at  DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    disabled_at DATETIME(3),
    deleted_at  DATETIME(3),
    CONSTRAINT kurir_subscribers_id_format CHECK (id REGEXP '^[!-~]{1,255}$'),
    INDEX kurir_subscribers_name (name, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- An event addressed to a subscriber. The foreign key refuses, at the application's INSERT, a
-- subscriber that does not exist, and its error names the rule (`kurir_outbox_subscriber`).
-- With the checks off for the ALTER, InnoDB adds the key in place instead of copying the table:
-- every existing row has no subscriber, so there is nothing to check.
SET foreign_key_checks = 0;
ALTER TABLE kurir_outbox ADD COLUMN subscriber_id VARCHAR(255),
    ADD CONSTRAINT kurir_outbox_subscriber
        FOREIGN KEY (subscriber_id) REFERENCES kurir_subscribers (id);

-- The subscriber an endpoint belongs to (NULL: the operator's own). Set at creation, never moved.
ALTER TABLE kurir_endpoints ADD COLUMN subscriber_id VARCHAR(255),
    ADD CONSTRAINT kurir_endpoints_subscriber
        FOREIGN KEY (subscriber_id) REFERENCES kurir_subscribers (id);

-- A token scoped to one subscriber: it sees and changes only that subscriber's endpoints,
-- events and deliveries (`access::Actor::may`). NULL: an operator token.
ALTER TABLE kurir_tokens ADD COLUMN subscriber_id VARCHAR(255),
    ADD CONSTRAINT kurir_tokens_subscriber
        FOREIGN KEY (subscriber_id) REFERENCES kurir_subscribers (id);
SET foreign_key_checks = 1;

-- The subscriber a replay was scoped to (its token's), so a subscriber's audit lists its own.
ALTER TABLE kurir_replays ADD COLUMN subscriber_id VARCHAR(255);
