//! `GET /metrics`: after a scripted run every counter equals what the database recorded; the
//! backlog gauges come from the database, so two processes sharing one agree with it and with
//! each other; the token requirement.

use std::collections::{BTreeMap, HashSet};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::delivery::{AttemptRecord, DeliveryRecord, DeliveryStatus};
use kurir::endpoint::{Endpoint, EventFilter, NewEndpoint, Overrides};
use kurir::store::{DeliveryQuery, Store};

use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, TestDb, TestServer};
use crate::{on_both_backends, on_shared_servers};

on_both_backends!(
    after_a_scripted_run_every_counter_equals_the_database,
    relay_reports_events_per_type,
);
on_shared_servers!(two_processes_on_one_database_agree_on_the_backlog);

/// One sample line of the Prometheus text format.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape, parsed.
struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// Parses `text`, failing on any line that is not a comment or `name{labels} value`, and on a
    /// sample whose family has no `# TYPE` line before it.
    fn parse(text: String) -> Self {
        let mut typed = HashSet::new();
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.insert(rest.split(' ').next().unwrap().to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').unwrap())),
                None => (series, BTreeMap::new()),
            };
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "no # TYPE for {name}");
            samples.push(Sample {
                name: name.to_owned(),
                labels,
                value,
            });
        }
        Self { text, samples }
    }

    /// The sum of the samples named `name` whose labels include `labels` (0 when none).
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// Every value the label `label` takes on samples named `name`.
    fn label_values(&self, name: &str, label: &str) -> HashSet<String> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter_map(|s| s.labels.get(label).cloned())
            .collect()
    }
}

/// `k="v",k2="v2"` with `\"`, `\\` and `\n` escapes.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "label {key} is quoted");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => panic!("dangling escape"),
                },
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').to_owned(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    labels
}

async fn scrape(addr: std::net::SocketAddr) -> Scrape {
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    Scrape::parse(response.text().await.unwrap())
}

async fn add(store: &Store, url: String, filter: &[&str], overrides: Overrides) -> Endpoint {
    let mut new = NewEndpoint::new(url);
    new.event_types = EventFilter::parse(filter.iter().map(|s| s.to_string()).collect()).unwrap();
    new.overrides = overrides;
    store.create_endpoint(new).await.unwrap()
}

/// Every delivery with its attempts, as the database has them.
async fn recorded(store: &Store) -> Vec<(DeliveryRecord, Vec<AttemptRecord>)> {
    let query = DeliveryQuery {
        limit: 10_000,
        ..Default::default()
    };
    let mut all = Vec::new();
    for item in store.list_deliveries(&query).await.unwrap() {
        let attempts = store.attempts_for_delivery(item.delivery.id).await.unwrap();
        all.push((item.delivery, attempts));
    }
    all
}

/// The `outcome` an attempt is counted under, from what the database recorded.
fn outcome(d: &DeliveryRecord, a: &AttemptRecord) -> &'static str {
    let error = a.error.as_deref().unwrap_or("");
    if a.status_code.is_some_and(|c| (200..300).contains(&c)) {
        "sent"
    } else if d.status == DeliveryStatus::DeadLetter && a.attempt == d.attempt_count {
        "dead_letter"
    } else if error.starts_with("refused by the SSRF guard") {
        "refused"
    } else {
        "retry"
    }
}

/// The `status_class` an attempt is counted under, from what the database recorded.
fn status_class(a: &AttemptRecord) -> String {
    let error = a.error.as_deref().unwrap_or("");
    match a.status_code {
        Some(code) => format!("{}xx", code / 100),
        None if error.starts_with("timeout") => "timeout".into(),
        None if error.starts_with("connect error") => "connect_error".into(),
        None if error.starts_with("refused by the SSRF guard") => "refused".into(),
        None => "request_error".into(),
    }
}

