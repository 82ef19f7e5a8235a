-- Retention of the subscriber portal's rows (issue 31, `store::retention`): a link, used or not,
-- goes a day after its expiry; a session a day after its expiry or its revocation. The pruner
-- finds them, oldest first, through these indexes rather than by reading the tables.
CREATE INDEX kurir_portal_links_expires ON kurir_portal_links (expires_at);
CREATE INDEX kurir_portal_sessions_expires ON kurir_portal_sessions (expires_at);
CREATE INDEX kurir_portal_sessions_revoked ON kurir_portal_sessions (revoked_at);
