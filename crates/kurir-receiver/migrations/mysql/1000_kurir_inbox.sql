-- kurir-receiver's inbox, MySQL (≥ 8.0.16) and MariaDB (≥ 10.6): one row per (source, event_id).
-- This is the only definition of kurir_inbox; `kurir migrate` applies it as well. Timestamps are
-- DATETIME(3) in UTC; ids and names compare byte for byte (utf8mb4_bin); the payload is the raw
-- bytes. The indexes are declared with the table: MySQL has no CREATE INDEX IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS kurir_inbox (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source           VARCHAR(255) NOT NULL,
    event_id         VARCHAR(255) NOT NULL,
    event_type       VARCHAR(255),
    idempotency_key  VARCHAR(255),
    signature        TEXT,
    status           VARCHAR(16)  NOT NULL DEFAULT 'pending',
    payload          LONGBLOB     NOT NULL,
    headers          LONGTEXT     NOT NULL DEFAULT ('{}'),
    attempts         INT          NOT NULL DEFAULT 0,
    available_at     DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    lease_owner      VARCHAR(255),
    lease_expires_at DATETIME(3),
    last_attempt_at  DATETIME(3),
    last_error       TEXT,
    created_at       DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    updated_at       DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    CONSTRAINT kurir_inbox_source_event_key UNIQUE (source, event_id),
    CONSTRAINT kurir_inbox_status_check
        CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    CONSTRAINT kurir_inbox_headers_json CHECK (JSON_VALID(headers)),
    INDEX kurir_inbox_idempotency (source, idempotency_key),
    -- No partial indexes: the status leads, so the due rows are contiguous.
    INDEX kurir_inbox_due (status, available_at),
    INDEX kurir_inbox_source_due (source, status, available_at),
    INDEX kurir_inbox_leased (status, lease_expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
