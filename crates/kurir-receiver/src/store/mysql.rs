//! The claim of `kurir_inbox` on MySQL (≥ 8.0.16) and MariaDB (≥ 10.6), which any number of
//! processes may share: they coordinate only through the unique key, `FOR UPDATE SKIP LOCKED`
//! claims, leases and fenced completions. Timestamps are `DATETIME(3)` in UTC (sqlx's sessions use
//! the time zone `+00:00`), bound from the caller's clock as `DATETIME` values (`NaiveDateTime`:
//! sqlx sends a `DateTime<Utc>` as a `TIMESTAMP`, which ends in 2038 and turns "never", year 9999,
//! into NULL).
//!
//! Text columns are `utf8mb4_bin` (compared byte for byte), which the server reports as binary
//! and sqlx will not decode into a `String`: they are read through `CAST(… AS CHAR)`. MySQL has
//! no `RETURNING`, so a claim locks its rows first, then leases them by id, in one transaction.

use sqlx::mysql::MySqlPool;

use kurir_sql::Ts;

use super::row::{Claim, ClaimedRow};
use super::Result;

const CLAIMED_COLUMNS: &str = "i.id, CAST(i.source AS CHAR) AS source, \
    CAST(i.event_id AS CHAR) AS event_id, CAST(i.event_type AS CHAR) AS event_type, \
    CAST(i.idempotency_key AS CHAR) AS idempotency_key, i.payload, \
    CAST(i.headers AS CHAR) AS headers, i.attempts, i.created_at";

/// `i.id IN (?, …)`: the rows a claim leases, by primary key, so the lease's `UPDATE` locks
/// those rows and no others (joined with a JSON list instead, the optimizer may read the table
/// first and wait for rows another claimer holds).
fn ids_in(n: usize) -> String {
    format!("i.id IN ({})", vec!["?"; n].join(", "))
}

/// The rows a claim may take: of the sources the first two binds name (all when `NULL`), due
/// at the third, or leased until no later than the fourth.
const DUE: &str =
    "WHERE (? IS NULL OR source IN (SELECT s.name FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
        name VARCHAR(255) PATH '$')) AS s)) \
    AND ((status IN ('pending', 'failed') AND available_at <= ?) \
        OR (status = 'processing' AND lease_expires_at <= ?))";

/// Leases due rows to `owner` in one transaction: locks them with `FOR UPDATE SKIP LOCKED`, so
/// concurrent claimers take disjoint rows without waiting on each other, then leases them and
/// reads them back; the row locks last only until the commit, the lease (`lease_expires_at`) is
/// what outlives it.
pub(super) async fn claim_due(pool: &MySqlPool, claim: &Claim<'_>) -> Result<Vec<ClaimedRow>> {
    let sources = claim
        .sources
        .map(|s| serde_json::to_string(s).unwrap_or_default());
    let now = Ts(claim.now);
    // Look first, outside a transaction and without locks: a claim that finds nothing is then
    // one statement, not the `BEGIN`, locking read and `COMMIT` (MySQL has no notification to
    // wait for, so idle processes poll).
    let due: Option<i64> = sqlx::query_scalar(&format!("SELECT id FROM kurir_inbox {DUE} LIMIT 1"))
        .bind(sources.as_deref())
        .bind(sources.as_deref().unwrap_or("[]"))
        .bind(now)
        .bind(now)
        .fetch_optional(pool)
        .await?;
    if due.is_none() {
        return Ok(Vec::new());
    }
    let mut tx = pool.begin().await?;
    let ids: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM kurir_inbox {DUE} ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
    ))
    .bind(sources.as_deref())
    .bind(sources.as_deref().unwrap_or("[]"))
    .bind(now)
    .bind(now)
    .bind(i64::from(claim.limit))
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        // Explicitly: a dropped transaction is rolled back only when its connection is next
        // used, and until then keeps whatever the read locked.
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE kurir_inbox AS i \
         SET i.status = 'processing', i.lease_owner = ?, i.lease_expires_at = ?, \
             i.attempts = i.attempts + 1, i.last_attempt_at = ?, i.updated_at = ? WHERE {}",
        ids_in(ids.len())
    );
    let mut lease = sqlx::query(&sql)
        .bind(claim.owner)
        .bind(Ts(claim.lease_until))
        .bind(now)
        .bind(now);
    for id in &ids {
        lease = lease.bind(id);
    }
    lease.execute(&mut *tx).await?;
    let sql = format!(
        "SELECT {CLAIMED_COLUMNS} FROM kurir_inbox AS i WHERE {} ORDER BY i.available_at, i.id",
        ids_in(ids.len())
    );
    let mut read = sqlx::query_as(&sql);
    for id in &ids {
        read = read.bind(id);
    }
    let rows = read.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}
