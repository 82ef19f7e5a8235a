//! Store conformance of the shared circuit breakers (`store::breaker`), on both backends: a
//! circuit round-trips, writes are compare-and-set, racing updates all land, one probe is handed
//! out however many processes ask, and an endpoint failing too long is disabled.

use std::sync::Arc;
use std::time::Duration;

use kurir::endpoint::NewEndpoint;
use kurir_core::breaker::State;
use kurir_core::{BreakerPolicy, Circuit, Health};

use crate::on_both_backends;
use crate::support::TestDb;

on_both_backends!(
    a_circuit_round_trips_and_its_writes_are_compare_and_set,
    racing_circuit_updates_all_land,
    one_probe_is_taken_however_many_ask,
    an_endpoint_failing_too_long_is_disabled_with_its_reason,
);

fn policy() -> BreakerPolicy {
    BreakerPolicy {
        failure_threshold: 2,
        cooldown: Duration::from_millis(1),
    }
}

async fn a_circuit_round_trips_and_its_writes_are_compare_and_set(db: TestDb) {
    let s = &db.store;
    assert_eq!(s.circuit("ep_1").await.unwrap(), None);
    let now = db.store.clock().now_millis();
    let mut c = Circuit::closed(now);
    c.record(&policy(), Health::Failed, now, now);
    c.record(&policy(), Health::Failed, now, now);
    assert_eq!(c.state, State::Open);
    assert!(s.save_circuit("ep_1", &c, None).await.unwrap());
    assert!(
        !s.save_circuit("ep_1", &c, None).await.unwrap(),
        "a second insert loses"
    );
    let stored = s.circuit("ep_1").await.unwrap().unwrap();
    assert_eq!(stored.circuit, c);
    assert_eq!(stored.version, 1);
    assert!(
        !s.save_circuit("ep_1", &c, Some(0)).await.unwrap(),
        "a stale version loses"
    );
    assert!(s.save_circuit("ep_1", &c, Some(1)).await.unwrap());
    let all = s.circuits().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].endpoint_id.as_str(), all[0].version), ("ep_1", 2));
}

async fn racing_circuit_updates_all_land(db: TestDb) {
    let s = Arc::new(db.store.clone());
    let big = BreakerPolicy {
        failure_threshold: 1000,
        ..policy()
    };
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    let now = s.clock().now_millis();
                    s.update_circuit("ep_race", |c| {
                        c.record(&big, Health::Failed, now, now);
                        Some(())
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let c = s.circuit("ep_race").await.unwrap().unwrap().circuit;
    assert_eq!(c.consecutive_failures, 24, "no update lost");
}

async fn one_probe_is_taken_however_many_ask(db: TestDb) {
    let s = Arc::new(db.store.clone());
    let now = db.store.clock().now_millis();
    let mut c = Circuit::closed(now);
    c.record(&policy(), Health::Failed, now, now);
    c.record(&policy(), Health::Failed, now, now);
    c.next_probe_at = Some(now - chrono::TimeDelta::milliseconds(1));
    s.save_circuit("ep_probe", &c, None).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                let (_, took) = s
                    .update_circuit("ep_probe", |c| {
                        c.take_probe(s.clock().now_millis(), Duration::from_secs(60))
                    })
                    .await
                    .unwrap();
                took.is_some()
            })
        })
        .collect();
    let mut taken = 0;
    for t in tasks {
        taken += usize::from(t.await.unwrap());
    }
    assert_eq!(taken, 1);
    let c = s.circuit("ep_probe").await.unwrap().unwrap().circuit;
    assert_eq!(c.state, State::HalfOpen);
}

async fn an_endpoint_failing_too_long_is_disabled_with_its_reason(db: TestDb) {
    let s = &db.store;
    let e = s
        .create_endpoint(NewEndpoint::new("https://example.com/hook"))
        .await
        .unwrap();
    assert!(s
        .disable_failing_endpoint(&e.id, "failing since x")
        .await
        .unwrap());
    assert!(
        !s.disable_failing_endpoint(&e.id, "again").await.unwrap(),
        "already disabled"
    );
    let e = s.get_endpoint(&e.id).await.unwrap().unwrap();
    assert!(!e.enabled);
    assert_eq!(e.disabled_reason.as_deref(), Some("failing since x"));
}
