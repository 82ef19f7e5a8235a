//! Wake-up hints between kurir processes sharing one database (see [`crate::wake`]):
//! PostgreSQL's `NOTIFY`. SQLite serves one kurir process per file, so there is nobody to tell;
//! MySQL has no notifications, so processes sharing it find each other's work by polling.

use super::{Result, Store};

impl Store {
    /// Sends `payload` on each of `channels` to every session listening on them, in a
    /// transaction of its own. On SQLite and MySQL, nothing.
    ///
    /// Never call it inside a write transaction: PostgreSQL serialises the commits of
    /// notifying transactions, so a notification inside the application's or the admin API's
    /// transaction would make every such commit wait for the one before it.
    pub async fn notify(&self, channels: &[&str], payload: &str) -> Result<()> {
        match self {
            Store::Postgres(s) => s.notify(channels, payload).await,
            Store::Sqlite(_) | Store::Mysql(_) => Ok(()),
        }
    }
}
