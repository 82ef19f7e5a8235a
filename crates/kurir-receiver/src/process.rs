//! One attempt at one event: run the application's handler on a claimed event, then record the
//! outcome with the lease as fence. Shared by the [`Runner`](crate::Runner) and by inline processing
//! in the [`Receiver`](crate::Receiver), so both keep the same guarantees.
//!
//! The handler runs in its own task: a panic becomes a failed attempt, and an inline attempt
//! finishes even if the HTTP client hangs up. It is bounded by the lease, so by the time another
//! worker may take the event over, this attempt has been abandoned.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kurir_core::{AttemptOutcome, Next, RetryPolicy};

use crate::error::ConfigError;
use crate::event::InboxEvent;
use crate::store::{ClaimedEvent, Completion, Fence, Inbox, StoreError};

/// How long an attempt may hold an event unless configured otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5 * 60);

/// Longest `last_error` kept, in bytes.
const MAX_ERROR_LEN: usize = 2048;

type BoxedHandler = Arc<
    dyn Fn(InboxEvent) -> Pin<Box<dyn Future<Output = Result<(), Failure>> + Send>> + Send + Sync,
>;

/// Why a handler failed, and when it may be tried again: after the retry policy's backoff
/// (the default), not before a given delay (e.g. what a `Retry-After` header asked for), or
/// never. For handlers made with [`Processor::with_failures`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    message: String,
    retry: Retry,
}

/// When a [`Failure`] may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    Backoff,
    NotBefore(Duration),
    Never,
}

impl Failure {
    /// A failure retried after the policy's backoff; `message` becomes `last_error`.
    pub fn new(message: impl Display) -> Failure {
        Failure {
            message: message.to_string(),
            retry: Retry::Backoff,
        }
    }

    /// Not tried again before `delay` has passed: the next attempt waits
    /// `max(backoff, delay)`, capped by the policy's longest delay.
    pub fn retry_after(mut self, delay: Duration) -> Failure {
        self.retry = Retry::NotBefore(delay);
        self
    }

    /// Never tried again: the event fails for good (status `failed`, no attempt scheduled)
    /// until someone asks for a retry.
    pub fn give_up(mut self) -> Failure {
        self.retry = Retry::Never;
        self
    }

    /// What becomes the event's `last_error`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The retry policy's input for this failure.
    fn outcome(&self) -> AttemptOutcome {
        match self.retry {
            Retry::Backoff => AttemptOutcome::Failed,
            Retry::NotBefore(delay) => AttemptOutcome::FailedRetryAfter(delay),
            Retry::Never => AttemptOutcome::Gone,
        }
    }
}

/// The application's handler with its retry policy and lease. Cheap to clone.
#[derive(Clone)]
pub struct Processor {
    handler: BoxedHandler,
    policy: RetryPolicy,
    lease: Duration,
    owner: Arc<str>,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessOutcome {
    /// The handler succeeded; the event is `completed`.
    Completed,
    /// The handler failed; the event is `failed` and due again at this time.
    Retrying(DateTime<Utc>),
    /// The handler failed on the last allowed attempt; the event stays `failed`.
    GaveUp,
    /// The lease expired and another worker took the event over; nothing was recorded.
    LeaseLost,
    /// The runtime shut down before the outcome was recorded; the lease will expire and the event
    /// be attempted again.
    Interrupted,
}

impl Processor {
    /// Wraps `handler`: `Ok(())` completes the event, `Err(e)` fails the attempt with `e`'s
    /// `Display` (alternate form, so error chains show) as `last_error`. Default policy: kurir-core's
    /// [`RetryPolicy::default`] (10 attempts, 2 s doubling to 300 s, ±20 % jitter); default lease:
    /// [`DEFAULT_LEASE`].
    pub fn new<F, Fut, E>(handler: F) -> Processor
    where
        F: Fn(InboxEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + 'static,
    {
        let handler = Arc::new(handler);
        Processor::with_failures(move |event| {
            let attempt = handler(event);
            async move { attempt.await.map_err(|e| Failure::new(format!("{e:#}"))) }
        })
    }

    /// Like [`Processor::new`], for a handler that says when a failure may be tried again:
    /// after the backoff, not before a delay, or never (see [`Failure`]).
    pub fn with_failures<F, Fut>(handler: F) -> Processor
    where
        F: Fn(InboxEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Failure>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let boxed: BoxedHandler = Arc::new(move |event| Box::pin(handler(event)));
        Processor {
            handler: boxed,
            policy: RetryPolicy::default(),
            lease: DEFAULT_LEASE,
            owner: Arc::from(format!("kurir-receiver-{}", uuid::Uuid::now_v7())),
        }
    }

    /// When to retry a failed attempt and when to give up.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Result<Processor, ConfigError> {
        policy.validate()?;
        self.policy = policy;
        Ok(self)
    }

    /// How long one attempt may hold an event; the handler is abandoned (a failed attempt) when it
    /// runs longer, so that no two workers ever run it for the same event at once.
    pub fn lease(mut self, lease: Duration) -> Result<Processor, ConfigError> {
        if lease.is_zero() {
            return Err(ConfigError::ZeroLease);
        }
        self.lease = lease;
        Ok(self)
    }

