//! The database under test: a fresh PostgreSQL or MySQL/MariaDB database (created on the server
//! given, dropped afterwards) or a fresh SQLite file per scenario, plus what the benchmark does to it as the
//! "application": enqueue events, preload a backlog, measure table sizes.

use anyhow::Context;
use kurir::outbox::{self, NewEvent};
use kurir_core::event::EventId;
use serde::Serialize;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{MySqlPool, PgPool, SqlitePool};

use crate::sink::event_id;

mod database;
pub use database::Database;

/// The payload of every benchmark event: a small order, about the size of a real one.
pub const PAYLOAD: &str = r#"{"order_id":"98765","customer_id":"c-1203","total":250000,"currency":"IDR","status":"paid","items":[{"sku":"KOPI-250","qty":2,"price":85000},{"sku":"TEH-100","qty":1,"price":80000}]}"#;

/// The event type of every benchmark event.
pub const EVENT_TYPE: &str = "order.paid";

/// Which database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
    /// MySQL or MariaDB.
    Mysql,
}

impl Backend {
    /// `postgres`, `sqlite` or `mysql`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Sqlite => "sqlite",
            Self::Mysql => "mysql",
        }
    }
}

/// The application's own pool.
#[derive(Clone)]
pub enum AppPool {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
    /// MySQL or MariaDB.
    Mysql(MySqlPool),
}

/// `$body` on whichever pool `$app` holds, bound as `$pool`: for what is the same code on every
/// backend and differs only in the pool's type.
macro_rules! each_pool {
    ($app:expr, $pool:ident => $body:expr) => {
        match $app {
            AppPool::Postgres($pool) => $body,
            AppPool::Sqlite($pool) => $body,
            AppPool::Mysql($pool) => $body,
        }
    };
}
pub(crate) use each_pool;

fn new_event(n: u64, aggregates: Option<u64>) -> anyhow::Result<NewEvent> {
    let payload = serde_json::value::RawValue::from_string(PAYLOAD.to_owned())?;
    let aggregate = aggregates.map_or(n, |a| n % a.max(1));
    Ok(NewEvent::raw(EVENT_TYPE, payload)?
        .event_id(EventId::parse(&event_id(n))?)
        .aggregate("order", aggregate.to_string()))
}

