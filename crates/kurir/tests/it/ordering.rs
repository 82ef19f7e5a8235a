//! Ordered delivery per aggregate (issue 15) with real receivers: an endpoint with `ordering:
//! "aggregate"` gets each aggregate's events one at a time in outbox order, while its receiver
//! fails a seeded 30 % of first attempts; a dead-lettered head blocks its aggregate until it is
//! replayed (policy `block`) or not at all (`skip`); other aggregates and an unordered endpoint
//! beside it keep flowing. With three `kurir serve` processes on one database, and across
//! SIGKILLs and restarts, the order holds and nothing is lost.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering as Atomic};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kurir::delivery::DeliveryStatus;
use kurir::endpoint::{Endpoint, NewEndpoint, OnDeadLetter, Ordering};
use kurir::outbox::NewEvent;
use kurir::store::{ReplayFilter, ReplayRequest, Store};

use crate::support::dispatcher::Process;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::{Receiver, Recorded};
use crate::support::{enqueue_all, eventually, test_delivery_config, TestDb};
use crate::{on_both_backends, on_shared_servers};

on_both_backends!(
    each_aggregate_arrives_in_outbox_order_while_first_attempts_fail,
    a_dead_lettered_head_blocks_its_aggregate_until_it_is_replayed,
    with_skip_a_dead_lettered_delivery_holds_nothing_back,
);

/// An event's place: its aggregate and its number within it.
type Place = (u64, u64);

/// What an ordered path of the receiver saw.
#[derive(Default)]
struct Ledger {
    /// Per aggregate, the numbers of its events in the order of their first successful receipt.
    received: HashMap<u64, Vec<u64>>,
    /// Events attempted at least once.
    tried: HashSet<Place>,
    /// Attempts made while an earlier event of the aggregate had not been received yet.
    early: Vec<Place>,
    /// Attempts of events already received (at-least-once repeats, after a crash).
    repeats: usize,
    /// First attempts answered 500.
    failed_first: usize,
    /// Events that count as done without a receipt (dead-lettered under `skip`).
    skipped: HashSet<Place>,
}

impl Ledger {
    /// Answers an attempt of `place`: 500 when it comes too early (the order is broken) or when
    /// `fail` says so, else 200.
    fn answer(&mut self, (agg, seq): Place, fail: impl Fn(bool) -> bool) -> StatusCode {
        let received = self.received.entry(agg).or_default();
        let mut next = received.last().map_or(0, |s| s + 1);
        while self.skipped.contains(&(agg, next)) {
            next += 1;
        }
        if seq < next {
            self.repeats += 1;
            return StatusCode::OK;
        }
        if seq > next {
            self.early.push((agg, seq));
            return StatusCode::INTERNAL_SERVER_ERROR;
        }
        let first = self.tried.insert((agg, seq));
        if fail(first) {
            self.failed_first += usize::from(first);
            return StatusCode::INTERNAL_SERVER_ERROR;
        }
        received.push(seq);
        StatusCode::OK
    }

    fn count(&self) -> usize {
        self.received.values().map(Vec::len).sum()
    }

    /// Every aggregate of `aggs` got events `0..per` in order, none early.
    fn assert_in_order(&self, aggs: u64, per: u64) {
        assert!(
            self.early.is_empty(),
            "attempted too early: {:?}",
            self.early
        );
        for agg in 0..aggs {
            let expected: Vec<u64> = (0..per).collect();
            assert_eq!(self.received.get(&agg), Some(&expected), "aggregate {agg}");
        }
    }
}

/// The place an event's payload names.
fn place(r: &Recorded) -> Place {
    let data = &r.json()["data"];
    (data["agg"].as_u64().unwrap(), data["seq"].as_u64().unwrap())
}

/// Whether the first attempt of `place` fails: a seeded 30 %.
fn fails_first((agg, seq): Place) -> bool {
    const SEED: u64 = 0x006b_7572_6972;
    let mut x = SEED ^ (agg << 32) ^ seq;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x.wrapping_mul(0xBF58_476D_1CE4_E5B9) % 100 < 30
}

