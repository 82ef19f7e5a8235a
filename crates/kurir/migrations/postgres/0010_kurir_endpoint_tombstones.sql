-- History that outlives its endpoint (issue 16). Deleting an endpoint keeps its row as a
-- tombstone: `deleted_at` set, its id and url kept so its deliveries still say where they went,
-- its secrets wiped; retention removes it once none of its deliveries remain. Its deliveries
-- that were still to be made end `cancelled`, a new terminal status.
ALTER TABLE kurir_endpoints ADD COLUMN deleted_at TIMESTAMPTZ;

-- The status CHECK of 0001 (named by PostgreSQL after its column), widened. NOT VALID: every
-- row already passed the narrower check, so scanning the table under this statement's exclusive
-- lock would prove nothing; new and updated rows are checked all the same.
ALTER TABLE kurir_deliveries
    DROP CONSTRAINT kurir_deliveries_status_check,
    ADD CONSTRAINT kurir_deliveries_status_check
        CHECK (status IN ('pending', 'processing', 'sent', 'failed', 'dead_letter', 'cancelled'))
        NOT VALID;
