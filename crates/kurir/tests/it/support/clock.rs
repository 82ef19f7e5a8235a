//! A clock a test moves instead of sleeping ([`MovableClock`]): handed to a store
//! (`Store::with_clock`), it is the time every part of that kurir reads.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use kurir::clock::Clock;

/// The system's clock, moved forward by whatever the test added.
#[derive(Clone, Default)]
pub struct MovableClock {
    ahead_ms: Arc<AtomicI64>,
}

impl MovableClock {
    /// The [`Clock`] that reads it (every clone reads the same time).
    pub fn clock(&self) -> Clock {
        let this = self.clone();
        Clock::from_fn(move || this.now())
    }

    /// Now by this clock.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + TimeDelta::milliseconds(self.ahead_ms.load(Ordering::SeqCst))
    }

    /// Moves the clock `by` forward: that much time has passed for whatever reads it.
    pub fn advance(&self, by: Duration) {
        self.ahead_ms
            .fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}
