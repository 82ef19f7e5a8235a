//! kurir's wire contract, shared by the sender (`kurir`) and the receiving kit (`kurir-receiver`):
//! the event envelope, the header names, signing and verifying for every supported scheme, the
//! retry policy, the idle polling schedule of kurir's loops, and the [`Clock`] both read time from.
//!
//! Pure: no I/O, no async. Its functions read no clock: time is always passed in as `now`, read
//! by the caller from a [`Clock`].
//!
//! # Layout
//!
//! - [`event`]: [`EventId`], [`EventType`] and the [`Envelope`] a subscriber receives.
//! - [`secret`]: [`Secret`], generating, validating and deriving HMAC keys; never printed.
//! - [`sign`]: the sender side, [`signature_headers`] for one attempt and the header name constants.
//! - [`verify`]: the receiver side, a [`Verifier`] per [`Scheme`], one submodule per scheme.
//! - [`retry`]: [`RetryPolicy`] (backoff, jitter, dead-letter) and [`parse_retry_after`].
//! - [`poll`]: [`IdlePoll`], the wait between looks of a polling loop: short while it finds
//!   work, growing while it finds none.
//! - [`breaker`]: [`Circuit`], an endpoint's circuit breaker (closed, open, half-open) and
//!   [`BreakerPolicy`].
//! - [`rate`]: [`rate::Bucket`], an endpoint's rate limit (GCRA), lowered for a while by a `429`.
//! - [`clock`]: [`Clock`], the current time as a service reads it: the system's or a test's,
//!   corrected by an offset (kurir measures its process's against the database's clock).
//! - `mac` (private): the HMAC-SHA256 and constant-time comparison both sides share.
//!
//! # Example
//!
//! What kurir signs, a receiver configured with the same secret verifies:
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use http::{HeaderMap, HeaderName, HeaderValue};
//! use kurir_core::{signature_headers, Scheme, Secret, Verifier};
//!
//! let secret = Secret::generate();
//! let at = Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 31).unwrap();
//! let body = br#"{"event_id":"evt_1","data":{}}"#;
//!
//! let mut headers = HeaderMap::new();
//! for (name, value) in signature_headers("evt_1", "order.paid", &[&secret], at, body) {
//!     headers.insert(HeaderName::from_static(name), HeaderValue::from_str(&value).unwrap());
//! }
//!
//! for scheme in [Scheme::Kurir, Scheme::StandardWebhooks] {
//!     let verified = Verifier::new(scheme, vec![secret.clone()]).verify(&headers, body, at).unwrap();
//!     assert_eq!(verified.event_id.as_deref(), Some("evt_1"));
//! }
//! ```

pub mod breaker;
pub mod clock;
pub mod event;
mod mac;
pub mod poll;
pub mod rate;
pub mod retry;
pub mod secret;
pub mod sign;
pub mod verify;

pub use breaker::{BreakerPolicy, Circuit, Health};
pub use clock::Clock;
pub use event::{Envelope, EventId, EventType, InvalidEventId, InvalidEventType};
pub use poll::IdlePoll;
pub use retry::{parse_retry_after, AttemptOutcome, InvalidRetryPolicy, Next, RetryPolicy};
pub use secret::{InvalidSecret, Secret};
pub use sign::{headers, sign_kurir, sign_standard, signature_headers};
pub use verify::{EventIdSource, Scheme, UnknownScheme, Verified, Verifier, VerifyError};
