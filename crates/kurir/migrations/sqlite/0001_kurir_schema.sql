-- kurir schema, SQLite. Timestamps are TEXT in one fixed-width UTC format,
-- 'YYYY-MM-DDTHH:MM:SS.sssZ', so they compare correctly as strings.

-- The outbox: written by the application inside its own transaction (kurir::outbox::enqueue or
-- one plain INSERT), read by the relay. The event_id default is a UUIDv7 (48-bit unix ms, version 7,
-- RFC 4122 variant, random rest).
CREATE TABLE kurir_outbox (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id       TEXT    NOT NULL UNIQUE DEFAULT (
        lower(
            substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)), 1, 8) || '-' ||
            substr(printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)), 9, 4) || '-7' ||
            substr(hex(randomblob(2)), 2, 3) || '-' ||
            substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2, 3) || '-' ||
            hex(randomblob(6))
        )
    ),
    event_type     TEXT    NOT NULL CHECK (event_type <> ''),
    version        INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    aggregate_type TEXT,
    aggregate_id   TEXT,
    occurred_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    payload        TEXT    NOT NULL CHECK (json_valid(payload)),
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    dispatched_at  TEXT
);
CREATE INDEX kurir_outbox_undispatched ON kurir_outbox (id) WHERE dispatched_at IS NULL;
CREATE INDEX kurir_outbox_created ON kurir_outbox (created_at DESC, id DESC);
CREATE INDEX kurir_outbox_aggregate ON kurir_outbox (aggregate_type, aggregate_id);

CREATE TABLE kurir_endpoints (
    id                     TEXT    PRIMARY KEY,
    url                    TEXT    NOT NULL,
    description            TEXT    NOT NULL DEFAULT '',
    event_types            TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(event_types)),
    secret                 TEXT    NOT NULL,
    previous_secrets       TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(previous_secrets)),
    enabled                INTEGER NOT NULL DEFAULT 1,
    disabled_reason        TEXT,
    connect_timeout_ms     INTEGER,
    request_timeout_ms     INTEGER,
    retry_initial_delay_ms INTEGER,
    retry_max_delay_ms     INTEGER,
    retry_max_attempts     INTEGER,
    max_in_flight          INTEGER NOT NULL DEFAULT 16 CHECK (max_in_flight >= 1),
    rate_limit_per_second  INTEGER,
    ordered                INTEGER NOT NULL DEFAULT 0,
    created_at             TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at             TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE kurir_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id        INTEGER NOT NULL REFERENCES kurir_outbox (id) ON DELETE CASCADE,
    event_id         TEXT    NOT NULL,
    endpoint_id      TEXT    NOT NULL REFERENCES kurir_endpoints (id) ON DELETE CASCADE,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead_letter')),
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    trigger          TEXT    NOT NULL DEFAULT 'scheduled' CHECK (trigger IN ('scheduled', 'replay')),
    available_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    lease_owner      TEXT,
    lease_expires_at TEXT,
    last_status_code INTEGER,
    last_error       TEXT,
    sent_at          TEXT,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (outbox_id, endpoint_id)
);
CREATE INDEX kurir_deliveries_due ON kurir_deliveries (endpoint_id, available_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX kurir_deliveries_leased ON kurir_deliveries (lease_expires_at)
    WHERE status = 'processing';
CREATE INDEX kurir_deliveries_event ON kurir_deliveries (event_id);
CREATE INDEX kurir_deliveries_status ON kurir_deliveries (status, created_at);

CREATE TABLE kurir_attempts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id   INTEGER NOT NULL REFERENCES kurir_deliveries (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL,
    trigger       TEXT    NOT NULL DEFAULT 'scheduled' CHECK (trigger IN ('scheduled', 'replay')),
    started_at    TEXT    NOT NULL,
    duration_ms   INTEGER NOT NULL,
    status_code   INTEGER,
    error         TEXT,
    response_body TEXT,
    worker        TEXT
);
CREATE INDEX kurir_attempts_delivery ON kurir_attempts (delivery_id, attempt);

CREATE TABLE kurir_replays (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    actor      TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    filter     TEXT    NOT NULL CHECK (json_valid(filter)),
    count      INTEGER NOT NULL,
    created_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- kurir_inbox (the receiving side) is created by kurir-receiver's own migrations
-- (crates/kurir-receiver/migrations), which `kurir migrate` applies too.
