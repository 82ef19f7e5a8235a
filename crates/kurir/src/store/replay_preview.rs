//! The dry run of a replay: how many deliveries [`Store::replay`] would move back to `pending`
//! for a filter, without moving any. The dashboard shows this count before an operator confirms
//! a bulk replay; `GET /v1/replays/preview` answers it to API clients.
//!
//! One read per dialect with the same conditions as the replay's update (deliveries of a
//! deleted endpoint are never replayed); no locks, so a delivery
//! completing meanwhile can make the replay's own count differ (the audit row keeps that one).

use super::{sqlite_ts, ReplayFilter, Result, Store};

const COUNT_PG: &str = "\
    SELECT count(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
    WHERE d.status IN ('sent', 'dead_letter') \
      AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
          WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
      AND ($1::text IS NULL OR o.event_id = $1) AND ($2::text IS NULL OR d.status = $2) \
      AND ($3::text IS NULL OR d.endpoint_id = $3) AND ($4::text IS NULL OR o.event_type = $4) \
      AND ($5::timestamptz IS NULL OR d.created_at >= $5) \
      AND ($6::timestamptz IS NULL OR d.created_at < $6)";

const COUNT_SQLITE: &str = "\
    SELECT count(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
    WHERE d.status IN ('sent', 'dead_letter') \
      AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
          WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
      AND (?1 IS NULL OR d.event_id = ?1) AND (?2 IS NULL OR d.status = ?2) \
      AND (?3 IS NULL OR d.endpoint_id = ?3) AND (?4 IS NULL OR o.event_type = ?4) \
      AND (?5 IS NULL OR d.created_at >= ?5) AND (?6 IS NULL OR d.created_at < ?6)";

/// MySQL binds each `?` once, so each optional filter's value is bound twice.
const COUNT_MYSQL: &str = "\
    SELECT COUNT(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
    WHERE d.status IN ('sent', 'dead_letter') \
      AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
          WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
      AND (? IS NULL OR d.event_id = ?) AND (? IS NULL OR d.status = ?) \
      AND (? IS NULL OR d.endpoint_id = ?) AND (? IS NULL OR o.event_type = ?) \
      AND (? IS NULL OR d.created_at >= ?) AND (? IS NULL OR d.created_at < ?)";

impl Store {
    /// How many deliveries a replay with `filter` would move back to `pending` now.
    pub async fn count_replayable(&self, f: &ReplayFilter) -> Result<i64> {
        let status = f.status.map(|s| s.as_str());
        Ok(match self {
            Store::Postgres(s) => {
                sqlx::query_scalar(COUNT_PG)
                    .bind(f.event_id.as_deref())
                    .bind(status)
                    .bind(f.endpoint_id.as_deref())
                    .bind(f.event_type.as_deref())
                    .bind(f.since)
                    .bind(f.until)
                    .fetch_one(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                sqlx::query_scalar(COUNT_SQLITE)
                    .bind(f.event_id.as_deref())
                    .bind(status)
                    .bind(f.endpoint_id.as_deref())
                    .bind(f.event_type.as_deref())
                    .bind(f.since.map(sqlite_ts))
                    .bind(f.until.map(sqlite_ts))
                    .fetch_one(s.pool())
                    .await?
            }
            Store::Mysql(s) => {
                sqlx::query_scalar(COUNT_MYSQL)
                    .bind(f.event_id.as_deref())
                    .bind(f.event_id.as_deref())
                    .bind(status)
                    .bind(status)
                    .bind(f.endpoint_id.as_deref())
                    .bind(f.endpoint_id.as_deref())
                    .bind(f.event_type.as_deref())
                    .bind(f.event_type.as_deref())
                    .bind(f.since.map(|t| t.naive_utc()))
                    .bind(f.since.map(|t| t.naive_utc()))
                    .bind(f.until.map(|t| t.naive_utc()))
                    .bind(f.until.map(|t| t.naive_utc()))
                    .fetch_one(s.pool())
                    .await?
            }
        })
    }
}
