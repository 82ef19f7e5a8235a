-- Ordered delivery per aggregate (issue 15): the endpoint's choice, and the key that ties a
-- delivery to the other deliveries of its aggregate at the same endpoint. Round 1's `ordered`
-- column was never read; the two settings replace it.

ALTER TABLE kurir_endpoints DROP COLUMN ordered;
ALTER TABLE kurir_endpoints ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none'
    CONSTRAINT kurir_endpoints_ordering_check CHECK (ordering IN ('none', 'aggregate'));
ALTER TABLE kurir_endpoints ADD COLUMN ordering_on_dead_letter TEXT NOT NULL DEFAULT 'block'
    CONSTRAINT kurir_endpoints_ordering_on_dead_letter_check
    CHECK (ordering_on_dead_letter IN ('block', 'skip'));

-- Set at fan-out, only for an endpoint whose ordering is 'aggregate' and an event that names its
-- aggregate; NULL otherwise, so unordered deliveries write nothing to the index below. The claim
-- asks it whether an earlier delivery of the aggregate is unfinished: with the status before
-- `outbox_id`, that is a probe per unfinished status, never a walk over the aggregate's sent
-- history.
ALTER TABLE kurir_deliveries ADD COLUMN ordering_key TEXT;
CREATE INDEX kurir_deliveries_ordering
    ON kurir_deliveries (endpoint_id, ordering_key, status, outbox_id)
    WHERE ordering_key IS NOT NULL;
