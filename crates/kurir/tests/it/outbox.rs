//! The transactional outbox: atomic with the caller's business change, on both backends, and
//! the plain-SQL contract for applications in other languages.

use kurir::outbox::{enqueue, EnqueueError, NewEvent};
use kurir::store::Store;
use kurir_core::event::EventId;

use crate::on_both_backends;
use crate::support::{Backend, TestDb};

on_both_backends!(
    rolled_back_transaction_leaves_neither_business_row_nor_event,
    committed_transaction_leaves_both,
    given_event_id_is_stored_and_a_duplicate_is_a_typed_error,
    generated_event_id_is_a_uuid_v7,
    plain_sql_insert_from_the_readme_works_with_defaults,
    plain_sql_insert_rolled_back_leaves_nothing,
);

const DESIGN_INSERT: &str = "INSERT INTO kurir_outbox (event_type, aggregate_type, aggregate_id, payload) \
VALUES ('order.paid', 'order', '98765', '{\"order_id\":\"98765\",\"total\":250000,\"currency\":\"IDR\"}')";

/// Runs `$body` with `$tx` bound to a new transaction on the test database's own pool.
macro_rules! with_tx {
    ($db:expr, |$tx:ident| $body:block) => {
        match &$db.store {
            Store::Postgres(pg) => {
                let mut $tx = pg.pool().begin().await.unwrap();
                $body
            }
            Store::Sqlite(sq) => {
                let mut $tx = sq.pool().begin().await.unwrap();
                $body
            }
            Store::Mysql(my) => {
                let mut $tx = my.pool().begin().await.unwrap();
                $body
            }
        }
    };
}

async fn create_orders_table(db: &TestDb) {
    let sql = "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, status TEXT NOT NULL)";
    exec(db, sql).await;
}

async fn exec(db: &TestDb, sql: &str) {
    match &db.store {
        Store::Postgres(pg) => drop(sqlx::raw_sql(sql).execute(pg.pool()).await.unwrap()),
        Store::Sqlite(sq) => drop(sqlx::raw_sql(sql).execute(sq.pool()).await.unwrap()),
        Store::Mysql(my) => drop(sqlx::raw_sql(sql).execute(my.pool()).await.unwrap()),
    }
}

async fn count(db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    match &db.store {
        Store::Postgres(pg) => sqlx::query_scalar(&sql).fetch_one(pg.pool()).await.unwrap(),
        Store::Sqlite(sq) => sqlx::query_scalar(&sql).fetch_one(sq.pool()).await.unwrap(),
        Store::Mysql(my) => sqlx::query_scalar(&sql).fetch_one(my.pool()).await.unwrap(),
    }
}

fn order_paid() -> NewEvent {
    NewEvent::json(
        "order.paid",
        &serde_json::json!({"order_id": "98765", "total": 250000}),
    )
    .unwrap()
    .aggregate("order", "98765")
}

async fn rolled_back_transaction_leaves_neither_business_row_nor_event(db: TestDb) {
    create_orders_table(&db).await;
    with_tx!(db, |tx| {
        sqlx::query("INSERT INTO orders (id, status) VALUES ('98765', 'paid')")
            .execute(&mut *tx)
            .await
            .unwrap();
        enqueue(&mut tx, order_paid()).await.unwrap();
        tx.rollback().await.unwrap();
    });
    assert_eq!(count(&db, "orders").await, 0);
    assert_eq!(count(&db, "kurir_outbox").await, 0);
}

