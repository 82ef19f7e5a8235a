-- Named operator tokens (issue 33): each has a name, recorded as the actor of what its holder
-- does, and a role (`admin`, `operator`, `viewer`). Only the SHA-256 of the token is kept: the
-- token is 32 random bytes, so a fast hash is as strong as a slow one, and the lookup by hash
-- is one index probe per request. A revoked token keeps its row (and its name stays taken), so
-- the audit's names stay unambiguous. Who created and who revoked a token, and from where
-- (`via`: `api`, `cli`, `dashboard`, later `portal`), is kept on its row.
CREATE TABLE kurir_tokens (
    id          TEXT        NOT NULL PRIMARY KEY,
    name        TEXT        NOT NULL UNIQUE,
    role        TEXT        NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    secret_hash TEXT        NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ,
    revoked_at  TIMESTAMPTZ,
    created_by  TEXT        NOT NULL,
    created_via TEXT        NOT NULL,
    revoked_by  TEXT,
    revoked_via TEXT
);

-- Where an audited action came from: `api`, `cli` or `dashboard` (later `portal`: no check
-- constraint, so a new surface needs no migration). NULL on rows written before.
ALTER TABLE kurir_replays ADD COLUMN via TEXT;
