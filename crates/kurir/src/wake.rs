//! Wake-ups and idle polling: how work that kurir creates reaches the loop that handles it at
//! once, and how rarely an idle process looks for work nobody announced.
//!
//! - **In the process**, a [`Wake`] wakes its loop in memory: a publish wakes the relay, the
//!   relay's new deliveries and a replay wake the dispatcher.
//! - **Across processes** sharing a PostgreSQL database, the same [`Wake`] asks the
//!   [`Announcer`] for a `NOTIFY` on its channel, and every process [`listen`]s. The
//!   notification is sent after the work's transaction committed, in a transaction of its own:
//!   PostgreSQL serialises the commits of notifying transactions, so a `NOTIFY` inside a write
//!   transaction would make each such commit wait for the one before. Requests are coalesced to
//!   at most one `NOTIFY` statement every [`ANNOUNCE_GAP`], the first at once.
//! - **Across processes sharing MySQL or MariaDB**, which have no notifications, by polling: a
//!   wake-up reaches only its own process, and the others find the work at their next look (the
//!   same idle polling as below). A relay that finds another process's batch within the pace,
//!   or its rows taken, wakes its own dispatcher (`crate::relay`); and while work is flowing a
//!   dispatcher looks at least every `LOOK_INTERVAL` of `crate::dispatch`, however long its idle
//!   wait has grown.
//! - **Everything else is found by polling**: an application's plain `INSERT` (it sends no
//!   notification: a trigger would serialise the application's commits), retries coming due,
//!   expired leases, a notification lost while a connection was down. Each loop's wait grows
//!   while it finds nothing ([`IdlePoll`](kurir_core::IdlePoll)), up to its slowest
//!   ([`RELAY_SLOWEST_POLL`], [`DISPATCHER_SLOWEST_POLL`], [`INBOX_SLOWEST_POLL`]), and returns
//!   to its configured interval as soon as it finds work.
//!
//! An idle process so costs a few statements a second: the relay's look at the outbox, the
//! dispatcher's read of the endpoints' change number and its look for endpoints with due
//! deliveries (a claim only when it found some), the inbox runner's claim (with inbox
//! sources), each at its slowest poll, plus the lease sweep ([`crate::dispatch::sweep::SWEEP_INTERVAL`]) and the
//! gateway's read of its sources.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::store::Store;

/// The relay's longest idle wait: the latest a plain SQL insert made after a long quiet spell
/// is fanned out. Below 1 s, so that event reaches its endpoint within a second.
pub const RELAY_SLOWEST_POLL: Duration = Duration::from_millis(800);

/// The dispatcher's longest idle wait: how late, at most, a retry comes due on an idle
/// process, or a delivery whose notification was lost is claimed.
pub const DISPATCHER_SLOWEST_POLL: Duration = Duration::from_secs(2);

/// The inbox gateway runner's longest idle wait (accepted events wake it at once; this bounds
/// how late a forward's retry starts on an idle process).
pub const INBOX_SLOWEST_POLL: Duration = Duration::from_secs(2);

/// The shortest time between two `NOTIFY` statements of one process; each carries every channel
/// asked for meanwhile.
pub const ANNOUNCE_GAP: Duration = Duration::from_millis(50);

/// A channel processes announce work on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// New outbox rows (a publish): wakes relays.
    Outbox,
    /// New due deliveries (a relay batch, a replay): wakes dispatchers.
    Deliveries,
}

impl Channel {
    /// The PostgreSQL channel name.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Outbox => "kurir_outbox",
            Channel::Deliveries => "kurir_deliveries",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Channel::Outbox, Channel::Deliveries]
            .into_iter()
            .find(|c| c.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Wakes one loop of this process and, when announced, the same loop of every other process.
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct Wake {
    local: Arc<Notify>,
    channel: Channel,
    announcer: Option<Announcer>,
}

impl Wake {
    /// A wake-up for this process's loop of `channel` only.
    pub fn new(channel: Channel) -> Self {
        Self {
            local: Arc::new(Notify::new()),
            channel,
            announcer: None,
        }
    }

    /// The same wake-up, also announced to other processes through `announcer`.
    pub fn announced_by(self, announcer: &Announcer) -> Self {
        Self {
            announcer: Some(announcer.clone()),
            ..self
        }
    }

    /// Work exists (its transaction has committed): wakes this process's loop, and asks for a
    /// notification to the others. Never waits.
    pub fn wake(&self) {
        self.local.notify_one();
        if let Some(announcer) = &self.announcer {
            announcer.request(self.channel);
        }
    }

    /// Wakes this process's loop only (a notification from another process arrived).
    pub fn wake_here(&self) {
        self.local.notify_one();
    }

    /// Wakes this process's loop only when other processes' wake-ups cannot reach it (no
    /// announcer sends: MySQL and MariaDB have no notifications), for work another process made
    /// that this one noticed: on PostgreSQL that process's own `NOTIFY` wakes this one already.
    pub fn wake_here_if_unannounced(&self) {
        if !self.announcer.as_ref().is_some_and(Announcer::sends) {
            self.local.notify_one();
        }
    }

    /// Resolves at the next wake-up, or at once if one came since the last wait.
    pub async fn notified(&self) {
        self.local.notified().await
    }

    /// The in-memory wake-up the loop waits on.
    pub fn handle(&self) -> Arc<Notify> {
        self.local.clone()
    }
}

/// This process's wake-ups of its relay and its dispatcher, and the announcer that carries them
/// to other processes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Wakes {
    /// Wakes the relays: an event was published.
    pub relay: Wake,
    /// Wakes the dispatchers: deliveries were created or replayed.
    pub dispatcher: Wake,
    announcer: Announcer,
}

