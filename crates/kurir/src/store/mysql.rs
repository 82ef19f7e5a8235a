//! The MySQL and MariaDB store: shared by any number of kurir processes, which coordinate only
//! through row locks (`FOR UPDATE SKIP LOCKED`), leases and fences, as on PostgreSQL.
//!
//! What differs from PostgreSQL, and why the SQL here reads as it does:
//!
//! - **Sessions** run with `time_zone = '+00:00'` (sqlx's default, so `DATETIME(3)` values are
//!   UTC both ways) and `READ COMMITTED`: under InnoDB's default `REPEATABLE READ` a locking read
//!   also locks the gaps between the index entries it reads, and the relay's gap locks on the
//!   outbox would hold up the application's inserts of new events until the relay commits.
//! - **Text is read through `CAST(… AS CHAR)`**: kurir's columns are `utf8mb4_bin` (compared byte
//!   for byte, as on the other dialects), which the server reports as binary, and sqlx refuses to
//!   decode a binary column into a `String`.
//! - **No `UPDATE … RETURNING`** (MySQL has none): a statement that changes rows and must say
//!   which locks them first (`SELECT … FOR UPDATE SKIP LOCKED`), then changes them by id, in one
//!   transaction.
//! - **Arrays are bound as one JSON text** read with `JSON_TABLE`, so a statement's text (and its
//!   prepared form) is the same whatever the batch size, and a batch never meets the protocol's
//!   limit of 65,535 placeholders.
//! - **No advisory locks are needed**: fan-out reads the enabled endpoints `LOCK IN SHARE MODE`,
//!   which a deletion's exclusive lock on the endpoint row orders against, the way PostgreSQL's
//!   shared advisory lock does (see [`MySqlStore::relay_batch`]).

mod admin;
mod endpoints;
mod leases;
mod sources;

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::mysql::{
    MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions, MySqlRow,
};
use sqlx::query::Query;
use sqlx::{Connection, Executor, MySql, Row};

use super::postgres::{fan_out_target, next_status};
use super::{EndpointRow, RelayOutcome, Result, StoreError, StoredEvent};
use crate::delivery::{AttemptRecord, Completion, DeliveryRecord, NextState, Trigger};
use crate::endpoint::{Endpoint, EndpointId};

/// An endpoint row, its text columns cast so they decode (see the module docs).
const ENDPOINT_COLUMNS: &str = "CAST(id AS CHAR) AS id, CAST(url AS CHAR) AS url, \
    CAST(description AS CHAR) AS description, CAST(event_types AS CHAR) AS event_types, \
    CAST(secret AS CHAR) AS secret, CAST(previous_secrets AS CHAR) AS previous_secrets, \
    enabled, CAST(disabled_reason AS CHAR) AS disabled_reason, connect_timeout_ms, \
    request_timeout_ms, retry_initial_delay_ms, retry_max_delay_ms, retry_max_attempts, \
    max_in_flight, created_at, updated_at";

const DELIVERY_COLUMNS: &str = "id, CAST(event_id AS CHAR) AS event_id, \
    CAST(endpoint_id AS CHAR) AS endpoint_id, CAST(status AS CHAR) AS status, attempt_count, \
    available_at, last_status_code, CAST(last_error AS CHAR) AS last_error, sent_at, created_at";

/// An outbox row, whole.
pub(super) const EVENT_COLUMNS: &str = "id, CAST(event_id AS CHAR) AS event_id, \
    CAST(event_type AS CHAR) AS event_type, version, \
    CAST(aggregate_type AS CHAR) AS aggregate_type, CAST(aggregate_id AS CHAR) AS aggregate_id, \
    occurred_at, CAST(payload AS CHAR) AS payload, created_at, dispatched_at, \
    CAST(refused_reason AS CHAR) AS refused_reason";

/// The completions of [`MySqlStore::complete_deliveries`] as rows `x`, from one JSON array of
/// arrays (the first bind).
const COMPLETIONS: &str = "JSON_TABLE(?, '$[*]' COLUMNS ( \
        id BIGINT PATH '$[0]', attempt INT PATH '$[1]', `trigger` VARCHAR(16) PATH '$[2]', \
        started_at DATETIME(3) PATH '$[3]', duration_ms BIGINT PATH '$[4]', code INT PATH '$[5]', \
        err LONGTEXT PATH '$[6]', body LONGTEXT PATH '$[7]', status VARCHAR(16) PATH '$[8]', \
        next_at DATETIME(3) PATH '$[9]')) AS x";

