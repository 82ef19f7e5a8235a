//! A process frozen with requests in flight (SIGSTOP, as a VM pause or a starved host would),
//! then resumed (issue 32 item 2): what its partner answered meanwhile is read, not timed out,
//! and nothing the pause did is charged to the partner's circuit breaker.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::endpoint::NewEndpoint;
use kurir::store::{DeliveryQuery, Store};
use kurir_core::breaker::{Circuit, State};

use super::wait_all_sent;
use crate::on_both_backends;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, TestDb};

on_both_backends!(
    a_paused_process_reads_the_answers_that_came_during_the_pause,
    an_attempt_finished_past_its_lease_is_not_counted_in_the_breaker,
);

/// Requests in flight when the process freezes: more than the breaker's threshold.
const IN_FLIGHT: usize = 5;

/// `kurir serve` with a breaker that opens after 3 failures in a row and stays open a minute.
fn spawn(db: &TestDb, dir: &std::path::Path, request_timeout: &str, margin: &str) -> Kurir {
    let mut cmd = kurir_serve(&db.url, dir);
    cmd.env("KURIR_CONNECT_TIMEOUT", "200ms")
        .env("KURIR_REQUEST_TIMEOUT", request_timeout)
        .env("KURIR_LEASE_MARGIN", margin)
        .env("KURIR_CIRCUIT_FAILURE_THRESHOLD", "3")
        .env("KURIR_CIRCUIT_COOLDOWN", "60s");
    Kurir::spawn(cmd)
}

/// Freezes `kurir` with [`IN_FLIGHT`] requests held by `rx`, lets `rx` answer them (and any
/// later request) while it is frozen, keeps it frozen for `pause`, and resumes it.
async fn pause_with_answers_waiting(kurir: &Kurir, rx: &Receiver, pause: Duration) {
    rx.wait_until("the requests to be in flight", |_, open| open == IN_FLIGHT)
        .await;
    kurir.pause();
    rx.release(1000);
    rx.wait_until("the held requests to be answered", |_, open| open == 0)
        .await;
    // The fault itself: how long the process stays frozen.
    tokio::time::sleep(pause).await;
    kurir.resume();
}

/// Every attempt recorded so far, once there are at least `n`.
async fn attempts(store: &Store, n: usize) -> Vec<kurir::delivery::AttemptRecord> {
    eventually(&format!("{n} attempts to be recorded"), || async {
        let mut all = Vec::new();
        let query = DeliveryQuery {
            limit: 100,
            ..Default::default()
        };
        for d in store.list_deliveries(&query).await.ok()? {
            all.extend(store.attempts_for_delivery(d.delivery.id).await.ok()?);
        }
        (all.len() >= n).then_some(all)
    })
    .await
}

/// The endpoint's circuit as stored (closed with nothing counted when there is no row).
async fn circuit(store: &Store) -> Option<Circuit> {
    store
        .circuits()
        .await
        .unwrap()
        .into_iter()
        .next()
        .map(|c| c.circuit)
}

/// A 3 s pause, longer than the 1 s request timeout and well inside the 15 s lease: the answers
/// sitting in the process's sockets are read, each attempt takes its own few milliseconds, and
/// none is a timeout. (Before: every one was recorded as a 3 s timeout, and the breaker opened.)
async fn a_paused_process_reads_the_answers_that_came_during_the_pause(db: TestDb) {
    let rx = Receiver::holding().await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/paused")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kurir = spawn(&db, dir.path(), "1s", "10s");
    let ids = enqueue_events(&db.store, "order.paid", IN_FLIGHT).await;
    pause_with_answers_waiting(&kurir, &rx, Duration::from_secs(3)).await;
    let recorded = attempts(&db.store, IN_FLIGHT).await;
    for a in &recorded {
        assert_eq!(
            (a.status_code, a.error.as_deref()),
            (Some(200), None),
            "attempt {a:?} was answered 200 during the pause"
        );
        assert!(
            a.duration_ms < 1000,
            "the attempt's own time excludes the pause: {} ms",
            a.duration_ms
        );
    }
    wait_all_sent(&db.store, ids.len() as i64).await;
    let recorded = attempts(&db.store, IN_FLIGHT).await;
    assert_eq!(recorded.len(), IN_FLIGHT, "nothing was sent twice");
    assert_eq!(rx.requests().len(), IN_FLIGHT);
    if let Some(c) = circuit(&db.store).await {
        assert_eq!((c.state, c.consecutive_failures), (State::Closed, 0));
    }
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}

/// A 7 s pause, past the 5.8 s lease, while the partner answers 500 to the requests in flight:
/// the late failures are recorded (fenced out of the deliveries' state), and then retried, but
/// they do not open the breaker: the partner was not down, the process was frozen. (Before: the
/// five late failures opened it, and the endpoint got nothing for a minute.)
async fn an_attempt_finished_past_its_lease_is_not_counted_in_the_breaker(db: TestDb) {
    let rx = Receiver::holding_scripted(|n, _| {
        if n < IN_FLIGHT {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/late")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kurir = spawn(&db, dir.path(), "1s", "1s");
    let ids = enqueue_events(&db.store, "order.paid", IN_FLIGHT).await;
    pause_with_answers_waiting(&kurir, &rx, Duration::from_secs(7)).await;
    let failed = attempts(&db.store, IN_FLIGHT).await;
    assert!(
        failed.iter().any(|a| a.status_code == Some(500)),
        "the answers during the pause were recorded: {failed:?}"
    );
    // Either every delivery is retried and sent, or the breaker opened and holds them.
    let opened = eventually("every delivery sent, or the breaker open", || async {
        let open = circuit(&db.store)
            .await
            .filter(|c| c.state != State::Closed);
        if open.is_some() {
            return Some(open);
        }
        let sent = db.store.count_deliveries_by_status().await.ok()?;
        let sent = sent
            .iter()
            .find(|(s, _)| s == "sent")
            .map_or(0, |(_, n)| *n);
        (sent == ids.len() as i64).then_some(None)
    })
    .await;
    assert!(
        opened.is_none(),
        "the late failures opened the breaker: {opened:?}"
    );
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}
