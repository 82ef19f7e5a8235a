-- Endpoint changes in commit order (issue 27: an installed endpoint must not slow the others).
-- Each kurir process keeps the endpoints in memory and reads from the database only the rows
-- changed since its last read: `kurir_endpoint_changes` holds one number, raised by every
-- insert and update of an endpoint in the writer's own transaction, and stamped on the row as
-- `change_seq`. The writer holds that one row's lock until it commits, so the numbers commit in
-- order: a reader that sees number N sees every row stamped N or lower, and reads only
-- `change_seq > its last N`, through the index below. A trigger, so every writer is covered,
-- kurir's own statements and an operator's hand edit alike. A row deleted by hand is noticed at
-- the next full read (see store::directory); kurir itself deletes only tombstones.
CREATE TABLE kurir_endpoint_changes (
    seq BIGINT NOT NULL
);
INSERT INTO kurir_endpoint_changes (seq) VALUES (0);

ALTER TABLE kurir_endpoints ADD COLUMN change_seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX kurir_endpoints_change_seq ON kurir_endpoints (change_seq);

CREATE FUNCTION kurir_endpoint_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE kurir_endpoint_changes SET seq = seq + 1 RETURNING seq INTO NEW.change_seq;
    RETURN NEW;
END
$$;

CREATE TRIGGER kurir_endpoint_changed BEFORE INSERT OR UPDATE ON kurir_endpoints
    FOR EACH ROW EXECUTE FUNCTION kurir_endpoint_changed();
