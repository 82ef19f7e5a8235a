//! The append-only outbox (issue 19): on PostgreSQL and SQLite the relay reads past a cursor and
//! never updates an outbox row; a transaction that commits late is still relayed, a rolled-back
//! one never, one relay holds the cursor at a time and another takes it over when it dies.

use std::collections::HashMap;
use std::time::Instant;

use kurir::endpoint::NewEndpoint;
use kurir::outbox::{enqueue, NewEvent};
use kurir::store::Store;

use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{
    enqueue_events, eventually, scalar, test_delivery_config, Backend, TestDb, TestServer,
};

crate::on_shared_servers!(
    a_late_commit_is_delivered_after_a_later_id_and_a_rollback_never,
    two_processes_relay_in_turn_and_one_killed_mid_stream_hands_over,
);

fn event(n: &str) -> NewEvent {
    NewEvent::json("order.paid", &serde_json::json!({ "n": n })).unwrap()
}

/// Each outbox row's id with its row version (PostgreSQL: the inserting transaction and the
/// tuple's place; an UPDATE changes both).
const ROW_VERSIONS: &str = "SELECT string_agg(id || ':' || xmin::text || ':' || ctid::text, ',' \
     ORDER BY id) FROM kurir_outbox";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaying_never_updates_an_outbox_row_on_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pg) = &db.store else {
        unreachable!()
    };
    let s = &db.store;
    s.create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 5).await;
    let versions = || async {
        sqlx::query_scalar::<_, String>(ROW_VERSIONS)
            .fetch_one(pg.pool())
            .await
            .unwrap()
    };
    let before = versions().await;
    let relayed = s.relay_batch(100).await.unwrap();
    assert_eq!((relayed.events, relayed.deliveries), (5, 5));
    assert_eq!(versions().await, before, "no outbox row has a new version");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaying_never_updates_an_outbox_row_on_sqlite() {
    let db = TestDb::sqlite().await;
    let Store::Sqlite(sq) = &db.store else {
        unreachable!()
    };
    let s = &db.store;
    s.create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE test_outbox_updates (id INTEGER); \
         CREATE TRIGGER test_outbox_updated AFTER UPDATE ON kurir_outbox \
         BEGIN INSERT INTO test_outbox_updates VALUES (NEW.id); END;",
    )
    .execute(sq.pool())
    .await
    .unwrap();
    enqueue_events(s, "order.paid", 5).await;
    let relayed = s.relay_batch(100).await.unwrap();
    assert_eq!((relayed.events, relayed.deliveries), (5, 5));
    assert_eq!(
        scalar(s, "SELECT count(*) FROM test_outbox_updates").await,
        0,
        "no outbox row was updated"
    );
}

/// A takes its outbox id before B, B commits first: B is delivered while A is still open, then
/// A once it commits. On PostgreSQL the relay reads in the order of the inserting transactions'
/// ids, so B takes its transaction id first here (a transaction with a lower id still open
/// holds every later one back: `a_long_transaction_holds_the_relay_back_until_it_ends`).
async fn a_late_commit_is_delivered_after_a_later_id_and_a_rollback_never(db: TestDb) {
    let rx = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/hook")))
        .await
        .unwrap();
    let server = TestServer::start(&db, test_delivery_config()).await;
    let take_xid = match db.backend {
        Backend::Postgres => "SELECT pg_current_xact_id()::text",
        _ => "SELECT 'none'",
    };
    macro_rules! run {
        ($pool:expr) => {{
            let mut b = $pool.begin().await.unwrap();
            sqlx::query(take_xid).execute(&mut *b).await.unwrap();
            let mut a = $pool.begin().await.unwrap();
            let a_id = enqueue(&mut a, event("a")).await.unwrap().to_string();
            let b_id = enqueue(&mut b, event("b")).await.unwrap().to_string();
            b.commit().await.unwrap();
            let mut c = $pool.begin().await.unwrap();
            enqueue(&mut c, event("c")).await.unwrap();
            c.rollback().await.unwrap();
            rx.wait_for(1).await;
            assert_eq!(rx.requests()[0].event_id(), b_id, "B first, A still open");
            a.commit().await.unwrap();
            rx.wait_for(2).await;
            assert_eq!(rx.requests()[1].event_id(), a_id, "A once committed");
            let mut d = $pool.begin().await.unwrap();
            let d_id = enqueue(&mut d, event("d")).await.unwrap().to_string();
            d.commit().await.unwrap();
            rx.wait_for(3).await;
            (a_id, b_id, d_id)
        }};
    }
    let (a_id, b_id, d_id) = match &db.store {
        Store::Postgres(pg) => run!(pg.pool()),
        Store::Mysql(my) => run!(my.pool()),
        Store::Sqlite(_) => unreachable!("one writer at a time"),
    };
    server.stop().await;
    let a = db.store.get_event(&a_id).await.unwrap().unwrap();
    let b = db.store.get_event(&b_id).await.unwrap().unwrap();
    assert!(a.id < b.id, "A took the lower id");
    let seen: Vec<String> = rx.requests().iter().map(|r| r.event_id()).collect();
    assert_eq!(
        seen,
        [b_id, a_id, d_id],
        "each once; the rolled-back C never"
    );
    assert!(a.dispatched && b.dispatched);
}

