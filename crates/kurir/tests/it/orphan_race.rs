//! The event lost on MariaDB (`kurir-bench latency --db mysql`: one outbox row of 24,000
//! dispatched, its delivery gone): a claim's look for orphans took a delivery the relay had
//! just written for one, and deleted it.
//!
//! On MySQL and MariaDB the look (`ORPHANS_SQL` in store/mysql/leases.rs) is a locking read of
//! the due rows with a `NOT EXISTS` over the outbox. The locking read sees each delivery as
//! last committed, but the subquery is a consistent read from a snapshot taken at its first
//! evaluation (MariaDB even materialises the whole outbox then). A delivery whose event and
//! then whose row committed after that snapshot, while the look walked the due rows, was
//! found with no event, and removed with an "event deleted outside kurir" warning.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kurir::endpoint::NewEndpoint;
use kurir::store::{MySqlStore, PgStore, SqliteStore, Store};

use crate::on_both_backends;
use crate::orphans::{by_hand, slot};
use crate::support::{enqueue_events, scalar, TestDb};

on_both_backends!(a_delivery_relayed_while_a_claim_looks_for_orphans_is_never_taken_for_one);

/// Dispatched outbox rows with no delivery (five digits of row numbers): each look for orphans reads the
/// outbox, and a large one keeps the look going while the relay commits.
const FILLER: u32 = 100_000;

/// How long the producers, the relay and the claims race (the old code lost a delivery within
/// the first second on MariaDB).
const RACE: Duration = Duration::from_secs(6);

/// Real orphans planted at the head of the endpoint's queue before each claim: the look walks
/// them first (its snapshot of the outbox is taken at the first), then the rows the relay has
/// committed meanwhile.
const PLANTED: i64 = 1000;

/// The numbers 0 to 10^`digits` − 1 as `n` and the rows to select them from.
pub(crate) fn numbers(digits: usize) -> (String, String) {
    let digit = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
         UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
         UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let n = (0..digits)
        .map(|i| format!("{} * t{i}.d", 10_i64.pow(i as u32)))
        .collect::<Vec<_>>()
        .join(" + ");
    let from = (0..digits)
        .map(|i| format!("{digit} t{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    (format!("({n})"), from)
}

/// `PLANTED` deliveries to `endpoint_id` of events that do not exist, due since 2000, with
/// event ids `planted-…` and outbox ids below `-round · PLANTED`.
fn planted_sql(db: &TestDb, round: i64, endpoint_id: &str) -> String {
    let (n, from) = numbers(3);
    let event_id = match &db.store {
        Store::Mysql(_) => format!("CONCAT('planted-{round}-', {n})"),
        _ => format!("'planted-{round}-' || {n}"),
    };
    format!(
        "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, available_at) \
         SELECT -{round} * {PLANTED} - {n}, {event_id}, '{endpoint_id}', '2000-01-01 00:00:00' \
         FROM {from}"
    )
}

/// `FILLER` dispatched outbox rows, in `db`'s dialect.
fn filler_sql(db: &TestDb) -> String {
    let (n, from) = numbers(5);
    match &db.store {
        Store::Mysql(_) => format!(
            "INSERT INTO kurir_outbox (event_id, event_type, payload, dispatched_at) \
             SELECT CONCAT('filler-', {n}), 'filler.row', '{{}}', UTC_TIMESTAMP(3) FROM {from}"
        ),
        // History without a `txid`, which the relay's cursor never reads (`store::cursor`).
        Store::Postgres(_) => format!(
            "INSERT INTO kurir_outbox (event_id, event_type, payload, dispatched_at, txid) \
             SELECT 'filler-' || {n}, 'filler.row', '{{}}', now(), NULL FROM {from}"
        ),
        Store::Sqlite(_) => format!(
            "INSERT INTO kurir_outbox (event_id, event_type, payload, dispatched_at) \
             SELECT 'filler-' || {n}, 'filler.row', '{{}}', '{}' FROM {from}",
            kurir::store::sqlite_ts(chrono::Utc::now())
        ),
    }
}

/// A store on `store`'s pool that has not looked for orphans yet: its first claim looks.
fn looking(store: &Store) -> Store {
    match store {
        Store::Mysql(my) => Store::Mysql(MySqlStore::from_pool(my.pool().clone())),
        Store::Postgres(pg) => Store::Postgres(PgStore::from_pool(pg.pool().clone())),
        Store::Sqlite(sq) => Store::Sqlite(SqliteStore::from_pool(sq.pool().clone())),
    }
}

/// Producers write events one per transaction, the relay fans them out, and claims that all
/// look for orphans lease them; a real orphan planted at the head of the endpoint's queue
/// before each claim makes the look read a row before the ones the relay commits meanwhile.
/// Only the planted rows may be removed, and every event keeps its delivery.
async fn a_delivery_relayed_while_a_claim_looks_for_orphans_is_never_taken_for_one(db: TestDb) {
    let s = &db.store;
    assert_eq!(by_hand(&db, &filler_sql(&db)).await, u64::from(FILLER));
    if let Store::Sqlite(_) = s {
        // History: the relay's cursor is past it (`store::cursor`).
        let past = "UPDATE kurir_relay_cursor SET outbox_id = (SELECT max(id) FROM kurir_outbox)";
        by_hand(&db, past).await;
    }
    let filler_top = scalar(s, "SELECT max(id) FROM kurir_outbox").await;
    let e = s
        .create_endpoint(NewEndpoint::new("https://a.example/"))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (store, stop) = (s.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                enqueue_events(&store, "order.paid", 1).await;
            }
        }));
    }
    let (store, relay_stop) = (s.clone(), stop.clone());
    workers.push(tokio::spawn(async move {
        while !relay_stop.load(Ordering::Relaxed) {
            store.relay_batch(100).await.unwrap();
        }
    }));

    let deadline = tokio::time::Instant::now() + RACE;
    let mut wrongly_removed = Vec::new();
    let mut round: i64 = 0;
    while tokio::time::Instant::now() < deadline && wrongly_removed.is_empty() {
        round += 1;
        let planted = by_hand(&db, &planted_sql(&db, round, e.id.as_str())).await;
        assert_eq!(planted, PLANTED as u64);
        let claim = looking(s)
            .claim_due_deliveries("w1", &[slot(&e, 1000)], 1000)
            .await
            .unwrap();
        let (planted, live): (Vec<_>, Vec<_>) = (claim.orphans.into_iter())
            .partition(|o| o.event_id.starts_with(&format!("planted-{round}-")));
        assert_eq!(
            planted.len() as i64,
            PLANTED,
            "the claim looked for orphans"
        );
        wrongly_removed.extend(live);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    while s.relay_batch(1000).await.unwrap().events > 0 {}
    assert!(round > 1, "the claims ran");
    assert!(
        wrongly_removed.is_empty(),
        "live deliveries removed as orphans in {round} claims: {wrongly_removed:?}"
    );
    let without = format!(
        "SELECT count(*) FROM kurir_outbox o WHERE o.id > {filler_top} \
           AND NOT EXISTS (SELECT 1 FROM kurir_deliveries d WHERE d.outbox_id = o.id)"
    );
    assert_eq!(scalar(s, &without).await, 0, "every event has its delivery");
}
