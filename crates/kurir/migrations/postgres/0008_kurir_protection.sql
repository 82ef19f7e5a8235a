-- Endpoint protection (issue 15): the circuit breaker and the rate limit, shared by every kurir
-- process through these rows. Plain SQL on purpose, so each dialect's copy reads alike.

-- Per-endpoint overrides of the breaker's process-wide defaults (NULL: the default applies).
ALTER TABLE kurir_endpoints ADD COLUMN circuit_failure_threshold INTEGER
    CHECK (circuit_failure_threshold >= 1);
ALTER TABLE kurir_endpoints ADD COLUMN circuit_cooldown_ms BIGINT CHECK (circuit_cooldown_ms >= 1);

-- One row per endpoint whose breaker has counted a failure (no row: closed, nothing counted).
-- Every write is a compare-and-set on `version`, so processes that race take turns without
-- holding locks. Times are unix milliseconds: the state is kurir's own, compared and shifted by
-- kurir_core::breaker, and reads the same in every dialect. The window columns are a
-- sliding-window counter of the last 60 s (kurir_core::breaker::Window).
CREATE TABLE kurir_endpoint_circuits (
    endpoint_id          TEXT    PRIMARY KEY,
    state                TEXT    NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
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
);

-- One row per rate-limited endpoint that has sent something: its bucket (kurir_core::rate::Bucket),
-- written compare-and-set on `version` like the circuits. `rate_limit_per_second` is the
-- endpoint's own column (0001).
CREATE TABLE kurir_endpoint_rates (
    endpoint_id          TEXT    PRIMARY KEY,
    tat_us               BIGINT  NOT NULL,
    halvings             INTEGER NOT NULL,
    throttled_until_ms   BIGINT,
    version              BIGINT  NOT NULL
);
