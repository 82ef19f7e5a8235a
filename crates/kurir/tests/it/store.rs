//! Store conformance: every operation behaves the same on SQLite and PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use kurir::delivery::{Completion, DeliveryStatus, NextState, Trigger};
use kurir::endpoint::{EndpointUpdate, EventFilter, NewEndpoint};
use kurir::store::{EndpointSlot, Store};
use kurir_core::secret::Secret;

use crate::on_both_backends;
use crate::support::{enqueue_events, Backend, TestDb};

on_both_backends!(
    endpoints_are_created_read_updated_disabled_and_deleted,
    migrations_run_twice_without_error,
    migrate_applies_the_receivers_inbox_migrations_too,
    relay_fans_out_once_per_matching_enabled_endpoint,
    an_event_no_endpoint_wants_is_dispatched_with_zero_deliveries,
    concurrent_relays_create_each_delivery_once,
    claims_respect_endpoint_and_total_limits,
    a_claimed_delivery_is_not_claimed_again_until_its_lease_expires,
    a_late_completion_is_fenced_out_but_its_attempt_is_recorded,
    completion_moves_deliveries_to_their_next_state,
    gone_disables_the_endpoint,
    deleting_an_endpoint_mid_flight_keeps_its_history_cancels_the_rest_and_spares_the_batch,
    released_leases_count_as_attempts_and_are_due_again,
    a_delivery_handed_back_unattempted_is_not_charged,
    rotated_secret_keeps_signing_during_grace,
    endpoint_pages_follow_one_another_in_id_order_without_repeating_or_skipping,
);

fn endpoint(url: &str, filter: &[&str]) -> NewEndpoint {
    let mut e = NewEndpoint::new(url);
    e.event_types = EventFilter::parse(filter.iter().map(|s| s.to_string()).collect()).unwrap();
    e
}

fn slot(e: &kurir::endpoint::Endpoint, limit: u32, lease: Duration) -> EndpointSlot {
    EndpointSlot {
        endpoint: Arc::new(e.clone()),
        limit,
        lease,
    }
}

/// Ten attempts, each retry due at once.
fn no_backoff() -> kurir_core::retry::RetryPolicy {
    kurir_core::retry::RetryPolicy {
        initial_delay: Duration::ZERO,
        max_delay: Duration::ZERO,
        max_attempts: 10,
        jitter: 0.0,
    }
}

fn completion(d: &kurir::delivery::ClaimedDelivery, next: NextState) -> Completion {
    Completion {
        delivery_id: d.delivery_id,
        endpoint_id: d.endpoint.id.clone(),
        attempt: d.attempt,
        trigger: Trigger::Scheduled,
        started_at: Utc::now(),
        duration_ms: 12,
        status_code: Some(500),
        error: None,
        response_body: Some("nope".into()),
        next,
    }
}

async fn statuses(store: &Store, event_id: &str) -> Vec<DeliveryStatus> {
    store
        .deliveries_for_event(event_id)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.status)
        .collect()
}

/// Issues 27 and 33: the endpoints are read a page at a time, in id order (a UUIDv7's order is
/// its creation's), each page after the last id of the one before. A tombstone is skipped, a
/// disabled endpoint listed, and an endpoint created while paging shows up on a later page
/// without shifting any.
async fn endpoint_pages_follow_one_another_in_id_order_without_repeating_or_skipping(db: TestDb) {
    let s = &db.store;
    let mut created = Vec::new();
    for n in 0..7 {
        let e = s
            .create_endpoint(endpoint(&format!("https://p{n}.example/"), &[]))
            .await
            .unwrap();
        created.push(e.id);
    }
    let mut sorted = created.clone();
    sorted.sort();
    assert_eq!(sorted, created, "ids are in creation order");
    assert!(s.delete_endpoint(&created[4]).await.unwrap());
    let disable = EndpointUpdate {
        enabled: Some(false),
        ..Default::default()
    };
    s.update_endpoint(&created[1], disable).await.unwrap();

    let ids = |page: Vec<kurir::endpoint::Endpoint>| -> Vec<_> {
        page.into_iter().map(|e| e.id).collect()
    };
    let first = ids(s.endpoint_page(None, 3, None).await.unwrap());
    assert_eq!(
        first,
        created[..3],
        "the oldest three, the disabled one among them"
    );
    let late = s
        .create_endpoint(endpoint("https://late.example/", &[]))
        .await
        .unwrap();
    let second = ids(s.endpoint_page(first.last(), 3, None).await.unwrap());
    assert_eq!(
        second,
        [created[3].clone(), created[5].clone(), created[6].clone()],
        "after the first page's last id; the tombstone skipped"
    );
    let third = ids(s.endpoint_page(second.last(), 3, None).await.unwrap());
    assert_eq!(third, [late.id], "created while paging: on a later page");
    assert!(s
        .endpoint_page(third.last(), 3, None)
        .await
        .unwrap()
        .is_empty());

    let mut all = [first, second, third].concat();
    let listed = all.len();
    all.dedup();
    assert_eq!(all.len(), listed, "no endpoint on two pages");
    let live: Vec<_> = ids(s.list_endpoints().await.unwrap());
    assert_eq!(all, live, "every live endpoint on some page");
}

