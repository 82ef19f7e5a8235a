//! `GET /metrics`: the process's counters and histograms, then the backlog gauges, read from the
//! database for this scrape.
//!
//! Unauthenticated unless `KURIR_METRICS_REQUIRE_TOKEN=true`; then it takes the admin token like
//! `/v1`. When the database cannot be read the scrape still answers with the counters, and the
//! backlog gauges are left out (Prometheus marks them stale) rather than shown with old values.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware, Router};

use crate::api::state::AppState;
use crate::store::Backlog;

/// The Prometheus text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders every metric of this process plus the database's backlog.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = state.metrics.render();
    match state.store.backlog().await {
        Ok(backlog) => write_backlog(&mut text, &backlog),
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read the backlog for /metrics; its gauges are left out of this scrape"
        ),
    }
    ([(CONTENT_TYPE, TEXT_FORMAT)], text).into_response()
}

/// Appends the backlog gauges to `text`.
fn write_backlog(text: &mut String, b: &Backlog) {
    gauge_header(
        text,
        "kurir_backlog",
        "Deliveries neither sent nor dead-lettered, by status (from the database).",
    );
    for (status, n) in b.by_status() {
        let _ = writeln!(text, "kurir_backlog{{status=\"{status}\"}} {n}");
    }
    let gauges = [
        (
            "kurir_oldest_pending_age_seconds",
            "Seconds since the oldest delivery in the backlog was created; 0 without backlog (from the database).",
            b.oldest_pending_age_seconds,
        ),
        (
            "kurir_outbox_undispatched",
            "Outbox events the relay has not fanned out yet (from the database).",
            b.undispatched as f64,
        ),
        (
            "kurir_oldest_undispatched_age_seconds",
            "Seconds since the oldest event waiting for the relay was written; 0 when none waits (from the database).",
            b.oldest_undispatched_age_seconds,
        ),
        (
            "kurir_outbox_refused",
            "Outbox events refused for breaking the SQL contract, written before the database enforced it; never delivered (from the database).",
            b.refused as f64,
        ),
    ];
    for (name, help, value) in gauges {
        gauge_header(text, name, help);
        let _ = writeln!(text, "{name} {value}");
    }
}

fn gauge_header(text: &mut String, name: &str, help: &str) {
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
}

/// `GET /metrics`, behind the admin token when `require_token`.
pub fn router(state: AppState, require_token: bool) -> Router {
    let route = Router::new().route("/metrics", get(metrics));
    let route = if require_token {
        route.route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::api::auth::require_admin,
        ))
    } else {
        route
    };
    route.with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_gauges_are_prometheus_text() {
        let mut text = String::new();
        write_backlog(
            &mut text,
            &Backlog {
                deliveries: [3, 1, 2],
                oldest_pending_age_seconds: 12.5,
                undispatched: 4,
                oldest_undispatched_age_seconds: 0.25,
                refused: 2,
            },
        );
        assert!(text.starts_with("# HELP kurir_backlog "));
        assert!(text.contains("# TYPE kurir_backlog gauge\nkurir_backlog{status=\"pending\"} 3\n"));
        assert!(text.contains("kurir_backlog{status=\"processing\"} 1\n"));
        assert!(text.contains("kurir_backlog{status=\"failed\"} 2\n"));
        assert!(text.contains("\nkurir_oldest_pending_age_seconds 12.5\n"));
        assert!(text.contains("\nkurir_outbox_undispatched 4\n"));
        assert!(text.contains("\nkurir_oldest_undispatched_age_seconds 0.25\n"));
        assert!(text.contains("\nkurir_outbox_refused 2\n"));
    }
}
