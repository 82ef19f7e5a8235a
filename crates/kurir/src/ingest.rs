//! Group commit for the API's publishes (issue 18): concurrent `POST /v1/events` requests are
//! recorded together, in one transaction, so they share one durable commit (one WAL flush on
//! PostgreSQL, one sync on SQLite) instead of paying one each.
//!
//! Each request hands its event to [`Ingest::publish`] and waits. A few writer tasks take what
//! is queued (up to [`MAX_BATCH`], never waiting for more to arrive: an event alone is written
//! at once) and record it with [`Store::publish_events`]; each request is answered only after
//! its batch committed, so a `2xx` still means durable. Every event is recorded exactly as it
//! would have been alone, in queue order: an `Idempotency-Key` or an `event_id` that repeats an
//! earlier one, in the batch or in the database, answers as a repeat. If the batch fails (an
//! event the database refuses, a key another process inserted meanwhile), it is rolled back and
//! its events are published one at a time, so no event fails because of another.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};

use crate::outbox::EnqueueError;
use crate::store::{PublishItem, Published, Store};

/// Most events one writer records in one transaction.
pub const MAX_BATCH: usize = 128;

/// Events waiting for a writer; a request beyond this waits to enqueue.
const QUEUE: usize = 4096;

/// One request's event and where its answer goes.
struct Job {
    item: PublishItem,
    answer: oneshot::Sender<Result<Published, EnqueueError>>,
}

/// The queue in front of the writers. Cloning shares it.
#[derive(Clone)]
pub struct Ingest {
    jobs: mpsc::Sender<Job>,
}

impl Ingest {
    /// Starts the writers on the current runtime: one on SQLite (it has one write lock), two
    /// elsewhere so that one batch gathers while the other commits (more would only split the
    /// queue into smaller batches). They stop when every clone of this is dropped.
    pub fn start(store: Store) -> Self {
        let writers = if store.backend() == "sqlite" { 1 } else { 2 };
        let (jobs, rx) = mpsc::channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers {
            tokio::spawn(write(store.clone(), rx.clone()));
        }
        Self { jobs }
    }

    /// Records `item` with whatever else is queued; answers once it is durable (or refused).
    pub async fn publish(&self, item: PublishItem) -> Result<Published, EnqueueError> {
        let (answer, answered) = oneshot::channel();
        let gone = || EnqueueError::Database(sqlx::Error::PoolClosed);
        self.jobs
            .send(Job { item, answer })
            .await
            .map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}

/// A writer: takes what is queued, records it, answers each request.
async fn write(store: Store, rx: Arc<Mutex<mpsc::Receiver<Job>>>) {
    let mut jobs = Vec::with_capacity(MAX_BATCH);
    loop {
        // The lock is held only while taking: another writer gathers the next batch while this
        // one commits.
        let taken = rx.lock().await.recv_many(&mut jobs, MAX_BATCH).await;
        if taken == 0 {
            return;
        }
        let (items, answers): (Vec<_>, Vec<_>) = jobs.drain(..).map(|j| (j.item, j.answer)).unzip();
        for (answer, result) in answers.into_iter().zip(publish_all(&store, &items).await) {
            // The request may have gone (client disconnected); its event is recorded anyway.
            let _ = answer.send(result);
        }
    }
}

/// Records `items` in one transaction if it can, else one at a time; one answer per item, in
/// order.
pub async fn publish_all(
    store: &Store,
    items: &[PublishItem],
) -> Vec<Result<Published, EnqueueError>> {
    if items.len() > 1 {
        match store.publish_events(items).await {
            Ok(Some(done)) => return done.into_iter().map(Ok).collect(),
            Ok(None) => tracing::debug!(
                events = items.len(),
                "a key of the batch was taken meanwhile; publishing one at a time"
            ),
            Err(e) => tracing::debug!(
                events = items.len(),
                error = %e,
                "the batch failed; publishing one at a time"
            ),
        }
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut tries = 1;
        let result = loop {
            let result = store
                .publish_event(item.event.clone(), item.key.as_ref())
                .await;
            match result {
                Err(e) if deadlocked(&e) && tries < DEADLOCK_TRIES => tries += 1,
                result => break result,
            }
        };
        out.push(result);
    }
    out
}

/// How often one event is tried when the database breaks a deadlock by failing it.
const DEADLOCK_TRIES: u32 = 3;

/// Whether the database failed the transaction to break a deadlock (or a serialization
/// conflict): nothing was written, and the same publish may succeed at once. Batches make them
/// possible where single publishes made none: two batches insert the same event ids or keys in
/// different orders, each holding one the other waits for.
fn deadlocked(e: &EnqueueError) -> bool {
    match e {
        EnqueueError::Database(sqlx::Error::Database(d)) => {
            matches!(d.code().as_deref(), Some("40001" | "40P01"))
        }
        _ => false,
    }
}
