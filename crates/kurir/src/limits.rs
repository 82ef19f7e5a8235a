//! The documented bounds of every number kurir accepts, and the rules for free text: one list,
//! shared by the configuration loader and the admin API so the two never disagree.
//! docs/operators.md lists them.
//!
//! Bounds keep every value meaningful (a timeout of 0 or of 49 days is a typo), storable (the
//! database's integer columns), and harmless (an endpoint cannot ask for a retry every
//! millisecond without end).

use std::ops::RangeInclusive;
use std::time::Duration;

/// Connect and response timeouts, global (`KURIR_CONNECT_TIMEOUT`, `KURIR_REQUEST_TIMEOUT`) and
/// per endpoint (`connect_timeout_ms`, `request_timeout_ms`).
pub const TIMEOUT: RangeInclusive<Duration> = Duration::from_millis(100)..=Duration::from_secs(60);

/// Retry delays, global (`KURIR_RETRY_INITIAL_DELAY`, `KURIR_RETRY_MAX_DELAY`) and per endpoint.
pub const RETRY_DELAY: RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(7 * 86_400);

/// Attempts before a delivery is dead-lettered, global and per endpoint.
pub const RETRY_ATTEMPTS: RangeInclusive<u32> = 1..=50;

/// Failures in a row that open an endpoint's circuit breaker, per endpoint
/// (`circuit_failure_threshold`).
pub const CIRCUIT_FAILURE_THRESHOLD: RangeInclusive<u32> = 1..=1000;

/// The same, process-wide (`KURIR_CIRCUIT_FAILURE_THRESHOLD`), where 0 turns the breaker off
/// for endpoints without a threshold of their own.
pub const CIRCUIT_FAILURE_THRESHOLD_DEFAULT: RangeInclusive<u32> = 0..=1000;

/// The first cool-down of an open circuit breaker, global (`KURIR_CIRCUIT_COOLDOWN`) and per
/// endpoint (`circuit_cooldown_ms`); re-opens double it up to ten minutes.
pub const CIRCUIT_COOLDOWN: RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(600);

/// How long an endpoint fails with no success before it is disabled
/// (`KURIR_ENDPOINT_DISABLE_AFTER`).
pub const ENDPOINT_DISABLE_AFTER: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(365 * 86_400);

/// An endpoint's rate limit, requests per second across all processes together
/// (`rate_limit_per_second`).
pub const RATE_LIMIT_PER_SECOND: RangeInclusive<u32> = 1..=100_000;

/// Concurrent requests to one endpoint per kurir process (`max_in_flight`).
pub const MAX_IN_FLIGHT: RangeInclusive<u32> = 1..=1000;

/// Concurrent deliveries per process (`KURIR_MAX_CONCURRENCY`).
pub const MAX_CONCURRENCY: RangeInclusive<u32> = 1..=10_000;

/// Rows per relay batch and per claim (`KURIR_BATCH_SIZE`).
pub const BATCH_SIZE: RangeInclusive<u32> = 1..=10_000;

/// Idle waits of the dispatcher, the gateway and the relay (`KURIR_POLL_INTERVAL`,
/// `KURIR_RELAY_POLL_INTERVAL`).
pub const POLL_INTERVAL: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(3600);

/// Added to the timeouts to make a lease (`KURIR_LEASE_MARGIN`).
pub const LEASE_MARGIN: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(3600);

/// The admin API's request body limit (`KURIR_MAX_BODY_SIZE`), in bytes.
pub const MAX_BODY_BYTES: RangeInclusive<usize> = 1024..=16 * 1024 * 1024;

/// Time a client has to send a request's head (`KURIR_HTTP_HEADER_TIMEOUT`).
pub const HTTP_HEADER_TIMEOUT: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(300);

/// Time a client has to send a request's body (`KURIR_HTTP_BODY_TIMEOUT`).
pub const HTTP_BODY_TIMEOUT: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);

/// Open HTTP connections per process (`KURIR_MAX_CONNECTIONS`).
pub const MAX_CONNECTIONS: RangeInclusive<u32> = 1..=100_000;

/// How long finished history may be kept (`KURIR_RETENTION` and the other `*_RETENTION`): from
/// one second (tests) to a hundred years.
pub const RETENTION: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(100 * 365 * 24 * 3600);

