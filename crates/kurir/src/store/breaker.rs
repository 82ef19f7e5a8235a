//! The endpoints' circuit breakers as every process shares them: one `kurir_endpoint_circuits`
//! row per endpoint whose breaker has counted a failure (migration 0008), and the auto-disable
//! of an endpoint that failed for too long.
//!
//! The state machine is `kurir_core::breaker`'s; this module reads and writes its rows. Every
//! write is a compare-and-set on the row's `version` ([`Store::save_circuit`]), so processes
//! that record outcomes or take a probe at the same moment take turns without holding a lock:
//! the loser reads the row again and re-applies its change ([`Store::update_circuit`]). Both
//! dialects run the same statements (`$n` placeholders become SQLite's `?n`).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use kurir_core::breaker::{State, Window};
use kurir_core::Circuit;
use sqlx::Row;

use super::{now_millis, sqlite_ts, Result, Store, StoreError};
use crate::endpoint::EndpointId;

/// One endpoint's stored circuit.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredCircuit {
    /// The endpoint.
    pub endpoint_id: String,
    /// Its breaker.
    pub circuit: Circuit,
    /// The compare-and-set token of the row.
    pub version: i64,
}

const COLUMNS: &str = "endpoint_id, state, since_ms, consecutive_failures, reopens, \
    next_probe_at_ms, probe_until_ms, failing_since_ms, window_started_at_ms, window_attempts, \
    window_failures, previous_attempts, previous_failures, version";

static ALL: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM kurir_endpoint_circuits"));
static ONE: LazyLock<String> = LazyLock::new(|| format!("{} WHERE endpoint_id = $1", *ALL));

/// `$2`… are the circuit's columns after `endpoint_id`, `$14` the version expected.
const INSERT: &str = "INSERT INTO kurir_endpoint_circuits (endpoint_id, state, since_ms, \
    consecutive_failures, reopens, next_probe_at_ms, probe_until_ms, failing_since_ms, \
    window_started_at_ms, window_attempts, window_failures, previous_attempts, previous_failures, \
    version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 + 1) \
    ON CONFLICT (endpoint_id) DO NOTHING";
const UPDATE: &str = "UPDATE kurir_endpoint_circuits SET state = $2, since_ms = $3, \
    consecutive_failures = $4, reopens = $5, next_probe_at_ms = $6, probe_until_ms = $7, \
    failing_since_ms = $8, window_started_at_ms = $9, window_attempts = $10, \
    window_failures = $11, previous_attempts = $12, previous_failures = $13, \
    version = $14 + 1 WHERE endpoint_id = $1 AND version = $14";
const DISABLE_PG: &str = "UPDATE kurir_endpoints SET enabled = FALSE, disabled_reason = $2, \
    updated_at = now() WHERE id = $1 AND enabled";
const DISABLE_SQLITE: &str = "UPDATE kurir_endpoints SET enabled = 0, disabled_reason = ?2, \
    updated_at = ?3 WHERE id = ?1 AND enabled";

/// SQLite's spelling of a statement written with `$n` placeholders.
pub(super) fn sqlite(sql: &str) -> String {
    sql.replace('$', "?")
}
static ONE_SQLITE: LazyLock<String> = LazyLock::new(|| sqlite(&ONE));
static INSERT_SQLITE: LazyLock<String> = LazyLock::new(|| sqlite(INSERT));
static UPDATE_SQLITE: LazyLock<String> = LazyLock::new(|| sqlite(UPDATE));

/// The most times a compare-and-set update re-reads a row other processes keep changing.
const CAS_TRIES: u32 = 32;