/// kurir's tables in a MySQL or MariaDB database.
#[derive(Clone, Debug)]
pub struct MySqlStore {
    pool: MySqlPool,
    /// When claims look for orphans past the rows they take.
    orphan_looks: std::sync::Arc<super::OrphanLooks>,
}

impl MySqlStore {
    /// Connects with a pool sized for one kurir process (`mysql://…` or `mariadb://…`). One
    /// connection is opened first, so an unreachable database fails with the driver's own reason
    /// (refused, unknown host, authentication) rather than a pool timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        let connect_err = |source| StoreError::Connect {
            backend: "mysql",
            source,
        };
        let options = MySqlConnectOptions::from_str(url).map_err(connect_err)?;
        let probe = MySqlConnection::connect_with(&options)
            .await
            .map_err(connect_err)?;
        probe.close().await.map_err(connect_err)?;
        let pool = MySqlPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await
                        .map(drop)
                })
            })
            .connect_lazy_with(options);
        Ok(Self::from_pool(pool))
    }

    /// Wraps an existing pool (the application's own, for example). Its sessions should use
    /// `READ COMMITTED` and the time zone `+00:00` (sqlx's default), as [`MySqlStore::connect`]'s
    /// do: see the module docs.
    pub fn from_pool(pool: MySqlPool) -> Self {
        Self {
            pool,
            orphan_looks: Default::default(),
        }
    }

    /// The pool, for callers that enqueue on their own transactions.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    pub(super) async fn migrate(&self) -> Result<()> {
        // As on the other dialects: kurir-receiver's migrations (versions from 1000) share the
        // `_sqlx_migrations` table, each migrator ignoring the other's versions.
        let mut migrator = sqlx::migrate!("./migrations/mysql");
        migrator.set_ignore_missing(true);
        migrator.run(&self.pool).await?;
        kurir_receiver::migrate_mysql(&self.pool).await?;
        Ok(())
    }

    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    pub(super) async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Inserts the row, then reads back `created_at`: the database's clock sets it, so the relay
    /// compares it with event times from the same clock.
    pub(super) async fn insert_endpoint(&self, e: &Endpoint) -> Result<DateTime<Utc>> {
        let sql = "INSERT INTO kurir_endpoints (id, url, description, event_types, secret, \
            previous_secrets, enabled, disabled_reason, connect_timeout_ms, request_timeout_ms, \
            retry_initial_delay_ms, retry_max_delay_ms, retry_max_attempts, max_in_flight, \
            created_at, updated_at) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))";
        let mut conn = self.pool.acquire().await?;
        bind_endpoint(sqlx::query(sql), e)
            .execute(&mut *conn)
            .await?;
        let created_at = sqlx::query_scalar("SELECT created_at FROM kurir_endpoints WHERE id = ?")
            .bind(e.id.as_str())
            .fetch_one(&mut *conn)
            .await?;
        Ok(created_at)
    }

    pub(super) async fn get_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>> {
        let sql = format!("SELECT {ENDPOINT_COLUMNS} FROM kurir_endpoints WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| endpoint_row(&r)?.into_endpoint()).transpose()
    }

    pub(super) async fn list_endpoints(&self, enabled_only: bool) -> Result<Vec<Endpoint>> {
        let sql = format!(
            "SELECT {ENDPOINT_COLUMNS} FROM kurir_endpoints WHERE enabled OR NOT ? \
             ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql)
            .bind(enabled_only)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| endpoint_row(r)?.into_endpoint())
            .collect()
    }

    /// One transaction: the endpoint, its deliveries and their attempts (the hot tables carry no
    /// foreign keys, so this is the cascade). Deleting the endpoint row first locks it
    /// exclusively, so it waits for relay batches that read it (they hold it shared) and the
    /// next ones see it gone.
    pub(super) async fn delete_endpoint(&self, id: &EndpointId) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query("DELETE FROM kurir_endpoints WHERE id = ?")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE a FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id \
             WHERE d.endpoint_id = ?",
        )
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM kurir_deliveries WHERE endpoint_id = ?")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// One transaction: locks up to `limit` undispatched outbox rows with `FOR UPDATE SKIP
    /// LOCKED` (concurrent relays take disjoint batches; a row the application has inserted but
    /// not committed is locked by its insert and skipped, so ids committing out of order are
    /// never a gap the relay steps over: it looks by `dispatched_at IS NULL`, not past an id),
    /// reads the enabled endpoints `LOCK IN SHARE MODE` (relays share it; an endpoint's
    /// deletion waits for this batch, and a batch that starts after it sees the endpoint gone),
    /// inserts the deliveries and marks the rows dispatched.
    ///
    /// An idle relay costs one index probe (no transaction, no lock) per look.
    pub(super) async fn relay_batch(&self, limit: u32) -> Result<RelayOutcome> {
        let pending: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM kurir_outbox WHERE dispatched_at IS NULL)",
        )
        .fetch_one(&self.pool)
        .await?;
        if !pending {
            return Ok(RelayOutcome::default());
        }
        let mut tx = self.pool.begin().await?;
        let events = sqlx::query(
            "SELECT id, CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
                 created_at FROM kurir_outbox \
             WHERE dispatched_at IS NULL ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
        )
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        if events.is_empty() {
            // Explicitly: a dropped transaction is rolled back only when its connection is next
            // used, and until then keeps what it locked.
            tx.commit().await?;
            return Ok(RelayOutcome::default());
        }
        let endpoints = sqlx::query(
            "SELECT CAST(id AS CHAR) AS id, CAST(event_types AS CHAR) AS event_types, created_at \
             FROM kurir_endpoints WHERE enabled LOCK IN SHARE MODE",
        )
        .fetch_all(&mut *tx)
        .await?;
        let endpoints = endpoints
            .iter()
            .map(|r| {
                fan_out_target(
                    r.try_get("id")?,
                    r.try_get("event_types")?,
                    r.try_get("created_at")?,
                )
            })
            .collect::<Result<Vec<_>>>()?;

        let mut pairs = Vec::new();
        let mut dispatched = Vec::with_capacity(events.len());
        let mut events_by_type = std::collections::BTreeMap::new();
        for row in &events {
            let id: i64 = row.try_get("id")?;
            let event_id: String = row.try_get("event_id")?;
            let event_type: String = row.try_get("event_type")?;
            let created_at: DateTime<Utc> = row.try_get("created_at")?;
            for target in endpoints
                .iter()
                .filter(|t| t.wants(&event_type, created_at))
            {
                pairs.push(serde_json::json!([id, event_id, target.id]));
            }
            dispatched.push(id);
            *events_by_type.entry(event_type).or_default() += 1;
        }
        // IGNORE skips a pair that already has its delivery (the unique key); the values are
        // kurir's own, so no other error can be downgraded by it.
        let inserted = sqlx::query(
            "INSERT IGNORE INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
             SELECT x.outbox_id, x.event_id, x.endpoint_id FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
                 outbox_id BIGINT PATH '$[0]', event_id VARCHAR(256) PATH '$[1]', \
                 endpoint_id VARCHAR(255) PATH '$[2]')) AS x",
        )
        .bind(serde_json::Value::Array(pairs).to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "UPDATE kurir_outbox o JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS x \
                 ON o.id = x.id \
             SET o.dispatched_at = UTC_TIMESTAMP(3)",
        )
        .bind(serde_json::to_string(&dispatched).unwrap_or_default())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(RelayOutcome {
            events: dispatched.len(),
            deliveries: inserted as usize,
            events_by_type,
        })
    }

    /// One transaction of three statements over the completions as one JSON array: the attempt
    /// rows, the fenced update (a delivery moves on only where its last lease is `owner`'s at
    /// the same attempt number; each row locked by primary key), and endpoints that answered
    /// 410. The attempts of a delivery deleted meanwhile (its endpoint was) are dropped with it.
    pub(super) async fn complete_deliveries(
        &self,
        owner: &str,
        done: &[Completion],
    ) -> Result<u64> {
        let rows: Vec<serde_json::Value> = done
            .iter()
            .map(|c| {
                serde_json::json!([
                    c.delivery_id,
                    c.attempt,
                    c.trigger.as_str(),
                    datetime(c.started_at),
                    c.duration_ms,
                    c.status_code,
                    c.error.as_deref(),
                    c.response_body.as_deref(),
                    next_status(&c.next),
                    match c.next {
                        NextState::Retry(at) => Some(datetime(at)),
                        _ => None,
                    },
                ])
            })
            .collect();
        let rows = serde_json::Value::Array(rows).to_string();
        let gone: Vec<&str> = done
            .iter()
            .filter(|c| c.next == NextState::Gone)
            .map(|c| c.endpoint_id.as_str())
            .collect();
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO kurir_attempts (delivery_id, attempt, `trigger`, started_at, duration_ms, \
                 status_code, error, response_body, worker) \
             SELECT x.id, x.attempt, x.`trigger`, x.started_at, x.duration_ms, x.code, x.err, \
                 x.body, ? FROM {COMPLETIONS} \
             WHERE EXISTS (SELECT 1 FROM kurir_deliveries AS d WHERE d.id = x.id)"
        ))
        .bind(owner)
        .bind(&rows)
        .execute(&mut *tx)
        .await?;
        let moved = sqlx::query(&format!(
            "UPDATE kurir_deliveries AS d JOIN {COMPLETIONS} ON d.id = x.id \
             SET d.status = x.status, d.available_at = COALESCE(x.next_at, d.available_at), \
                 d.lease_owner = NULL, d.lease_expires_at = NULL, d.last_status_code = x.code, \
                 d.last_error = x.err, \
                 d.sent_at = CASE WHEN x.status = 'sent' THEN UTC_TIMESTAMP(3) ELSE d.sent_at END, \
                 d.`trigger` = 'scheduled', d.updated_at = UTC_TIMESTAMP(3) \
             WHERE d.attempt_count = x.attempt AND d.lease_owner = ? \
               AND d.status IN ('processing', 'failed', 'dead_letter')"
        ))
        .bind(&rows)
        .bind(owner)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if !gone.is_empty() {
            sqlx::query(
                "UPDATE kurir_endpoints SET enabled = FALSE, updated_at = UTC_TIMESTAMP(3), \
                     disabled_reason = CONCAT('the endpoint answered 410 Gone at ', \
                         DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%dT%H:%i:%sZ')) \
                 WHERE id IN (SELECT x.id FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
                     id VARCHAR(255) PATH '$')) AS x) AND enabled",
            )
            .bind(serde_json::to_string(&gone).unwrap_or_default())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(done.len() as u64 - moved)
    }

    pub(super) async fn get_event(&self, event_id: &str) -> Result<Option<StoredEvent>> {
        let row = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM kurir_outbox WHERE event_id = ?"
        ))
        .bind(event_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(stored_event).transpose()
    }

    pub(super) async fn deliveries_for_event(&self, event_id: &str) -> Result<Vec<DeliveryRecord>> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM kurir_deliveries \
             WHERE outbox_id = (SELECT id FROM kurir_outbox WHERE event_id = ?) ORDER BY id"
        );
        let rows = sqlx::query(&sql)
            .bind(event_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(delivery_record).collect()
    }

    pub(super) async fn attempts_for_delivery(
        &self,
        delivery_id: i64,
    ) -> Result<Vec<AttemptRecord>> {
        let rows = sqlx::query(
            "SELECT delivery_id, attempt, CAST(`trigger` AS CHAR) AS `trigger`, started_at, \
                 duration_ms, status_code, CAST(error AS CHAR) AS error, \
                 CAST(response_body AS CHAR) AS response_body \
             FROM kurir_attempts WHERE delivery_id = ? ORDER BY id",
        )
        .bind(delivery_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AttemptRecord {
                    delivery_id: r.try_get("delivery_id")?,
                    attempt: u32::try_from(r.try_get::<i32, _>("attempt")?).unwrap_or(0),
                    trigger: Trigger::from_db(r.try_get("trigger")?),
                    started_at: r.try_get("started_at")?,
                    duration_ms: r.try_get("duration_ms")?,
                    status_code: r
                        .try_get::<Option<i32>, _>("status_code")?
                        .map(|c| c as u16),
                    error: r.try_get("error")?,
                    response_body: r.try_get("response_body")?,
                })
            })
            .collect()
    }

    pub(super) async fn count_deliveries_by_status(&self) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query_as(
            "SELECT CAST(status AS CHAR), COUNT(*) FROM kurir_deliveries \
             GROUP BY status ORDER BY status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}

/// A timestamp as `JSON_TABLE` reads it into a `DATETIME(3)` column: UTC, milliseconds.
pub(super) fn datetime(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

fn bind_endpoint<'q>(
    q: Query<'q, MySql, MySqlArguments>,
    e: &'q Endpoint,
) -> Query<'q, MySql, MySqlArguments> {
    let o = &e.overrides;
    q.bind(e.id.as_str())
        .bind(&e.url)
        .bind(&e.description)
        .bind(serde_json::to_string(&e.event_types).unwrap_or_else(|_| "[]".into()))
        .bind(e.secret.expose())
        .bind(serde_json::to_string(&e.previous_secrets).unwrap_or_else(|_| "[]".into()))
        .bind(e.enabled)
        .bind(e.disabled_reason.as_deref())
        .bind(o.connect_timeout_ms.map(i64::from))
        .bind(o.request_timeout_ms.map(i64::from))
        .bind(o.retry_initial_delay_ms.map(|v| v as i64))
        .bind(o.retry_max_delay_ms.map(|v| v as i64))
        .bind(o.retry_max_attempts.map(i64::from))
        .bind(i64::from(e.max_in_flight))
}

