//! The dry run of a replay: which deliveries [`Store::replay`] would move back to `pending` for
//! a filter, without moving any: how many, and the first of them with their endpoint and
//! status. The dashboard shows this before an operator confirms a replay; `GET
//! /v1/replays/preview` and `GET /v1/events/{event_id}/replay/preview` answer it to API clients.
//!
//! One read per dialect with the same conditions as the replay's update (see
//! [`super::ReplayFilter`] for which statuses; deliveries of a deleted endpoint are never
//! replayed); no locks, so a delivery completing meanwhile can make the replay's own count
//! differ (the audit row keeps that one).

use super::rows::Ts;
use super::sql::{query_as_on, Sql};
use super::{ReplayFilter, Result, Store, StoreError};
use crate::delivery::{DeliveryStatus, UnknownStatus};

const COUNT: Sql = Sql {
    postgres: "\
        SELECT count(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.status IN ('sent', 'dead_letter') \
          AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
              WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
          AND ($1::text IS NULL OR o.event_id = $1) \
          AND (d.status = $2 OR ($2::text IS NULL AND (d.status = 'dead_letter' OR $7::boolean))) \
          AND ($3::text IS NULL OR d.endpoint_id = $3) AND ($4::text IS NULL OR o.event_type = $4) \
          AND ($5::timestamptz IS NULL OR d.created_at >= $5) \
          AND ($6::timestamptz IS NULL OR d.created_at < $6) \
          AND ($8::text IS NULL OR o.subscriber_id = $8)",
    sqlite: "\
        SELECT count(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.status IN ('sent', 'dead_letter') \
          AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
              WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
          AND (?1 IS NULL OR d.event_id = ?1) \
          AND (d.status = ?2 OR (?2 IS NULL AND (d.status = 'dead_letter' OR ?7))) \
          AND (?3 IS NULL OR d.endpoint_id = ?3) AND (?4 IS NULL OR o.event_type = ?4) \
          AND (?5 IS NULL OR d.created_at >= ?5) AND (?6 IS NULL OR d.created_at < ?6) \
          AND (?8 IS NULL OR o.subscriber_id = ?8)",
    mysql: "\
        SELECT COUNT(*) FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.status IN ('sent', 'dead_letter') \
          AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
              WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
          AND ($1 IS NULL OR d.event_id = $1) \
          AND (d.status = $2 OR ($2 IS NULL AND (d.status = 'dead_letter' OR $7))) \
          AND ($3 IS NULL OR d.endpoint_id = $3) AND ($4 IS NULL OR o.event_type = $4) \
          AND ($5 IS NULL OR d.created_at >= $5) AND ($6 IS NULL OR d.created_at < $6) \
          AND ($8 IS NULL OR o.subscriber_id = $8)",
};

/// The first `$8` deliveries [`COUNT`] counts, oldest delivery first, with their endpoint's URL
/// (the endpoint exists: a deleted one's deliveries are not replayed).
const CANDIDATES: Sql = Sql {
    postgres: "\
        SELECT d.id, d.endpoint_id, e.url, d.status \
        FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE d.status IN ('sent', 'dead_letter') AND e.deleted_at IS NULL \
          AND ($1::text IS NULL OR o.event_id = $1) \
          AND (d.status = $2 OR ($2::text IS NULL AND (d.status = 'dead_letter' OR $7::boolean))) \
          AND ($3::text IS NULL OR d.endpoint_id = $3) AND ($4::text IS NULL OR o.event_type = $4) \
          AND ($5::timestamptz IS NULL OR d.created_at >= $5) \
          AND ($6::timestamptz IS NULL OR d.created_at < $6) \
          AND ($9::text IS NULL OR o.subscriber_id = $9) \
        ORDER BY d.id LIMIT $8",
    sqlite: "\
        SELECT d.id, d.endpoint_id, e.url, d.status \
        FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE d.status IN ('sent', 'dead_letter') AND e.deleted_at IS NULL \
          AND (?1 IS NULL OR d.event_id = ?1) \
          AND (d.status = ?2 OR (?2 IS NULL AND (d.status = 'dead_letter' OR ?7))) \
          AND (?3 IS NULL OR d.endpoint_id = ?3) AND (?4 IS NULL OR o.event_type = ?4) \
          AND (?5 IS NULL OR d.created_at >= ?5) AND (?6 IS NULL OR d.created_at < ?6) \
          AND (?9 IS NULL OR o.subscriber_id = ?9) \
        ORDER BY d.id LIMIT ?8",
    mysql: "\
        SELECT d.id, CAST(d.endpoint_id AS CHAR), CAST(e.url AS CHAR), CAST(d.status AS CHAR) \
        FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE d.status IN ('sent', 'dead_letter') AND e.deleted_at IS NULL \
          AND ($1 IS NULL OR d.event_id = $1) \
          AND (d.status = $2 OR ($2 IS NULL AND (d.status = 'dead_letter' OR $7))) \
          AND ($3 IS NULL OR d.endpoint_id = $3) AND ($4 IS NULL OR o.event_type = $4) \
          AND ($5 IS NULL OR d.created_at >= $5) AND ($6 IS NULL OR d.created_at < $6) \
          AND ($9 IS NULL OR o.subscriber_id = $9) \
        ORDER BY d.id LIMIT $8",
};

/// One delivery a replay would move back to `pending`.
#[derive(Clone, Debug)]
pub struct ReplayCandidate {
    /// The delivery.
    pub delivery_id: i64,
    /// Its endpoint.
    pub endpoint_id: String,
    /// The endpoint's URL.
    pub endpoint_url: String,
    /// Where it stands now (`dead_letter`, or `sent`).
    pub status: DeliveryStatus,
}

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
            f.include_sent,
            f.subscriber_id.as_deref(),
        )?;
        Ok(count)
    }

    /// The first `limit` of the deliveries [`Store::count_replayable`] counts, oldest first.
    pub async fn replay_candidates(
        &self,
        f: &ReplayFilter,
        limit: u32,
    ) -> Result<Vec<ReplayCandidate>> {
        let rows: Vec<(i64, String, String, String)> = query_as_on!(
            self,
            CANDIDATES,
            fetch_all,
            f.event_id.as_deref(),
            f.status.map(|s| s.as_str()),
            f.endpoint_id.as_deref(),
            f.event_type.as_deref(),
            f.since.map(Ts),
            f.until.map(Ts),
            f.include_sent,
            i64::from(limit),
            f.subscriber_id.as_deref(),
        )?;
        rows.into_iter()
            .map(|(delivery_id, endpoint_id, endpoint_url, status)| {
                Ok(ReplayCandidate {
                    delivery_id,
                    endpoint_id,
                    endpoint_url,
                    status: status
                        .parse()
                        .map_err(|e: UnknownStatus| StoreError::Corrupt {
                            table: "kurir_deliveries",
                            message: e.to_string(),
                        })?,
                })
            })
            .collect()
    }
}
