//! Issue 17: on MySQL and MariaDB an ordered endpoint's claim could lease two deliveries of one
//! aggregate at once, or a delivery while the one before it was leased.
//!
//! The claim (`DUE_SQL` in store/mysql/leases.rs) is a locking read of the due rows with a
//! subquery over the earlier deliveries of each row's aggregate. The locking read sees each row
//! as last committed, but the subquery is a consistent read from a snapshot taken at its first
//! evaluation. A relay batch that committed two deliveries of one aggregate while the claim
//! walked the due rows was read there without either one's predecessor: both looked like the
//! head, and both were leased.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering as Atomic};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kurir::endpoint::{NewEndpoint, Ordering};
use kurir::outbox::NewEvent;
use kurir::store::{MySqlStore, PgStore, Store};

use crate::on_shared_servers;
use crate::orphan_race::numbers;
use crate::orphans::{by_hand, slot};
use crate::support::{enqueue_all, scalar, TestDb};

on_shared_servers!(
    a_claim_racing_the_relay_never_leases_an_aggregate_out_of_order,
    the_same_on_the_applications_pool_at_the_servers_isolation_level,
);

/// How long the relay and the claims race (the old code broke the order within the first
/// second on MariaDB).
const RACE: Duration = Duration::from_secs(6);

/// Aggregates written before the race, two events each: more than the relay fans out in it.
const PAIRS: u64 = 3000;

/// Claims racing the relay, as two processes would.
const CLAIMERS: usize = 2;

/// Blocked deliveries of another aggregate at the head of the endpoint's queue (three digits
/// of row numbers): every claim reads them first, its snapshot taken at the first, then the
/// rows the relay has committed meanwhile.
const BLOCKED_DIGITS: usize = 3;

async fn a_claim_racing_the_relay_never_leases_an_aggregate_out_of_order(db: TestDb) {
    let claims = db.store.clone();
    race(&db, claims).await;
}

/// An application's own pool as it comes (`MySqlStore::from_pool`): on MySQL and MariaDB its
/// sessions keep the server's `REPEATABLE READ`, where a consistent read uses the
/// transaction's first snapshot.
async fn the_same_on_the_applications_pool_at_the_servers_isolation_level(db: TestDb) {
    let claims = match &db.store {
        Store::Mysql(_) => Store::Mysql(MySqlStore::from_pool(
            sqlx::MySqlPool::connect(&db.url).await.unwrap(),
        )),
        Store::Postgres(_) => Store::Postgres(PgStore::from_pool(
            sqlx::PgPool::connect(&db.url).await.unwrap(),
        )),
        Store::Sqlite(_) => unreachable!("a shared server"),
    };
    race(&db, claims).await;
}

/// The relay fans out one aggregate's two events per batch while claims on `claims` lease and
/// finish what they may; every claim's deliveries must be heads of their aggregates.
async fn race(db: &TestDb, claims: Store) {
    let s = &db.store;
    let mut new = NewEndpoint::new("https://a.example/");
    new.ordering = Ordering::Aggregate;
    let e = s.create_endpoint(new).await.unwrap();
    block_the_head(db, e.id.as_str()).await;
    let events = (0..PAIRS)
        .flat_map(|agg| (0..2).map(move |seq| event(agg, seq)))
        .collect();
    enqueue_all(s, events).await;

    let stop = Arc::new(AtomicBool::new(false));
    let (store, relay_stop) = (s.clone(), stop.clone());
    let relay = tokio::spawn(async move {
        while !relay_stop.load(Atomic::Relaxed) && store.relay_batch(2).await.unwrap().events > 0 {}
    });
    let broken = Arc::new(Mutex::new(Vec::new()));
    let mut claimers = Vec::new();
    for n in 0..CLAIMERS {
        let (store, stop, broken) = (claims.clone(), stop.clone(), broken.clone());
        let slots = [slot(&e, 100)];
        claimers.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + RACE;
            let mut leased = 0;
            while tokio::time::Instant::now() < deadline && !stop.load(Atomic::Relaxed) {
                let claim = store
                    .claim_due_deliveries(&format!("w{n}"), &slots, 100)
                    .await
                    .unwrap();
                let ids: Vec<i64> = claim.deliveries.iter().map(|d| d.delivery_id).collect();
                if let Some(wrong) = out_of_order(&store, &claim.deliveries, &ids).await {
                    broken.lock().unwrap().push(wrong);
                    stop.store(true, Atomic::Relaxed);
                }
                finish(&store, &ids).await;
                leased += ids.len();
            }
            leased
        }));
    }
    let mut leased = 0;
    for c in claimers {
        leased += c.await.unwrap();
    }
    stop.store(true, Atomic::Relaxed);
    relay.await.unwrap();
    let broken = broken.lock().unwrap();
    assert!(broken.is_empty(), "claims broke the order: {broken:?}");
    assert!(leased > 100, "the claims leased deliveries ({leased})");
}

