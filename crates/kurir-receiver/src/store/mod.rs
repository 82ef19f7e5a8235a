//! The inbox store: `kurir_inbox` on PostgreSQL, SQLite or MySQL/MariaDB, behind one [`Inbox`]
//! handle.
//!
//! Owns every SQL statement that reads or writes the table (kurir's operator pages list it through
//! [`Inbox::list`], [`Inbox::find`] and [`Inbox::counts`]) and the migrations that create it. A
//! statement whose dialects differ only in text is written once per dialect side by side in
//! `sql.rs` and run by kurir-sql's runner; the claim, whose shape differs, has one implementation
//! per backend (`postgres.rs`, `sqlite.rs`, `mysql.rs`); each with a doc line on its locking. This
//! file composes them ([`Inbox::receive`] is insert, then read on a conflict) and turns rows into
//! the crate's types. Deciding *when* to claim or retry is the [`Runner`](crate::Runner)'s and the
//! [`Processor`](crate::Processor)'s job, not the store's.
//!
//! Rows move `pending` → `processing` (leased: `lease_owner`, `lease_expires_at`, `attempts` + 1) →
//! `completed` | `failed`. A completion is fenced on `(lease_owner, attempts)`, so a worker whose lease
//! expired and was taken over cannot overwrite the new owner's result. A lease that expires (its
//! worker died) makes the row claimable again. A `failed` row whose attempts are exhausted keeps
//! `available_at` at year 9999 ("never") until [`Inbox::retry_now`].

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod row;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::event::{EventRecord, InboxEvent, InboxStatus, VerifiedEvent};
use row::{now_millis, Claim, NewRow};

/// Why an inbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Applying the inbox migrations failed.
    #[error("inbox migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value could not be read back (a hand-edited row, or a bug).
    #[error("corrupt kurir_inbox row for event {event_id}: {message}")]
    Corrupt {
        /// The row's event id.
        event_id: String,
        /// What could not be decoded.
        message: String,
    },
    /// An insert met an existing row that was gone when read: something deletes inbox rows
    /// concurrently.
    #[error("kurir_inbox row for event {event_id} conflicted on insert but vanished before it could be read")]
    Vanished {
        /// The event id.
        event_id: String,
    },
    /// Any other database error.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl StoreError {
    /// Whether the database is away or refusing work for now ([`database_unavailable`]): worth
    /// retrying later, and no fault of the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Database(e) if database_unavailable(e))
    }
}

/// Whether `e` means the database cannot do the work for now, for a reason of its own rather than
/// the statement's or the data's: no connection (pool timeout, refused, reset, TLS), the server
/// shutting down, starting up, out of connections, memory or space, or a transaction that lost a
/// conflict; SQLite busy or locked past its busy timeout. The same work may succeed later, so
/// such errors are answered `503` with `Retry-After` and kurir's own writes retry them.
pub fn database_unavailable(e: &sqlx::Error) -> bool {
    use sqlx::Error as E;
    match e {
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::PoolTimedOut | E::PoolClosed => true,
        E::WorkerCrashed => true,
        E::Database(db) if mysql_unavailable(db.as_ref()) => true,
        E::Database(db) => db.code().is_some_and(|code| match code.len() {
            // A SQLSTATE (five characters: PostgreSQL's, or the one MySQL gives beside its error
            // number), by class: connection exception, insufficient resources, operator intervention, system error, transaction rollback
            // (serialisation, deadlock), object not in prerequisite state (lock not available),
            // invalid authorisation, unknown database, internal error.
            5 => ["08", "53", "57", "58", "40", "55", "28", "3D", "XX"]
                .iter()
                .any(|class| code.starts_with(class)),
            // A SQLite result code (the primary code is the low byte of an extended one): BUSY,
            // LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL.
            _ => code
                .parse::<i32>()
                .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14 | 15)),
        }),
        _ => false,
    }
}

/// MySQL's and MariaDB's own error numbers for "not now" that share the catch-all SQLSTATE
/// `HY000` with errors of the statement: a lock wait timed out (1205), the server is read-only
/// (1290, 1836), out of memory (1037, 1038) or of disk (1021).
#[cfg(feature = "mysql")]
fn mysql_unavailable(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|e| matches!(e.number(), 1205 | 1290 | 1836 | 1037 | 1038 | 1021))
}

