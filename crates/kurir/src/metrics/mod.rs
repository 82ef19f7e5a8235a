//! Prometheus metrics: what kurir counts, and [`scrape`], the `GET /metrics` route.
//!
//! Counters and histograms go to a [`Metrics`] registry that `kurir serve` creates, keeps in its
//! `AppState` and hands to the relay and the dispatcher. It is not installed as the `metrics`
//! crate's global recorder: tests run many kurir servers in one process, and each must report
//! only its own work; an application that embeds kurir keeps the global recorder for itself.
//! The receiving side records through the same registry when given [`Metrics::recorder`].
//!
//! The backlog gauges are not kept here: [`scrape`] reads them from the database on every scrape,
//! so every process sharing a database reports the same backlog whichever did the work.
//!
//! Labels are bounded: endpoint ids (never URLs), event types, and fixed sets of outcome and
//! status-class names. Never event ids. `docs/operations.md` says what each metric means.

pub mod scrape;

use std::sync::Arc;
use std::time::Duration;

use ::metrics::{Counter, Histogram, Key, KeyName, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use tokio_util::sync::CancellationToken;

use crate::delivery::{Attempted, ClaimedDelivery, Outcome};
use crate::endpoint::EndpointId;
use crate::store::{Orphan, OrphanReason, RelayOutcome};

/// Events fanned out by the relay, per `event_type`.
pub const EVENTS_ENQUEUED: &str = "kurir_events_enqueued_total";
/// Events of a deprecated catalog version fanned out, per `event_type` and `version`: who
/// still emits them.
pub const DEPRECATED_EVENTS: &str = "kurir_deprecated_events_total";
/// Events the event catalog refused, per `event_type`, `reason` (`schema`, `unknown`) and
/// `surface` (`api`: answered 422; `relay`: written with SQL, recorded as refused).
pub const CATALOG_REFUSALS: &str = "kurir_catalog_refusals_total";
/// Attempts per `endpoint_id` and `outcome` (`sent`, `retry`, `dead_letter`, `refused`).
pub const DELIVERIES: &str = "kurir_deliveries_total";
/// Attempts per `endpoint_id` and `status_class` (`2xx`…`5xx`, `timeout`, `connect_error`, …).
pub const HTTP_RESPONSES: &str = "kurir_http_responses_total";
/// How long each attempt took, per `endpoint_id`.
pub const ATTEMPT_DURATION: &str = "kurir_delivery_attempt_duration_seconds";
/// From `occurred_at` to the 2xx, per `endpoint_id`.
pub const DELIVERY_LATENCY: &str = "kurir_delivery_latency_seconds";
/// The attempt number of each successful attempt.
pub const ATTEMPTS_AT_SUCCESS: &str = "kurir_delivery_attempts_at_success";
/// Attempts whose record the database refused, per `endpoint_id`: set aside, due again when
/// their lease expires.
pub const COMPLETIONS_REFUSED: &str = "kurir_completions_refused_total";
/// Deliveries removed because their event or endpoint was deleted outside kurir, per `reason`
/// (`event_deleted`, `endpoint_deleted`).
pub const ORPHANED_DELIVERIES: &str = "kurir_orphaned_deliveries_total";
/// Claimed deliveries given back unattempted, per `reason`: `lease` (could not start within
/// it), `shutdown`.
pub const HANDED_BACK: &str = "kurir_deliveries_handed_back_total";
/// Circuit breaker transitions made by this process, per `endpoint_id`, `from` and `to`.
pub const CIRCUIT_TRANSITIONS: &str = "kurir_circuit_transitions_total";
/// Endpoints this process disabled for failing too long, per `endpoint_id`.
pub const ENDPOINTS_AUTO_DISABLED: &str = "kurir_endpoints_auto_disabled_total";
/// Rows deleted by the retention pruner, per `table`.
pub const PRUNED_ROWS: &str = "kurir_pruned_rows_total";
/// Webhooks received, per `source` and `outcome`: recorded by `kurir-receiver` (its
/// `metrics::INBOX_EVENTS`) into the recorder its sources are given; described here.
pub const INBOX_EVENTS: &str = "kurir_inbox_events_total";
/// Forward attempts of the inbox gateway, per `source` and `outcome` (`forwarded`, `rejected`,
/// `unreachable`, `error`).
pub const INBOX_FORWARDS: &str = "kurir_inbox_forwards_total";
/// How long each forward attempt took, per `source`.
pub const INBOX_FORWARD_DURATION: &str = "kurir_inbox_forward_duration_seconds";
/// How far this process's clock is ahead of the database's, in seconds (see `crate::clock`).
pub const CLOCK_OFFSET: &str = "kurir_clock_offset_seconds";

const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const LATENCY_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0,
    21600.0, 86400.0,
];
const ATTEMPT_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
];