/// Successes, retries, dead letters (after retries, and at once on 410), a refused destination, a
/// timeout, a closed port, and a delivery left waiting for a far-off retry.
async fn after_a_scripted_run_every_counter_equals_the_database(db: TestDb) {
    let ok = Receiver::ok().await;
    let flaky = Receiver::scripted(|n, _| {
        if n < 2 {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await;
    let down = Receiver::scripted(|_, _| StatusCode::BAD_GATEWAY.into_response()).await;
    let gone = Receiver::scripted(|_, _| StatusCode::GONE.into_response()).await;
    let busy = Receiver::scripted(|_, _| StatusCode::SERVICE_UNAVAILABLE.into_response()).await;
    let silent = Receiver::holding().await;
    // Port 1 is outside the ephemeral range, so no receiver of a parallel test can be there.
    let closed_port = 1;
    let once = Overrides {
        retry_max_attempts: Some(1),
        ..Default::default()
    };
    let s = &db.store;
    let none = Overrides::default();
    add(s, ok.url("/ok"), &[], none.clone()).await;
    add(s, flaky.url("/flaky"), &["order.*"], none.clone()).await;
    add(s, down.url("/down"), &["order.*"], none.clone()).await;
    add(s, gone.url("/gone"), &["user.created"], none.clone()).await;
    let refused_url = format!("http://127.0.0.2:{}/refused", ok.addr.port());
    add(s, refused_url, &["user.created"], none.clone()).await;
    let timeout = Overrides {
        request_timeout_ms: Some(200),
        ..once.clone()
    };
    add(s, silent.url("/silent"), &["user.created"], timeout).await;
    let closed = format!("http://127.0.0.1:{closed_port}/closed");
    add(s, closed, &["user.created"], once).await;
    let later = Overrides {
        retry_initial_delay_ms: Some(600_000),
        retry_max_delay_ms: Some(600_000),
        ..Default::default()
    };
    add(s, busy.url("/busy"), &["user.created"], later).await;
    let mut event_ids = enqueue_events(s, "order.paid", 2).await;
    event_ids.extend(enqueue_events(s, "user.created", 1).await);

    let mut config = test_delivery_config();
    config.retry.max_attempts = 3;
    // 127.0.0.2 is loopback too, but outside the allowed network: the guard refuses it.
    config.allowed_networks = kurir::config::parse_networks("127.0.0.1/32").unwrap();
    let server = TestServer::start(&db, config).await;
    eventually("every delivery to settle", || async {
        let counts: BTreeMap<String, i64> = s
            .count_deliveries_by_status()
            .await
            .unwrap()
            .into_iter()
            .collect();
        let n = |status: &str| counts.get(status).copied().unwrap_or(0);
        (n("sent") + n("dead_letter") == 11 && n("failed") == 1 && n("pending") == 0).then_some(())
    })
    .await;
    let before = chrono::Utc::now();
    let metrics = scrape(server.addr).await;
    let after = chrono::Utc::now();
    let deliveries = recorded(s).await;
    server.stop().await;

    let mut endpoints = HashSet::new();
    let (mut sent_attempts, mut sent_attempt_sum, mut all_attempts) = (0.0, 0.0, 0.0);
    for (d, attempts) in &deliveries {
        endpoints.insert(d.endpoint_id.clone());
        all_attempts += attempts.len() as f64;
        for a in attempts.iter().filter(|a| outcome(d, a) == "sent") {
            sent_attempts += 1.0;
            sent_attempt_sum += f64::from(a.attempt);
        }
    }
    for endpoint in &endpoints {
        let attempts: Vec<(&DeliveryRecord, &AttemptRecord)> = deliveries
            .iter()
            .filter(|(d, _)| &d.endpoint_id == endpoint)
            .flat_map(|(d, attempts)| attempts.iter().map(move |a| (d, a)))
            .collect();
        let e = ("endpoint_id", endpoint.as_str());
        for o in ["sent", "retry", "dead_letter", "refused"] {
            let want = attempts.iter().filter(|(d, a)| outcome(d, a) == o).count();
            let got = metrics.sum("kurir_deliveries_total", &[e, ("outcome", o)]);
            assert_eq!(
                got, want as f64,
                "kurir_deliveries_total{{{endpoint}, {o}}}"
            );
        }
        let mut classes: BTreeMap<String, usize> = BTreeMap::new();
        for (_, a) in &attempts {
            *classes.entry(status_class(a)).or_default() += 1;
        }
        for (class, want) in &classes {
            let got = metrics.sum("kurir_http_responses_total", &[e, ("status_class", class)]);
            assert_eq!(
                got, *want as f64,
                "kurir_http_responses_total{{{endpoint}, {class}}}"
            );
        }
        let durations = "kurir_delivery_attempt_duration_seconds";
        let count = metrics.sum(&format!("{durations}_count"), &[e]);
        assert_eq!(
            count,
            attempts.len() as f64,
            "{durations}_count of {endpoint}"
        );
        let want: f64 = attempts
            .iter()
            .map(|(_, a)| a.duration_ms as f64 / 1000.0)
            .sum();
        let got = metrics.sum(&format!("{durations}_sum"), &[e]);
        assert!(
            (got - want).abs() < 1e-6,
            "{durations}_sum of {endpoint}: {got} != {want}"
        );
        let sent = attempts
            .iter()
            .filter(|(d, a)| outcome(d, a) == "sent")
            .count();
        let latency = metrics.sum("kurir_delivery_latency_seconds_count", &[e]);
        assert_eq!(latency, sent as f64, "one latency per delivered attempt");
    }
    // Nothing counted that the database does not have.
    assert_eq!(metrics.sum("kurir_deliveries_total", &[]), all_attempts);
    assert_eq!(metrics.sum("kurir_http_responses_total", &[]), all_attempts);
    assert_eq!(
        metrics.label_values("kurir_deliveries_total", "endpoint_id"),
        endpoints
    );
    for class in ["2xx", "5xx", "4xx", "refused", "timeout", "connect_error"] {
        assert!(
            metrics.sum("kurir_http_responses_total", &[("status_class", class)]) >= 1.0,
            "the script produced a {class}"
        );
    }
    for o in ["sent", "retry", "dead_letter", "refused"] {
        assert!(
            metrics.sum("kurir_deliveries_total", &[("outcome", o)]) >= 1.0,
            "{o}"
        );
    }
    assert_eq!(
        metrics.sum("kurir_delivery_attempts_at_success_count", &[]),
        sent_attempts
    );
    assert_eq!(
        metrics.sum("kurir_delivery_attempts_at_success_sum", &[]),
        sent_attempt_sum
    );

    let events = s
        .list_events(&kurir::store::EventQuery {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    for event_type in ["order.paid", "user.created"] {
        let want = events.iter().filter(|e| e.event_type == event_type).count();
        let got = metrics.sum("kurir_events_enqueued_total", &[("event_type", event_type)]);
        assert_eq!(
            got, want as f64,
            "kurir_events_enqueued_total{{{event_type}}}"
        );
    }
    assert_eq!(metrics.sum("kurir_events_enqueued_total", &[]), 3.0);

    // The backlog: the delivery waiting for its far-off retry.
    let waiting: Vec<&DeliveryRecord> = deliveries
        .iter()
        .map(|(d, _)| d)
        .filter(|d| d.status == DeliveryStatus::Failed)
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(metrics.sum("kurir_backlog", &[("status", "failed")]), 1.0);
    assert_eq!(metrics.sum("kurir_backlog", &[("status", "pending")]), 0.0);
    assert_eq!(
        metrics.sum("kurir_backlog", &[("status", "processing")]),
        0.0
    );
    let age = metrics.sum("kurir_oldest_pending_age_seconds", &[]);
    let created = waiting[0].created_at;
    let low = (before - created).num_milliseconds() as f64 / 1000.0 - 0.01;
    let high = (after - created).num_milliseconds() as f64 / 1000.0 + 0.01;
    assert!(
        low <= age && age <= high,
        "oldest pending age {age} in [{low}, {high}]"
    );
    assert_eq!(metrics.sum("kurir_outbox_undispatched", &[]), 0.0);

    // Bounded labels: endpoint ids, never URLs or event ids.
    assert!(!metrics.text.contains("127.0.0."), "no URL in labels");
    for id in &event_ids {
        assert!(!metrics.text.contains(id.as_str()), "no event id in labels");
    }
    drop(silent);
}

/// The relay reports how many events of each type it fanned out, so SQL inserts are counted.
async fn relay_reports_events_per_type(db: TestDb) {
    let s = &db.store;
    enqueue_events(s, "order.paid", 3).await;
    enqueue_events(s, "user.created", 1).await;
    let outcome = s.relay_batch(100).await.unwrap();
    assert_eq!(outcome.events, 4);
    let by_type: Vec<(&str, u64)> = outcome
        .events_by_type
        .iter()
        .map(|(t, n)| (t.as_str(), *n))
        .collect();
    assert_eq!(by_type, [("order.paid", 3), ("user.created", 1)]);
    assert!(s.relay_batch(100).await.unwrap().events_by_type.is_empty());
}

/// Seconds since the oldest delivery in the backlog was created, by the database's clock.
async fn oldest_backlog_age(store: &Store) -> f64 {
    const PG: &str = "SELECT EXTRACT(EPOCH FROM now() - min(created_at))::float8 \
        FROM kurir_deliveries WHERE status IN ('pending', 'processing', 'failed')";
    const MYSQL: &str = "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), \
        UTC_TIMESTAMP(6)) / 1000000 AS DOUBLE) \
        FROM kurir_deliveries WHERE status IN ('pending', 'processing', 'failed')";
    match store {
        Store::Postgres(pg) => sqlx::query_scalar(PG).fetch_one(pg.pool()).await,
        Store::Mysql(my) => sqlx::query_scalar(MYSQL).fetch_one(my.pool()).await,
        Store::Sqlite(_) => unreachable!("on_shared_servers runs on servers only"),
    }
    .unwrap()
}

/// Two kurir processes on one PostgreSQL or MySQL database: while deliveries are failed (a retry
/// far off), processing (held open by the receiver) and pending (the endpoint has no room), both
/// report the backlog the database has.
async fn two_processes_on_one_database_agree_on_the_backlog(db: TestDb) {
    let failing =
        Receiver::scripted(|_, _| StatusCode::INTERNAL_SERVER_ERROR.into_response()).await;
    let held = Receiver::holding().await;
    let later = Overrides {
        retry_initial_delay_ms: Some(600_000),
        retry_max_delay_ms: Some(600_000),
        ..Default::default()
    };
    add(&db.store, failing.url("/failing"), &[], later).await;
    let mut one_at_a_time = NewEndpoint::new(held.url("/held"));
    one_at_a_time.max_in_flight = Some(1);
    db.store.create_endpoint(one_at_a_time).await.unwrap();
    enqueue_events(&db.store, "order.paid", 5).await;

    let a = TestServer::start(&db, test_delivery_config()).await;
    let b = TestServer::start(&db, test_delivery_config()).await;
    // One delivery held open by each process; the other three wait for room.
    held.wait_until("one request held per process", |_, open| open == 2)
        .await;
    eventually("the backlog to settle", || async {
        let counts = db.store.count_deliveries_by_status().await.unwrap();
        let want = [("failed", 5), ("pending", 3), ("processing", 2)];
        let want: Vec<(String, i64)> = want.iter().map(|(s, n)| (s.to_string(), *n)).collect();
        (counts == want).then_some(())
    })
    .await;

    let low = oldest_backlog_age(&db.store).await;
    let scrapes = [scrape(a.addr).await, scrape(b.addr).await];
    let high = oldest_backlog_age(&db.store).await;
    for (process, m) in ["a", "b"].iter().zip(&scrapes) {
        for (status, n) in [("failed", 5.0), ("pending", 3.0), ("processing", 2.0)] {
            let got = m.sum("kurir_backlog", &[("status", status)]);
            assert_eq!(got, n, "process {process}: kurir_backlog{{{status}}}");
        }
        let age = m.sum("kurir_oldest_pending_age_seconds", &[]);
        assert!(
            low <= age && age <= high,
            "process {process}: age {age} in [{low}, {high}]"
        );
        assert_eq!(m.sum("kurir_outbox_undispatched", &[]), 0.0);
    }
    // Each process counts only its own attempts; together they made all of them.
    let attempts: f64 = scrapes
        .iter()
        .map(|m| m.sum("kurir_deliveries_total", &[]))
        .sum();
    let recorded: usize = recorded(&db.store).await.iter().map(|(_, a)| a.len()).sum();
    assert_eq!(attempts, recorded as f64);

    held.release(1000);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_require_the_admin_token() {
    use crate::api::support::{Backend, TestApp, TestDb, TOKEN};
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let open = TestApp::spawn(&database).await;
    let anonymous = reqwest::get(format!("{}/metrics", open.url)).await.unwrap();
    assert_eq!(anonymous.status(), 200, "open by default");
    open.stopper().stop().await;

    let guarded = TestApp::spawn_with(&database, &[("metrics_require_token", "true")]).await;
    let anonymous = reqwest::get(format!("{}/metrics", guarded.url))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let client = reqwest::Client::new();
    let wrong = client
        .get(format!("{}/metrics", guarded.url))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let with_token = client
        .get(format!("{}/metrics", guarded.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), 200);
    assert!(with_token.text().await.unwrap().contains("kurir_backlog"));
    guarded.stopper().stop().await;
}
