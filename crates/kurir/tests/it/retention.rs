//! Retention on both backends, with second-long keep times: the pruner deletes sent events with
//! their deliveries and attempts, keeps events with a delivery still to make and dead letters
//! within their own retention, counts what it deletes, and a dry run counts the same rows.

use kurir::access::{Actor, Via};
use kurir::prune::{cutoffs, round, RoundOutcome};
use kurir::store::inbox_history::InboxAttempt;
use kurir::store::retention::Pruned;
use reqwest::StatusCode;
use serde_json::json;

use kurir::store::Store;

use crate::api::support::{eventually, on_both_backends, Backend, Receiver, TestApp, TestDb};

on_both_backends!(
    pruning_keeps_unfinished_and_dead_lettered_events_and_a_dry_run_counts_what_goes,
    the_background_pruner_deletes_sent_history_and_counts_it,
);

/// Settings with a one-second retention; the pruner's own rounds are an hour apart, so the test
/// drives them.
const SHORT: &[(&str, &str)] = &[
    ("retention", "1s"),
    ("dead_letter_retention", "1h"),
    ("inbox_retention", "1s"),
    ("replay_audit_retention", "1s"),
    ("prune_interval", "1h"),
];

async fn event_status(app: &TestApp, id: &str) -> StatusCode {
    app.get(&format!("/v1/events/{id}")).await.0
}

