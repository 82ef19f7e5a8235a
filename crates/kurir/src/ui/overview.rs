//! The overview: event and delivery-attempt rates by outcome, success ratio and latency percentiles over
//! the last hour or day (charts), and the backlog with the age of its oldest delivery, all read
//! from the database so every process's work counts. Every read follows the window or what
//! waits, never the whole history; latencies of a busy window come from an evenly spread sample
//! of at most about [`LATENCY_SAMPLE`] deliveries.

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;

use super::chart::{bucket_starts, Chart, Measure, Series};
use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::api::state::AppState;
use crate::store::activity::{AttemptBucket, Histogram};
use crate::store::waiting::Waiting;
use crate::store::Backlog;

/// A window of the overview: how far back, and how wide each bucket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    Hour,
    Day,
}

impl Window {
    fn parse(s: Option<&str>) -> Self {
        if s == Some("day") {
            Self::Day
        } else {
            Self::Hour
        }
    }

    /// `(span, bucket seconds, buckets)`.
    fn shape(self) -> (Duration, i64, usize) {
        match self {
            Self::Hour => (Duration::hours(1), 60, 60),
            Self::Day => (Duration::days(1), 1800, 48),
        }
    }
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    chrome: Chrome,
    day: bool,
    figures: Vec<(&'static str, String, String)>,
    charts: Vec<String>,
}

#[derive(Deserialize)]
struct OverviewQuery {
    window: Option<String>,
}

/// The totals of a window's attempt buckets.
fn totals(buckets: &[(DateTime<Utc>, AttemptBucket)]) -> (i64, i64, Histogram) {
    let mut latency = Histogram::default();
    let (mut ok, mut failed) = (0, 0);
    for (_, b) in buckets {
        ok += b.delivered;
        failed += b.failed;
        for (i, n) in b.latency.0.iter().enumerate() {
            if latency.0.is_empty() {
                latency.0 = vec![0; b.latency.0.len()];
            }
            latency.0[i] += n;
        }
    }
    (ok, failed, latency)
}

/// What is waiting now: the backlog and its oldest delivery, dead letters, the inbox.
struct Now {
    backlog: Backlog,
    waiting: Waiting,
    /// Endpoints whose circuit is open or half-open.
    open_circuits: usize,
}

fn figures(
    now: &Now,
    span: f64,
    events: i64,
    attempts: &[(DateTime<Utc>, AttemptBucket)],
) -> Vec<(&'static str, String, String)> {
    let (ok, failed, latency) = totals(attempts);
    let ms = |q: f64| {
        latency
            .quantile(q)
            .map_or("–".to_owned(), |v| view::seconds(v / 1000.0))
    };
    let rate = |n: i64| Measure::Rate.text(n as f64 / span);
    let backlog: i64 = now.backlog.deliveries.iter().sum();
    let oldest = now.backlog.oldest_pending_age_seconds;
    vec![
        ("Events", events.to_string(), rate(events)),
        ("Delivered", ok.to_string(), rate(ok)),
        ("Failed attempts", failed.to_string(), rate(failed)),
        (
            "Success ratio",
            view::percent(ok, ok + failed),
            "of attempts".into(),
        ),
        ("Latency p50", ms(0.5), "occurred → delivered".into()),
        ("Latency p95", ms(0.95), "occurred → delivered".into()),
        (
            "Backlog",
            backlog.to_string(),
            format!("{} retrying", now.backlog.deliveries[2]),
        ),
        (
            "Oldest waiting",
            if backlog > 0 {
                view::seconds(oldest)
            } else {
                "–".to_owned()
            },
            "in the backlog".into(),
        ),
        (
            "Dead letters",
            now.waiting.dead_letters.to_string(),
            "waiting for a replay".into(),
        ),
        (
            "Open circuits",
            now.open_circuits.to_string(),
            "endpoints held back".into(),
        ),
        (
            "Inbox to forward",
            now.waiting.inbox_unforwarded.to_string(),
            "pending or failed".into(),
        ),
    ]
}

/// Each bucket's attempts, or none.
fn bucket_at<'a>(
    attempts: &'a [(DateTime<Utc>, AttemptBucket)],
    t: &DateTime<Utc>,
) -> Option<&'a AttemptBucket> {
    attempts.iter().find(|(s, _)| s == t).map(|(_, b)| b)
}

/// Events and attempts per second per bucket, as bar rows.
fn rate_rows(
    starts: &[DateTime<Utc>],
    step: i64,
    events: &[(DateTime<Utc>, i64)],
    attempts: &[(DateTime<Utc>, AttemptBucket)],
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let per_s = |n: i64| n as f64 / step as f64;
    let events = starts
        .iter()
        .map(|t| {
            vec![per_s(
                events.iter().find(|(s, _)| s == t).map_or(0, |(_, n)| *n),
            )]
        })
        .collect();
    let outcomes = starts
        .iter()
        .map(|t| {
            bucket_at(attempts, t).map_or(vec![0.0, 0.0], |b| {
                vec![per_s(b.delivered), per_s(b.failed)]
            })
        })
        .collect();
    (events, outcomes)
}

/// Per bucket, one value per series (`None`: no value).
type LineRows = Vec<Vec<Option<f64>>>;

