//! Storage: one API over PostgreSQL, SQLite and MySQL/MariaDB.
//!
//! [`Store`] is the only way the rest of kurir touches the database (the outbox write excepted,
//! which runs on the application's own transaction in [`crate::outbox`], with its SQL in
//! `enqueue.rs` here). The layout:
//!
//! - `rows.rs`: the row types every dialect decodes into (`sqlx::FromRow`), with `Ts` for
//!   timestamps; `rules.rs`: the pure rules (fan-out targets, next status); `time.rs`: time as
//!   the dialects keep it.
//! - `sql.rs`: `Sql`, one statement's text per dialect, and `query_as_on!`, which runs it on
//!   whichever the store is. The reads that differ only in their SQL are written that way, one
//!   file per concern with the dialects side by side: `records.rs` (endpoints, events,
//!   deliveries, attempts, listings, replays, stats), `subscriber_log.rs` (one subscriber's
//!   deliveries, through its endpoints' index), [`sources`], [`activity`], [`inbox`],
//!   [`replay_preview`], [`waiting`], [`backlog`].
//! - Writes whose steps are the same on every dialect are written once, each step a `Sql`,
//!   with what differs (the transaction's start, how a lost race shows) named per dialect:
//!   `publish.rs` (the API's publishes and their idempotency keys), `endpoint_changes.rs`
//!   (endpoint updates and secret rotations), `tombstones.rs`, `retention.rs`.
//! - [`directory`]: each process's copy of the endpoints, read again only where a row changed
//!   (the relay's fan-out and the dispatcher's claims read it, never the whole table).
//! - [`postgres`], [`sqlite`] and [`mysql`]: the operations whose transactions or locking differ
//!   by dialect (relay, claims, completions, leases, replay), each documenting the locks it
//!   takes.
//!
//! A new dialect adds a field to `Sql`, an arm to `query_as_on!`, `execute_on!` and
//! `on_backend!`, a variant of [`Store`] with its store type and submodules, and `Ts`'s
//! `Type`/`Decode`/`Encode` for it.
//! The conformance tests (`tests/it/store.rs`, `store_admin.rs`, `store_dashboard.rs`) run
//! every public operation on each backend from one body.

pub mod activity;
pub mod admin;
pub mod backlog;
mod born;
pub mod breaker;
pub mod catalog;
mod claims;
mod clock;
mod cursor;
pub mod directory;
mod endpoint_changes;
mod enqueue;
mod event_list;
pub mod inbox;
pub mod inbox_history;
pub mod mysql;
pub mod notify;
mod ordering;
mod outcomes;
mod pool;
pub mod portal;
pub mod postgres;
mod publish;
pub mod rates;
mod records;
mod refusals;
pub mod replay_preview;
pub mod retention;
mod rows;
mod rules;
mod secrets;
pub mod sources;
mod sql;
pub mod sqlite;
mod subscriber_log;
pub mod subscribers;
mod time;
pub mod tokens;
mod tombstones;
mod unavailable;
pub mod waiting;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kurir_core::retry::RetryPolicy;

use crate::delivery::{ClaimedDelivery, Completion};
use crate::endpoint::{Endpoint, EndpointId, NewEndpoint};

