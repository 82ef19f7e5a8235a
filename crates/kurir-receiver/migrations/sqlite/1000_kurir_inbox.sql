-- kurir-receiver's inbox, SQLite: one row per (source, event_id). This is the only definition of
-- kurir_inbox; `kurir migrate` applies it as well.

CREATE TABLE IF NOT EXISTS kurir_inbox (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    source           TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    event_type       TEXT,
    idempotency_key  TEXT,
    signature        TEXT,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    payload          BLOB    NOT NULL,
    headers          TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
    attempts         INTEGER NOT NULL DEFAULT 0,
    available_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    lease_owner      TEXT,
    lease_expires_at TEXT,
    last_attempt_at  TEXT,
    last_error       TEXT,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (source, event_id)
);
CREATE INDEX IF NOT EXISTS kurir_inbox_idempotency ON kurir_inbox (source, idempotency_key);
CREATE INDEX IF NOT EXISTS kurir_inbox_due ON kurir_inbox (available_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX IF NOT EXISTS kurir_inbox_source_due ON kurir_inbox (source, available_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX IF NOT EXISTS kurir_inbox_leased ON kurir_inbox (lease_expires_at)
    WHERE status = 'processing';