const DESCRIPTIONS: &[(&str, &str)] = &[
    (EVENTS_ENQUEUED, "Events fanned out by the relay (also those inserted with plain SQL), by event type."),
    (DEPRECATED_EVENTS, "Events of a deprecated event catalog version fanned out (still delivered), by event type and version: who still emits them."),
    (CATALOG_REFUSALS, "Events the event catalog refused, by event type, reason (schema: data fails the version's schema; unknown: KURIR_EVENT_CATALOG=strict and the version is not in the catalog) and surface (api: answered 422, nothing stored; relay: written with SQL, recorded as refused, see kurir_outbox_refused)."),
    (DELIVERIES, "Delivery attempts by outcome: sent, retry (another attempt is scheduled), dead_letter (given up), refused (SSRF guard; retried)."),
    (HTTP_RESPONSES, "Delivery attempts by what came back: 1xx to 5xx, timeout, connect_error, refused, request_error."),
    (ATTEMPT_DURATION, "Duration of each delivery attempt, in seconds."),
    (DELIVERY_LATENCY, "From an event's occurred_at to the 2xx that delivered it, in seconds."),
    (ATTEMPTS_AT_SUCCESS, "Attempt number of each successful delivery attempt (1 = first try)."),
    (INBOX_FORWARDS, "Inbox gateway forward attempts by source and outcome: forwarded (2xx), rejected (another status), unreachable (no answer: refused, timeout, connect error), error (the source is gone or could not be read)."),
    (INBOX_FORWARD_DURATION, "Duration of each inbox gateway forward attempt, in seconds."),
    (COMPLETIONS_REFUSED, "Delivery attempts whose record the database refused (logged at ERROR with the delivery id); the delivery is due again when its lease expires."),
    (ORPHANED_DELIVERIES, "Deliveries removed because their event (reason event_deleted) or endpoint (endpoint_deleted) was deleted outside kurir, e.g. pruned by hand."),
    (HANDED_BACK, "Claimed deliveries given back unattempted and uncharged: reason lease (every slot was busy until the delivery could no longer finish within its lease) or shutdown, or circuit_open (the endpoint's circuit breaker opened before they started, or another process won its probe), or endpoint_stopped (the endpoint was deleted or disabled, or its subscriber was, before they started)."),
    (CIRCUIT_TRANSITIONS, "Circuit breaker transitions made by this process, by endpoint and from/to state (closed, open, half_open)."),
    (ENDPOINTS_AUTO_DISABLED, "Endpoints this process disabled after they failed, with no success, for KURIR_ENDPOINT_DISABLE_AFTER."),
    (PRUNED_ROWS, "Rows deleted by the retention pruner, by table (kurir_outbox, kurir_deliveries, kurir_attempts, kurir_inbox, kurir_replays)."),
    (INBOX_EVENTS, "Webhooks received by the inbox, by source and outcome (accepted, duplicate, error, or the rejection code)."),
    (CLOCK_OFFSET, "How far this process's clock is ahead of the database's, in seconds (negative: behind), as last measured; kurir corrects every time it shares by it. 0 on SQLite."),
];

