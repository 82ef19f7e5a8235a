-- The application's INSERT pays only for what refuses a bad row and what the relay reads (issue
-- 27, item 3; PostgreSQL's migration of the same number says why). The listings' indexes move
-- from kurir_outbox to kurir_event_list, written by the relay in the batch that marks an event
-- dispatched. Rows still waiting for the relay are read from the outbox through
-- `kurir_outbox_undispatched`. What stays on kurir_outbox: the primary key, the unique event_id,
-- `kurir_outbox_undispatched` (the relay's queue), the subscriber foreign key's index (InnoDB
-- requires one), the contract's CHECKs.
CREATE TABLE kurir_event_list (
    outbox_id     BIGINT       NOT NULL PRIMARY KEY,
    event_type    VARCHAR(256) NOT NULL,
    version       INT          NOT NULL,
    aggregate_id  VARCHAR(256),
    subscriber_id VARCHAR(255),
    created_at    DATETIME(3)  NOT NULL,
    refused       BOOLEAN      NOT NULL DEFAULT FALSE,
    INDEX kurir_event_list_event_type (event_type, outbox_id DESC),
    INDEX kurir_event_list_aggregate (aggregate_id, outbox_id DESC),
    INDEX kurir_event_list_subscriber (subscriber_id, outbox_id DESC),
    INDEX kurir_event_list_created (created_at, outbox_id),
    INDEX kurir_event_list_refused (refused, outbox_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Every row the relay has passed.
INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, subscriber_id,
        created_at, refused)
    SELECT id, event_type, version, aggregate_id, subscriber_id, created_at,
        refused_reason IS NOT NULL
    FROM kurir_outbox WHERE dispatched_at IS NOT NULL;

DROP INDEX kurir_outbox_created ON kurir_outbox;
DROP INDEX kurir_outbox_aggregate ON kurir_outbox;
DROP INDEX kurir_outbox_event_type ON kurir_outbox;
DROP INDEX kurir_outbox_refused ON kurir_outbox;
