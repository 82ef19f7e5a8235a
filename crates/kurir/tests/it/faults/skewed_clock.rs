//! A `kurir serve` whose clock is 30 s off the database's (libfaketime, Debian's `faketime`
//! package, preloaded into the real binary) keeps every time that the database or another
//! process compares: its retries keep their backoff as the receiver sees them, its circuit
//! breaker's cool-down is stored in the database's time, and it says at start that its clock is
//! off (a WARN line, and `kurir_clock_offset_seconds`).
//!
//! Only the shared servers: on SQLite the database's clock is the process's.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::endpoint::{EventFilter, NewEndpoint, Overrides};
use kurir::store::Store;

use crate::on_shared_servers;
use crate::support::process::{free_port, kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, TestDb};

on_shared_servers!(
    deliveries_keep_their_timing_with_a_process_clock_30_s_slow,
    deliveries_keep_their_timing_with_a_process_clock_30_s_fast,
    a_process_whose_clock_is_off_says_so_at_start,
);

/// The retried endpoint's first retry delay (doubling after).
const RETRY: Duration = Duration::from_secs(2);
/// The breaker endpoint's first cool-down.
const COOLDOWN: Duration = Duration::from_secs(3);

async fn deliveries_keep_their_timing_with_a_process_clock_30_s_slow(db: TestDb) {
    deliveries_keep_their_timing(db, -30).await
}

async fn deliveries_keep_their_timing_with_a_process_clock_30_s_fast(db: TestDb) {
    deliveries_keep_their_timing(db, 30).await
}

/// One process `skew_s` seconds off: a delivery failing twice is retried 2 s, then 4 s later by
/// the receiver's watch, and scheduled 2 s ahead by the database's clock; an endpoint whose
/// breaker opens stores its next probe one cool-down ahead by the database's clock, and the
/// probe comes no sooner.
async fn deliveries_keep_their_timing(db: TestDb, skew_s: i64) {
    let Some(faketime) = libfaketime() else {
        return;
    };
    let retried = Receiver::scripted(|n, _| {
        if n < 2 {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await;
    let failing =
        Receiver::scripted(|_, _| StatusCode::INTERNAL_SERVER_ERROR.into_response()).await;
    let retried_id = create_endpoint(
        &db.store,
        retried.url("/retried"),
        "order.retried",
        Overrides {
            retry_initial_delay_ms: Some(RETRY.as_millis() as u64),
            retry_max_delay_ms: Some(8_000),
            ..Overrides::default()
        },
    )
    .await;
    let failing_id = create_endpoint(
        &db.store,
        failing.url("/failing"),
        "order.breaker",
        Overrides {
            circuit_failure_threshold: Some(2),
            circuit_cooldown_ms: Some(COOLDOWN.as_millis() as u64),
            // Always due again at once, so the probe goes as soon as the cool-down allows.
            retry_initial_delay_ms: Some(100),
            retry_max_delay_ms: Some(100),
            retry_max_attempts: Some(50),
            ..Overrides::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (port, log) = (free_port(), dir.path().join("kurir.log"));
    let mut kurir = Kurir::spawn(skewed(
        kurir_serve(&db.url, dir.path()),
        &faketime,
        skew_s,
        port,
        &log,
    ));
    wait_ready(port).await;
    enqueue_events(&db.store, "order.retried", 1).await;
    enqueue_events(&db.store, "order.breaker", 1).await;

    // The first retry, as scheduled: what every process's claim compares with the database's
    // `now()`.
    let ahead = eventually("the first attempt to fail", || async {
        retry_scheduled_in(&db.store, &retried_id).await
    })
    .await;
    let first_retry = RETRY.as_secs_f64();
    assert!(
        ahead > 0.0 && ahead <= first_retry + 0.5,
        "the retry is due {ahead:.3} s after its failure by the database's clock, not {first_retry} s"
    );

    // The breaker's next probe, as stored: what every process compares with its own clock.
    let probe_in = eventually("the breaker to open", || async {
        next_probe_in(&db.store, &failing_id).await
    })
    .await;
    let cooldown = COOLDOWN.as_secs_f64();
    assert!(
        probe_in > 0.0 && probe_in <= cooldown + 0.5,
        "the breaker's probe is due {probe_in:.3} s after it opened by the database's clock, \
         not {cooldown} s"
    );

    // As the receivers see it.
    retried.wait_for(3).await;
    let retries = gaps(&retried.requests());
    assert!(
        retries[0] >= 1.5 && retries[1] >= 3.0,
        "retries 2 s, then 4 s apart, not {retries:?}"
    );
    failing.wait_for(3).await;
    let apart = gaps(&failing.requests());
    assert!(
        apart[1] >= 0.75 * cooldown,
        "the probe waits out the {cooldown} s cool-down, not {apart:?}"
    );
    eprintln!(
        "clock {skew_s:+} s: retry due {ahead:.3} s ahead, receipts {retries:.2?} s apart; \
         probe due {probe_in:.3} s ahead, receipts {apart:.2?} s apart"
    );
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}

/// A process 30 s slow and one 30 s fast each log a WARN at start with the offset and show it
/// in `kurir_clock_offset_seconds`; one on the machine's clock does neither.
async fn a_process_whose_clock_is_off_says_so_at_start(db: TestDb) {
    let Some(faketime) = libfaketime() else {
        return;
    };
    for skew_s in [-30, 30] {
        let dir = tempfile::tempdir().unwrap();
        let (port, log) = (free_port(), dir.path().join("kurir.log"));
        let mut kurir = Kurir::spawn(skewed(
            kurir_serve(&db.url, dir.path()),
            &faketime,
            skew_s,
            port,
            &log,
        ));
        wait_ready(port).await;
        let offset = clock_offset_metric(port).await;
        assert!(
            (offset - skew_s as f64).abs() < 2.0,
            "kurir_clock_offset_seconds is {offset}, the process's clock is {skew_s} s off"
        );
        let log = std::fs::read_to_string(&log).unwrap();
        let warned: f64 = log
            .lines()
            .filter(|l| l.contains("WARN"))
            .find_map(|l| l.split("offset_seconds=").nth(1))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("a WARN line with the offset at start: {log}"));
        assert!(
            (warned - skew_s as f64).abs() < 2.0,
            "the warning says {warned} s, the process's clock is {skew_s} s off"
        );
        assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
    }
    let dir = tempfile::tempdir().unwrap();
    let (port, log) = (free_port(), dir.path().join("kurir.log"));
    let mut cmd = kurir_serve(&db.url, dir.path());
    cmd.env("KURIR_LISTEN", format!("127.0.0.1:{port}"))
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    let mut kurir = Kurir::spawn(cmd);
    wait_ready(port).await;
    let offset = clock_offset_metric(port).await;
    assert!(offset.abs() < 1.0, "a machine's clock is {offset} s off");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains("offset_seconds="), "no warning: {log}");
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}

/// Debian's libfaketime (multi-threaded build); `None` with a notice when it is missing,
/// except under CI, where that fails the test.
fn libfaketime() -> Option<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|arch| arch.path().join("faketime/libfaketimeMT.so.1"))
        .find(|lib| lib.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but libfaketime is not installed (Debian's faketime package)"
        );
        eprintln!("notice: libfaketime is not installed; skipping a skewed-clock test");
    }
    found
}

/// `cmd` with its clock `skew_s` seconds off, listening on `port`, logging into `log`.
fn skewed(mut cmd: Command, faketime: &Path, skew_s: i64, port: u16, log: &Path) -> Command {
    cmd.env("LD_PRELOAD", faketime)
        .env("FAKETIME", format!("{skew_s:+}"))
        .env("KURIR_LISTEN", format!("127.0.0.1:{port}"))
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()));
    cmd
}

