//! Store conformance of what the dashboard and the operator API read: the inbox listing and
//! counts, the replay dry run, and the activity and endpoint-health figures, on both backends.

use std::sync::Arc;
use std::time::Duration;

use chrono::{Duration as Ago, Utc};
use kurir::delivery::{Completion, NextState, Trigger};
use kurir::endpoint::NewEndpoint;
use kurir::store::{EndpointSlot, InboxQuery, ReplayFilter, Store};
use kurir_receiver::InboxStatus;

use crate::on_both_backends;
use crate::support::{enqueue_events, TestDb};

on_both_backends!(
    inbox_events_are_listed_newest_first_by_source_and_status_and_counted,
    a_replay_count_matches_what_the_replay_moves,
    activity_and_endpoint_health_count_attempts_latencies_and_the_last_error,
);

/// Inserts an inbox row of `source` in `status` directly (the receiving side has its own tests).
pub(crate) async fn inbox_row(store: &Store, source: &str, event_id: &str, status: &str) {
    let columns =
        "INSERT INTO kurir_inbox (source, event_id, event_type, status, payload, attempts)";
    let pg = format!("{columns} VALUES ($1, $2, 'invoice.paid', $3, $4, 1)");
    let sqlite = format!("{columns} VALUES (?1, ?2, 'invoice.paid', ?3, ?4, 1)");
    let mysql = format!("{columns} VALUES (?, ?, 'invoice.paid', ?, ?, 1)");
    let payload = b"{\"secret-ish\":true}".to_vec();
    match store {
        Store::Postgres(p) => sqlx::query(&pg)
            .bind(source)
            .bind(event_id)
            .bind(status)
            .bind(payload)
            .execute(p.pool())
            .await
            .map(drop),
        Store::Sqlite(sq) => sqlx::query(&sqlite)
            .bind(source)
            .bind(event_id)
            .bind(status)
            .bind(payload)
            .execute(sq.pool())
            .await
            .map(drop),
        Store::Mysql(my) => sqlx::query(&mysql)
            .bind(source)
            .bind(event_id)
            .bind(status)
            .bind(payload)
            .execute(my.pool())
            .await
            .map(drop),
    }
    .unwrap();
}

async fn inbox_events_are_listed_newest_first_by_source_and_status_and_counted(db: TestDb) {
    let s = &db.store;
    for (i, status) in ["completed", "failed", "completed", "pending"]
        .iter()
        .enumerate()
    {
        inbox_row(s, "billing", &format!("evt_{i}"), status).await;
    }
    inbox_row(s, "github", "gh_1", "failed").await;
    let query = |status: Option<InboxStatus>, before_id: Option<i64>, limit: u32| InboxQuery {
        source: "billing".into(),
        status,
        before_id,
        limit,
        ..InboxQuery::default()
    };
    let page = s.list_inbox_events(&query(None, None, 3)).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_3", "evt_2", "evt_1"], "newest first, one source");
    let rest = s
        .list_inbox_events(&query(None, Some(page[2].id), 3))
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].event_id, "evt_0");
    let failed = s
        .list_inbox_events(&query(Some(InboxStatus::Failed), None, 10))
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (
            failed[0].event_id.as_str(),
            failed[0].status,
            failed[0].attempts
        ),
        ("evt_1", InboxStatus::Failed, 1)
    );
    assert_eq!(failed[0].event_type.as_deref(), Some("invoice.paid"));
    let later = InboxQuery {
        since: Some(Utc::now() + Ago::hours(1)),
        ..query(None, None, 10)
    };
    assert!(s.list_inbox_events(&later).await.unwrap().is_empty());

    let counts = s.inbox_counts().await.unwrap();
    let found: Vec<(&str, InboxStatus, i64)> = counts
        .iter()
        .map(|c| (c.source.as_str(), c.status, c.count))
        .collect();
    assert_eq!(
        found,
        [
            ("billing", InboxStatus::Completed, 2),
            ("billing", InboxStatus::Failed, 1),
            ("billing", InboxStatus::Pending, 1),
            ("github", InboxStatus::Failed, 1),
        ]
    );
    assert!(counts.iter().all(|c| c.oldest_created_at.is_some()));
    let waiting = s.waiting().await.unwrap();
    assert_eq!((waiting.dead_letters, waiting.inbox_unforwarded), (0, 3));
}

/// Claims every due delivery and completes each with `answer` (a status code, or `None` for a
/// timeout), `next` deciding where it goes.
async fn attempt_all(s: &Store, owner: &str, answer: Option<u16>, next: NextState) -> usize {
    let endpoints = s.enabled_endpoints().await.unwrap();
    let slots: Vec<EndpointSlot> = endpoints
        .iter()
        .map(|e| EndpointSlot {
            endpoint: Arc::new(e.clone()),
            limit: 100,
            lease: Duration::from_secs(60),
        })
        .collect();
    let claimed = s
        .claim_due_deliveries(owner, &slots, 1000)
        .await
        .unwrap()
        .deliveries;
    let done: Vec<Completion> = claimed
        .iter()
        .map(|d| Completion {
            delivery_id: d.delivery_id,
            endpoint_id: d.endpoint.id.clone(),
            attempt: d.attempt,
            trigger: Trigger::Scheduled,
            started_at: s.clock().now_millis(),
            duration_ms: 120,
            status_code: answer,
            error: answer
                .is_none()
                .then(|| "timeout: operation timed out".into()),
            response_body: None,
            next: next.clone(),
        })
        .collect();
    s.complete_deliveries(owner, &done).await.unwrap();
    claimed.len()
}

