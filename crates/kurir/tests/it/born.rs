//! Deliveries born claimed (issue 19, item 2): a relay batch inserts the deliveries its process
//! has room for already leased to it and hands them to its lanes; the rest are inserted pending.
//! A born-claimed delivery is a claimed one in every respect: fenced, swept, cancelled.

use std::sync::Arc;
use std::time::Duration;

use kurir::config::DeliveryConfig;
use kurir::delivery::DeliveryStatus;
use kurir::dispatch::Dispatcher;
use kurir::endpoint::{Endpoint, NewEndpoint, Ordering};
use kurir::metrics::Metrics;
use kurir::relay::{step_into, Downstream};
use kurir::store::{EndpointSlot, Store};
use kurir::wake::{Channel, Wake};

use crate::on_both_backends;
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, TestDb};

on_both_backends!(
    a_delivery_is_born_claimed_when_its_process_has_room_and_pending_when_not,
    a_born_claim_is_swept_claimed_again_and_cancelled_as_a_claimed_one,
    a_delivery_born_claimed_after_a_change_to_its_endpoint_carries_the_change,
);

/// A dispatcher that has read the endpoints (one step; nothing is due yet), not running: its
/// lanes send, but nothing records the outcomes.
async fn dispatcher(store: &Store, config: DeliveryConfig, owner: &str) -> Arc<Dispatcher> {
    let dispatcher = Arc::new(Dispatcher::new(store.clone(), config, owner.to_owned()));
    dispatcher.step().await.unwrap();
    dispatcher
}

/// One relay batch, with `dispatcher`'s room for born claims.
async fn relay(store: &Store, dispatcher: &Dispatcher) -> kurir::store::RelayOutcome {
    let downstream = Downstream {
        wake: Wake::new(Channel::Deliveries),
        births: Some(dispatcher.births()),
    };
    step_into(store, 100, &downstream, &Metrics::new())
        .await
        .unwrap()
}

/// Each of `event_ids`' delivery to `endpoint`: its status, attempt count and lease owner.
async fn states(
    store: &Store,
    endpoint: &Endpoint,
    event_ids: &[String],
) -> Vec<(DeliveryStatus, u32, Option<String>)> {
    let mut out = Vec::new();
    for id in event_ids {
        let deliveries = store.deliveries_for_event(id).await.unwrap();
        let d = deliveries
            .iter()
            .find(|d| d.endpoint_id == endpoint.id.as_str())
            .unwrap();
        out.push((d.status, d.attempt_count, lease_owner(store, d.id).await));
    }
    out
}

async fn lease_owner(store: &Store, delivery_id: i64) -> Option<String> {
    let sql = "SELECT CAST(lease_owner AS CHAR(255)) FROM kurir_deliveries WHERE id = $1";
    let owner: Option<Option<String>> = match store {
        Store::Postgres(pg) => sqlx::query_scalar(&sql.replace("CHAR(255)", "TEXT"))
            .bind(delivery_id)
            .fetch_optional(pg.pool())
            .await
            .unwrap(),
        Store::Sqlite(sq) => {
            sqlx::query_scalar(&sql.replace("$1", "?").replace("CHAR(255)", "TEXT"))
                .bind(delivery_id)
                .fetch_optional(sq.pool())
                .await
                .unwrap()
        }
        Store::Mysql(my) => sqlx::query_scalar(&sql.replace("$1", "?").replace("(255)", ""))
            .bind(delivery_id)
            .fetch_optional(my.pool())
            .await
            .unwrap(),
    };
    owner.flatten()
}

fn slot(e: &Endpoint, limit: u32) -> EndpointSlot {
    EndpointSlot {
        endpoint: Arc::new(e.clone()),
        limit,
        lease: Duration::from_secs(60),
    }
}

async fn a_delivery_is_born_claimed_when_its_process_has_room_and_pending_when_not(db: TestDb) {
    let s = &db.store;
    let rx = Receiver::holding().await;
    let mut plain = NewEndpoint::new(rx.url("/plain"));
    // A fresh lane takes one round of `max_in_flight`: two of the five events.
    plain.max_in_flight = Some(2);
    let plain = s.create_endpoint(plain).await.unwrap();
    let mut ordered = NewEndpoint::new(rx.url("/ordered"));
    ordered.ordering = Ordering::Aggregate;
    let ordered = s.create_endpoint(ordered).await.unwrap();
    let mut limited = NewEndpoint::new(rx.url("/limited"));
    limited.rate_limit_per_second = Some(1000);
    let limited = s.create_endpoint(limited).await.unwrap();
    let d = dispatcher(s, test_delivery_config(), "born-owner").await;

    let ids = enqueue_events(s, "order.paid", 5).await;
    let outcome = relay(s, &d).await;
    assert_eq!((outcome.events, outcome.deliveries), (5, 15));

    let born = (DeliveryStatus::Processing, 1, Some("born-owner".to_owned()));
    let pending = (DeliveryStatus::Pending, 0, None);
    assert_eq!(
        states(s, &plain, &ids).await,
        [
            born.clone(),
            born,
            pending.clone(),
            pending.clone(),
            pending.clone()
        ],
        "the first two are born claimed to the relaying process, the rest wait for a claim"
    );
    for (name, e) in [("ordered", &ordered), ("rate-limited", &limited)] {
        assert!(
            states(s, e, &ids).await.iter().all(|st| *st == pending),
            "a claim alone takes a delivery to an {name} endpoint"
        );
    }
    // Handed to the lanes: both requests are on their way without a claim.
    rx.wait_until("the two born deliveries sent", |r, _| {
        r.iter().filter(|r| r.path == "/plain").count() == 2
    })
    .await;
    let sent: Vec<String> = rx
        .requests_to("/plain")
        .iter()
        .map(|r| r.event_id())
        .collect();
    assert_eq!(sent.len(), 2);
    assert!(sent.contains(&ids[0]) && sent.contains(&ids[1]));

    // A claim by another process takes the pending ones and leaves the born ones alone.
    let claim = s
        .claim_due_deliveries("other", &[slot(&plain, 10)], 10)
        .await
        .unwrap();
    let mut claimed: Vec<&str> = claim
        .deliveries
        .iter()
        .map(|c| c.event.event_id.as_str())
        .collect();
    claimed.sort_unstable();
    let mut rest: Vec<&str> = ids[2..].iter().map(String::as_str).collect();
    rest.sort_unstable();
    assert_eq!(claimed, rest);
    rx.release(1_000);
}

