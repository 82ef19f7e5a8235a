-- Retention deletes completed inbox events past KURIR_INBOX_RETENTION (kurir's
-- store/retention.rs: `status = 'completed' AND updated_at < cutoff`, in small batches): this
-- index finds them without reading the rest of the table.
CREATE INDEX IF NOT EXISTS kurir_inbox_status_updated ON kurir_inbox (status, updated_at);
