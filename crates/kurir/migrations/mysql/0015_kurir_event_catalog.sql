-- The event catalog (issue 30; the PostgreSQL migration of the same number says more).
-- VARCHAR(255) keys: the event type's own limit, and within InnoDB's key length in utf8mb4.
CREATE TABLE kurir_event_types (
    event_type        VARCHAR(255) NOT NULL,
    version           INT          NOT NULL,
    description       TEXT         NOT NULL,
    data_schema       LONGTEXT,
    examples          LONGTEXT     NOT NULL,
    deprecated        BOOLEAN      NOT NULL DEFAULT FALSE,
    successor_type    VARCHAR(255),
    successor_version INT,
    created_at        DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    updated_at        DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    PRIMARY KEY (event_type, version),
    CONSTRAINT kurir_event_types_version_check CHECK (version >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE kurir_event_type_changes (
    seq BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT INTO kurir_event_type_changes (seq) VALUES (0);
