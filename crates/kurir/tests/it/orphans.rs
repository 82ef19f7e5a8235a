//! Deliveries whose event or endpoint was deleted behind kurir's back (an operator pruning by
//! hand): they never hold up a claim, and they are removed, counted and logged once.

use std::sync::Arc;
use std::time::Duration;

use kurir::endpoint::{Endpoint, NewEndpoint};
use kurir::store::{EndpointSlot, Store};
use sqlx::Connection;

use crate::on_both_backends;
use crate::support::{
    enqueue_events, eventually, scalar, test_delivery_config, TestDb, TestServer,
};

on_both_backends!(
    deliveries_whose_event_was_deleted_by_hand_never_take_a_claims_place,
    deliveries_of_an_endpoint_deleted_by_hand_are_removed,
);

/// Runs `sql` as an operator would: on PostgreSQL any session (the hot tables have no foreign
/// keys); on SQLite the `sqlite3` shell, whose foreign keys are off unless asked for.
pub(crate) async fn by_hand(db: &TestDb, sql: &str) -> u64 {
    match &db.store {
        Store::Postgres(pg) => sqlx::query(sql)
            .execute(pg.pool())
            .await
            .unwrap()
            .rows_affected(),
        Store::Sqlite(_) => {
            let options: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
            let mut shell = sqlx::SqliteConnection::connect_with(&options.foreign_keys(false))
                .await
                .unwrap();
            let done = sqlx::query(sql).execute(&mut shell).await.unwrap();
            shell.close().await.unwrap();
            done.rows_affected()
        }
        Store::Mysql(my) => sqlx::query(sql)
            .execute(my.pool())
            .await
            .unwrap()
            .rows_affected(),
    }
}

pub(crate) fn slot(e: &Endpoint, limit: u32) -> EndpointSlot {
    EndpointSlot {
        endpoint: Arc::new(e.clone()),
        limit,
        lease: Duration::from_secs(60),
    }
}

/// Issue 11, item 2: on PostgreSQL the claim locked the due rows whose outbox row was gone,
/// then dropped them at the join, so they took its places: with as many orphans as the limit
/// at the head of an endpoint's queue it never claimed again. On SQLite the claim failed.
async fn deliveries_whose_event_was_deleted_by_hand_never_take_a_claims_place(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(NewEndpoint::new("https://a.example/"))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 30).await;
    s.relay_batch(100).await.unwrap();
    // The 20 oldest events go, leaving their deliveries at the head of the queue.
    let pruned = by_hand(
        &db,
        // The derived table: MySQL takes neither a LIMIT in an `IN` subquery nor a subquery
        // reading the table it deletes from.
        "DELETE FROM kurir_outbox WHERE id IN \
         (SELECT id FROM (SELECT id FROM kurir_outbox ORDER BY id LIMIT 20) AS oldest)",
    )
    .await;
    assert_eq!(pruned, 20);

    let claimed = s
        .claim_due_deliveries("w1", &[slot(&a, 10)], 10)
        .await
        .unwrap();
    let mut got: Vec<String> = claimed
        .deliveries
        .iter()
        .map(|c| c.event.event_id.clone())
        .collect();
    got.sort();
    let mut live = ids[20..].to_vec();
    live.sort();
    assert_eq!(
        got, live,
        "every live delivery, none of the orphans ahead of them"
    );

    // Later claims (the next look comes within a second) remove the orphans they read past.
    let removed = eventually("the orphans to be removed", || async {
        let claim = s
            .claim_due_deliveries("w1", &[slot(&a, 10)], 10)
            .await
            .unwrap();
        assert!(claim.deliveries.is_empty());
        let left = scalar(&db.store, "SELECT count(*) FROM kurir_deliveries").await;
        (left == 10).then_some(claim.orphans)
    })
    .await;
    assert!(removed
        .iter()
        .all(|o| o.reason == kurir::store::OrphanReason::EventDeleted
            && ids[..20].contains(&o.event_id)));
}

