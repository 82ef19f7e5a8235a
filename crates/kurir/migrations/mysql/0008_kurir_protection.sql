-- Endpoint protection (issue 15): the circuit breaker and the rate limit, shared by every kurir
-- process through these rows; the same tables as the other dialects' 0008 (see PostgreSQL's for
-- what each column holds). MySQL refuses a TEXT primary key, so the ids are VARCHAR as in 0001.

ALTER TABLE kurir_endpoints ADD COLUMN circuit_failure_threshold INTEGER
    CHECK (circuit_failure_threshold >= 1);
ALTER TABLE kurir_endpoints ADD COLUMN circuit_cooldown_ms BIGINT CHECK (circuit_cooldown_ms >= 1);

CREATE TABLE kurir_endpoint_circuits (
    endpoint_id          VARCHAR(255) NOT NULL PRIMARY KEY,
    state                VARCHAR(16) NOT NULL
                         CHECK (state IN ('closed', 'open', 'half_open')),
    since_ms             BIGINT  NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    reopens              INTEGER NOT NULL,
    next_probe_at_ms     BIGINT,
    probe_until_ms       BIGINT,
    failing_since_ms     BIGINT,
    window_started_at_ms BIGINT  NOT NULL,
    window_attempts      INTEGER NOT NULL,
    window_failures      INTEGER NOT NULL,
    previous_attempts    INTEGER NOT NULL,
    previous_failures    INTEGER NOT NULL,
    version              BIGINT  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE kurir_endpoint_rates (
    endpoint_id          VARCHAR(255) NOT NULL PRIMARY KEY,
    tat_us               BIGINT  NOT NULL,
    halvings             INTEGER NOT NULL,
    throttled_until_ms   BIGINT,
    version              BIGINT  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
