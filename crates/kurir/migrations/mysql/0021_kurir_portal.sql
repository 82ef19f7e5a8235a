-- The subscriber portal (issue 31). A link is made by the sender's application for one of its
-- customers (`POST /v1/subscribers/{id}/portal-links`) and opened once: only the SHA-256 of its
-- token is stored. Opening it starts a session, a row every portal request reads, so a revoked
-- session, or a disabled or deleted subscriber, is signed out at its next request on every
-- process. The subscriber foreign keys give InnoDB the index that revoking a subscriber's
-- sessions and links walks.
CREATE TABLE kurir_portal_links (
    id            VARCHAR(64)   NOT NULL PRIMARY KEY,
    token_hash    CHAR(64)      NOT NULL,
    subscriber_id VARCHAR(255)  NOT NULL,
    read_only     BOOLEAN       NOT NULL,
    return_url    VARCHAR(2048),
    created_by    VARCHAR(255)  NOT NULL,
    created_via   VARCHAR(32)   NOT NULL,
    created_at    DATETIME(3)   NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    expires_at    DATETIME(3)   NOT NULL,
    used_at       DATETIME(3),
    revoked_at    DATETIME(3),
    CONSTRAINT kurir_portal_links_token UNIQUE (token_hash),
    CONSTRAINT kurir_portal_links_subscriber
        FOREIGN KEY (subscriber_id) REFERENCES kurir_subscribers (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE kurir_portal_sessions (
    id            VARCHAR(64)   NOT NULL PRIMARY KEY,
    subscriber_id VARCHAR(255)  NOT NULL,
    link_id       VARCHAR(64)   NOT NULL,
    read_only     BOOLEAN       NOT NULL,
    return_url    VARCHAR(2048),
    created_at    DATETIME(3)   NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    expires_at    DATETIME(3)   NOT NULL,
    revoked_at    DATETIME(3),
    CONSTRAINT kurir_portal_sessions_subscriber
        FOREIGN KEY (subscriber_id) REFERENCES kurir_subscribers (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
