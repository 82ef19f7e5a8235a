-- The claim resumes where the last one stopped (issue 19, store/postgres/cursors.rs). Rows share
-- `available_at` (a relay batch stamps all its deliveries with one `now()`), so the claim orders
-- and resumes by `(available_at, id)`, and the due index carries the id to start a scan there
-- instead of walking the dead entries of rows claimed before. Numbered 0012, leaving 0011 to the
-- outbox cursor's migration.
DROP INDEX kurir_deliveries_due;
CREATE INDEX kurir_deliveries_due ON kurir_deliveries (endpoint_id, available_at, id)
    WHERE status IN ('pending', 'failed');