/// Success ratio and latency percentiles per bucket, as line rows.
fn quality_rows(
    starts: &[DateTime<Utc>],
    attempts: &[(DateTime<Utc>, AttemptBucket)],
) -> (LineRows, LineRows) {
    let ratio = starts
        .iter()
        .map(|t| {
            vec![bucket_at(attempts, t)
                .filter(|b| b.delivered + b.failed > 0)
                .map(|b| b.delivered as f64 * 100.0 / (b.delivered + b.failed) as f64)]
        })
        .collect();
    let latency = starts
        .iter()
        .map(|t| {
            bucket_at(attempts, t).map_or(vec![None, None], |b| {
                vec![b.latency.quantile(0.5), b.latency.quantile(0.95)]
            })
        })
        .collect();
    (ratio, latency)
}

fn charts(
    starts: &[DateTime<Utc>],
    step: i64,
    events: &[(DateTime<Utc>, i64)],
    attempts: &[(DateTime<Utc>, AttemptBucket)],
) -> Vec<Chart> {
    let (event_rows, outcome_rows) = rate_rows(starts, step, events, attempts);
    let (ratio_rows, latency_rows) = quality_rows(starts, attempts);
    let series = |label, color| Series { label, color };
    vec![
        Chart::bars(
            "Events",
            vec![series("events", "#1f4f99")],
            starts,
            &event_rows,
            Measure::Rate,
        ),
        Chart::bars(
            "Delivery attempts",
            vec![series("delivered", "#2f8a4c"), series("failed", "#c0392b")],
            starts,
            &outcome_rows,
            Measure::Rate,
        ),
        Chart::lines(
            "Success ratio",
            vec![series("delivered / attempted", "#2f8a4c")],
            starts,
            &ratio_rows,
            Measure::Percent,
        ),
        Chart::lines(
            "Latency, occurred to delivered",
            vec![series("p50", "#1f4f99"), series("p95", "#b7791f")],
            starts,
            &latency_rows,
            Measure::Millis,
        ),
    ]
}

/// Latencies are read for at most about this many delivering attempts per window.
const LATENCY_SAMPLE: i64 = 10_000;

/// The window's attempts with their latencies merged in.
async fn activity(
    state: &AppState,
    since: DateTime<Utc>,
    step: i64,
) -> Result<Vec<(DateTime<Utc>, AttemptBucket)>, UiError> {
    let mut attempts = state.store.attempt_counts(since, step).await?;
    let delivered: i64 = attempts.iter().map(|(_, b)| b.delivered).sum();
    let every = (delivered + LATENCY_SAMPLE - 1) / LATENCY_SAMPLE;
    for (start, histogram) in state.store.latency_counts(since, step, every).await? {
        if let Some((_, b)) = attempts.iter_mut().find(|(s, _)| *s == start) {
            b.latency = histogram;
        }
    }
    Ok(attempts)
}

async fn overview(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<OverviewQuery>,
) -> Result<Response, UiError> {
    let window = Window::parse(q.window.as_deref());
    let (span, step, count) = window.shape();
    let since = state.store.clock().now() - span;
    let now = Now {
        backlog: state.store.backlog().await?,
        waiting: state.store.waiting().await?,
        open_circuits: (state.store.circuits().await?)
            .iter()
            .filter(|c| c.circuit.state != kurir_core::breaker::State::Closed)
            .count(),
    };
    let events = state.store.event_counts(since, step).await?;
    let attempts = activity(&state, since, step).await?;
    let starts = bucket_starts(since, step, count);
    let total_events = events.iter().map(|(_, n)| n).sum();
    let charts = charts(&starts, step, &events, &attempts)
        .iter()
        .map(Template::render)
        .collect::<Result<_, _>>()
        .map_err(super::error::internal)?;
    super::render(&OverviewPage {
        chrome: Chrome::new(&session, "overview", "Overview"),
        day: window == Window::Day,
        figures: figures(&now, span.num_seconds() as f64, total_events, &attempts),
        charts,
    })
}

/// The overview's route.
pub fn router() -> Router<AppState> {
    Router::new().route("/ui/", get(overview))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(chart: &Chart) -> Vec<&str> {
        chart.y_ticks.iter().map(|t| t.label.as_str()).collect()
    }

    /// Regression (issue 33, item 4): three events a minute drew a y axis of
    /// `0.05/0.04/0.03/0.01/0.00/s`, and latencies of a few minutes `5 min/3 min/2 min/0 ms`.
    #[test]
    fn a_quiet_hour_reads_in_events_per_minute_and_minutes_of_latency() {
        let since = DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        let starts = bucket_starts(since, 60, 60);
        let events: Vec<_> = starts.iter().map(|t| (*t, 3)).collect();
        let mut slow = AttemptBucket {
            delivered: 3,
            ..AttemptBucket::default()
        };
        // Three deliveries between one and five minutes after their events occurred.
        slow.latency.add(11, 3);
        let attempts: Vec<_> = starts.iter().map(|t| (*t, slow.clone())).collect();
        let charts = charts(&starts, 60, &events, &attempts);
        assert_eq!(labels(&charts[0]), ["0/min", "1/min", "2/min", "3/min"]);
        assert_eq!(
            labels(&charts[3]),
            ["0 min", "1 min", "2 min", "3 min", "4 min", "5 min"]
        );
    }
}