async fn pruning_keeps_unfinished_and_dead_lettered_events_and_a_dry_run_counts_what_goes(
    db: TestDb,
) {
    let app = TestApp::spawn_with(&db, SHORT).await;
    let failing = Receiver::start().await;
    failing.respond_with(500);
    let retrying = json!({"event_types": ["retry.*"], "retry_max_attempts": 50,
        "retry_initial_delay_ms": 1000, "retry_max_delay_ms": 1000});
    app.create_endpoint(&failing.url, retrying).await;
    let once = json!({"event_types": ["dead.*"], "retry_max_attempts": 1});
    app.create_endpoint(&failing.url, once).await;
    let ok = Receiver::start().await;
    app.create_endpoint(&ok.url, json!({"event_types": ["sent.*"]}))
        .await;

    // Oldest first: the kept events are older than the pruned one.
    let unfinished = app.publish("retry.me", json!({})).await;
    let dead = app.publish("dead.end", json!({})).await;
    app.wait_for_deliveries(&dead, "dead_letter").await;
    let sent = app.publish("sent.ok", json!({})).await;
    app.wait_for_deliveries(&sent, "sent").await;

    let retention = TestApp::config(&db, SHORT).retention;
    let expected = Pruned {
        events: 1,
        deliveries: 1,
        attempts: 1,
        ..Pruned::default()
    };
    // Waiting for the sent event to be older than its one-second retention.
    let dry_run = eventually("the sent event to pass its retention", || async {
        let at = cutoffs(&retention, chrono::Utc::now());
        let counted = app.store.prunable(&at).await.unwrap();
        (counted.events > 0).then_some(counted)
    })
    .await;
    assert_eq!(dry_run, expected);

    let metrics = kurir::metrics::Metrics::new();
    let none = tokio_util::sync::CancellationToken::new();
    let outcome = round(&app.store, &retention, &metrics, &none)
        .await
        .unwrap();
    assert_eq!(outcome, RoundOutcome::Pruned(expected));
    assert!(metrics
        .render()
        .contains("kurir_pruned_rows_total{table=\"kurir_attempts\"} 1"));
    assert_eq!(event_status(&app, &sent).await, StatusCode::NOT_FOUND);
    for kept in [&unfinished, &dead] {
        let (status, event) = app.get(&format!("/v1/events/{kept}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(event["deliveries"].as_array().unwrap().len(), 1, "{event}");
    }
    app.stopper().stop().await;
}

async fn the_background_pruner_deletes_sent_history_and_counts_it(db: TestDb) {
    let fast = [
        ("retention", "1s"),
        ("prune_interval", "100ms"),
        ("replay_audit_retention", "forever"),
    ];
    let app = TestApp::spawn_with(&db, &fast).await;
    let ok = Receiver::start().await;
    app.create_endpoint(&ok.url, json!({})).await;
    let ids = [
        app.publish("order.paid", json!({"n": 1})).await,
        app.publish("order.paid", json!({"n": 2})).await,
    ];
    for id in &ids {
        app.wait_for_deliveries(id, "sent").await;
    }
    for id in &ids {
        eventually("the pruner to delete a sent event", || async {
            (event_status(&app, id).await == StatusCode::NOT_FOUND).then_some(())
        })
        .await;
    }
    // The pruner counts a batch after its transaction commits: a reader can see the event gone
    // a moment before the count.
    eventually("the pruner to count both events", || async {
        let metrics = reqwest::get(format!("{}/metrics", app.url))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        metrics
            .contains("kurir_pruned_rows_total{table=\"kurir_outbox\"} 2")
            .then_some(())
    })
    .await;
    app.stopper().stop().await;
}

on_both_backends!(completed_inbox_events_and_old_replay_audits_go_and_pending_inbox_events_stay);

/// The inbox events' history (issue 33: forward attempts and audited retries) goes with its
/// event and stays with an event that stays.
async fn completed_inbox_events_and_old_replay_audits_go_and_pending_inbox_events_stay(db: TestDb) {
    let actor = Actor::bootstrap("admin", Via::Api);
    for (event_id, status) in [("done", "completed"), ("waiting", "pending")] {
        crate::store_dashboard::inbox_row(&db.store, "src", event_id, status).await;
        let attempt = InboxAttempt {
            attempt: 1,
            started_at: chrono::Utc::now(),
            duration_ms: 3,
            status_code: Some(500),
            error: Some("forward answered HTTP 500".into()),
        };
        let s = &db.store;
        s.record_inbox_attempt("src", event_id, &attempt)
            .await
            .unwrap();
        s.record_inbox_retry("src", event_id, &actor).await.unwrap();
    }
    // Plain SQL every dialect reads alike, but for MySQL's timestamps (no `T`, no zone: its
    // sessions are UTC): the rows were written long ago.
    let long_ago = match db.backend {
        Backend::Mysql => "'2020-01-01 00:00:00.000'",
        Backend::Postgres | Backend::Sqlite => "'2020-01-01T00:00:00.000Z'",
    };
    for sql in [
        format!("UPDATE kurir_inbox SET updated_at = {long_ago}"),
        format!(
            "INSERT INTO kurir_replays (actor, reason, filter, count, created_at) \
             VALUES ('admin', 'test', '{{}}', 1, {long_ago})"
        ),
    ] {
        match &db.store {
            Store::Postgres(s) => sqlx::query(&sql).execute(s.pool()).await.map(drop),
            Store::Sqlite(s) => sqlx::query(&sql).execute(s.pool()).await.map(drop),
            Store::Mysql(s) => sqlx::query(&sql).execute(s.pool()).await.map(drop),
        }
        .unwrap();
    }

    let retention = TestApp::config(&db, SHORT).retention;
    let at = cutoffs(&retention, chrono::Utc::now());
    let expected = Pruned {
        inbox: 1,
        inbox_attempts: 1,
        inbox_retries: 1,
        replays: 1,
        ..Pruned::default()
    };
    assert_eq!(db.store.prunable(&at).await.unwrap(), expected);
    assert_eq!(db.store.prune_batch(&at, 10).await.unwrap(), Some(expected));
    assert_eq!(db.store.prunable(&at).await.unwrap(), Pruned::default());
    let s = &db.store;
    assert!(s.inbox_attempts("src", "done").await.unwrap().is_empty());
    assert!(s.inbox_retries("src", "done").await.unwrap().is_empty());
    assert_eq!(s.inbox_attempts("src", "waiting").await.unwrap().len(), 1);
    assert_eq!(s.inbox_retries("src", "waiting").await.unwrap().len(), 1);
    let forever = kurir::config::RetentionConfig {
        replay_audit: None,
        ..retention
    };
    assert_eq!(cutoffs(&forever, chrono::Utc::now()).replays, None);
}

#[tokio::test]
async fn one_postgres_process_prunes_at_a_time() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pg) = &db.store else {
        unreachable!()
    };
    let at = cutoffs(&TestApp::config(&db, SHORT).retention, chrono::Utc::now());
    let mut other = pg.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(kurir::store::retention::PRUNE_LOCK)
        .execute(&mut *other)
        .await
        .unwrap();
    assert_eq!(db.store.prune_batch(&at, 10).await.unwrap(), None);
    other.commit().await.unwrap();
    assert_eq!(
        db.store.prune_batch(&at, 10).await.unwrap(),
        Some(Pruned::default())
    );
}

