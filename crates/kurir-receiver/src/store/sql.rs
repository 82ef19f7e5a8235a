//! The statements whose dialects differ only in their text: one [`Sql`] each, the three texts side
//! by side, run by kurir-sql's runner with the same binds on every dialect ([`Ts`] for
//! timestamps, `i32` for attempts, each given once in the order of its `$n`: kurir-sql's
//! placeholder rule). What differs in shape, each dialect's claim, lives in `postgres.rs`,
//! `sqlite.rs` and `mysql.rs`; the insert, which MySQL cannot answer with `RETURNING`, is one
//! statement here finished per dialect.
//!
//! Locks, per dialect: PostgreSQL and MySQL take row locks for a statement (and a unique-key
//! wait on a concurrent insert of the same key); SQLite takes the database write lock for each
//! write statement, and reads see a snapshot.

use chrono::{DateTime, Utc};
use kurir_sql::{execute_on, query_as_on, Sql, Ts};

use super::row::{CountRow, NewRow, RecordRow};
use super::{Inbox, ListQuery, Result};

impl kurir_sql::OnPool for Inbox {
    fn sql_pool(&self) -> kurir_sql::Pool<'_> {
        match self {
            #[cfg(feature = "postgres")]
            Inbox::Postgres(pool) => kurir_sql::Pool::Postgres(pool),
            #[cfg(feature = "sqlite")]
            Inbox::Sqlite(pool) => kurir_sql::Pool::Sqlite(pool),
            #[cfg(feature = "mysql")]
            Inbox::Mysql(pool) => kurir_sql::Pool::Mysql(pool),
        }
    }
}

/// The row unless `(source, event_id)` exists, with [`RecordRow`]'s columns (MySQL: no
/// `RETURNING`, and no `ON CONFLICT`: a duplicate key fails the insert). Binds in
/// [`NewRow::binds`]'s order.
const INSERT: Sql = Sql {
    postgres: "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, \
            status, payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
            last_attempt_at, created_at, updated_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8::json, $9, $10, $11, $12, $13, $10, $10) \
        ON CONFLICT (source, event_id) DO NOTHING \
        RETURNING id, source, event_id, event_type, idempotency_key, status, attempts, \
            available_at, last_attempt_at, last_error, created_at, updated_at",
    sqlite: "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, \
            status, payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
            last_attempt_at, created_at, updated_at) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?10, ?10) \
        ON CONFLICT (source, event_id) DO NOTHING \
        RETURNING id, source, event_id, event_type, idempotency_key, status, attempts, \
            available_at, last_attempt_at, last_error, created_at, updated_at",
    mysql: "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, \
            status, payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
            last_attempt_at, created_at, updated_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $10, $10)",
};

/// [`INSERT`]'s row read back on MySQL, by the id the insert made.
#[cfg(feature = "mysql")]
const MYSQL_BY_ID: &str = "SELECT id, CAST(source AS CHAR) AS source, \
        CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
        CAST(idempotency_key AS CHAR) AS idempotency_key, CAST(status AS CHAR) AS status, \
        attempts, available_at, last_attempt_at, CAST(last_error AS CHAR) AS last_error, \
        created_at, updated_at \
    FROM kurir_inbox WHERE id = ?";

/// One row's [`RecordRow`] by its unique key.
const GET_EVENT: Sql = Sql {
    postgres: "SELECT id, source, event_id, event_type, idempotency_key, status, attempts, \
            available_at, last_attempt_at, last_error, created_at, updated_at \
        FROM kurir_inbox WHERE source = $1 AND event_id = $2",
    sqlite: "SELECT id, source, event_id, event_type, idempotency_key, status, attempts, \
            available_at, last_attempt_at, last_error, created_at, updated_at \
        FROM kurir_inbox WHERE source = ?1 AND event_id = ?2",
    mysql: "SELECT id, CAST(source AS CHAR) AS source, \
            CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
            CAST(idempotency_key AS CHAR) AS idempotency_key, CAST(status AS CHAR) AS status, \
            attempts, available_at, last_attempt_at, CAST(last_error AS CHAR) AS last_error, \
            created_at, updated_at \
        FROM kurir_inbox WHERE source = $1 AND event_id = $2",
};

