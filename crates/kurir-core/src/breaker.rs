//! The circuit breaker of one endpoint: when to stop sending to it, when to try one probe, when
//! to send again, and when it has failed long enough to be disabled.
//!
//! [`Circuit`] is the state every kurir process shares through the database; [`Circuit::record`]
//! moves it on for one attempt's [`Health`], [`Circuit::take_probe`] lets exactly one process
//! probe a circuit whose cool-down is over. Pure arithmetic on an injected `now`; storing the
//! circuit, and skipping an open endpoint's deliveries, belong to kurir's store and dispatcher.
//!
//! | from | to | when |
//! |---|---|---|
//! | closed | open | with fewer than [`WINDOW_MIN_ATTEMPTS`] attempts in the last [`WINDOW`]: [`BreakerPolicy::failure_threshold`] failures in a row; with at least that many: at least half of them failed |
//! | open | half-open | the cool-down is over and a process takes the probe |
//! | half-open | closed | the probe did not fail |
//! | half-open | open | the probe failed; the cool-down doubles, up to [`MAX_COOLDOWN`] |

//!
//! Failures in a row decide only while the window holds few attempts (a partner with little
//! traffic, or one that just started failing): at a high rate, a partner failing a third of
//! requests at random fails five in a row every second by chance, which says nothing about
//! whether it is down. Once the window holds enough attempts, the failure ratio decides.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// The window of the failure-ratio rule.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The fewest attempts in [`WINDOW`] for the failure-ratio rule to open a circuit.
pub const WINDOW_MIN_ATTEMPTS: f64 = 20.0;
/// The longest cool-down, however often the circuit re-opened.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(600);

/// When a circuit opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Failures in a row that open a closed circuit; 0 turns the breaker off (it never opens).
    pub failure_threshold: u32,
    /// How long the circuit stays open the first time; each re-open from half-open doubles it,
    /// up to [`MAX_COOLDOWN`].
    pub cooldown: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cooldown: Duration::from_secs(30),
        }
    }
}

impl BreakerPolicy {
    /// The cool-down after the circuit re-opened `reopens` times in a row without closing.
    pub fn cooldown_after(&self, reopens: u32) -> Duration {
        2u32.checked_pow(reopens)
            .and_then(|f| self.cooldown.checked_mul(f))
            .map_or(MAX_COOLDOWN, |c| c.min(MAX_COOLDOWN))
            .max(self.cooldown.min(MAX_COOLDOWN))
    }
}

/// What one attempt says about the endpoint's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// It answered: 2xx, and also 4xx and 429, which are the request's or the rate's business,
    /// not an outage.
    Answered,
    /// A timeout, a connection error or a 5xx.
    Failed,
}

/// The three states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Deliveries flow.
    Closed,
    /// Nothing is sent until the cool-down is over.
    Open,
    /// One probe is (or may be) in flight; nothing else is sent.
    HalfOpen,
}

impl State {
    /// `closed`, `open` or `half_open`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }

    /// The state named by [`State::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "closed" => Some(Self::Closed),
            "open" => Some(Self::Open),
            "half_open" => Some(Self::HalfOpen),
            _ => None,
        }
    }

    /// The gauge value: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> i64 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
        }
    }
}

/// Attempts and failures in the last [`WINDOW`], as a sliding-window counter: the current
/// window's counts plus the previous window's, weighted by how much of it still overlaps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Start of the current window.
    pub started_at: DateTime<Utc>,
    /// Attempts in the current window.
    pub attempts: u32,
    /// Failures in the current window.
    pub failures: u32,
    /// Attempts in the window before.
    pub previous_attempts: u32,
    /// Failures in the window before.
    pub previous_failures: u32,
}

impl Window {
    /// An empty window starting at `now`.
    pub fn empty(now: DateTime<Utc>) -> Self {
        Self {
            started_at: now,
            attempts: 0,
            failures: 0,
            previous_attempts: 0,
            previous_failures: 0,
        }
    }