/// A compare-and-set update of one shared row of `table`: `read` it (with its version; `None`
/// without a row, then `fresh` stands in), let `change` modify it and `write` it back if
/// `change` says so (`Some`). A write that finds the row changed since it was read (`false`)
/// starts again after a random pause, so writers that lost to each other do not keep colliding,
/// at most [`CAS_TRIES`] times. Returns the row as written (or as read, when `change` answered
/// `None`) with what `change` answered.
pub(super) async fn compare_and_set<S: Copy, T, R, W>(
    table: &'static str,
    key: &str,
    read: impl Fn() -> R,
    write: impl Fn(S, Option<i64>) -> W,
    fresh: impl Fn() -> S,
    mut change: impl FnMut(&mut S) -> Option<T>,
) -> Result<(S, Option<T>)>
where
    R: std::future::Future<Output = Result<Option<(S, i64)>>>,
    W: std::future::Future<Output = Result<bool>>,
{
    for tries in 0..CAS_TRIES {
        if tries > 0 {
            let pause = rand::random::<u64>() % (1 + 2 * u64::from(tries.min(8)));
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        }
        let stored = read().await?;
        let version = stored.as_ref().map(|(_, v)| *v);
        let mut row = stored.map_or_else(&fresh, |(s, _)| s);
        let Some(answer) = change(&mut row) else {
            return Ok((row, None));
        };
        if write(row, version).await? {
            return Ok((row, Some(answer)));
        }
    }
    Err(StoreError::Corrupt {
        table,
        message: format!("{key}: changed by others {CAS_TRIES} times in a row"),
    })
}

impl Store {
    /// Every stored circuit (endpoints without a row are closed with nothing counted). Reads
    /// the whole table: one small row per endpoint that has failed; no locks.
    pub async fn circuits(&self) -> Result<Vec<StoredCircuit>> {
        match self {
            Store::Postgres(s) => {
                let rows = sqlx::query(&ALL).fetch_all(s.pool()).await?;
                rows.iter().map(decode).collect()
            }
            Store::Sqlite(s) => {
                let rows = sqlx::query(&ALL).fetch_all(s.pool()).await?;
                rows.iter().map(decode).collect()
            }
        }
    }

    /// One endpoint's stored circuit, if it has a row. No locks.
    pub async fn circuit(&self, endpoint_id: &str) -> Result<Option<StoredCircuit>> {
        match self {
            Store::Postgres(s) => {
                let r = sqlx::query(&ONE)
                    .bind(endpoint_id)
                    .fetch_optional(s.pool())
                    .await?;
                r.as_ref().map(decode).transpose()
            }
            Store::Sqlite(s) => {
                let r = sqlx::query(&ONE_SQLITE)
                    .bind(endpoint_id)
                    .fetch_optional(s.pool())
                    .await?;
                r.as_ref().map(decode).transpose()
            }
        }
    }

    /// Writes `circuit` if the row is still at `version` (`None`: there is no row yet); whether
    /// it was written. One statement; a row changed since it was read is left alone.
    pub async fn save_circuit(
        &self,
        endpoint_id: &str,
        circuit: &Circuit,
        version: Option<i64>,
    ) -> Result<bool> {
        let sql = match (self, version) {
            (Store::Postgres(_), None) => INSERT,
            (Store::Postgres(_), Some(_)) => UPDATE,
            (Store::Sqlite(_), None) => INSERT_SQLITE.as_str(),
            (Store::Sqlite(_), Some(_)) => UPDATE_SQLITE.as_str(),
        };
        macro_rules! bind_all {
            ($q:expr) => {
                $q.bind(endpoint_id)
                    .bind(circuit.state.as_str())
                    .bind(ms(circuit.since))
                    .bind(int(circuit.consecutive_failures))
                    .bind(int(circuit.reopens))
                    .bind(circuit.next_probe_at.map(ms))
                    .bind(circuit.probe_until.map(ms))
                    .bind(circuit.failing_since.map(ms))
                    .bind(ms(circuit.window.started_at))
                    .bind(int(circuit.window.attempts))
                    .bind(int(circuit.window.failures))
                    .bind(int(circuit.window.previous_attempts))
                    .bind(int(circuit.window.previous_failures))
                    .bind(version.unwrap_or(0))
            };
        }
        let written = match self {
            Store::Postgres(s) => bind_all!(sqlx::query(sql))
                .execute(s.pool())
                .await?
                .rows_affected(),
            Store::Sqlite(s) => bind_all!(sqlx::query(sql))
                .execute(s.pool())
                .await?
                .rows_affected(),
        };
        Ok(written == 1)
    }