/// A receiver keeping an ordered ledger for `/ordered` and an unordered one for `/plain`, both
/// failing the first attempts [`fails_first`] picks.
async fn flaky_receiver() -> (Receiver, Arc<Mutex<Ledger>>, Arc<Mutex<HashSet<Place>>>) {
    let ordered = Arc::new(Mutex::new(Ledger::default()));
    let plain = Arc::new(Mutex::new(HashSet::new()));
    let tried = Mutex::new(HashSet::new());
    let (o, p) = (ordered.clone(), plain.clone());
    let receiver = Receiver::scripted(move |_, r| {
        let at = place(r);
        let status = if r.path == "/ordered" {
            o.lock()
                .unwrap()
                .answer(at, |first| first && fails_first(at))
        } else if tried.lock().unwrap().insert(at) && fails_first(at) {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            p.lock().unwrap().insert(at);
            StatusCode::OK
        };
        status.into_response()
    })
    .await;
    (receiver, ordered, plain)
}

/// `aggs` aggregates of `per` events each, interleaved in the outbox (round by round), so every
/// aggregate's events are spread over the whole backlog.
fn interleaved(aggs: u64, per: u64) -> Vec<NewEvent> {
    let mut events = Vec::new();
    for seq in 0..per {
        for agg in 0..aggs {
            events.push(event(agg, seq));
        }
    }
    events
}

fn event(agg: u64, seq: u64) -> NewEvent {
    NewEvent::json(
        "order.changed",
        &serde_json::json!({"agg": agg, "seq": seq}),
    )
    .unwrap()
    .aggregate("order", agg.to_string())
}

async fn ordered_endpoint(store: &Store, url: String, policy: OnDeadLetter) -> Endpoint {
    let mut new = NewEndpoint::new(url);
    new.ordering = Ordering::Aggregate;
    new.ordering_on_dead_letter = policy;
    new.overrides.retry_max_attempts = Some(2);
    store.create_endpoint(new).await.unwrap()
}

async fn relay_all(store: &Store) {
    while store.relay_batch(100).await.unwrap().events > 0 {}
}

/// The flaky receiver with an ordered endpoint (`/ordered`) and an unordered one (`/plain`),
/// and `aggs` × `per` interleaved events written.
async fn flaky_scenario(
    db: &TestDb,
    aggs: u64,
    per: u64,
) -> (Receiver, Arc<Mutex<Ledger>>, Arc<Mutex<HashSet<Place>>>) {
    let (rx, ordered, plain) = flaky_receiver().await;
    let mut new = NewEndpoint::new(rx.url("/ordered"));
    new.ordering = Ordering::Aggregate;
    db.store.create_endpoint(new).await.unwrap();
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/plain")))
        .await
        .unwrap();
    enqueue_all(&db.store, interleaved(aggs, per)).await;
    (rx, ordered, plain)
}

async fn each_aggregate_arrives_in_outbox_order_while_first_attempts_fail(db: TestDb) {
    let (aggs, per) = (5, 8);
    let (_rx, ordered, plain) = flaky_scenario(&db, aggs, per).await;
    relay_all(&db.store).await;
    let process = Process::start(&db.store, test_delivery_config(), "only");
    let total = (aggs * per) as usize;
    eventually("every event at both endpoints", || async {
        let both = ordered.lock().unwrap().count() == total && plain.lock().unwrap().len() == total;
        both.then_some(())
    })
    .await;
    process.stop().await;
    let ledger = ordered.lock().unwrap();
    ledger.assert_in_order(aggs, per);
    assert!(
        ledger.failed_first >= 5,
        "the receiver failed first attempts ({})",
        ledger.failed_first
    );
    assert_eq!(ledger.repeats, 0, "no crash, no repeat");
}