async fn endpoints_are_created_read_updated_disabled_and_deleted(db: TestDb) {
    let s = &db.store;
    let given = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let mut new = endpoint("https://partner.example/hooks", &["order.*"]);
    new.secret = Some(given.clone());
    new.max_in_flight = Some(4);
    let a = s.create_endpoint(new).await.unwrap();
    let b = s
        .create_endpoint(endpoint("https://other.example/", &[]))
        .await
        .unwrap();
    assert!(b.secret.expose().starts_with("whsec_"), "generated secret");
    assert_ne!(a.id, b.id);

    let read = s.get_endpoint(&a.id).await.unwrap().unwrap();
    assert_eq!(read.url, "https://partner.example/hooks");
    assert_eq!(read.secret, given);
    assert_eq!(read.max_in_flight, 4);
    assert_eq!(read.event_types.patterns(), ["order.*"]);
    assert_eq!(s.list_endpoints().await.unwrap().len(), 2);

    let update = EndpointUpdate {
        enabled: Some(false),
        disabled_reason: Some("partner maintenance".into()),
        description: Some("orders".into()),
        ..Default::default()
    };
    let updated = s.update_endpoint(&a.id, update).await.unwrap().unwrap();
    assert!(!updated.enabled);
    let read = s.get_endpoint(&a.id).await.unwrap().unwrap();
    assert_eq!(read.disabled_reason.as_deref(), Some("partner maintenance"));
    assert_eq!(read.description, "orders");
    assert_eq!(s.enabled_endpoints().await.unwrap().len(), 1);

    let enable = EndpointUpdate {
        enabled: Some(true),
        ..Default::default()
    };
    let read = s.update_endpoint(&a.id, enable).await.unwrap().unwrap();
    assert!(read.enabled && read.disabled_reason.is_none());

    assert!(s.delete_endpoint(&b.id).await.unwrap());
    assert!(!s.delete_endpoint(&b.id).await.unwrap());
    assert!(s.get_endpoint(&b.id).await.unwrap().is_none());
}

async fn migrations_run_twice_without_error(db: TestDb) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
}

/// `kurir migrate` creates everything the gateway needs, and records kurir-receiver's own
/// migrations, so an application running the crate's migrator later finds nothing to do.
async fn migrate_applies_the_receivers_inbox_migrations_too(db: TestDb) {
    let versions = "SELECT version FROM _sqlx_migrations ORDER BY version";
    let probe = "SELECT COUNT(*) FROM kurir_inbox_sources \
                 WHERE EXISTS (SELECT event_type FROM kurir_inbox)";
    let (applied, _): (Vec<i64>, i64) = match &db.store {
        Store::Postgres(pg) => (
            sqlx::query_scalar(versions)
                .fetch_all(pg.pool())
                .await
                .unwrap(),
            sqlx::query_scalar(probe)
                .fetch_one(pg.pool())
                .await
                .unwrap(),
        ),
        Store::Sqlite(sq) => (
            sqlx::query_scalar(versions)
                .fetch_all(sq.pool())
                .await
                .unwrap(),
            sqlx::query_scalar(probe)
                .fetch_one(sq.pool())
                .await
                .unwrap(),
        ),
        Store::Mysql(my) => (
            sqlx::query_scalar(versions)
                .fetch_all(my.pool())
                .await
                .unwrap(),
            sqlx::query_scalar(probe)
                .fetch_one(my.pool())
                .await
                .unwrap(),
        ),
    };
    // PostgreSQL has two migrations more (0004 drops the hot tables' foreign keys, which the
    // other two never had on them; 0012 orders the due index for its claim cursors); MySQL one
    // fewer (0011, the relay's cursor, which it has not). 0013 numbers endpoint changes on all
    // three; 0014 adds the named tokens on all three; 0015 is the event catalog on all three; 0016 the
    // subscribers on all three; 0017 the audit of operators' circuit actions on all three; 0018,
    // the relay's shared pace, only where several processes share a database; 0019 the
    // subscriber listings' indexes on all three; 0021 the portal's links and sessions, 0022 the
    // deliveries' (endpoint, status) index, 0023 the audit of operators' actions on subscribers,
    // 0025 moves the event listings' indexes off the outbox, 0026 indexes the portal's rows by
    // expiry for retention, on all three; 0027, only on PostgreSQL, moves the outbox's rules from
    // table CHECKs to domains.
    let expected: &[i64] = match db.backend {
        Backend::Postgres => &[
            1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 25, 26,
            27, 1000, 1001, 1002,
        ],
        Backend::Sqlite => &[
            1, 2, 3, 5, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 25, 26, 1000,
            1001, 1002,
        ],
        Backend::Mysql => &[
            1, 2, 3, 5, 7, 8, 9, 10, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 25, 26, 1000,
            1001, 1002,
        ],
    };
    assert_eq!(applied, expected);
    db.store.inbox().migrate().await.unwrap();
}

