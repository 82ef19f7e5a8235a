//! Crash safety and scale-out with the real `kurir` binary: SIGKILL mid-delivery loses nothing,
//! SIGTERM drains and exits 0, and several processes on one PostgreSQL database share the work.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::delivery::DeliveryStatus;
use kurir::endpoint::NewEndpoint;
use kurir::store::Store;

use crate::on_both_backends;
use crate::support::process::free_port;
use crate::support::receiver::{Receiver, Recorded};
use crate::support::{enqueue_events, eventually, eventually_within, TestDb};

on_both_backends!(
    sigkill_mid_delivery_loses_no_event,
    sigterm_lets_requests_in_flight_finish_and_exits_zero,
    an_answer_the_database_cannot_store_wedges_nothing,
);

/// A `kurir serve` child process, killed when dropped so a failing test leaves none behind.
struct Kurir(Child);

impl std::ops::Deref for Kurir {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Kurir {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Kurir {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the process listening on `port` answers `/readyz` (its relay and dispatcher
/// run before it listens).
async fn wait_ready(port: u16) {
    let client = reqwest::Client::new();
    eventually("kurir to answer /readyz", || async {
        let ready = client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .ok()?;
        ready.status().is_success().then_some(())
    })
    .await;
}

/// The real binary against `db`, with short leases and retries so recovery is quick.
fn spawn_kurir(db: &TestDb, data_dir: &std::path::Path) -> Kurir {
    spawn_kurir_with(db, data_dir, &[])
}

/// [`spawn_kurir`] with settings of its own on top.
fn spawn_kurir_with(db: &TestDb, data_dir: &std::path::Path, own: &[(&str, &str)]) -> Kurir {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kurir"));
    for (k, _) in std::env::vars() {
        if k.starts_with("KURIR_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("serve")
        .env("KURIR_DATABASE_URL", &db.url)
        .env("KURIR_DATA_DIR", data_dir)
        .env("KURIR_LISTEN", "127.0.0.1:0")
        .env("KURIR_ADMIN_TOKEN", "crash-test-token")
        .env("KURIR_ALLOWED_NETWORKS", "127.0.0.0/8")
        .env("KURIR_CONNECT_TIMEOUT", "1s")
        .env("KURIR_REQUEST_TIMEOUT", "2s")
        .env("KURIR_LEASE_MARGIN", "1s")
        .env("KURIR_RETRY_INITIAL_DELAY", "20ms")
        .env("KURIR_RETRY_MAX_DELAY", "200ms")
        .env("KURIR_RETRY_JITTER", "0")
        .env("KURIR_POLL_INTERVAL", "10ms")
        // Off, as in `test_delivery_config`: these tests count attempts to failing receivers.
        .env("KURIR_CIRCUIT_FAILURE_THRESHOLD", "0")
        .env("KURIR_LOG", "warn")
        .envs(own.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Kurir)
        .expect("start kurir")
}

async fn count_status(store: &Store, status: DeliveryStatus) -> i64 {
    let counts = store.count_deliveries_by_status().await.unwrap();
    counts
        .iter()
        .find(|(s, _)| s == status.as_str())
        .map_or(0, |(_, n)| *n)
}

async fn wait_all_sent(store: &Store, n: i64) {
    eventually(&format!("{n} deliveries to be sent"), || async {
        (count_status(store, DeliveryStatus::Sent).await == n).then_some(())
    })
    .await
}

/// Receipts per event id.
fn receipts(requests: &[Recorded]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in requests {
        *seen.entry(r.event_id()).or_default() += 1;
    }
    seen
}

async fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    eventually("kurir to exit", || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await
}

/// A receiver that holds every request open until released, one endpoint pointing at it, and
/// `n` events enqueued for it; plus a data directory for the kurir processes.
async fn held_receiver_with_events(
    db: &TestDb,
    n: usize,
) -> (tempfile::TempDir, Receiver, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::holding().await;
    let endpoint = NewEndpoint::new(rx.url("/held"));
    db.store.create_endpoint(endpoint).await.unwrap();
    let ids = enqueue_events(&db.store, "order.paid", n).await;
    (dir, rx, ids)
}

async fn sigkill_mid_delivery_loses_no_event(db: TestDb) {
    let (dir, rx, ids) = held_receiver_with_events(&db, 40).await;

    let mut first = spawn_kurir(&db, dir.path());
    // max_in_flight defaults to 16: that many requests are open when the process dies.
    rx.wait_until("16 requests held open", |_, open| open == 16)
        .await;
    first.kill().unwrap();
    first.wait().unwrap();
    rx.release(1_000_000);

    let mut second = spawn_kurir(&db, dir.path());
    wait_all_sent(&db.store, ids.len() as i64).await;
    second.kill().unwrap();
    second.wait().unwrap();

    let seen = receipts(&rx.requests());
    for id in &ids {
        assert!(seen.contains_key(id), "event {id} was never delivered");
    }
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    eprintln!(
        "sigkill: {} events, {} received twice or more (in flight at the kill: 16)",
        ids.len(),
        duplicates
    );
    assert!(
        duplicates <= 16,
        "only requests in flight at the kill may repeat, got {duplicates}"
    );
}

async fn sigterm_lets_requests_in_flight_finish_and_exits_zero(db: TestDb) {
    let (dir, rx, ids) = held_receiver_with_events(&db, 3).await;
    let mut child = spawn_kurir(&db, dir.path());
    rx.wait_until("3 requests held open", |_, open| open == 3)
        .await;

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    rx.release(3);
    let status = wait_exit(&mut child).await;
    assert!(status.success(), "graceful shutdown exits 0, got {status}");
    for id in &ids {
        let d = &db.store.deliveries_for_event(id).await.unwrap()[0];
        assert_eq!(
            d.status,
            DeliveryStatus::Sent,
            "the request in flight was finished and recorded"
        );
    }
    assert_eq!(rx.requests().len(), 3, "nothing was sent twice");
}

/// Issue 11, item 1: a receiver answering `500` with NUL bytes (and bytes that are not UTF-8) in
/// its body, beside a healthy one. PostgreSQL's `text` refuses NUL, and the completion batch
/// holding that attempt used to be retried forever: nothing was recorded for any endpoint, the
/// healthy endpoint got every event again after each lease expiry, and SIGTERM never finished.
async fn an_answer_the_database_cannot_store_wedges_nothing(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let bad = Receiver::scripted(|_, _| {
        (StatusCode::INTERNAL_SERVER_ERROR, &b"\x00\x00bad\xff"[..]).into_response()
    })
    .await;
    let good = Receiver::ok().await;
    let mut unstorable = NewEndpoint::new(bad.url("/nul"));
    unstorable.overrides.retry_max_attempts = Some(1);
    let unstorable = db.store.create_endpoint(unstorable).await.unwrap();
    db.store
        .create_endpoint(NewEndpoint::new(good.url("/ok")))
        .await
        .unwrap();
    let ids = enqueue_events(&db.store, "order.paid", 20).await;

    let mut child = spawn_kurir(&db, dir.path());
    eventually("every delivery to be recorded", || async {
        let done = count_status(&db.store, DeliveryStatus::Sent).await
            + count_status(&db.store, DeliveryStatus::DeadLetter).await;
        (done == 2 * ids.len() as i64).then_some(())
    })
    .await;
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = wait_exit(&mut child).await;
    assert!(status.success(), "graceful shutdown exits 0, got {status}");

    let seen = receipts(&good.requests());
    assert_eq!(
        seen.len(),
        ids.len(),
        "every event reached the healthy endpoint"
    );
    assert!(
        seen.values().all(|n| *n == 1),
        "the healthy endpoint got each event once: {seen:?}"
    );
    for id in &ids {
        let deliveries = db.store.deliveries_for_event(id).await.unwrap();
        let d = deliveries
            .iter()
            .find(|d| d.endpoint_id == unstorable.id.as_str())
            .unwrap();
        assert_eq!(
            (d.status, d.last_status_code),
            (DeliveryStatus::DeadLetter, Some(500))
        );
        let attempts = db.store.attempts_for_delivery(d.id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(
            attempts[0].response_body.as_deref(),
            Some("\u{FFFD}\u{FFFD}bad\u{FFFD}"),
            "NUL and the byte that is not UTF-8 are stored as U+FFFD"
        );
    }
}

mod scale_out {
    use super::*;

    crate::on_shared_servers!(
        three_processes_share_2000_events_without_duplicates,
        three_processes_share_the_first_attempts_of_a_stream,
        a_killed_process_among_three_loses_no_event,
    );

    /// Three processes on one database: all of them have requests in flight at once, every
    /// event arrives, none twice.
    async fn three_processes_share_2000_events_without_duplicates(db: TestDb) {
        let (dir, rx, ids) = held_receiver_with_events(&db, 2000).await;

        let started = Instant::now();
        // Held requests stay open until released: the three processes may start seconds apart
        // (each first checks the migrations), and a request timing out meanwhile would be
        // sent again, so 48 would not be open at once. No process is killed here, so the longer
        // leases this brings cost nothing.
        let held = [("KURIR_REQUEST_TIMEOUT", "30s")];
        let mut children: Vec<Kurir> = (0..3)
            .map(|_| spawn_kurir_with(&db, dir.path(), &held))
            .collect();
        // Each process may have 16 requests to the endpoint in flight: 48 open means all three
        // are delivering at the same time.
        rx.wait_until("48 requests held open by three processes", |_, open| {
            open == 48
        })
        .await;
        rx.release(1_000_000);
        wait_all_sent(&db.store, 2000).await;
        let elapsed = started.elapsed();
        for child in &mut children {
            child.kill().unwrap();
            child.wait().unwrap();
        }

        let seen = receipts(&rx.requests());
        assert_eq!(seen.len(), ids.len(), "every event arrived");
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "no event is received twice without a crash: {twice:?}"
        );
        let sql = "SELECT count(DISTINCT worker) FROM kurir_attempts";
        let workers: i64 = match &db.store {
            Store::Postgres(pg) => sqlx::query_scalar(sql).fetch_one(pg.pool()).await,
            Store::Mysql(my) => sqlx::query_scalar(sql).fetch_one(my.pool()).await,
            Store::Sqlite(_) => unreachable!("one process per SQLite file"),
        }
        .unwrap();
        assert_eq!(workers, 3, "all three processes made deliveries");
        eprintln!(
            "scale-out on {}: 2000 events by 3 processes in {:.2}s ({:.0} deliveries/s, debug build, including start-up)",
            db.store.backend(),
            elapsed.as_secs_f64(),
            2000.0 / elapsed.as_secs_f64()
        );
    }

    /// One of three processes is killed mid-run: every event still arrives; duplicates are
    /// counted and limited to what the dead process had in flight.
    async fn a_killed_process_among_three_loses_no_event(db: TestDb) {
        let (dir, rx, ids) = held_receiver_with_events(&db, 2000).await;

        // Held requests must stay open until all three processes have started, which may be
        // seconds apart under load (with 2 s requests, those of the first timed out and were
        // sent again before the last one started, so 48 were never open at once). The price is
        // the victim's leases: 1 s + 4 × (1 s + 10 s), which the others wait out before they
        // send its deliveries, hence the longer wait for every delivery below.
        let held = [("KURIR_REQUEST_TIMEOUT", "10s")];
        let mut children: Vec<Kurir> = (0..3)
            .map(|_| spawn_kurir_with(&db, dir.path(), &held))
            .collect();
        rx.wait_until("48 requests held open by three processes", |_, open| {
            open == 48
        })
        .await;
        // The victim's 16 requests are open and unanswered when it dies.
        children[0].kill().unwrap();
        children[0].wait().unwrap();
        rx.release(1_000_000);
        eventually_within(
            Duration::from_secs(120),
            "2000 deliveries to be sent",
            || async {
                (count_status(&db.store, DeliveryStatus::Sent).await == 2000).then_some(())
            },
        )
        .await;
        for child in &mut children[1..] {
            child.kill().unwrap();
            child.wait().unwrap();
        }

        let seen = receipts(&rx.requests());
        assert_eq!(seen.len(), ids.len(), "every event arrived");
        let duplicates: usize = seen.values().map(|n| n - 1).sum();
        // The survivors' own repeats: an answer that did not reach them in time
        // (reliability.md, cause 4), each recorded as a failed attempt. The victim's
        // requests are recorded by the sweep as expired leases, and those are the 16.
        let sql = "SELECT count(*) FROM kurir_attempts \
                   WHERE (status_code IS NULL OR status_code NOT BETWEEN 200 AND 299) \
                   AND (error IS NULL OR error NOT LIKE 'lease expired%')";
        let survivors_failed: i64 = match &db.store {
            Store::Postgres(pg) => sqlx::query_scalar(sql).fetch_one(pg.pool()).await,
            Store::Mysql(my) => sqlx::query_scalar(sql).fetch_one(my.pool()).await,
            Store::Sqlite(_) => unreachable!("one process per SQLite file"),
        }
        .unwrap();
        eprintln!(
            "scale-out with a kill: 2000 events, {duplicates} received twice (victim had 16 in \
             flight, the survivors recorded {survivors_failed} failed attempts)"
        );
        assert!(
            duplicates <= 16 + survivors_failed as usize,
            "only the victim's in-flight requests and the survivors' recorded failures may \
             repeat, got {duplicates} with {survivors_failed} failures recorded"
        );
    }

    /// Issue 19: with deliveries born claimed to the process whose relay fans them out, a
    /// stream of events written while three processes run still has its first attempts made
    /// by all three (each relay takes its own share of the outbox), and none twice.
    async fn three_processes_share_the_first_attempts_of_a_stream(db: TestDb) {
        let dir = tempfile::tempdir().unwrap();
        let rx = Receiver::ok().await;
        let endpoint = NewEndpoint::new(rx.url("/stream"));
        db.store.create_endpoint(endpoint).await.unwrap();
        // The stream lasts about two seconds, and under load the processes may start seconds
        // apart (each first checks the migrations): it starts once all three are serving, so a
        // process that was still starting cannot miss it.
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut children: Vec<Kurir> = ports
            .iter()
            .map(|port| {
                let listen = format!("127.0.0.1:{port}");
                spawn_kurir_with(&db, dir.path(), &[("KURIR_LISTEN", listen.as_str())])
            })
            .collect();
        for port in &ports {
            wait_ready(*port).await;
        }
        let mut ids = enqueue_events(&db.store, "order.paid", 1).await;
        wait_all_sent(&db.store, 1).await;
        for _ in 0..150 {
            ids.extend(enqueue_events(&db.store, "order.paid", 10).await);
            // The application's pace: ten events every 10 ms.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        wait_all_sent(&db.store, ids.len() as i64).await;
        for child in &mut children {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let seen = receipts(&rx.requests());
        assert_eq!(seen.len(), ids.len(), "every event arrived");
        assert!(seen.values().all(|n| *n == 1), "none twice");
        let sql = "SELECT CAST(worker AS CHAR(255)), count(*) FROM kurir_attempts \
                   WHERE attempt = 1 GROUP BY worker";
        let by_worker: Vec<(String, i64)> = match &db.store {
            Store::Postgres(pg) => {
                sqlx::query_as(&sql.replace("CHAR(255)", "TEXT"))
                    .fetch_all(pg.pool())
                    .await
            }
            Store::Mysql(my) => {
                sqlx::query_as(&sql.replace("(255)", ""))
                    .fetch_all(my.pool())
                    .await
            }
            Store::Sqlite(_) => unreachable!("one process per SQLite file"),
        }
        .unwrap();
        let counts: Vec<i64> = by_worker.iter().map(|(_, n)| *n).collect();
        eprintln!(
            "first attempts of a stream on {} by process: {counts:?}",
            db.store.backend()
        );
        assert_eq!(
            counts.len(),
            3,
            "all three processes made first attempts: {counts:?}"
        );
    }
}
