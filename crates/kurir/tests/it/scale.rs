//! Scale (issue 27). What an installed endpoint costs the others (item 1): nothing per delivery. The
//! real binary runs behind a proxy that counts the bytes the database answers it with, rows and
//! all; the same deliveries are measured with one endpoint installed and again after 1,000 more
//! were added. kurir used to read every enabled endpoint at every claim and every relay batch,
//! so each delivery cost a read of the whole endpoint table. And what several processes share
//! (item 2): the work, each taking what it can start soon, and the relay's pace, so that three
//! processes relay in batches as large as one process's.

use std::sync::Arc;
use std::time::Duration;

use kurir::encryption::Keyring;
use kurir::endpoint::{EventFilter, NewEndpoint};
use kurir::outbox::NewEvent;
use kurir::store::Store;

use crate::on_shared_servers;
use crate::support::process::{free_port, kurir_serve, Kurir};
use crate::support::proxy::{url_through, Proxy};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_all, enqueue_events, eventually, TestDb};

on_shared_servers!(
    installed_endpoints_that_receive_nothing_cost_a_delivery_nothing,
    a_claim_costs_the_deliveries_it_takes_not_the_endpoints_with_deliveries_due,
    three_processes_each_send_a_share_of_a_slow_partners_stream,
    three_processes_relay_no_oftener_than_one_poll_interval,
);

/// Endpoints installed beside the one that receives.
const INSTALLED: usize = 1_000;

/// Events per measured round.
const EVENTS: usize = 100;

/// The bytes the database answered kurir with while `EVENTS` events were delivered, after a
/// round of as many that lets kurir take in what changed before (its first read of the
/// endpoints, or the ones just added).
async fn answered_per_round(db: &TestDb, proxy: &Proxy, receiver: &Receiver) -> u64 {
    let delivered = receiver.requests().len();
    enqueue_events(&db.store, "order.paid", EVENTS).await;
    receiver.wait_for(delivered + EVENTS).await;
    let before = proxy.bytes_answered();
    enqueue_events(&db.store, "order.paid", EVENTS).await;
    receiver.wait_for(delivered + 2 * EVENTS).await;
    proxy.bytes_answered() - before
}

async fn installed_endpoints_that_receive_nothing_cost_a_delivery_nothing(db: TestDb) {
    let receiver = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(receiver.url("/orders")))
        .await
        .unwrap();
    let proxy = Proxy::counting(&db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let mut kurir = Kurir::spawn(kurir_serve(&url_through(&db.url, &proxy), dir.path()));

    let alone = answered_per_round(&db, &proxy, &receiver).await;
    for i in 0..INSTALLED {
        let mut other = NewEndpoint::new(receiver.url("/never"));
        other.event_types = EventFilter::parse(vec![format!("other.type{i}")]).unwrap();
        db.store.create_endpoint(other).await.unwrap();
    }
    let among_many = answered_per_round(&db, &proxy, &receiver).await;
    eprintln!(
        "scale ({:?}): {EVENTS} deliveries cost {alone} bytes of answers with 1 endpoint, \
         {among_many} with {} installed",
        db.backend,
        INSTALLED + 1
    );
    assert!(receiver.requests_to("/never").is_empty());
    // Rounds differ in how many statements the deliveries took (batches and claims vary with
    // timing), so the bound is loose; one read of the endpoint table is far above it.
    assert!(
        among_many <= 2 * alone + 64 * 1024,
        "with {INSTALLED} more endpoints installed, {EVENTS} deliveries cost {among_many} bytes \
         of answers instead of about {alone}"
    );
    assert!(kurir.terminate().await.success());
}

/// Deliveries due when kurir starts, in each round of the claim test.
const DUE: usize = 1_000;

/// The claim test's room per claim: far fewer deliveries than are due.
const CLAIM_ROOM: &str = "10";

/// Fans out the events written so far into pending deliveries, as a relay with no dispatcher
/// to be born claimed to does: a started kurir then claims every one of them.
async fn relay_everything(store: &Store) {
    while store.relay_batch(500).await.unwrap().events > 0 {}
}