pub use admin::{
    DeliveryListItem, DeliveryQuery, EventQuery, IdempotencyKey, PublishItem, Published,
    ReplayFilter, ReplayRecord, ReplayRequest, Stats, StatusCount,
};
pub use backlog::Backlog;
pub use born::{BirthOffer, BornRoom, Relayed};
pub use catalog::PutOutcome;
pub use claims::{Claim, Orphan, OrphanReason, Requeued};
pub(crate) use claims::{ClaimAsk, LeaseEnd, Leased, OrphanLooks};
pub(crate) use endpoint_changes::{bind_endpoint, bind_endpoint_text};
pub use inbox::{InboxCount, InboxListItem, InboxQuery};
pub use mysql::MySqlStore;
pub use postgres::PgStore;
pub use refusals::Rechecked;
pub use replay_preview::ReplayCandidate;
pub use secrets::Sealed;
pub(crate) use secrets::SecretCodec;
pub use sqlite::SqliteStore;
pub(crate) use time::ensure_sqlite_file;
pub use time::{parse_sqlite_ts, sqlite_ts};
pub use tombstones::CANCELLED_ERROR;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database URL is not one kurir can use.
    #[error("unsupported database URL scheme '{0}': use postgres://…, mysql://… or sqlite://…")]
    UnsupportedUrl(String),
    /// The database could not be reached or refused the connection.
    #[error("cannot connect to the {backend} database: {source}")]
    Connect {
        /// `postgres`, `sqlite` or `mysql`.
        backend: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// Applying migrations failed.
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Applying kurir-receiver's inbox migrations failed.
    #[error(transparent)]
    Inbox(#[from] kurir_receiver::StoreError),
    /// A stored value could not be read back (a bug or a hand-edited row).
    #[error("corrupt row in {table}: {message}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What could not be decoded.
        message: String,
    },
    /// A stored secret could not be opened: the wrong key, or a damaged value.
    #[error(transparent)]
    Encryption(#[from] crate::encryption::EncryptionError),
    /// The SQLite database's file system has less room than kurir needs to go on writing.
    #[error(
        "the database's file system has {free_bytes} bytes free, under the {} kurir needs to write",
        sqlite::space::MIN_FREE_BYTES
    )]
    LowOnSpace {
        /// What `statvfs` says an unprivileged writer may still use.
        free_bytes: u64,
    },
    /// Any other database error.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl StoreError {
    /// What a failure to reach `backend`'s database becomes, for `map_err` while connecting.
    fn connecting(backend: &'static str) -> impl Fn(sqlx::Error) -> Self + Copy {
        move |source| Self::Connect { backend, source }
    }
}

/// The result type of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// An event as stored in the outbox.
#[derive(Clone, Debug)]
pub struct StoredEvent {
    /// Outbox row id (the relay's order).
    pub id: i64,
    /// The stable event id.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// Payload version.
    pub version: i32,
    /// Aggregate kind.
    pub aggregate_type: Option<String>,
    /// Aggregate id.
    pub aggregate_id: Option<String>,
    /// When it happened.
    pub occurred_at: DateTime<Utc>,
    /// The payload snapshot, byte-for-byte.
    pub payload: String,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// When the relay fanned it out (`None`: not yet, or see [`StoredEvent::dispatched`]). On
    /// PostgreSQL and SQLite the outbox is append-only: for a row fanned out since migration
    /// 0011 this is when its first delivery was written, by the relay's transaction, and `None`
    /// when it matched no endpoint.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// Whether the relay fanned it out (or migration 0005 refused it).
    pub dispatched: bool,
    /// Why it was refused and never fanned out: a row written before the database enforced the
    /// SQL contract that breaks it (migration 0005 names the rule). `None` for every other row.
    pub refused_reason: Option<String>,
    /// The subscriber it is addressed to.
    pub subscriber_id: Option<String>,
}

/// What the relay's look at the outbox found ([`Store::outbox_look`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxLook {
    /// Rows are ready to fan out.
    pub pending: bool,
    /// How long ago, by the database's clock, a relay batch of any process last ran; `None`
    /// where there is no shared pace (SQLite: one process).
    pub since_move: Option<Duration>,
}

/// What one relay batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayOutcome {
    /// Outbox rows the batch passed: fanned out, or, past the cursor, found marked dispatched
    /// already (see `store::cursor`).
    pub events: usize,
    /// Delivery rows created.
    pub deliveries: usize,
    /// The dispatched rows per event type (they add up to `events`), for metrics.
    pub events_by_type: BTreeMap<String, u64>,
    /// The events the event catalog refused (recorded as refused, never delivered).
    pub refused: Vec<RefusedEvent>,
    /// Events of a deprecated version, per (type, version): delivered, and counted.
    pub deprecated: BTreeMap<(String, i32), u64>,
}

