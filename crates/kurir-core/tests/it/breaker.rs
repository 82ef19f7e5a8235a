//! The circuit breaker under arbitrary sequences of attempts and probes: it only moves along
//! the edges, a half-open circuit hands out one probe per lease, and an open circuit's
//! cool-down stays between the configured one and ten minutes.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use kurir_core::breaker::{State, Transition, MAX_COOLDOWN, WINDOW_MIN_ATTEMPTS};
use kurir_core::{BreakerPolicy, Circuit, Health};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// An attempt that started `ago_ms` before it was recorded.
    Attempt {
        failed: bool,
        ago_ms: u32,
    },
    Probe,
}

fn op() -> impl Strategy<Value = (u32, Op)> {
    let attempt =
        (any::<bool>(), 0u32..3_000).prop_map(|(failed, ago_ms)| Op::Attempt { failed, ago_ms });
    (0u32..5_000, prop_oneof![3 => attempt, 1 => Just(Op::Probe)])
}

fn allowed(t: Transition, op: &Op) -> bool {
    matches!(
        (t.from, t.to, op),
        (State::Closed, State::Open, Op::Attempt { failed: true, .. })
            | (State::Open | State::HalfOpen, State::HalfOpen, Op::Probe)
            | (
                State::HalfOpen,
                State::Open,
                Op::Attempt { failed: true, .. }
            )
            | (
                State::HalfOpen,
                State::Closed,
                Op::Attempt { failed: false, .. }
            )
    )
}

proptest! {
    #[test]
    fn the_breaker_moves_only_along_its_edges(
        threshold in 1u32..8,
        cooldown_ms in 1u64..20_000,
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let policy = BreakerPolicy { failure_threshold: threshold, cooldown: Duration::from_millis(cooldown_ms) };
        let lease = Duration::from_millis(1_500);
        let mut now: DateTime<Utc> = "2026-06-11T08:00:00Z".parse().unwrap();
        let mut c = Circuit::closed(now);
        let mut last_probe: Option<DateTime<Utc>> = None;
        for (step_ms, op) in ops {
            now += TimeDelta::milliseconds(i64::from(step_ms));
            let before = c;
            let t = match op {
                Op::Attempt { failed, ago_ms } => {
                    let health = if failed { Health::Failed } else { Health::Answered };
                    let started = now - TimeDelta::milliseconds(i64::from(ago_ms));
                    c.record(&policy, health, started, now)
                }
                Op::Probe => c.take_probe(now, lease),
            };
            match t {
                Some(t) => {
                    prop_assert!(allowed(t, &op), "{t:?} on {op:?}");
                    prop_assert_eq!(t.from, before.state);
                    prop_assert_eq!(t.to, c.state);
                }
                None => prop_assert_eq!(before.state, c.state),
            }
            if let (Op::Probe, Some(_)) = (&op, t) {
                // Only one probe at a time: another within the lease only after the first ended.
                if let (Some(at), State::HalfOpen) = (last_probe, before.state) {
                    prop_assert!(now - at >= TimeDelta::from_std(lease).unwrap());
                }
                last_probe = Some(now);
            }
            if c.state == State::Open {
                let wait = (c.next_probe_at.unwrap() - c.since).to_std().unwrap();
                prop_assert!(wait >= policy.cooldown.min(MAX_COOLDOWN) && wait <= MAX_COOLDOWN);
            }
            if c.state == State::Closed && matches!(op, Op::Attempt { .. }) {
                // Failures in a row decide only while the window holds few attempts (as
                // counted when the attempt was).
                let (attempts, _) = c.window.estimate(now);
                prop_assert!(c.consecutive_failures < threshold || attempts >= WINDOW_MIN_ATTEMPTS);
            }
            if let Op::Attempt { failed: false, .. } = op {
                prop_assert_eq!(c.consecutive_failures, 0);
            }
        }
    }
}

// Each edge on its own, at the numbers.
fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
}

fn policy() -> BreakerPolicy {
    BreakerPolicy {
        failure_threshold: 3,
        cooldown: Duration::from_secs(10),
    }
}

#[test]
fn opens_after_the_threshold_of_failures_in_a_row() {
    let mut c = Circuit::closed(at(0));
    for i in 0..2 {
        assert_eq!(c.record(&policy(), Health::Failed, at(i), at(i)), None);
    }
    assert_eq!(c.record(&policy(), Health::Answered, at(3), at(3)), None);
    for i in 4..6 {
        assert_eq!(c.record(&policy(), Health::Failed, at(i), at(i)), None);
    }
    let t = c.record(&policy(), Health::Failed, at(6), at(6));
    assert_eq!(t.map(|t| t.to), Some(State::Open));
    assert_eq!(c.next_probe_at, Some(at(10_006)));
}

