-- History that outlives its endpoint (issue 16): the same as PostgreSQL's 0010 (see there).
-- MySQL and MariaDB check every row when a CHECK constraint is added (there is no NOT VALID),
-- and copy the table to do it; the drop and the add are one statement, so the table is never
-- left without the check. (`DROP CONSTRAINT` needs MySQL 8.0.19 or MariaDB 10.2.)
ALTER TABLE kurir_endpoints ADD COLUMN deleted_at DATETIME(3);

ALTER TABLE kurir_deliveries
    DROP CONSTRAINT kurir_deliveries_status_check,
    ADD CONSTRAINT kurir_deliveries_status_check
        CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead_letter', 'cancelled'));
