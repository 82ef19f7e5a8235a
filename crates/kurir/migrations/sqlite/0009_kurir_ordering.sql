-- Ordered delivery per aggregate (issue 15): the same columns as PostgreSQL's 0009 (see there).

ALTER TABLE kurir_endpoints DROP COLUMN ordered;
ALTER TABLE kurir_endpoints ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none'
    CONSTRAINT kurir_endpoints_ordering_check CHECK (ordering IN ('none', 'aggregate'));
ALTER TABLE kurir_endpoints ADD COLUMN ordering_on_dead_letter TEXT NOT NULL DEFAULT 'block'
    CONSTRAINT kurir_endpoints_ordering_on_dead_letter_check
    CHECK (ordering_on_dead_letter IN ('block', 'skip'));

ALTER TABLE kurir_deliveries ADD COLUMN ordering_key TEXT;
CREATE INDEX kurir_deliveries_ordering
    ON kurir_deliveries (endpoint_id, ordering_key, status, outbox_id)
    WHERE ordering_key IS NOT NULL;
