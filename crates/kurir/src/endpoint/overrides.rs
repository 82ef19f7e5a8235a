//! An endpoint's overrides of the process-wide delivery settings ([`Overrides`]), and changes to
//! them field by field ([`OverridesUpdate`]).

use std::time::Duration;

use kurir_core::retry::RetryPolicy;
use serde::{Deserialize, Serialize};

use super::{in_range, InvalidEndpoint};
use crate::limits;

/// Per-endpoint settings that override the process-wide defaults when set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides {
    /// Connect timeout for this endpoint.
    pub connect_timeout_ms: Option<u32>,
    /// Response timeout for this endpoint.
    pub request_timeout_ms: Option<u32>,
    /// First retry delay.
    pub retry_initial_delay_ms: Option<u64>,
    /// Longest retry delay.
    pub retry_max_delay_ms: Option<u64>,
    /// Attempts before dead-letter.
    pub retry_max_attempts: Option<u32>,
    /// Failures in a row that open the circuit breaker.
    pub circuit_failure_threshold: Option<u32>,
    /// The circuit breaker's first cool-down.
    pub circuit_cooldown_ms: Option<u64>,
}

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

/// Changes to an endpoint's [`Overrides`], field by field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OverridesUpdate {
    /// Connect timeout.
    pub connect_timeout_ms: Option<Option<u32>>,
    /// Response timeout.
    pub request_timeout_ms: Option<Option<u32>>,
    /// First retry delay.
    pub retry_initial_delay_ms: Option<Option<u64>>,
    /// Longest retry delay.
    pub retry_max_delay_ms: Option<Option<u64>>,
    /// Attempts before dead-letter.
    pub retry_max_attempts: Option<Option<u32>>,
    /// Failures in a row that open the circuit breaker.
    pub circuit_failure_threshold: Option<Option<u32>>,
    /// The circuit breaker's first cool-down.
    pub circuit_cooldown_ms: Option<Option<u64>>,
}

impl OverridesUpdate {
    /// `current` with these changes applied.
    pub fn applied_to(&self, current: &Overrides) -> Overrides {
        fn pick<T: Copy>(change: Option<Option<T>>, current: Option<T>) -> Option<T> {
            change.unwrap_or(current)
        }
        Overrides {
            connect_timeout_ms: pick(self.connect_timeout_ms, current.connect_timeout_ms),
            request_timeout_ms: pick(self.request_timeout_ms, current.request_timeout_ms),
            retry_initial_delay_ms: pick(
                self.retry_initial_delay_ms,
                current.retry_initial_delay_ms,
            ),
            retry_max_delay_ms: pick(self.retry_max_delay_ms, current.retry_max_delay_ms),
            retry_max_attempts: pick(self.retry_max_attempts, current.retry_max_attempts),
            circuit_failure_threshold: pick(
                self.circuit_failure_threshold,
                current.circuit_failure_threshold,
            ),
            circuit_cooldown_ms: pick(self.circuit_cooldown_ms, current.circuit_cooldown_ms),
        }
    }
}
