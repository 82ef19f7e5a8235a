//! Store conformance for what the admin API, the metrics and the inbox gateway ask of the store:
//! publish with an idempotency key, the event, delivery and replay listings, replay, stats, the
//! backlog and the inbox sources. Each body runs on every backend.

use std::time::Duration;

use chrono::Utc;
use kurir::delivery::{DeliveryStatus, NextState};
use kurir::endpoint::NewEndpoint;
use kurir::inbox_source::InboxSource;
use kurir::outbox::NewEvent;
use kurir::store::{
    DeliveryQuery, EndpointSlot, EventQuery, IdempotencyKey, Published, ReplayFilter,
    ReplayRequest, Store,
};
use kurir_core::secret::Secret;
use kurir_core::Scheme;
use serde_json::json;

use crate::on_both_backends;
use crate::support::TestDb;

on_both_backends!(
    publish_records_an_event_once_per_key_and_per_event_id,
    events_and_deliveries_are_listed_newest_first_filtered_and_paged,
    a_replay_moves_finished_deliveries_back_and_is_audited,
    stats_and_the_backlog_count_events_and_deliveries_by_state,
    inbox_sources_are_created_read_saved_listed_and_deleted,
);

fn event(event_type: &str, n: u32) -> NewEvent {
    NewEvent::json(event_type, &json!({ "n": n }))
        .unwrap()
        .aggregate("order", n.to_string())
}

/// `n` events of `event_type` published through the store, their ids in order.
async fn publish(store: &Store, event_type: &str, n: u32) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        match store
            .publish_event(event(event_type, i), None)
            .await
            .unwrap()
        {
            Published::Created(id) => ids.push(id),
            other => panic!("{other:?}"),
        }
    }
    ids
}

/// Claims every due delivery of `endpoint` and completes each with `next`.
async fn deliver_all(store: &Store, endpoint: &kurir::endpoint::Endpoint, next: NextState) {
    let slot = EndpointSlot {
        endpoint: std::sync::Arc::new(endpoint.clone()),
        limit: 100,
        lease: Duration::from_secs(60),
    };
    let claimed = store
        .claim_due_deliveries("w", &[slot], 100)
        .await
        .unwrap()
        .deliveries;
    let done: Vec<_> = claimed
        .iter()
        .map(|d| kurir::delivery::Completion {
            delivery_id: d.delivery_id,
            endpoint_id: d.endpoint.id.clone(),
            attempt: d.attempt,
            trigger: d.trigger,
            started_at: Utc::now(),
            duration_ms: 3,
            status_code: Some(200),
            error: None,
            response_body: None,
            next: next.clone(),
        })
        .collect();
    assert_eq!(store.complete_deliveries("w", &done).await.unwrap(), 0);
}

