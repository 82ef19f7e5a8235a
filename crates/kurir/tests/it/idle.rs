//! What an idle kurir costs the application's database, with the real binary: its statements
//! are counted at a proxy in front of PostgreSQL or MySQL/MariaDB, which sees this process's
//! connections and nobody else's. (A server's own counters cannot say as much here: MariaDB's
//! `Questions` and `Com_*` count every session of the server, other tests' included, and
//! `performance_schema`, which could count per connection, is off by default.) Wall-clock
//! figures (the delay of the first event after an idle spell) are printed, not asserted;
//! BENCHMARKS.md has the measured ones.

use std::time::{Duration, Instant};

use kurir::endpoint::NewEndpoint;
use kurir::inbox_source::NewSource;
use kurir::store::Store;
use kurir_core::Secret;

use crate::support::process::{kurir_serve, Kurir};
use crate::support::proxy::{url_through, Proxy};
use crate::support::receiver::Receiver;
use crate::support::TestDb;
use crate::{on_both_backends, on_shared_servers};

on_both_backends!(a_notification_reaches_listeners_and_a_publish_sends_none);
on_shared_servers!(an_idle_process_costs_the_database_at_most_five_statements_a_second);

/// The bound on an idle process: statements a second, all loops together.
const MOST_STATEMENTS_PER_SECOND: f64 = 5.0;

/// How long the idle process is watched.
const WINDOW: Duration = Duration::from_secs(10);

/// `Store::notify` reaches every listener of the channel; a publish notifies nobody itself (the
/// API wakes relays after the commit, never inside the transaction: PostgreSQL serialises
/// notifying commits). The first notification after a publish is therefore the test's own.
async fn a_notification_reaches_listeners_and_a_publish_sends_none(db: TestDb) {
    let Store::Postgres(pg) = &db.store else {
        // One process per SQLite file: nobody to tell, and nothing fails.
        db.store.notify(&["kurir_outbox"], "x").await.unwrap();
        return;
    };
    let mut listener = sqlx::postgres::PgListener::connect_with(pg.pool())
        .await
        .unwrap();
    listener.listen("kurir_outbox").await.unwrap();
    let event = kurir::outbox::NewEvent::json("order.paid", &serde_json::json!({})).unwrap();
    db.store.publish_event(event, None).await.unwrap();
    db.store
        .notify(&["kurir_outbox", "kurir_deliveries"], "marker")
        .await
        .unwrap();
    let first = listener.recv().await.unwrap();
    assert_eq!(
        (first.channel(), first.payload()),
        ("kurir_outbox", "marker"),
        "the publish's transaction sent no notification of its own"
    );
}

/// Statements the proxy counts over `window`.
async fn statements_over(proxy: &Proxy, window: Duration) -> u64 {
    let before = proxy.statements();
    // An idle kurir's statements over a stretch of time are what is measured.
    tokio::time::sleep(window).await;
    proxy.statements() - before
}

/// An endpoint (so the dispatcher claims) and an inbox source (so the inbox runner claims).
async fn something_to_look_for(store: &Store, receiver: &Receiver) {
    store
        .create_endpoint(NewEndpoint::new(receiver.url("/idle")))
        .await
        .unwrap();
    let secret = Secret::generate();
    let source = NewSource {
        name: "idle".into(),
        scheme: "kurir".into(),
        secrets: vec![secret.expose().to_owned().into()],
        tolerance_seconds: None,
        forward_url: receiver.url("/forwarded"),
    }
    .validate(chrono::Utc::now())
    .unwrap();
    assert!(store.create_source(&source.source).await.unwrap());
}

/// An idle `kurir serve` with its default poll intervals, an endpoint and an inbox source
/// issues at most 5 statements a second once it has settled (it used to issue about 180: the
/// relay's 5 ms poll and the claim's 50 ms one); an event inserted with plain SQL after that
/// idle spell is still delivered. On MySQL, with no notifications, that is the polling alone.
async fn an_idle_process_costs_the_database_at_most_five_statements_a_second(db: TestDb) {
    let receiver = Receiver::ok().await;
    something_to_look_for(&db.store, &receiver).await;
    let proxy = Proxy::counting(&db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = kurir_serve(&url_through(&db.url, &proxy), dir.path());
    for setting in ["KURIR_POLL_INTERVAL", "KURIR_LEASE_MARGIN"] {
        cmd.env_remove(setting);
    }
    let mut kurir = Kurir::spawn(cmd);

    // Settled: its loops have slowed down (within a few seconds of the last work).
    let deadline = Instant::now() + Duration::from_secs(30);
    let settle = Duration::from_secs(2);
    loop {
        let n = statements_over(&proxy, settle).await;
        if n as f64 <= MOST_STATEMENTS_PER_SECOND * settle.as_secs_f64() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kurir never settled: still {n} statements in {settle:?}"
        );
    }
    let n = statements_over(&proxy, WINDOW).await;
    let per_second = n as f64 / WINDOW.as_secs_f64();
    eprintln!(
        "idle ({:?}): {n} statements in {WINDOW:?} ({per_second:.1}/s)",
        db.backend
    );
    assert!(
        per_second <= MOST_STATEMENTS_PER_SECOND,
        "an idle process issued {per_second:.1} statements/s"
    );

    let insert = "INSERT INTO kurir_outbox (event_type, payload) VALUES ('order.paid', '{}')";
    let committed = Instant::now();
    match &db.store {
        Store::Postgres(pg) => sqlx::query(insert).execute(pg.pool()).await.map(drop),
        Store::Mysql(my) => sqlx::query(insert).execute(my.pool()).await.map(drop),
        Store::Sqlite(_) => unreachable!("on_shared_servers runs on servers only"),
    }
    .unwrap();
    receiver.wait_for(1).await;
    eprintln!(
        "idle: the first event after the idle spell arrived {:?} after its commit",
        committed.elapsed()
    );
    assert!(kurir.terminate().await.success());
}
