//! The clock that signature timestamps are checked against.
//!
//! Verification is the one place where "now" decides an answer (a timestamp outside the tolerance is
//! refused), so the [`WebhookSource`](crate::WebhookSource) takes a [`Clock`] that tests can control.
//! Store timestamps (`created_at`, leases, retries) use the system clock.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};

/// A source of the current time: the system clock, or any function a test supplies.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::from_fn(Utc::now)
    }

    /// A clock that always reads `at`.
    pub fn fixed(at: DateTime<Utc>) -> Clock {
        Clock::from_fn(move || at)
    }

    /// A clock that reads `now()`: a test can move it between requests.
    pub fn from_fn(now: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now))
    }

    /// The current time by this clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}