/// A transaction anywhere on the server that holds a transaction id older than an event's
/// holds the event back until it ends: the relay neither fans it out nor looks again and again
/// (the outbox counts as having nothing ready), and fans it out once the transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_transaction_holds_the_relay_back_until_it_ends() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pg) = &db.store else {
        unreachable!()
    };
    let s = &db.store;
    s.create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    let mut long = pg.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()::text")
        .execute(&mut *long)
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 2).await;
    assert!(!s.outbox_pending().await.unwrap(), "nothing ready yet");
    assert_eq!(s.relay_batch(100).await.unwrap().events, 0);
    assert_eq!(s.backlog().await.unwrap().undispatched, 2, "but it waits");
    long.commit().await.unwrap();
    assert!(s.outbox_pending().await.unwrap());
    assert_eq!(s.relay_batch(100).await.unwrap().events, 2);
}

/// One relay at a time holds the cursor: another finds it locked and returns at once with
/// nothing, and takes it over when the holder's connection goes (a process that died).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_relays_cursor_passes_to_another() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pg) = &db.store else {
        unreachable!()
    };
    let s = &db.store;
    s.create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 3).await;
    // A relay mid-batch, as another process's would be.
    let mut holder = pg.pool().begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid() FROM kurir_relay_cursor FOR UPDATE")
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    assert!(s.outbox_pending().await.unwrap());
    assert_eq!(
        s.relay_batch(100).await.unwrap().events,
        0,
        "held elsewhere"
    );
    let other = db.connect_again().await;
    let Store::Postgres(other_pg) = &other else {
        unreachable!()
    };
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(other_pg.pool())
        .await
        .unwrap();
    drop(holder);
    eventually("the cursor to pass on", || async {
        (s.relay_batch(100).await.ok()?.events == 3).then_some(())
    })
    .await;
    assert_eq!(s.relay_batch(100).await.unwrap().events, 0, "each once");
    other.close().await;
}

