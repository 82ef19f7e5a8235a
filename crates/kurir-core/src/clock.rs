//! [`Clock`]: the one place kurir and kurir-receiver read the current time from.
//!
//! The rest of this crate never reads a clock (its functions take `now`); a service holds a
//! `Clock` and passes its readings in. That makes time a seam: a test supplies a clock it moves
//! ([`Clock::from_fn`]) instead of sleeping, and a process whose own clock is off corrects it
//! ([`Clock::correct_by`]) to the clock that every process sharing a database must agree on, the
//! database's (kurir measures the offset; see its `clock` module).

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

/// A source of the current time: the system clock or a function a test supplies, plus a
/// correction that every clone shares.
#[derive(Clone)]
pub struct Clock {
    source: Source,
    /// Added to each reading of the source, in microseconds.
    correction_us: Arc<AtomicI64>,
}

#[derive(Clone)]
enum Source {
    System,
    Fn(Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>),
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::with_source(Source::System)
    }

    /// A clock that always reads `at`.
    pub fn fixed(at: DateTime<Utc>) -> Clock {
        Clock::from_fn(move || at)
    }

    /// A clock that reads `now()`: a test can move it between requests.
    pub fn from_fn(now: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Clock {
        Clock::with_source(Source::Fn(Arc::new(now)))
    }

    fn with_source(source: Source) -> Clock {
        Clock {
            source,
            correction_us: Arc::default(),
        }
    }

    /// The current time by this clock: its source's reading plus its correction.
    pub fn now(&self) -> DateTime<Utc> {
        let read = self.uncorrected();
        read.checked_add_signed(self.correction()).unwrap_or(read)
    }

    /// [`Clock::now`] truncated to milliseconds, the precision every database kurir uses keeps.
    pub fn now_millis(&self) -> DateTime<Utc> {
        let now = self.now();
        DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
    }

    /// The source's reading, without the correction: what a correction is measured against.
    pub fn uncorrected(&self) -> DateTime<Utc> {
        match &self.source {
            Source::System => Utc::now(),
            Source::Fn(now) => now(),
        }
    }

    /// Whether the source is the system clock (not a test's function).
    pub fn reads_the_system(&self) -> bool {
        matches!(self.source, Source::System)
    }

    /// Adds `correction` to every reading from now on, of this clock and every clone of it,
    /// replacing the one set before.
    pub fn correct_by(&self, correction: TimeDelta) {
        let us = correction.num_microseconds().unwrap_or(0);
        self.correction_us.store(us, Ordering::Relaxed);
    }

    /// What is added to every reading of the source (zero until [`Clock::correct_by`]).
    pub fn correction(&self) -> TimeDelta {
        TimeDelta::microseconds(self.correction_us.load(Ordering::Relaxed))
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self.source {
            Source::System => "system",
            Source::Fn(_) => "function",
        };
        f.debug_struct("Clock")
            .field("source", &source)
            .field("correction", &self.correction())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn a_correction_applies_to_every_clone() {
        let clock = Clock::fixed(at("2026-06-11T08:15:30.123456Z"));
        let clone = clock.clone();
        clock.correct_by(TimeDelta::seconds(-30));
        assert_eq!(clone.now(), at("2026-06-11T08:15:00.123456Z"));
        assert_eq!(clone.now_millis(), at("2026-06-11T08:15:00.123Z"));
        assert_eq!(clone.uncorrected(), at("2026-06-11T08:15:30.123456Z"));
        assert_eq!(clone.correction(), TimeDelta::seconds(-30));
        assert!(!clone.reads_the_system());
    }

    #[test]
    fn the_system_clock_reads_the_system() {
        let clock = Clock::system();
        assert!(clock.reads_the_system());
        let (before, read) = (Utc::now(), clock.now());
        assert!(read >= before && read - before < TimeDelta::seconds(5));
    }
}