    fn roll(&mut self, now: DateTime<Utc>) {
        let width = delta(WINDOW);
        if now >= self.started_at + width + width {
            *self = Self::empty(now);
        } else if now >= self.started_at + width {
            self.previous_attempts = self.attempts;
            self.previous_failures = self.failures;
            self.attempts = 0;
            self.failures = 0;
            self.started_at += width;
        }
    }

    /// Estimated attempts and failures in the [`WINDOW`] before `now`.
    pub fn estimate(&self, now: DateTime<Utc>) -> (f64, f64) {
        let mut w = *self;
        w.roll(now);
        let into = (now - w.started_at).to_std().unwrap_or_default();
        let weight = 1.0 - (into.as_secs_f64() / WINDOW.as_secs_f64()).clamp(0.0, 1.0);
        (
            f64::from(w.attempts) + f64::from(w.previous_attempts) * weight,
            f64::from(w.failures) + f64::from(w.previous_failures) * weight,
        )
    }

    /// Whether no failure is counted.
    pub fn is_clean(&self) -> bool {
        self.failures == 0 && self.previous_failures == 0
    }
}

/// One endpoint's circuit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Circuit {
    /// Its state.
    pub state: State,
    /// When it entered that state.
    pub since: DateTime<Utc>,
    /// Failed attempts since the last one that did not fail.
    pub consecutive_failures: u32,
    /// Re-opens from half-open since it last closed (the cool-down doubles with each).
    pub reopens: u32,
    /// When open: when a probe may be taken.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// When half-open: until when the probe taken is the only one (past it, another process
    /// may take the probe, the first having died).
    pub probe_until: Option<DateTime<Utc>>,
    /// The first failure since the last attempt that did not fail (auto-disable counts from it).
    pub failing_since: Option<DateTime<Utc>>,
    /// The failure-ratio window.
    pub window: Window,
}

/// Why an operator's action on a circuit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The circuit is closed: deliveries flow, there is nothing to probe or close.
    Closed,
    /// A probe is under way (half-open, its time not up): its outcome decides.
    ProbeUnderway,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Closed => "the circuit is closed: deliveries flow already",
            Self::ProbeUnderway => {
                "a probe is under way: its outcome closes or re-opens the circuit"
            }
        })
    }
}

/// A change of state, to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// The counts that made it, as they were at that moment (not after the attempts recorded
    /// with it in the same batch).
    pub counts: Counts,
}

/// What a circuit had counted when it changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Attempts in the last [`WINDOW`] (estimated, rounded).
    pub window_attempts: u32,
    /// Of which failed.
    pub window_failures: u32,
}

impl Circuit {
    /// A closed circuit with nothing counted.
    pub fn closed(now: DateTime<Utc>) -> Self {
        Self {
            state: State::Closed,
            since: now,
            consecutive_failures: 0,
            reopens: 0,
            next_probe_at: None,
            probe_until: None,
            failing_since: None,
            window: Window::empty(now),
        }
    }

    /// Whether recording only [`Health::Answered`] attempts would leave it as it is but for
    /// the success counts of a window that holds no failure.
    pub fn is_clean(&self) -> bool {
        self.state == State::Closed && self.consecutive_failures == 0 && self.window.is_clean()
    }

    /// Whether a process may send this endpoint anything but a probe.
    pub fn lets_through(&self) -> bool {
        self.state == State::Closed
    }

    /// Whether a probe may be taken at `now`: open with its cool-down over, or half-open with
    /// the last probe's time up.
    pub fn probe_due(&self, now: DateTime<Utc>) -> bool {
        match self.state {
            State::Closed => false,
            State::Open => self.next_probe_at.is_none_or(|at| at <= now),
            State::HalfOpen => self.probe_until.is_none_or(|at| at <= now),
        }
    }

