//! The check every pool kurir builds makes of an idle connection before handing it out: one
//! still inside a transaction is closed, never reused. It owns no connection settings; each
//! dialect's `connect` builds its pools and applies [`reject_unfinished`].
//!
//! A transaction dropped without `COMMIT` or `ROLLBACK` (a failed statement, a failed `COMMIT`)
//! gets a `ROLLBACK` queued by sqlx. On SQLite that `ROLLBACK` can itself fail: after
//! `SQLITE_FULL` (a full disk) SQLite may already have rolled the whole transaction back, the
//! `ROLLBACK` then finds none, and sqlx keeps counting the connection as one transaction deep.
//! Every later `begin_with` on it failed with "attempted to call begin_with at non-zero
//! transaction depth", so after a full disk one connection in the pool failed every write
//! handed to it until a restart. Closing it instead gives the pool a fresh connection.
//! PostgreSQL and MySQL count the queued `ROLLBACK` as done at once, so there the check is a
//! net that should never catch anything.

use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database};

/// `options` with a `before_acquire` check that closes a connection still inside a
/// transaction. It runs after the pool's own ping of the idle connection, which has run the
/// queued `ROLLBACK`, so the depth it reads is final; it costs no round trip of its own.
pub(super) fn reject_unfinished<DB: Database>(options: PoolOptions<DB>) -> PoolOptions<DB> {
    options.before_acquire(|conn, _| {
        Box::pin(async move {
            let finished = !conn.is_in_transaction();
            if !finished {
                tracing::warn!(
                    "closing a pooled database connection left inside a transaction \
                     (a failed statement or COMMIT whose ROLLBACK failed too)"
                );
            }
            Ok(finished)
        })
    })
}
