//! SIGKILL at random points while events stream in (issue 19): the relay is inserting batches,
//! some deliveries born claimed and handed to the lanes, others pending and claimed, requests
//! in flight, completions on their way to the database. After each kill a new process takes
//! over: every event arrives, and only what the dead process had sent may arrive twice.
//!
//! Seeded: `KURIR_FAULT_SEED` (default 19) picks the kill points; `KURIR_FAULT_RUNS` kills
//! that many times per backend (the fault suite runs 20; CI, without it, 2).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kurir::endpoint::NewEndpoint;
use rand::{Rng, SeedableRng};

use super::wait_all_sent;
use crate::on_both_backends;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, TestDb};

on_both_backends!(sigkill_at_random_points_of_a_stream_loses_no_event);

/// Events per run, written in chunks while the process runs and dies.
const EVENTS: usize = 200;
const CHUNK: usize = 10;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A process with leases of 1 s + 4 × (0.2 + 0.5) s = 3.8 s, so a dead one's are swept soon.
fn spawn(db: &TestDb, dir: &std::path::Path) -> Kurir {
    let mut cmd = kurir_serve(&db.url, dir);
    cmd.env("KURIR_CONNECT_TIMEOUT", "200ms")
        .env("KURIR_REQUEST_TIMEOUT", "500ms")
        .env("KURIR_LEASE_MARGIN", "1s");
    Kurir::spawn(cmd)
}

/// The errors of the attempts of `event_id`'s delivery to `endpoint_id` that did not succeed.
async fn failed_attempts(db: &TestDb, event_id: &str, endpoint_id: &str) -> Vec<String> {
    let deliveries = db.store.deliveries_for_event(event_id).await.unwrap();
    let delivery = deliveries
        .iter()
        .find(|d| d.endpoint_id == endpoint_id)
        .expect("a delivery per endpoint");
    let attempts = db.store.attempts_for_delivery(delivery.id).await.unwrap();
    attempts
        .into_iter()
        .filter(|a| !a.status_code.is_some_and(|code| (200..300).contains(&code)))
        .map(|a| format!("{:?} {:?}", a.status_code, a.error))
        .collect()
}

async fn sigkill_at_random_points_of_a_stream_loses_no_event(db: TestDb) {
    let seed = env_number("KURIR_FAULT_SEED", 19);
    let runs = env_number("KURIR_FAULT_RUNS", 2);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rx = Receiver::ok().await;
    let wide = db.store.create_endpoint(NewEndpoint::new(rx.url("/wide")));
    let wide = wide.await.unwrap();
    // Two requests at a time: most of its deliveries are inserted pending and claimed.
    let mut narrow = NewEndpoint::new(rx.url("/narrow"));
    narrow.max_in_flight = Some(2);
    let narrow = db.store.create_endpoint(narrow).await.unwrap();
    let endpoints = [
        ("/wide", wide.id.as_str().to_owned()),
        ("/narrow", narrow.id.as_str().to_owned()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut kurir = spawn(&db, dir.path());
    let mut sent = 0;
    for run in 0..runs {
        let kill_after = Duration::from_millis(rng.gen_range(0..1_500));
        let store = db.store.clone();
        let stream = tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..EVENTS / CHUNK {
                ids.extend(enqueue_events(&store, "order.paid", CHUNK).await);
                // The application's pace: a chunk every 20 ms.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            ids
        });
        // The stream runs for a random while: the point where the kill lands.
        tokio::time::sleep(kill_after).await;
        kurir.kill().await;
        // The dead process's last requests are all read and answered before the next one can
        // send (some may still sit in the receiver's socket buffers).
        rx.drain().await;
        let took_over = Instant::now();
        kurir = spawn(&db, dir.path());
        let ids = stream.await.unwrap();
        sent += 2 * ids.len() as i64;
        wait_all_sent(&db.store, sent).await;

        let mut receipts: HashMap<(String, String), Vec<Instant>> = HashMap::new();
        for r in rx.requests() {
            receipts
                .entry((r.path.clone(), r.event_id()))
                .or_default()
                .push(r.at);
        }
        let mut repeated = 0;
        for id in &ids {
            for (path, endpoint_id) in &endpoints {
                let at = receipts.get(&((*path).to_owned(), id.clone()));
                let at = at.map_or(&[][..], Vec::as_slice);
                assert!(
                    !at.is_empty(),
                    "run {run} (seed {seed}): {id} never reached {path}"
                );
                repeated += at.len() - 1;
                if at.len() == 1 || at.iter().min().is_some_and(|first| *first < took_over) {
                    continue;
                }
                // Received twice, both after the kill: only the new process sent it, so
                // the kill cannot explain it. The one other window is an answer that did
                // not reach kurir in time (reliability.md, cause 4: on a loaded machine a
                // 500 ms request timeout is reached), which kurir records as a failed
                // attempt; a repeat without one is a duplicate kurir did not know it sent.
                let failed = failed_attempts(&db, id, endpoint_id).await;
                assert!(
                    failed.len() + 1 >= at.len(),
                    "run {run} (seed {seed}): {id} reached {path} {} times after the kill, \
                     with {} failed attempts recorded: {failed:?}",
                    at.len(),
                    failed.len()
                );
            }
        }
        eprintln!(
            "kill run {run} on {} (seed {seed}): killed after {kill_after:?}, {repeated} receipts repeated",
            db.store.backend()
        );
    }
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}
