-- Operators list one source's events newest first, optionally of one status (kurir's dashboard
-- and `GET /v1/inbox/sources/{name}/events`), paged by a keyset on id: these indexes serve both
-- without reading the rest of the table.
CREATE INDEX IF NOT EXISTS kurir_inbox_source_id ON kurir_inbox (source, id);
CREATE INDEX IF NOT EXISTS kurir_inbox_source_status_id ON kurir_inbox (source, status, id);