async fn publish_records_an_event_once_per_key_and_per_event_id(db: TestDb) {
    let s = &db.store;
    let key = IdempotencyKey {
        key: "k-1".into(),
        request_hash: "aa".into(),
    };
    let Published::Created(id) = s
        .publish_event(event("order.paid", 1), Some(&key))
        .await
        .unwrap()
    else {
        panic!("first publish creates")
    };
    let again = s
        .publish_event(event("order.paid", 2), Some(&key))
        .await
        .unwrap();
    assert_eq!(
        again,
        Published::KeyExists {
            event_id: id.clone(),
            request_hash: "aa".into()
        }
    );
    let same_id = event("order.paid", 3).event_id(id.parse().unwrap());
    assert_eq!(
        s.publish_event(same_id, None).await.unwrap(),
        Published::EventIdExists(id.clone())
    );
    let stored = s.get_event(&id).await.unwrap().unwrap();
    assert_eq!(stored.event_type, "order.paid");
    assert_eq!(stored.aggregate_id.as_deref(), Some("1"));
    assert_eq!(stored.payload, r#"{"n":1}"#);
    assert!(stored.dispatched_at.is_none());
    assert_eq!(
        s.stats().await.unwrap().events_total,
        1,
        "nothing else was written"
    );
}

async fn events_and_deliveries_are_listed_newest_first_filtered_and_paged(db: TestDb) {
    let s = &db.store;
    let endpoint = s
        .create_endpoint(NewEndpoint::new("https://partner.example/"))
        .await
        .unwrap();
    let paid = publish(s, "order.paid", 3).await;
    let shipped = publish(s, "order.shipped", 2).await;
    s.relay_batch(100).await.unwrap();

    let page = |before_id, limit| EventQuery {
        before_id,
        limit,
        ..Default::default()
    };
    let first = s.list_events(&page(None, 3)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, [&shipped[1], &shipped[0], &paid[2]]);
    let rest = s.list_events(&page(Some(first[2].id), 3)).await.unwrap();
    let ids: Vec<&str> = rest.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, [&paid[1], &paid[0]]);
    let only_paid = EventQuery {
        event_type: Some("order.paid".into()),
        aggregate_id: Some("1".into()),
        since: Some(Utc::now() - chrono::Duration::hours(1)),
        limit: 10,
        ..Default::default()
    };
    let found = s.list_events(&only_paid).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].event_id, paid[1]);
    assert!(found[0].dispatched_at.is_some());

    let deliveries = s
        .list_deliveries(&DeliveryQuery {
            event_type: Some("order.shipped".into()),
            status: Some(DeliveryStatus::Pending),
            endpoint_id: Some(endpoint.id.to_string()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = deliveries
        .iter()
        .map(|d| d.delivery.event_id.as_str())
        .collect();
    assert_eq!(ids, [&shipped[1], &shipped[0]]);
    assert!(deliveries.iter().all(|d| d.event_type == "order.shipped"));
    let older = s
        .list_deliveries(&DeliveryQuery {
            before_id: Some(deliveries[1].delivery.id),
            until: Some(Utc::now() + chrono::Duration::hours(1)),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(older.len(), 3, "the three order.paid deliveries");
}

async fn a_replay_moves_finished_deliveries_back_and_is_audited(db: TestDb) {
    let s = &db.store;
    let endpoint = s
        .create_endpoint(NewEndpoint::new("https://partner.example/"))
        .await
        .unwrap();
    let ids = publish(s, "order.paid", 2).await;
    s.relay_batch(100).await.unwrap();
    deliver_all(s, &endpoint, NextState::Sent).await;

    let unasked = ReplayFilter {
        event_id: Some(ids[0].clone()),
        ..Default::default()
    };
    assert_eq!(
        s.count_replayable(&unasked).await.unwrap(),
        0,
        "a sent delivery is re-sent only when asked"
    );
    let request = ReplayRequest {
        filter: ReplayFilter {
            include_sent: true,
            ..unasked
        },
        actor: "ops".into(),
        via: kurir::access::Via::Cli,
        reason: "partner lost it".into(),
    };
    let record = s.replay(&request).await.unwrap();
    assert_eq!((record.count, record.actor.as_str()), (1, "ops"));
    assert_eq!(record.via.as_deref(), Some("cli"), "where it came from");
    assert_eq!(
        record.filter,
        json!({ "event_id": ids[0], "include_sent": true })
    );
    let replayed = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!(
        (replayed.status, replayed.attempt_count),
        (DeliveryStatus::Pending, 0)
    );
    let untouched = &s.deliveries_for_event(&ids[1]).await.unwrap()[0];
    assert_eq!(untouched.status, DeliveryStatus::Sent);

    let nothing = s.replay(&request).await.unwrap();
    assert_eq!(nothing.count, 0, "a pending delivery is not replayed");
    let audit = s.list_replays(None, 10).await.unwrap();
    let counts: Vec<i64> = audit.iter().map(|r| r.count).collect();
    assert_eq!(counts, [0, 1], "newest first");
    let older = s.list_replays(Some(audit[0].id), 10).await.unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].id, record.id);
    assert_eq!(older[0].via.as_deref(), Some("cli"), "read back as written");
}

async fn stats_and_the_backlog_count_events_and_deliveries_by_state(db: TestDb) {
    let s = &db.store;
    let endpoint = s
        .create_endpoint(NewEndpoint::new("https://partner.example/"))
        .await
        .unwrap();
    publish(s, "order.paid", 3).await;
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.events_total, stats.events_undispatched), (3, 3));
    assert!(stats.oldest_undispatched_at.is_some());
    assert!(stats.deliveries.is_empty());
    let backlog = s.backlog().await.unwrap();
    assert_eq!((backlog.undispatched, backlog.deliveries), (3, [0, 0, 0]));

    s.relay_batch(100).await.unwrap();
    let stats = s.stats().await.unwrap();
    assert_eq!((stats.events_total, stats.events_undispatched), (3, 0));
    assert!(stats.oldest_undispatched_at.is_none());
    let pending: Vec<_> = stats
        .deliveries
        .iter()
        .map(|c| (c.status, c.count))
        .collect();
    assert_eq!(pending, [(DeliveryStatus::Pending, 3)]);
    assert!(stats.deliveries[0].oldest_created_at.is_some());
    assert_eq!(s.backlog().await.unwrap().deliveries, [3, 0, 0]);

    deliver_all(s, &endpoint, NextState::DeadLetter).await;
    let stats = s.stats().await.unwrap();
    let counts: Vec<_> = stats
        .deliveries
        .iter()
        .map(|c| (c.status, c.count))
        .collect();
    assert_eq!(counts, [(DeliveryStatus::DeadLetter, 3)]);
    let backlog = s.backlog().await.unwrap();
    assert_eq!((backlog.undispatched, backlog.deliveries), (0, [0, 0, 0]));
    let by_status = s.count_deliveries_by_status().await.unwrap();
    assert_eq!(by_status, [("dead_letter".to_string(), 3)]);
}

