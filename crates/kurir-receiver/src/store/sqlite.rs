//! The claim of `kurir_inbox` on SQLite: one process per database file. Timestamps are TEXT in the
//! fixed-width form `YYYY-MM-DDTHH:MM:SS.sssZ`, so comparing them as strings compares the instants.
//!
//! SQLite has one writer at a time. A single `INSERT`/`UPDATE` statement takes the write lock when it
//! starts; the claim still runs in an explicit `BEGIN IMMEDIATE` transaction so that its read of the
//! due rows and its update happen under the write lock by construction, not by an engine detail.

use sqlx::sqlite::SqlitePool;

use kurir_sql::Ts;

use super::row::{Claim, ClaimedRow};
use super::Result;

const CLAIMED_COLUMNS: &str =
    "id, source, event_id, event_type, idempotency_key, payload, headers, \
    attempts, created_at";

/// Leases due rows to `owner` in one `UPDATE … RETURNING` inside `BEGIN IMMEDIATE`: the write lock
/// is held from the first read, so no other claimer can pick the same rows.
pub(super) async fn claim_due(pool: &SqlitePool, claim: &Claim<'_>) -> Result<Vec<ClaimedRow>> {
    // SQLite has no array binds: the names travel as one JSON array.
    let sources = claim
        .sources
        .map(|names| serde_json::Value::from(names).to_string());
    let sql = format!(
        "UPDATE kurir_inbox \
         SET status = 'processing', lease_owner = ?1, lease_expires_at = ?3, \
             attempts = attempts + 1, last_attempt_at = ?2, updated_at = ?2 \
         WHERE id IN (SELECT id FROM kurir_inbox \
                      WHERE (?5 IS NULL OR source IN (SELECT value FROM json_each(?5))) \
                        AND ((status IN ('pending', 'failed') AND available_at <= ?2) \
                             OR (status = 'processing' AND lease_expires_at <= ?2)) \
                      ORDER BY available_at, id \
                      LIMIT ?4) \
         RETURNING {CLAIMED_COLUMNS}"
    );
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let rows = sqlx::query_as(&sql)
        .bind(claim.owner)
        .bind(Ts(claim.now))
        .bind(Ts(claim.lease_until))
        .bind(i64::from(claim.limit))
        .bind(sources)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}
