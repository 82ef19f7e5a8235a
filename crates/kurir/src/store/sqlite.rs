//! The SQLite store: one kurir process per database file. WAL mode; every write transaction
//! starts with `BEGIN IMMEDIATE` so it takes the write lock up front instead of failing to
//! upgrade a read lock halfway through.

mod admin;
mod leases;
mod relay;
pub mod space;

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Sqlite;

use super::pool::reject_unfinished;
use super::rules::{gone_endpoints, next_at, next_status};
use super::{ensure_sqlite_file, sqlite_ts, Result, StoreError};
use crate::delivery::Completion;
use crate::endpoint::Endpoint;

/// The completions of [`SqliteStore::complete_deliveries`] as rows `x`, from one flat JSON array
/// of ten values per completion (`?1`): each value is read once, never re-parsed.
macro_rules! completions_cte {
    () => {
        "WITH x AS (SELECT key / 10 AS n, \
             max(CASE key % 10 WHEN 0 THEN value END) AS id, \
             max(CASE key % 10 WHEN 1 THEN value END) AS attempt, \
             max(CASE key % 10 WHEN 2 THEN value END) AS trigger, \
             max(CASE key % 10 WHEN 3 THEN value END) AS started_at, \
             max(CASE key % 10 WHEN 4 THEN value END) AS duration_ms, \
             max(CASE key % 10 WHEN 5 THEN value END) AS code, \
             max(CASE key % 10 WHEN 6 THEN value END) AS err, \
             max(CASE key % 10 WHEN 7 THEN value END) AS body, \
             max(CASE key % 10 WHEN 8 THEN value END) AS status, \
             max(CASE key % 10 WHEN 9 THEN value END) AS next_at \
         FROM json_each(?1) GROUP BY key / 10) "
    };
}

/// How long kurir's bookkeeping waits for SQLite's write lock before the attempt fails (and is
/// retried by its loop), as the pool's busy timeout does for everyone else.
const BUSY_PATIENCE: Duration = Duration::from_secs(10);

/// The wait before the next try at a busy write lock: SQLite's own busy handler's steps
/// (1, 2, 5, 10, 15, 20, 25 ms) without its later 50 and 100 ms ones, which left kurir asleep
/// long after the lock came free. Retrying more eagerly than that starved the application:
/// its writers sleep in that handler, and with every 1–8 ms kurir took the lock back first,
/// so the application's enqueue slowed to a fraction of its rate beside a burst of deliveries.
fn busy_backoff(tries: u32) -> Duration {
    const STEPS_MS: [u64; 7] = [1, 2, 5, 10, 15, 20, 25];
    Duration::from_millis(STEPS_MS[(tries as usize).min(STEPS_MS.len() - 1)])
}

/// `SQLITE_BUSY`, with any extended code: the lock is held by another connection.
fn is_busy(e: &sqlx::Error) -> bool {
    let code = match e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    };
    code.is_some_and(|c| c & 0xff == 5)
}