async fn create_endpoint(store: &Store, url: String, event_type: &str, o: Overrides) -> String {
    let endpoint = store
        .create_endpoint(NewEndpoint {
            event_types: EventFilter::parse(vec![event_type.to_owned()]).unwrap(),
            overrides: o,
            ..NewEndpoint::new(url)
        })
        .await
        .unwrap();
    endpoint.id.to_string()
}

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

/// `kurir_clock_offset_seconds` from `GET /metrics`.
async fn clock_offset_metric(port: u16) -> f64 {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("kurir_clock_offset_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("kurir_clock_offset_seconds in /metrics"))
}

/// Seconds from the database's `now()` to when `endpoint_id`'s delivery is due, once its first
/// attempt failed.
async fn retry_scheduled_in(store: &Store, endpoint_id: &str) -> Option<f64> {
    let row: Option<f64> = match store {
        Store::Postgres(s) => sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM available_at - now())::float8 FROM kurir_deliveries \
             WHERE endpoint_id = $1 AND status = 'failed' AND attempt_count = 1",
        )
        .bind(endpoint_id)
        .fetch_optional(s.pool())
        .await
        .unwrap(),
        Store::Mysql(s) => sqlx::query_scalar(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), available_at) / 1e6 \
             AS DOUBLE) FROM kurir_deliveries \
             WHERE endpoint_id = ? AND status = 'failed' AND attempt_count = 1",
        )
        .bind(endpoint_id)
        .fetch_optional(s.pool())
        .await
        .unwrap(),
        Store::Sqlite(_) => unreachable!("a shared server"),
    };
    row
}

/// Seconds from the database's `now()` to the stored next probe of `endpoint_id`'s circuit,
/// once it opened for the first time.
async fn next_probe_in(store: &Store, endpoint_id: &str) -> Option<f64> {
    let (probe_ms, now_ms): (i64, f64) = match store {
        Store::Postgres(s) => sqlx::query_as(
            "SELECT next_probe_at_ms, EXTRACT(EPOCH FROM now())::float8 * 1000 \
             FROM kurir_endpoint_circuits WHERE endpoint_id = $1 AND state = 'open' AND reopens = 0",
        )
        .bind(endpoint_id)
        .fetch_optional(s.pool())
        .await
        .unwrap()?,
        Store::Mysql(s) => sqlx::query_as(
            "SELECT next_probe_at_ms, \
             CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS DOUBLE) \
             FROM kurir_endpoint_circuits WHERE endpoint_id = ? AND state = 'open' AND reopens = 0",
        )
        .bind(endpoint_id)
        .fetch_optional(s.pool())
        .await
        .unwrap()?,
        Store::Sqlite(_) => unreachable!("a shared server"),
    };
    Some((probe_ms as f64 - now_ms) / 1000.0)
}

/// Seconds between consecutive receipts.
fn gaps(requests: &[crate::support::receiver::Recorded]) -> Vec<f64> {
    requests
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs_f64())
        .collect()
}
