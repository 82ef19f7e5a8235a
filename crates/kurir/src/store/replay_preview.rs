//! The dry run of a replay: how many deliveries [`Store::replay`] would move back to `pending`
//! for a filter, without moving any. The dashboard shows this count before an operator confirms
//! a bulk replay; `GET /v1/replays/preview` answers it to API clients.
//!
//! One read per dialect with the same conditions as the replay's update (deliveries of a
//! deleted endpoint are never replayed); no locks, so a delivery
//! completing meanwhile can make the replay's own count differ (the audit row keeps that one).

use super::rows::Ts;
use super::sql::{query_as_on, Sql};
use super::{ReplayFilter, Result, Store};

const COUNT: Sql = Sql {
    postgres: "\
        SELECT count(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.status IN ('sent', 'dead_letter') \
          AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
              WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
          AND ($1::text IS NULL OR o.event_id = $1) AND ($2::text IS NULL OR d.status = $2) \
          AND ($3::text IS NULL OR d.endpoint_id = $3) AND ($4::text IS NULL OR o.event_type = $4) \
          AND ($5::timestamptz IS NULL OR d.created_at >= $5) \
          AND ($6::timestamptz IS NULL OR d.created_at < $6)",
    sqlite: "\
        SELECT count(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.status IN ('sent', 'dead_letter') \
          AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
              WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
          AND (?1 IS NULL OR d.event_id = ?1) AND (?2 IS NULL OR d.status = ?2) \
          AND (?3 IS NULL OR d.endpoint_id = ?3) AND (?4 IS NULL OR o.event_type = ?4) \
          AND (?5 IS NULL OR d.created_at >= ?5) AND (?6 IS NULL OR d.created_at < ?6)",
    mysql: "\
        SELECT COUNT(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.status IN ('sent', 'dead_letter') \
          AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
              WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
          AND ($1 IS NULL OR d.event_id = $1) AND ($2 IS NULL OR d.status = $2) \
          AND ($3 IS NULL OR d.endpoint_id = $3) AND ($4 IS NULL OR o.event_type = $4) \
          AND ($5 IS NULL OR d.created_at >= $5) AND ($6 IS NULL OR d.created_at < $6)",
};

impl Store {
    /// How many deliveries a replay with `filter` would move back to `pending` now.
    pub async fn count_replayable(&self, f: &ReplayFilter) -> Result<i64> {
        let (count,): (i64,) = query_as_on!(
            self,
            COUNT,
            fetch_one,
            f.event_id.as_deref(),
            f.status.map(|s| s.as_str()),
            f.endpoint_id.as_deref(),
            f.event_type.as_deref(),
            f.since.map(Ts),
            f.until.map(Ts),
        )?;
        Ok(count)
    }
}
