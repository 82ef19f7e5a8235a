//! `GET /v1/stats`: how much is waiting and for how long, and totals per status.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use crate::api::state::AppState;
use crate::delivery::DeliveryStatus;

/// Counts of the outbox and the deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatsView {
    /// Deliveries not yet delivered nor given up on.
    pub backlog: Backlog,
    /// Age of the oldest delivery in the backlog, in seconds (absent: no backlog).
    pub oldest_pending_age_seconds: Option<f64>,
    /// Events in the outbox.
    pub events: EventCounts,
    /// Deliveries per status.
    pub deliveries: DeliveryCounts,
    /// What the inbox gateway received, per status, in all and per source.
    pub inbox: InboxStats,
    /// How long finished history is kept (this process's settings).
    pub retention: RetentionView,
}

/// The retention settings, in seconds.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetentionView {
    /// Events whose every delivery was sent, with their deliveries and attempts.
    pub events_seconds: u64,
    /// Events with a dead-lettered delivery.
    pub dead_letters_seconds: u64,
    /// Completed inbox events.
    pub inbox_seconds: u64,
    /// The replay audit (absent: forever).
    pub replay_audit_seconds: Option<u64>,
}

impl From<&crate::config::RetentionConfig> for RetentionView {
    fn from(r: &crate::config::RetentionConfig) -> Self {
        Self {
            events_seconds: r.events.as_secs(),
            dead_letters_seconds: r.dead_letters.as_secs(),
            inbox_seconds: r.inbox.as_secs(),
            replay_audit_seconds: r.replay_audit.map(|d| d.as_secs()),
        }
    }
}

/// Received events per status.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct InboxCounts {
    /// Stored, not yet forwarded.
    pub pending: i64,
    /// Being forwarded.
    pub processing: i64,
    /// Forwarded (answered 2xx).
    pub completed: i64,
    /// The last forward failed (retry scheduled, or attempts exhausted).
    pub failed: i64,
}

/// One source's received events.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SourceCounts {
    /// The source.
    pub source: String,
    /// Its events per status.
    #[serde(flatten)]
    pub counts: InboxCounts,
}

/// The inbox gateway's figures.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct InboxStats {
    /// Every source together.
    #[serde(flatten)]
    pub total: InboxCounts,
    /// Age of the oldest event not yet forwarded (pending, processing or failed), in seconds.
    pub oldest_unforwarded_age_seconds: Option<f64>,
    /// Per source, by name.
    pub sources: Vec<SourceCounts>,
}

impl InboxStats {
    /// Folds the store's per-source counts.
    pub fn new(rows: Vec<crate::store::InboxCount>, now: DateTime<Utc>) -> Self {
        use kurir_receiver::InboxStatus;
        let mut stats = InboxStats::default();
        let mut oldest: Option<DateTime<Utc>> = None;
        for row in rows {
            if stats.sources.last().is_none_or(|s| s.source != row.source) {
                stats.sources.push(SourceCounts {
                    source: row.source.clone(),
                    counts: InboxCounts::default(),
                });
            }
            let source = &mut stats.sources.last_mut().expect("just pushed").counts;
            for counts in [&mut stats.total, source] {
                *match row.status {
                    InboxStatus::Pending => &mut counts.pending,
                    InboxStatus::Processing => &mut counts.processing,
                    InboxStatus::Completed => &mut counts.completed,
                    InboxStatus::Failed => &mut counts.failed,
                } += row.count;
            }
            if row.status != InboxStatus::Completed {
                oldest = match (oldest, row.oldest_created_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        stats.oldest_unforwarded_age_seconds = age_seconds(oldest, now);
        stats
    }
}

/// The delivery backlog by status.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Backlog {
    /// Waiting for an attempt.
    pub pending: i64,
    /// Being attempted.
    pub processing: i64,
    /// Waiting for a retry (`retrying`).
    pub retrying: i64,
    /// The same count as `retrying`, under the older name, kept for clients written before.
    #[schema(deprecated)]
    pub failed: i64,
    /// Pending, processing and retrying.
    pub total: i64,
}

/// Events by relay state.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventCounts {
    /// All events.
    pub total: i64,
    /// Fanned out to endpoints.
    pub dispatched: i64,
    /// Waiting for the relay.
    pub undispatched: i64,
    /// Age of the oldest event waiting for the relay, in seconds.
    pub oldest_undispatched_age_seconds: Option<f64>,
}

/// Deliveries per status.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct DeliveryCounts {
    /// `pending`.
    pub pending: i64,
    /// `processing`.
    pub processing: i64,
    /// `sent`.
    pub sent: i64,
    /// `retrying`: the last attempt failed and another is scheduled.
    pub retrying: i64,
    /// The same count as `retrying`, under the status's older name, kept for clients written
    /// before the rename.
    #[schema(deprecated)]
    pub failed: i64,
    /// `dead_letter`.
    pub dead_letter: i64,
    /// `cancelled` (its endpoint was deleted first).
    pub cancelled: i64,
}

pub(crate) fn age_seconds(since: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<f64> {
    since.map(|t| ((now - t).num_milliseconds().max(0) as f64) / 1000.0)
}

/// Backlog, oldest pending age, events and deliveries per status.
#[utoipa::path(get, path = "/v1/stats", tag = "stats", operation_id = "get_stats",
    responses((status = 200, description = "Current counts", body = StatsView)))]
pub async fn stats(State(state): State<AppState>) -> Result<Json<StatsView>, ApiError> {
    Ok(Json(stats_view(&state).await?))
}

/// The figures of `GET /v1/stats`, which the dashboard's overview shows too.
pub async fn stats_view(state: &AppState) -> Result<StatsView, ApiError> {
    let stats = state.store.stats().await?;
    let inbox = state.store.inbox_counts().await?;
    let now = state.store.clock().now();
    let mut deliveries = DeliveryCounts::default();
    let mut oldest_pending: Option<DateTime<Utc>> = None;
    for s in &stats.deliveries {
        let slot = match s.status {
            DeliveryStatus::Pending => &mut deliveries.pending,
            DeliveryStatus::Processing => &mut deliveries.processing,
            DeliveryStatus::Sent => &mut deliveries.sent,
            DeliveryStatus::Failed => &mut deliveries.retrying,
            DeliveryStatus::DeadLetter => &mut deliveries.dead_letter,
            DeliveryStatus::Cancelled => &mut deliveries.cancelled,
        };
        *slot = s.count;
        deliveries.failed = deliveries.retrying;
        let in_backlog = matches!(
            s.status,
            DeliveryStatus::Pending | DeliveryStatus::Processing | DeliveryStatus::Failed
        );
        if in_backlog {
            oldest_pending = match (oldest_pending, s.oldest_created_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    let backlog = Backlog {
        pending: deliveries.pending,
        processing: deliveries.processing,
        retrying: deliveries.retrying,
        failed: deliveries.retrying,
        total: deliveries.pending + deliveries.processing + deliveries.retrying,
    };
    Ok(StatsView {
        inbox: InboxStats::new(inbox, now),
        backlog,
        oldest_pending_age_seconds: age_seconds(oldest_pending, now),
        events: EventCounts {
            total: stats.events_total,
            dispatched: stats.events_total - stats.events_undispatched,
            undispatched: stats.events_undispatched,
            oldest_undispatched_age_seconds: age_seconds(stats.oldest_undispatched_at, now),
        },
        deliveries,
        retention: RetentionView::from(&state.retention),
    })
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/stats", get(stats))
}