impl Wakes {
    /// Wake-ups announced to other processes, once [`Wakes::spawn`] runs.
    pub fn announced() -> Self {
        let announcer = Announcer::new();
        Self {
            relay: Wake::new(Channel::Outbox).announced_by(&announcer),
            dispatcher: Wake::new(Channel::Deliveries).announced_by(&announcer),
            announcer,
        }
    }

    /// On PostgreSQL, starts sending this process's notifications, signed `me`, and listening
    /// for the others', on `tasks` until `shutdown`. On SQLite (one process), nothing.
    pub fn spawn(
        &self,
        tasks: &TaskTracker,
        store: &Store,
        me: &str,
        shutdown: &CancellationToken,
    ) {
        let Store::Postgres(pg) = store else {
            return;
        };
        let (me, stop) = (me.to_owned(), shutdown.clone());
        tasks.spawn(self.announcer.clone().run(store.clone(), me.clone(), stop));
        let (relay, dispatcher) = (self.relay.clone(), self.dispatcher.clone());
        tasks.spawn(listen(
            pg.pool().clone(),
            me,
            relay,
            dispatcher,
            shutdown.clone(),
        ));
    }
}

/// Sends this process's notifications: coalesced, after commit, never on a request's path.
/// Cheap to clone; [`Announcer::run`] does the sending.
#[derive(Clone, Debug, Default)]
pub struct Announcer {
    inner: Arc<Requests>,
}

#[derive(Debug, Default)]
struct Requests {
    pending: [AtomicBool; 2],
    kick: Notify,
    /// Set once [`Announcer::run`] sends: other processes hear of this one's work.
    running: AtomicBool,
}

impl Announcer {
    /// Whether [`Announcer::run`] runs: every process sharing the database hears of this one's
    /// work (PostgreSQL only).
    pub fn sends(&self) -> bool {
        self.inner.running.load(Ordering::Relaxed)
    }

    /// An announcer; nothing is sent until [`Announcer::run`].
    pub fn new() -> Self {
        Self::default()
    }

    fn request(&self, channel: Channel) {
        self.inner.pending[channel.index()].store(true, Ordering::Release);
        self.inner.kick.notify_one();
    }

    fn take(&self) -> Vec<&'static str> {
        [Channel::Outbox, Channel::Deliveries]
            .into_iter()
            .filter(|c| self.inner.pending[c.index()].swap(false, Ordering::AcqRel))
            .map(Channel::name)
            .collect()
    }

    /// Sends what was requested, signed `sender` (so this process ignores its own), at most once
    /// per channel every [`ANNOUNCE_GAP`], until `shutdown`. A failed send is dropped: the
    /// other processes' polling finds the work.
    pub async fn run(self, store: Store, sender: String, shutdown: CancellationToken) {
        self.inner.running.store(true, Ordering::Relaxed);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.inner.kick.notified() => {}
            }
            let channels = self.take();
            if channels.is_empty() {
                continue;
            }
            if let Err(e) = store.notify(&channels, &sender).await {
                tracing::debug!(error = %e, "notifying other processes failed; they will find the work by polling");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(ANNOUNCE_GAP) => {}
            }
        }
    }
}

/// Listens on every [`Channel`] until `shutdown`, waking this process's `relay` or `dispatcher`
/// for each notification another process (any `sender` but `me`) sent. Reconnects after a
/// lost connection, waiting a little longer each time (at most 5 s); after each reconnection
/// both loops look once, for what was announced meanwhile.
pub async fn listen(
    pool: PgPool,
    me: String,
    relay: Wake,
    dispatcher: Wake,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(250);
    while !shutdown.is_cancelled() {
        match listen_once(&pool, &me, &relay, &dispatcher, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN failed; the relay and the dispatcher rely on polling until it reconnects")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn listen_once(
    pool: &PgPool,
    me: &str,
    relay: &Wake,
    dispatcher: &Wake,
    shutdown: &CancellationToken,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all([Channel::Outbox.name(), Channel::Deliveries.name()])
        .await?;
    loop {
        let received = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            received = listener.try_recv() => received?,
        };
        let Some(notification) = received else {
            // The connection was lost; the next `try_recv` reconnects. Whatever was announced
            // meanwhile is gone: look once.
            relay.wake_here();
            dispatcher.wake_here();
            continue;
        };
        if notification.payload() == me {
            continue;
        }
        match Channel::from_name(notification.channel()) {
            Some(Channel::Outbox) => relay.wake_here(),
            Some(Channel::Deliveries) => dispatcher.wake_here(),
            None => {}
        }
    }
}
