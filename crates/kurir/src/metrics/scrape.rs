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
    match state.store.refused_by_type().await {
        Ok(by_type) => write_refused(&mut text, &by_type),
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read the refused events for /metrics; their gauge is left out of this scrape"
        ),
    }
    match endpoint_protection(&state).await {
        Ok(rows) => write_protection(&mut text, &rows),
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read the circuit breakers for /metrics; their gauges are left out of this scrape"
        ),
    }
    ([(CONTENT_TYPE, TEXT_FORMAT)], text).into_response()
}

/// How far back the timeout ratio looks.
const TIMEOUT_RATIO_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Per endpoint: its circuit state's gauge value and, when it had attempts in the last
/// [`TIMEOUT_RATIO_WINDOW`], the share of them that timed out (all from the database).
async fn endpoint_protection(
    state: &AppState,
) -> Result<Vec<(String, i64, Option<f64>)>, crate::store::StoreError> {
    let endpoints = state.store.list_endpoints().await?;
    let circuits = state.store.circuits().await?;
    let health = state
        .store
        .endpoint_health(state.store.clock().now() - TIMEOUT_RATIO_WINDOW)
        .await?;
    Ok(endpoints
        .into_iter()
        .map(|e| {
            let id = e.id.to_string();
            let circuit = circuits.iter().find(|c| c.endpoint_id == id);
            let gauge = circuit.map_or(0, |c| c.circuit.state.gauge());
            let ratio = health
                .iter()
                .find(|h| h.endpoint_id == id && h.attempts > 0)
                .map(|h| h.timeouts as f64 / h.attempts as f64);
            (id, gauge, ratio)
        })
        .collect())
}

/// Appends the circuit state and timeout ratio gauges to `text`.
fn write_protection(text: &mut String, rows: &[(String, i64, Option<f64>)]) {
    gauge_header(
        text,
        "kurir_endpoint_circuit_state",
        "Each endpoint's circuit breaker: 0 closed, 1 open, 2 half_open (from the database).",
    );
    for (id, state, _) in rows {
        let _ = writeln!(
            text,
            "kurir_endpoint_circuit_state{{endpoint_id=\"{id}\"}} {state}"
        );
    }
    gauge_header(
        text,
        "kurir_endpoint_timeout_ratio",
        "Share of each endpoint's attempts in the last 5 minutes that timed out; absent without attempts (from the database).",
    );
    for (id, _, ratio) in rows {
        if let Some(r) = ratio {
            let _ = writeln!(
                text,
                "kurir_endpoint_timeout_ratio{{endpoint_id=\"{id}\"}} {r}"
            );
        }
    }
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
    ];
    for (name, help, value) in gauges {
        gauge_header(text, name, help);
        let _ = writeln!(text, "{name} {value}");
    }
}

/// Appends the refused outbox rows per event type to `text`: none refused, no sample.
fn write_refused(text: &mut String, by_type: &std::collections::BTreeMap<String, i64>) {
    gauge_header(
        text,
        "kurir_outbox_refused",
        "Outbox events written with SQL and refused before fan-out, never delivered, by event type: failing the event catalog (schema: or catalog: reasons; kurir events recheck delivers those that pass now), or breaking the SQL contract (from the database).",
    );
    for (event_type, n) in by_type {
        let label = event_type
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = writeln!(text, "kurir_outbox_refused{{event_type=\"{label}\"}} {n}");
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
            crate::api::auth::require_token,
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
        assert!(!text.contains("kurir_outbox_refused"));
    }

    #[test]
    fn refused_events_are_counted_by_type_with_labels_escaped() {
        let mut text = String::new();
        let by_type = [("order.paid".to_owned(), 2), ("a\"b".to_owned(), 1)].into();
        write_refused(&mut text, &by_type);
        assert!(text.contains("# TYPE kurir_outbox_refused gauge\n"));
        assert!(text.contains("kurir_outbox_refused{event_type=\"order.paid\"} 2\n"));
        assert!(text.contains("kurir_outbox_refused{event_type=\"a\\\"b\"} 1\n"));
    }

    #[test]
    fn protection_gauges_are_prometheus_text() {
        let mut text = String::new();
        write_protection(
            &mut text,
            &[("a".into(), 1, Some(0.25)), ("b".into(), 0, None)],
        );
        assert!(text.contains(
            "# TYPE kurir_endpoint_circuit_state gauge\nkurir_endpoint_circuit_state{endpoint_id=\"a\"} 1\n"
        ));
        assert!(text.contains("kurir_endpoint_circuit_state{endpoint_id=\"b\"} 0\n"));
        assert!(text.contains("kurir_endpoint_timeout_ratio{endpoint_id=\"a\"} 0.25\n"));
        assert!(!text.contains("kurir_endpoint_timeout_ratio{endpoint_id=\"b\"}"));
    }
}