    /// The lease duration in force.
    pub fn lease_duration(&self) -> Duration {
        self.lease
    }

    /// The name this processor's leases are taken under (unique per processor).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Runs the handler for `claimed` and records the outcome.
    ///
    /// The attempt runs in a task of its own, so it is recorded even if the caller (an HTTP request
    /// whose client hung up) is dropped meanwhile.
    pub async fn process(
        &self,
        inbox: &Inbox,
        claimed: ClaimedEvent,
    ) -> Result<ProcessOutcome, StoreError> {
        let (processor, inbox) = (self.clone(), inbox.clone());
        let attempt = tokio::spawn(async move { processor.attempt(&inbox, claimed).await });
        match attempt.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Ok(ProcessOutcome::Interrupted),
        }
    }

    async fn attempt(
        &self,
        inbox: &Inbox,
        claimed: ClaimedEvent,
    ) -> Result<ProcessOutcome, StoreError> {
        let attempt = claimed.event.attempt;
        let started = Instant::now();
        let result = if attempt > self.policy.max_attempts {
            // Only a worker that died during the last attempt leaves a lease to expire this late.
            Err(Failure::new(
                "gave up: the last attempt's worker stopped before finishing",
            ))
        } else {
            self.run_handler(claimed.event.clone()).await
        };
        let (completion, outcome) = self.judge(attempt, result);
        let fence = inbox.complete(&claimed, &completion).await?;
        let outcome = match fence {
            Fence::Recorded => outcome,
            Fence::LeaseLost => ProcessOutcome::LeaseLost,
        };
        log_attempt(&claimed.event, &outcome, started.elapsed());
        Ok(outcome)
    }

    /// The handler's result. It runs in its own task, which ends when the lease does even if no one
    /// awaits it any more, and where a panic is only a failed attempt.
    async fn run_handler(&self, event: InboxEvent) -> Result<(), Failure> {
        let lease = self.lease;
        let task = tokio::spawn(tokio::time::timeout(lease, (self.handler)(event)));
        match task.await {
            Ok(Ok(result)) => result,
            Ok(Err(_elapsed)) => Err(Failure::new(format!(
                "handler timed out after {lease:?} (the lease)"
            ))),
            Err(join) if join.is_panic() => Err(Failure::new("handler panicked")),
            Err(_) => Err(Failure::new("handler task was cancelled")),
        }
    }

    /// What the store records for attempt `attempt`'s `result`, and what that means.
    fn judge(&self, attempt: u32, result: Result<(), Failure>) -> (Completion, ProcessOutcome) {
        let failure = match result {
            Ok(()) => return (Completion::Completed, ProcessOutcome::Completed),
            Err(failure) => failure,
        };
        let next = self.policy.next(attempt, &failure.outcome(), Utc::now());
        let error = truncate(failure.message);
        match next {
            Next::Retry(at) => (
                Completion::Retry { at, error },
                ProcessOutcome::Retrying(at),
            ),
            Next::DeadLetter => (Completion::GiveUp { error }, ProcessOutcome::GaveUp),
        }
    }
}

impl std::fmt::Debug for Processor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("policy", &self.policy)
            .field("lease", &self.lease)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// One line per attempt, at the boundary; never the payload.
fn log_attempt(event: &InboxEvent, outcome: &ProcessOutcome, elapsed: Duration) {
    let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let (source, event_id, attempt) = (&event.source, &event.event_id, event.attempt);
    let event_type = event.event_type.as_deref().unwrap_or("");
    macro_rules! log {
        ($level:ident, $($rest:tt)*) => {
            tracing::$level!(source, event_id, event_type, attempt, duration_ms, $($rest)*)
        };
    }
    match outcome {
        ProcessOutcome::Completed => log!(info, status = "completed", "inbox event processed"),
        ProcessOutcome::Retrying(at) => {
            log!(warn, status = "failed", retry_at = %at, "inbox event failed, will retry")
        }
        ProcessOutcome::GaveUp => {
            log!(
                error,
                status = "failed",
                "inbox event failed on its last attempt"
            )
        }
        ProcessOutcome::LeaseLost | ProcessOutcome::Interrupted => {
            log!(warn, "inbox event outcome not recorded: its lease was lost")
        }
    }
}

/// `error` cut to [`MAX_ERROR_LEN`] bytes on a character boundary, with NUL (which
/// PostgreSQL's `text` refuses) replaced by U+FFFD, so it can always be stored.
fn truncate(mut error: String) -> String {
    if error.contains('\0') {
        error = error.replace('\0', "\u{FFFD}");
    }
    if error.len() > MAX_ERROR_LEN {
        let cut = (0..=MAX_ERROR_LEN)
            .rev()
            .find(|&i| error.is_char_boundary(i))
            .unwrap_or(0);
        error.truncate(cut);
        error.push('…');
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_on_a_char_boundary() {
        let cut = truncate("é".repeat(MAX_ERROR_LEN));
        assert!(cut.len() <= MAX_ERROR_LEN + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("short".to_owned()), "short");
        assert_eq!(truncate("nul\0".to_owned()), "nul\u{FFFD}");
    }
}
