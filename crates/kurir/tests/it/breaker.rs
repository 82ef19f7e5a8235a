//! The circuit breaker with real receivers (issue 15): a failing endpoint's breaker opens after
//! its threshold, at most one probe per cool-down reaches the receiver, nothing is charged an
//! attempt while it is open, and once the receiver recovers every event is delivered, none
//! dead-lettered; with several processes on one database, they share one breaker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::config::DeliveryConfig;
use kurir::endpoint::{Endpoint, NewEndpoint};
use kurir::store::Store;
use kurir_core::breaker::State;

use crate::on_both_backends;
use crate::support::dispatcher::Process;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, Backend, TestDb};

on_both_backends!(
    a_failing_endpoint_is_probed_once_per_cooldown_and_loses_nothing,
    processes_sharing_a_database_share_one_breaker,
    an_endpoint_failing_for_the_disable_period_is_disabled_and_keeps_its_deliveries,
    an_open_breaker_stays_open_across_a_restart,
    an_open_breaker_survives_a_sigkill_of_the_binary,
);

/// A receiver answering 500 while `down` is set, 200 otherwise.
async fn switchable(down: &Arc<AtomicBool>) -> Receiver {
    let down = down.clone();
    Receiver::scripted(move |_, _| {
        if down.load(Ordering::SeqCst) {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await
}

async fn guarded(store: &Store, url: String, threshold: u32, cooldown_ms: u64) -> Endpoint {
    let mut new = NewEndpoint::new(url);
    new.overrides.circuit_failure_threshold = Some(threshold);
    new.overrides.circuit_cooldown_ms = Some(cooldown_ms);
    new.max_in_flight = Some(1);
    store.create_endpoint(new).await.unwrap()
}

/// Test settings with retries far apart, so a delivery is retried within the test only when
/// the breaker lets it (and a long outage cannot use up its attempts).
fn config() -> DeliveryConfig {
    let mut c = test_delivery_config();
    c.retry.initial_delay = Duration::from_millis(50);
    c.retry.max_delay = Duration::from_millis(50);
    c
}

/// Sum of every delivery's `attempt_count`: the attempts charged.
async fn charged(store: &Store) -> i64 {
    let sql = "SELECT CAST(COALESCE(SUM(attempt_count), 0) AS BIGINT) FROM kurir_deliveries";
    match store {
        Store::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p.pool()).await,
        Store::Sqlite(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await,
        // MySQL casts to SIGNED, not BIGINT.
        Store::Mysql(m) => {
            sqlx::query_scalar(&sql.replace("BIGINT", "SIGNED"))
                .fetch_one(m.pool())
                .await
        }
    }
    .unwrap()
}

async fn count_in(store: &Store, status: &str) -> i64 {
    let counts = store.count_deliveries_by_status().await.unwrap();
    counts
        .into_iter()
        .find(|(s, _)| s == status)
        .map_or(0, |(_, n)| n)
}

async fn circuit_state(store: &Store, e: &Endpoint) -> Option<(State, u32)> {
    let c = store.circuit(e.id.as_str()).await.unwrap()?.circuit;
    Some((c.state, c.reopens))
}

async fn a_failing_endpoint_is_probed_once_per_cooldown_and_loses_nothing(db: TestDb) {
    let down = Arc::new(AtomicBool::new(true));
    let receiver = switchable(&down).await;
    let cooldown = Duration::from_millis(300);
    let e = guarded(&db.store, receiver.url("/hook"), 3, 300).await;
    enqueue_events(&db.store, "order.paid", 20).await;
    db.store.relay_batch(100).await.unwrap();
    let process = Process::start(&db.store, config(), "only");
    // Three failures open it; then two probes fail, each after a cool-down twice the last.
    eventually("the breaker to re-open twice", || async {
        circuit_state(&db.store, &e)
            .await
            .filter(|&(s, reopens)| s == State::Open && reopens >= 2)
    })
    .await;
    let requests = receiver.requests();
    let times: Vec<Duration> = requests.iter().map(|r| r.at - requests[0].at).collect();
    assert_eq!(
        requests.len(),
        5,
        "three failures, then one probe per cool-down: {times:?}"
    );
    for (k, pair) in requests[2..].windows(2).enumerate() {
        let gap = pair[1].at - pair[0].at;
        let cooled = cooldown * 2u32.pow(k as u32);
        assert!(
            gap >= cooled,
            "probe {k} came {gap:?} after, within {cooled:?}"
        );
    }
    assert_eq!(
        charged(&db.store).await,
        5,
        "only the attempts made are charged"
    );
    down.store(false, Ordering::SeqCst);
    eventually("every event to be delivered", || async {
        (count_in(&db.store, "sent").await == 20).then_some(())
    })
    .await;
    assert_eq!(count_in(&db.store, "dead_letter").await, 0);
    let (state, _) = circuit_state(&db.store, &e).await.unwrap();
    assert_eq!(state, State::Closed);
    process.stop().await;
}

async fn processes_sharing_a_database_share_one_breaker(db: TestDb) {
    if db.backend == Backend::Sqlite {
        return; // one process per SQLite file
    }
    let down = Arc::new(AtomicBool::new(true));
    let receiver = switchable(&down).await;
    let (threshold, max_in_flight) = (3, 2);
    let mut new = NewEndpoint::new(receiver.url("/hook"));
    new.overrides.circuit_failure_threshold = Some(threshold);
    new.overrides.circuit_cooldown_ms = Some(200);
    new.max_in_flight = Some(max_in_flight);
    let e = db.store.create_endpoint(new).await.unwrap();
    enqueue_events(&db.store, "order.paid", 60).await;
    db.store.relay_batch(100).await.unwrap();
    let processes: Vec<Process> = (0..3)
        .map(|i| Process::start(&db.store, config(), &format!("p{i}")))
        .collect();
    eventually("the breaker to re-open three times", || async {
        circuit_state(&db.store, &e)
            .await
            .filter(|&(s, reopens)| s == State::Open && reopens >= 3)
    })
    .await;
    let probes: f64 = processes
        .iter()
        .map(|p| {
            p.counter(&format!(
                "kurir_circuit_transitions_total{{endpoint_id=\"{}\",from=\"open\",to=\"half_open\"}}",
                e.id
            ))
        })
        .sum();
    assert_eq!(probes, 3.0, "one probe per cool-down across the processes");
    // Before the open, each process may have had its own threshold of failures and its
    // requests in flight; after it, only the probes.
    let sent = receiver.requests().len();
    let bound = 3 * (threshold + max_in_flight) as usize + 3;
    assert!(
        sent <= bound,
        "{sent} requests while failing, more than {bound}"
    );
    // Every request is charged as an attempt. The processes go on probing once per cool-down,
    // so the two counts are compared when no probe fell between reading them.
    eventually("every request to be charged as an attempt", || async {
        let before = receiver.requests().len();
        let charged = charged(&db.store).await;
        (before == receiver.requests().len() && charged == before as i64).then_some(())
    })
    .await;
    down.store(false, Ordering::SeqCst);
    eventually("every event to be delivered", || async {
        (count_in(&db.store, "sent").await == 60).then_some(())
    })
    .await;
    assert_eq!(count_in(&db.store, "dead_letter").await, 0);
    for p in processes {
        p.stop().await;
    }
}

/// Issue 15, auto-disable: an endpoint whose attempts have all failed for
/// `KURIR_ENDPOINT_DISABLE_AFTER` is disabled with a reason; its deliveries stay pending.
async fn an_endpoint_failing_for_the_disable_period_is_disabled_and_keeps_its_deliveries(
    db: TestDb,
) {
    let down = Arc::new(AtomicBool::new(true));
    let receiver = switchable(&down).await;
    let e = guarded(&db.store, receiver.url("/hook"), 2, 50).await;
    enqueue_events(&db.store, "order.paid", 5).await;
    db.store.relay_batch(100).await.unwrap();
    let config = DeliveryConfig {
        endpoint_disable_after: Duration::from_millis(600),
        ..config()
    };
    let process = Process::start(&db.store, config, "only");
    let disabled = eventually("the endpoint to be disabled", || async {
        let e = db.store.get_endpoint(&e.id).await.unwrap().unwrap();
        (!e.enabled).then_some(e)
    })
    .await;
    let reason = disabled.disabled_reason.unwrap_or_default();
    assert!(reason.contains("no successful attempt since"), "{reason}");
    let line = format!(
        "kurir_endpoints_auto_disabled_total{{endpoint_id=\"{}\"}}",
        e.id
    );
    // The process counts the disable once its UPDATE has committed, a moment after the row
    // reads disabled.
    eventually("the auto-disable to be counted", || async {
        (process.counter(&line) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(process.counter(&line), 1.0);
    let seen = receiver.requests().len();
    // Disabled: nothing more is sent, nothing is dead-lettered, all five still wait.
    down.store(false, Ordering::SeqCst);
    assert_eq!(count_in(&db.store, "dead_letter").await, 0);
    assert_eq!(count_in(&db.store, "sent").await, 0);
    process.stop().await;
    assert_eq!(receiver.requests().len(), seen);
    assert_eq!(
        count_in(&db.store, "pending").await + count_in(&db.store, "failed").await,
        5
    );
}

/// Issue 15, restarts: the breaker lives in the database, so a process started after another
/// stopped while it was open neither sends nor charges anything until the cool-down is over,
/// and then probes once.
async fn an_open_breaker_stays_open_across_a_restart(db: TestDb) {
    let down = Arc::new(AtomicBool::new(true));
    let receiver = switchable(&down).await;
    let e = guarded(&db.store, receiver.url("/hook"), 3, 400).await;
    enqueue_events(&db.store, "order.paid", 10).await;
    db.store.relay_batch(100).await.unwrap();
    let first = Process::start(&db.store, config(), "first");
    eventually("the breaker to open", || async {
        circuit_state(&db.store, &e)
            .await
            .filter(|&(s, _)| s == State::Open)
    })
    .await;
    first.stop().await;
    assert_eq!(receiver.requests().len(), 3);
    let second = Process::start(&db.store, config(), "second");
    eventually("the restarted process to probe and re-open", || async {
        circuit_state(&db.store, &e)
            .await
            .filter(|&(s, reopens)| s == State::Open && reopens >= 1)
    })
    .await;
    let requests = receiver.requests();
    assert_eq!(requests.len(), 4, "one probe after the restart");
    assert!(requests[3].at - requests[2].at >= Duration::from_millis(400));
    assert_eq!(charged(&db.store).await, 4);
    down.store(false, Ordering::SeqCst);
    eventually("every event to be delivered", || async {
        (count_in(&db.store, "sent").await == 10).then_some(())
    })
    .await;
    second.stop().await;
}

/// Issue 15, restarts with a crash: the real binary is killed with SIGKILL while the breaker is
/// open, and another is started on the same database. The breaker lives in the database, so the
/// new process goes on probing at most once per cool-down (never sooner, even after a probe the
/// kill cut short), charges nothing while it is open, and once the receiver recovers delivers
/// everything, dead-lettering nothing.
async fn an_open_breaker_survives_a_sigkill_of_the_binary(db: TestDb) {
    let down = Arc::new(AtomicBool::new(true));
    let receiver = switchable(&down).await;
    let cooldown = Duration::from_millis(300);
    let e = guarded(&db.store, receiver.url("/hook"), 3, 300).await;
    enqueue_events(&db.store, "order.paid", 20).await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = Kurir::spawn(kurir_serve(&db.url, dir.path()));
    eventually("the breaker to open and re-open once", || async {
        circuit_state(&db.store, &e)
            .await
            .filter(|&(s, reopens)| s == State::Open && reopens >= 1)
    })
    .await;
    first.kill().await;
    let mut second = Kurir::spawn(kurir_serve(&db.url, dir.path()));
    let reopens = eventually("the restarted binary to re-open it twice more", || async {
        circuit_state(&db.store, &e)
            .await
            .filter(|&(s, reopens)| s == State::Open && reopens >= 3)
            .map(|(_, reopens)| reopens)
    })
    .await;
    let requests = receiver.requests();
    assert_eq!(
        requests.len(),
        3 + reopens as usize,
        "three failures, then one failed probe per re-open"
    );
    for pair in requests[2..].windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= cooldown, "a probe came {gap:?} after the one before");
    }
    // A probe the kill cut short before it was sent was charged and never reached the receiver.
    let charged = charged(&db.store).await;
    let sent = requests.len() as i64;
    assert!(
        (sent..=sent + 1).contains(&charged),
        "{charged} attempts charged for {sent} requests"
    );
    down.store(false, Ordering::SeqCst);
    eventually("every event to be delivered", || async {
        (count_in(&db.store, "sent").await == 20).then_some(())
    })
    .await;
    assert_eq!(count_in(&db.store, "dead_letter").await, 0);
    second.terminate().await;
}
