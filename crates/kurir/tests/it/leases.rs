//! Leases that end without a recorded attempt: an expired lease (the worker died; the attempt
//! may have been made) counts as an attempt, backs off and dead-letters at the maximum; a
//! delivery handed back unattempted is not charged.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use kurir::delivery::DeliveryStatus;
use kurir::endpoint::{Endpoint, NewEndpoint};
use kurir::store::{EndpointSlot, Store};
use kurir_core::retry::RetryPolicy;

use crate::on_both_backends;
use crate::support::{enqueue_events, eventually, TestDb};

on_both_backends!(
    a_crash_loop_never_takes_a_delivery_past_its_maximum,
    an_expired_lease_backs_off_as_the_policy_says_with_the_process_default_maximum,
);

fn slot(e: &Endpoint, lease: Duration) -> EndpointSlot {
    EndpointSlot {
        endpoint: Arc::new(e.clone()),
        limit: 1,
        lease,
    }
}

async fn endpoint(store: &Store, max_attempts: Option<u32>) -> Endpoint {
    let mut new = NewEndpoint::new("https://partner.example/hooks");
    new.overrides.retry_max_attempts = max_attempts;
    store.create_endpoint(new).await.unwrap()
}

/// Ten attempts, 20 ms apart at first, without jitter.
fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        max_attempts: 10,
        jitter: 0.0,
    }
}

/// Claims `e`'s delivery with a lease that is over at once, as a worker that dies mid-attempt
/// leaves it, and waits for the sweep to take it back. `false` when nothing was claimable.
async fn crash(store: &Store, e: &Endpoint) -> bool {
    let claimed = store
        .claim_due_deliveries("doomed", &[slot(e, Duration::ZERO)], 1)
        .await
        .unwrap()
        .deliveries;
    if claimed.is_empty() {
        return false;
    }
    eventually("the expired lease to be swept", || async {
        (store
            .sweep_expired_leases(&quick_retries())
            .await
            .unwrap()
            .total()
            == 1)
            .then_some(())
    })
    .await;
    true
}

/// Issue 11, item 7: the sweep made every expired lease due again at once, whatever the
/// attempt count, so a crash loop took a delivery past its maximum.
async fn a_crash_loop_never_takes_a_delivery_past_its_maximum(db: TestDb) {
    let s = &db.store;
    let e = endpoint(s, Some(3)).await;
    let ids = enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(10).await.unwrap();
    let mut crashes = 0;
    for _ in 0..6 {
        if !crash(s, &e).await {
            break;
        }
        crashes += 1;
        // Backed off: not due at once, but soon.
        let d = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
        if d.status == DeliveryStatus::Failed {
            assert!(d.available_at > Utc::now(), "the sweep applies the backoff");
            eventually("the backoff to pass", || async {
                let d = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
                (d.available_at <= Utc::now()).then_some(())
            })
            .await;
        }
    }
    let d = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!(
        (crashes, d.status, d.attempt_count),
        (3, DeliveryStatus::DeadLetter, 3),
        "the endpoint's maximum of 3 holds"
    );
    assert!(d
        .last_error
        .as_deref()
        .unwrap_or("")
        .contains("lease expired"));
}

/// The sweep's delay is the retry policy's after that attempt (here without jitter), and an
/// endpoint without overrides gets the process's defaults.
async fn an_expired_lease_backs_off_as_the_policy_says_with_the_process_default_maximum(
    db: TestDb,
) {
    let s = &db.store;
    let e = endpoint(s, None).await;
    let ids = enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(10).await.unwrap();
    let defaults = RetryPolicy {
        initial_delay: Duration::from_secs(3600),
        max_delay: Duration::from_secs(5 * 3600),
        max_attempts: 2,
        jitter: 0.0,
    };
    for attempt in 1..=2u32 {
        s.claim_due_deliveries("doomed", &[slot(&e, Duration::ZERO)], 1)
            .await
            .unwrap();
        let before = Utc::now();
        let swept = eventually("the expired lease to be swept", || async {
            let r = s.sweep_expired_leases(&defaults).await.unwrap();
            (r.total() == 1).then_some(r)
        })
        .await;
        let d = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
        assert_eq!(d.attempt_count, attempt);
        if attempt == 1 {
            assert_eq!(swept.retried, 1);
            let delay = d.available_at - before;
            let want = chrono::Duration::from_std(defaults.backoff(1)).unwrap();
            assert!(
                (delay - want).num_seconds().abs() <= 5,
                "{delay} after the first attempt, the policy says {want}"
            );
            // Due now, so the next crash can happen.
            let sql = "UPDATE kurir_deliveries SET available_at = created_at";
            match s {
                Store::Postgres(pg) => sqlx::query(sql).execute(pg.pool()).await.map(|_| ()),
                Store::Sqlite(sq) => sqlx::query(sql).execute(sq.pool()).await.map(|_| ()),
            }
            .unwrap();
        } else {
            assert_eq!(swept.dead_lettered, 1, "the default maximum of 2");
            assert_eq!(d.status, DeliveryStatus::DeadLetter);
        }
    }
}
