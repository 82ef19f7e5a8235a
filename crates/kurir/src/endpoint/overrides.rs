//! An endpoint's overrides of the process-wide delivery settings ([`Overrides`]), and changes to
//! them field by field ([`OverridesUpdate`]).

use std::time::Duration;

use kurir_core::retry::RetryPolicy;
use serde::{Deserialize, Serialize};

use super::{in_range, InvalidEndpoint};
use crate::limits;

/// Calls `$then!` with `$args` followed by every override: its field, its type, its bounds (as
/// [`crate::limits`] has them, in the field's unit; the API's document states them), and what it is
/// called in each struct that carries it: [`Overrides`] (and [`OverridesUpdate`]), then the
/// API's create body, endpoint view and update body (`crate::api::endpoints`). One list, so an
/// override added here is in all of them; the API's texts are those of the OpenAPI document.
macro_rules! each_override {
    ($then:ident! $args:tt) => {
        $then! { $args
            connect_timeout_ms: u32 (100, 60000) [
                "Connect timeout for this endpoint."
                "Connect timeout, overriding the global one."
                "Connect timeout override."
                "Connect timeout override; `null` clears it."
            ]
            request_timeout_ms: u32 (100, 60000) [
                "Response timeout for this endpoint."
                "Response timeout, overriding the global one."
                "Response timeout override."
                "Response timeout override; `null` clears it."
            ]
            retry_initial_delay_ms: u64 (10, 604800000) [
                "First retry delay."
                "First retry delay, overriding the global one."
                "First retry delay override."
                "First retry delay override; `null` clears it."
            ]
            retry_max_delay_ms: u64 (10, 604800000) [
                "Longest retry delay."
                "Longest retry delay, overriding the global one."
                "Longest retry delay override."
                "Longest retry delay override; `null` clears it."
            ]
            retry_max_attempts: u32 (1, 50) [
                "Attempts before dead-letter."
                "Attempts before dead-letter, overriding the global one."
                "Attempts before dead-letter override."
                "Attempts before dead-letter override; `null` clears it."
            ]
            circuit_failure_threshold: u32 (1, 1000) [
                "Failures in a row that open the circuit breaker."
                "Failures in a row that open the circuit breaker, overriding the global setting."
                "Failures in a row that open the circuit breaker, overriding the global setting."
                "Circuit breaker threshold override; `null` clears it."
            ]
            circuit_cooldown_ms: u64 (10, 600000) [
                "The circuit breaker's first cool-down."
                "The circuit breaker's first cool-down, overriding the global setting."
                "The circuit breaker's first cool-down, overriding the global setting."
                "Circuit breaker cool-down override; `null` clears it."
            ]
        }
    };
}
pub(crate) use each_override;

/// [`Overrides`] and [`OverridesUpdate`] from [`each_override!`]'s list.
macro_rules! overrides_and_update {
    ({} $($field:ident: $ty:tt $bounds:tt [$doc:tt $create:tt $view:tt $update:tt])*) => {
        /// Per-endpoint settings that override the process-wide defaults when set.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Overrides {
            $(#[doc = $doc] pub $field: Option<$ty>,)*
        }

        /// Changes to an endpoint's [`Overrides`], field by field.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct OverridesUpdate {
            $(#[doc = $doc] pub $field: Option<Option<$ty>>,)*
        }

        impl OverridesUpdate {
            /// `current` with these changes applied.
            pub fn applied_to(&self, current: &Overrides) -> Overrides {
                Overrides {
                    $($field: self.$field.unwrap_or(current.$field),)*
                }
            }
        }
    };
}
each_override!(overrides_and_update! {});

impl Overrides {
    /// Checks each override against its documented bound ([`crate::limits`]) and the first retry
    /// delay against the longest.
    pub fn validate(&self) -> Result<(), InvalidEndpoint> {
        let timeouts = limits::millis(&limits::TIMEOUT);
        let delays = limits::millis(&limits::RETRY_DELAY);
        let attempts =
            u64::from(*limits::RETRY_ATTEMPTS.start())..=u64::from(*limits::RETRY_ATTEMPTS.end());
        in_range(
            "connect_timeout_ms",
            self.connect_timeout_ms.map(u64::from),
            &timeouts,
        )?;
        in_range(
            "request_timeout_ms",
            self.request_timeout_ms.map(u64::from),
            &timeouts,
        )?;
        in_range(
            "retry_initial_delay_ms",
            self.retry_initial_delay_ms,
            &delays,
        )?;
        in_range("retry_max_delay_ms", self.retry_max_delay_ms, &delays)?;
        in_range(
            "retry_max_attempts",
            self.retry_max_attempts.map(u64::from),
            &attempts,
        )?;
        let threshold = limits::CIRCUIT_FAILURE_THRESHOLD;
        in_range(
            "circuit_failure_threshold",
            self.circuit_failure_threshold.map(u64::from),
            &(u64::from(*threshold.start())..=u64::from(*threshold.end())),
        )?;
        in_range(
            "circuit_cooldown_ms",
            self.circuit_cooldown_ms,
            &limits::millis(&limits::CIRCUIT_COOLDOWN),
        )?;
        if let (Some(initial), Some(max)) = (self.retry_initial_delay_ms, self.retry_max_delay_ms) {
            if initial > max {
                return Err(InvalidEndpoint::new(
                    "retry_initial_delay_ms",
                    "must not be larger than retry_max_delay_ms",
                ));
            }
        }
        Ok(())
    }

    /// The retry policy for this endpoint: the global one with this endpoint's overrides applied.
    pub fn retry_policy(&self, global: &RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            initial_delay: self
                .retry_initial_delay_ms
                .map_or(global.initial_delay, Duration::from_millis),
            max_delay: self
                .retry_max_delay_ms
                .map_or(global.max_delay, Duration::from_millis),
            max_attempts: self.retry_max_attempts.unwrap_or(global.max_attempts),
            jitter: global.jitter,
        }
    }
}
