-- The audit of operators' actions on subscribers (issue 29): disable, enable and delete, from
-- the API, the CLI or the dashboard. One row per action: which subscriber, what was done, who
-- (the token's name) and from where (`via`, as in kurir_circuit_actions). Times are unix
-- milliseconds by the store's clock, as the circuit actions' own. Kept after the subscriber is
-- deleted: the tombstone's history says who deleted it.
CREATE TABLE kurir_subscriber_actions (
    id            BIGSERIAL PRIMARY KEY,
    subscriber_id TEXT   NOT NULL,
    action        TEXT   NOT NULL,
    actor         TEXT   NOT NULL,
    via           TEXT   NOT NULL,
    created_ms    BIGINT NOT NULL
);
CREATE INDEX kurir_subscriber_actions_subscriber ON kurir_subscriber_actions (subscriber_id, id);
