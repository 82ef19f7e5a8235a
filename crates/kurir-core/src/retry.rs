//! When to try a failed delivery again, and when to give up: [`RetryPolicy`] turns the outcome of a
//! failed attempt into [`Next`], and [`parse_retry_after`] reads the header that can lengthen the
//! backoff.
//!
//! Pure arithmetic on an injected `now`; scheduling and recording attempts belong to the dispatcher.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use rand::Rng;

/// Exponential backoff with jitter, a cap and a maximum number of attempts.
///
/// The delay after failed attempt `n` is `min(max_delay, initial_delay · 2^(n−1))`, then moved by up to
/// ±`jitter` of itself, then capped at `max_delay` again (so jitter can shorten a capped delay but never
/// lengthen it past the cap). The defaults are the seed's: 2 s, 300 s, 10 attempts, 0.2, which gives
/// `min(300 s, 2^n s)` ± 20 %.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failed attempt.
    pub initial_delay: Duration,
    /// No delay is longer than this, Retry-After included.
    pub max_delay: Duration,
    /// Attempts in all, the first included; the delivery is dead-lettered when attempt number
    /// `max_attempts` fails.
    pub max_attempts: u32,
    /// Fraction of the delay, in `[0, 1]`, by which it is randomly moved either way.
    pub jitter: f64,
}

/// What a failed attempt ended with, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Any failure: non-2xx status, timeout, connection error.
    Failed,
    /// A failure whose response asked to wait this long (`429`/`503` with `Retry-After`).
    FailedRetryAfter(Duration),
    /// `410 Gone`: the endpoint wants no more deliveries.
    Gone,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again at this time.
    Retry(DateTime<Utc>),
    /// Give up and move the delivery to the dead letters.
    DeadLetter,
}

/// Why a [`RetryPolicy`] cannot be used, e.g. one read from configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidRetryPolicy {
    /// `max_attempts` is 0; at least the first attempt must be allowed.
    #[error("max_attempts must be at least 1")]
    NoAttempts,
    /// `initial_delay` is longer than `max_delay`.
    #[error("initial_delay ({initial_delay:?}) is longer than max_delay ({max_delay:?})")]
    InitialAboveMax {
        /// The configured initial delay.
        initial_delay: Duration,
        /// The configured cap.
        max_delay: Duration,
    },
    /// `jitter` is not a number in `[0, 1]`.
    #[error("jitter must be between 0 and 1, got {0}")]
    JitterOutOfRange(f64),
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            initial_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(300),
            max_attempts: 10,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// Checks the policy makes sense; for policies built from configuration.
    pub fn validate(&self) -> Result<(), InvalidRetryPolicy> {
        if self.max_attempts == 0 {
            return Err(InvalidRetryPolicy::NoAttempts);
        }
        if self.initial_delay > self.max_delay {
            return Err(InvalidRetryPolicy::InitialAboveMax {
                initial_delay: self.initial_delay,
                max_delay: self.max_delay,
            });
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(InvalidRetryPolicy::JitterOutOfRange(self.jitter));
        }
        Ok(())
    }

    /// What to do after attempt number `attempt` (1-based) failed with `outcome`, drawing the jitter
    /// from the thread's random number generator.
    pub fn next(&self, attempt: u32, outcome: &AttemptOutcome, now: DateTime<Utc>) -> Next {
        let sample = rand::thread_rng().gen_range(-1.0..=1.0);
        self.next_with_jitter(attempt, outcome, now, sample)
    }

    /// Like [`RetryPolicy::next`] with the jitter given: `jitter_sample` in `[-1, 1]` (clamped) scales
    /// the ±`jitter` fraction. Dead-letters when `attempt >= max_attempts` or the outcome is
    /// [`AttemptOutcome::Gone`]. A Retry-After delay can lengthen the wait, never shorten it: the
    /// next attempt waits `max(backoff, Retry-After)`, capped at `max_delay` (so `Retry-After: 0`
    /// or a date in the past cannot make a receiver burn every attempt at once).
    pub fn next_with_jitter(
        &self,
        attempt: u32,
        outcome: &AttemptOutcome,
        now: DateTime<Utc>,
        jitter_sample: f64,
    ) -> Next {
        if attempt >= self.max_attempts {
            return Next::DeadLetter;
        }
        let delay = match *outcome {
            AttemptOutcome::Gone => return Next::DeadLetter,
            AttemptOutcome::FailedRetryAfter(retry_after) => self
                .jittered(self.backoff(attempt), jitter_sample)
                .max(retry_after)
                .min(self.max_delay),
            AttemptOutcome::Failed => self.jittered(self.backoff(attempt), jitter_sample),
        };
        Next::Retry(add_saturating(now, delay))
    }

    /// The delay after failed attempt `attempt`, without jitter: `min(max_delay,
    /// initial_delay · 2^(attempt−1))`, saturating for any attempt number (0 counts as 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1);
        2u32.checked_pow(doublings)
            .and_then(|factor| self.initial_delay.checked_mul(factor))
            .map_or(self.max_delay, |delay| delay.min(self.max_delay))
    }

    /// `delay` moved by `jitter · sample` of itself, capped at `max_delay`.
    fn jittered(&self, delay: Duration, sample: f64) -> Duration {
        let factor = 1.0 + clamp_or_zero(self.jitter, 0.0, 1.0) * clamp_or_zero(sample, -1.0, 1.0);
        // Near Duration::MAX the product may not fit; anything that large is past the cap anyway.
        Duration::try_from_secs_f64(delay.as_secs_f64() * factor)
            .map_or(self.max_delay, |delay| delay.min(self.max_delay))
    }
}

/// `x` clamped to `[low, high]`, with NaN read as 0 (no jitter).
fn clamp_or_zero(x: f64, low: f64, high: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(low, high)
    }
}

/// `now + delay`, or the latest representable time if that overflows.
fn add_saturating(now: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(delay)
        .ok()
        .and_then(|delta| now.checked_add_signed(delta))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Parses a `Retry-After` header value: delta-seconds, or an HTTP-date taken relative to `now` (a
/// date in the past means no wait). Accepts the IMF-fixdate form (`Wed, 21 Oct 2015 07:28:00 GMT`) and
/// the two obsolete forms HTTP recipients must still read (RFC 850 and asctime). `None` for anything
/// else.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits but beyond u64: a wait longer than any cap, so saturate.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let date = parse_http_date(value)?;
    Some(
        date.signed_duration_since(now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// An HTTP-date in any of its three forms (RFC 9110 §5.6.7), always UTC.
fn parse_http_date(value: &str) -> Option<DateTime<Utc>> {
    const OBSOLETE_FORMATS: [&str; 2] = [
        "%A, %d-%b-%y %H:%M:%S GMT", // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        "%a %b %e %H:%M:%S %Y",      // asctime: Sun Nov  6 08:49:37 1994
    ];
    if let Ok(date) = DateTime::parse_from_rfc2822(value) {
        return Some(date.to_utc());
    }
    OBSOLETE_FORMATS
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(value, format).ok())
        .map(|naive| naive.and_utc())
}
