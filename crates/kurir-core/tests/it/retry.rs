//! The retry policy at its boundaries, and Retry-After parsing.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use kurir_core::{parse_retry_after, AttemptOutcome, InvalidRetryPolicy, Next, RetryPolicy};

fn now() -> DateTime<Utc> {
    "2026-06-11T08:15:30Z".parse().unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn retry_in(delay: Duration) -> Next {
    Next::Retry(now() + TimeDelta::from_std(delay).unwrap())
}

#[test]
fn default_backoff_doubles_from_two_seconds_and_caps_at_five_minutes() {
    let policy = RetryPolicy::default();
    let expected = [
        (1, 2),
        (2, 4),
        (3, 8),
        (7, 128),
        (8, 256),
        (9, 300),
        (10, 300),
        (50, 300),
    ];
    for (attempt, delay) in expected {
        assert_eq!(policy.backoff(attempt), secs(delay), "attempt {attempt}");
    }
    assert_eq!(
        policy.backoff(0),
        secs(2),
        "attempt 0 is treated as the first"
    );
}

#[test]
fn huge_attempt_numbers_saturate_instead_of_overflowing() {
    let policy = RetryPolicy {
        max_attempts: u32::MAX,
        ..RetryPolicy::default()
    };
    for attempt in [31, 32, 33, 64, 65, 1_000, u32::MAX - 1, u32::MAX] {
        assert_eq!(policy.backoff(attempt), secs(300), "attempt {attempt}");
    }
    let next = policy.next_with_jitter(u32::MAX - 1, &AttemptOutcome::Failed, now(), 1.0);
    assert_eq!(next, retry_in(secs(300)));
    let uncapped = RetryPolicy {
        max_delay: Duration::MAX,
        max_attempts: u32::MAX,
        ..RetryPolicy::default()
    };
    assert_eq!(uncapped.backoff(200), Duration::MAX);
    assert_eq!(
        uncapped.next_with_jitter(200, &AttemptOutcome::Failed, now(), 0.0),
        Next::Retry(DateTime::<Utc>::MAX_UTC)
    );
}

#[test]
fn failed_attempts_retry_after_the_backoff_without_jitter_at_sample_zero() {
    let policy = RetryPolicy::default();
    assert_eq!(
        policy.next_with_jitter(1, &AttemptOutcome::Failed, now(), 0.0),
        retry_in(secs(2))
    );
    assert_eq!(
        policy.next_with_jitter(8, &AttemptOutcome::Failed, now(), 0.0),
        retry_in(secs(256))
    );
    assert_eq!(
        policy.next_with_jitter(9, &AttemptOutcome::Failed, now(), 0.0),
        retry_in(secs(300))
    );
}

#[test]
fn jitter_moves_the_delay_by_at_most_its_fraction() {
    let policy = RetryPolicy::default();
    let failed = AttemptOutcome::Failed;
    assert_eq!(
        policy.next_with_jitter(8, &failed, now(), -1.0),
        retry_in(Duration::from_millis(204_800))
    );
    assert_eq!(
        policy.next_with_jitter(8, &failed, now(), 1.0),
        retry_in(Duration::from_millis(307_200).min(secs(300)))
    );
    assert_eq!(
        policy.next_with_jitter(3, &failed, now(), 1.0),
        retry_in(Duration::from_millis(9_600))
    );
    assert_eq!(
        policy.next_with_jitter(3, &failed, now(), -1.0),
        retry_in(Duration::from_millis(6_400))
    );
    // Out-of-range samples are clamped.
    assert_eq!(
        policy.next_with_jitter(3, &failed, now(), 7.0),
        retry_in(Duration::from_millis(9_600))
    );
    assert_eq!(
        policy.next_with_jitter(3, &failed, now(), f64::NAN),
        retry_in(secs(8))
    );
}

#[test]
fn jitter_never_pushes_a_capped_delay_past_the_cap() {
    let policy = RetryPolicy::default();
    assert_eq!(
        policy.next_with_jitter(9, &AttemptOutcome::Failed, now(), 1.0),
        retry_in(secs(300))
    );
    assert_eq!(
        policy.next_with_jitter(9, &AttemptOutcome::Failed, now(), -1.0),
        retry_in(secs(240))
    );
}

#[test]
fn random_jitter_stays_within_bounds() {
    let policy = RetryPolicy::default();
    for _ in 0..200 {
        let Next::Retry(when) = policy.next(3, &AttemptOutcome::Failed, now()) else {
            panic!("attempt 3 of 10 retries");
        };
        let delay = (when - now()).to_std().unwrap();
        assert!(
            (Duration::from_millis(6_400)..=Duration::from_millis(9_600)).contains(&delay),
            "{delay:?}"
        );
    }
}

#[test]
fn dead_letters_after_max_attempts() {
    let policy = RetryPolicy::default();
    assert!(matches!(
        policy.next_with_jitter(9, &AttemptOutcome::Failed, now(), 0.0),
        Next::Retry(_)
    ));
    assert_eq!(
        policy.next_with_jitter(10, &AttemptOutcome::Failed, now(), 0.0),
        Next::DeadLetter
    );
    assert_eq!(
        policy.next_with_jitter(11, &AttemptOutcome::Failed, now(), 0.0),
        Next::DeadLetter
    );
    let retry_after = AttemptOutcome::FailedRetryAfter(secs(1));
    assert_eq!(
        policy.next_with_jitter(10, &retry_after, now(), 0.0),
        Next::DeadLetter
    );
}

#[test]
fn a_single_attempt_policy_dead_letters_the_first_failure() {
    let policy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    assert_eq!(
        policy.next(1, &AttemptOutcome::Failed, now()),
        Next::DeadLetter
    );
}

#[test]
fn gone_dead_letters_at_once() {
    let policy = RetryPolicy::default();
    assert_eq!(
        policy.next_with_jitter(1, &AttemptOutcome::Gone, now(), 0.0),
        Next::DeadLetter
    );
}

/// Issue 11, item 5: `Retry-After` lengthens the wait, never shortens it.
#[test]
fn retry_after_is_a_floor_under_the_backoff_capped_at_the_longest_delay() {
    let policy = RetryPolicy::default();
    let short = AttemptOutcome::FailedRetryAfter(secs(1));
    assert_eq!(
        policy.next_with_jitter(5, &short, now(), 0.0),
        retry_in(secs(32)),
        "shorter than the 32 s backoff: the backoff"
    );
    let zero = AttemptOutcome::FailedRetryAfter(Duration::ZERO);
    assert_eq!(
        policy.next_with_jitter(1, &zero, now(), 0.0),
        retry_in(secs(2)),
        "Retry-After: 0 (or a date in the past) waits the backoff"
    );
    let longer = AttemptOutcome::FailedRetryAfter(secs(60));
    assert_eq!(
        policy.next_with_jitter(1, &longer, now(), 1.0),
        retry_in(secs(60)),
        "longer than the backoff with jitter: Retry-After"
    );
    let long = AttemptOutcome::FailedRetryAfter(secs(3_600));
    assert_eq!(
        policy.next_with_jitter(1, &long, now(), -1.0),
        retry_in(secs(300)),
        "capped"
    );
    let huge = AttemptOutcome::FailedRetryAfter(Duration::MAX);
    assert_eq!(
        policy.next_with_jitter(1, &huge, now(), 0.0),
        retry_in(secs(300))
    );
}

#[test]
fn policies_from_configuration_are_validated() {
    assert_eq!(RetryPolicy::default().validate(), Ok(()));
    let none = RetryPolicy {
        max_attempts: 0,
        ..RetryPolicy::default()
    };
    assert_eq!(none.validate(), Err(InvalidRetryPolicy::NoAttempts));
    let inverted = RetryPolicy {
        initial_delay: secs(600),
        ..RetryPolicy::default()
    };
    assert!(matches!(
        inverted.validate(),
        Err(InvalidRetryPolicy::InitialAboveMax { .. })
    ));
    let wild = RetryPolicy {
        jitter: 1.5,
        ..RetryPolicy::default()
    };
    assert_eq!(
        wild.validate(),
        Err(InvalidRetryPolicy::JitterOutOfRange(1.5))
    );
}

#[test]
fn retry_after_reads_delta_seconds() {
    assert_eq!(parse_retry_after("120", now()), Some(secs(120)));
    assert_eq!(parse_retry_after(" 0 ", now()), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("99999999999999999999999", now()),
        Some(secs(u64::MAX))
    );
}

#[test]
fn retry_after_reads_http_dates_relative_to_now() {
    assert_eq!(
        parse_retry_after("Thu, 11 Jun 2026 08:17:30 GMT", now()),
        Some(secs(120))
    );
    assert_eq!(
        parse_retry_after("Thursday, 11-Jun-26 08:16:00 GMT", now()),
        Some(secs(30))
    );
    assert_eq!(
        parse_retry_after("Thu Jun 11 08:15:40 2026", now()),
        Some(secs(10))
    );
}

#[test]
fn retry_after_dates_in_the_past_mean_no_wait() {
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now()),
        Some(Duration::ZERO)
    );
}

#[test]
fn retry_after_garbage_is_none() {
    for garbage in [
        "",
        "soon",
        "-5",
        "+5",
        "1.5",
        "12 s",
        "2026-06-11T08:17:30Z",
    ] {
        assert_eq!(parse_retry_after(garbage, now()), None, "{garbage:?}");
    }
}