    /// Takes the probe (half-open from `now`, the only probe until `now + lease`), if one is due.
    pub fn take_probe(&mut self, now: DateTime<Utc>, lease: Duration) -> Option<Transition> {
        if !self.probe_due(now) {
            return None;
        }
        let from = self.state;
        self.state = State::HalfOpen;
        self.since = now;
        self.next_probe_at = None;
        self.probe_until = Some(now + delta(lease));
        Some(Transition {
            from,
            to: State::HalfOpen,
            counts: self.counts(now),
        })
    }

    /// Counts one attempt, started at `started_at` and recorded at `now`. In half-open, only an
    /// attempt started since the probe was taken is the probe; older ones (in flight when the
    /// circuit opened) are counted, but move nothing.
    pub fn record(
        &mut self,
        policy: &BreakerPolicy,
        health: Health,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<Transition> {
        let failed = health == Health::Failed;
        if failed {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            self.failing_since.get_or_insert(started_at);
        } else {
            self.consecutive_failures = 0;
            self.failing_since = None;
        }
        match self.state {
            State::Closed => {
                self.window.roll(now);
                self.window.attempts = self.window.attempts.saturating_add(1);
                self.window.failures = self.window.failures.saturating_add(u32::from(failed));
                (failed && self.trips(policy, now)).then(|| self.open(policy, now))
            }
            State::HalfOpen if started_at >= self.since => Some(if failed {
                self.reopens = self.reopens.saturating_add(1);
                self.open(policy, now)
            } else {
                self.close(now)
            }),
            State::Open | State::HalfOpen => None,
        }
    }

    /// An operator's "probe now": an open circuit's cool-down ends at `now`, so the next claim
    /// takes the probe. Refused (`Err`, saying why) when there is nothing to bring forward: the
    /// circuit is closed, or a probe is already under way.
    pub fn probe_now(&mut self, now: DateTime<Utc>) -> Result<(), Refusal> {
        match self.state {
            State::Closed => Err(Refusal::Closed),
            State::HalfOpen if !self.probe_due(now) => Err(Refusal::ProbeUnderway),
            State::Open | State::HalfOpen => {
                self.state = State::Open;
                self.next_probe_at = Some(now);
                self.probe_until = None;
                Ok(())
            }
        }
    }

    /// An operator's "close circuit": closed from `now` with nothing counted, as after a probe
    /// that succeeded. Refused (`Err`) when it is closed already.
    pub fn close_now(&mut self, now: DateTime<Utc>) -> Result<Transition, Refusal> {
        if self.state == State::Closed {
            return Err(Refusal::Closed);
        }
        Ok(self.close(now))
    }

    /// Whether `policy` turns the breaker off.
    pub fn is_off(policy: &BreakerPolicy) -> bool {
        policy.failure_threshold == 0
    }

    /// Whether it has failed, with no attempt that did not fail, for at least `after`.
    pub fn failing_for(&self, after: Duration, now: DateTime<Utc>) -> bool {
        self.failing_since
            .is_some_and(|since| now - since >= delta(after))
    }

    fn trips(&self, policy: &BreakerPolicy, now: DateTime<Utc>) -> bool {
        if policy.failure_threshold == 0 {
            return false;
        }
        let (attempts, failures) = self.window.estimate(now);
        if attempts >= WINDOW_MIN_ATTEMPTS {
            failures * 2.0 >= attempts
        } else {
            self.consecutive_failures >= policy.failure_threshold
        }
    }

    /// What it has counted at `now`.
    pub fn counts(&self, now: DateTime<Utc>) -> Counts {
        let (attempts, failures) = self.window.estimate(now);
        Counts {
            consecutive_failures: self.consecutive_failures,
            window_attempts: attempts.round() as u32,
            window_failures: failures.round() as u32,
        }
    }

    fn open(&mut self, policy: &BreakerPolicy, now: DateTime<Utc>) -> Transition {
        let counts = self.counts(now);
        let from = self.state;
        self.state = State::Open;
        self.since = now;
        self.next_probe_at = Some(now + delta(policy.cooldown_after(self.reopens)));
        self.probe_until = None;
        self.window = Window::empty(now);
        Transition {
            from,
            to: State::Open,
            counts,
        }
    }

    fn close(&mut self, now: DateTime<Utc>) -> Transition {
        let counts = self.counts(now);
        let from = self.state;
        *self = Self::closed(now);
        Transition {
            from,
            to: State::Closed,
            counts,
        }
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partner failing 30 % of requests in a fixed pattern that holds a run of six failures
    /// in every hundred: at any rate, the ratio (under half) keeps the circuit closed.
    fn noisy(n: usize) -> bool {
        let i = n % 100;
        (40..46).contains(&i) || (!(36..50).contains(&i) && matches!(i % 10, 2 | 5 | 8))
    }

    fn run(fails: impl Fn(usize) -> bool, attempts: usize, every: TimeDelta) -> Vec<Transition> {
        let policy = BreakerPolicy::default();
        let mut now = DateTime::<Utc>::UNIX_EPOCH;
        let mut c = Circuit::closed(now);
        let mut moved = Vec::new();
        for n in 0..attempts {
            now += every;
            let health = if fails(n) {
                Health::Failed
            } else {
                Health::Answered
            };
            // As the dispatcher does: answers to a clean circuit are not counted.
            if health == Health::Answered && c.is_clean() {
                continue;
            }
            moved.extend(c.record(&policy, health, now, now));
            if c.state != State::Closed {
                break;
            }
        }
        moved
    }

    #[test]
    fn a_noisy_partner_with_runs_of_failures_keeps_its_circuit_closed_at_a_high_rate() {
        let share = (0..1000).filter(|&n| noisy(n)).count();
        assert!((280..=320).contains(&share), "{share} failures in 1000");
        assert_eq!(run(noisy, 6000, TimeDelta::milliseconds(2)), vec![]);
    }

    #[test]
    fn a_partner_failing_everything_opens_after_the_threshold_and_logs_what_tripped_it() {
        let moved = run(|_| true, 100, TimeDelta::milliseconds(2));
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].to, State::Open);
        assert_eq!(moved[0].counts.consecutive_failures, 5);
        assert_eq!(moved[0].counts.window_failures, 5);
    }