async fn relay_fans_out_once_per_matching_enabled_endpoint(db: TestDb) {
    let s = &db.store;
    let orders = s
        .create_endpoint(endpoint("https://a.example/", &["order.*"]))
        .await
        .unwrap();
    let all = s
        .create_endpoint(endpoint("https://b.example/", &["*"]))
        .await
        .unwrap();
    let _payments = s
        .create_endpoint(endpoint("https://c.example/", &["payment.succeeded"]))
        .await
        .unwrap();
    let off = s
        .create_endpoint(endpoint("https://d.example/", &[]))
        .await
        .unwrap();
    s.update_endpoint(
        &off.id,
        EndpointUpdate {
            enabled: Some(false),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ids = enqueue_events(s, "order.paid", 3).await;
    // Created after the events were written: it must not receive them. Timestamps have
    // millisecond precision on SQLite and a tie counts as "existed", so wait for the clock to move.
    let written = s.get_event(&ids[2]).await.unwrap().unwrap().created_at;
    crate::support::eventually("the clock to pass the events' timestamp", || async {
        (s.clock().now_millis() > written).then_some(())
    })
    .await;
    let _late = s
        .create_endpoint(endpoint("https://e.example/", &[]))
        .await
        .unwrap();

    let first = s.relay_batch(100).await.unwrap();
    assert_eq!(first.events, 3);
    assert_eq!(first.deliveries, 6);
    assert_eq!(
        s.relay_batch(100).await.unwrap().events,
        0,
        "a dispatched row is not relayed again"
    );
    for id in &ids {
        let mut got: Vec<String> = s
            .deliveries_for_event(id)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.endpoint_id)
            .collect();
        got.sort();
        let mut want = vec![orders.id.to_string(), all.id.to_string()];
        want.sort();
        assert_eq!(got, want);
        assert!(s
            .get_event(id)
            .await
            .unwrap()
            .unwrap()
            .dispatched_at
            .is_some());
    }
}

async fn an_event_no_endpoint_wants_is_dispatched_with_zero_deliveries(db: TestDb) {
    let s = &db.store;
    s.create_endpoint(endpoint("https://a.example/", &["payment.*"]))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 1).await;
    let outcome = s.relay_batch(10).await.unwrap();
    assert_eq!((outcome.events, outcome.deliveries), (1, 0));
    let event = s.get_event(&ids[0]).await.unwrap().unwrap();
    assert!(
        event.dispatched,
        "visible as dispatched, not silently pending"
    );
    if db.store.backend() == "mysql" {
        assert!(event.dispatched_at.is_some(), "MySQL marks the row");
    } else {
        assert!(event.dispatched_at.is_none(), "no delivery to tell when");
    }
    assert!(s.deliveries_for_event(&ids[0]).await.unwrap().is_empty());
}

async fn concurrent_relays_create_each_delivery_once(db: TestDb) {
    let s = &db.store;
    for i in 0..3 {
        s.create_endpoint(endpoint(&format!("https://{i}.example/"), &[]))
            .await
            .unwrap();
    }
    enqueue_events(s, "order.paid", 300).await;
    let mut relays = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let store = db.connect_again().await;
        relays.spawn(async move {
            let mut total = 0;
            loop {
                let o = store.relay_batch(25).await.unwrap();
                if o.events == 0 {
                    return total;
                }
                total += o.deliveries;
            }
        });
    }
    let created: usize = relays.join_all().await.into_iter().sum();
    assert_eq!(created, 900);
    let counts = s.count_deliveries_by_status().await.unwrap();
    assert_eq!(counts, vec![("pending".to_string(), 900)]);
}

