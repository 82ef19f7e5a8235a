//! How long a polling loop waits before its next look for work: [`IdlePoll`] keeps the wait short
//! while looks find work and lengthens it, step by step, while they find none, so an idle process
//! costs the database a look every so often instead of hundreds a second.
//!
//! Pure arithmetic on what each look found; the loops that sleep, and the wake-ups that cut a
//! sleep short when work is known to exist, belong to their owners (kurir's relay and dispatcher,
//! kurir-receiver's runner).

use std::time::Duration;

/// Empty looks in a row, at the fastest interval, before the wait starts to grow: a short lull in
/// a steady stream (the next commit is a few milliseconds late) keeps the fast interval.
pub const PATIENCE: u32 = 16;

/// The wait between looks of one polling loop.
///
/// Starts at `fastest`. Each look reports whether it found work: finding work returns to
/// `fastest`; after [`PATIENCE`] empty looks in a row, each further empty look doubles the wait,
/// up to `slowest`. So a loop that goes idle slows to `slowest` within about `2 × slowest` plus
/// its patience, and the first work after a long idle waits at most `slowest`.
///
/// ```
/// use std::time::Duration;
/// use kurir_core::poll::IdlePoll;
///
/// let ms = Duration::from_millis;
/// let mut poll = IdlePoll::new(ms(5), ms(800));
/// for _ in 0..100 {
///     poll.next_wait(false);
/// }
/// assert_eq!(poll.next_wait(false), ms(800));
/// assert_eq!(poll.next_wait(true), ms(5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdlePoll {
    fastest: Duration,
    slowest: Duration,
    wait: Duration,
    empty_looks: u32,
}

impl IdlePoll {
    /// A schedule between `fastest` and `slowest`. A `slowest` below `fastest` is raised to it
    /// (a loop configured to poll rarely never polls faster because it is idle).
    pub fn new(fastest: Duration, slowest: Duration) -> Self {
        Self {
            fastest,
            slowest: slowest.max(fastest),
            wait: fastest,
            empty_looks: 0,
        }
    }

    /// The wait before the next look, given whether the look just made found work.
    pub fn next_wait(&mut self, found_work: bool) -> Duration {
        if found_work {
            self.empty_looks = 0;
            self.wait = self.fastest;
            return self.wait;
        }
        self.empty_looks = self.empty_looks.saturating_add(1);
        if self.empty_looks > PATIENCE {
            self.wait = self.wait.saturating_mul(2).min(self.slowest);
        }
        self.wait
    }

    /// The longest wait this schedule reaches.
    pub fn slowest(&self) -> Duration {
        self.slowest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn stays_fast_while_work_is_found() {
        let mut poll = IdlePoll::new(ms(5), ms(800));
        for _ in 0..1000 {
            assert_eq!(poll.next_wait(true), ms(5));
        }
    }

    #[test]
    fn keeps_the_fast_interval_for_its_patience_then_doubles_up_to_the_slowest() {
        let mut poll = IdlePoll::new(ms(5), ms(800));
        let waits: Vec<Duration> = (0..PATIENCE + 10).map(|_| poll.next_wait(false)).collect();
        assert!(waits[..PATIENCE as usize].iter().all(|w| *w == ms(5)));
        let growing: Vec<u64> = waits[PATIENCE as usize..]
            .iter()
            .map(|w| w.as_millis() as u64)
            .collect();
        assert_eq!(growing, [10, 20, 40, 80, 160, 320, 640, 800, 800, 800]);
    }

    #[test]
    fn the_first_work_after_an_idle_spell_returns_to_the_fast_interval() {
        let mut poll = IdlePoll::new(ms(50), ms(2000));
        for _ in 0..100 {
            poll.next_wait(false);
        }
        assert_eq!(poll.next_wait(false), ms(2000));
        assert_eq!(poll.next_wait(true), ms(50));
        // And the patience starts over.
        for _ in 0..PATIENCE {
            assert_eq!(poll.next_wait(false), ms(50));
        }
        assert_eq!(poll.next_wait(false), ms(100));
    }

    #[test]
    fn a_fastest_above_the_slowest_is_never_shortened() {
        let hour = Duration::from_secs(3600);
        let mut poll = IdlePoll::new(hour, ms(800));
        assert_eq!(poll.slowest(), hour);
        for found in [false, true, false, false] {
            assert_eq!(poll.next_wait(found), hour);
        }
    }

    #[test]
    fn an_idle_loop_settles_at_the_slowest_within_bounded_looks() {
        // From 5 ms to 800 ms: the patience, then 8 doublings.
        let mut poll = IdlePoll::new(ms(5), ms(800));
        let looks = (1..).find(|_| poll.next_wait(false) == ms(800)).unwrap();
        assert_eq!(looks, PATIENCE as usize + 8);
    }
}
