//! Issue 16, part 2: history outlives its endpoint. Deleting an endpoint keeps its deliveries
//! and attempts (its pending ones end `cancelled`), shows them with its url and a deleted mark,
//! sends it nothing more, refuses to replay them, and retention takes them and then the
//! endpoint's tombstone. Also: SQLite's migration 0010 rebuilds kurir_deliveries without losing
//! an attempt, and the pruner never deletes the attempts of a delivery replayed under it.

use kurir::prune::{cutoffs, round, RoundOutcome};
use kurir::store::retention::{Cutoffs, Pruned};
use kurir::store::Store;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::support::{eventually, on_both_backends, Receiver, TestApp, TestDb};
use crate::support::scalar;

on_both_backends!(deleting_an_endpoint_keeps_its_history_until_retention_takes_it);

/// A one-second retention; the pruner's own rounds are an hour apart, so the test drives them.
const SHORT: &[(&str, &str)] = &[
    ("retention", "1s"),
    ("dead_letter_retention", "1h"),
    ("prune_interval", "1h"),
];

async fn event(app: &TestApp, id: &str) -> Value {
    let (status, body) = app.get(&format!("/v1/events/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn deleting_an_endpoint_keeps_its_history_until_retention_takes_it(db: TestDb) {
    let app = TestApp::spawn_with(&db, SHORT).await;
    let receiver = Receiver::start().await;
    // A failure is retried only an hour later: the delivery waits, `failed`, when deleted.
    let slow_retry = json!({"retry_initial_delay_ms": 3_600_000, "retry_max_delay_ms": 3_600_000});
    let endpoint = app.create_endpoint(&receiver.url, slow_retry).await;
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let sent = app.publish("order.paid", json!({"n": 1})).await;
    app.wait_for_deliveries(&sent, "sent").await;
    receiver.respond_with(500);
    let failed = app.publish("order.paid", json!({"n": 2})).await;
    app.wait_for_deliveries(&failed, "retrying").await;
    assert_eq!(receiver.received().len(), 2);

    let (status, body) = app.delete(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let later = app.publish("order.paid", json!({"n": 3})).await;
    eventually("the relay to fan the later event out", || async {
        let e = event(&app, &later).await;
        // No endpoint takes it: fanned out to none, so no delivery gives `dispatched_at`.
        (e["dispatched"] == true).then_some(())
    })
    .await;

    // The history is kept, with the endpoint's url and when it was deleted.
    let history = event(&app, &sent).await;
    let delivery = &history["deliveries"][0];
    assert_eq!(
        history["deliveries"].as_array().unwrap().len(),
        1,
        "{history}"
    );
    assert_eq!(
        (
            &delivery["status"],
            &delivery["endpoint_id"],
            &delivery["endpoint_url"]
        ),
        (&json!("sent"), &json!(id), &json!(receiver.url)),
        "{history}"
    );
    assert!(delivery["endpoint_deleted_at"].is_string(), "{history}");
    assert_eq!(delivery["attempts"][0]["status_code"], 200, "{history}");
    let history = event(&app, &failed).await;
    let delivery = &history["deliveries"][0];
    assert_eq!(delivery["status"], "cancelled", "{history}");
    assert!(
        delivery["last_error"]
            .as_str()
            .unwrap()
            .contains("endpoint was deleted"),
        "{history}"
    );
    assert_eq!(delivery["next_attempt_at"], Value::Null, "{history}");
    assert_eq!(
        delivery["attempts"].as_array().unwrap().len(),
        1,
        "{history}"
    );
    assert_eq!(delivery["attempts"][0]["status_code"], 500, "{history}");
    assert_eq!(event(&app, &later).await["deliveries"], json!([]));
    let (_, listed) = app.get(&format!("/v1/deliveries?endpoint_id={id}")).await;
    let listed = listed["data"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|d| d["endpoint_deleted_at"].is_string()));

    // The endpoint itself is gone: not found, not listed, not changed, not replayed to.
    let path = format!("/v1/endpoints/{id}");
    assert_eq!(app.get(&path).await.0, StatusCode::NOT_FOUND);
    let (_, patched) = app.patch(&path, json!({"enabled": true})).await;
    assert_eq!(patched["error"]["code"], "not_found", "{patched}");
    assert_eq!(app.delete(&path).await.0, StatusCode::NOT_FOUND);
    let (_, all) = app.get("/v1/endpoints").await;
    let listed = all["data"].as_array().expect("a page of endpoints");
    assert!(listed.iter().all(|e| e["id"] != json!(id)), "{all}");
    let replay = json!({"endpoint_id": id, "reason": "partner is back"});
    let (status, refused) = app.post(&format!("/v1/events/{sent}/replay"), replay).await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (StatusCode::CONFLICT, &json!("endpoint_deleted")),
        "{refused}"
    );
    let bulk = json!({"status": "sent", "endpoint_id": id, "reason": "partner is back"});
    let (status, refused) = app.post("/v1/replays", bulk).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let (status, _) = app
        .post(
            &format!("/v1/events/{sent}/replay"),
            json!({"reason": "all of it"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Retention takes the history, then the tombstone.
    let retention = TestApp::config(&db, SHORT).retention;
    let at = eventually("the events to pass their retention", || async {
        let at = cutoffs(&retention, chrono::Utc::now());
        let counted = app.store.prunable(&at).await.unwrap();
        (counted.events == 3).then_some(at)
    })
    .await;
    let expected = Pruned {
        events: 3,
        deliveries: 2,
        attempts: 2,
        endpoints: 1,
        ..Pruned::default()
    };
    let metrics = kurir::metrics::Metrics::new();
    let none = tokio_util::sync::CancellationToken::new();
    let pruned = round(&app.store, &retention, &metrics, &none)
        .await
        .unwrap();
    assert_eq!(pruned, RoundOutcome::Pruned(expected), "cut off at {at:?}");
    for gone in [&sent, &failed, &later] {
        assert_eq!(
            app.get(&format!("/v1/events/{gone}")).await.0,
            StatusCode::NOT_FOUND
        );
    }
    let sql = format!("SELECT count(*) FROM kurir_endpoints WHERE id = '{id}'");
    assert_eq!(scalar(&app.store, &sql).await, 0, "the tombstone went last");
    assert_eq!(
        receiver.received().len(),
        2,
        "nothing reached the deleted endpoint"
    );
}

/// The race the pruner's deletes close: a replay that commits after the pruner read its
/// candidates. Here the replay holds its row lock while the pruner runs, so the pruner's
/// delete of that delivery waits for it; before, the attempts went first, by a status read
/// without a lock, and the replayed delivery lost them.
async fn a_replay_under_the_pruner_keeps_its_attempts(db: TestDb) {
    let s = &db.store;
    let endpoint = s
        .create_endpoint(kurir::endpoint::NewEndpoint::new("https://a.example/"))
        .await
        .unwrap();
    let ids = crate::support::enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(10).await.unwrap();
    let delivery = scalar(s, "SELECT id FROM kurir_deliveries").await;
    for sql in [
        "UPDATE kurir_deliveries SET status = 'sent', attempt_count = 1",
        "INSERT INTO kurir_attempts (delivery_id, attempt, started_at, duration_ms, \
         status_code) SELECT id, 1, created_at, 5, 200 FROM kurir_deliveries",
    ] {
        execute(s, sql).await;
    }
    // The replay, by hand, so that it can be held open: it locks the delivery row.
    let replay = format!(
        "UPDATE kurir_deliveries SET status = 'pending', attempt_count = 0 WHERE id = {delivery}"
    );
    let held = hold(s, &replay).await;
    let past = Cutoffs {
        events: chrono::Utc::now() + chrono::Duration::hours(1),
        dead_letters: chrono::Utc::now() + chrono::Duration::hours(1),
        inbox: chrono::Utc::now() - chrono::Duration::hours(1),
        replays: None,
        portal: chrono::Utc::now() - chrono::Duration::days(1),
    };
    let pruner = tokio::spawn({
        let s = s.clone();
        async move { s.prune_batch(&past, 100).await }
    });
    eventually("the pruner to wait for the replay's lock", || async {
        (lock_waiters(s).await >= 1).then_some(())
    })
    .await;
    held.commit().await;
    let pruned = pruner.await.unwrap().unwrap().unwrap();
    assert_eq!((pruned.deliveries, pruned.events), (0, 0), "{pruned:?}");
    let attempts = s.attempts_for_delivery(delivery).await.unwrap();
    assert_eq!(attempts.len(), 1, "the replayed delivery keeps its attempt");
    let left = s.deliveries_for_event(&ids[0]).await.unwrap();
    assert_eq!(left[0].status, kurir::delivery::DeliveryStatus::Pending);
    assert_eq!(left[0].endpoint_id, endpoint.id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_under_the_pruner_keeps_its_attempts_on_postgres() {
    if let Some(db) = TestDb::postgres().await {
        a_replay_under_the_pruner_keeps_its_attempts(db).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_under_the_pruner_keeps_its_attempts_on_mysql() {
    if let Some(db) = TestDb::mysql().await {
        a_replay_under_the_pruner_keeps_its_attempts(db).await;
    }
}

/// Runs `sql` on whichever database `store` is.
async fn execute(store: &Store, sql: &str) {
    match store {
        Store::Postgres(pg) => sqlx::query(sql).execute(pg.pool()).await.map(drop),
        Store::Sqlite(sq) => sqlx::query(sql).execute(sq.pool()).await.map(drop),
        Store::Mysql(my) => sqlx::query(sql).execute(my.pool()).await.map(drop),
    }
    .unwrap();
}

/// A transaction that ran `sql` and is held open until [`Held::commit`].
enum Held {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    Mysql(sqlx::Transaction<'static, sqlx::MySql>),
}

impl Held {
    async fn commit(self) {
        match self {
            Held::Postgres(tx) => tx.commit().await,
            Held::Mysql(tx) => tx.commit().await,
        }
        .unwrap();
    }
}

async fn hold(store: &Store, sql: &str) -> Held {
    match store {
        Store::Postgres(pg) => {
            let mut tx = pg.pool().begin().await.unwrap();
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
            Held::Postgres(tx)
        }
        Store::Mysql(my) => {
            let mut tx = my.pool().begin().await.unwrap();
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
            Held::Mysql(tx)
        }
        Store::Sqlite(_) => unreachable!("SQLite has one writer: no replay commits under it"),
    }
}

/// Sessions of this test's database waiting for a row lock (on MySQL: running a delete).
async fn lock_waiters(store: &Store) -> i64 {
    match store {
        Store::Postgres(pg) => crate::support::pg_lock_waiters(pg).await,
        // MariaDB lists a transaction waiting for its first row lock in no InnoDB table: the
        // process list shows the pruner's delete, still running after the replay's update.
        Store::Mysql(_) => {
            scalar(
                store,
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND INFO LIKE 'DELETE FROM kurir_%'",
            )
            .await
        }
        Store::Sqlite(_) => unreachable!(),
    }
}

/// SQLite's migration 0010 rebuilds kurir_deliveries (its status CHECK cannot be altered)
/// with foreign keys off: every delivery and attempt written at 0009 survives, with every
/// column, index and the id counter, and the foreign keys are on again after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_0010_keeps_every_delivery_and_attempt() {
    let db = TestDb::unmigrated(crate::support::Backend::Sqlite)
        .await
        .unwrap();
    let Store::Sqlite(sq) = &db.store else {
        unreachable!()
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
    let mut at_0009 = sqlx::migrate::Migrator::new(std::path::Path::new(dir))
        .await
        .unwrap();
    at_0009.migrations = (at_0009.migrations.iter())
        .filter(|m| m.version <= 9)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    at_0009.run(sq.pool()).await.unwrap();
    for sql in [
        "INSERT INTO kurir_endpoints (id, url, secret) VALUES ('ep', 'https://a.example/', 's')",
        "INSERT INTO kurir_outbox (event_type, payload) VALUES ('a.b', '{}'), ('a.c', '{}'), \
         ('a.d', '{}')",
        "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, status, ordering_key, \
         last_error) SELECT id, event_id, 'ep', 'dead_letter', 'order:1', 'boom' FROM kurir_outbox \
         ORDER BY id",
        "INSERT INTO kurir_attempts (delivery_id, attempt, started_at, duration_ms, status_code) \
         SELECT id, 1, created_at, 7, 500 FROM kurir_deliveries",
        // The newest delivery goes: its id must not be handed out again.
        "DELETE FROM kurir_deliveries WHERE id = 3",
    ] {
        execute(&db.store, sql).await;
    }
    let schema = |db: &Store| {
        let db = db.clone();
        async move {
            let rows: Vec<(String,)> = match &db {
                Store::Sqlite(sq) => sqlx::query_as(
                    "SELECT name FROM sqlite_master WHERE tbl_name = 'kurir_deliveries' \
                     AND type = 'index' AND sql IS NOT NULL ORDER BY name",
                )
                .fetch_all(sq.pool())
                .await
                .unwrap(),
                _ => unreachable!(),
            };
            rows.into_iter().map(|(n,)| n).collect::<Vec<_>>()
        }
    };
    let indexes_before = schema(&db.store).await;
    assert_eq!(
        scalar(&db.store, "SELECT count(*) FROM kurir_attempts").await,
        2
    );

    db.store.migrate().await.unwrap();
    // 0010's rebuild keeps every index; 0022 adds one more, for a subscriber's log by status.
    let mut expected = indexes_before.clone();
    expected.push("kurir_deliveries_endpoint_status".to_owned());
    expected.sort();
    assert_eq!(schema(&db.store).await, expected);
    assert_eq!(
        scalar(&db.store, "SELECT count(*) FROM kurir_attempts").await,
        2
    );
    assert_eq!(
        scalar(
            &db.store,
            "SELECT count(*) FROM kurir_deliveries WHERE ordering_key = 'order:1' \
             AND last_error = 'boom' AND status = 'dead_letter'"
        )
        .await,
        2
    );
    assert_eq!(scalar(&db.store, "PRAGMA foreign_keys").await, 1);
    execute(
        &db.store,
        "UPDATE kurir_deliveries SET status = 'cancelled' WHERE id = 1",
    )
    .await;
    execute(
        &db.store,
        "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
         SELECT id, event_id, 'ep' FROM kurir_outbox WHERE id = 3",
    )
    .await;
    assert_eq!(
        scalar(&db.store, "SELECT max(id) FROM kurir_deliveries").await,
        4,
        "the id counter kept its place"
    );
    // The foreign keys are on and still cascade to the rebuilt table.
    execute(&db.store, "DELETE FROM kurir_deliveries WHERE id = 1").await;
    assert_eq!(
        scalar(&db.store, "SELECT count(*) FROM kurir_attempts").await,
        1
    );
}
