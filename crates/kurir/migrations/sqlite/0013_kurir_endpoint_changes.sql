-- Endpoint changes in commit order (issue 27; the PostgreSQL migration of the same number says
-- why). SQLite has one writer at a time, so the number only has to rise with every write; the
-- triggers stamp the row after its insert or update. The update trigger's WHEN keeps the
-- stamping update from stamping itself again.
CREATE TABLE kurir_endpoint_changes (
    seq INTEGER NOT NULL
);
INSERT INTO kurir_endpoint_changes (seq) VALUES (0);

ALTER TABLE kurir_endpoints ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX kurir_endpoints_change_seq ON kurir_endpoints (change_seq);

CREATE TRIGGER kurir_endpoint_inserted AFTER INSERT ON kurir_endpoints
BEGIN
    UPDATE kurir_endpoint_changes SET seq = seq + 1;
    UPDATE kurir_endpoints SET change_seq = (SELECT seq FROM kurir_endpoint_changes)
        WHERE id = NEW.id;
END;

CREATE TRIGGER kurir_endpoint_updated AFTER UPDATE ON kurir_endpoints
WHEN NEW.change_seq IS OLD.change_seq
BEGIN
    UPDATE kurir_endpoint_changes SET seq = seq + 1;
    UPDATE kurir_endpoints SET change_seq = (SELECT seq FROM kurir_endpoint_changes)
        WHERE id = NEW.id;
END;
