-- The SQL contract, enforced by the database: kurir_outbox refuses, at INSERT (and UPDATE), the
-- rows the admin API refuses, each rule a named CHECK constraint, so an application's transaction
-- fails loudly instead of its event being dropped or mangled later. The rules are the API's
-- (kurir_core::event::EventType and EventId, outbox::MAX_PAYLOAD_BYTES, the aggregate fields'
-- length, no NUL in any text: MySQL text can hold one) and the README states each, under the
-- names PostgreSQL and SQLite give them.
--
-- MariaDB enforces CHECK constraints since 10.2.1 and MySQL since 8.0.16 (before that MySQL
-- parsed and ignored them: kurir requires 8.0.16 or later). Neither can add a constraint without
-- checking the rows already there, which PostgreSQL's NOT VALID does; this dialect never had rows
-- written before the rules (0001 to 0005 are applied together), so `refused_reason` stays NULL
-- here and exists for the store's shared reads.
--
-- Each rule is a total expression (CASE, not AND) where a part of it may raise an error on bad
-- input: JSON_TYPE fails on invalid JSON in MySQL instead of answering NULL. REGEXP matches byte
-- for byte under the table's binary collation, so 'Order.Paid' does not match '[a-z]'.

ALTER TABLE kurir_outbox
    ADD COLUMN refused_reason TEXT,
    ADD CONSTRAINT kurir_outbox_nul_free
        CHECK (INSTR(event_id, CHAR(0)) = 0 AND INSTR(event_type, CHAR(0)) = 0
           AND INSTR(COALESCE(aggregate_type, ''), CHAR(0)) = 0
           AND INSTR(COALESCE(aggregate_id, ''), CHAR(0)) = 0
           AND INSTR(payload, CHAR(0)) = 0),
    ADD CONSTRAINT kurir_outbox_payload_object
        CHECK (CASE WHEN JSON_VALID(payload) THEN JSON_TYPE(payload) = 'OBJECT' ELSE FALSE END),
    ADD CONSTRAINT kurir_outbox_payload_size
        CHECK (OCTET_LENGTH(payload) <= 1048576),
    ADD CONSTRAINT kurir_outbox_event_type_format
        CHECK (event_type REGEXP '^[a-z0-9_-]+([.][a-z0-9_-]+)*$' AND OCTET_LENGTH(event_type) <= 255),
    ADD CONSTRAINT kurir_outbox_event_id_format
        CHECK (OCTET_LENGTH(event_id) BETWEEN 1 AND 255 AND event_id NOT REGEXP '[^!-~]'),
    ADD CONSTRAINT kurir_outbox_aggregate_format
        CHECK (OCTET_LENGTH(COALESCE(aggregate_type, 'x')) BETWEEN 1 AND 255
           AND OCTET_LENGTH(COALESCE(aggregate_id, 'x')) BETWEEN 1 AND 255);

-- For the kurir_outbox_refused gauge (InnoDB has no partial index: a one-character prefix keeps
-- the entries small).
CREATE INDEX kurir_outbox_refused ON kurir_outbox (refused_reason(1));
