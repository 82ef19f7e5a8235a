-- History that outlives its endpoint (issue 16): a deleted endpoint stays as a tombstone
-- (`deleted_at`, its id and url kept for display, its secrets wiped) until retention has taken
-- its last delivery, and its undelivered deliveries end `cancelled`. The same as PostgreSQL's
-- 0010 (see there), but SQLite cannot alter a CHECK constraint: kurir_deliveries is rebuilt,
-- following https://www.sqlite.org/lang_altertable.html ("Making Other Kinds Of Table Schema
-- Changes"), with every column (0009's ordering_key included), constraint, index, id and the
-- AUTOINCREMENT counter (so no id of a deleted delivery is handed out again). It has no
-- triggers or views.
--
-- sqlx runs each SQLite migration inside a transaction, where foreign keys cannot be turned off,
-- and kurir's connections have them on. So dropping the old table deletes every attempt (they
-- reference it ON DELETE CASCADE): they are copied aside first and put back after, with their
-- ids. The checks are deferred to the commit, so rows an application broke by hand with foreign
-- keys off (a delivery whose event is gone) are carried over as they were: the copy adds the
-- violation the drop of the original takes away, and the commit finds none added.

PRAGMA defer_foreign_keys = ON;

ALTER TABLE kurir_endpoints ADD COLUMN deleted_at TEXT;

CREATE TEMP TABLE kurir_attempts_0010 AS SELECT * FROM kurir_attempts;

CREATE TABLE kurir_deliveries_0010 (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id        INTEGER NOT NULL REFERENCES kurir_outbox (id) ON DELETE CASCADE,
    event_id         TEXT    NOT NULL,
    endpoint_id      TEXT    NOT NULL REFERENCES kurir_endpoints (id) ON DELETE CASCADE,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead_letter',
                                       'cancelled')),
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
    ordering_key     TEXT,
    UNIQUE (outbox_id, endpoint_id)
);
INSERT INTO kurir_deliveries_0010 (id, outbox_id, event_id, endpoint_id, status, attempt_count,
        trigger, available_at, lease_owner, lease_expires_at, last_status_code, last_error,
        sent_at, created_at, updated_at, ordering_key)
    SELECT id, outbox_id, event_id, endpoint_id, status, attempt_count, trigger, available_at,
        lease_owner, lease_expires_at, last_status_code, last_error, sent_at, created_at,
        updated_at, ordering_key
    FROM kurir_deliveries;
-- The old table's counter goes with its rows (it may be past the highest id left).
DELETE FROM sqlite_sequence WHERE name = 'kurir_deliveries_0010';
UPDATE sqlite_sequence SET name = 'kurir_deliveries_0010' WHERE name = 'kurir_deliveries';
DROP TABLE kurir_deliveries;
ALTER TABLE kurir_deliveries_0010 RENAME TO kurir_deliveries;

-- Back, with their ids (the ones the drop took; an attempt whose delivery was already gone was
-- not taken, and stays).
INSERT INTO kurir_attempts (id, delivery_id, attempt, trigger, started_at, duration_ms,
        status_code, error, response_body, worker)
    SELECT id, delivery_id, attempt, trigger, started_at, duration_ms, status_code, error,
        response_body, worker
    FROM kurir_attempts_0010 AS b
    WHERE NOT EXISTS (SELECT 1 FROM kurir_attempts AS a WHERE a.id = b.id);
DROP TABLE kurir_attempts_0010;

CREATE INDEX kurir_deliveries_due ON kurir_deliveries (endpoint_id, available_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX kurir_deliveries_leased ON kurir_deliveries (lease_expires_at)
    WHERE status = 'processing';
CREATE INDEX kurir_deliveries_event ON kurir_deliveries (event_id);
CREATE INDEX kurir_deliveries_status ON kurir_deliveries (status, created_at);
CREATE INDEX kurir_deliveries_status_id ON kurir_deliveries (status, id DESC);
CREATE INDEX kurir_deliveries_endpoint_id ON kurir_deliveries (endpoint_id, id DESC);
CREATE INDEX kurir_deliveries_ordering ON kurir_deliveries (endpoint_id, ordering_key, status, outbox_id)
    WHERE ordering_key IS NOT NULL;
