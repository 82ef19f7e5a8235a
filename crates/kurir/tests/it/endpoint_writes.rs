//! Changing an endpoint writes only what changes, so concurrent changes never undo each other:
//! a PATCH beside a `410` auto-disable or a secret rotation, two rotations.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use kurir::delivery::{Completion, NextState, Trigger};
use kurir::endpoint::{EndpointUpdate, NewEndpoint, OverridesUpdate};
use kurir::store::{EndpointSlot, Store};
use kurir_core::secret::Secret;

use crate::on_both_backends;
use crate::support::{enqueue_events, eventually, pg_lock_waiters, TestDb};

on_both_backends!(each_change_to_an_endpoint_writes_only_its_own_columns);

/// Columns whose writes the triggers of [`record_writes`] note.
const WATCHED: [&str; 7] = [
    "url",
    "enabled",
    "disabled_reason",
    "secret",
    "previous_secrets",
    "connect_timeout_ms",
    "retry_max_attempts",
];

/// Notes in `written` every column an `UPDATE` of `kurir_endpoints` writes (lists in its
/// `SET`), whether or not the value changes: `AFTER UPDATE OF` triggers on PostgreSQL and
/// SQLite. MySQL's triggers cannot tell which columns a statement lists, only which values
/// changed, so there a column written with its own value goes unnoticed: a weaker check, and
/// every change this test makes does change its value.
async fn record_writes(store: &Store) {
    match store {
        Store::Postgres(pg) => {
            let pool = pg.pool();
            sqlx::query("CREATE TABLE written (col TEXT)")
                .execute(pool)
                .await
                .unwrap();
            sqlx::query(
                "CREATE FUNCTION note_write() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN INSERT INTO written VALUES (TG_ARGV[0]); RETURN NULL; END $$",
            )
            .execute(pool)
            .await
            .unwrap();
            for col in WATCHED {
                sqlx::query(&format!(
                    "CREATE TRIGGER w_{col} AFTER UPDATE OF {col} ON kurir_endpoints \
                     FOR EACH ROW EXECUTE FUNCTION note_write('{col}')"
                ))
                .execute(pool)
                .await
                .unwrap();
            }
        }
        Store::Sqlite(sq) => {
            let pool = sq.pool();
            sqlx::query("CREATE TABLE written (col TEXT)")
                .execute(pool)
                .await
                .unwrap();
            for col in WATCHED {
                sqlx::query(&format!(
                    "CREATE TRIGGER w_{col} AFTER UPDATE OF {col} ON kurir_endpoints \
                     BEGIN INSERT INTO written VALUES ('{col}'); END"
                ))
                .execute(pool)
                .await
                .unwrap();
            }
        }
        Store::Mysql(my) => {
            let pool = my.pool();
            sqlx::query("CREATE TABLE written (col TEXT)")
                .execute(pool)
                .await
                .unwrap();
            let notes: String = WATCHED
                .iter()
                .map(|col| {
                    format!(
                        "IF NOT (OLD.{col} <=> NEW.{col}) THEN \
                         INSERT INTO written VALUES ('{col}'); END IF; "
                    )
                })
                .collect();
            sqlx::raw_sql(&format!(
                "CREATE TRIGGER w_changes AFTER UPDATE ON kurir_endpoints \
                 FOR EACH ROW BEGIN {notes}END"
            ))
            .execute(pool)
            .await
            .unwrap();
        }
    }
}

/// The columns written since the last call, sorted.
async fn writes(store: &Store) -> Vec<String> {
    let (read, clear) = (
        "SELECT col FROM written ORDER BY col",
        "DELETE FROM written",
    );
    match store {
        Store::Postgres(pg) => {
            let cols = sqlx::query_scalar(read).fetch_all(pg.pool()).await.unwrap();
            sqlx::query(clear).execute(pg.pool()).await.unwrap();
            cols
        }
        Store::Sqlite(sq) => {
            let cols = sqlx::query_scalar(read).fetch_all(sq.pool()).await.unwrap();
            sqlx::query(clear).execute(sq.pool()).await.unwrap();
            cols
        }
        Store::Mysql(my) => {
            let read = "SELECT CAST(col AS CHAR) FROM written ORDER BY col";
            let cols = sqlx::query_scalar(read).fetch_all(my.pool()).await.unwrap();
            sqlx::query(clear).execute(my.pool()).await.unwrap();
            cols
        }
    }
}

