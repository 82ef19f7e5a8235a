//! The circuit breaker under arbitrary sequences of attempts and probes: it only moves along
//! the edges, a half-open circuit hands out one probe per lease, and an open circuit's
//! cool-down stays between the configured one and ten minutes.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use kurir_core::breaker::{State, Transition, MAX_COOLDOWN};
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
            if c.state == State::Closed {
                prop_assert!(c.consecutive_failures < threshold);
            }
            if let Op::Attempt { failed: false, .. } = op {
                prop_assert_eq!(c.consecutive_failures, 0);
            }
        }
    }
}
