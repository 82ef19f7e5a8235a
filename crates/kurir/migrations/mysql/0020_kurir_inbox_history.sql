-- The inbox gateway's history (issue 33): every forward attempt of an inbox event, and who
-- retried a failed one and from where. kurir_inbox keeps only the current round's attempt count
-- and last error, and a retry resets them; these rows keep what happened before. They name
-- their event by (source, event_id), kurir_inbox's unique key: kurir_inbox is kurir-receiver's
-- table, created after kurir's migrations, so no foreign key can point at it. Retention deletes
-- them with their event. Times are unix milliseconds by the store's clock.
CREATE TABLE kurir_inbox_attempts (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source      VARCHAR(255) NOT NULL,
    event_id    VARCHAR(255) NOT NULL,
    -- The attempt's number within its round (from 1; a retry starts a new round).
    attempt     INT          NOT NULL,
    started_ms  BIGINT       NOT NULL,
    duration_ms BIGINT       NOT NULL,
    -- The forward URL's HTTP status; NULL when there was no answer.
    status_code INT,
    -- What failed (as kurir_inbox.last_error reads); NULL when the forward succeeded.
    error       TEXT,
    KEY kurir_inbox_attempts_event (source, event_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE kurir_inbox_retries (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source     VARCHAR(255) NOT NULL,
    event_id   VARCHAR(255) NOT NULL,
    actor      VARCHAR(100) NOT NULL,
    via        VARCHAR(16)  NOT NULL,
    created_ms BIGINT       NOT NULL,
    KEY kurir_inbox_retries_event (source, event_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
