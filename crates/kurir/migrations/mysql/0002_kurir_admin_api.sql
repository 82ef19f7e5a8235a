-- What the admin API adds: idempotency keys of POST /v1/events, and indexes for its listings
-- (newest first, keyset-paginated on id).

-- One row per Idempotency-Key header seen on POST /v1/events, written in the same transaction as
-- the event it created. `request_hash` is a SHA-256 of the request's content, so a key reused
-- for a different request is refused instead of silently answered with the wrong event.
CREATE TABLE kurir_idempotency_keys (
    `key`        VARCHAR(255) NOT NULL PRIMARY KEY,
    event_id     VARCHAR(256) NOT NULL,
    request_hash VARCHAR(64)  NOT NULL,
    created_at   DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE INDEX kurir_outbox_event_type ON kurir_outbox (event_type, id DESC);
CREATE INDEX kurir_deliveries_status_id ON kurir_deliveries (status, id DESC);
CREATE INDEX kurir_deliveries_endpoint_id ON kurir_deliveries (endpoint_id, id DESC);