/// An outbox row the relay refused because the event catalog does: the relay logs it, once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedEvent {
    /// The event's id.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// Its version.
    pub version: i32,
    /// Why, without any payload value (the recorded reason quotes the failing values).
    pub masked_reason: String,
}

/// Room this process has for one endpoint in a claim.
#[derive(Clone, Debug)]
pub struct EndpointSlot {
    /// The endpoint (enabled).
    pub endpoint: Arc<Endpoint>,
    /// How many of its deliveries may be claimed now.
    pub limit: u32,
    /// How long the lease on each claimed delivery lasts.
    pub lease: Duration,
}

/// The endpoint that `new` describes, with its id and secret decided.
pub(crate) fn endpoint_from_new(new: NewEndpoint, now: DateTime<Utc>) -> Endpoint {
    Endpoint {
        id: EndpointId::generate(),
        url: new.url,
        description: new.description,
        event_types: new.event_types,
        secret: new
            .secret
            .unwrap_or_else(kurir_core::secret::Secret::generate),
        previous_secrets: Vec::new(),
        enabled: true,
        disabled_reason: None,
        overrides: new.overrides,
        max_in_flight: new
            .max_in_flight
            .unwrap_or(crate::endpoint::DEFAULT_MAX_IN_FLIGHT),
        rate_limit_per_second: new.rate_limit_per_second,
        ordering: new.ordering,
        ordering_on_dead_letter: new.ordering_on_dead_letter,
        subscriber_id: new.subscriber_id,
        created_at: now,
        updated_at: now,
    }
}

/// The store: PostgreSQL or MySQL/MariaDB for production, SQLite embedded.
#[derive(Clone, Debug)]
pub enum Store {
    /// PostgreSQL, shared by any number of kurir processes.
    Postgres(PgStore),
    /// SQLite, one kurir process per file.
    Sqlite(SqliteStore),
    /// MySQL (8.0.16 or later) or MariaDB (10.6 or later), shared by any number of kurir
    /// processes.
    Mysql(MySqlStore),
}

macro_rules! on_backend {
    ($self:expr, $s:ident => $body:expr) => {
        match $self {
            Store::Postgres($s) => $body,
            Store::Sqlite($s) => $body,
            Store::Mysql($s) => $body,
        }
    };
}
pub(crate) use on_backend;

