-- The SQL contract, enforced by the database: kurir_outbox refuses, at INSERT (and UPDATE), the
-- rows the admin API refuses, each rule named in the error, so an application's transaction fails
-- loudly instead of its event being dropped or mangled later. The rules are the API's
-- (kurir_core::event::EventType and EventId, outbox::MAX_PAYLOAD_BYTES, the aggregate fields'
-- length, no NUL in any text; and migration 0001's CHECK on the version, under the name
-- PostgreSQL gives it) and the README states each.
--
-- SQLite cannot add a CHECK constraint to an existing table, so the rules are triggers that abort
-- with `RAISE(ABORT, '<rule name>: <what is wrong>')`. Triggers rather than rebuilding the table
-- with CHECKs: a rebuild copies every row under the write lock (the application's inserts wait for
-- all of it), and it would have to fail the migration on the first row written before the rules
-- existed, or change that row. Triggers check new rows only, as NOT VALID constraints do on
-- PostgreSQL; they run before the table's own constraints, and on UPDATE only of the columns they
-- check (the relay's update of dispatched_at never fires them). The price: a trigger adds more
-- to each INSERT than a CHECK would, which shows in bulk inserts of many rows per transaction and
-- vanishes next to the commit of an application's transaction.
--
-- The undispatched rows written before this migration that break a rule are recorded as refused
-- and marked dispatched, so the relay never fans them out; `refused_reason` names the rule, the
-- admin API and `kurir events show` show it, and `kurir_outbox_refused` counts them.

ALTER TABLE kurir_outbox ADD COLUMN refused_reason TEXT;

UPDATE kurir_outbox SET refused_reason = CASE
        WHEN instr(CAST(event_id AS BLOB), x'00') OR instr(CAST(event_type AS BLOB), x'00')
               OR instr(CAST(aggregate_type AS BLOB), x'00') OR instr(CAST(aggregate_id AS BLOB), x'00')
               OR instr(CAST(payload AS BLOB), x'00')
            THEN 'kurir_outbox_nul_free: event_id, event_type, aggregate_type, aggregate_id and payload must not contain NUL'
        WHEN CASE WHEN json_valid(payload) THEN json_type(payload) IS NOT 'object' ELSE 1 END
            THEN 'kurir_outbox_payload_object: payload must be a JSON object'
        WHEN length(CAST(payload AS BLOB)) > 1048576
            THEN 'kurir_outbox_payload_size: payload must be at most 1048576 bytes'
        WHEN event_type = '' OR event_type GLOB '*[^a-z0-9._-]*' OR event_type GLOB '.*'
               OR event_type GLOB '*.' OR event_type GLOB '*..*' OR length(event_type) > 255
            THEN 'kurir_outbox_event_type_format: event_type must be dot-separated segments of a-z, 0-9, _ and -, at most 255 bytes'
        WHEN length(event_id) NOT BETWEEN 1 AND 255 OR event_id GLOB '*[^!-~]*'
            THEN 'kurir_outbox_event_id_format: event_id must be 1 to 255 visible ASCII characters'
        WHEN length(CAST(aggregate_type AS BLOB)) NOT BETWEEN 1 AND 255
               OR length(CAST(aggregate_id AS BLOB)) NOT BETWEEN 1 AND 255
            THEN 'kurir_outbox_aggregate_format: aggregate_type and aggregate_id must be 1 to 255 bytes when set'
    END
WHERE dispatched_at IS NULL;
UPDATE kurir_outbox SET dispatched_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE dispatched_at IS NULL AND refused_reason IS NOT NULL;

CREATE TRIGGER kurir_outbox_contract_insert BEFORE INSERT ON kurir_outbox
BEGIN
    SELECT RAISE(ABORT, 'kurir_outbox_nul_free: event_id, event_type, aggregate_type, aggregate_id and payload must not contain NUL')
        WHERE instr(CAST(NEW.event_id AS BLOB), x'00') OR instr(CAST(NEW.event_type AS BLOB), x'00')
               OR instr(CAST(NEW.aggregate_type AS BLOB), x'00') OR instr(CAST(NEW.aggregate_id AS BLOB), x'00')
               OR instr(CAST(NEW.payload AS BLOB), x'00');
    SELECT RAISE(ABORT, 'kurir_outbox_payload_object: payload must be a JSON object')
        WHERE CASE WHEN json_valid(NEW.payload) THEN json_type(NEW.payload) IS NOT 'object' ELSE 1 END;
    SELECT RAISE(ABORT, 'kurir_outbox_payload_size: payload must be at most 1048576 bytes')
        WHERE length(CAST(NEW.payload AS BLOB)) > 1048576;
    SELECT RAISE(ABORT, 'kurir_outbox_event_type_format: event_type must be dot-separated segments of a-z, 0-9, _ and -, at most 255 bytes')
        WHERE NEW.event_type = '' OR NEW.event_type GLOB '*[^a-z0-9._-]*' OR NEW.event_type GLOB '.*'
               OR NEW.event_type GLOB '*.' OR NEW.event_type GLOB '*..*' OR length(NEW.event_type) > 255;
    SELECT RAISE(ABORT, 'kurir_outbox_event_id_format: event_id must be 1 to 255 visible ASCII characters')
        WHERE length(NEW.event_id) NOT BETWEEN 1 AND 255 OR NEW.event_id GLOB '*[^!-~]*';
    SELECT RAISE(ABORT, 'kurir_outbox_aggregate_format: aggregate_type and aggregate_id must be 1 to 255 bytes when set')
        WHERE length(CAST(NEW.aggregate_type AS BLOB)) NOT BETWEEN 1 AND 255
               OR length(CAST(NEW.aggregate_id AS BLOB)) NOT BETWEEN 1 AND 255;
    SELECT RAISE(ABORT, 'kurir_outbox_version_check: version must be 1 or more')
        WHERE NEW.version < 1;
END;

CREATE TRIGGER kurir_outbox_contract_update
BEFORE UPDATE OF event_id, event_type, version, aggregate_type, aggregate_id, payload ON kurir_outbox
BEGIN
    SELECT RAISE(ABORT, 'kurir_outbox_nul_free: event_id, event_type, aggregate_type, aggregate_id and payload must not contain NUL')
        WHERE instr(CAST(NEW.event_id AS BLOB), x'00') OR instr(CAST(NEW.event_type AS BLOB), x'00')
               OR instr(CAST(NEW.aggregate_type AS BLOB), x'00') OR instr(CAST(NEW.aggregate_id AS BLOB), x'00')
               OR instr(CAST(NEW.payload AS BLOB), x'00');
    SELECT RAISE(ABORT, 'kurir_outbox_payload_object: payload must be a JSON object')
        WHERE CASE WHEN json_valid(NEW.payload) THEN json_type(NEW.payload) IS NOT 'object' ELSE 1 END;
    SELECT RAISE(ABORT, 'kurir_outbox_payload_size: payload must be at most 1048576 bytes')
        WHERE length(CAST(NEW.payload AS BLOB)) > 1048576;
    SELECT RAISE(ABORT, 'kurir_outbox_event_type_format: event_type must be dot-separated segments of a-z, 0-9, _ and -, at most 255 bytes')
        WHERE NEW.event_type = '' OR NEW.event_type GLOB '*[^a-z0-9._-]*' OR NEW.event_type GLOB '.*'
               OR NEW.event_type GLOB '*.' OR NEW.event_type GLOB '*..*' OR length(NEW.event_type) > 255;
    SELECT RAISE(ABORT, 'kurir_outbox_event_id_format: event_id must be 1 to 255 visible ASCII characters')
        WHERE length(NEW.event_id) NOT BETWEEN 1 AND 255 OR NEW.event_id GLOB '*[^!-~]*';
    SELECT RAISE(ABORT, 'kurir_outbox_aggregate_format: aggregate_type and aggregate_id must be 1 to 255 bytes when set')
        WHERE length(CAST(NEW.aggregate_type AS BLOB)) NOT BETWEEN 1 AND 255
               OR length(CAST(NEW.aggregate_id AS BLOB)) NOT BETWEEN 1 AND 255;
    SELECT RAISE(ABORT, 'kurir_outbox_version_check: version must be 1 or more')
        WHERE NEW.version < 1;
END;

-- For the kurir_outbox_refused gauge: only refused rows are indexed.
CREATE INDEX kurir_outbox_refused ON kurir_outbox (id) WHERE refused_reason IS NOT NULL;
