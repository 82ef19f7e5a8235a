-- Named operator tokens (issue 33): each has a name, recorded as the actor of what its holder
-- does, and a role (`admin`, `operator`, `viewer`). Only the SHA-256 of the token is kept: the
-- token is 32 random bytes, so a fast hash is as strong as a slow one, and the lookup by hash
-- is one index probe per request. A revoked token keeps its row (and its name stays taken), so
-- the audit's names stay unambiguous. Who created and who revoked a token, and from where
-- (`via`: `api`, `cli`, `dashboard`, later `portal`), is kept on its row.
CREATE TABLE kurir_tokens (
    id          VARCHAR(64)  NOT NULL PRIMARY KEY,
    name        VARCHAR(100) NOT NULL UNIQUE,
    role        VARCHAR(16)  NOT NULL,
    secret_hash CHAR(64)     NOT NULL UNIQUE,
    created_at  DATETIME(3)  NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
    expires_at  DATETIME(3),
    revoked_at  DATETIME(3),
    created_by  VARCHAR(100) NOT NULL,
    created_via VARCHAR(16)  NOT NULL,
    revoked_by  VARCHAR(100),
    revoked_via VARCHAR(16),
    CONSTRAINT kurir_tokens_role CHECK (role IN ('admin', 'operator', 'viewer'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Where an audited action came from: `api`, `cli` or `dashboard` (later `portal`: no check
-- constraint, so a new surface needs no migration). NULL on rows written before.
ALTER TABLE kurir_replays ADD COLUMN via VARCHAR(16);
