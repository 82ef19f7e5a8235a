//! An endpoint's rate limit as one shared [`Bucket`]: how many requests may be taken now, given
//! back when not used, and lowered for a while by a `429`.
//!
//! The bucket is the generic cell rate algorithm (GCRA): one timestamp, the theoretical arrival
//! time (`tat`) of the next request at the effective rate, which may run ahead of `now` by at
//! most the burst. Any window of length `w` then holds at most `burst + w · rate` requests; with
//! the burst at half a second's worth, a second holds at most 1.5 × the rate and a minute
//! 60.5 ×. Pure arithmetic on an injected `now`; kurir keeps the bucket in its database so
//! every process takes from the same one.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// How long a `429` lowers the effective rate.
pub const THROTTLE_PERIOD: Duration = Duration::from_secs(60);
/// The most halvings of the rate that `429`s in a row can impose.
pub const MAX_HALVINGS: u32 = 4;

/// One endpoint's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// When the next request is due at the effective rate (may lie in the past).
    pub tat: DateTime<Utc>,
    /// How many times the rate is halved, while `throttled_until` lies ahead.
    pub halvings: u32,
    /// Until when the halvings apply.
    pub throttled_until: Option<DateTime<Utc>>,
}

impl Bucket {
    /// A full bucket.
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            tat: now,
            halvings: 0,
            throttled_until: None,
        }
    }

    /// The requests per second allowed at `now`: `per_second`, halved once per `429` in a row
    /// (at most [`MAX_HALVINGS`] times, never below one a second) until the throttle ends.
    pub fn rate(&self, per_second: u32, now: DateTime<Utc>) -> f64 {
        let limit = f64::from(per_second.max(1));
        match self.throttled_until {
            Some(until) if until > now => {
                (limit / f64::from(1u32 << self.halvings.min(MAX_HALVINGS))).max(limit.min(1.0))
            }
            _ => limit,
        }
    }

    /// Takes up to `want` requests at `now` under a limit of `per_second`; returns how many.
    pub fn take(&mut self, per_second: u32, want: u32, now: DateTime<Utc>) -> u32 {
        let rate = self.rate(per_second, now);
        let interval = 1.0 / rate;
        let burst = (rate / 2.0).ceil().max(1.0);
        let tat = self.tat.max(now);
        let ahead = secs(tat - now);
        let room = ((burst * interval - ahead) / interval + 1e-9).floor();
        let taken = room.clamp(0.0, f64::from(want)) as u32;
        self.tat = tat + delta(f64::from(taken) * interval);
        taken
    }

    /// Gives back `n` requests taken and not used.
    pub fn give_back(&mut self, per_second: u32, n: u32, now: DateTime<Utc>) {
        let interval = 1.0 / self.rate(per_second, now);
        self.tat = (self.tat - delta(f64::from(n) * interval)).max(now);
    }

    /// A `429` at `now`: one more halving, for [`THROTTLE_PERIOD`] from now.
    pub fn throttled(&mut self, now: DateTime<Utc>) {
        let still = self.throttled_until.is_some_and(|until| until > now);
        self.halvings = if still {
            (self.halvings + 1).min(MAX_HALVINGS)
        } else {
            1
        };
        self.throttled_until = Some(now + delta(THROTTLE_PERIOD.as_secs_f64()));
    }
}

fn secs(d: TimeDelta) -> f64 {
    d.num_microseconds().map_or(f64::MAX, |us| us as f64 / 1e6)
}

fn delta(seconds: f64) -> TimeDelta {
    TimeDelta::microseconds((seconds * 1e6).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    #[test]
    fn a_full_bucket_gives_half_a_second_then_one_per_interval() {
        let mut b = Bucket::new(at(0));
        assert_eq!(b.take(20, 100, at(0)), 10);
        assert_eq!(b.take(20, 100, at(0)), 0);
        assert_eq!(b.take(20, 100, at(50)), 1);
        assert_eq!(b.take(20, 100, at(500)), 9);
    }

    #[test]
    fn given_back_requests_can_be_taken_again() {
        let mut b = Bucket::new(at(0));
        assert_eq!(b.take(20, 100, at(0)), 10);
        b.give_back(20, 4, at(0));
        assert_eq!(b.take(20, 100, at(0)), 4);
    }

    #[test]
    fn a_429_halves_the_rate_for_a_minute() {
        let mut b = Bucket::new(at(0));
        b.throttled(at(0));
        assert_eq!(b.rate(20, at(1)), 10.0);
        b.throttled(at(1));
        assert_eq!(b.rate(20, at(2)), 5.0);
        for _ in 0..10 {
            b.throttled(at(3));
        }
        assert_eq!(b.rate(20, at(4)), 1.25);
        assert_eq!(b.rate(20, at(60_003)), 20.0);
        b.throttled(at(70_000));
        assert_eq!(
            b.rate(20, at(70_001)),
            10.0,
            "a new throttle starts at one halving"
        );
        assert_eq!(b.rate(1, at(70_001)), 1.0, "never below one a second");
    }
}