impl AppPool {
    /// One application transaction that records events `ids` with [`kurir::outbox::enqueue`];
    /// event `n` is about aggregate `n`, or `n % a` with `aggregates` `Some(a)`.
    pub async fn enqueue(
        &self,
        ids: std::ops::Range<u64>,
        aggregates: Option<u64>,
    ) -> anyhow::Result<()> {
        each_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for n in ids {
                outbox::enqueue(&mut tx, new_event(n, aggregates)?).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The SQL contract: one plain `INSERT`, autocommitted, as a program in another language
    /// would write it; addressed to `subscriber` when given.
    pub async fn insert_plain(&self, n: u64, subscriber: Option<&str>) -> anyhow::Result<()> {
        let id = event_id(n);
        let aggregate = n.to_string();
        let values = match self {
            Self::Postgres(_) => "($1, $2, 'order', $3, $4::json, $5)",
            Self::Sqlite(_) => "(?1, ?2, 'order', ?3, ?4, ?5)",
            Self::Mysql(_) => "(?, ?, 'order', ?, ?, ?)",
        };
        let sql = format!(
            "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload, \
             subscriber_id) VALUES {values}"
        );
        each_pool!(self, pool => {
            sqlx::query(&sql)
                .bind(&id)
                .bind(EVENT_TYPE)
                .bind(&aggregate)
                .bind(PAYLOAD)
                .bind(subscriber)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Writes `count` events from `base`, already fanned out, and one pending delivery of each
    /// to `endpoint_id`: a backlog as the relay would have left it, made in bulk.
    pub async fn preload_backlog(
        &self,
        base: u64,
        count: u64,
        endpoint_id: &str,
    ) -> anyhow::Result<()> {
        match self {
            Self::Postgres(pool) => {
                sqlx::query(
                    // No `txid`: history the relay's cursor never reads (kurir's migration 0011).
                    "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload, dispatched_at, txid) \
                     SELECT 'ev-' || ($1 + g), $3, 'order', ($1 + g)::text, $4::json, now(), NULL \
                     FROM generate_series(0, $2 - 1) AS g",
                )
                .bind(base as i64)
                .bind(count as i64)
                .bind(EVENT_TYPE)
                .bind(PAYLOAD)
                .execute(pool)
                .await?;
                sqlx::query(
                    "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
                     SELECT id, event_id, $1 FROM kurir_outbox ORDER BY id",
                )
                .bind(endpoint_id)
                .execute(pool)
                .await?;
                sqlx::query("VACUUM ANALYZE kurir_outbox")
                    .execute(pool)
                    .await?;
                sqlx::query("VACUUM ANALYZE kurir_deliveries")
                    .execute(pool)
                    .await?;
            }
            Self::Sqlite(pool) => {
                let now = kurir::store::sqlite_ts(kurir::clock::Clock::system().now_millis());
                sqlx::query(
                    "WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < ?2 - 1) \
                     INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload, dispatched_at) \
                     SELECT 'ev-' || (?1 + x), ?3, 'order', CAST(?1 + x AS TEXT), ?4, ?5 FROM g",
                )
                .bind(base as i64)
                .bind(count as i64)
                .bind(EVENT_TYPE)
                .bind(PAYLOAD)
                .bind(&now)
                .execute(pool)
                .await?;
                sqlx::query(
                    "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, available_at, created_at, updated_at) \
                     SELECT id, event_id, ?1, ?2, ?2, ?2 FROM kurir_outbox ORDER BY id",
                )
                .bind(endpoint_id)
                .bind(&now)
                .execute(pool)
                .await?;
                sqlx::query(SQLITE_CURSOR_PAST_HISTORY)
                    .execute(pool)
                    .await?;
                sqlx::query("ANALYZE").execute(pool).await?;
            }
            Self::Mysql(pool) => preload_mysql(pool, base, count, endpoint_id).await?,
        }
        Ok(())
    }

    /// Size in bytes of kurir's main tables and of their indexes, with dead rows on PostgreSQL.
    pub async fn table_sizes(&self) -> anyhow::Result<Vec<TableSize>> {
        let mut sizes = Vec::new();
        for table in ["kurir_outbox", "kurir_deliveries", "kurir_attempts"] {
            let (table_bytes, index_bytes, live_rows, dead_rows) = match self {
                Self::Postgres(pool) => {
                    let (heap, indexes, live, dead): (i64, i64, i64, i64) = sqlx::query_as(
                        "SELECT pg_table_size(c.oid), pg_indexes_size(c.oid), \
                             COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0) \
                         FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
                         WHERE c.relname = $1",
                    )
                    .bind(table)
                    .fetch_one(pool)
                    .await?;
                    (heap, indexes, Some(live), Some(dead))
                }
                Self::Sqlite(pool) => {
                    // dbstat is compiled into the bundled SQLite; `name` is a table or an index.
                    let (heap, indexes): (i64, i64) = sqlx::query_as(
                        "SELECT COALESCE(SUM(CASE WHEN name = ?1 THEN pgsize END), 0), \
                                COALESCE(SUM(CASE WHEN name <> ?1 THEN pgsize END), 0) \
                         FROM dbstat WHERE name = ?1 OR name IN \
                             (SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1)",
                    )
                    .bind(table)
                    .fetch_one(pool)
                    .await
                    .unwrap_or((0, 0));
                    (heap, indexes, None, None)
                }
                Self::Mysql(pool) => mysql_table_size(pool, table).await?,
            };
            sizes.push(TableSize {
                table,
                table_bytes,
                index_bytes,
                live_rows,
                dead_rows,
            });
        }
        Ok(sizes)
    }

    /// Relayed events with fewer deliveries than the endpoints of their subscriber (or, for an
    /// event to none, without one) that existed when they were written (every endpoint the
    /// harness creates takes every event of its subscriber, except those at `/never/`, which
    /// subscribe to other types): events kurir lost.
    /// Relayed: marked so, or at or below the relay's cursor (kurir's `store::cursor`).
    pub async fn lost_events(&self) -> anyhow::Result<i64> {
        let relayed = match self {
            Self::Postgres(_) => {
                "(o.dispatched_at IS NOT NULL OR o.txid IS NULL \
                 OR (o.txid, o.id) <= (SELECT txid, outbox_id FROM kurir_relay_cursor))"
            }
            Self::Sqlite(_) => {
                "(o.dispatched_at IS NOT NULL \
                 OR o.id <= (SELECT outbox_id FROM kurir_relay_cursor))"
            }
            Self::Mysql(_) => "o.dispatched_at IS NOT NULL",
        };
        let same_subscriber = match self {
            Self::Postgres(_) => "e.subscriber_id IS NOT DISTINCT FROM o.subscriber_id",
            Self::Sqlite(_) => "e.subscriber_id IS o.subscriber_id",
            Self::Mysql(_) => "e.subscriber_id <=> o.subscriber_id",
        };
        let sql = format!(
            "SELECT count(*) FROM kurir_outbox o \
             WHERE {relayed} AND o.refused_reason IS NULL \
               AND (SELECT count(*) FROM kurir_deliveries d WHERE d.outbox_id = o.id) \
                 < (SELECT count(*) FROM kurir_endpoints e WHERE e.created_at <= o.created_at \
                      AND e.url NOT LIKE '%/never/%' AND {same_subscriber})"
        );
        Ok(each_pool!(self, pool => sqlx::query_scalar(&sql).fetch_one(pool).await?))
    }

    /// Attempts recorded per lease owner (each process's own), largest first.
    pub async fn attempts_by_worker(&self) -> anyhow::Result<Vec<i64>> {
        let sql = "SELECT count(*) AS n FROM kurir_attempts GROUP BY worker ORDER BY n DESC";
        Ok(each_pool!(self, pool => sqlx::query_scalar(sql).fetch_all(pool).await?))
    }

    /// Rows in `kurir_inbox`.
    pub async fn inbox_rows(&self) -> anyhow::Result<i64> {
        let sql = "SELECT count(*) FROM kurir_inbox";
        Ok(each_pool!(self, pool => sqlx::query_scalar(sql).fetch_one(pool).await?))
    }

    /// The server's version.
    pub async fn version(&self) -> anyhow::Result<String> {
        Ok(match self {
            Self::Postgres(pool) => {
                let v: String = sqlx::query_scalar("SHOW server_version")
                    .fetch_one(pool)
                    .await?;
                format!("PostgreSQL {v}")
            }
            Self::Sqlite(pool) => {
                let v: String = sqlx::query_scalar("SELECT sqlite_version()")
                    .fetch_one(pool)
                    .await?;
                format!("SQLite {v}")
            }
            Self::Mysql(pool) => {
                let v: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(pool)
                    .await?;
                if v.contains("MariaDB") {
                    format!("MariaDB {v}")
                } else {
                    format!("MySQL {v}")
                }
            }
        })
    }

    /// Closes the pool.
    pub async fn close(&self) {
        each_pool!(self, pool => pool.close().await);
    }
}

/// One table's footprint.
#[derive(Clone, Debug, Serialize)]
pub struct TableSize {
    /// The table.
    pub table: &'static str,
    /// Heap (PostgreSQL: with TOAST) in bytes.
    pub table_bytes: i64,
    /// All its indexes, in bytes.
    pub index_bytes: i64,
    /// Live rows (PostgreSQL's statistics).
    pub live_rows: Option<i64>,
    /// Dead rows not yet vacuumed (PostgreSQL's statistics).
    pub dead_rows: Option<i64>,
}

/// The database's version, without creating anything.
pub async fn server_version(backend: Backend, server_url: &str) -> anyhow::Result<String> {
    let pool = match backend {
        Backend::Postgres => AppPool::Postgres(
            PgPoolOptions::new()
                .max_connections(1)
                .connect(server_url)
                .await
                .context("cannot connect to PostgreSQL (see --database-url)")?,
        ),
        Backend::Sqlite => AppPool::Sqlite(
            SqlitePoolOptions::new()
                .max_connections(1)
                .connect("sqlite::memory:")
                .await?,
        ),
        Backend::Mysql => AppPool::Mysql(
            MySqlPoolOptions::new()
                .max_connections(1)
                .connect(server_url)
                .await
                .context("cannot connect to MySQL (see --mysql-url)")?,
        ),
    };
    let v = pool.version().await;
    pool.close().await;
    v
}

/// After history was written in bulk on SQLite: the relay's cursor moves past it, unless rows
/// still wait for the relay (the cursor must never step over those).
pub(crate) const SQLITE_CURSOR_PAST_HISTORY: &str = "UPDATE kurir_relay_cursor \
     SET outbox_id = (SELECT max(id) FROM kurir_outbox) \
     WHERE NOT EXISTS (SELECT 1 FROM kurir_outbox \
         WHERE id > kurir_relay_cursor.outbox_id AND dispatched_at IS NULL)";

/// MySQL's bulk backlog: the numbers `0..count` from a cross join of digits (MySQL stops a
/// recursive CTE at 1,000 rows unless told otherwise, a setting MariaDB does not have).
async fn preload_mysql(
    pool: &MySqlPool,
    base: u64,
    count: u64,
    endpoint_id: &str,
) -> anyhow::Result<()> {
    let numbers = mysql_numbers();
    sqlx::query(&format!(
        "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload, dispatched_at) \
         SELECT CONCAT('ev-', ? + x.n), ?, 'order', CAST(? + x.n AS CHAR), ?, UTC_TIMESTAMP(3) \
         FROM ({numbers}) AS x WHERE x.n < ?"
    ))
    .bind(base as i64)
    .bind(EVENT_TYPE)
    .bind(base as i64)
    .bind(PAYLOAD)
    .bind(count as i64)
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
         SELECT id, event_id, ? FROM kurir_outbox ORDER BY id",
    )
    .bind(endpoint_id)
    .execute(pool)
    .await?;
    sqlx::query("ANALYZE TABLE kurir_outbox, kurir_deliveries")
        .execute(pool)
        .await?;
    Ok(())
}

/// The numbers 0 to 9,999,999 as rows `n` on MySQL, from a cross join of digits (no
/// `generate_series`, and a recursive CTE stops at the server's recursion limit).
pub fn mysql_numbers() -> String {
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
        UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
        UNION ALL SELECT 8 UNION ALL SELECT 9)";
    format!(
        "SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d \
             + 1000000 * h.d AS n \
         FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f, {digits} g, {digits} h"
    )
}

/// [`AppPool::table_sizes`] of one table on MySQL: InnoDB's own estimates, refreshed by ANALYZE
/// TABLE; no dead rows.
async fn mysql_table_size(
    pool: &MySqlPool,
    table: &str,
) -> anyhow::Result<(i64, i64, Option<i64>, Option<i64>)> {
    let (heap, indexes, rows): (i64, i64, i64) = sqlx::query_as(
        "SELECT CAST(data_length AS SIGNED), CAST(index_length AS SIGNED), \
             CAST(table_rows AS SIGNED) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(table)
    .fetch_one(pool)
    .await?;
    Ok((heap, indexes, Some(rows), None))
}