async fn claims_respect_endpoint_and_total_limits(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    let b = s
        .create_endpoint(endpoint("https://b.example/", &[]))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 10).await;
    s.relay_batch(100).await.unwrap();
    let lease = Duration::from_secs(60);
    let claimed = s
        .claim_due_deliveries("w1", &[slot(&a, 3, lease), slot(&b, 100, lease)], 8)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(claimed.len(), 8);
    assert_eq!(claimed.iter().filter(|c| c.endpoint.id == a.id).count(), 3);
    assert!(claimed
        .iter()
        .all(|c| c.attempt == 1 && c.trigger == Trigger::Scheduled));
    assert!(claimed
        .iter()
        .all(|c| c.event.payload.starts_with("{\"n\":")));
    let counts = s.count_deliveries_by_status().await.unwrap();
    assert!(
        counts.contains(&("processing".to_string(), 8)),
        "{counts:?}"
    );
}

async fn a_claimed_delivery_is_not_claimed_again_until_its_lease_expires(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 2).await;
    s.relay_batch(100).await.unwrap();
    let long = s
        .claim_due_deliveries("w1", &[slot(&a, 1, Duration::from_secs(60))], 10)
        .await
        .unwrap()
        .deliveries;
    let short = s
        .claim_due_deliveries("w2", &[slot(&a, 1, Duration::ZERO)], 10)
        .await
        .unwrap()
        .deliveries;
    assert_eq!((long.len(), short.len()), (1, 1));
    assert_ne!(long[0].delivery_id, short[0].delivery_id);
    assert!(s
        .claim_due_deliveries("w3", &[slot(&a, 10, Duration::ZERO)], 10)
        .await
        .unwrap()
        .deliveries
        .is_empty());

    // Only the expired lease is swept; the live one stays with its owner.
    crate::support::eventually("the zero-length lease to be swept", || async {
        (s.sweep_expired_leases(&no_backoff()).await.unwrap().total() == 1).then_some(())
    })
    .await;
    let again = s
        .claim_due_deliveries("w3", &[slot(&a, 10, Duration::from_secs(60))], 10)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].delivery_id, short[0].delivery_id);
    assert_eq!(again[0].attempt, 2, "the interrupted attempt counts");
}

async fn a_late_completion_is_fenced_out_but_its_attempt_is_recorded(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(100).await.unwrap();
    let stale = s
        .claim_due_deliveries("w1", &[slot(&a, 1, Duration::ZERO)], 1)
        .await
        .unwrap()
        .deliveries;
    crate::support::eventually("the lease to be swept", || async {
        (s.sweep_expired_leases(&no_backoff()).await.unwrap().total() == 1).then_some(())
    })
    .await;
    let fresh = s
        .claim_due_deliveries("w2", &[slot(&a, 1, Duration::from_secs(60))], 1)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(fresh[0].attempt, 2);

    let fenced = s
        .complete_deliveries("w1", &[completion(&stale[0], NextState::Sent)])
        .await
        .unwrap();
    assert_eq!(
        fenced, 1,
        "the old worker may not overwrite the newer lease"
    );
    assert_eq!(statuses(s, &ids[0]).await, vec![DeliveryStatus::Processing]);
    let attempts = s.attempts_for_delivery(stale[0].delivery_id).await.unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "the late attempt still happened and is on record"
    );

    let fenced = s
        .complete_deliveries("w2", &[completion(&fresh[0], NextState::Sent)])
        .await
        .unwrap();
    assert_eq!(fenced, 0);
    assert_eq!(statuses(s, &ids[0]).await, vec![DeliveryStatus::Sent]);
}

