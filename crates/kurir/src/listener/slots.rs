//! The listener's connection slots: the cap on open connections, and which connection gives its
//! slot up when a client arrives at the cap.
//!
//! A connection is *idle* once it has waited [`IDLE_GRACE`] for a request with nothing arriving,
//! after its accept or the end of its last response, until the first bytes of its next request
//! arrive (the grace keeps a client that connects and then sends from being taken for idle in
//! the moment between the two). At the cap, a new client takes the slot of the connection
//! idle longest, which is closed (issue 32: 5,000 silent connections kept a client with a request
//! waiting until the header timeout cut them). A connection in a request (its head or body
//! arriving, its handler running, its answer being written) is never closed for room: with every
//! slot in a request, new clients wait in the kernel's accept queue, as they always did (all
//! but one: a client accepted for an idle connection's slot that turned busy meanwhile waits,
//! accepted, for the next slot to free).
//!
//! Whether a connection is idle is seen at its two ends: [`Watched`] notes the bytes it reads,
//! [`IdleAtEnd`] the end of each response body (hyper drops it once it is written).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// `idle_since` of a connection in a request.
const BUSY: u64 = u64::MAX;

/// `idle_since` of a connection accepted and not yet read from.
const FRESH: u64 = u64::MAX - 1;

/// How long a connection must have waited with nothing arriving to count as idle.
pub const IDLE_GRACE: Duration = Duration::from_millis(100);

/// The open connections, up to a cap.
pub struct Slots {
    permits: Arc<Semaphore>,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Woken whenever a connection turns idle: at the cap, its slot may be taken.
    idled: Arc<Notify>,
    epoch: Instant,
}

/// What the accept loop may do next.
pub enum Room {
    /// A slot is free.
    Free(OwnedSemaphorePermit),
    /// Every slot is taken, some by idle connections: accept, then [`Slots::make_room`].
    Idle,
}

/// One connection's hold on a slot, dropped when the connection ends.
pub struct Slot {
    id: u64,
    slots: Arc<Slots>,
    activity: Arc<Activity>,
    _permit: OwnedSemaphorePermit,
}

/// Whether a connection is idle, and the signal that closes it for room.
pub struct Activity {
    /// Nanoseconds after [`Slots::epoch`] since which it is idle, or [`BUSY`].
    idle_since: AtomicU64,
    epoch: Instant,
    idled: Arc<Notify>,
    evicted: CancellationToken,
}