#[cfg(not(feature = "mysql"))]
fn mysql_unavailable(_: &dyn sqlx::error::DatabaseError) -> bool {
    false
}

/// The result type of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The inbox table in one database. Cheap to clone (it holds a connection pool).
///
/// For SQLite, open the pool in WAL mode with a busy timeout (see the crate docs): claims and inserts
/// from several tasks then wait for the write lock instead of failing.
#[derive(Clone, Debug)]
pub enum Inbox {
    /// PostgreSQL, which any number of processes may share.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// SQLite, one process per database file.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    /// MySQL (8.0.16 or later) or MariaDB (10.6 or later), which any number of processes may
    /// share. Its sessions must use the time zone `+00:00` (sqlx's default).
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlPool),
}

#[cfg(feature = "postgres")]
impl From<sqlx::PgPool> for Inbox {
    fn from(pool: sqlx::PgPool) -> Inbox {
        Inbox::Postgres(pool)
    }
}

#[cfg(feature = "sqlite")]
impl From<sqlx::SqlitePool> for Inbox {
    fn from(pool: sqlx::SqlitePool) -> Inbox {
        Inbox::Sqlite(pool)
    }
}

#[cfg(feature = "mysql")]
impl From<sqlx::MySqlPool> for Inbox {
    fn from(pool: sqlx::MySqlPool) -> Inbox {
        Inbox::Mysql(pool)
    }
}

/// Runs one backend function with the pool as first argument.
macro_rules! on_backend {
    ($inbox:expr, $function:ident ( $($arg:expr),* $(,)? )) => {
        match $inbox {
            #[cfg(feature = "postgres")]
            Inbox::Postgres(pool) => postgres::$function(pool, $($arg),*).await,
            #[cfg(feature = "sqlite")]
            Inbox::Sqlite(pool) => sqlite::$function(pool, $($arg),*).await,
            #[cfg(feature = "mysql")]
            Inbox::Mysql(pool) => mysql::$function(pool, $($arg),*).await,
        }
    };
}

/// What storing a verified event found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    /// First receipt: the row was created (and is durable: the statement has committed).
    New(EventRecord),
    /// The `(source, event_id)` was already stored; this is its current state.
    Duplicate(EventRecord),
}

impl Receipt {
    /// The stored row, new or not.
    pub fn record(&self) -> &EventRecord {
        match self {
            Receipt::New(record) | Receipt::Duplicate(record) => record,
        }
    }
}

/// An event leased to one worker for one attempt. The lease is the fence its completion must match.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    row_id: i64,
    owner: String,
    /// The event, with `attempt` the number of the attempt this lease is for.
    pub event: InboxEvent,
}

/// How an attempt ended, as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The handler succeeded.
    Completed,
    /// The handler failed; try again at `at`.
    Retry {
        /// When the event becomes due again.
        at: DateTime<Utc>,
        /// What the handler reported.
        error: String,
    },
    /// The handler failed and no attempts are left: `failed` until [`Inbox::retry_now`].
    GiveUp {
        /// What the handler reported.
        error: String,
    },
}

/// Whether a completion was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The lease was still ours; the row moved on.
    Recorded,
    /// The lease had expired and another worker claimed the event; nothing was written.
    LeaseLost,
}

/// What [`Inbox::retry_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryNow {
    /// The failed event is due now, with a fresh set of attempts.
    Scheduled,
    /// No such event.
    NotFound,
    /// The event is not `failed`; nothing changed.
    NotFailed(InboxStatus),
}

/// Filters of [`Inbox::list`]; every `None` matches all.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// The source (required).
    pub source: String,
    /// Exact status.
    pub status: Option<InboxStatus>,
    /// Exact event type.
    pub event_type: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
    /// Only rows with a smaller row id (the cursor of the next page).
    pub before_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

/// One stored event with its row id, the order of [`Inbox::list`] and its cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The row id.
    pub id: i64,
    /// The event's state.
    pub record: EventRecord,
}

/// The events of one source in one status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceCount {
    /// The source.
    pub source: String,
    /// The status.
    pub status: InboxStatus,
    /// How many.
    pub count: i64,
    /// When the oldest of them was received.
    pub oldest_created_at: Option<DateTime<Utc>>,
}

impl Inbox {
    /// Creates `kurir_inbox` and its indexes if missing (see [`migrate_postgres`] and
    /// [`migrate_sqlite`]).
    pub async fn migrate(&self) -> Result<()> {
        sql::migrate(self).await
    }