/// How long a subscriber portal session lasts (`KURIR_PORTAL_SESSION_TTL`): five minutes to
/// thirty days.
pub const PORTAL_SESSION_TTL: RangeInclusive<Duration> =
    Duration::from_secs(5 * 60)..=Duration::from_secs(30 * 24 * 3600);

/// How long a portal link may wait to be opened (`expires_in` of
/// `POST /v1/subscribers/{id}/portal-links`), in seconds: a minute to a week.
pub const PORTAL_LINK_EXPIRES_IN: RangeInclusive<u32> = 60..=7 * 24 * 3600;

/// Time between the pruner's rounds (`KURIR_PRUNE_INTERVAL`).
pub const PRUNE_INTERVAL: RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(24 * 3600);

/// The time SIGTERM may take (`KURIR_SHUTDOWN_TIMEOUT`).
pub const SHUTDOWN_TIMEOUT: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);

/// Longest free text (an endpoint's description, a disabled reason, a replay's reason), in bytes.
pub const MAX_TEXT_BYTES: usize = 1000;

/// Longest URL (endpoints, forward URLs), in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// The deepest an event's `data` may nest: arrays and objects inside one another, the payload's
/// own object being the first level (`{"a":[1]}` is 2 deep). It is serde_json's own recursion
/// limit, and far below where the databases fail with errors of their own (SQLite's JSON
/// functions at 1,000 levels, PostgreSQL's `stack depth limit exceeded`): the API refuses a
/// deeper `data` with `400`, and the relay records a deeper row written with plain SQL as
/// refused (`kurir_outbox_payload_depth`).
pub const MAX_JSON_DEPTH: usize = 128;

/// How deep `json` nests (see [`MAX_JSON_DEPTH`]). Counted in one pass without recursion, so no
/// depth can exhaust the stack; text that is not JSON is counted as far as it goes.
pub fn json_depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The years a time may fall in: what RFC 3339 writes (four digits) and both databases hold.
pub const YEARS: RangeInclusive<i32> = 1..=9999;

/// Whether `at` falls within [`YEARS`].
pub fn time_in_range(at: &chrono::DateTime<chrono::Utc>) -> bool {
    YEARS.contains(&chrono::Datelike::year(at))
}

/// `range` for people: "between 100ms and 1m".
pub fn describe_durations(range: &RangeInclusive<Duration>) -> String {
    format!(
        "between {} and {}",
        humantime::format_duration(*range.start()),
        humantime::format_duration(*range.end())
    )
}

/// `range` for people: "between 1 and 50".
pub fn describe<T: std::fmt::Display>(range: &RangeInclusive<T>) -> String {
    format!("between {} and {}", range.start(), range.end())
}

/// A range of durations in whole milliseconds, for the API's `*_ms` fields.
pub fn millis(range: &RangeInclusive<Duration>) -> RangeInclusive<u64> {
    range.start().as_millis() as u64..=range.end().as_millis() as u64
}

/// Why free text is refused: it holds a NUL (which PostgreSQL cannot store), or it is longer than
/// `max` bytes. `None` when it is fine.
pub fn text_problem(value: &str, max: usize) -> Option<String> {
    if value.contains('\0') {
        Some("must not contain a NUL character".into())
    } else if value.len() > max {
        Some(format!("must be at most {max} bytes"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_as_people_write_them() {
        assert_eq!(describe_durations(&TIMEOUT), "between 100ms and 1m");
        assert_eq!(describe(&RETRY_ATTEMPTS), "between 1 and 50");
        assert_eq!(millis(&RETRY_DELAY), 10..=604_800_000);
        assert_eq!(text_problem("fine\nreason", 100), None);
        assert!(text_problem("a\0b", 100).is_some());
        assert!(text_problem("abc", 2).is_some());
    }

    #[test]
    fn json_depth_counts_nested_arrays_and_objects_not_brackets_in_strings() {
        assert_eq!(json_depth("{}"), 1);
        assert_eq!(json_depth(r#"{"a":[1,{"b":{}}],"c":{}}"#), 4);
        assert_eq!(json_depth(r#"{"a":"[[[{{{\"[["}"#), 1);
        let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
        assert_eq!(json_depth(&deep), 50_000);
    }
}