pub(super) fn endpoint_row(r: &MySqlRow) -> Result<EndpointRow> {
    let int = |c: &str| -> Result<Option<i64>> { Ok(r.try_get::<Option<i32>, _>(c)?.map(i64::from)) };
    Ok(EndpointRow {
        id: r.try_get("id")?,
        url: r.try_get("url")?,
        description: r.try_get("description")?,
        event_types: r.try_get("event_types")?,
        secret: r.try_get("secret")?,
        previous_secrets: r.try_get("previous_secrets")?,
        enabled: r.try_get("enabled")?,
        disabled_reason: r.try_get("disabled_reason")?,
        connect_timeout_ms: int("connect_timeout_ms")?,
        request_timeout_ms: int("request_timeout_ms")?,
        retry_initial_delay_ms: r.try_get("retry_initial_delay_ms")?,
        retry_max_delay_ms: r.try_get("retry_max_delay_ms")?,
        retry_max_attempts: int("retry_max_attempts")?,
        max_in_flight: i64::from(r.try_get::<i32, _>("max_in_flight")?),
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

fn delivery_record(r: &MySqlRow) -> Result<DeliveryRecord> {
    let status: String = r.try_get("status")?;
    Ok(DeliveryRecord {
        id: r.try_get("id")?,
        event_id: r.try_get("event_id")?,
        endpoint_id: r.try_get("endpoint_id")?,
        status: status
            .parse()
            .map_err(|e: crate::delivery::UnknownStatus| StoreError::Corrupt {
                table: "kurir_deliveries",
                message: e.to_string(),
            })?,
        attempt_count: u32::try_from(r.try_get::<i32, _>("attempt_count")?).unwrap_or(0),
        available_at: r.try_get("available_at")?,
        last_status_code: r
            .try_get::<Option<i32>, _>("last_status_code")?
            .map(|c| c as u16),
        last_error: r.try_get("last_error")?,
        sent_at: r.try_get("sent_at")?,
        created_at: r.try_get("created_at")?,
    })
}

pub(super) fn stored_event(r: &MySqlRow) -> Result<StoredEvent> {
    Ok(StoredEvent {
        id: r.try_get("id")?,
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        version: r.try_get("version")?,
        aggregate_type: r.try_get("aggregate_type")?,
        aggregate_id: r.try_get("aggregate_id")?,
        occurred_at: r.try_get("occurred_at")?,
        payload: r.try_get("payload")?,
        created_at: r.try_get("created_at")?,
        dispatched_at: r.try_get("dispatched_at")?,
        refused_reason: r.try_get("refused_reason")?,
    })
}