/// Where counters are registered from; the Prometheus recorder ignores it.
static METADATA: Metadata<'static> = Metadata::new("kurir", Level::INFO, Some(module_path!()));

/// One process's metrics registry. Cheap to clone: clones share it.
#[derive(Clone)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry with kurir's histogram buckets and metric descriptions.
    pub fn new() -> Self {
        let buckets = [
            (ATTEMPT_DURATION, DURATION_BUCKETS),
            (INBOX_FORWARD_DURATION, DURATION_BUCKETS),
            (DELIVERY_LATENCY, LATENCY_BUCKETS),
            (ATTEMPTS_AT_SUCCESS, ATTEMPT_BUCKETS),
        ];
        let mut builder = PrometheusBuilder::new();
        for (name, values) in buckets {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), values)
                .expect("bucket lists are not empty");
        }
        let recorder = builder.build_recorder();
        for (name, help) in DESCRIPTIONS {
            let key = KeyName::from_const_str(name);
            if *name == CLOCK_OFFSET {
                recorder.describe_gauge(key, None, (*help).into());
            } else if name.ends_with("_total") {
                recorder.describe_counter(key, None, (*help).into());
            } else {
                recorder.describe_histogram(key, None, (*help).into());
            }
        }
        let handle = recorder.handle();
        Self {
            recorder: Arc::new(recorder),
            handle,
        }
    }

    /// The registry as a `metrics` recorder, for code that records by itself (the inbox).
    pub fn recorder(&self) -> Arc<dyn Recorder + Send + Sync> {
        self.recorder.clone()
    }

    /// The counters and histograms in Prometheus text format.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Counts the events of one relay batch, per type.
    pub fn record_relayed(&self, outcome: &RelayOutcome) {
        for (event_type, n) in &outcome.events_by_type {
            self.counter(
                EVENTS_ENQUEUED,
                vec![Label::new("event_type", event_type.clone())],
            )
            .increment(*n);
        }
        for ((event_type, version), n) in &outcome.deprecated {
            self.counter(
                DEPRECATED_EVENTS,
                vec![
                    Label::new("event_type", event_type.clone()),
                    Label::new("version", version.to_string()),
                ],
            )
            .increment(*n);
        }
        for refused in &outcome.refused {
            self.record_catalog_refusal(&refused.event_type, &refused.masked_reason, "relay");
        }
    }

    /// Counts an event the catalog refused on `surface` (`api` or `relay`), its reason told
    /// by the start of the reason text.
    pub fn record_catalog_refusal(&self, event_type: &str, reason: &str, surface: &'static str) {
        let kind = if reason.starts_with("catalog:") {
            "unknown"
        } else {
            "schema"
        };
        self.counter(
            CATALOG_REFUSALS,
            vec![
                Label::new("event_type", event_type.to_owned()),
                Label::from_static_parts("reason", kind),
                Label::from_static_parts("surface", surface),
            ],
        )
        .increment(1);
    }

    /// Counts one delivery attempt: its outcome, what came back, how long it took and, when it
    /// delivered, after how many attempts and how long after the event occurred.
    pub fn record_attempt(&self, d: &ClaimedDelivery, a: &Attempted) {
        let endpoint = || Label::new("endpoint_id", d.endpoint.id.to_string());
        let c = &a.completion;
        self.counter(
            DELIVERIES,
            vec![
                endpoint(),
                Label::from_static_parts("outcome", a.outcome.as_str()),
            ],
        )
        .increment(1);
        self.counter(
            HTTP_RESPONSES,
            vec![
                endpoint(),
                Label::from_static_parts("status_class", a.class.as_str()),
            ],
        )
        .increment(1);
        // Milliseconds, as recorded in kurir_attempts, so the sums match the database.
        self.histogram(ATTEMPT_DURATION, vec![endpoint()])
            .record(c.duration_ms as f64 / 1000.0);
        if a.outcome == Outcome::Sent {
            self.histogram(ATTEMPTS_AT_SUCCESS, vec![])
                .record(f64::from(d.attempt));
            let received = c.started_at + chrono::Duration::milliseconds(c.duration_ms);
            let latency = (received - d.event.occurred_at).num_milliseconds().max(0);
            self.histogram(DELIVERY_LATENCY, vec![endpoint()])
                .record(latency as f64 / 1000.0);
        }
    }

    /// Counts one forward attempt of the inbox gateway and how long it took.
    pub fn record_forward(&self, source: &str, outcome: &'static str, took: Duration) {
        let source = || Label::new("source", source.to_owned());
        self.counter(
            INBOX_FORWARDS,
            vec![source(), Label::from_static_parts("outcome", outcome)],
        )
        .increment(1);
        self.histogram(INBOX_FORWARD_DURATION, vec![source()])
            .record(took.as_secs_f64());
    }

    /// Counts an attempt whose record the database refused.
    pub fn record_completion_refused(&self, endpoint_id: &EndpointId) {
        self.counter(
            COMPLETIONS_REFUSED,
            vec![Label::new("endpoint_id", endpoint_id.to_string())],
        )
        .increment(1);
    }

    /// Counts deliveries removed because their event or endpoint no longer exists.
    pub fn record_orphans(&self, orphans: &[Orphan]) {
        for reason in [OrphanReason::EventDeleted, OrphanReason::EndpointDeleted] {
            let n = orphans.iter().filter(|o| o.reason == reason).count();
            if n > 0 {
                self.counter(
                    ORPHANED_DELIVERIES,
                    vec![Label::from_static_parts("reason", reason.as_str())],
                )
                .increment(n as u64);
            }
        }
    }

    /// Counts `n` deliveries given back unattempted, for `reason` (`lease` or `shutdown`).
    pub fn record_handed_back(&self, reason: &'static str, n: u64) {
        self.counter(
            HANDED_BACK,
            vec![Label::from_static_parts("reason", reason)],
        )
        .increment(n);
    }

    /// Counts rows the retention pruner deleted, per table.
    pub fn record_pruned(&self, pruned: &crate::store::retention::Pruned) {
        for (table, n) in pruned.by_table() {
            if n > 0 {
                self.counter(PRUNED_ROWS, vec![Label::from_static_parts("table", table)])
                    .increment(n);
            }
        }
    }

    /// Counts a circuit breaker transition of `endpoint_id`.
    pub fn record_circuit_transition(
        &self,
        endpoint_id: &EndpointId,
        from: &'static str,
        to: &'static str,
    ) {
        self.counter(
            CIRCUIT_TRANSITIONS,
            vec![
                Label::new("endpoint_id", endpoint_id.to_string()),
                Label::from_static_parts("from", from),
                Label::from_static_parts("to", to),
            ],
        )
        .increment(1);
    }

    /// Counts an endpoint disabled for failing too long.
    pub fn record_endpoint_auto_disabled(&self, endpoint_id: &EndpointId) {
        self.counter(
            ENDPOINTS_AUTO_DISABLED,
            vec![Label::new("endpoint_id", endpoint_id.to_string())],
        )
        .increment(1);
    }

    /// Shows how far this process's clock is ahead of the database's.
    pub fn set_clock_offset(&self, ahead: chrono::TimeDelta) {
        let seconds = ahead.num_microseconds().unwrap_or(0) as f64 / 1e6;
        self.recorder
            .register_gauge(&Key::from_static_name(CLOCK_OFFSET), &METADATA)
            .set(seconds);
    }

    /// Folds recorded histogram samples into their buckets every `interval` until `shutdown`,
    /// so memory stays bounded however rarely `/metrics` is scraped.
    pub async fn upkeep(self, interval: Duration, shutdown: CancellationToken) {
        loop {
            self.handle.run_upkeep();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(name, labels), &METADATA)
    }
}
