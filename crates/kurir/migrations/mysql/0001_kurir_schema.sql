-- kurir schema, MySQL (≥ 8.0.16) and MariaDB (≥ 10.6). Every table carries the kurir_ prefix so it
-- can live in the application's own database: that is what makes the outbox transactional.
--
-- * Timestamps are DATETIME(3): UTC, millisecond precision. Defaults use UTC_TIMESTAMP(3), not
--   NOW(3), so an application's plain INSERT gets UTC whatever its session's time zone; kurir's
--   own sessions run with time_zone '+00:00'.
-- * Text that is compared or unique (ids, types, names, statuses) is utf8mb4_bin, compared byte for
--   byte as on PostgreSQL and SQLite; a case-insensitive default collation would make 'A' and 'a'
--   one event id.
-- * JSON is LONGTEXT with a JSON_VALID check, never MySQL's JSON type: that one re-serialises
--   what it stores, and a payload is delivered byte for byte as written.
-- * `trigger` and `key` are reserved words here: kurir's SQL quotes them.
-- * The hot tables (deliveries, attempts) carry no foreign keys, as on PostgreSQL (its migration
--   0004): `Store::delete_endpoint` is the cascade.
-- * MySQL commits each DDL statement on its own, so a migration that fails halfway stays half
--   applied; each one here is a few independent statements.