/// Issue 11, item 2: deliveries of an endpoint deleted by hand used to wait forever.
async fn deliveries_of_an_endpoint_deleted_by_hand_are_removed(db: TestDb) {
    let s = &db.store;
    let gone = s
        .create_endpoint(NewEndpoint::new("https://gone.example/"))
        .await
        .unwrap();
    let kept = s
        .create_endpoint(NewEndpoint::new("https://kept.example/"))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 5).await;
    s.relay_batch(100).await.unwrap();
    s.update_endpoint(
        &kept.id,
        kurir::endpoint::EndpointUpdate {
            enabled: Some(false),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let sql = format!("DELETE FROM kurir_endpoints WHERE id = '{}'", gone.id);
    assert_eq!(by_hand(&db, &sql).await, 1);

    let server = TestServer::start(&db, test_delivery_config()).await;
    let of_gone = format!(
        "SELECT count(*) FROM kurir_deliveries WHERE endpoint_id = '{}'",
        gone.id
    );
    let counted = "kurir_orphaned_deliveries_total{reason=\"endpoint_deleted\"} 5";
    eventually("the removal to be counted", || async {
        let text = reqwest::get(format!("http://{}/metrics", server.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines().any(|l| l == counted).then_some(())
    })
    .await;
    server.stop().await;
    assert_eq!(
        scalar(&db.store, &of_gone).await,
        0,
        "the deleted endpoint's are gone"
    );
    let of_kept = format!(
        "SELECT count(*) FROM kurir_deliveries WHERE endpoint_id = '{}'",
        kept.id
    );
    assert_eq!(
        scalar(&db.store, &of_kept).await,
        5,
        "a disabled endpoint's stay"
    );
}

/// Issue 11, item 2: the hot tables have no foreign keys (migration 0004), so on PostgreSQL a
/// relay that read an endpoint just before it was deleted wrote deliveries for it after the
/// deletion had dealt with the endpoint's deliveries (removed them then; cancels them since
/// issue 16), and they waited forever. (SQLite's relay and deletes take its one write lock in
/// turn, so there is no such race there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_endpoint_while_the_relay_fans_out_leaves_no_delivery_to_make() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pg) = &db.store else {
        unreachable!()
    };
    let doomed = db
        .store
        .create_endpoint(NewEndpoint::new("https://doomed.example/"))
        .await
        .unwrap();
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    // A session that inserted the same (event, endpoint) pair stops the relay at the unique
    // index: it has read the endpoint and waits to write the delivery.
    let mut blocker = pg.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
         SELECT id, event_id, $1 FROM kurir_outbox",
    )
    .bind(doomed.id.as_str())
    .execute(&mut *blocker)
    .await
    .unwrap();
    let relay = tokio::spawn({
        let store = db.store.clone();
        async move { store.relay_batch(10).await }
    });
    eventually("the relay to wait at the unique index", || async {
        (crate::support::pg_lock_waiters(pg).await == 1).then_some(())
    })
    .await;
    let delete = tokio::spawn({
        let store = db.store.clone();
        let id = doomed.id.clone();
        async move { store.delete_endpoint(&id).await }
    });
    // The deletion either waits for the relay or goes through at once.
    eventually("the deletion to finish or wait", || async {
        (delete.is_finished() || crate::support::pg_lock_waiters(pg).await == 2).then_some(())
    })
    .await;
    blocker.rollback().await.unwrap();
    assert_eq!(relay.await.unwrap().unwrap().events, 1);
    assert!(delete.await.unwrap().unwrap());
    let left = db.store.deliveries_for_event(&ids[0]).await.unwrap();
    assert!(
        left.iter()
            .all(|d| d.status == kurir::delivery::DeliveryStatus::Cancelled),
        "no delivery of the deleted endpoint is left to make: {left:?}"
    );
}
