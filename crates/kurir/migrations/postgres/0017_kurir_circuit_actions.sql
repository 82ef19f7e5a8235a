-- The audit of operators' actions on circuit breakers (issue 33): "probe now" and "close
-- circuit", from the API, the CLI or the dashboard. One row per action: which endpoint, what was
-- done, the circuit's state before, who (the token's name) and from where (`via`, as in
-- kurir_replays). Times are unix milliseconds by the store's clock, as the circuits' own.
CREATE TABLE kurir_circuit_actions (
    id           BIGSERIAL PRIMARY KEY,
    endpoint_id  TEXT   NOT NULL,
    action       TEXT   NOT NULL,
    state_before TEXT   NOT NULL,
    actor        TEXT   NOT NULL,
    via          TEXT   NOT NULL,
    created_ms   BIGINT NOT NULL
);
CREATE INDEX kurir_circuit_actions_endpoint ON kurir_circuit_actions (endpoint_id, id);