/// Issue 11, item 4: an update wrote every column back from what it had read, so it undid
/// whatever changed in between (a `410` disabling the endpoint, a rotated secret).
async fn each_change_to_an_endpoint_writes_only_its_own_columns(db: TestDb) {
    let s = &db.store;
    let e = s
        .create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    record_writes(s).await;

    let described = EndpointUpdate {
        description: Some("orders".into()),
        ..Default::default()
    };
    s.update_endpoint(&e.id, described).await.unwrap().unwrap();
    assert!(
        writes(s).await.is_empty(),
        "a new description writes nothing else"
    );

    s.rotate_secret(&e.id, Secret::generate(), Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(writes(s).await, ["previous_secrets", "secret"]);

    enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(10).await.unwrap();
    let slot = EndpointSlot {
        endpoint: Arc::new(e.clone()),
        limit: 1,
        lease: Duration::from_secs(60),
    };
    let claimed = s
        .claim_due_deliveries("w", &[slot], 1)
        .await
        .unwrap()
        .deliveries;
    let gone = Completion {
        delivery_id: claimed[0].delivery_id,
        endpoint_id: e.id.clone(),
        attempt: 1,
        trigger: Trigger::Scheduled,
        started_at: Utc::now(),
        duration_ms: 1,
        status_code: Some(410),
        error: None,
        response_body: None,
        next: NextState::Gone,
    };
    s.complete_deliveries("w", &[gone]).await.unwrap();
    assert_eq!(writes(s).await, ["disabled_reason", "enabled"]);

    let enable = EndpointUpdate {
        enabled: Some(true),
        ..Default::default()
    };
    let read = s.update_endpoint(&e.id, enable).await.unwrap().unwrap();
    assert!(read.enabled && read.disabled_reason.is_none());
    assert_eq!(writes(s).await, ["disabled_reason", "enabled"]);
    assert_eq!(
        read.description, "orders",
        "the answer is the row as stored"
    );

    let one_override = EndpointUpdate {
        overrides: OverridesUpdate {
            connect_timeout_ms: Some(Some(750)),
            ..Default::default()
        },
        ..Default::default()
    };
    let read = s
        .update_endpoint(&e.id, one_override)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(writes(s).await, ["connect_timeout_ms"]);
    assert_eq!(read.overrides.connect_timeout_ms, Some(750));
    let cleared = EndpointUpdate {
        overrides: OverridesUpdate {
            connect_timeout_ms: Some(None),
            ..Default::default()
        },
        ..Default::default()
    };
    let read = s.update_endpoint(&e.id, cleared).await.unwrap().unwrap();
    assert_eq!(read.overrides.connect_timeout_ms, None, "null clears it");
}

/// Runs `change` while `hold` (an uncommitted change of the same endpoint row) holds the row's
/// lock: waits until `change` waits for it, then commits `hold`, then lets `change` finish.
async fn behind<T: Send + 'static>(
    db: &TestDb,
    hold: &str,
    change: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let Store::Postgres(pg) = &db.store else {
        unreachable!()
    };
    let mut tx = pg.pool().begin().await.unwrap();
    sqlx::query(hold).execute(&mut *tx).await.unwrap();
    let change = tokio::spawn(change);
    eventually("the change to wait for the row lock", || async {
        (pg_lock_waiters(pg).await == 1).then_some(())
    })
    .await;
    tx.commit().await.unwrap();
    change.await.unwrap()
}

async fn postgres_endpoint() -> Option<(TestDb, kurir::endpoint::Endpoint)> {
    let db = TestDb::postgres().await?;
    let e = db
        .store
        .create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    Some((db, e))
}

/// Issue 11, item 4: a PATCH that read the endpoint before a `410` disabled it wrote
/// `enabled = true` back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_behind_a_410_leaves_the_endpoint_disabled() {
    let Some((db, e)) = postgres_endpoint().await else {
        return;
    };
    let disable = format!(
        "UPDATE kurir_endpoints SET enabled = FALSE, \
         disabled_reason = 'the endpoint answered 410 Gone' WHERE id = '{}'",
        e.id
    );
    let (store, id) = (db.store.clone(), e.id.clone());
    let patch = async move {
        let described = EndpointUpdate {
            description: Some("orders".into()),
            ..Default::default()
        };
        store
            .update_endpoint(&id, described)
            .await
            .unwrap()
            .unwrap()
    };
    let answered = behind(&db, &disable, patch).await;
    let stored = db.store.get_endpoint(&e.id).await.unwrap().unwrap();
    assert!(!stored.enabled, "still disabled");
    assert!(stored.disabled_reason.unwrap().contains("410"));
    assert_eq!(stored.description, "orders");
    assert!(
        !answered.enabled,
        "the PATCH answers the endpoint as stored"
    );
}

/// Issue 11, item 4: a PATCH that read the endpoint before a rotation wrote the old secret
/// back after the API had shown the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_behind_a_rotation_keeps_the_new_secret() {
    let Some((db, e)) = postgres_endpoint().await else {
        return;
    };
    let new = Secret::generate();
    let rotate = format!(
        "UPDATE kurir_endpoints SET secret = '{}' WHERE id = '{}'",
        new.expose(),
        e.id
    );
    let (store, id) = (db.store.clone(), e.id.clone());
    let patch = async move {
        let described = EndpointUpdate {
            description: Some("orders".into()),
            ..Default::default()
        };
        store.update_endpoint(&id, described).await.unwrap()
    };
    behind(&db, &rotate, patch).await;
    let stored = db.store.get_endpoint(&e.id).await.unwrap().unwrap();
    assert_eq!(stored.secret, new, "the secret the API showed stays");
}

/// Issue 11, item 4: two rotations at once each moved the secret they had read into the grace
/// list, so the secret one of them made current was dropped without a grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_behind_another_keeps_its_secret_signing_during_grace() {
    let Some((db, e)) = postgres_endpoint().await else {
        return;
    };
    let between = Secret::generate();
    let rotate = format!(
        "UPDATE kurir_endpoints SET secret = '{}' WHERE id = '{}'",
        between.expose(),
        e.id
    );
    let (store, id) = (db.store.clone(), e.id.clone());
    let last = Secret::generate();
    let again = last.clone();
    let rotation = async move {
        store
            .rotate_secret(&id, again, Duration::from_secs(3600))
            .await
            .unwrap()
            .unwrap()
    };
    behind(&db, &rotate, rotation).await;
    let stored = db.store.get_endpoint(&e.id).await.unwrap().unwrap();
    assert_eq!(stored.secret, last);
    assert_eq!(
        stored.signing_secrets(Utc::now()),
        vec![&last, &between],
        "the secret current before this rotation signs during the grace period"
    );
}
