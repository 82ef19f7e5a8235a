//! The background worker: a loop around one testable [`Runner::step`], which claims a batch of due
//! inbox events and runs each through the [`Processor`] at once.
//!
//! Between steps the runner sleeps until the poll interval passes, a [`Receiver`](crate::Receiver)
//! wakes it because a new event was stored, or shutdown is requested. A full batch is followed by
//! another step at once. With [`Runner::max_poll_interval`], the sleep grows while steps find
//! nothing ([`IdlePoll`]), so an idle runner costs its database little. Shutdown (the [`CancellationToken`] passed to [`Runner::run`]) is honoured
//! between steps: attempts in flight finish and record their outcome first.

use std::sync::Arc;
use std::time::Duration;

use kurir_core::IdlePoll;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::process::{ProcessOutcome, Processor};
use crate::source_set::SourceSet;
use crate::store::{ClaimedEvent, Inbox, StoreError};

/// How often the runner looks for due events when nothing wakes it, unless configured otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Events claimed per step, unless configured otherwise.
pub const DEFAULT_BATCH_SIZE: u32 = 16;

/// Processes due inbox events with a [`Processor`] until shut down.
#[derive(Debug, Clone)]
pub struct Runner {
    inbox: Inbox,
    processor: Processor,
    sources: Option<SourceSet>,
    batch_size: u32,
    poll_interval: Duration,
    max_poll_interval: Option<Duration>,
    wake: Arc<Notify>,
}

/// What one [`Runner::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// No event was due.
    Idle,
    /// Events were claimed and attempted.
    Processed(StepCounts),
}

/// How the attempts of one step ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Events claimed.
    pub claimed: u32,
    /// Attempts that completed their event.
    pub completed: u32,
    /// Attempts that failed with a retry scheduled.
    pub retrying: u32,
    /// Attempts that failed with no attempt left.
    pub gave_up: u32,
    /// Attempts whose outcome was not recorded: lease lost, or the store failed while recording
    /// (the lease then expires and the event is claimed again).
    pub unrecorded: u32,
}

/// A handle that wakes a [`Runner`] early, e.g. when a new event is stored.
#[derive(Debug, Clone)]
pub struct Waker(Arc<Notify>);

impl Waker {
    /// Makes the runner's next wait end at once (one stored wake-up at most).
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

impl Runner {
    /// A runner over every source's events in `inbox`.
    pub fn new(inbox: Inbox, processor: Processor) -> Runner {
        Runner {
            inbox,
            processor,
            sources: None,
            batch_size: DEFAULT_BATCH_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            max_poll_interval: None,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Processes only `source`'s events (when several runners, or kurir's gateway, share the table).
    pub fn source(self, source: &str) -> Runner {
        self.sources(SourceSet::new([source]))
    }

    /// Processes only the events of the sources in `sources` at the time of each step; while the
    /// set is empty, nothing.
    pub fn sources(mut self, sources: SourceSet) -> Runner {
        self.sources = Some(sources);
        self
    }

    /// How many events one step claims (at least 1).
    pub fn batch_size(mut self, batch_size: u32) -> Runner {
        self.batch_size = batch_size.max(1);
        self
    }

    /// How long the runner waits between looks when nothing wakes it; it bounds how late a
    /// scheduled retry starts.
    pub fn poll_interval(mut self, poll_interval: Duration) -> Runner {
        self.poll_interval = poll_interval;
        self
    }

    /// Lets the wait grow while steps find nothing: from the poll interval, doubling after a
    /// few empty steps, up to `max` (see [`IdlePoll`]); the first step that finds events returns
    /// to the poll interval. Without it the wait is always the poll interval. A scheduled retry
    /// may then start up to `max` late on an idle runner.
    pub fn max_poll_interval(mut self, max: Duration) -> Runner {
        self.max_poll_interval = Some(max);
        self
    }

    /// A handle that wakes this runner; give it to [`Receiver::wake`](crate::Receiver::wake).
    pub fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.wake))
    }

    /// Claims up to a batch of due events and runs them all, concurrently, to a recorded outcome.
    pub async fn step(&self) -> Result<StepOutcome, StoreError> {
        let claimed = self.claim().await?;
        if claimed.is_empty() {
            return Ok(StepOutcome::Idle);
        }
        let mut counts = StepCounts {
            claimed: u32::try_from(claimed.len()).unwrap_or(u32::MAX),
            ..StepCounts::default()
        };
        let mut attempts = JoinSet::new();
        for event in claimed {
            let (inbox, processor) = (self.inbox.clone(), self.processor.clone());
            attempts.spawn(async move { processor.process(&inbox, event).await });
        }
        // Each attempt runs in a task of its own (see `Processor::process`): cancelling this step
        // leaves them to finish and record their outcome.
        while let Some(joined) = attempts.join_next().await {
            counts.add(joined);
        }
        Ok(StepOutcome::Processed(counts))
    }

    async fn claim(&self) -> Result<Vec<ClaimedEvent>, StoreError> {
        let (owner, lease) = (self.processor.owner(), self.processor.lease_duration());
        match &self.sources {
            None => {
                self.inbox
                    .claim_due(owner, lease, self.batch_size, None)
                    .await
            }
            Some(set) => {
                let names = set.names();
                (self.inbox)
                    .claim_due_among(owner, lease, self.batch_size, &names)
                    .await
            }
        }
    }

    /// Steps until `shutdown` is cancelled. Store errors are logged and retried after the poll
    /// interval; they never end the loop.
    pub async fn run(self, shutdown: CancellationToken) {
        let slowest = self.max_poll_interval.unwrap_or(self.poll_interval);
        let mut poll = IdlePoll::new(self.poll_interval, slowest);
        while !shutdown.is_cancelled() {
            let (claimed, full_batch) = match self.step().await {
                Ok(StepOutcome::Processed(counts)) => (true, counts.claimed >= self.batch_size),
                Ok(StepOutcome::Idle) => (false, false),
                Err(error) => {
                    tracing::error!(%error, "inbox runner step failed");
                    (false, false)
                }
            };
            let wait = poll.next_wait(claimed);
            if !full_batch {
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

impl StepCounts {
    fn add(&mut self, joined: Result<Result<ProcessOutcome, StoreError>, tokio::task::JoinError>) {
        match joined {
            Ok(Ok(ProcessOutcome::Completed)) => self.completed += 1,
            Ok(Ok(ProcessOutcome::Retrying(_))) => self.retrying += 1,
            Ok(Ok(ProcessOutcome::GaveUp)) => self.gave_up += 1,
            Ok(Ok(ProcessOutcome::LeaseLost | ProcessOutcome::Interrupted)) => self.unrecorded += 1,
            Ok(Err(error)) => {
                tracing::error!(%error, "recording an inbox attempt failed");
                self.unrecorded += 1;
            }
            Err(error) => {
                tracing::error!(%error, "inbox attempt task failed");
                self.unrecorded += 1;
            }
        }
    }
}
