-- Fewer writes per delivery (issue 7, BENCHMARKS.md). Every delivery is inserted once and updated
-- twice (claimed, completed); no update can be HOT (its status is indexed), so each one writes an
-- entry into every index of the table, and each foreign key adds a locking lookup per row.
--
-- * The foreign keys of the hot tables go. Each one cost a `SELECT … FOR KEY SHARE` per row
--   (the endpoint's check locked the same endpoint row from every relay batch of every process),
--   and together they doubled the relay's insert. Their `ON DELETE CASCADE` is now done by
--   `Store::delete_endpoint`, in one transaction. Deliveries are only ever created by the relay from
--   an outbox row it holds locked and from an endpoint it just read, and nothing deletes outbox rows.
-- * `kurir_deliveries_event (event_id)` goes: deliveries of an event are found through the outbox's
--   unique `event_id` and `kurir_deliveries_event_endpoint_key (outbox_id, endpoint_id)`.
-- * `kurir_deliveries_status (status, created_at)` goes: the backlog gauge and the listings use
--   `kurir_deliveries_status_id (status, id DESC)` (ids grow with `created_at`).
ALTER TABLE kurir_deliveries
    DROP CONSTRAINT kurir_deliveries_outbox_id_fkey,
    DROP CONSTRAINT kurir_deliveries_endpoint_id_fkey;
ALTER TABLE kurir_attempts DROP CONSTRAINT kurir_attempts_delivery_id_fkey;
DROP INDEX kurir_deliveries_event;
DROP INDEX kurir_deliveries_status;
