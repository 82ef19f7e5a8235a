-- The audit of operators' actions on subscribers (issue 29): disable, enable and delete, from
-- the API, the CLI or the dashboard. One row per action: which subscriber, what was done, who
-- (the token's name) and from where (`via`, as in kurir_circuit_actions). Times are unix
-- milliseconds by the store's clock, as the circuit actions' own. Kept after the subscriber is
-- deleted: the tombstone's history says who deleted it.
CREATE TABLE kurir_subscriber_actions (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    subscriber_id VARCHAR(255) NOT NULL,
    action        VARCHAR(16)  NOT NULL,
    actor         VARCHAR(100) NOT NULL,
    via           VARCHAR(16)  NOT NULL,
    created_ms    BIGINT       NOT NULL,
    KEY kurir_subscriber_actions_subscriber (subscriber_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
