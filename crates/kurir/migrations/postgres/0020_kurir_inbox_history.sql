-- The inbox gateway's history (issue 33): every forward attempt of an inbox event, and who
-- retried a failed one and from where. kurir_inbox keeps only the current round's attempt count
-- and last error, and a retry resets them; these rows keep what happened before. They name
-- their event by (source, event_id), kurir_inbox's unique key: kurir_inbox is kurir-receiver's
-- table, created after kurir's migrations, so no foreign key can point at it. Retention deletes
-- them with their event. Times are unix milliseconds by the store's clock.
CREATE TABLE kurir_inbox_attempts (
    id          BIGSERIAL PRIMARY KEY,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    -- The attempt's number within its round (from 1; a retry starts a new round).
    attempt     INTEGER NOT NULL,
    started_ms  BIGINT  NOT NULL,
    duration_ms BIGINT  NOT NULL,
    -- The forward URL's HTTP status; NULL when there was no answer.
    status_code INTEGER,
    -- What failed (as kurir_inbox.last_error reads); NULL when the forward succeeded.
    error       TEXT
);
CREATE INDEX kurir_inbox_attempts_event ON kurir_inbox_attempts (source, event_id, id);

CREATE TABLE kurir_inbox_retries (
    id         BIGSERIAL PRIMARY KEY,
    source     TEXT   NOT NULL,
    event_id   TEXT   NOT NULL,
    actor      TEXT   NOT NULL,
    via        TEXT   NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE INDEX kurir_inbox_retries_event ON kurir_inbox_retries (source, event_id, id);
