//! Leases that end without a recorded attempt: an expired lease (the worker died; the attempt
//! may have been made) counts as an attempt, backs off and dead-letters at the maximum; a
//! delivery handed back unattempted (it could not start within its lease, or the process is
//! shutting down) is not charged. An outcome that arrives after the sweep or the release took
//! its lease is still recorded, unless the delivery was claimed again since.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kurir::config::DeliveryConfig;
use kurir::delivery::{ClaimedDelivery, Completion, DeliveryStatus, NextState, Trigger};
use kurir::endpoint::{Endpoint, EventFilter, NewEndpoint};
use kurir::store::{EndpointSlot, ReplayFilter, ReplayRequest, Requeued, Store};
use kurir_core::retry::RetryPolicy;

use crate::on_both_backends;
use crate::support::dispatcher::Process;
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, TestDb};

on_both_backends!(
    a_crash_loop_never_takes_a_delivery_past_its_maximum,
    an_expired_lease_backs_off_as_the_policy_says_with_the_process_default_maximum,
    a_delivery_that_cannot_start_within_its_lease_is_handed_back_not_sent_late,
    deliveries_waiting_in_their_lanes_at_shutdown_are_handed_back_not_sent,
    an_attempt_ending_long_after_shutdown_began_is_still_recorded,
    an_outcome_arriving_after_the_sweep_or_the_release_took_its_lease_is_recorded,
    an_outcome_arriving_after_its_delivery_was_claimed_again_stays_fenced_out,
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
/// leaves it, and waits for the sweep to take it back. Returns a time just before the sweep
/// that took it; `None` when nothing was claimable.
async fn crash(store: &Store, e: &Endpoint) -> Option<DateTime<Utc>> {
    let claimed = store
        .claim_due_deliveries("doomed", &[slot(e, Duration::ZERO)], 1)
        .await
        .unwrap()
        .deliveries;
    if claimed.is_empty() {
        return None;
    }
    let swept_after = eventually("the expired lease to be swept", || async {
        let before = Utc::now();
        let swept = store.sweep_expired_leases(&quick_retries()).await.unwrap();
        (swept.total() == 1).then_some(before)
    })
    .await;
    Some(swept_after)
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
        let Some(swept_after) = crash(s, &e).await else {
            break;
        };
        crashes += 1;
        // Backed off: not due at once, but soon. Judged against the sweep's own time, since a
        // loaded machine may take longer than the backoff to read the row back. The first
        // backoff is 20 ms, the next ones longer; a millisecond goes to rounding.
        let d = &s.deliveries_for_event(&ids[0]).await.unwrap()[0];
        if d.status == DeliveryStatus::Failed {
            assert!(
                d.available_at >= swept_after + chrono::Duration::milliseconds(19),
                "the sweep applies the backoff"
            );
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
        // Made due by hand with its first `available_at`, the delivery lies before where the
        // first claim stopped: on PostgreSQL it is taken by the next claim from the start, at
        // most a second later (`store/postgres/cursors.rs`).
        eventually("the delivery to be claimed", || async {
            let slots = [slot(&e, Duration::ZERO)];
            let claim = s.claim_due_deliveries("doomed", &slots, 1).await.unwrap();
            (!claim.deliveries.is_empty()).then_some(())
        })
        .await;
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
                Store::Mysql(my) => sqlx::query(sql).execute(my.pool()).await.map(|_| ()),
            }
            .unwrap();
        } else {
            assert_eq!(swept.dead_lettered, 1, "the default maximum of 2");
            assert_eq!(d.status, DeliveryStatus::DeadLetter);
        }
    }
}

fn subscribed(url: String, filter: &str) -> NewEndpoint {
    let mut e = NewEndpoint::new(url);
    e.event_types = EventFilter::parse(vec![filter.to_owned()]).unwrap();
    e
}

/// Publishes one event of `event_type` and fans it out.
async fn publish(store: &Store, event_type: &str) -> String {
    let id = enqueue_events(store, event_type, 1).await.remove(0);
    store.relay_batch(10).await.unwrap();
    id
}

