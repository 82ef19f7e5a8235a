-- Operators list one source's events newest first, optionally of one status (kurir's dashboard
-- and `GET /v1/inbox/sources/{name}/events`), paged by a keyset on id: these indexes serve both
-- without reading the rest of the table. (The one-column-short `kurir_inbox_source_due` serves
-- the status-filtered listing's prefix; this one orders by id.)
CREATE INDEX kurir_inbox_source_id ON kurir_inbox (source, id);
CREATE INDEX kurir_inbox_source_status_id ON kurir_inbox (source, status, id);