    /// Reads `endpoint_id`'s circuit (closed and empty without a row), lets `change` modify it,
    /// and writes it back if `change` says so (`Some`), compare-and-set: when another process
    /// wrote the row in between, reads it again and re-applies `change`. Returns the circuit as
    /// written (or as read, when `change` answered `None`) with what `change` answered.
    pub async fn update_circuit<T>(
        &self,
        endpoint_id: &str,
        change: impl FnMut(&mut Circuit) -> Option<T>,
    ) -> Result<(Circuit, Option<T>)> {
        compare_and_set(
            "kurir_endpoint_circuits",
            endpoint_id,
            || async {
                let stored = self.circuit(endpoint_id).await?;
                Ok(stored.map(|s| (s.circuit, s.version)))
            },
            |c: Circuit, version| async move { self.save_circuit(endpoint_id, &c, version).await },
            || Circuit::closed(now_millis()),
            change,
        )
        .await
    }

    /// Disables an enabled endpoint with `reason` (the breaker's auto-disable); whether it was
    /// enabled. One statement. Its pending deliveries stay pending: claims only read enabled
    /// endpoints.
    pub async fn disable_failing_endpoint(&self, id: &EndpointId, reason: &str) -> Result<bool> {
        let done = match self {
            Store::Postgres(s) => sqlx::query(DISABLE_PG)
                .bind(id.as_str())
                .bind(reason)
                .execute(s.pool())
                .await?
                .rows_affected(),
            Store::Sqlite(s) => sqlx::query(DISABLE_SQLITE)
                .bind(id.as_str())
                .bind(reason)
                .bind(sqlite_ts(now_millis()))
                .execute(s.pool())
                .await?
                .rows_affected(),
        };
        Ok(done == 1)
    }
}

fn ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn decode<'r, R>(r: &'r R) -> Result<StoredCircuit>
where
    R: Row,
    &'r str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i32: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let endpoint_id: String = r.try_get("endpoint_id")?;
    let corrupt = |what: &str| StoreError::Corrupt {
        table: "kurir_endpoint_circuits",
        message: format!("{what} of {endpoint_id}"),
    };
    let at = |col: &'r str| -> Result<DateTime<Utc>> {
        DateTime::from_timestamp_millis(r.try_get(col)?).ok_or_else(|| corrupt(col))
    };
    let opt_at = |col: &'r str| -> Result<Option<DateTime<Utc>>> {
        let v: Option<i64> = r.try_get(col)?;
        v.map(|v| DateTime::from_timestamp_millis(v).ok_or_else(|| corrupt(col)))
            .transpose()
    };
    let count =
        |col: &'r str| -> Result<u32> { Ok(u32::try_from(r.try_get::<i32, _>(col)?).unwrap_or(0)) };
    let state: String = r.try_get("state")?;
    let circuit = Circuit {
        state: State::parse(&state).ok_or_else(|| corrupt("state"))?,
        since: at("since_ms")?,
        consecutive_failures: count("consecutive_failures")?,
        reopens: count("reopens")?,
        next_probe_at: opt_at("next_probe_at_ms")?,
        probe_until: opt_at("probe_until_ms")?,
        failing_since: opt_at("failing_since_ms")?,
        window: Window {
            started_at: at("window_started_at_ms")?,
            attempts: count("window_attempts")?,
            failures: count("window_failures")?,
            previous_attempts: count("previous_attempts")?,
            previous_failures: count("previous_failures")?,
        },
    };
    Ok(StoredCircuit {
        circuit,
        version: r.try_get("version")?,
        endpoint_id,
    })
}