/// The lease owner and expiry of `event_id`'s delivery, when it is leased.
async fn lease_of(store: &Store, event_id: &str) -> Option<(String, DateTime<Utc>)> {
    let sql = "SELECT lease_owner, lease_expires_at FROM kurir_deliveries \
               WHERE event_id = $1 AND status = 'processing'";
    match store {
        Store::Postgres(pg) => sqlx::query_as(sql)
            .bind(event_id)
            .fetch_optional(pg.pool())
            .await
            .unwrap(),
        Store::Sqlite(sq) => {
            let row: Option<(String, String)> = sqlx::query_as(&sql.replace('$', "?"))
                .bind(event_id)
                .fetch_optional(sq.pool())
                .await
                .unwrap();
            row.map(|(owner, at)| (owner, kurir::store::parse_sqlite_ts(&at).unwrap()))
        }
        Store::Mysql(my) => sqlx::query_as(
            &sql.replace("$1", "?")
                .replace("lease_owner,", "CAST(lease_owner AS CHAR),"),
        )
        .bind(event_id)
        .fetch_optional(my.pool())
        .await
        .unwrap(),
    }
}

/// Whether the database's clock (the one leases expire by) has passed `at`.
async fn database_clock_passed(store: &Store, at: DateTime<Utc>) -> bool {
    match store {
        Store::Postgres(pg) => sqlx::query_scalar("SELECT now() > $1")
            .bind(at)
            .fetch_one(pg.pool())
            .await
            .unwrap(),
        // SQLite's leases are stamped by this process's clock.
        Store::Sqlite(_) => store.clock().now_millis() > at,
        Store::Mysql(my) => sqlx::query_scalar("SELECT UTC_TIMESTAMP(3) > ?")
            .bind(at.naive_utc())
            .fetch_one(my.pool())
            .await
            .unwrap(),
    }
}

/// Delivery settings for the lane tests: one request at a time in all, short lease margins.
fn one_slot() -> DeliveryConfig {
    DeliveryConfig {
        max_concurrency: 1,
        lease_margin: Duration::from_millis(200),
        retry: quick_retries(),
        ..test_delivery_config()
    }
}

/// Issue 11, item 3: a claimed delivery waiting in its lane for a slot held by another
/// endpoint's slow request outlived its lease; another process's sweep made it due, another
/// process sent it, and the first sent it too when the slot came free.
async fn a_delivery_that_cannot_start_within_its_lease_is_handed_back_not_sent_late(db: TestDb) {
    let held = Receiver::holding().await;
    let fast = Receiver::ok().await;
    let mut slow = subscribed(held.url("/slow"), "slow.*");
    slow.overrides.request_timeout_ms = Some(60_000);
    db.store.create_endpoint(slow).await.unwrap();
    // One second per attempt: a lease of 0.2 s + 4 × 1 s.
    let mut quick = subscribed(fast.url("/fast"), "fast.*");
    quick.overrides.connect_timeout_ms = Some(300);
    quick.overrides.request_timeout_ms = Some(700);
    db.store.create_endpoint(quick).await.unwrap();

    let first = Process::start(&db.store, one_slot(), "first");
    publish(&db.store, "slow.call").await;
    first.wake.notify_one();
    held.wait_until("the slow request to hold the only slot", |_, open| {
        open == 1
    })
    .await;
    let waiting = publish(&db.store, "fast.call").await;
    first.wake.notify_one();
    let (owner, expires) = eventually("the first process to lease it", || async {
        lease_of(&db.store, &waiting).await
    })
    .await;
    assert_eq!(owner, "first");
    eventually("its lease to run out", || async {
        database_clock_passed(&db.store, expires)
            .await
            .then_some(())
    })
    .await;
    // Another process's sweep, and that process with slots to spare.
    db.store
        .sweep_expired_leases(&quick_retries())
        .await
        .unwrap();
    let second = Process::start(&db.store, test_delivery_config(), "second");
    second.wake.notify_one();
    held.release(1);
    eventually("the waiting delivery to be sent", || async {
        let d = &db.store.deliveries_for_event(&waiting).await.unwrap()[0];
        (d.status == DeliveryStatus::Sent).then_some(())
    })
    .await;
    let handed_back = first.handed_back("lease");
    first.stop().await;
    second.stop().await;
    assert!(handed_back >= 1.0, "the first process gave it back in time");

    assert_eq!(fast.requests().len(), 1, "sent once, by one process");
    let d = &db.store.deliveries_for_event(&waiting).await.unwrap()[0];
    assert_eq!(d.attempt_count, 1, "giving it back cost no attempt");
}

