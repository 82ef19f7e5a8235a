-- The outbox INSERT the application pays for (issue 27, item 3): the same rules, refused at the
-- INSERT by the same names, at a fraction of the CPU.
--
-- PostgreSQL reads a table's CHECK constraints from their stored text and plans them again at
-- the start of every statement that writes the table, so each of the application's INSERTs
-- parsed and planned the seven CHECKs of migrations 0001 and 0005 before writing one row: most
-- of what an outbox INSERT cost beyond a plain one. A domain's constraints are read and planned
-- once per connection (the type cache), so each rule moves to a domain over the column's type,
-- under the constraint name it had. The refusal still names the rule:
--   value for domain kurir_outbox_event_type violates check constraint "kurir_outbox_event_type_format"
-- and still comes at the INSERT (or an UPDATE that writes the column), inside the application's
-- transaction. `event_type <> ''` (0001) needs no constraint of its own: the format rule refuses
-- the empty string too.
--
-- No table rewrite and no scan: the columns change to domains still without constraints (the
-- same bytes, the indexes kept), then the constraints are added NOT VALID, as 0005's were, so
-- rows written before the contract stay as they are (they were recorded as refused then).
CREATE DOMAIN kurir_outbox_event_type AS TEXT;
CREATE DOMAIN kurir_outbox_event_id AS TEXT;
CREATE DOMAIN kurir_outbox_aggregate AS TEXT;
CREATE DOMAIN kurir_outbox_payload AS JSON;
CREATE DOMAIN kurir_outbox_version AS INTEGER;

ALTER TABLE kurir_outbox
    DROP CONSTRAINT kurir_outbox_payload_object,
    DROP CONSTRAINT kurir_outbox_payload_size,
    DROP CONSTRAINT kurir_outbox_event_type_format,
    DROP CONSTRAINT kurir_outbox_event_id_format,
    DROP CONSTRAINT kurir_outbox_aggregate_format,
    DROP CONSTRAINT kurir_outbox_event_type_check,
    DROP CONSTRAINT kurir_outbox_version_check,
    ALTER COLUMN event_type TYPE kurir_outbox_event_type,
    ALTER COLUMN event_id TYPE kurir_outbox_event_id,
    ALTER COLUMN aggregate_type TYPE kurir_outbox_aggregate,
    ALTER COLUMN aggregate_id TYPE kurir_outbox_aggregate,
    ALTER COLUMN payload TYPE kurir_outbox_payload,
    ALTER COLUMN version TYPE kurir_outbox_version;

ALTER DOMAIN kurir_outbox_event_type ADD CONSTRAINT kurir_outbox_event_type_format
    CHECK (VALUE ~ '^[a-z0-9_-]+([.][a-z0-9_-]+)*$' AND octet_length(VALUE) <= 255) NOT VALID;
ALTER DOMAIN kurir_outbox_event_id ADD CONSTRAINT kurir_outbox_event_id_format
    CHECK (octet_length(VALUE) BETWEEN 1 AND 255 AND VALUE !~ '[^!-~]') NOT VALID;
ALTER DOMAIN kurir_outbox_aggregate ADD CONSTRAINT kurir_outbox_aggregate_format
    CHECK (octet_length(VALUE) BETWEEN 1 AND 255) NOT VALID;
ALTER DOMAIN kurir_outbox_payload ADD CONSTRAINT kurir_outbox_payload_object
    CHECK (json_typeof(VALUE) = 'object') NOT VALID;
ALTER DOMAIN kurir_outbox_payload ADD CONSTRAINT kurir_outbox_payload_size
    CHECK (octet_length(VALUE::text) <= 1048576) NOT VALID;
ALTER DOMAIN kurir_outbox_version ADD CONSTRAINT kurir_outbox_version_check
    CHECK (VALUE >= 1) NOT VALID;

-- The UUIDv7 default built as text: `kurir_uuid_v7()` went through numeric arithmetic (EXTRACT
-- returns numeric), bytea, hex and the uuid type and back to text for every row. Same layout:
-- 48 bits of Unix milliseconds, version 7, and the random bits and variant of gen_random_uuid().
ALTER TABLE kurir_outbox ALTER COLUMN event_id SET DEFAULT
    overlay(lpad(to_hex(floor(date_part('epoch', clock_timestamp()) * 1000)::bigint), 12, '0')
            || '-7' || substr(gen_random_uuid()::text, 16)
            PLACING '-' FROM 9 FOR 0);
