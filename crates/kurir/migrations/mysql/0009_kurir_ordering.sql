-- Ordered delivery per aggregate (issue 15): the same columns as PostgreSQL's 0009 (see there).
-- MySQL has no partial index, and an index key holds at most 3072 bytes (4 per utf8mb4
-- character), so the index takes a prefix of the endpoint id (still exact, since every lookup
-- compares the whole values, and an endpoint id, a UUID, is far shorter than its prefix); the
-- key (at most 514 characters, see below) is whole, so the status and `outbox_id` after it
-- narrow the probe as on PostgreSQL.

ALTER TABLE kurir_endpoints DROP COLUMN ordered;
ALTER TABLE kurir_endpoints ADD COLUMN ordering VARCHAR(16) NOT NULL DEFAULT 'none',
    ADD CONSTRAINT kurir_endpoints_ordering_check CHECK (ordering IN ('none', 'aggregate'));
ALTER TABLE kurir_endpoints ADD COLUMN ordering_on_dead_letter VARCHAR(16) NOT NULL DEFAULT 'block',
    ADD CONSTRAINT kurir_endpoints_ordering_on_dead_letter_check
    CHECK (ordering_on_dead_letter IN ('block', 'skip'));

-- Two aggregate fields of at most 255 bytes each (0005), with room for a separator or length.
ALTER TABLE kurir_deliveries ADD COLUMN ordering_key VARCHAR(520);
CREATE INDEX kurir_deliveries_ordering
    ON kurir_deliveries (endpoint_id(100), ordering_key, status, outbox_id);