#[test]
fn opens_when_half_of_twenty_attempts_in_a_minute_failed() {
    let p = BreakerPolicy {
        failure_threshold: 100,
        ..policy()
    };
    let mut c = Circuit::closed(at(0));
    for i in 0..19 {
        let h = if i % 2 == 0 {
            Health::Failed
        } else {
            Health::Answered
        };
        assert_eq!(c.record(&p, h, at(i), at(i)), None, "attempt {i}");
    }
    assert_eq!(c.record(&p, Health::Answered, at(19), at(19)), None);
    let t = c.record(&p, Health::Failed, at(20), at(20));
    assert_eq!(t.map(|t| t.to), Some(State::Open));
}

#[test]
fn failures_older_than_the_window_do_not_count() {
    let p = BreakerPolicy {
        failure_threshold: 100,
        ..policy()
    };
    let mut c = Circuit::closed(at(0));
    for i in 0..15 {
        c.record(&p, Health::Failed, at(i), at(i));
        c.record(&p, Health::Answered, at(i), at(i));
    }
    assert_eq!(c.state, State::Open, "30 attempts, half failed");
    let mut c = Circuit::closed(at(0));
    for i in 0..10 {
        c.record(&p, Health::Failed, at(i), at(i));
        c.record(&p, Health::Answered, at(i), at(i));
    }
    let later = 125_000;
    assert_eq!(c.record(&p, Health::Failed, at(later), at(later)), None);
    assert_eq!(c.window.estimate(at(later)), (1.0, 1.0));
}

#[test]
fn one_probe_after_the_cooldown_closes_or_reopens_with_a_doubled_cooldown() {
    let mut c = Circuit::closed(at(0));
    for i in 0..3 {
        c.record(&policy(), Health::Failed, at(i), at(i));
    }
    assert!(!c.probe_due(at(5_000)));
    let lease = Duration::from_secs(1);
    assert_eq!(c.take_probe(at(5_000), lease), None);
    assert!(c.take_probe(at(10_002), lease).is_some());
    assert_eq!(c.take_probe(at(10_003), lease), None, "one probe at a time");
    // An attempt started before the probe is not the probe.
    assert_eq!(
        c.record(&policy(), Health::Answered, at(2), at(10_004)),
        None
    );
    let t = c.record(&policy(), Health::Failed, at(10_005), at(10_100));
    assert_eq!(
        t.map(|t| (t.from, t.to)),
        Some((State::HalfOpen, State::Open))
    );
    assert_eq!(c.next_probe_at, Some(at(30_100)), "cool-down doubled");
    assert!(c.take_probe(at(30_100), lease).is_some());
    let t = c.record(&policy(), Health::Answered, at(30_200), at(30_300));
    assert_eq!(t.map(|t| t.to), Some(State::Closed));
    assert!(c.is_clean());
    assert_eq!(c.reopens, 0);
}

#[test]
fn a_dead_probe_lets_another_process_probe_after_its_lease() {
    let mut c = Circuit::closed(at(0));
    for i in 0..3 {
        c.record(&policy(), Health::Failed, at(i), at(i));
    }
    let lease = Duration::from_secs(1);
    assert!(c.take_probe(at(10_002), lease).is_some());
    assert!(!c.probe_due(at(11_001)));
    assert!(c.take_probe(at(11_002), lease).is_some());
}

#[test]
fn the_cooldown_doubles_up_to_ten_minutes() {
    let p = BreakerPolicy::default();
    assert_eq!(p.cooldown_after(0), Duration::from_secs(30));
    assert_eq!(p.cooldown_after(1), Duration::from_secs(60));
    assert_eq!(p.cooldown_after(4), Duration::from_secs(480));
    assert_eq!(p.cooldown_after(5), MAX_COOLDOWN);
    assert_eq!(p.cooldown_after(u32::MAX), MAX_COOLDOWN);
}

#[test]
fn failing_for_counts_from_the_first_failure_after_an_answer() {
    let mut c = Circuit::closed(at(0));
    let day = 86_400_000;
    c.record(&policy(), Health::Failed, at(0), at(0));
    c.record(&policy(), Health::Failed, at(day), at(day));
    assert!(c.failing_for(Duration::from_secs(86_400), at(day)));
    c.record(&policy(), Health::Answered, at(day + 1), at(day + 1));
    assert!(!c.failing_for(Duration::ZERO, at(2 * day)));
}
