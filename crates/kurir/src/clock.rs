//! Time in kurir comes from one place: the store's [`Clock`] ([`Store::clock`]), which the
//! dispatcher, the circuit breakers, the rate limits, retention, secret rotation, dashboard
//! sessions and the API's time-dependent answers all read. A test hands the store a clock it
//! moves ([`Store::with_clock`]) instead of sleeping.
//!
//! The rule: **every time that the database or another process compares is taken from one
//! clock, the database's, or corrected by the offset measured against it.** A statement that
//! compares with the database's `now()` also writes with it (leases, claims, the lease sweep).
//! A time kurir computes in the process (a retry's `available_at`, a circuit breaker's next
//! probe, a rate-limit bucket, a rotated-out secret's expiry, a tombstone) is read from the
//! store's clock, which `kurir serve` corrects ([`Follower`]): it measures how far the process's
//! clock is from the database's at start, before any worker runs, and every
//! [`RESYNC_INTERVAL`] after. A process more than [`WARN_OFFSET`] off says so at start (a WARN
//! line with the offset) and always in `kurir_clock_offset_seconds`. On SQLite the database's
//! clock is the process's: there is nothing to measure.
//!
//! Waits and deadlines within one process (poll intervals, a claimed delivery's lease deadline
//! as the process keeps it, request timeouts, durations) use the monotonic clock
//! (`tokio::time::Instant`): no other process compares them, and a step of the wall clock must
//! neither stretch nor cut them.

use std::time::Duration;

use chrono::TimeDelta;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use kurir_core::Clock;

use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

/// How often a running `kurir serve` measures its clock against the database's again.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(60);

/// A process whose clock is further than this from the database's says so.
pub const WARN_OFFSET: Duration = Duration::from_secs(1);

/// Readings per measurement: the one with the shortest round trip is kept.
const SAMPLES: usize = 5;

/// How far this process's clock was from the database's at one measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offset {
    /// How far the process's clock is ahead of the database's (negative: behind).
    pub ahead: TimeDelta,
    /// The round trip of the reading it came from: the offset is exact to half of it.
    pub round_trip: Duration,
}

impl Offset {
    /// The offset in seconds, as the metric and the log show it.
    pub fn seconds(&self) -> f64 {
        self.ahead.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
    }

    /// Whether it is more than [`WARN_OFFSET`].
    pub fn is_notable(&self) -> bool {
        self.ahead.abs().to_std().unwrap_or(Duration::MAX) > WARN_OFFSET
    }
}

/// Measures how far `store`'s clock (uncorrected) is from the database's: [`SAMPLES`] readings
/// of the database's clock, each timed by the process's; the one with the shortest round trip
/// is kept, taken as read halfway through it. `None` on SQLite, whose clock is the process's.
pub async fn measure(store: &Store) -> Result<Option<Offset>, StoreError> {
    let clock = store.clock();
    let mut best: Option<Offset> = None;
    for _ in 0..SAMPLES {
        let (sent, local) = (Instant::now(), clock.uncorrected());
        let Some(database) = store.database_time().await? else {
            return Ok(None);
        };
        let round_trip = sent.elapsed();
        let midway = local + TimeDelta::from_std(round_trip / 2).unwrap_or_default();
        let offset = Offset {
            ahead: midway - database,
            round_trip,
        };
        if best.is_none_or(|b| offset.round_trip < b.round_trip) {
            best = Some(offset);
        }
    }
    Ok(best)
}

/// Keeps a store's clock on the database's: measures the offset and corrects the clock by it,
/// then measures again every [`RESYNC_INTERVAL`]. Only a clock that reads the system is
/// corrected: a test's clock is the time the test means.
pub struct Follower {
    store: Store,
    metrics: Option<Metrics>,
    /// Whether the last measurement was more than [`WARN_OFFSET`] off.
    notable: bool,
}

impl Follower {
    /// A follower of `store`'s clock, showing the offset in `metrics` when given.
    pub fn new(store: Store, metrics: Option<Metrics>) -> Self {
        Self {
            store,
            metrics,
            notable: false,
        }
    }

    /// Measures once and corrects the clock; a measurement that fails is logged and leaves the
    /// clock as it was. Logs at WARN when the offset becomes more than [`WARN_OFFSET`]: at
    /// start, or when the process's clock is stepped later.
    pub async fn correct(&mut self) {
        if let Some(m) = &self.metrics {
            m.set_clock_offset(-self.store.clock().correction());
        }
        if !self.store.clock().reads_the_system() {
            return;
        }
        let offset = match measure(&self.store).await {
            Ok(Some(offset)) => offset,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the database's clock; this process's time is corrected as before");
                return;
            }
        };
        self.store.clock().correct_by(-offset.ahead);
        if let Some(m) = &self.metrics {
            m.set_clock_offset(offset.ahead);
        }
        self.log(offset);
    }

    fn log(&mut self, offset: Offset) {
        let seconds = (offset.seconds() * 1000.0).round() / 1000.0;
        let round_trip_ms = offset.round_trip.as_millis() as u64;
        if offset.is_notable() && !self.notable {
            tracing::warn!(
                offset_seconds = seconds,
                round_trip_ms,
                "this process's clock is more than a second off the database's (positive: \
                 ahead); every time kurir shares with the database and other processes is \
                 corrected by this offset, but the machine's clock should be kept in time (NTP)"
            );
        } else if !offset.is_notable() && self.notable {
            tracing::info!(
                offset_seconds = seconds,
                round_trip_ms,
                "this process's clock is within a second of the database's again"
            );
        } else {
            tracing::debug!(
                offset_seconds = seconds,
                round_trip_ms,
                "clock offset measured"
            );
        }
        self.notable = offset.is_notable();
    }

    /// Corrects the clock every [`RESYNC_INTERVAL`] until `shutdown` (the first correction is
    /// [`Follower::correct`], made before the workers start).
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RESYNC_INTERVAL) => self.correct().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_over_a_second_is_notable_either_way() {
        let offset = |ms| Offset {
            ahead: TimeDelta::milliseconds(ms),
            round_trip: Duration::from_millis(1),
        };
        assert!(!offset(999).is_notable() && !offset(-1000).is_notable());
        assert!(offset(1001).is_notable() && offset(-30_000).is_notable());
        assert_eq!(offset(-30_002).seconds(), -30.002);
    }

    #[tokio::test]
    async fn sqlite_has_no_offset_to_measure() {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        assert_eq!(measure(&store).await.unwrap(), None);
        let mut follower = Follower::new(store.clone(), Some(Metrics::new()));
        follower.correct().await;
        assert_eq!(store.clock().correction(), TimeDelta::zero());
        assert!(follower
            .metrics
            .unwrap()
            .render()
            .contains("kurir_clock_offset_seconds 0\n"));
    }
}