async fn completion_moves_deliveries_to_their_next_state(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 3).await;
    s.relay_batch(100).await.unwrap();
    let claimed = s
        .claim_due_deliveries("w1", &[slot(&a, 10, Duration::from_secs(60))], 10)
        .await
        .unwrap()
        .deliveries;
    let by_event = |id: &str| {
        claimed
            .iter()
            .find(|c| c.event.event_id == id)
            .unwrap()
            .clone()
    };
    let retry_at = Utc::now() + chrono::Duration::hours(1);
    let done = [
        completion(&by_event(&ids[0]), NextState::Sent),
        completion(&by_event(&ids[1]), NextState::Retry(retry_at)),
        completion(&by_event(&ids[2]), NextState::DeadLetter),
    ];
    assert_eq!(s.complete_deliveries("w1", &done).await.unwrap(), 0);

    let sent = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!(sent.status, DeliveryStatus::Sent);
    assert!(sent.sent_at.is_some());
    let failed = &s.deliveries_for_event(&ids[1]).await.unwrap()[0];
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert_eq!(failed.last_status_code, Some(500));
    assert!((failed.available_at - retry_at).num_milliseconds().abs() <= 1);
    assert_eq!(statuses(s, &ids[2]).await, vec![DeliveryStatus::DeadLetter]);
    let attempt = &s.attempts_for_delivery(sent.id).await.unwrap()[0];
    assert_eq!(
        (attempt.attempt, attempt.duration_ms, attempt.status_code),
        (1, 12, Some(500))
    );
    assert_eq!(attempt.response_body.as_deref(), Some("nope"));
    assert!(
        s.claim_due_deliveries("w1", &[slot(&a, 10, Duration::from_secs(60))], 10)
            .await
            .unwrap()
            .deliveries
            .is_empty(),
        "a retry scheduled in an hour is not due"
    );
}

async fn gone_disables_the_endpoint(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(100).await.unwrap();
    let claimed = s
        .claim_due_deliveries("w1", &[slot(&a, 1, Duration::from_secs(60))], 1)
        .await
        .unwrap()
        .deliveries;
    s.complete_deliveries("w1", &[completion(&claimed[0], NextState::Gone)])
        .await
        .unwrap();
    assert_eq!(statuses(s, &ids[0]).await, vec![DeliveryStatus::DeadLetter]);
    let a = s.get_endpoint(&a.id).await.unwrap().unwrap();
    assert!(!a.enabled);
    assert!(a.disabled_reason.unwrap().contains("410 Gone"));
}

async fn deleting_an_endpoint_mid_flight_keeps_its_history_cancels_the_rest_and_spares_the_batch(
    db: TestDb,
) {
    let s = &db.store;
    let doomed = s
        .create_endpoint(endpoint("https://doomed.example/", &[]))
        .await
        .unwrap();
    let kept = s
        .create_endpoint(endpoint("https://kept.example/", &[]))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 2).await;
    s.relay_batch(100).await.unwrap();
    let lease = Duration::from_secs(60);
    let first = s
        .claim_due_deliveries("w1", &[slot(&doomed, 1, lease), slot(&kept, 1, lease)], 2)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(first.len(), 2);
    let on = |claimed: &[kurir::delivery::ClaimedDelivery], e: &kurir::endpoint::Endpoint| {
        claimed
            .iter()
            .find(|c| c.endpoint.id == e.id)
            .unwrap()
            .clone()
    };
    let (old, old_kept) = (on(&first, &doomed), on(&first, &kept));
    let retry = NextState::Retry(Utc::now());
    s.complete_deliveries("w1", &[completion(&old, retry.clone())])
        .await
        .unwrap();
    assert_eq!(
        s.attempts_for_delivery(old.delivery_id)
            .await
            .unwrap()
            .len(),
        1
    );
    let in_flight = s
        .claim_due_deliveries("w1", &[slot(&doomed, 1, lease)], 1)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(in_flight.len(), 1);

    assert!(s.delete_endpoint(&doomed.id).await.unwrap());
    assert!(s.endpoint_deleted_at(&doomed.id).await.unwrap().is_some());
    for id in &ids {
        let of_doomed: Vec<_> = (s.deliveries_for_event(id).await.unwrap())
            .into_iter()
            .filter(|d| d.endpoint_id == doomed.id.as_str())
            .collect();
        assert_eq!(of_doomed.len(), 1, "the deleted endpoint's deliveries stay");
        let d = &of_doomed[0];
        assert_eq!(d.status, DeliveryStatus::Cancelled, "{d:?}");
        assert_eq!(d.last_error.as_deref(), Some(kurir::store::CANCELLED_ERROR));
        assert_eq!(d.endpoint_url.as_deref(), Some("https://doomed.example/"));
        assert!(d.endpoint_deleted_at.is_some());
    }
    assert_eq!(
        s.attempts_for_delivery(old.delivery_id)
            .await
            .unwrap()
            .len(),
        1,
        "its attempts stay"
    );

    // The attempt in flight at the deletion finishes afterwards, in the same batch as another
    // endpoint's: the batch is recorded, the attempt kept, the delivery stays cancelled.
    let done = [
        completion(&in_flight[0], NextState::Sent),
        completion(&old_kept, NextState::Sent),
    ];
    assert_eq!(s.complete_deliveries("w1", &done).await.unwrap(), 1);
    let kept_delivery = s
        .deliveries_for_event(&old_kept.event.event_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.endpoint_id == kept.id.as_str())
        .collect::<Vec<_>>();
    assert_eq!(kept_delivery.len(), 1);
    assert_eq!(kept_delivery[0].status, DeliveryStatus::Sent);
    assert_eq!(kept_delivery[0].endpoint_deleted_at, None);
    assert_eq!(
        s.attempts_for_delivery(old_kept.delivery_id)
            .await
            .unwrap()
            .len(),
        1
    );
    let in_flight_attempts = s
        .attempts_for_delivery(in_flight[0].delivery_id)
        .await
        .unwrap();
    assert_eq!(
        in_flight_attempts.len(),
        1 + usize::from(in_flight[0].delivery_id == old.delivery_id)
    );
    let after = s
        .deliveries_for_event(&in_flight[0].event.event_id)
        .await
        .unwrap();
    assert!(after
        .iter()
        .any(|d| d.id == in_flight[0].delivery_id && d.status == DeliveryStatus::Cancelled));
    // Nothing claims for it again, even with a slot: its deliveries are not due.
    let again = s
        .claim_due_deliveries("w2", &[slot(&doomed, 10, lease)], 10)
        .await
        .unwrap();
    assert!(again.deliveries.is_empty() && again.orphans.is_empty());
}

