//! Pauses of the whole process, and deadlines that do not count them.
//!
//! A process that is frozen (a stop signal, a VM pause, a neighbour's long GC that starves the
//! host) wakes with every timer in it overdue: a request that was answered during the freeze
//! would time out at once, before its connection is even read, and be charged to a partner that
//! did nothing wrong. So the timeouts of a request measure its own time: the time the process
//! ran while it was out. [`OwnDeadline`] is such a deadline.
//!
//! The pauses are measured by a watchdog thread (an OS thread, not a task: it stops only when
//! the whole process stops, not when the runtime is merely busy) that beats every [`BEAT`]; a
//! gap between two beats longer than [`STALL`] is counted as a pause. A pause still going on,
//! or just over before the watchdog beat again, is counted up to the moment it is read, so a
//! timer that fires right after the process resumes already sees it. The watchdog is one per
//! process because a pause is: it starts with the first reading.
//!
//! What this module does not own: what a timeout means for the delivery (the dispatcher's).

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the watchdog beats.
pub const BEAT: Duration = Duration::from_millis(50);

/// A gap between two beats longer than this is a pause of the process. Well above what a busy
/// machine's scheduler delays a sleeping thread by, well below any timeout kurir sets.
pub const STALL: Duration = Duration::from_millis(500);

struct Watch {
    last_beat: Instant,
    /// The pauses counted up to `last_beat`.
    paused: Duration,
}

impl Watch {
    /// The pauses up to `now`, the gap since the last beat included if it is one.
    fn paused_until(&self, now: Instant) -> Duration {
        let gap = now.saturating_duration_since(self.last_beat);
        self.paused
            + if gap > STALL {
                gap - BEAT
            } else {
                Duration::ZERO
            }
    }
}

fn watch() -> &'static Mutex<Watch> {
    static WATCH: OnceLock<Mutex<Watch>> = OnceLock::new();
    WATCH.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("kurir-pauses".into())
            .spawn(|| loop {
                std::thread::sleep(BEAT);
                let now = Instant::now();
                let mut w = watch().lock().unwrap_or_else(|p| p.into_inner());
                w.paused = w.paused_until(now);
                w.last_beat = now;
            });
        if let Err(e) = spawned {
            // Without it no pause is seen: timeouts count the process's pauses, as they did.
            tracing::warn!(error = %e, "could not start the pause watchdog");
        }
        Mutex::new(Watch {
            last_beat: Instant::now(),
            paused: Duration::ZERO,
        })
    })
}

/// The total time this process has been paused since its watchdog started, up to now.
pub fn paused_so_far() -> Duration {
    let now = Instant::now();
    watch()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .paused_until(now)
}

/// A stopwatch of own time: wall time since it started, minus the process's pauses since.
#[derive(Clone, Copy, Debug)]
pub struct OwnTime {
    started: Instant,
    paused_before: Duration,
}

impl OwnTime {
    /// Starts now.
    pub fn start() -> Self {
        Self {
            paused_before: paused_so_far(),
            started: Instant::now(),
        }
    }

    /// The process's pauses since it started.
    pub fn paused(&self) -> Duration {
        paused_so_far().saturating_sub(self.paused_before)
    }

    /// Own time since it started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.paused())
    }
}

/// A deadline `after` own time from its start: moved later by every pause of the process.
#[derive(Clone, Copy, Debug)]
pub struct OwnDeadline {
    own: OwnTime,
    after: Duration,
}

/// The deadline passed.
#[derive(Debug, PartialEq, Eq)]
pub struct Elapsed;

impl OwnDeadline {
    /// `after` from now.
    pub fn after(after: Duration) -> Self {
        Self {
            own: OwnTime::start(),
            after,
        }
    }

    /// The instant it falls at, as far as the pauses so far go.
    fn at(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.own.started + self.after + self.own.paused())
    }

    /// Runs `fut` until it is done or the deadline passes. When the timer fires, the pauses
    /// since it was set move it on, and `fut` gets the rest of its time: what was answered
    /// during a pause is then read, not timed out.
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, Elapsed> {
        tokio::pin!(fut);
        loop {
            let at = self.at();
            if let Ok(done) = tokio::time::timeout_at(at, &mut fut).await {
                return Ok(done);
            }
            if self.at() <= at {
                return Err(Elapsed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_between_beats_counts_as_a_pause_only_past_the_stall() {
        let start = Instant::now();
        let w = Watch {
            last_beat: start,
            paused: Duration::from_secs(1),
        };
        assert_eq!(
            w.paused_until(start + Duration::from_millis(300)),
            Duration::from_secs(1)
        );
        assert_eq!(
            w.paused_until(start + Duration::from_secs(20)),
            Duration::from_secs(21) - BEAT
        );
    }

    #[tokio::test]
    async fn a_deadline_without_a_pause_passes_on_time() {
        let deadline = OwnDeadline::after(Duration::from_millis(20));
        let never = std::future::pending::<()>();
        assert_eq!(deadline.run(never).await, Err(Elapsed));
        assert!(deadline.own.elapsed() >= Duration::from_millis(20));
    }
}