async fn committed_transaction_leaves_both(db: TestDb) {
    create_orders_table(&db).await;
    let id = with_tx!(db, |tx| {
        sqlx::query("INSERT INTO orders (id, status) VALUES ('98765', 'paid')")
            .execute(&mut *tx)
            .await
            .unwrap();
        let id = enqueue(&mut tx, order_paid()).await.unwrap();
        tx.commit().await.unwrap();
        id
    });
    assert_eq!(count(&db, "orders").await, 1);
    let event = db
        .store
        .get_event(id.as_str())
        .await
        .unwrap()
        .expect("event stored");
    assert_eq!(event.event_type, "order.paid");
    assert_eq!(event.aggregate_type.as_deref(), Some("order"));
    assert_eq!(event.aggregate_id.as_deref(), Some("98765"));
    assert_eq!(event.version, 1);
    assert_eq!(event.payload, r#"{"order_id":"98765","total":250000}"#);
    assert!(event.dispatched_at.is_none());
}

async fn given_event_id_is_stored_and_a_duplicate_is_a_typed_error(db: TestDb) {
    let given = EventId::parse("evt_order_98765_paid").unwrap();
    let stored = with_tx!(db, |tx| {
        let id = enqueue(&mut tx, order_paid().event_id(given.clone()))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        id
    });
    assert_eq!(stored, given);
    assert!(db
        .store
        .get_event("evt_order_98765_paid")
        .await
        .unwrap()
        .is_some());
    let err = with_tx!(db, |tx| {
        enqueue(&mut tx, order_paid().event_id(given.clone()))
            .await
            .unwrap_err()
    });
    assert!(
        matches!(err, EnqueueError::DuplicateEventId(ref id) if *id == given),
        "{err:?}"
    );
    assert_eq!(count(&db, "kurir_outbox").await, 1);
}

async fn generated_event_id_is_a_uuid_v7(db: TestDb) {
    let id = with_tx!(db, |tx| {
        let id = enqueue(&mut tx, order_paid()).await.unwrap();
        tx.commit().await.unwrap();
        id
    });
    let uuid = uuid::Uuid::parse_str(id.as_str()).expect("a UUID");
    assert_eq!(uuid.get_version_num(), 7);
    assert!(db.store.get_event(id.as_str()).await.unwrap().is_some());
}

async fn plain_sql_insert_from_the_readme_works_with_defaults(db: TestDb) {
    exec(&db, DESIGN_INSERT).await;
    exec(&db, DESIGN_INSERT).await;
    let ids: Vec<String> = match &db.store {
        Store::Postgres(pg) => sqlx::query_scalar("SELECT event_id FROM kurir_outbox ORDER BY id")
            .fetch_all(pg.pool())
            .await
            .unwrap(),
        Store::Sqlite(sq) => sqlx::query_scalar("SELECT event_id FROM kurir_outbox ORDER BY id")
            .fetch_all(sq.pool())
            .await
            .unwrap(),
        Store::Mysql(my) => {
            sqlx::query_scalar("SELECT CAST(event_id AS CHAR) FROM kurir_outbox ORDER BY id")
                .fetch_all(my.pool())
                .await
                .unwrap()
        }
    };
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "each insert gets its own event_id");
    for id in &ids {
        let uuid = uuid::Uuid::parse_str(id).unwrap_or_else(|_| panic!("{id} is not a UUID"));
        assert_eq!(uuid.get_version_num(), 7, "{id} is not a UUIDv7");
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        let event = db.store.get_event(id).await.unwrap().unwrap();
        assert_eq!(event.version, 1);
        assert_eq!(
            event.payload,
            r#"{"order_id":"98765","total":250000,"currency":"IDR"}"#
        );
        let age = chrono::Utc::now() - event.occurred_at;
        assert!(
            age.num_seconds().abs() < 60,
            "occurred_at defaults to now, got {}",
            event.occurred_at
        );
    }
    if db.backend == Backend::Sqlite {
        // Timestamps written by the SQLite default use kurir's fixed-width format.
        let event = db.store.get_event(&ids[0]).await.unwrap().unwrap();
        assert!(event.created_at <= chrono::Utc::now());
    }
}

async fn plain_sql_insert_rolled_back_leaves_nothing(db: TestDb) {
    exec(&db, &format!("BEGIN; {DESIGN_INSERT}; ROLLBACK;")).await;
    assert_eq!(count(&db, "kurir_outbox").await, 0);
    exec(&db, &format!("BEGIN; {DESIGN_INSERT}; COMMIT;")).await;
    assert_eq!(count(&db, "kurir_outbox").await, 1);
}

#[test]
fn a_payload_that_is_not_an_object_is_refused() {
    let raw = serde_json::value::RawValue::from_string("[1,2]".into()).unwrap();
    assert!(matches!(
        NewEvent::raw("order.paid", raw),
        Err(EnqueueError::InvalidPayload(_))
    ));
    let raw = serde_json::value::RawValue::from_string("{}".into()).unwrap();
    assert!(matches!(
        NewEvent::raw("Order Paid", raw),
        Err(EnqueueError::InvalidEventType(_))
    ));
}

/// An application's transactions that each found an event id taken go on inserting events, on
/// MySQL/MariaDB too: InnoDB's duplicate check locks the gap below the taken id until the
/// transaction ends, where every new id (UUIDv7, ascending) goes, so two such transactions
/// deadlocked at their next insert. The API's group commit met it under concurrent publishes of
/// one `event_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_that_found_an_id_taken_go_on_inserting_on_mysql() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    let Store::Mysql(my) = &db.store else {
        unreachable!("TestDb::mysql is on MySQL")
    };
    let taken = EventId::parse("evt_taken").unwrap();
    let mut first = my.pool().begin().await.unwrap();
    enqueue(&mut first, order_paid().event_id(taken.clone()))
        .await
        .unwrap();
    first.commit().await.unwrap();
    let (mut a, mut b) = (
        my.pool().begin().await.unwrap(),
        my.pool().begin().await.unwrap(),
    );
    for tx in [&mut a, &mut b] {
        let err = enqueue(tx, order_paid().event_id(taken.clone()))
            .await
            .unwrap_err();
        assert!(matches!(err, EnqueueError::DuplicateEventId(_)), "{err:?}");
    }
    let (in_a, in_b) = tokio::join!(enqueue(&mut a, order_paid()), enqueue(&mut b, order_paid()));
    in_a.expect("the first transaction's new event");
    in_b.expect("the second transaction's new event");
    a.commit().await.unwrap();
    b.commit().await.unwrap();
    assert_eq!(count(&db, "kurir_outbox").await, 3);
}