/// Issue 11, items 3 and 7: at shutdown, deliveries waiting in their lanes were all sent (the
/// drain), which made shutdown as long as the backlog it held. They go back, uncharged.
async fn deliveries_waiting_in_their_lanes_at_shutdown_are_handed_back_not_sent(db: TestDb) {
    let held = Receiver::holding().await;
    let fast = Receiver::ok().await;
    db.store
        .create_endpoint(subscribed(held.url("/slow"), "slow.*"))
        .await
        .unwrap();
    db.store
        .create_endpoint(subscribed(fast.url("/fast"), "fast.*"))
        .await
        .unwrap();
    // The slow request must outlast the test's steps however loaded the machine is.
    let config = DeliveryConfig {
        request_timeout: Duration::from_secs(120),
        ..one_slot()
    };
    let process = Process::start(&db.store, config, "only");
    let in_flight = publish(&db.store, "slow.call").await;
    process.wake.notify_one();
    held.wait_until("the slow request to hold the only slot", |_, open| {
        open == 1
    })
    .await;
    let waiting = enqueue_events(&db.store, "fast.call", 3).await;
    db.store.relay_batch(10).await.unwrap();
    process.wake.notify_one();
    for id in &waiting {
        eventually("the waiting deliveries to be leased", || async {
            lease_of(&db.store, id).await
        })
        .await;
    }
    // Shutdown begins while the slot is still held, so nothing waiting could start; the slow
    // request is let go only once shutdown has handed the waiting ones back.
    process.shutdown.cancel();
    eventually("shutdown to hand the waiting deliveries back", || async {
        (process.handed_back("shutdown") >= 3.0).then_some(())
    })
    .await;
    held.release(1);
    let handed_back = process.handed_back("shutdown");
    process.stop().await;
    assert_eq!(handed_back, 3.0);

    assert!(fast.requests().is_empty(), "nothing waiting was sent");
    for id in &waiting {
        let d = &db.store.deliveries_for_event(id).await.unwrap()[0];
        assert_eq!((d.status, d.attempt_count), (DeliveryStatus::Pending, 0));
    }
    let d = &db.store.deliveries_for_event(&in_flight).await.unwrap()[0];
    assert_eq!(
        d.status,
        DeliveryStatus::Sent,
        "the request in flight finished"
    );
}

/// The recording patience at shutdown bounds waiting for an unavailable database only: a
/// request still running past it (here 5.5 s after shutdown began, another attempt having been
/// recorded meanwhile) is recorded like any other.
async fn an_attempt_ending_long_after_shutdown_began_is_still_recorded(db: TestDb) {
    let held = Receiver::holding().await;
    let mut slow = NewEndpoint::new(held.url("/slow"));
    slow.overrides.request_timeout_ms = Some(60_000);
    db.store.create_endpoint(slow).await.unwrap();
    let ids = enqueue_events(&db.store, "order.paid", 2).await;
    db.store.relay_batch(10).await.unwrap();
    let process = Process::start(&db.store, test_delivery_config(), "only");
    process.wake.notify_one();
    held.wait_until("both requests in flight", |_, open| open == 2)
        .await;
    let began = tokio::time::Instant::now();
    let stopping = tokio::spawn(process.stop());
    held.release(1);
    eventually("the first attempt to be recorded", || async {
        let mut sent = 0;
        for id in &ids {
            let d = &db.store.deliveries_for_event(id).await.unwrap()[0];
            sent += usize::from(d.status == DeliveryStatus::Sent);
        }
        (sent == 1).then_some(())
    })
    .await;
    let patience = kurir::dispatch::record::SHUTDOWN_RECORDING_PATIENCE;
    eventually("the recording patience to pass", || async {
        (began.elapsed() > patience + Duration::from_millis(500)).then_some(())
    })
    .await;
    held.release(1);
    stopping.await.unwrap();
    for id in &ids {
        let d = &db.store.deliveries_for_event(id).await.unwrap()[0];
        assert_eq!(d.status, DeliveryStatus::Sent, "recorded before exit");
    }
}

/// Claims `e`'s due delivery for `owner`, leased for `lease`.
async fn claim_one(store: &Store, e: &Endpoint, owner: &str, lease: Duration) -> ClaimedDelivery {
    let mut claimed = store
        .claim_due_deliveries(owner, &[slot(e, lease)], 1)
        .await
        .unwrap()
        .deliveries;
    assert_eq!(claimed.len(), 1, "{owner} claims {}'s delivery", e.id);
    claimed.remove(0)
}

/// Waits until `e`'s delivery is due again (after the sweep's backoff), then claims it.
async fn claim_when_due(
    store: &Store,
    e: &Endpoint,
    owner: &str,
    lease: Duration,
) -> ClaimedDelivery {
    eventually("the delivery to be due again", || async {
        store
            .claim_due_deliveries(owner, &[slot(e, lease)], 1)
            .await
            .unwrap()
            .deliveries
            .pop()
    })
    .await
}

