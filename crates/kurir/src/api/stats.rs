//! `GET /v1/stats`: how much is waiting and for how long, and totals per status.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use crate::delivery::DeliveryStatus;
use crate::serve::AppState;

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
}

/// The delivery backlog by status.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Backlog {
    /// Waiting for an attempt.
    pub pending: i64,
    /// Being attempted.
    pub processing: i64,
    /// Waiting for a retry.
    pub failed: i64,
    /// All of the above.
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
    /// `failed` (retry scheduled).
    pub failed: i64,
    /// `dead_letter`.
    pub dead_letter: i64,
}

fn age_seconds(since: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<f64> {
    since.map(|t| ((now - t).num_milliseconds().max(0) as f64) / 1000.0)
}

/// Backlog, oldest pending age, events and deliveries per status.
#[utoipa::path(get, path = "/v1/stats", tag = "stats",
    responses((status = 200, description = "Current counts", body = StatsView)))]
pub async fn stats(State(state): State<AppState>) -> Result<Json<StatsView>, ApiError> {
    let stats = state.store.stats().await?;
    let now = Utc::now();
    let mut deliveries = DeliveryCounts::default();
    let mut oldest_pending: Option<DateTime<Utc>> = None;
    for s in &stats.deliveries {
        let slot = match s.status {
            DeliveryStatus::Pending => &mut deliveries.pending,
            DeliveryStatus::Processing => &mut deliveries.processing,
            DeliveryStatus::Sent => &mut deliveries.sent,
            DeliveryStatus::Failed => &mut deliveries.failed,
            DeliveryStatus::DeadLetter => &mut deliveries.dead_letter,
        };
        *slot = s.count;
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
        failed: deliveries.failed,
        total: deliveries.pending + deliveries.processing + deliveries.failed,
    };
    Ok(Json(StatsView {
        backlog,
        oldest_pending_age_seconds: age_seconds(oldest_pending, now),
        events: EventCounts {
            total: stats.events_total,
            dispatched: stats.events_total - stats.events_undispatched,
            undispatched: stats.events_undispatched,
            oldest_undispatched_age_seconds: age_seconds(stats.oldest_undispatched_at, now),
        },
        deliveries,
    }))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/stats", get(stats))
}