/// What a process still holds at shutdown, after recording its attempts in flight, may have
/// been attempted: each counts as an attempt, as an expired lease does.
async fn released_leases_count_as_attempts_and_are_due_again(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    enqueue_events(s, "order.paid", 2).await;
    s.relay_batch(100).await.unwrap();
    let slots = [slot(&a, 10, Duration::from_secs(60))];
    assert_eq!(
        s.claim_due_deliveries("w1", &slots, 10)
            .await
            .unwrap()
            .deliveries
            .len(),
        2
    );
    assert_eq!(
        s.release_leases("someone-else", &no_backoff())
            .await
            .unwrap()
            .total(),
        0
    );
    assert_eq!(
        s.release_leases("w1", &no_backoff()).await.unwrap().retried,
        2
    );
    let again = s
        .claim_due_deliveries("w2", &slots, 10)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|d| d.attempt == 2), "{again:?}");
}

/// Issue 11, item 3: a delivery claimed but never attempted goes back uncharged, fenced like
/// a completion.
async fn a_delivery_handed_back_unattempted_is_not_charged(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 2).await;
    s.relay_batch(100).await.unwrap();
    let slots = [slot(&a, 10, Duration::from_secs(60))];
    let claimed = s
        .claim_due_deliveries("w1", &slots, 10)
        .await
        .unwrap()
        .deliveries;
    let first = claimed.iter().find(|d| d.event.event_id == ids[0]).unwrap();
    assert_eq!(
        s.hand_back("w2", std::slice::from_ref(first))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.hand_back("w1", std::slice::from_ref(first))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.hand_back("w1", std::slice::from_ref(first))
            .await
            .unwrap(),
        0
    );
    let d = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!((d.status, d.attempt_count), (DeliveryStatus::Pending, 0));
    assert_eq!(statuses(s, &ids[1]).await, vec![DeliveryStatus::Processing]);
    let again = s
        .claim_due_deliveries("w2", &slots, 10)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].delivery_id, again[0].attempt),
        (first.delivery_id, 1)
    );
}

async fn rotated_secret_keeps_signing_during_grace(db: TestDb) {
    let s = &db.store;
    let a = s
        .create_endpoint(endpoint("https://a.example/", &[]))
        .await
        .unwrap();
    let old = a.secret.clone();
    let new = Secret::generate();
    let rotated = s
        .rotate_secret(&a.id, new.clone(), Duration::from_secs(3600))
        .await
        .unwrap()
        .unwrap();
    let read = s.get_endpoint(&a.id).await.unwrap().unwrap();
    assert_eq!(read.secret, new);
    let signing: Vec<&Secret> = read.signing_secrets(Utc::now());
    assert_eq!(
        signing,
        vec![&new, &old],
        "current first, then the rotated-out one"
    );
    assert!(read.signing_secrets(Utc::now() + chrono::Duration::hours(2)) == vec![&new]);
    assert_eq!(rotated.previous_secrets.len(), 1);
}
