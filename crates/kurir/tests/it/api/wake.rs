//! Wake-ups: publishing wakes the relay at once, directly in the process that accepted the
//! event; on PostgreSQL other processes learn of new events and deliveries through `LISTEN`
//! (`kurir_outbox`, `kurir_deliveries`). The poll intervals are an hour here, so only a wake-up
//! can get the events delivered.

use kurir::wake::Wakes;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::support::{eventually, Backend, Receiver, TestApp, TestDb};

const NO_POLLING: &[(&str, &str)] = &[("poll_interval", "1h"), ("relay_poll_interval", "1h")];

async fn an_api_publish_wakes_the_relay(backend: Backend) {
    let Some(database) = TestDb::unmigrated(backend).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, NO_POLLING).await;
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let event_id = app.publish("order.paid", json!({})).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    app.stopper().stop().await;
    drop(database);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_publish_wakes_the_relay_on_sqlite() {
    an_api_publish_wakes_the_relay(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_publish_wakes_the_relay_on_postgres() {
    an_api_publish_wakes_the_relay(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_publish_wakes_the_relay_on_mysql() {
    an_api_publish_wakes_the_relay(Backend::Mysql).await;
}

/// Waits until the server `app` listens for other processes' notifications.
async fn wait_for_listen(pool: &sqlx::PgPool) {
    eventually("the server to LISTEN", || async move {
        let listening: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE '%LISTEN \"kurir_deliveries\"%'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        (listening > 0).then_some(())
    })
    .await;
}

/// Another kurir process on the same database: a store and its wake-ups, announced.
/// Another kurir process on `database`: its own store handle, with the key the server's
/// data directory holds (every process sharing a database has the same; the relay opens the
/// endpoints' secrets for the deliveries it hands its own dispatcher), and its own wake-ups.
async fn other_process(
    database: &TestDb,
) -> (kurir::store::Store, Wakes, TaskTracker, CancellationToken) {
    let key_file = database.dir.path().join("encryption-key");
    let text = std::fs::read_to_string(&key_file).unwrap();
    let keys = kurir::encryption::Keyring::from_file_text(&text, &key_file).unwrap();
    let store = kurir::store::Store::connect(&database.url)
        .await
        .unwrap()
        .with_keyring(std::sync::Arc::new(keys));
    let (wakes, tasks, stop) = (
        Wakes::announced(),
        TaskTracker::new(),
        CancellationToken::new(),
    );
    wakes.spawn(&tasks, &store, "the-other-process", &stop);
    (store, wakes, tasks, stop)
}

/// An event published by another process (here: the test's own store handle and wake-ups)
/// reaches the server's relay only through its `LISTEN`: the other process announces it after
/// its publish committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_announced_by_another_process_wakes_the_relay_on_postgres() {
    let Some(database) = TestDb::unmigrated(Backend::Postgres).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, NO_POLLING).await;
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    wait_for_listen(&pool).await;
    let (other, wakes, tasks, stop) = other_process(&database).await;
    let event = kurir::outbox::NewEvent::json("order.paid", &json!({"from": "elsewhere"})).unwrap();
    let published = other.publish_event(event, None).await.unwrap();
    let kurir::store::Published::Created(event_id) = published else {
        panic!("{published:?}")
    };
    wakes.relay.wake();
    app.wait_for_deliveries(&event_id, "sent").await;
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    other.close().await;
    pool.close().await;
    app.stopper().stop().await;
    drop(database);
}

/// Deliveries another process's relay created reach this server's dispatcher only through its
/// `LISTEN` (neither of its loops polls here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_relayed_by_another_process_wake_the_dispatcher_on_postgres() {
    let Some(database) = TestDb::unmigrated(Backend::Postgres).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, NO_POLLING).await;
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    // One event through the server itself: its relay and dispatcher have run and are waiting.
    let first = app.publish("order.paid", json!({})).await;
    app.wait_for_deliveries(&first, "sent").await;
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    wait_for_listen(&pool).await;
    let (other, wakes, tasks, stop) = other_process(&database).await;
    let event_id: String = sqlx::query_scalar(
        "INSERT INTO kurir_outbox (event_type, payload) VALUES ('order.paid', '{}') RETURNING event_id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let metrics = kurir::metrics::Metrics::new();
    let relayed = kurir::relay::step(&other, 100, &wakes.dispatcher, &metrics)
        .await
        .unwrap();
    assert_eq!(
        relayed.deliveries, 1,
        "the other process fanned the event out"
    );
    app.wait_for_deliveries(&event_id, "sent").await;
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    other.close().await;
    pool.close().await;
    app.stopper().stop().await;
    drop(database);
}
