//! The claim of `kurir_inbox` on PostgreSQL, which any number of processes may share: they
//! coordinate only through the unique key, `FOR UPDATE SKIP LOCKED` claims, leases and fenced
//! completions. Timestamps are `timestamptz`, bound from the caller's clock.

use sqlx::postgres::PgPool;

use kurir_sql::Ts;

use super::row::{Claim, ClaimedRow};
use super::Result;

const CLAIMED_COLUMNS: &str = "id, source, event_id, event_type, idempotency_key, payload, \
    headers::text AS headers, attempts, created_at";

/// Leases due rows to `owner` in one statement: the inner `FOR UPDATE SKIP LOCKED` lets concurrent
/// claimers take disjoint rows without waiting on each other; the row locks last only until the
/// statement commits, the lease (`lease_expires_at`) is what outlives it.
pub(super) async fn claim_due(pool: &PgPool, claim: &Claim<'_>) -> Result<Vec<ClaimedRow>> {
    let sql = format!(
        "UPDATE kurir_inbox AS inbox \
         SET status = 'processing', lease_owner = $1, lease_expires_at = $3, \
             attempts = inbox.attempts + 1, last_attempt_at = $2, updated_at = $2 \
         FROM (SELECT id FROM kurir_inbox \
               WHERE ($5::text[] IS NULL OR source = ANY($5)) \
                 AND ((status IN ('pending', 'failed') AND available_at <= $2) \
                      OR (status = 'processing' AND lease_expires_at <= $2)) \
               ORDER BY available_at, id \
               LIMIT $4 \
               FOR UPDATE SKIP LOCKED) AS due \
         WHERE inbox.id = due.id \
         RETURNING {}",
        qualified(CLAIMED_COLUMNS)
    );
    Ok(sqlx::query_as(&sql)
        .bind(claim.owner)
        .bind(Ts(claim.now))
        .bind(Ts(claim.lease_until))
        .bind(i64::from(claim.limit))
        .bind(claim.sources)
        .fetch_all(pool)
        .await?)
}

/// `inbox.`-qualifies a column list, for `RETURNING` after an `UPDATE … FROM`.
fn qualified(columns: &str) -> String {
    columns
        .split(", ")
        .map(|c| format!("inbox.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}
