-- The event catalog (issue 30; the PostgreSQL migration of the same number says more).
CREATE TABLE kurir_event_types (
    event_type        TEXT    NOT NULL,
    version           INTEGER NOT NULL CHECK (version >= 1),
    description       TEXT    NOT NULL DEFAULT '',
    data_schema       TEXT,
    examples          TEXT    NOT NULL DEFAULT '[]',
    deprecated        BOOLEAN NOT NULL DEFAULT FALSE,
    successor_type    TEXT,
    successor_version INTEGER,
    created_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (event_type, version)
);

CREATE TABLE kurir_event_type_changes (
    seq INTEGER NOT NULL
);
INSERT INTO kurir_event_type_changes (seq) VALUES (0);