/// One source's rows, newest first, paged by a keyset on `id`; each filter's bind `NULL` matches
/// all. Served by `kurir_inbox_source_id (source, id)` and, with a status,
/// `kurir_inbox_source_status_id (source, status, id)` (migration 1001).
const LIST: Sql = Sql {
    postgres: "SELECT id, source, event_id, event_type, idempotency_key, status, attempts, \
            available_at, last_attempt_at, last_error, created_at, updated_at \
        FROM kurir_inbox \
        WHERE source = $1 AND ($2::text IS NULL OR status = $2) \
          AND ($3::text IS NULL OR event_type = $3) \
          AND ($4::timestamptz IS NULL OR created_at >= $4) \
          AND ($5::timestamptz IS NULL OR created_at < $5) AND ($6::int8 IS NULL OR id < $6) \
        ORDER BY id DESC LIMIT $7",
    sqlite: "SELECT id, source, event_id, event_type, idempotency_key, status, attempts, \
            available_at, last_attempt_at, last_error, created_at, updated_at \
        FROM kurir_inbox \
        WHERE source = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR event_type = ?3) \
          AND (?4 IS NULL OR created_at >= ?4) AND (?5 IS NULL OR created_at < ?5) \
          AND (?6 IS NULL OR id < ?6) \
        ORDER BY id DESC LIMIT ?7",
    mysql: "SELECT id, CAST(source AS CHAR) AS source, \
            CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
            CAST(idempotency_key AS CHAR) AS idempotency_key, CAST(status AS CHAR) AS status, \
            attempts, available_at, last_attempt_at, CAST(last_error AS CHAR) AS last_error, \
            created_at, updated_at \
        FROM kurir_inbox \
        WHERE source = $1 AND ($2 IS NULL OR status = $2) AND ($3 IS NULL OR event_type = $3) \
          AND ($4 IS NULL OR created_at >= $4) AND ($5 IS NULL OR created_at < $5) \
          AND ($6 IS NULL OR id < $6) \
        ORDER BY id DESC LIMIT $7",
};

/// Per source and status: how many rows, and the oldest's `created_at`.
const COUNTS: Sql = Sql {
    postgres: "SELECT source, status, count(*) AS n, min(created_at) AS oldest \
        FROM kurir_inbox GROUP BY source, status ORDER BY source, status",
    sqlite: "SELECT source, status, count(*) AS n, min(created_at) AS oldest \
        FROM kurir_inbox GROUP BY source, status ORDER BY source, status",
    mysql: "SELECT CAST(source AS CHAR) AS source, CAST(status AS CHAR) AS status, \
            COUNT(*) AS n, MIN(created_at) AS oldest \
        FROM kurir_inbox GROUP BY source, status ORDER BY source, status",
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
        SET status = $1, available_at = $2, last_error = $3, lease_owner = NULL, \
            lease_expires_at = NULL, updated_at = $4 \
        WHERE id = $5 AND status = 'processing' AND lease_owner = $6 AND attempts = $7",
};

const RESCHEDULE_FAILED: Sql = Sql {
    postgres: "UPDATE kurir_inbox \
        SET status = 'pending', attempts = 0, available_at = $1, updated_at = $1 \
        WHERE source = $2 AND event_id = $3 AND status = 'failed'",
    sqlite: "UPDATE kurir_inbox \
        SET status = 'pending', attempts = 0, available_at = ?1, updated_at = ?1 \
        WHERE source = ?2 AND event_id = ?3 AND status = 'failed'",
    mysql: "UPDATE kurir_inbox \
        SET status = 'pending', attempts = 0, available_at = $1, updated_at = $1 \
        WHERE source = $2 AND event_id = $3 AND status = 'failed'",
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
/// key). MySQL reads the new row back by its id, on the connection that inserted it.
pub(super) async fn insert_event(inbox: &Inbox, new: &NewRow<'_>) -> Result<Option<RecordRow>> {
    let b = new.binds();
    #[cfg(feature = "mysql")]
    if let Inbox::Mysql(pool) = inbox {
        let mut conn = pool.acquire().await?;
        let inserted = kurir_sql::run_in!(
            conn, mysql, INSERT, query, execute, b.0, b.1, b.2, b.3, b.4, b.5, b.6, b.7, b.8, b.9,
            b.10, b.11, b.12
        );
        let id = match inserted {
            Ok(done) => done.last_insert_id(),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let row = sqlx::query_as(MYSQL_BY_ID).bind(id).fetch_one(&mut *conn);
        return Ok(Some(row.await?));
    }
    Ok(query_as_on!(
        inbox,
        INSERT,
        fetch_optional,
        b.0,
        b.1,
        b.2,
        b.3,
        b.4,
        b.5,
        b.6,
        b.7,
        b.8,
        b.9,
        b.10,
        b.11,
        b.12
    )?)
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
    let done = execute_on!(inbox, RESCHEDULE_FAILED, Ts(now), source, event_id)?;
    Ok(done == 1)
}

/// One source's rows matching `q`, newest first. A plain read, no locks.
pub(super) async fn list(inbox: &Inbox, q: &ListQuery) -> Result<Vec<RecordRow>> {
    Ok(query_as_on!(
        inbox,
        LIST,
        fetch_all,
        &q.source,
        q.status.map(|s| s.as_str()),
        q.event_type.as_deref(),
        q.since.map(Ts),
        q.until.map(Ts),
        q.before_id,
        i64::from(q.limit),
    )?)
}

/// How many rows each source has per status. A plain read of every row, no locks.
pub(super) async fn counts(inbox: &Inbox) -> Result<Vec<CountRow>> {
    Ok(query_as_on!(inbox, COUNTS, fetch_all)?)
}
