//! The statements whose dialects differ only in their text: one [`Sql`] each, the three texts side
//! by side, run by [`query_as_on!`] and [`execute_on!`] with the same binds on every dialect
//! ([`Ts`] for timestamps, `i32` for attempts, each placeholder once and in bind order, as MySQL's
//! `?` needs). What differs in
//! shape, each dialect's claim, lives in `postgres.rs`, `sqlite.rs` and `mysql.rs`; the insert,
//! which MySQL cannot answer with `RETURNING`, is one statement here finished per dialect.
//!
//! Locks, per dialect: PostgreSQL and MySQL take row locks for a statement (and a unique-key
//! wait on a concurrent insert of the same key); SQLite takes the database write lock for each
//! write statement, and reads see a snapshot.

use chrono::{DateTime, Utc};

use super::row::{NewRow, RecordRow, Ts};
use super::{Inbox, Result};

/// One statement's text in each dialect.
#[cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code)
)]
pub(super) struct Sql {
    pub postgres: &'static str,
    pub sqlite: &'static str,
    pub mysql: &'static str,
}

/// Runs `$sql` (a [`Sql`]) on the inbox's pool with `$fetch` (`fetch_optional`, …), binding
/// each `$bind` in order, decoding rows with `sqlx::query_as`.
macro_rules! query_as_on {
    ($inbox:expr, $sql:expr, $fetch:ident $(, $bind:expr)* $(,)?) => {
        match $inbox {
            #[cfg(feature = "postgres")]
            Inbox::Postgres(pool) => sqlx::query_as($sql.postgres)$(.bind($bind))*.$fetch(pool).await,
            #[cfg(feature = "sqlite")]
            Inbox::Sqlite(pool) => sqlx::query_as($sql.sqlite)$(.bind($bind))*.$fetch(pool).await,
            #[cfg(feature = "mysql")]
            Inbox::Mysql(pool) => sqlx::query_as($sql.mysql)$(.bind($bind))*.$fetch(pool).await,
        }
    };
}

/// Runs `$sql` (a [`Sql`]) on the inbox's pool as a write, binding each `$bind` in order; the
/// number of rows it touched.
macro_rules! execute_on {
    ($inbox:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        match $inbox {
            #[cfg(feature = "postgres")]
            Inbox::Postgres(pool) => sqlx::query($sql.postgres)$(.bind($bind))*.execute(pool).await
                .map(|done| done.rows_affected()),
            #[cfg(feature = "sqlite")]
            Inbox::Sqlite(pool) => sqlx::query($sql.sqlite)$(.bind($bind))*.execute(pool).await
                .map(|done| done.rows_affected()),
            #[cfg(feature = "mysql")]
            Inbox::Mysql(pool) => sqlx::query($sql.mysql)$(.bind($bind))*.execute(pool).await
                .map(|done| done.rows_affected()),
        }
    };
}

/// The status columns [`RecordRow`] reads: as stored, or on MySQL through `CAST(… AS CHAR)`,
/// since its `utf8mb4_bin` text columns are reported as binary and sqlx will not decode them into
/// a `String`.
macro_rules! record_columns {
    (plain) => {
        "id, source, event_id, event_type, idempotency_key, status, attempts, \
         available_at, last_attempt_at, last_error, created_at, updated_at"
    };
    (mysql) => {
        "id, CAST(source AS CHAR) AS source, \
         CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
         CAST(idempotency_key AS CHAR) AS idempotency_key, CAST(status AS CHAR) AS status, \
         attempts, available_at, last_attempt_at, CAST(last_error AS CHAR) AS last_error, \
         created_at, updated_at"
    };
}

/// The columns of a new row, in [`bind_new_row!`]'s order.
macro_rules! insert_into {
    () => {
        "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, \
         status, payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
         last_attempt_at, created_at, updated_at) "
    };
}

/// Binds a [`NewRow`]'s values in the order of [`INSERT`]'s columns.
macro_rules! bind_new_row {
    ($query:expr, $new:expr) => {
        $query
            .bind($new.source)
            .bind($new.event_id)
            .bind($new.event_type)
            .bind($new.idempotency_key)
            .bind($new.signature)
            .bind($new.status)
            .bind($new.payload)
            .bind(&$new.headers)
            .bind(i32::try_from($new.attempts).unwrap_or(i32::MAX))
            .bind(Ts($new.now))
            .bind($new.lease_owner)
            .bind($new.lease_expires_at.map(Ts))
            .bind($new.last_attempt_at.map(Ts))
            .bind(Ts($new.now))
            .bind(Ts($new.now))
    };
}

/// The row unless `(source, event_id)` exists (MySQL: no `RETURNING`, and no `ON CONFLICT`: a
/// duplicate key fails the insert).
const INSERT: Sql = Sql {
    postgres: concat!(
        insert_into!(),
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8::json, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (source, event_id) DO NOTHING RETURNING ",
        record_columns!(plain)
    ),
    sqlite: concat!(
        insert_into!(),
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
         ON CONFLICT (source, event_id) DO NOTHING RETURNING ",
        record_columns!(plain)
    ),
    mysql: concat!(
        insert_into!(),
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ),
};

const GET_EVENT: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        record_columns!(plain),
        " FROM kurir_inbox WHERE source = $1 AND event_id = $2"
    ),
    sqlite: concat!(
        "SELECT ",
        record_columns!(plain),
        " FROM kurir_inbox WHERE source = ?1 AND event_id = ?2"
    ),
    mysql: concat!(
        "SELECT ",
        record_columns!(mysql),
        " FROM kurir_inbox WHERE source = ? AND event_id = ?"
    ),
};