fn source(name: &str) -> InboxSource {
    let now = kurir::clock::Clock::system().now_millis();
    InboxSource {
        name: name.into(),
        scheme: Scheme::StandardWebhooks,
        secrets: vec![Secret::generate()],
        tolerance_seconds: 300,
        forward_url: "https://app.internal/hooks".into(),
        forward_secret: Secret::generate(),
        read_token_sha256: "ab".repeat(32),
        created_at: now,
        updated_at: now,
    }
}

async fn inbox_sources_are_created_read_saved_listed_and_deleted(db: TestDb) {
    let s = &db.store;
    assert!(s.create_source(&source("stripe")).await.unwrap());
    assert!(
        !s.create_source(&source("stripe")).await.unwrap(),
        "name taken"
    );
    assert!(s.create_source(&source("github")).await.unwrap());

    let mut read = s.get_source("stripe").await.unwrap().unwrap();
    assert_eq!(read.scheme, Scheme::StandardWebhooks);
    assert_eq!(read.tolerance_seconds, 300);
    read.forward_url = "https://app.internal/stripe".into();
    read.tolerance_seconds = 60;
    assert!(s.save_source(&read).await.unwrap());
    let saved = s.get_source("stripe").await.unwrap().unwrap();
    assert_eq!(
        (saved.forward_url.as_str(), saved.tolerance_seconds),
        ("https://app.internal/stripe", 60)
    );
    assert_eq!(saved.secrets, read.secrets);

    let names: Vec<String> = s
        .list_sources()
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.name)
        .collect();
    assert_eq!(s.source_names().await.unwrap().len(), 2);
    assert!(names.contains(&"github".to_string()) && names.contains(&"stripe".to_string()));
    assert!(s.delete_source("github").await.unwrap());
    assert!(!s.delete_source("github").await.unwrap());
    assert!(s.get_source("github").await.unwrap().is_none());
    assert!(
        !s.save_source(&source("github")).await.unwrap(),
        "saving a deleted source"
    );
}