async fn a_replay_count_matches_what_the_replay_moves(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(NewEndpoint::new("https://a.example/"))
        .await
        .unwrap();
    s.create_endpoint(NewEndpoint::new("https://b.example/"))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 2).await;
    enqueue_events(s, "order.shipped", 1).await;
    s.relay_batch(100).await.unwrap();
    assert_eq!(
        attempt_all(s, "w", Some(500), NextState::DeadLetter).await,
        6
    );
    let filter = ReplayFilter {
        status: Some(kurir::delivery::DeliveryStatus::DeadLetter),
        endpoint_id: Some(a.id.to_string()),
        event_type: Some("order.paid".into()),
        ..ReplayFilter::default()
    };
    assert_eq!(s.count_replayable(&filter).await.unwrap(), 2);
    assert_eq!(
        s.count_replayable(&ReplayFilter::default()).await.unwrap(),
        6
    );
    let replayed = s
        .replay(&kurir::store::ReplayRequest {
            filter: filter.clone(),
            actor: "admin".into(),
            via: kurir::access::Via::Api,
            reason: "test".into(),
        })
        .await
        .unwrap();
    assert_eq!(replayed.count, 2);
    assert_eq!(s.count_replayable(&filter).await.unwrap(), 0, "pending now");
}

async fn activity_and_endpoint_health_count_attempts_latencies_and_the_last_error(db: TestDb) {
    let s = &db.store;
    let since = Utc::now() - Ago::minutes(5);
    let e = s
        .create_endpoint(NewEndpoint::new("https://a.example/"))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 4).await;
    s.relay_batch(100).await.unwrap();
    let retry = NextState::Retry(Utc::now());
    assert_eq!(attempt_all(s, "w", None, retry.clone()).await, 4);
    assert_eq!(attempt_all(s, "w", Some(502), retry).await, 4);
    assert_eq!(attempt_all(s, "w", Some(200), NextState::Sent).await, 4);

    let events: i64 = s
        .event_counts(since, 60)
        .await
        .unwrap()
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert_eq!(events, 4);
    let buckets = s.attempt_counts(since, 60).await.unwrap();
    let delivered: i64 = buckets.iter().map(|(_, b)| b.delivered).sum();
    let failed: i64 = buckets.iter().map(|(_, b)| b.failed).sum();
    assert_eq!((delivered, failed), (4, 8));
    let latency = s.latency_counts(since, 60, 1).await.unwrap();
    let latencies: i64 = latency.iter().map(|(_, h)| h.total()).sum();
    assert_eq!(latencies, 4, "one latency per delivering attempt");
    let sampled: i64 = s
        .latency_counts(since, 60, 1000)
        .await
        .unwrap()
        .iter()
        .map(|(_, h)| h.total())
        .sum();
    assert!(sampled <= 1, "every 1000th attempt by id: {sampled}");
    let p95 = latency.iter().find_map(|(_, h)| h.quantile(0.95)).unwrap();
    assert!(p95 > 0.0 && p95 < 60_000.0, "occurred moments ago: {p95}");
    assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0), "oldest first");
    assert!(s
        .attempt_counts(Utc::now() + Ago::minutes(1), 60)
        .await
        .unwrap()
        .is_empty());

    let health = s.endpoint_health(since).await.unwrap();
    assert_eq!(health.len(), 1);
    let h = &health[0];
    assert_eq!(h.endpoint_id, e.id.to_string());
    assert_eq!((h.attempts, h.delivered, h.timeouts), (12, 4, 4));
    assert_eq!(
        h.last_error.as_deref(),
        Some("HTTP 502"),
        "the latest failure"
    );
    // Issue 33: the last error has its time, and reads as past once an attempt succeeded after.
    let at = h.last_error_at.expect("the last error's time");
    assert!(at >= since && at <= Utc::now() + Ago::minutes(1), "{at}");
    assert!(h.recovered, "sent after the 502");

    // The events list's outcome column: each event's deliveries per status.
    let mut outcomes = s.delivery_outcomes(&ids).await.unwrap();
    outcomes.sort();
    let mut expected: Vec<(String, String, i64)> = ids
        .iter()
        .map(|id| (id.clone(), "sent".into(), 1))
        .collect();
    expected.sort();
    assert_eq!(outcomes, expected);
    assert!(s
        .delivery_outcomes(&["nope".into()])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        h.duration
            .quantile(0.95)
            .map(|ms| ms > 100.0 && ms <= 250.0),
        Some(true)
    );
}