const COMPLETE: Sql = Sql {
    postgres: "UPDATE kurir_inbox \
        SET status = $1, available_at = $2, last_error = $3, lease_owner = NULL, \
            lease_expires_at = NULL, updated_at = $4 \
        WHERE id = $5 AND status = 'processing' AND lease_owner = $6 AND attempts = $7",
    sqlite: "UPDATE kurir_inbox \
        SET status = ?1, available_at = ?2, last_error = ?3, lease_owner = NULL, \
            lease_expires_at = NULL, updated_at = ?4 \
        WHERE id = ?5 AND status = 'processing' AND lease_owner = ?6 AND attempts = ?7",
    mysql: "UPDATE kurir_inbox \
        SET status = ?, available_at = ?, last_error = ?, lease_owner = NULL, \
            lease_expires_at = NULL, updated_at = ? \
        WHERE id = ? AND status = 'processing' AND lease_owner = ? AND attempts = ?",
};

const RESCHEDULE_FAILED: Sql = Sql {
    postgres: "UPDATE kurir_inbox \
        SET status = 'pending', attempts = 0, available_at = $1, updated_at = $2 \
        WHERE source = $3 AND event_id = $4 AND status = 'failed'",
    sqlite: "UPDATE kurir_inbox \
        SET status = 'pending', attempts = 0, available_at = ?1, updated_at = ?2 \
        WHERE source = ?3 AND event_id = ?4 AND status = 'failed'",
    mysql: "UPDATE kurir_inbox \
        SET status = 'pending', attempts = 0, available_at = ?, updated_at = ? \
        WHERE source = ? AND event_id = ? AND status = 'failed'",
};

/// Applies the dialect's migrations, leaving alone versions another migrator of the database
/// applied (see [`super::migrate_postgres`]).
pub(super) async fn migrate(inbox: &Inbox) -> Result<()> {
    let mut migrator = match inbox {
        #[cfg(feature = "postgres")]
        Inbox::Postgres(_) => sqlx::migrate!("./migrations/postgres"),
        #[cfg(feature = "sqlite")]
        Inbox::Sqlite(_) => sqlx::migrate!("./migrations/sqlite"),
        #[cfg(feature = "mysql")]
        Inbox::Mysql(_) => sqlx::migrate!("./migrations/mysql"),
    };
    migrator.set_ignore_missing(true);
    match inbox {
        #[cfg(feature = "postgres")]
        Inbox::Postgres(pool) => migrator.run(pool).await?,
        #[cfg(feature = "sqlite")]
        Inbox::Sqlite(pool) => migrator.run(pool).await?,
        #[cfg(feature = "mysql")]
        Inbox::Mysql(pool) => migrator.run(pool).await?,
    }
    Ok(())
}

/// Inserts the row unless `(source, event_id)` exists; `None` when it does. No explicit lock: the
/// unique key decides, and a concurrent insert of the same key waits for the first to commit
/// (SQLite: the write lock serialises them), then does nothing (MySQL: fails with a duplicate
/// key). MySQL reads the new row back by its id.
pub(super) async fn insert_event(inbox: &Inbox, new: &NewRow<'_>) -> Result<Option<RecordRow>> {
    match inbox {
        #[cfg(feature = "postgres")]
        Inbox::Postgres(pool) => Ok(bind_new_row!(sqlx::query_as(INSERT.postgres), new)
            .fetch_optional(pool)
            .await?),
        #[cfg(feature = "sqlite")]
        Inbox::Sqlite(pool) => Ok(bind_new_row!(sqlx::query_as(INSERT.sqlite), new)
            .fetch_optional(pool)
            .await?),
        #[cfg(feature = "mysql")]
        Inbox::Mysql(pool) => {
            let inserted = bind_new_row!(sqlx::query(INSERT.mysql), new)
                .execute(pool)
                .await;
            let id = match inserted {
                Ok(done) => done.last_insert_id(),
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let by_id = concat!(
                "SELECT ",
                record_columns!(mysql),
                " FROM kurir_inbox WHERE id = ?"
            );
            Ok(Some(sqlx::query_as(by_id).bind(id).fetch_one(pool).await?))
        }
    }
}

/// Plain read of one row's status columns; takes no lock (SQLite: a read snapshot).
pub(super) async fn get_event(
    inbox: &Inbox,
    source: &str,
    event_id: &str,
) -> Result<Option<RecordRow>> {
    Ok(query_as_on!(
        inbox,
        GET_EVENT,
        fetch_optional,
        source,
        event_id
    )?)
}

/// Records an attempt's end and clears the lease, fenced: only while the row is still leased to
/// `owner` for this attempt number. Locks the one row for the statement (SQLite: under the write
/// lock). Whether it was recorded.
pub(super) async fn complete(
    inbox: &Inbox,
    (row_id, owner, attempt): (i64, &str, u32),
    (status, available_at, error): (&str, DateTime<Utc>, Option<&str>),
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = execute_on!(
        inbox,
        COMPLETE,
        status,
        Ts(available_at),
        error,
        Ts(now),
        row_id,
        owner,
        i32::try_from(attempt).unwrap_or(i32::MAX),
    )?;
    Ok(done == 1)
}

/// Makes one `failed` row due now with `attempts` reset; a row in any other state is left alone.
/// Locks the one row for the statement (SQLite: under the write lock). Whether it did.
pub(super) async fn reschedule_failed(
    inbox: &Inbox,
    source: &str,
    event_id: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = execute_on!(inbox, RESCHEDULE_FAILED, Ts(now), Ts(now), source, event_id,)?;
    Ok(done == 1)
}
