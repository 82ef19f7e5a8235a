-- The event catalog (issue 30): what each (event_type, version) is, the JSON Schema its `data`
-- must pass, examples, and whether it is deprecated. Written only by kurir (the admin API and
-- `kurir event-types apply`); the relay and the API check events against it.
--
-- Schemas and examples are kept as JSON text (on every dialect alike; kurir writes them with
-- their keys sorted). `data_schema`, not `schema`: MySQL reserves that word.
CREATE TABLE kurir_event_types (
    event_type        TEXT        NOT NULL,
    version           INTEGER     NOT NULL CHECK (version >= 1),
    description       TEXT        NOT NULL DEFAULT '',
    data_schema       TEXT,
    examples          TEXT        NOT NULL DEFAULT '[]',
    deprecated        BOOLEAN     NOT NULL DEFAULT FALSE,
    successor_type    TEXT,
    successor_version INTEGER,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, version)
);

-- One number, raised by every catalog write in the writer's transaction: each process keeps the
-- compiled schemas in memory and reads the catalog again only when this number moved (the same
-- pattern as kurir_endpoint_changes, store::directory).
CREATE TABLE kurir_event_type_changes (
    seq BIGINT NOT NULL
);
INSERT INTO kurir_event_type_changes (seq) VALUES (0);