    /// Closes the connection pool, waiting for connections in use to be returned (at shutdown).
    pub async fn close(&self) {
        match self {
            #[cfg(feature = "postgres")]
            Inbox::Postgres(pool) => pool.close().await,
            #[cfg(feature = "sqlite")]
            Inbox::Sqlite(pool) => pool.close().await,
            #[cfg(feature = "mysql")]
            Inbox::Mysql(pool) => pool.close().await,
        }
    }

    /// Stores `event` once per `(source, event_id)`: the first call creates a `pending` row, every
    /// later one (concurrent ones included) reports the existing row untouched.
    pub async fn receive(&self, event: &VerifiedEvent) -> Result<Receipt> {
        Ok(self.insert_or_get(event, None).await?.0)
    }

    /// Like [`Inbox::receive`], but a new row is created already leased to `owner` for attempt 1,
    /// for processing inline; a duplicate is left alone.
    pub(crate) async fn receive_claimed(
        &self,
        event: &VerifiedEvent,
        owner: &str,
        lease: Duration,
    ) -> Result<(Receipt, Option<ClaimedEvent>)> {
        let (receipt, row_id) = self.insert_or_get(event, Some((owner, lease))).await?;
        let claimed = match &receipt {
            Receipt::New(record) => Some(inline_claim(event, record, row_id, owner)),
            Receipt::Duplicate(_) => None,
        };
        Ok((receipt, claimed))
    }

    /// Insert, and on a conflict read the row that won; also returns the row id. Two statements and
    /// no transaction: under READ COMMITTED a conflicting insert waits for the winner to commit, so
    /// the read that follows sees it.
    async fn insert_or_get(
        &self,
        event: &VerifiedEvent,
        claim: Option<(&str, Duration)>,
    ) -> Result<(Receipt, i64)> {
        let new = NewRow::new(event, claim, now_millis());
        // A second round only if the conflicting row was deleted between the two statements.
        for _ in 0..2 {
            if let Some(row) = sql::insert_event(self, &new).await? {
                let id = row.id;
                return Ok((Receipt::New(row.into_record()?), id));
            }
            if let Some(row) = sql::get_event(self, new.source, new.event_id).await? {
                let id = row.id;
                return Ok((Receipt::Duplicate(row.into_record()?), id));
            }
        }
        Err(StoreError::Vanished {
            event_id: new.event_id.to_owned(),
        })
    }

    /// The state of one event, if stored.
    pub async fn status(&self, source: &str, event_id: &str) -> Result<Option<EventRecord>> {
        sql::get_event(self, source, event_id)
            .await?
            .map(row::RecordRow::into_record)
            .transpose()
    }

    /// One source's events matching `q`, newest first (for an operator's listing; a page's last
    /// `id` is the next page's `before_id`).
    pub async fn list(&self, q: &ListQuery) -> Result<Vec<Listed>> {
        let rows = sql::list(self, q).await?;
        rows.into_iter().map(row::RecordRow::into_listed).collect()
    }

    /// [`Inbox::status`] with the event's row id.
    pub async fn find(&self, source: &str, event_id: &str) -> Result<Option<Listed>> {
        sql::get_event(self, source, event_id)
            .await?
            .map(row::RecordRow::into_listed)
            .transpose()
    }

    /// How many events each source has per status, and when the oldest was received.
    pub async fn counts(&self) -> Result<Vec<SourceCount>> {
        let rows = sql::counts(self).await?;
        rows.into_iter().map(row::CountRow::into_count).collect()
    }

    /// Leases up to `limit` due events to `owner` for `lease`: `pending` ones, `failed` ones whose
    /// `available_at` has come, and `processing` ones whose lease expired. Each claimed row's
    /// `attempts` is incremented and `last_attempt_at` set: the attempt starts now. With `source`,
    /// only that source's events are claimed.
    pub async fn claim_due(
        &self,
        owner: &str,
        lease: Duration,
        limit: u32,
        source: Option<&str>,
    ) -> Result<Vec<ClaimedEvent>> {
        let one = source.map(|name| [name.to_owned()]);
        self.claim(owner, lease, limit, one.as_ref().map(|one| &one[..]))
            .await
    }