fn event(agg: u64, seq: u64) -> NewEvent {
    NewEvent::json("order.changed", &serde_json::json!({"seq": seq}))
        .unwrap()
        .aggregate("order", agg.to_string())
}

/// Deliveries to `endpoint_id` of one aggregate, due since 2000 (ahead of every other), whose
/// first is leased for centuries: the rest are due and blocked.
async fn block_the_head(db: &TestDb, endpoint_id: &str) {
    let (n, from) = numbers(BLOCKED_DIGITS);
    // Fanned out already: on PostgreSQL history without a `txid`, which the relay's cursor
    // never reads (`store::cursor`).
    let (event_id, now, txid) = match &db.store {
        Store::Mysql(_) => (format!("CONCAT('blocked-', {n})"), "UTC_TIMESTAMP(3)", ""),
        _ => (format!("'blocked-' || {n}"), "now()", ", NULL"),
    };
    let txid_column = if txid.is_empty() { "" } else { ", txid" };
    by_hand(
        db,
        &format!(
            "INSERT INTO kurir_outbox (event_id, event_type, payload, dispatched_at{txid_column}) \
             SELECT {event_id}, 'order.changed', '{{}}', {now}{txid} FROM {from}"
        ),
    )
    .await;
    let rows = by_hand(
        db,
        &format!(
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key, \
                 available_at) \
             SELECT id, event_id, '{endpoint_id}', 'blocked', '2000-01-01 00:00:00' \
             FROM kurir_outbox WHERE event_id LIKE 'blocked-%'"
        ),
    )
    .await;
    assert_eq!(rows, 10_u64.pow(BLOCKED_DIGITS as u32));
    let head = scalar(&db.store, "SELECT min(outbox_id) FROM kurir_deliveries").await;
    let leased = by_hand(
        db,
        &format!(
            "UPDATE kurir_deliveries SET status = 'processing', lease_owner = 'elsewhere', \
                 attempt_count = 1, lease_expires_at = '2999-01-01 00:00:00' \
             WHERE outbox_id = {head}"
        ),
    )
    .await;
    assert_eq!(leased, 1);
}

/// What is wrong with a claim of `claimed` (their ids `ids`), read right after it: two
/// deliveries of one aggregate, or one whose aggregate has an earlier unfinished delivery.
async fn out_of_order(
    store: &Store,
    claimed: &[kurir::delivery::ClaimedDelivery],
    ids: &[i64],
) -> Option<String> {
    let aggs: HashSet<_> = claimed.iter().map(|d| &d.event.aggregate_id).collect();
    if aggs.len() < claimed.len() {
        return Some(format!("two of one aggregate in one claim of {ids:?}"));
    }
    if ids.is_empty() {
        return None;
    }
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>();
    let early = scalar(
        store,
        &format!(
            "SELECT count(*) FROM kurir_deliveries d JOIN kurir_deliveries p \
               ON p.endpoint_id = d.endpoint_id AND p.ordering_key = d.ordering_key \
              AND p.outbox_id < d.outbox_id \
             WHERE d.id IN ({}) AND p.status IN ('pending', 'processing', 'failed')",
            list.join(", ")
        ),
    )
    .await;
    (early > 0).then(|| format!("{early} unfinished before the claim of {ids:?}"))
}

/// Marks `ids` sent, as their completion would: their successors become the heads.
async fn finish(store: &Store, ids: &[i64]) {
    if ids.is_empty() {
        return;
    }
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>();
    let sql = format!(
        "UPDATE kurir_deliveries SET status = 'sent', lease_owner = NULL, \
             lease_expires_at = NULL WHERE id IN ({})",
        list.join(", ")
    );
    match store {
        Store::Mysql(my) => sqlx::query(&sql).execute(my.pool()).await.map(drop),
        Store::Postgres(pg) => sqlx::query(&sql).execute(pg.pool()).await.map(drop),
        Store::Sqlite(_) => unreachable!("a shared server"),
    }
    .unwrap();
}