/// A born claim whose process stops before recording its attempt: the lease sweep takes it back
/// (its attempt counted), another process claims it as attempt 2; and an endpoint's deletion
/// cancels a born claim as it cancels a claimed one.
async fn a_born_claim_is_swept_claimed_again_and_cancelled_as_a_claimed_one(db: TestDb) {
    let s = &db.store;
    let rx = Receiver::holding().await;
    let mut quick = NewEndpoint::new(rx.url("/quick"));
    // A lease of 100 ms + 4 × (50 + 50) ms: the dispatcher is never run, so its attempt (timed
    // out against the held receiver) is never recorded.
    quick.overrides.connect_timeout_ms = Some(50);
    quick.overrides.request_timeout_ms = Some(50);
    let quick = s.create_endpoint(quick).await.unwrap();
    let doomed = s
        .create_endpoint(NewEndpoint::new(rx.url("/doomed")))
        .await
        .unwrap();
    let config = DeliveryConfig {
        lease_margin: Duration::from_millis(100),
        ..test_delivery_config()
    };
    let d = dispatcher(s, config, "dies").await;
    let ids = enqueue_events(s, "order.paid", 1).await;
    relay(s, &d).await;
    let born = (DeliveryStatus::Processing, 1, Some("dies".to_owned()));
    assert_eq!(states(s, &quick, &ids).await, std::slice::from_ref(&born));
    assert_eq!(states(s, &doomed, &ids).await, [born]);

    assert!(s.delete_endpoint(&doomed.id).await.unwrap());
    let (status, _, _) = states(s, &doomed, &ids).await.remove(0);
    assert_eq!(status, DeliveryStatus::Cancelled);

    let swept = eventually("the born lease to expire and be swept", || async {
        let r = s
            .sweep_expired_leases(&test_delivery_config().retry)
            .await
            .unwrap();
        (r.total() > 0).then_some(r)
    })
    .await;
    assert_eq!((swept.retried, swept.dead_lettered), (1, 0));
    let claimed = eventually("the retry to come due and be claimed", || async {
        let claim = s
            .claim_due_deliveries("other", &[slot(&quick, 1)], 1)
            .await
            .unwrap();
        claim.deliveries.into_iter().next()
    })
    .await;
    assert_eq!(
        (claimed.event.event_id.as_str(), claimed.attempt),
        (ids[0].as_str(), 2)
    );
    rx.release(1_000);
}

/// A relay batch offers born claims with the endpoints as it read them itself: a change that
/// committed before the batch (here a rotation, after the dispatcher last stepped) is in the
/// born delivery, which is signed with the new secret and, during the grace period, the old
/// one. (Born claims once used the dispatcher's copy, and such an endpoint's deliveries were
/// inserted pending until the dispatcher had read it again.)
async fn a_delivery_born_claimed_after_a_change_to_its_endpoint_carries_the_change(db: TestDb) {
    let s = &db.store;
    let rx = Receiver::holding().await;
    let e = s
        .create_endpoint(NewEndpoint::new(rx.url("/rotated")))
        .await
        .unwrap();
    let d = dispatcher(s, test_delivery_config(), "fresh").await;
    let new_secret = kurir_core::secret::Secret::generate();
    s.rotate_secret(&e.id, new_secret, Duration::from_secs(3600))
        .await
        .unwrap()
        .unwrap();
    let ids = enqueue_events(s, "order.paid", 1).await;
    relay(s, &d).await;
    assert_eq!(
        states(s, &e, &ids).await,
        [(DeliveryStatus::Processing, 1, Some("fresh".to_owned()))]
    );
    rx.wait_for(1).await;
    let signature = rx.requests()[0].header("webhook-signature").to_owned();
    assert_eq!(
        signature.split(' ').count(),
        2,
        "signed with the current and the rotated-out secret: {signature}"
    );
    rx.release(1_000);
}