/// SQLite: an explicit id at or below the cursor would never be relayed, so it is refused; one
/// above is relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_an_explicit_id_the_relay_has_passed() {
    let db = TestDb::sqlite().await;
    let Store::Sqlite(sq) = &db.store else {
        unreachable!()
    };
    let s = &db.store;
    s.create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 3).await;
    assert_eq!(s.relay_batch(100).await.unwrap().events, 3);
    sqlx::query("DELETE FROM kurir_outbox WHERE id = 2")
        .execute(sq.pool())
        .await
        .unwrap();
    let insert = |id: i64| {
        sqlx::query(
            "INSERT INTO kurir_outbox (id, event_type, payload) VALUES (?1, 'order.paid', '{}')",
        )
        .bind(id)
        .execute(sq.pool())
    };
    let refused = insert(2).await.unwrap_err().to_string();
    assert!(refused.contains("kurir_outbox_id"), "{refused}");
    insert(10).await.unwrap();
    let relayed = s.relay_batch(100).await.unwrap();
    assert_eq!((relayed.events, relayed.deliveries), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_waiting_at_the_cursor_migration_are_relayed_on_sqlite() {
    rows_waiting_at_the_cursor_migration_are_relayed(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_waiting_at_the_cursor_migration_are_relayed_on_postgres() {
    rows_waiting_at_the_cursor_migration_are_relayed(Backend::Postgres).await
}

/// A database at migration 0010 with rows the relay fanned out (marked, with their deliveries)
/// and rows still waiting: after 0011 the waiting ones are fanned out, the others not again.
async fn rows_waiting_at_the_cursor_migration_are_relayed(backend: Backend) {
    let Some(db) = TestDb::unmigrated(backend).await else {
        return;
    };
    macro_rules! to_0010 {
        ($migrator:expr, $pool:expr) => {{
            let mut migrator = $migrator;
            migrator.migrations = (migrator.migrations.iter())
                .filter(|m| m.version <= 10)
                .cloned()
                .collect::<Vec<_>>()
                .into();
            migrator.run($pool).await.unwrap();
        }};
    }
    match &db.store {
        Store::Postgres(pg) => to_0010!(sqlx::migrate!("./migrations/postgres"), pg.pool()),
        Store::Sqlite(sq) => to_0010!(sqlx::migrate!("./migrations/sqlite"), sq.pool()),
        Store::Mysql(_) => unreachable!("MySQL keeps dispatched_at"),
    }
    let s = &db.store;
    // Written as the kurir of migration 0010 wrote them: today's statements name later columns.
    let endpoint = "0190f3c2-0000-7000-8000-000000000001";
    let mut writes = vec![format!(
        "INSERT INTO kurir_endpoints (id, url, secret) \
         VALUES ('{endpoint}', 'https://partner.example/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')"
    )];
    for n in 0..4 {
        writes.push(format!(
            "INSERT INTO kurir_outbox (event_id, event_type, payload) \
             VALUES ('evt_{n}', 'order.paid', '{{\"n\":{n}}}')"
        ));
    }
    // The relay before the cursor fanned out the first two.
    for sql in writes.into_iter().chain([
        format!(
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
             SELECT id, event_id, '{endpoint}' FROM kurir_outbox WHERE id <= 2"
        ),
        "UPDATE kurir_outbox SET dispatched_at = created_at WHERE id <= 2".to_owned(),
    ]) {
        match s {
            Store::Postgres(pg) => drop(sqlx::query(&sql).execute(pg.pool()).await.unwrap()),
            Store::Sqlite(sq) => drop(sqlx::query(&sql).execute(sq.pool()).await.unwrap()),
            Store::Mysql(_) => unreachable!(),
        }
    }
    s.migrate().await.unwrap();
    assert_eq!(s.stats().await.unwrap().events_undispatched, 2);
    let relayed = s.relay_batch(100).await.unwrap();
    assert_eq!((relayed.events, relayed.deliveries), (2, 2));
    assert_eq!(s.relay_batch(100).await.unwrap().events, 0);
    assert_eq!(scalar(s, "SELECT count(*) FROM kurir_deliveries").await, 4);
    assert_eq!(s.stats().await.unwrap().events_undispatched, 0);
    if backend == Backend::Postgres {
        let history = "SELECT count(*) FROM kurir_outbox WHERE txid IS NULL";
        assert_eq!(
            scalar(s, history).await,
            2,
            "fanned-out history has no txid"
        );
    }
}

/// Two `kurir serve` processes on one database: the relay passes between them batch by batch
/// (on PostgreSQL whichever takes the cursor's lock). One is SIGKILLed while events stream in,
/// whatever it was doing: the other relays the rest, every event arrives, and only one the dead
/// process had already sent may arrive twice.
async fn two_processes_relay_in_turn_and_one_killed_mid_stream_hands_over(db: TestDb) {
    let rx = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/hook")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Leases of 1 s + 4 × (0.2 + 0.5) s, so the dead one's are swept soon.
    let spawn = || {
        let mut cmd = kurir_serve(&db.url, dir.path());
        cmd.env("KURIR_CONNECT_TIMEOUT", "200ms")
            .env("KURIR_REQUEST_TIMEOUT", "500ms");
        Kurir::spawn(cmd)
    };
    let mut victim = spawn();
    let mut survivor = spawn();
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.extend(enqueue_events(&db.store, "order.paid", 10).await);
    }
    rx.wait_until("the first 100 events", |r, _| r.len() >= 100)
        .await;
    let store = db.store.clone();
    let stream = tokio::spawn(async move {
        let mut ids = Vec::new();
        for _ in 0..20 {
            ids.extend(enqueue_events(&store, "order.paid", 10).await);
        }
        ids
    });
    rx.wait_until("the stream to be under way", |r, _| r.len() > 120)
        .await;
    victim.kill().await;
    let killed_at = Instant::now();
    ids.extend(stream.await.unwrap());
    eventually("every event to arrive", || async {
        let seen: std::collections::HashSet<String> =
            rx.requests().iter().map(|r| r.event_id()).collect();
        ids.iter().all(|id| seen.contains(id)).then_some(())
    })
    .await;
    let mut receipts: HashMap<String, Vec<Instant>> = HashMap::new();
    for r in rx.requests() {
        receipts.entry(r.event_id()).or_default().push(r.at);
    }
    for id in &ids {
        let at = &receipts[id];
        assert!(
            at.len() == 1 || at.iter().min().is_some_and(|first| *first < killed_at),
            "{id} arrived twice, first after the kill"
        );
    }
    assert!(survivor.terminate().await.success(), "SIGTERM exits 0");
}