/// The receiver of the dead-letter scenarios: `/ordered`, failing every attempt of event 1 of
/// aggregate 0 while `down` is set. Under `skip` the ledger expects the events after it next.
async fn one_event_down(
    down: &Arc<AtomicBool>,
    policy: OnDeadLetter,
) -> (Receiver, Arc<Mutex<Ledger>>) {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (l, down) = (ledger.clone(), down.clone());
    let receiver = Receiver::scripted(move |_, r| -> Response {
        let at = place(r);
        let broken = at == (0, 1) && down.load(Atomic::SeqCst);
        let mut ledger = l.lock().unwrap();
        if broken {
            ledger.tried.insert(at);
            if policy == OnDeadLetter::Skip {
                ledger.skipped.insert(at);
            }
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        ledger.answer(at, |_| false).into_response()
    })
    .await;
    (receiver, ledger)
}

async fn dead_letters(store: &Store) -> i64 {
    let counts = store.count_deliveries_by_status().await.unwrap();
    counts
        .iter()
        .find(|(s, _)| s == DeliveryStatus::DeadLetter.as_str())
        .map_or(0, |(_, n)| *n)
}

/// Aggregate 0's event 1 dead-letters (two attempts); then aggregate 1's events are written and
/// flow. Returns the receiver, its ledger and the running process.
async fn dead_letter_head(
    db: &TestDb,
    policy: OnDeadLetter,
    down: &Arc<AtomicBool>,
) -> (Receiver, Arc<Mutex<Ledger>>, Process, Endpoint) {
    let (rx, ledger) = one_event_down(down, policy).await;
    let e = ordered_endpoint(&db.store, rx.url("/ordered"), policy).await;
    enqueue_all(&db.store, (0..4).map(|seq| event(0, seq)).collect()).await;
    relay_all(&db.store).await;
    let process = Process::start(&db.store, test_delivery_config(), "only");
    eventually("event 1 of aggregate 0 to be dead-lettered", || async {
        (dead_letters(&db.store).await == 1).then_some(())
    })
    .await;
    // Written after the dead-letter: once they have arrived, claims have run since, and any
    // of aggregate 0's due events they could take (all older) would have been taken first.
    enqueue_all(&db.store, (0..3).map(|seq| event(1, seq)).collect()).await;
    relay_all(&db.store).await;
    process.wake.notify_one();
    eventually("aggregate 1 to arrive", || async {
        let l = ledger.lock().unwrap();
        (l.received.get(&1).map_or(0, Vec::len) == 3).then_some(())
    })
    .await;
    (rx, ledger, process, e)
}

async fn a_dead_lettered_head_blocks_its_aggregate_until_it_is_replayed(db: TestDb) {
    let down = Arc::new(AtomicBool::new(true));
    let (_rx, ledger, process, e) = dead_letter_head(&db, OnDeadLetter::Block, &down).await;
    {
        let l = ledger.lock().unwrap();
        assert_eq!(l.received.get(&0), Some(&vec![0]), "only the event before");
        let later: Vec<_> = l.tried.iter().filter(|p| p.0 == 0 && p.1 > 1).collect();
        assert!(later.is_empty(), "blocked events were attempted: {later:?}");
    }
    down.store(false, Atomic::SeqCst);
    let replay = ReplayRequest {
        filter: ReplayFilter {
            status: Some(DeliveryStatus::DeadLetter),
            endpoint_id: Some(e.id.to_string()),
            ..Default::default()
        },
        actor: "test".into(),
        via: kurir::access::Via::Api,
        reason: "receiver fixed".into(),
    };
    assert_eq!(db.store.replay(&replay).await.unwrap().count, 1);
    process.wake.notify_one();
    eventually("aggregate 0 to arrive whole", || async {
        (ledger.lock().unwrap().count() == 7).then_some(())
    })
    .await;
    process.stop().await;
    let l = ledger.lock().unwrap();
    assert!(l.early.is_empty(), "attempted too early: {:?}", l.early);
    assert_eq!(l.received.get(&0), Some(&vec![0, 1, 2, 3]));
    assert_eq!(l.received.get(&1), Some(&vec![0, 1, 2]));
}

async fn with_skip_a_dead_lettered_delivery_holds_nothing_back(db: TestDb) {
    let down = Arc::new(AtomicBool::new(true));
    let (_rx, ledger, process, _) = dead_letter_head(&db, OnDeadLetter::Skip, &down).await;
    eventually("aggregate 0's events after the dead letter", || async {
        let l = ledger.lock().unwrap();
        (l.received.get(&0).map_or(0, Vec::len) == 3).then_some(())
    })
    .await;
    process.stop().await;
    assert_eq!(dead_letters(&db.store).await, 1);
    let l = ledger.lock().unwrap();
    assert!(l.early.is_empty(), "attempted too early: {:?}", l.early);
    assert_eq!(l.received.get(&0), Some(&vec![0, 2, 3]));
    assert_eq!(l.received.get(&1), Some(&vec![0, 1, 2]));
}

on_shared_servers!(
    three_processes_keep_30_aggregates_in_order,
    killed_and_restarted_processes_keep_the_order,
);

/// Aggregates and events per aggregate of the multi-process scenarios.
const AGGS: u64 = 30;
const PER: u64 = 30;

/// `kurir serve` with timeouts short enough that a killed process's leases (margin plus four
/// rounds of connect and response timeouts) run out within seconds.
fn serve(db: &TestDb, dir: &std::path::Path) -> Kurir {
    let mut cmd = kurir_serve(&db.url, dir);
    cmd.env("KURIR_CONNECT_TIMEOUT", "200ms")
        .env("KURIR_REQUEST_TIMEOUT", "300ms");
    Kurir::spawn(cmd)
}

async fn all_arrived(ordered: &Mutex<Ledger>, plain: &Mutex<HashSet<Place>>) {
    let total = (AGGS * PER) as usize;
    eventually("every event at both endpoints", || async {
        let both = ordered.lock().unwrap().count() == total && plain.lock().unwrap().len() == total;
        both.then_some(())
    })
    .await;
}

async fn three_processes_keep_30_aggregates_in_order(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (_rx, ordered, plain) = flaky_scenario(&db, AGGS, PER).await;
    let started = std::time::Instant::now();
    // The default test timeouts, not `serve`'s short ones: a receiver slowed past a short
    // response timeout on a loaded machine would be sent the event again, a repeat that is
    // at-least-once, not a fault, and that this test counts as one.
    let processes: Vec<Kurir> = (0..3)
        .map(|_| Kurir::spawn(kurir_serve(&db.url, dir.path())))
        .collect();
    all_arrived(&ordered, &plain).await;
    let elapsed = started.elapsed();
    drop(processes);
    let ledger = ordered.lock().unwrap();
    ledger.assert_in_order(AGGS, PER);
    assert_eq!(ledger.repeats, 0, "no crash, no repeat");
    eprintln!(
        "ordering on {}: {} events to each of two endpoints by 3 processes in {:.2}s \
         ({} first attempts failed; debug build, including start-up)",
        db.store.backend(),
        AGGS * PER,
        elapsed.as_secs_f64(),
        ledger.failed_first
    );
}

async fn killed_and_restarted_processes_keep_the_order(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (_rx, ordered, plain) = flaky_scenario(&db, AGGS, PER).await;
    let mut processes: Vec<Kurir> = (0..3).map(|_| serve(&db, dir.path())).collect();
    let third = (AGGS * PER / 3) as usize;
    eventually("a third of the ordered events", || async {
        (ordered.lock().unwrap().count() >= third).then_some(())
    })
    .await;
    // One process dies; the other two go on.
    processes.remove(0).kill().await;
    eventually("two thirds of the ordered events", || async {
        (ordered.lock().unwrap().count() >= 2 * third).then_some(())
    })
    .await;
    // Then all of them; two new ones finish the work.
    for mut p in processes.drain(..) {
        p.kill().await;
    }
    let processes: Vec<Kurir> = (0..2).map(|_| serve(&db, dir.path())).collect();
    all_arrived(&ordered, &plain).await;
    drop(processes);
    let ledger = ordered.lock().unwrap();
    ledger.assert_in_order(AGGS, PER);
    eprintln!(
        "ordering across kills on {}: {} repeats of events received before a kill",
        db.store.backend(),
        ledger.repeats
    );
}