-- The outbox: written by the application inside its own transaction (kurir::outbox::enqueue or
-- one plain INSERT), read by the relay. The event_id default is a UUIDv7 (RFC 9562: 48-bit unix
-- ms, version 7, variant 10): its last group starts with the time_low of the server's UUID(), which
-- differs on every call, so two events of one millisecond on one server never share an id.
-- VARCHAR(256) rather than 255: a value one character too long in a non-strict session is cut to
-- 256 characters, which the contract's checks (migration 0005) refuse, never to a valid 255.
-- That the payload is JSON at all is one of those checks too (kurir_outbox_payload_object).
CREATE TABLE kurir_outbox (
    id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id       VARCHAR(256) NOT NULL DEFAULT (LOWER(CONCAT(
        SUBSTR(LPAD(HEX(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)), 12, '0'), 1, 8), '-',
        SUBSTR(LPAD(HEX(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)), 12, '0'), 9, 4), '-7',
        LPAD(HEX(FLOOR(RAND() * 4096)), 3, '0'), '-',
        HEX(8 + FLOOR(RAND() * 4)), LPAD(HEX(FLOOR(RAND() * 4096)), 3, '0'), '-',
        SUBSTR(UUID(), 1, 8), LPAD(HEX(FLOOR(RAND() * 65536)), 4, '0')))),
    event_type     VARCHAR(256) NOT NULL,
    version        INT          NOT NULL DEFAULT 1,
    aggregate_type VARCHAR(256),
    aggregate_id   VARCHAR(256),
    occurred_at    DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    payload        LONGTEXT     NOT NULL,
    created_at     DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    dispatched_at  DATETIME(3),
    CONSTRAINT kurir_outbox_event_id_key UNIQUE (event_id),
    CONSTRAINT kurir_outbox_event_type_check CHECK (event_type <> ''),
    CONSTRAINT kurir_outbox_version_check CHECK (version >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
-- The relay's work queue: InnoDB has no partial index, so the undispatched rows are the NULL
-- entries at the front of this one, in id order.
CREATE INDEX kurir_outbox_undispatched ON kurir_outbox (dispatched_at, id);
CREATE INDEX kurir_outbox_created ON kurir_outbox (created_at DESC, id DESC);
CREATE INDEX kurir_outbox_aggregate ON kurir_outbox (aggregate_type, aggregate_id);

CREATE TABLE kurir_endpoints (
    id                     VARCHAR(255) NOT NULL PRIMARY KEY,
    url                    TEXT         NOT NULL,
    description            TEXT         NOT NULL DEFAULT (''),
    -- JSON array of filters: exact names, '*', or prefix wildcards like 'order.*'. Empty = all.
    event_types            LONGTEXT     NOT NULL DEFAULT ('[]'),
    secret                 TEXT         NOT NULL,
    -- JSON array of {"secret": "...", "expires_at": "RFC 3339"}: rotated-out secrets that still sign.
    previous_secrets       LONGTEXT     NOT NULL DEFAULT ('[]'),
    enabled                BOOLEAN      NOT NULL DEFAULT TRUE,
    disabled_reason        TEXT,
    connect_timeout_ms     INT,
    request_timeout_ms     INT,
    retry_initial_delay_ms BIGINT,
    retry_max_delay_ms     BIGINT,
    retry_max_attempts     INT,
    max_in_flight          INT          NOT NULL DEFAULT 16,
    rate_limit_per_second  INT,
    ordered                BOOLEAN      NOT NULL DEFAULT FALSE,
    created_at             DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    updated_at             DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    CONSTRAINT kurir_endpoints_event_types_json CHECK (JSON_VALID(event_types)),
    CONSTRAINT kurir_endpoints_previous_secrets_json CHECK (JSON_VALID(previous_secrets)),
    CONSTRAINT kurir_endpoints_max_in_flight_check CHECK (max_in_flight >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE kurir_deliveries (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    outbox_id        BIGINT       NOT NULL,
    event_id         VARCHAR(256) NOT NULL,
    endpoint_id      VARCHAR(255) NOT NULL,
    status           VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempt_count    INT          NOT NULL DEFAULT 0,
    -- 'scheduled' normally, 'replay' after a manual replay; copied onto the next attempt.
    `trigger`        VARCHAR(16)  NOT NULL DEFAULT 'scheduled',
    available_at     DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    lease_owner      VARCHAR(255),
    lease_expires_at DATETIME(3),
    last_status_code INT,
    last_error       TEXT,
    sent_at          DATETIME(3),
    created_at       DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    updated_at       DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    -- What the dispatcher and the lease sweep look rows up by, as columns an index can hold
    -- (InnoDB has no partial index): NULL outside that state, so a range over them reads only
    -- the rows in it.
    due_at           DATETIME(3)  AS (CASE WHEN status IN ('pending', 'failed') THEN available_at END) VIRTUAL,
    leased_until     DATETIME(3)  AS (CASE WHEN status = 'processing' THEN lease_expires_at END) VIRTUAL,
    CONSTRAINT kurir_deliveries_event_endpoint_key UNIQUE (outbox_id, endpoint_id),
    CONSTRAINT kurir_deliveries_status_check
        CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead_letter')),
    CONSTRAINT kurir_deliveries_trigger_check CHECK (`trigger` IN ('scheduled', 'replay'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
-- The dispatcher's hot path: due rows per endpoint, oldest first.
CREATE INDEX kurir_deliveries_due ON kurir_deliveries (endpoint_id, due_at);
-- The lease sweep: only rows in flight.
CREATE INDEX kurir_deliveries_leased ON kurir_deliveries (leased_until);

CREATE TABLE kurir_attempts (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    delivery_id   BIGINT       NOT NULL,
    attempt       INT          NOT NULL,
    `trigger`     VARCHAR(16)  NOT NULL DEFAULT 'scheduled',
    started_at    DATETIME(3)  NOT NULL,
    duration_ms   BIGINT       NOT NULL,
    status_code   INT,
    error         TEXT,
    -- At most the first 4 KiB of the response body.
    response_body TEXT,
    worker        VARCHAR(255),
    CONSTRAINT kurir_attempts_trigger_check CHECK (`trigger` IN ('scheduled', 'replay'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX kurir_attempts_delivery ON kurir_attempts (delivery_id, attempt);

CREATE TABLE kurir_replays (
    id         BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    actor      TEXT        NOT NULL,
    reason     TEXT        NOT NULL,
    filter     LONGTEXT    NOT NULL,
    count      BIGINT      NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    CONSTRAINT kurir_replays_filter_json CHECK (JSON_VALID(filter))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- kurir_inbox (the receiving side) is created by kurir-receiver's own migrations
-- (crates/kurir-receiver/migrations), which `kurir migrate` applies too.