/// Sweeps until `n` expired leases in all were taken back (a lease of zero is over once the
/// database's clock has moved on, so they may be taken over several sweeps).
async fn sweep(store: &Store, n: u64) -> Requeued {
    let swept = std::cell::Cell::new(Requeued::default());
    let swept = eventually("the expired leases to be swept", || async {
        let r = store.sweep_expired_leases(&quick_retries()).await.unwrap();
        let mut all = swept.get();
        all.retried += r.retried;
        all.dead_lettered += r.dead_lettered;
        swept.set(all);
        (all.total() >= n).then_some(all)
    })
    .await;
    assert_eq!(swept.total(), n, "no other lease was swept");
    swept
}

/// What the writer reports for `d`: answered `code`, then `next`.
fn outcome(d: &ClaimedDelivery, code: u16, next: NextState) -> Completion {
    Completion {
        delivery_id: d.delivery_id,
        endpoint_id: d.endpoint.id.clone(),
        attempt: d.attempt,
        trigger: Trigger::Scheduled,
        started_at: Utc::now(),
        duration_ms: 7,
        status_code: Some(code),
        error: (code >= 300).then(|| format!("HTTP {code}").as_str().into()),
        response_body: None,
        next,
    }
}

/// Where `d`'s delivery stands: status, attempts, next due, last error, and the lease (owner
/// and expiry, as stored).
async fn state_of(
    store: &Store,
    d: &ClaimedDelivery,
) -> (
    DeliveryStatus,
    u32,
    DateTime<Utc>,
    Option<String>,
    (Option<String>, Option<String>),
) {
    let r = store
        .deliveries_for_event(&d.event.event_id)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == d.delivery_id)
        .expect("the delivery exists");
    let sql = "SELECT lease_owner, CAST(lease_expires_at AS TEXT) FROM kurir_deliveries \
               WHERE id = $1";
    let lease = match store {
        Store::Postgres(pg) => sqlx::query_as(sql)
            .bind(d.delivery_id)
            .fetch_one(pg.pool())
            .await
            .unwrap(),
        Store::Sqlite(sq) => sqlx::query_as(&sql.replace('$', "?"))
            .bind(d.delivery_id)
            .fetch_one(sq.pool())
            .await
            .unwrap(),
        Store::Mysql(my) => sqlx::query_as(
            "SELECT CAST(lease_owner AS CHAR), CAST(lease_expires_at AS CHAR) \
             FROM kurir_deliveries WHERE id = ?",
        )
        .bind(d.delivery_id)
        .fetch_one(my.pool())
        .await
        .unwrap(),
    };
    (
        r.status,
        r.attempt_count,
        r.available_at,
        r.last_error,
        lease,
    )
}