    #[test]
    fn a_partner_failing_most_requests_opens_on_the_ratio() {
        // Two failures in every three: never five in a row.
        let moved = run(|n| n % 3 != 0, 1000, TimeDelta::milliseconds(2));
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert!(moved[0].counts.window_attempts >= WINDOW_MIN_ATTEMPTS as u32);
        assert!(moved[0].counts.window_failures * 2 >= moved[0].counts.window_attempts);
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn opened() -> Circuit {
        let policy = BreakerPolicy {
            failure_threshold: 1,
            cooldown: Duration::from_secs(30),
        };
        let mut c = Circuit::closed(at(0));
        c.record(&policy, Health::Failed, at(1), at(1));
        assert_eq!(c.state, State::Open);
        c
    }

    #[test]
    fn probe_now_ends_the_cooldown_of_an_open_circuit_only() {
        let mut c = opened();
        assert!(!c.probe_due(at(2)));
        c.probe_now(at(2)).unwrap();
        assert!(c.probe_due(at(2)), "the next claim may take the probe");
        c.take_probe(at(3), Duration::from_secs(10)).unwrap();
        assert_eq!(c.probe_now(at(4)), Err(Refusal::ProbeUnderway));
        assert!(
            c.probe_now(at(20)).is_ok(),
            "a probe whose time is up may be re-taken"
        );
        assert_eq!(
            Circuit::closed(at(0)).probe_now(at(1)),
            Err(Refusal::Closed)
        );
    }

    #[test]
    fn close_now_forgets_what_was_counted() {
        let mut c = opened();
        let t = c.close_now(at(5)).unwrap();
        assert_eq!((t.from, t.to), (State::Open, State::Closed));
        assert_eq!(c, Circuit::closed(at(5)));
        assert_eq!(c.close_now(at(6)), Err(Refusal::Closed));
    }
}
