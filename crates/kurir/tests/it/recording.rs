//! Recording outcomes when the database refuses one: the refused completion is set aside (logged,
//! counted, its delivery left to its lease), and every other completion is recorded.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::delivery::DeliveryStatus;
use kurir::endpoint::{EventFilter, NewEndpoint};
use kurir::store::Store;

use crate::on_both_backends;
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, TestDb, TestServer};

on_both_backends!(a_completion_the_database_refuses_is_set_aside_and_the_others_are_recorded);

/// Makes the database refuse every attempt row whose response body is `refuse me`, as it would
/// refuse a value it cannot hold.
async fn refuse_marked_attempts(store: &Store) {
    match store {
        Store::Postgres(pg) => {
            for sql in [
                "CREATE FUNCTION refuse_marked_attempt() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.response_body = 'refuse me' THEN \
                     RAISE EXCEPTION 'this test refuses the attempt'; END IF; RETURN NEW; END $$",
                "CREATE TRIGGER refuse_marked_attempts BEFORE INSERT ON kurir_attempts \
                 FOR EACH ROW EXECUTE FUNCTION refuse_marked_attempt()",
            ] {
                sqlx::query(sql).execute(pg.pool()).await.unwrap();
            }
        }
        Store::Sqlite(sq) => {
            sqlx::query(
                "CREATE TRIGGER refuse_marked_attempts BEFORE INSERT ON kurir_attempts \
                 WHEN NEW.response_body = 'refuse me' \
                 BEGIN SELECT RAISE(ABORT, 'this test refuses the attempt'); END",
            )
            .execute(sq.pool())
            .await
            .unwrap();
        }
        Store::Mysql(my) => {
            sqlx::raw_sql(
                "CREATE TRIGGER refuse_marked_attempts BEFORE INSERT ON kurir_attempts \
                 FOR EACH ROW BEGIN IF NEW.response_body = 'refuse me' THEN \
                     SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'this test refuses the attempt'; \
                 END IF; END",
            )
            .execute(my.pool())
            .await
            .unwrap();
        }
    }
}

fn subscribed(url: String, filter: &str) -> NewEndpoint {
    let mut e = NewEndpoint::new(url);
    e.event_types = EventFilter::parse(vec![filter.to_owned()]).unwrap();
    e
}

async fn metric(addr: std::net::SocketAddr, name: &str) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Issue 11, item 1: the one completion writer used to retry a batch the database refused
/// forever, so nothing was recorded for any endpoint after it.
async fn a_completion_the_database_refuses_is_set_aside_and_the_others_are_recorded(db: TestDb) {
    refuse_marked_attempts(&db.store).await;
    let refused_rx =
        Receiver::scripted(|_, _| (StatusCode::INTERNAL_SERVER_ERROR, "refuse me").into_response())
            .await;
    let healthy_rx = Receiver::ok().await;
    // Short timeouts make a short lease, so the refused delivery comes back within the test.
    let mut refused = subscribed(refused_rx.url("/refused"), "refuse.*");
    refused.overrides.connect_timeout_ms = Some(200);
    refused.overrides.request_timeout_ms = Some(300);
    db.store.create_endpoint(refused).await.unwrap();
    db.store
        .create_endpoint(subscribed(healthy_rx.url("/healthy"), "order.*"))
        .await
        .unwrap();
    let mut config = test_delivery_config();
    config.lease_margin = Duration::from_millis(300);
    let server = TestServer::start(&db, config).await;

    // First the refused attempt, then the healthy endpoint's events behind it.
    enqueue_events(&db.store, "refuse.me", 1).await;
    refused_rx.wait_for(1).await;
    let ids = enqueue_events(&db.store, "order.paid", 10).await;
    for id in &ids {
        eventually(&format!("{id} to be recorded as sent"), || async {
            let d = db.store.deliveries_for_event(id).await.unwrap();
            (d.len() == 1 && d[0].status == DeliveryStatus::Sent).then_some(())
        })
        .await;
    }
    eventually("the refusal to be counted", || async {
        (metric(server.addr, "kurir_completions_refused_total").await >= 1.0).then_some(())
    })
    .await;
    // Its lease expires and it is attempted again: set aside, not lost.
    refused_rx.wait_for(2).await;
    tokio::time::timeout(Duration::from_secs(30), server.stop())
        .await
        .expect("shutdown finishes");

    let mut seen: Vec<String> = healthy_rx.requests().iter().map(|r| r.event_id()).collect();
    seen.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(seen, want, "each healthy delivery was sent exactly once");
}

/// Issue 11, item 1: with the database down, the completion writer retries (nothing is lost),
/// but shutdown still finishes within its bound: the attempt in flight, then at most
/// `SHUTDOWN_RECORDING_PATIENCE` for the recording and as much for the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_within_its_bound_while_the_database_is_down() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let held = Receiver::holding().await;
    db.store
        .create_endpoint(NewEndpoint::new(held.url("/held")))
        .await
        .unwrap();
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    db.store.relay_batch(10).await.unwrap();
    let dispatcher =
        kurir::dispatch::Dispatcher::new(db.store.clone(), test_delivery_config(), "doomed".into());
    let (wake, shutdown) = (
        std::sync::Arc::new(tokio::sync::Notify::new()),
        tokio_util::sync::CancellationToken::new(),
    );
    let run = tokio::spawn(std::sync::Arc::new(dispatcher).run(wake, shutdown.clone()));
    held.wait_until("the request to be in flight", |_, open| open == 1)
        .await;

    // The database stops taking connections, and drops the ones it has.
    let admin = sqlx::PgPool::connect(&crate::support::postgres_admin_url().unwrap())
        .await
        .unwrap();
    let name: String = match &db.store {
        Store::Postgres(pg) => sqlx::query_scalar("SELECT current_database()")
            .fetch_one(pg.pool())
            .await
            .unwrap(),
        Store::Sqlite(_) | Store::Mysql(_) => unreachable!(),
    };
    let allow = |on: bool| format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {on}");
    sqlx::query(&allow(false)).execute(&admin).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();

    let started = tokio::time::Instant::now();
    shutdown.cancel();
    held.release(1);
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("shutdown finishes while the database is down")
        .unwrap();
    let took = started.elapsed();
    sqlx::query(&allow(true)).execute(&admin).await.unwrap();
    eprintln!("shutdown with the database down took {took:?}");

    // Nothing is lost: the attempt went unrecorded, and its lease will make it due again.
    let d = &db.store.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!(d.status, DeliveryStatus::Processing);
    assert_eq!(held.requests().len(), 1);
}
