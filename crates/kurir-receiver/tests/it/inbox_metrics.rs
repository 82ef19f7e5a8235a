//! `kurir_inbox_events_total{source, outcome}`: every request a source judges is counted once, in
//! the recorder the source was given, or else in the `metrics` facade's current recorder.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::StatusCode;
use kurir_receiver::metrics::INBOX_EVENTS;
use kurir_receiver::InboxStatus;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

use crate::support::{default_source, signed_request, TestApp};

/// A recorder that only keeps counters, as `name{label=value,…}` → count.
#[derive(Clone, Default)]
struct Counts(Arc<Mutex<BTreeMap<String, u64>>>);

impl Counts {
    fn get(&self, outcome: &str) -> u64 {
        let key = format!("{INBOX_EVENTS}{{source=billing,outcome={outcome}}}");
        self.0.lock().unwrap().get(&key).copied().unwrap_or(0)
    }

    fn total(&self) -> u64 {
        self.0.lock().unwrap().values().sum()
    }
}

struct One(Counts, String);

impl CounterFn for One {
    fn increment(&self, value: u64) {
        *self.0 .0.lock().unwrap().entry(self.1.clone()).or_default() += value;
    }

    fn absolute(&self, value: u64) {
        self.0 .0.lock().unwrap().insert(self.1.clone(), value);
    }
}

impl Recorder for Counts {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        Counter::from_arc(Arc::new(One(self.clone(), name)))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

both_backends! {
    /// Accepted, duplicate and each rejection are counted under their own outcome, once each.
    async fn every_judged_request_is_counted_once_by_outcome(db) {
        let counts = Counts::default();
        let source = default_source()
            .body_limit(4096)
            .metrics_recorder(Arc::new(counts.clone()));
        let app = TestApp::builder(&db).source(source).start().await;

        let (headers, body) = signed_request("evt_counted");
        assert_eq!(app.post(&headers, &body).await.status, StatusCode::ACCEPTED);
        app.wait_for_record("evt_counted", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(app.post(&headers, &body).await.status, StatusCode::OK);

        let mut tampered = body.clone();
        tampered.push(b' ');
        assert_eq!(app.post(&headers, &tampered).await.status, StatusCode::UNAUTHORIZED);
        assert_eq!(app.post(&Vec::new(), &body).await.status, StatusCode::UNAUTHORIZED);
        let (headers, _) = signed_request("evt_big");
        let big = vec![b'x'; 5000];
        assert_eq!(app.post(&headers, &big).await.status, StatusCode::PAYLOAD_TOO_LARGE);

        assert_eq!(counts.get("accepted"), 1);
        assert_eq!(counts.get("duplicate"), 1);
        assert_eq!(counts.get("signature_mismatch"), 1);
        assert_eq!(counts.get("missing_header"), 1);
        assert_eq!(counts.get("payload_too_large"), 1);
        assert_eq!(counts.total(), 5, "one count per request");
    }
}

/// Without a recorder of its own, a source counts in the facade's current recorder (here a local
/// one; in an application, the one it installed globally).
#[test]
fn without_its_own_recorder_a_source_counts_in_the_current_one() {
    let counts = Counts::default();
    let (_, body) = signed_request("evt_local");
    let rejected = metrics::with_local_recorder(&counts, || {
        default_source().verify(http::HeaderMap::new(), body.into())
    });
    assert_eq!(rejected.unwrap_err().code(), "missing_header");
    assert_eq!(counts.get("missing_header"), 1);
}
