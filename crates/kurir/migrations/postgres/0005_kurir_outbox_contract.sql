-- The SQL contract, enforced by the database: kurir_outbox refuses, at INSERT (and UPDATE), the
-- rows the admin API refuses, each rule a named CHECK constraint, so an application's transaction
-- fails loudly instead of its event being dropped or mangled later. The rules are the API's
-- (kurir_core::event::EventType and EventId, outbox::MAX_PAYLOAD_BYTES, the aggregate fields'
-- length) and the README states each. Text cannot hold a NUL in PostgreSQL at all, so that rule
-- needs no constraint here (SQLite's migration has one).
--
-- Rows written before this migration are not checked (NOT VALID): validating would fail the
-- migration on the first bad row, and fixing rows would change what the application wrote. The
-- undispatched ones that break a rule are recorded as refused instead, below, and marked
-- dispatched so the relay never fans them out; `refused_reason` names the rule, the admin API and
-- `kurir events show` show it, and `kurir_outbox_refused` counts them. Dispatched rows are history
-- and stay as they are (nothing updates a dispatched row, so NOT VALID never trips on one).

ALTER TABLE kurir_outbox ADD COLUMN refused_reason TEXT;

UPDATE kurir_outbox SET refused_reason = CASE
        WHEN json_typeof(payload) <> 'object'
            THEN 'kurir_outbox_payload_object: payload must be a JSON object'
        WHEN octet_length(payload::text) > 1048576
            THEN 'kurir_outbox_payload_size: payload must be at most 1048576 bytes'
        WHEN event_type !~ '^[a-z0-9_-]+([.][a-z0-9_-]+)*$' OR octet_length(event_type) > 255
            THEN 'kurir_outbox_event_type_format: event_type must be dot-separated segments of a-z, 0-9, _ and -, at most 255 bytes'
        WHEN octet_length(event_id) NOT BETWEEN 1 AND 255 OR event_id ~ '[^!-~]'
            THEN 'kurir_outbox_event_id_format: event_id must be 1 to 255 visible ASCII characters'
        WHEN octet_length(aggregate_type) NOT BETWEEN 1 AND 255
            OR octet_length(aggregate_id) NOT BETWEEN 1 AND 255
            THEN 'kurir_outbox_aggregate_format: aggregate_type and aggregate_id must be 1 to 255 bytes when set'
    END
WHERE dispatched_at IS NULL;
UPDATE kurir_outbox SET dispatched_at = now()
WHERE dispatched_at IS NULL AND refused_reason IS NOT NULL;

ALTER TABLE kurir_outbox
    ADD CONSTRAINT kurir_outbox_payload_object
        CHECK (json_typeof(payload) = 'object') NOT VALID,
    ADD CONSTRAINT kurir_outbox_payload_size
        CHECK (octet_length(payload::text) <= 1048576) NOT VALID,
    ADD CONSTRAINT kurir_outbox_event_type_format
        CHECK (event_type ~ '^[a-z0-9_-]+([.][a-z0-9_-]+)*$' AND octet_length(event_type) <= 255) NOT VALID,
    -- A bounded repetition (`^[!-~]{1,255}$`) made every insert five times slower than this.
    ADD CONSTRAINT kurir_outbox_event_id_format
        CHECK (octet_length(event_id) BETWEEN 1 AND 255 AND event_id !~ '[^!-~]') NOT VALID,
    ADD CONSTRAINT kurir_outbox_aggregate_format
        CHECK (octet_length(aggregate_type) BETWEEN 1 AND 255
           AND octet_length(aggregate_id) BETWEEN 1 AND 255) NOT VALID;

-- For the kurir_outbox_refused gauge: only refused rows are indexed.
CREATE INDEX kurir_outbox_refused ON kurir_outbox (id) WHERE refused_reason IS NOT NULL;
