//! `NOTIFY` on PostgreSQL (see [`crate::store::notify`]).

use super::PgStore;
use crate::store::Result;

impl PgStore {
    /// One statement, alone in its transaction, on a bookkeeping session. A notifying
    /// transaction holds PostgreSQL's database-wide notify lock from just before its commit to
    /// the end of it; this one writes nothing else and does not wait for the WAL flush
    /// (`synchronous_commit = off`), so it holds that lock only for a moment.
    pub(in crate::store) async fn notify(&self, channels: &[&str], payload: &str) -> Result<()> {
        sqlx::query("SELECT pg_notify(c, $2) FROM unnest($1::text[]) AS c")
            .bind(channels)
            .bind(payload)
            .execute(&self.bookkeeping)
            .await?;
        Ok(())
    }
}
