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
//! | closed | open | [`BreakerPolicy::failure_threshold`] failures in a row, or at least half of at least [`WINDOW_MIN_ATTEMPTS`] attempts in the last [`WINDOW`] failed |
//! | open | half-open | the cool-down is over and a process takes the probe |
//! | half-open | closed | the probe did not fail |
//! | half-open | open | the probe failed; the cool-down doubles, up to [`MAX_COOLDOWN`] |

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

/// A change of state, to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
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
        if self.consecutive_failures >= policy.failure_threshold {
            return true;
        }
        let (attempts, failures) = self.window.estimate(now);
        attempts >= WINDOW_MIN_ATTEMPTS && failures * 2.0 >= attempts
    }

    fn open(&mut self, policy: &BreakerPolicy, now: DateTime<Utc>) -> Transition {
        let from = self.state;
        self.state = State::Open;
        self.since = now;
        self.next_probe_at = Some(now + delta(policy.cooldown_after(self.reopens)));
        self.probe_until = None;
        self.window = Window::empty(now);
        Transition {
            from,
            to: State::Open,
        }
    }

    fn close(&mut self, now: DateTime<Utc>) -> Transition {
        let from = self.state;
        *self = Self::closed(now);
        Transition {
            from,
            to: State::Closed,
        }
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}
