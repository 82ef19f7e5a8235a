-- The audit of operators' actions on circuit breakers (issue 33): "probe now" and "close
-- circuit", from the API, the CLI or the dashboard. One row per action: which endpoint, what was
-- done, the circuit's state before, who (the token's name) and from where (`via`, as in
-- kurir_replays). Times are unix milliseconds by the store's clock, as the circuits' own.
CREATE TABLE kurir_circuit_actions (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    endpoint_id  VARCHAR(255) NOT NULL,
    action       VARCHAR(16)  NOT NULL,
    state_before VARCHAR(16)  NOT NULL,
    actor        VARCHAR(100) NOT NULL,
    via          VARCHAR(16)  NOT NULL,
    created_ms   BIGINT       NOT NULL,
    KEY kurir_circuit_actions_endpoint (endpoint_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