impl Slots {
    /// Room for `max` connections (at least one).
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            idled: Arc::new(Notify::new()),
            epoch: Instant::now(),
        })
    }

    /// Waits until a slot is free, or one is held by an idle connection.
    pub async fn room(&self) -> Room {
        loop {
            if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
                return Room::Free(permit);
            }
            let wait = match self.oldest_idle() {
                Some((_, 0)) => return Room::Idle,
                Some((_, left)) => Duration::from_nanos(left),
                None => Duration::MAX,
            };
            tokio::select! {
                permit = Arc::clone(&self.permits).acquire_owned() => {
                    return Room::Free(permit.expect("the semaphore is never closed"));
                }
                () = self.idled.notified() => {}
                () = sleep_at_most(wait) => {}
            }
        }
    }

    /// A free slot, closing the connection idle longest to free one when there is none.
    pub async fn make_room(&self) -> OwnedSemaphorePermit {
        loop {
            if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
                return permit;
            }
            let wait = match self.oldest_idle() {
                Some((oldest, 0)) => {
                    tracing::debug!(
                        "closing the connection idle longest to make room for a new one"
                    );
                    oldest.evicted.cancel();
                    Duration::MAX
                }
                Some((_, left)) => Duration::from_nanos(left),
                None => Duration::MAX,
            };
            tokio::select! {
                permit = Arc::clone(&self.permits).acquire_owned() => {
                    return permit.expect("the semaphore is never closed");
                }
                () = self.idled.notified() => {}
                () = sleep_at_most(wait) => {}
            }
        }
    }

    /// Registers a new connection, idle from now, in the slot `permit` holds.
    pub fn take(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        let activity = Arc::new(Activity {
            idle_since: AtomicU64::new(FRESH),
            epoch: self.epoch,
            idled: Arc::clone(&self.idled),
            evicted: CancellationToken::new(),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open
            .lock()
            .expect("poisoned")
            .insert(id, Arc::clone(&activity));
        Slot {
            id,
            slots: Arc::clone(self),
            activity,
            _permit: permit,
        }
    }

    /// The connection idle longest that is not already being closed, and the nanoseconds until
    /// it counts as idle (0 once it does).
    fn oldest_idle(&self) -> Option<(Arc<Activity>, u64)> {
        let open = self.open.lock().expect("poisoned");
        let (since, oldest) = open
            .values()
            .filter(|a| !a.evicted.is_cancelled())
            .map(|a| (a.idle_since.load(Ordering::Acquire), a))
            .filter(|(since, _)| *since < FRESH)
            .min_by_key(|(since, _)| *since)?;
        let counts_from = since.saturating_add(IDLE_GRACE.as_nanos() as u64);
        let left = counts_from.saturating_sub(nanos_since(self.epoch));
        Some((Arc::clone(oldest), left))
    }
}

impl Slot {
    /// The connection's activity, for [`Watched`] and [`IdleAtEnd`].
    pub fn activity(&self) -> Arc<Activity> {
        Arc::clone(&self.activity)
    }

    /// Cancelled when the connection is to close to make room for another.
    pub fn evicted(&self) -> CancellationToken {
        self.activity.evicted.clone()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.open.lock().expect("poisoned").remove(&self.id);
    }
}

/// Waits `wait`, or for ever when it is [`Duration::MAX`].
async fn sleep_at_most(wait: Duration) {
    if wait == Duration::MAX {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(wait).await;
}

fn nanos_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos().min(u128::from(FRESH - 1)) as u64
}

impl Activity {
    fn set_idle(&self) {
        self.idle_since
            .store(nanos_since(self.epoch), Ordering::Release);
        self.idled.notify_one();
    }

    /// A fresh connection found nothing to read: idle from now.
    fn found_nothing(&self) {
        let now = nanos_since(self.epoch);
        if self
            .idle_since
            .compare_exchange(FRESH, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.idled.notify_one();
        }
    }

    fn set_busy(&self) {
        self.idle_since.store(BUSY, Ordering::Release);
    }
}

/// A connection's stream that marks it in a request when bytes arrive.
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    /// `inner`, reporting to `activity`.
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.set_busy();
        } else if read.is_pending() {
            self.activity.found_nothing();
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that marks its connection idle once hyper is done with it.
pub struct IdleAtEnd {
    inner: Body,
    activity: Arc<Activity>,
}

impl IdleAtEnd {
    /// `inner`, reporting to `activity` when dropped.
    pub fn new(inner: Body, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl Drop for IdleAtEnd {
    fn drop(&mut self) {
        self.activity.set_idle();
    }
}

impl HttpBody for IdleAtEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_connection_idle_longest_gives_its_slot_up_and_busy_ones_never() {
        let slots = Slots::new(3);
        let mut held = Vec::new();
        for _ in 0..3 {
            let Room::Free(permit) = slots.room().await else {
                panic!("a free slot");
            };
            held.push(slots.take(permit));
        }
        held[0].activity.set_busy();
        held[1].activity.found_nothing();
        held[2].activity.set_busy();
        held[2].activity.set_idle();
        assert!(matches!(slots.room().await, Room::Idle));
        let waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.make_room().await }
        });
        held[1].evicted().cancelled().await;
        assert!(!held[0].evicted().is_cancelled(), "busy: kept");
        assert!(
            !held[2].evicted().is_cancelled(),
            "idle more recently: kept"
        );
        held.remove(1);
        let permit = waiting.await.unwrap();
        held.push(slots.take(permit));
        held[0].activity.set_idle();
        assert!(matches!(slots.room().await, Room::Idle), "{}", held.len());
    }
}