#[tokio::test]
async fn one_mysql_process_prunes_at_a_time() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    let Store::Mysql(my) = &db.store else {
        unreachable!()
    };
    let at = cutoffs(&TestApp::config(&db, SHORT).retention, chrono::Utc::now());
    let lock = kurir::store::retention::MYSQL_PRUNE_LOCK;
    let mut other = my.pool().acquire().await.unwrap();
    let taken: i64 = sqlx::query_scalar(&format!("SELECT CAST(GET_LOCK({lock}, 0) AS SIGNED)"))
        .fetch_one(&mut *other)
        .await
        .unwrap();
    assert_eq!(taken, 1);
    assert_eq!(db.store.prune_batch(&at, 10).await.unwrap(), None);
    sqlx::query(&format!("DO RELEASE_LOCK({lock})"))
        .execute(&mut *other)
        .await
        .unwrap();
    assert_eq!(
        db.store.prune_batch(&at, 10).await.unwrap(),
        Some(Pruned::default())
    );
    // The batch released its lock: another session takes it at once.
    let again: i64 = sqlx::query_scalar(&format!("SELECT CAST(GET_LOCK({lock}, 0) AS SIGNED)"))
        .fetch_one(&mut *other)
        .await
        .unwrap();
    assert_eq!(again, 1);
}

on_both_backends!(portal_links_and_sessions_go_a_day_after_they_end_and_live_ones_stay);

