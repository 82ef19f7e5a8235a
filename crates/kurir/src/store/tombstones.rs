//! Deleting an endpoint keeps its history (issue 16): the row stays as a tombstone, with
//! `deleted_at` set and its id and url kept so its deliveries still say where they went; its
//! secrets are wiped and its breaker and rate rows removed. Its deliveries that were still to be
//! made end `cancelled`, those in flight included: the request on the wire may still arrive,
//! and its outcome is recorded as an attempt, but the completion's fence (`status IN
//! ('processing', 'failed', 'dead_letter')`) leaves the delivery cancelled, as do the lease
//! sweep, the hand-back and the shutdown release, which only touch `processing` rows. Cancelling
//! them here, in the deletion's transaction, means no later step has to ask whether an endpoint
//! still exists, and the dispatcher's hot statements stay as they are.
//!
//! Every read of endpoints skips tombstones (listings, get, update, rotation, the relay's
//! fan-out, the dispatcher's endpoints, the secrets' re-sealing), so a deleted endpoint answers
//! 404 and never receives anything. Retention removes a tombstone once it has no delivery left
//! (see [`super::retention`]). The orphan rule (deliveries whose endpoint row is gone, deleted
//! by hand) is untouched: a tombstone is a row, so its deliveries are never orphans.

use super::rows::Ts;
use chrono::{DateTime, Utc};

use super::sql::{query_as_on, run_in, Sql};
use super::{Result, Store};
use crate::endpoint::EndpointId;

/// What a cancelled delivery's `last_error` says.
pub const CANCELLED_ERROR: &str = "cancelled: the endpoint was deleted";

/// The tombstone: binds `deleted_at`, the id. Only a live endpoint is buried, so deleting twice
/// answers "not found" the second time.
const BURY: Sql = Sql {
    postgres: "UPDATE kurir_endpoints SET deleted_at = $1, updated_at = $1, enabled = FALSE, \
        secret = '', previous_secrets = '[]' WHERE id = $2 AND deleted_at IS NULL",
    sqlite: "UPDATE kurir_endpoints SET deleted_at = ?1, updated_at = ?1, enabled = 0, \
        secret = '', previous_secrets = '[]' WHERE id = ?2 AND deleted_at IS NULL",
    mysql: "UPDATE kurir_endpoints SET deleted_at = $1, updated_at = $1, enabled = FALSE, \
        secret = '', previous_secrets = '[]' WHERE id = $2 AND deleted_at IS NULL",
};

/// Its undelivered deliveries end `cancelled`: binds the time, the id, the error.
const CANCEL: Sql = Sql {
    postgres: "UPDATE kurir_deliveries SET status = 'cancelled', last_error = $3, \
        lease_owner = NULL, lease_expires_at = NULL, updated_at = $1 \
        WHERE endpoint_id = $2 AND status IN ('pending', 'processing', 'failed')",
    sqlite: "UPDATE kurir_deliveries SET status = 'cancelled', last_error = ?3, \
        lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1 \
        WHERE endpoint_id = ?2 AND status IN ('pending', 'processing', 'failed')",
    mysql: "UPDATE kurir_deliveries SET status = 'cancelled', last_error = $3, \
        lease_owner = NULL, lease_expires_at = NULL, updated_at = $1 \
        WHERE endpoint_id = $2 AND status IN ('pending', 'processing', 'failed')",
};

const FORGET_CIRCUIT: Sql = Sql {
    postgres: "DELETE FROM kurir_endpoint_circuits WHERE endpoint_id = $1",
    sqlite: "DELETE FROM kurir_endpoint_circuits WHERE endpoint_id = ?1",
    mysql: "DELETE FROM kurir_endpoint_circuits WHERE endpoint_id = $1",
};

const FORGET_RATE: Sql = Sql {
    postgres: "DELETE FROM kurir_endpoint_rates WHERE endpoint_id = $1",
    sqlite: "DELETE FROM kurir_endpoint_rates WHERE endpoint_id = ?1",
    mysql: "DELETE FROM kurir_endpoint_rates WHERE endpoint_id = $1",
};

const DELETED_AT: Sql = Sql {
    postgres: "SELECT deleted_at FROM kurir_endpoints WHERE id = $1 AND deleted_at IS NOT NULL",
    sqlite: "SELECT deleted_at FROM kurir_endpoints WHERE id = ?1 AND deleted_at IS NOT NULL",
    mysql: "SELECT deleted_at FROM kurir_endpoints WHERE id = $1 AND deleted_at IS NOT NULL",
};

/// The deletion's statements on transaction `$tx`; whether the endpoint existed.
macro_rules! bury_in {
    ($tx:expr, $dialect:ident, $id:expr, $now:expr) => {{
        let id: &str = $id;
        let at = Ts($now);
        let buried = run_in!($tx, $dialect, BURY, query, execute, at, id)?.rows_affected() > 0;
        if buried {
            run_in!(
                $tx,
                $dialect,
                CANCEL,
                query,
                execute,
                at,
                id,
                CANCELLED_ERROR
            )?;
            run_in!($tx, $dialect, FORGET_CIRCUIT, query, execute, id)?;
            run_in!($tx, $dialect, FORGET_RATE, query, execute, id)?;
        }
        buried
    }};
}

impl Store {
    /// When endpoint `id` was deleted, if it was and its tombstone is still kept.
    pub async fn endpoint_deleted_at(&self, id: &EndpointId) -> Result<Option<DateTime<Utc>>> {
        let row: Option<(Ts,)> = query_as_on!(self, DELETED_AT, fetch_optional, id.as_str())?;
        Ok(row.map(|(at,)| at.0))
    }

    /// Deletes an endpoint, keeping its history: see the module's documentation. `false` if
    /// it did not exist (or was deleted already). One transaction: on PostgreSQL it first takes
    /// the fan-out lock exclusively, so relay batches in progress finish first and later ones
    /// see the tombstone; on MySQL it raises the endpoints' change number, which relay batches
    /// read in share mode (`store::directory`); SQLite holds the write lock.
    pub async fn delete_endpoint(&self, id: &EndpointId) -> Result<bool> {
        let (id, now) = (id.as_str(), self.clock().now_millis());
        let buried = match self {
            Store::Postgres(s) => {
                let mut tx = s.pool().begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(super::postgres::FAN_OUT_LOCK)
                    .execute(&mut *tx)
                    .await?;
                let buried = bury_in!(tx, postgres, id, now);
                tx.commit().await?;
                buried
            }
            Store::Sqlite(s) => {
                let mut tx = s.pool().begin_with("BEGIN IMMEDIATE").await?;
                let buried = bury_in!(tx, sqlite, id, now);
                tx.commit().await?;
                buried
            }
            Store::Mysql(s) => {
                let mut tx = s.pool().begin().await?;
                let buried = bury_in!(tx, mysql, id, now);
                if buried {
                    super::directory::stamp_mysql(&mut tx, &[id]).await?;
                }
                tx.commit().await?;
                buried
            }
        };
        if buried {
            self.refresh_directory().await;
        }
        Ok(buried)
    }
}