/// Issue 11, follow-up: with the database out of reach for longer than a lease, the completion
/// writer kept retrying while the leases ran out; back online, the sweep ran before the writer
/// and moved those deliveries to `failed` (or `dead_letter` at the maximum), then the fence
/// refused the writer's completions: deliveries the endpoint had answered 2xx were sent again
/// (`faults/database.rs` counted them). Moved only by the sweep or the shutdown release since
/// its claim, a delivery takes its outcome as if the lease were still held.
async fn an_outcome_arriving_after_the_sweep_or_the_release_took_its_lease_is_recorded(db: TestDb) {
    let s = &db.store;
    let retried = endpoint(s, None).await;
    let last = endpoint(s, Some(1)).await;
    let released = endpoint(s, None).await;
    let ids = enqueue_events(s, "order.paid", 1).await;
    s.relay_batch(10).await.unwrap();
    let a = claim_one(s, &retried, "w1", Duration::ZERO).await;
    let b = claim_one(s, &last, "w1", Duration::ZERO).await;
    let c = claim_one(s, &released, "w2", Duration::from_secs(60)).await;
    let swept = sweep(s, 2).await;
    assert_eq!((swept.retried, swept.dead_lettered), (1, 1));
    let released_at_shutdown = s.release_leases("w2", &quick_retries()).await.unwrap();
    assert_eq!(released_at_shutdown.total(), 1);
    let before = s.deliveries_for_event(&ids[0]).await.unwrap();
    let statuses: Vec<_> = before.iter().map(|d| d.status).collect();
    use DeliveryStatus::{DeadLetter, Failed, Sent};
    assert_eq!(statuses, [Failed, DeadLetter, Failed], "taken back first");

    let retry_at = Utc::now() + chrono::Duration::hours(1);
    let fenced = s
        .complete_deliveries("w1", &[outcome(&a, 200, NextState::Sent)])
        .await
        .unwrap()
        + s.complete_deliveries("w1", &[outcome(&b, 204, NextState::Sent)])
            .await
            .unwrap()
        + s.complete_deliveries("w2", &[outcome(&c, 503, NextState::Retry(retry_at))])
            .await
            .unwrap();
    assert_eq!(fenced, 0, "nobody claimed them since: none fenced out");

    let after = s.deliveries_for_event(&ids[0]).await.unwrap();
    let seen: Vec<_> = after
        .iter()
        .map(|d| (d.status, d.attempt_count, d.last_status_code))
        .collect();
    assert_eq!(
        seen,
        [
            (Sent, 1, Some(200)),
            (Sent, 1, Some(204)),
            (Failed, 1, Some(503))
        ],
        "each outcome recorded as its attempt, which the sweep or release already counted"
    );
    for d in &after[..2] {
        assert!(d.sent_at.is_some() && d.last_error.is_none(), "{d:?}");
    }
    let c_now = &after[2];
    assert_eq!(c_now.last_error.as_deref(), Some("HTTP 503"));
    assert!(
        (c_now.available_at - retry_at).num_milliseconds().abs() <= 1,
        "due when the outcome says ({retry_at}), not after the release's backoff ({})",
        c_now.available_at
    );
    for d in &after {
        let attempts = s.attempts_for_delivery(d.id).await.unwrap();
        assert_eq!(
            attempts.len(),
            1,
            "one attempt on record for {}",
            d.endpoint_id
        );
    }
    for d in [&a, &b, &c] {
        assert_eq!(state_of(s, d).await.4, (None, None), "no lease left");
    }
    let all = [
        slot(&retried, Duration::from_secs(60)),
        slot(&last, Duration::from_secs(60)),
    ];
    let again = s.claim_due_deliveries("w3", &all, 10).await.unwrap();
    assert!(
        again.deliveries.is_empty(),
        "the sent ones are never sent again"
    );
}

/// The other side of the rule above: a delivery claimed again since the sweep, by any process,
/// keeps the newer lease's state, and the old outcome is fenced out (its attempt is still on
/// record). Owner and attempt number are both needed: the same owner may have claimed it again
/// (the attempt number moved on), and after a replay another owner's lease can carry the same
/// attempt number.
async fn an_outcome_arriving_after_its_delivery_was_claimed_again_stays_fenced_out(db: TestDb) {
    let s = &db.store;
    let retried = endpoint(s, None).await;
    let once = endpoint(s, Some(1)).await;
    publish(s, "order.paid").await;

    // Claimed again by the same owner: swept, claimed, swept again.
    let stale = claim_one(s, &retried, "w1", Duration::ZERO).await;
    let late_once = claim_one(s, &once, "w1", Duration::ZERO).await;
    sweep(s, 2).await;
    let again = claim_when_due(s, &retried, "w1", Duration::ZERO).await;
    assert_eq!(again.attempt, 2);
    sweep(s, 1).await;
    let was = state_of(s, &stale).await;
    let fenced = s
        .complete_deliveries("w1", &[outcome(&stale, 200, NextState::Sent)])
        .await
        .unwrap();
    assert_eq!(fenced, 1, "attempt 1's outcome after attempt 2 began");
    assert_eq!(
        state_of(s, &stale).await,
        was,
        "left as the newer lease left it"
    );

    // Replayed from `dead_letter` and claimed by another owner: the same attempt number.
    s.replay(&ReplayRequest {
        filter: ReplayFilter {
            endpoint_id: Some(once.id.to_string()),
            ..ReplayFilter::default()
        },
        actor: "admin".into(),
        via: kurir::access::Via::Api,
        reason: "test".into(),
    })
    .await
    .unwrap();
    let newer = claim_one(s, &once, "w2", Duration::from_secs(60)).await;
    assert_eq!(newer.attempt, late_once.attempt);
    for taken_back in [false, true] {
        if taken_back {
            s.release_leases("w2", &quick_retries()).await.unwrap();
        }
        let was = state_of(s, &newer).await;
        let fenced = s
            .complete_deliveries("w1", &[outcome(&late_once, 200, NextState::Sent)])
            .await
            .unwrap();
        assert_eq!(
            fenced, 1,
            "w1's outcome on w2's lease (released: {taken_back})"
        );
        assert_eq!(state_of(s, &newer).await, was);
    }
    let attempts = s.attempts_for_delivery(stale.delivery_id).await.unwrap();
    assert_eq!(attempts.len(), 1, "the late attempt is still on record");
}