/// The portal's rows (migration 0021) go with retention once a day past their end (issue 31):
/// a link, used or not, by its expiry; a session by its expiry or its revocation. A session in
/// force, a link that may still open, and rows within the day stay.
async fn portal_links_and_sessions_go_a_day_after_they_end_and_live_ones_stay(db: TestDb) {
    use kurir::access::Via;
    use kurir::store::portal::{NewPortalLink, Opened};

    let s = &db.store;
    let now = chrono::Utc::now();
    // Times as each dialect reads them (MySQL: no `T`, no zone; its sessions are UTC).
    let at = |t: chrono::DateTime<chrono::Utc>| match db.backend {
        Backend::Mysql => format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.3f")),
        Backend::Postgres | Backend::Sqlite => format!("'{}'", t.format("%Y-%m-%dT%H:%M:%S%.3fZ")),
    };
    let long_ago = at(now - chrono::Duration::days(400));
    let an_hour_ago = at(now - chrono::Duration::hours(1));
    let ahead = at(now + chrono::Duration::hours(8));
    let no = "1 = 0";
    let mut statements =
        vec!["INSERT INTO kurir_subscribers (id, name) VALUES ('cus_a', 'A')".to_owned()];
    // (id, expires_at, used_at): the first two go.
    for (id, expires, used) in [
        ("pl_expired_unused", &long_ago, "NULL"),
        ("pl_expired_used", &long_ago, long_ago.as_str()),
        ("pl_expired_within_the_day", &an_hour_ago, "NULL"),
        ("pl_used_not_expired", &ahead, long_ago.as_str()),
    ] {
        statements.push(format!(
            "INSERT INTO kurir_portal_links (id, token_hash, subscriber_id, read_only, \
             created_by, created_via, created_at, expires_at, used_at) VALUES \
             ('{id}', 'hash_{id}', 'cus_a', {no}, 'admin', 'api', {long_ago}, {expires}, {used})"
        ));
    }
    // (id, expires_at, revoked_at): the first three go.
    for (id, expires, revoked) in [
        ("ps_expired", &long_ago, "NULL"),
        ("ps_revoked", &ahead, long_ago.as_str()),
        ("ps_expired_and_revoked", &long_ago, long_ago.as_str()),
        ("ps_expired_within_the_day", &an_hour_ago, "NULL"),
        ("ps_revoked_within_the_day", &ahead, an_hour_ago.as_str()),
    ] {
        statements.push(format!(
            "INSERT INTO kurir_portal_sessions (id, subscriber_id, link_id, read_only, \
             created_at, expires_at, revoked_at) VALUES \
             ('{id}', 'cus_a', 'pl_x', {no}, {long_ago}, {expires}, {revoked})"
        ));
    }
    for sql in &statements {
        match s {
            Store::Postgres(p) => sqlx::query(sql).execute(p.pool()).await.map(drop),
            Store::Sqlite(p) => sqlx::query(sql).execute(p.pool()).await.map(drop),
            Store::Mysql(p) => sqlx::query(sql).execute(p.pool()).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // A link opened just now: its session is in force; and one not yet opened.
    let new_link = |read_only| NewPortalLink {
        subscriber_id: "cus_a".into(),
        read_only,
        return_url: None,
        expires_at: now + chrono::Duration::minutes(15),
        created_by: "admin".into(),
        created_via: Via::Api,
    };
    let opened = s.create_portal_link(&new_link(false)).await.unwrap();
    let hash = kurir::store::tokens::token_hash(opened.token.expose());
    let Opened::Session(session) = s
        .open_portal_link(&hash, now + chrono::Duration::hours(8))
        .await
        .unwrap()
    else {
        panic!("the new link opens");
    };
    let waiting = s.create_portal_link(&new_link(true)).await.unwrap();

    let retention = TestApp::config(&db, SHORT).retention;
    let at = cutoffs(&retention, chrono::Utc::now());
    let expected = Pruned {
        portal_links: 2,
        portal_sessions: 3,
        ..Pruned::default()
    };
    assert_eq!(s.prunable(&at).await.unwrap(), expected);
    assert_eq!(s.prune_batch(&at, 10).await.unwrap(), Some(expected));
    assert_eq!(s.prunable(&at).await.unwrap(), Pruned::default());

    let left = |table: &'static str| async move {
        // MySQL's binary collation needs the cast to read as text.
        let id = match db.backend {
            Backend::Mysql => "CAST(id AS CHAR)",
            Backend::Postgres | Backend::Sqlite => "id",
        };
        let sql = format!("SELECT {id} FROM {table}");
        let mut ids: Vec<String> = match s {
            Store::Postgres(p) => sqlx::query_scalar(&sql).fetch_all(p.pool()).await,
            Store::Sqlite(p) => sqlx::query_scalar(&sql).fetch_all(p.pool()).await,
            Store::Mysql(p) => sqlx::query_scalar(&sql).fetch_all(p.pool()).await,
        }
        .unwrap();
        ids.sort();
        ids
    };
    let mut links = vec![
        opened.id.clone(),
        waiting.id.clone(),
        "pl_expired_within_the_day".to_owned(),
        "pl_used_not_expired".to_owned(),
    ];
    links.sort();
    assert_eq!(left("kurir_portal_links").await, links);
    let mut sessions = vec![
        session.id.clone(),
        "ps_expired_within_the_day".to_owned(),
        "ps_revoked_within_the_day".to_owned(),
    ];
    sessions.sort();
    assert_eq!(left("kurir_portal_sessions").await, sessions);
    assert_eq!(
        s.portal_session(&session.id).await.unwrap(),
        Some(session),
        "the session in force still is"
    );
}