/// The bytes kurir sent the database from its start until it delivered `DUE` more deliveries,
/// all pending when it started. `key` opens the endpoints' secrets, as the test's relay does.
async fn sent_to_deliver_the_due(db: &TestDb, key: &str, receiver: &Receiver, path: &str) -> u64 {
    let proxy = Proxy::counting(&db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let mut serve = kurir_serve(&url_through(&db.url, &proxy), dir.path());
    serve
        .env("KURIR_BATCH_SIZE", CLAIM_ROOM)
        .env("KURIR_ENCRYPTION_KEY", key);
    let mut kurir = Kurir::spawn(serve);
    eventually("the due deliveries", || async {
        (receiver.requests_to(path).len() >= DUE).then_some(())
    })
    .await;
    let sent = proxy.bytes_sent();
    assert!(kurir.terminate().await.success());
    sent
}

/// A claim asks the database for as many endpoints as its room can fill. It used to name
/// every endpoint with due deliveries, each probed by the claim's statement, so with one due
/// delivery at each of a thousand endpoints every claim of ten carried a thousand slots (and
/// PostgreSQL looked each leased row's lease up among them). Measured as the bytes kurir sends
/// the database: the same number of deliveries, first to one endpoint, then one to each of
/// `DUE` endpoints.
async fn a_claim_costs_the_deliveries_it_takes_not_the_endpoints_with_deliveries_due(db: TestDb) {
    // kurir seals the secrets at its first start; the test's relay must open them after.
    let key = Keyring::generate_key();
    let keyring = Keyring::parse(&key, "KURIR_ENCRYPTION_KEY").unwrap();
    let store = db.store.clone().with_keyring(Arc::new(keyring));
    let receiver = Receiver::ok().await;
    let mut one = NewEndpoint::new(receiver.url("/one"));
    one.event_types = EventFilter::parse(vec!["one.paid".to_owned()]).unwrap();
    store.create_endpoint(one).await.unwrap();
    for i in 0..DUE {
        let mut each = NewEndpoint::new(receiver.url("/each"));
        each.event_types = EventFilter::parse(vec![format!("each.t{i}")]).unwrap();
        store.create_endpoint(each).await.unwrap();
    }

    enqueue_events(&store, "one.paid", DUE).await;
    relay_everything(&store).await;
    let to_one = sent_to_deliver_the_due(&db, &key, &receiver, "/one").await;

    let spread = (0..DUE)
        .map(|i| NewEvent::json(&format!("each.t{i}"), &serde_json::json!({"n": i})).unwrap())
        .collect();
    enqueue_all(&store, spread).await;
    relay_everything(&store).await;
    let to_each = sent_to_deliver_the_due(&db, &key, &receiver, "/each").await;

    eprintln!(
        "claims ({:?}): {DUE} deliveries cost {to_one} bytes sent to the database to one \
         endpoint, {to_each} to one each of {DUE} endpoints",
        db.backend
    );
    assert_eq!(
        receiver.requests_to("/each").len(),
        DUE,
        "one delivery each"
    );
    // Each delivery to its own endpoint is its own slot in a claim, where ten share one; a
    // thousand slots in each claim are far above this.
    assert!(
        to_each <= 2 * to_one + 256 * 1024,
        "{DUE} deliveries due at as many endpoints cost {to_each} bytes sent to the database, \
         against {to_one} to one endpoint"
    );
}

/// Waits until the process listening on `port` answers `/healthz`.
async fn wait_healthy(port: u16) {
    let url = format!("http://127.0.0.1:{port}/healthz");
    eventually(&format!("kurir on port {port} to answer"), || async {
        let answer = reqwest::get(&url).await.ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
}

/// Events of the stream.
const STREAM: usize = 600;

/// Three processes share one database and one partner that takes 50 ms to answer, so each
/// process's `max_in_flight` (16) bounds what it can send. Written while all three run, the
/// stream is sent by all three, each at least a fifth of it, and no event twice (nobody
/// crashed). The relaying process used to take every delivery it fanned out, born claimed or
/// claimed at once, and keep it for as long as its 16 slots took to send them.
async fn three_processes_each_send_a_share_of_a_slow_partners_stream(db: TestDb) {
    let rx = Receiver::answering_after(Duration::from_millis(50)).await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/slow")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut children: Vec<Kurir> = ports
        .iter()
        .map(|port| {
            let mut cmd = kurir_serve(&db.url, dir.path());
            cmd.env("KURIR_LISTEN", format!("127.0.0.1:{port}"));
            Kurir::spawn(cmd)
        })
        .collect();
    for &port in &ports {
        wait_healthy(port).await;
    }
    let ids = enqueue_events(&db.store, "order.paid", STREAM).await;
    rx.wait_for(STREAM).await;
    eventually("every attempt to be recorded", || async {
        let shares = attempts_by_worker(&db).await;
        (shares.iter().sum::<i64>() >= STREAM as i64).then_some(())
    })
    .await;
    for child in &mut children {
        assert!(child.terminate().await.success());
    }
    let shares = attempts_by_worker(&db).await;
    eprintln!(
        "scale-out ({:?}): attempts per process {shares:?}",
        db.backend
    );
    let mut seen = std::collections::HashMap::new();
    for r in rx.requests() {
        *seen.entry(r.event_id()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), ids.len(), "every event arrived");
    assert!(seen.values().all(|&n| n == 1), "no event arrived twice");
    assert_eq!(shares.len(), 3, "all three processes sent: {shares:?}");
    let least = *shares.iter().min().unwrap();
    assert!(
        least * 5 >= STREAM as i64,
        "each process sends at least a fifth of the stream: {shares:?}"
    );
}

/// Attempts recorded per lease owner.
async fn attempts_by_worker(db: &TestDb) -> Vec<i64> {
    let sql = "SELECT count(*) FROM kurir_attempts GROUP BY worker";
    match &db.store {
        Store::Postgres(pg) => sqlx::query_scalar(sql).fetch_all(pg.pool()).await,
        Store::Mysql(my) => sqlx::query_scalar(sql).fetch_all(my.pool()).await,
        Store::Sqlite(_) => unreachable!("one process per SQLite file"),
    }
    .unwrap()
}

/// The relay poll interval of [`three_processes_relay_no_oftener_than_one_poll_interval`]:
/// long enough that three processes polling on their own would relay several times within it.
const RELAY_PACE: Duration = Duration::from_millis(200);

/// Three processes share one database while a steady stream of events, one per transaction,
/// is written by plain SQL (no wake-ups). Every relay batch writes its deliveries with its
/// transaction's time, and no two batches are closer than the relay poll interval: the
/// installation relays at one process's pace, each batch as full as one process's would be.
/// Each process used to poll on its own, so three relayed three times as often, each batch a
/// third the size, and every batch costs its statements whatever its size (issue 27, item 2:
/// with a fast partner three processes delivered two thirds of what one did).
async fn three_processes_relay_no_oftener_than_one_poll_interval(db: TestDb) {
    let rx = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/fast")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut children: Vec<Kurir> = ports
        .iter()
        .map(|port| {
            let mut cmd = kurir_serve(&db.url, dir.path());
            cmd.env("KURIR_LISTEN", format!("127.0.0.1:{port}"))
                .env("KURIR_RELAY_POLL_INTERVAL", "200ms");
            Kurir::spawn(cmd)
        })
        .collect();
    for &port in &ports {
        wait_healthy(port).await;
    }
    // A steady trickle, the producer's own rate (not a wait for kurir): 4 seconds, 20 batches'
    // worth at one process's pace, each far below a full batch.
    let mut ticks = tokio::time::interval(Duration::from_millis(25));
    let mut written = 0;
    for _ in 0..160 {
        ticks.tick().await;
        written += enqueue_events(&db.store, "order.paid", 1).await.len();
    }
    rx.wait_for(written).await;
    for child in &mut children {
        assert!(child.terminate().await.success());
    }
    let batches = relay_batch_times_us(&db).await;
    let gaps: Vec<i64> = batches.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!(
        "relay pace ({:?}): {} batches for {written} events, gaps in ms {:?}",
        db.backend,
        batches.len(),
        gaps.iter().map(|g| g / 1000).collect::<Vec<_>>()
    );
    assert!(
        batches.len() >= 5,
        "the stream took several batches: {batches:?}"
    );
    let pace_us = RELAY_PACE.as_micros() as i64;
    assert!(
        gaps.iter().all(|&g| g >= pace_us),
        "no two relay batches within the poll interval ({} ms): gaps in µs {gaps:?}",
        RELAY_PACE.as_millis()
    );
}

/// When each relay batch ran, by the database's clock: the distinct creation times of the
/// deliveries (each batch inserts its deliveries in one statement), in microseconds, in order.
async fn relay_batch_times_us(db: &TestDb) -> Vec<i64> {
    match &db.store {
        Store::Postgres(pg) => {
            sqlx::query_scalar(
                "SELECT DISTINCT (extract(epoch FROM created_at) * 1000000)::int8 AS t \
             FROM kurir_deliveries ORDER BY t",
            )
            .fetch_all(pg.pool())
            .await
        }
        Store::Mysql(my) => {
            sqlx::query_scalar(
                "SELECT DISTINCT TIMESTAMPDIFF(MICROSECOND, '2000-01-01', created_at) AS t \
             FROM kurir_deliveries ORDER BY t",
            )
            .fetch_all(my.pool())
            .await
        }
        Store::Sqlite(_) => unreachable!("one process per SQLite file"),
    }
    .unwrap()
}
