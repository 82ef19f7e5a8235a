-- The subscriber portal (issue 31). A link is made by the sender's application for one of its
-- customers (`POST /v1/subscribers/{id}/portal-links`) and opened once: only the SHA-256 of its
-- token is stored. Opening it starts a session, a row every portal request reads, so a revoked
-- session, or a disabled or deleted subscriber, is signed out at its next request on every
-- process.
CREATE TABLE kurir_portal_links (
    id            TEXT        NOT NULL PRIMARY KEY,
    token_hash    TEXT        NOT NULL CONSTRAINT kurir_portal_links_token UNIQUE,
    subscriber_id TEXT        NOT NULL
                  CONSTRAINT kurir_portal_links_subscriber REFERENCES kurir_subscribers (id),
    read_only     BOOLEAN     NOT NULL,
    return_url    TEXT,
    created_by    TEXT        NOT NULL,
    created_via   TEXT        NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    used_at       TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ
);
-- A subscriber's links not yet used: what revoking its sessions ends too.
CREATE INDEX kurir_portal_links_subscriber ON kurir_portal_links (subscriber_id)
    WHERE used_at IS NULL AND revoked_at IS NULL;

CREATE TABLE kurir_portal_sessions (
    id            TEXT        NOT NULL PRIMARY KEY,
    subscriber_id TEXT        NOT NULL
                  CONSTRAINT kurir_portal_sessions_subscriber REFERENCES kurir_subscribers (id),
    link_id       TEXT        NOT NULL,
    read_only     BOOLEAN     NOT NULL,
    return_url    TEXT,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at    TIMESTAMPTZ NOT NULL,
    revoked_at    TIMESTAMPTZ
);
-- A subscriber's sessions still open: what revoking its sessions ends.
CREATE INDEX kurir_portal_sessions_subscriber ON kurir_portal_sessions (subscriber_id)
    WHERE revoked_at IS NULL;
