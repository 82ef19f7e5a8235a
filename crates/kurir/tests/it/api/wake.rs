//! Publishing wakes the relay at once: directly in the process that accepted the event, and on
//! PostgreSQL through `LISTEN kurir_outbox` in every process. The poll interval is an hour here,
//! so only a wake-up can get the events delivered.

use super::support::{eventually, Backend, Receiver, TestApp, TestDatabase};
use serde_json::json;

const NO_POLLING: &[(&str, &str)] = &[("poll_interval", "1h"), ("relay_poll_interval", "1h")];

async fn an_api_publish_wakes_the_relay(backend: Backend) {
    let Some(database) = TestDatabase::create(backend).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, NO_POLLING).await;
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let event_id = app.publish("order.paid", json!({})).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    app.stopper().stop().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_publish_wakes_the_relay_on_sqlite() {
    an_api_publish_wakes_the_relay(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_publish_wakes_the_relay_on_postgres() {
    an_api_publish_wakes_the_relay(Backend::Postgres).await;
}

/// An event published by another process (here: the test's own store handle, whose publish
/// sends `NOTIFY kurir_outbox`) reaches the server's relay only through its `LISTEN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_from_another_process_wakes_the_relay_on_postgres() {
    let Some(database) = TestDatabase::create(Backend::Postgres).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, NO_POLLING).await;
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    eventually("the server to LISTEN", || {
        let pool = &pool;
        async move {
            let listening: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND query ILIKE 'LISTEN%kurir_outbox%'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            (listening > 0).then_some(())
        }
    })
    .await;
    let other_process = kurir::store::Store::connect(&database.url).await.unwrap();
    let event = kurir::outbox::NewEvent::json("order.paid", &json!({"from": "elsewhere"})).unwrap();
    let published = other_process.publish_event(event, None).await.unwrap();
    let kurir::store::Published::Created(event_id) = published else {
        panic!("{published:?}")
    };
    app.wait_for_deliveries(&event_id, "sent").await;
    other_process.close().await;
    pool.close().await;
    app.stopper().stop().await;
    database.drop().await;
}
