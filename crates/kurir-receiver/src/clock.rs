//! The clock that signature timestamps are checked against: kurir-core's [`Clock`], the one
//! type kurir reads its time from too.
//!
//! Verification is the one place where "now" decides an answer (a timestamp outside the tolerance is
//! refused), so the [`WebhookSource`](crate::WebhookSource) takes a [`Clock`] that tests can control.
//! Store timestamps (`created_at`, leases, retries) use the system clock.

pub use kurir_core::Clock;