    /// [`Inbox::claim_due`] for the events of any of `sources` (none: nothing is claimed).
    pub async fn claim_due_among(
        &self,
        owner: &str,
        lease: Duration,
        limit: u32,
        sources: &[String],
    ) -> Result<Vec<ClaimedEvent>> {
        if sources.is_empty() {
            return Ok(Vec::new());
        }
        self.claim(owner, lease, limit, Some(sources)).await
    }

    async fn claim(
        &self,
        owner: &str,
        lease: Duration,
        limit: u32,
        sources: Option<&[String]>,
    ) -> Result<Vec<ClaimedEvent>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = now_millis();
        let claim = Claim {
            owner,
            now,
            lease_until: row::later(now, lease),
            limit,
            sources,
        };
        let rows = on_backend!(self, claim_due(&claim))?;
        Ok(rows.into_iter().map(|r| r.into_claimed(owner)).collect())
    }

    /// Records how `claimed`'s attempt ended and releases its lease, unless the lease was lost.
    pub async fn complete(&self, claimed: &ClaimedEvent, completion: &Completion) -> Result<Fence> {
        let columns = row::completion_columns(completion, now_millis());
        let fence = (
            claimed.row_id,
            claimed.owner.as_str(),
            claimed.event.attempt,
        );
        let done = sql::complete(self, fence, columns, now_millis()).await?;
        Ok(if done {
            Fence::Recorded
        } else {
            Fence::LeaseLost
        })
    }

    /// Makes a `failed` event due now with its attempt count reset, so the runner gives it a full
    /// new set of attempts (for an operator, once the cause is fixed). `last_error` and
    /// `last_attempt_at` keep the previous values until the next attempt.
    pub async fn retry_now(&self, source: &str, event_id: &str) -> Result<RetryNow> {
        if sql::reschedule_failed(self, source, event_id, now_millis()).await? {
            return Ok(RetryNow::Scheduled);
        }
        Ok(match self.status(source, event_id).await? {
            None => RetryNow::NotFound,
            Some(record) => RetryNow::NotFailed(record.status),
        })
    }
}

/// The lease a [`Inbox::receive_claimed`] insert created, as a [`ClaimedEvent`].
fn inline_claim(
    event: &VerifiedEvent,
    record: &EventRecord,
    row_id: i64,
    owner: &str,
) -> ClaimedEvent {
    ClaimedEvent {
        row_id,
        owner: owner.to_owned(),
        event: InboxEvent {
            source: event.source.clone(),
            event_id: event.event_id.as_str().to_owned(),
            event_type: event.event_type.clone(),
            payload: event.payload.clone(),
            headers: event.headers.clone(),
            idempotency_key: event.idempotency_key.clone(),
            attempt: record.attempts,
            received_at: record.created_at,
        },
    }
}

/// Creates `kurir_inbox` in a PostgreSQL database, if missing.
///
/// The migrations (versions from 1000 on, `CREATE … IF NOT EXISTS`, the same definition kurir's own
/// schema has) share sqlx's `_sqlx_migrations` table with any other migrator of the database, so
/// they run with `ignore_missing`: versions applied by another migrator are not an error.
#[cfg(feature = "postgres")]
pub async fn migrate_postgres(pool: &sqlx::PgPool) -> Result<()> {
    Inbox::Postgres(pool.clone()).migrate().await
}

/// Creates `kurir_inbox` in a SQLite database, if missing. See [`migrate_postgres`].
#[cfg(feature = "sqlite")]
pub async fn migrate_sqlite(pool: &sqlx::SqlitePool) -> Result<()> {
    Inbox::Sqlite(pool.clone()).migrate().await
}

/// Creates `kurir_inbox` in a MySQL or MariaDB database, if missing. See [`migrate_postgres`];
/// MySQL commits each DDL statement on its own, so a migration cut short stays half applied.
#[cfg(feature = "mysql")]
pub async fn migrate_mysql(pool: &sqlx::MySqlPool) -> Result<()> {
    Inbox::Mysql(pool.clone()).migrate().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_database_is_unavailable_and_a_bad_statement_is_not() {
        assert!(database_unavailable(&sqlx::Error::PoolTimedOut));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(database_unavailable(&sqlx::Error::Io(refused)));
        assert!(!database_unavailable(&sqlx::Error::RowNotFound));
        assert!(!database_unavailable(&sqlx::Error::ColumnNotFound(
            "x".into()
        )));
    }
}