impl Store {
    /// Connects to `url` (`postgres://…`, `postgresql://…`, `mysql://…`, `mariadb://…` or
    /// `sqlite://…`). A missing SQLite file and its directory are created.
    pub async fn connect(url: &str) -> Result<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(PgStore::connect(url).await?))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Ok(Self::Mysql(MySqlStore::connect(url).await?))
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite(SqliteStore::connect(url).await?))
        } else {
            // Only the scheme: the rest of a URL may hold a password.
            let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
            Err(StoreError::UnsupportedUrl(
                scheme.chars().take(32).collect(),
            ))
        }
    }

    /// `postgres`, `sqlite` or `mysql`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
            Self::Mysql(_) => "mysql",
        }
    }

    /// Applies the embedded migrations, kurir-receiver's inbox migrations included; a no-op when
    /// they are already applied.
    pub async fn migrate(&self) -> Result<()> {
        // kurir-receiver keeps its own migrations (versions from 1000) in the same
        // `_sqlx_migrations` table; each migrator ignores the other's versions. Running both
        // keeps kurir_inbox as the receiver expects it, whichever created it first.
        let mut migrator = match self {
            Self::Postgres(_) => sqlx::migrate!("./migrations/postgres"),
            Self::Sqlite(_) => sqlx::migrate!("./migrations/sqlite"),
            Self::Mysql(_) => sqlx::migrate!("./migrations/mysql"),
        };
        migrator.set_ignore_missing(true);
        on_backend!(self, s => migrator.run(s.pool()).await)?;
        self.inbox().migrate().await?;
        Ok(())
    }

    /// The inbox gateway's table, `kurir_inbox`, on the same connection pool.
    pub fn inbox(&self) -> kurir_receiver::Inbox {
        match self {
            Self::Postgres(s) => kurir_receiver::Inbox::from(s.pool().clone()),
            Self::Sqlite(s) => kurir_receiver::Inbox::from(s.pool().clone()),
            Self::Mysql(s) => kurir_receiver::Inbox::from(s.pool().clone()),
        }
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        on_backend!(self, s => s.close().await)
    }

    /// Whether the database answers (readiness).
    pub async fn ping(&self) -> Result<()> {
        on_backend!(self, s => sqlx::query("SELECT 1").execute(s.pool()).await.map(drop))?;
        Ok(())
    }

    /// Whether the database takes a write (readiness, after [`Store::ping`]). SQLite: room on
    /// its file system and a one-row write that must reach the disk, since kurir's own file
    /// system filling up is the way it stops taking writes while still answering reads (see
    /// `SqliteStore::probe_write`). PostgreSQL and MySQL: nothing more than the ping; a server
    /// short of space refuses the writes themselves with `503`, and its own monitoring
    /// watches its disk, where a probe here would take row locks the relay and claims use.
    pub async fn probe_write(&self) -> Result<()> {
        match self {
            Self::Sqlite(s) => s.probe_write().await,
            Self::Postgres(_) | Self::Mysql(_) => Ok(()),
        }
    }

    /// Stores a new endpoint, generating its id and (unless given) its secret.
    pub async fn create_endpoint(&self, new: NewEndpoint) -> Result<Endpoint> {
        let mut endpoint = endpoint_from_new(new, self.clock().now_millis());
        let created_at = on_backend!(self, s => s.insert_endpoint(&endpoint).await)?;
        endpoint.created_at = created_at;
        endpoint.updated_at = created_at;
        Ok(endpoint)
    }

    /// Fans out up to `limit` outbox rows not yet fanned out: one delivery per matching enabled
    /// endpoint created no later than the event, and records that the rows were (PostgreSQL and
    /// SQLite: moves the relay's cursor past them, see `store::cursor`; MySQL: marks them
    /// dispatched), in one transaction. Safe to run in several processes at once.
    pub async fn relay_batch(&self, limit: u32) -> Result<RelayOutcome> {
        if !self.outbox_pending().await? {
            return Ok(RelayOutcome::default());
        }
        Ok(self.relay_batch_born(limit, None, None).await?.outcome)
    }

    /// Whether the outbox has rows ready to fan out: what an idle relay looks at, one index
    /// probe (no transaction, no lock).
    pub async fn outbox_pending(&self) -> Result<bool> {
        Ok(self.outbox_look().await?.pending)
    }

    /// [`Store::outbox_pending`], with how long ago the installation's last relay batch ran
    /// (the relay's pace, see [`crate::relay`]), in the same statement.
    pub async fn outbox_look(&self) -> Result<OutboxLook> {
        on_backend!(self, s => s.outbox_look().await)
    }

    /// [`Store::relay_batch`] without its look at [`Store::outbox_pending`], inserting the
    /// deliveries `offer` has room for born claimed (asked once the batch knows its
    /// endpoints): already leased to the room's owner as
    /// [`Store::claim_due_deliveries`] would lease them, and returned in [`Relayed::born`] (see
    /// `store::born`). Keyed deliveries are never born claimed.
    ///
    /// With a `pace`, the batch runs only if no batch of any process moved the cursor within
    /// it, checked under the lock the batch takes (PostgreSQL's cursor row, MySQL's
    /// `kurir_relay_pace` row; SQLite has one process and no pace): otherwise it relays nothing.
    pub async fn relay_batch_born(
        &self,
        limit: u32,
        offer: Option<&mut dyn BirthOffer>,
        pace: Option<Duration>,
    ) -> Result<Relayed> {
        let checks = self.event_checks().await?;
        on_backend!(self, s => s.relay_batch(limit, offer, &checks, pace).await)
    }

    /// Leases due deliveries for `owner`: at most `slot.limit` per endpoint and `limit` in all,
    /// each for its slot's lease (see [`ClaimedDelivery::lease_deadline`]). Each claimed row's
    /// `attempt_count` is incremented: it is the number of the attempt about to be made, and
    /// the fence its completion must match.
    ///
    /// Only deliveries whose event exists are claimed, so one whose outbox row was deleted by
    /// hand never takes a claim's place; those the claim reads past are removed, with their
    /// attempts, and returned as [`Claim::orphans`] (not at every claim: at most every second
    /// while none are found).
    pub async fn claim_due_deliveries(
        &self,
        owner: &str,
        slots: &[EndpointSlot],
        limit: u32,
    ) -> Result<Claim> {
        if slots.is_empty() || limit == 0 {
            return Ok(Claim::default());
        }
        let ask = ClaimAsk {
            owner,
            slots,
            limit,
            sent_at: tokio::time::Instant::now(),
        };
        on_backend!(self, s => s.claim_due_deliveries(ask).await)
    }

    /// Removes, with their attempts, up to `limit` deliveries of endpoints that no longer exist
    /// (deleted by hand; [`Store::delete_endpoint`] keeps a tombstone, whose deliveries are no
    /// orphans).
    /// Their endpoint ids are found by skipping through an index, so the cost follows the
    /// number of endpoints, not of deliveries.
    pub async fn remove_deliveries_of_deleted_endpoints(&self, limit: u32) -> Result<Vec<Orphan>> {
        on_backend!(self, s => s.remove_deliveries_of_deleted_endpoints(limit).await)
    }

    /// Records attempts and moves their deliveries on, in one transaction. The fence: a
    /// delivery moves on only if its last lease is `owner`'s at that attempt number, whether
    /// still held or taken back since by the sweep or the shutdown release (which keep the
    /// owner, so an outcome held up by an unreachable database is not lost). A delivery claimed
    /// again since, by anyone, is left alone (its attempt is still recorded); the number of
    /// such fenced-out completions is returned.
    pub async fn complete_deliveries(&self, owner: &str, done: &[Completion]) -> Result<u64> {
        if done.is_empty() {
            return Ok(0);
        }
        on_backend!(self, s => s.complete_deliveries(owner, done).await)
    }

    /// Gives back leases of deliveries `owner` claimed and never attempted (they could not
    /// start within their lease, or the process is shutting down): un-leased, due again where
    /// they were in the queue, and not charged an attempt (`attempt_count` goes back by one).
    /// Fenced like a completion: a lease no longer `owner`'s at that attempt number is left
    /// alone. Returns how many were given back.
    pub async fn hand_back(&self, owner: &str, deliveries: &[ClaimedDelivery]) -> Result<u64> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        on_backend!(self, s => s.hand_back(owner, deliveries).await)
    }

    /// Ends every lease `owner` still holds at shutdown, after its attempts in flight were
    /// recorded: what is left may have been attempted without being recorded, so each counts
    /// as an attempt, as an expired lease does (see [`Store::sweep_expired_leases`]).
    pub async fn release_leases(&self, owner: &str, defaults: &RetryPolicy) -> Result<Requeued> {
        let owner = Some(owner);
        on_backend!(self, s => s.requeue(LeaseEnd { owner, defaults }).await)
    }

    /// Ends the leases that expired (their worker died; the attempt may have been made): each
    /// counts as an attempt, so the delivery is due again after the retry backoff, or
    /// dead-lettered if that was its endpoint's last attempt. The endpoint's overrides apply,
    /// else `defaults`. The lease owner stays on the row until the next claim, so a worker that
    /// was only cut off from the database still records its outcome (see
    /// [`Store::complete_deliveries`]). Safe to run in every process at once.
    pub async fn sweep_expired_leases(&self, defaults: &RetryPolicy) -> Result<Requeued> {
        let owner = None;
        on_backend!(self, s => s.requeue(LeaseEnd { owner, defaults }).await)
    }
}