/// kurir's tables in a SQLite database file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// For kurir's own bookkeeping (relay, claims, completions, lease sweeps): connections with
    /// `synchronous = NORMAL`, which in WAL mode commits without an fsync. A process crash loses
    /// nothing; a power loss may roll back the last of these commits, and every such loss only
    /// makes a delivery due again, which at-least-once delivery already allows. Writes made for
    /// someone else (the admin API's publish, endpoints, replays) stay on `pool`, `FULL`.
    bookkeeping: SqlitePool,
    /// Taken while waiting for SQLite's write lock, so kurir's writers (relay, claims,
    /// completions) try for it one at a time, as they did inside SQLite's busy handler.
    lock_turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// When claims look for orphans past the rows they take.
    orphan_looks: std::sync::Arc<super::OrphanLooks>,
    /// This process's copy of the endpoints (see `store::directory`).
    pub(super) directory: std::sync::Arc<super::directory::Directory>,
    /// This process's compiled copy of the event catalog (see `store::catalog`).
    pub(super) catalog: std::sync::Arc<super::catalog::CatalogCache>,
    /// Seals and opens the secret columns.
    pub(super) secrets: super::SecretCodec,
    /// Where the times this process writes come from (see `store::clock`).
    pub(super) clock: kurir_core::Clock,
    /// The database file (`:memory:` for none), whose file system readiness watches.
    file: std::sync::Arc<std::path::Path>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file in WAL mode.
    pub async fn connect(url: &str) -> Result<Self> {
        let connect_err = StoreError::connecting("sqlite");
        ensure_sqlite_file(url).map_err(|e| connect_err(sqlx::Error::Io(e)))?;
        let options = SqliteConnectOptions::from_str(url)
            .map_err(connect_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = reject_unfinished(SqlitePoolOptions::new())
            .max_connections(8)
            .connect_with(options.clone())
            .await
            .map_err(connect_err)?;
        // One connection: kurir's writers queue for it in the pool instead of in SQLite's busy
        // handler, which sleeps in steps of up to 100 ms while another holds the write lock.
        // For the same reason it has no busy timeout: `begin_immediate` retries a busy lock
        // itself, in shorter steps than SQLite's handler.
        let bookkeeping = reject_unfinished(SqlitePoolOptions::new())
            .max_connections(1)
            .connect_with(
                options
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::ZERO),
            )
            .await
            .map_err(connect_err)?;
        Ok(Self {
            file: pool.connect_options().get_filename().into(),
            pool,
            bookkeeping,
            lock_turn: Default::default(),
            orphan_looks: Default::default(),
            directory: Default::default(),
            catalog: Default::default(),
            secrets: Default::default(),
            clock: Default::default(),
        })
    }

    /// Wraps an existing pool; bookkeeping then commits with the pool's own settings.
    /// The pool keeps its own options: unlike `connect`'s, it may hand out a connection that a
    /// failed statement left inside a transaction (see `store::pool`).
    pub fn from_pool(pool: SqlitePool) -> Self {
        Self {
            file: pool.connect_options().get_filename().into(),
            bookkeeping: pool.clone(),
            lock_turn: Default::default(),
            orphan_looks: Default::default(),
            directory: Default::default(),
            catalog: Default::default(),
            secrets: Default::default(),
            clock: Default::default(),
            pool,
        }
    }

    /// The pool, for callers that enqueue on their own transactions.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub(super) async fn close(&self) {
        self.bookkeeping.close().await;
        self.pool.close().await;
    }

    /// A bookkeeping write transaction, on the `bookkeeping` connection: takes the write lock,
    /// retrying after [`busy_backoff`] while someone else (the application, another process)
    /// holds it, for up to [`BUSY_PATIENCE`]. SQLite's own busy handler sleeps 1, 2, 5, 10, …
    /// then 100 ms at a time, so under a steady stream of application commits kurir woke too
    /// late, and commit→receipt latency's tail grew with it (`kurir-bench latency --db sqlite`
    /// shows the difference).
    async fn begin_immediate(&self) -> Result<sqlx::Transaction<'static, Sqlite>> {
        let _turn = self.lock_turn.lock().await;
        let deadline = tokio::time::Instant::now() + BUSY_PATIENCE;
        let mut tries = 0u32;
        loop {
            match self.bookkeeping.begin_with("BEGIN IMMEDIATE").await {
                Ok(tx) => return Ok(tx),
                Err(e) if is_busy(&e) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(busy_backoff(tries)).await;
                    tries += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Whether the database can write, for readiness: its file system has
    /// [`space::MIN_FREE_BYTES`] free (see `space` for why a write alone cannot tell), and a
    /// write commits: the relay cursor's one row rewritten as it is, in a `BEGIN IMMEDIATE`
    /// transaction on the durable pool (waiting for the write lock like any writer). SQLite
    /// rewrites the row's page though no value changes, so the commit writes to the WAL, which
    /// `BEGIN IMMEDIATE` and `ROLLBACK` alone would not (they succeed on a full disk).
    pub(super) async fn probe_write(&self) -> Result<()> {
        if let Some(free_bytes) = space::free_bytes(&self.file) {
            if free_bytes < space::MIN_FREE_BYTES {
                return Err(StoreError::LowOnSpace { free_bytes });
            }
        }
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("UPDATE kurir_relay_cursor SET outbox_id = outbox_id")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn insert_endpoint(&self, e: &Endpoint) -> Result<DateTime<Utc>> {
        let sql = concat!(
            super::rows::insert_endpoint!(),
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
                ?20, ?21, ?21)"
        );
        super::bind_endpoint(sqlx::query(sql), e, &self.secrets)
            .bind(sqlite_ts(e.created_at))
            .execute(&self.pool)
            .await?;
        Ok(e.created_at)
    }

    /// One `BEGIN IMMEDIATE` transaction of three statements over the completions as one flat
    /// JSON array, ten values each (one round trip to SQLite's thread per
    /// statement, not two per completion; flat, so no element is parsed twice): the attempt
    /// rows, the fenced update, and endpoints that answered 410. The attempts of a delivery
    /// deleted meanwhile (its endpoint was) are dropped with it.
    pub(super) async fn complete_deliveries(
        &self,
        owner: &str,
        done: &[Completion],
    ) -> Result<u64> {
        let now = sqlite_ts(self.clock.now_millis());
        let rows: Vec<serde_json::Value> = done
            .iter()
            .flat_map(|c| {
                [
                    serde_json::json!(c.delivery_id),
                    serde_json::json!(c.attempt),
                    serde_json::json!(c.trigger.as_str()),
                    serde_json::json!(sqlite_ts(c.started_at)),
                    serde_json::json!(c.duration_ms),
                    serde_json::json!(c.status_code),
                    serde_json::json!(c.error.as_deref()),
                    serde_json::json!(c.response_body.as_deref()),
                    serde_json::json!(next_status(&c.next)),
                    serde_json::json!(next_at(&c.next).map(sqlite_ts)),
                ]
            })
            .collect();
        let rows = serde_json::Value::Array(rows).to_string();
        let mut tx = self.begin_immediate().await?;
        sqlx::query(concat!(
            completions_cte!(),
            "INSERT INTO kurir_attempts (delivery_id, attempt, trigger, started_at, duration_ms, \
                 status_code, error, response_body, worker) \
             SELECT id, attempt, trigger, started_at, duration_ms, code, err, body, ?2 FROM x \
             WHERE EXISTS (SELECT 1 FROM kurir_deliveries AS d WHERE d.id = x.id)"
        ))
        .bind(&rows)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        let moved = sqlx::query(
            concat!(
                completions_cte!(),
                "UPDATE kurir_deliveries AS d SET status = x.status, \
                 available_at = COALESCE(x.next_at, d.available_at), \
                 lease_owner = NULL, lease_expires_at = NULL, last_status_code = x.code, \
                 last_error = x.err, sent_at = CASE WHEN x.status = 'sent' THEN ?3 ELSE d.sent_at END, \
                 trigger = 'scheduled', updated_at = ?3 \
             FROM x \
             WHERE d.id = x.id AND d.attempt_count = x.attempt AND d.lease_owner = ?2 \
               AND d.status IN ('processing', 'failed', 'dead_letter')"
            ),
        )
        .bind(&rows)
        .bind(owner)
        .bind(&now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        disable_gone(&mut tx, &gone_endpoints(done), &now).await?;
        tx.commit().await?;
        Ok(done.len() as u64 - moved)
    }
}

/// Disables the endpoints that answered 410, inside the completion's write transaction.
async fn disable_gone(conn: &mut sqlx::SqliteConnection, gone: &[&str], now: &str) -> Result<()> {
    if gone.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE kurir_endpoints SET enabled = 0, updated_at = ?2, \
             disabled_reason = 'the endpoint answered 410 Gone at ' || ?2 \
         WHERE id IN (SELECT value FROM json_each(?1)) AND enabled",
    )
    .bind(serde_json::to_string(gone).unwrap_or_default())
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor};

    use crate::store::LeaseEnd;

    use super::*;

    /// While the application holds the write lock, kurir's bookkeeping waits for it (its
    /// connection has no busy timeout of its own, so without the retry it would fail at once
    /// with "database is locked"), and gets it as soon as the lock is given back.
    #[tokio::test]
    async fn bookkeeping_waits_for_a_write_lock_the_application_holds() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("kurir.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        crate::store::Store::Sqlite(store.clone())
            .migrate()
            .await
            .unwrap();

        let mut app = sqlx::SqliteConnection::connect(&url).await.unwrap();
        app.execute("BEGIN IMMEDIATE").await.unwrap();
        let waited =
            tokio::time::timeout(Duration::from_millis(300), store.begin_immediate()).await;
        assert!(
            waited.is_err(),
            "still waiting for the lock, not failed: {:?}",
            waited.map(|r| r.map(|_| ()))
        );
        let waiting = tokio::spawn({
            let store = store.clone();
            async move {
                let defaults = Default::default();
                let owner = None;
                store
                    .requeue(LeaseEnd {
                        owner,
                        defaults: &defaults,
                    })
                    .await
            }
        });
        app.execute("COMMIT").await.unwrap();
        assert_eq!(waiting.await.unwrap().unwrap().total(), 0);
    }

    #[test]
    fn busy_waits_grow_to_25_ms_and_stay() {
        let ms: Vec<u128> = (0..9).map(|t| busy_backoff(t).as_millis()).collect();
        assert_eq!(ms, [1, 2, 5, 10, 15, 20, 25, 25, 25]);
    }
}
