//! The endpoints' circuit breakers as every process shares them: one `kurir_endpoint_circuits`
//! row per endpoint whose breaker has counted a failure (migration 0008), and the auto-disable
//! of an endpoint that failed for too long.
//!
//! The state machine is `kurir_core::breaker`'s; this module reads and writes its rows. Every
//! write is a compare-and-set on the row's `version` ([`Store::save_circuit`]), so processes
//! that record outcomes or take a probe at the same moment take turns without holding a lock:
//! the loser reads the row again and re-applies its change ([`Store::update_circuit`]). Each
//! statement is one `Sql`, its text per dialect.
//!
//! An operator may bring a probe forward or close a circuit ([`Store::operate_circuit`]); each
//! such action is kept in `kurir_circuit_actions` (migration 0017) with who did it and from where.

use chrono::{DateTime, Utc};
use kurir_core::breaker::{Refusal, State, Window};
use kurir_core::Circuit;

use super::sql::{execute_on, query_as_on, run_in, Sql};
use super::{Result, Store, StoreError};
use crate::access::Actor;
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

/// A `kurir_endpoint_circuits` row as stored.
#[derive(sqlx::FromRow)]
struct CircuitRow {
    endpoint_id: String,
    state: String,
    since_ms: i64,
    consecutive_failures: i32,
    reopens: i32,
    next_probe_at_ms: Option<i64>,
    probe_until_ms: Option<i64>,
    failing_since_ms: Option<i64>,
    window_started_at_ms: i64,
    window_attempts: i32,
    window_failures: i32,
    previous_attempts: i32,
    previous_failures: i32,
    version: i64,
}

macro_rules! circuits_columns {
    () => {
        "since_ms, consecutive_failures, reopens, next_probe_at_ms, \
         probe_until_ms, failing_since_ms, window_started_at_ms, window_attempts, \
         window_failures, previous_attempts, previous_failures, version \
         FROM kurir_endpoint_circuits"
    };
}

/// MySQL reads its binary-collated text through a cast (see `store::rows`).
macro_rules! circuits_select_mysql {
    () => {
        concat!(
            "SELECT CAST(endpoint_id AS CHAR) AS endpoint_id, CAST(state AS CHAR) AS state, ",
            circuits_columns!()
        )
    };
}

macro_rules! circuits_select {
    () => {
        concat!("SELECT endpoint_id, state, ", circuits_columns!())
    };
}

const ALL: Sql = Sql {
    postgres: circuits_select!(),
    sqlite: circuits_select!(),
    mysql: circuits_select_mysql!(),
};
/// The circuits whose endpoint ids lie from `$1` to `$2`: a range of the primary key.
const RANGE: Sql = Sql {
    postgres: concat!(circuits_select!(), " WHERE endpoint_id BETWEEN $1 AND $2"),
    sqlite: concat!(circuits_select!(), " WHERE endpoint_id BETWEEN ?1 AND ?2"),
    mysql: concat!(
        circuits_select_mysql!(),
        " WHERE endpoint_id BETWEEN $1 AND $2"
    ),
};
const ONE: Sql = Sql {
    postgres: concat!(circuits_select!(), " WHERE endpoint_id = $1"),
    sqlite: concat!(circuits_select!(), " WHERE endpoint_id = ?1"),
    mysql: concat!(circuits_select_mysql!(), " WHERE endpoint_id = $1"),
};

/// The circuit's columns in order; `version` is the one expected (the row gets the next).
const INSERT: Sql = Sql {
    postgres: "INSERT INTO kurir_endpoint_circuits (endpoint_id, state, since_ms, \
        consecutive_failures, reopens, next_probe_at_ms, probe_until_ms, failing_since_ms, \
        window_started_at_ms, window_attempts, window_failures, previous_attempts, \
        previous_failures, version) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 + 1) \
        ON CONFLICT (endpoint_id) DO NOTHING",
    mysql: "INSERT IGNORE INTO kurir_endpoint_circuits (endpoint_id, state, since_ms, \
        consecutive_failures, reopens, next_probe_at_ms, probe_until_ms, failing_since_ms, \
        window_started_at_ms, window_attempts, window_failures, previous_attempts, \
        previous_failures, version) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 + 1)",
    sqlite: "INSERT INTO kurir_endpoint_circuits (endpoint_id, state, since_ms, \
        consecutive_failures, reopens, next_probe_at_ms, probe_until_ms, failing_since_ms, \
        window_started_at_ms, window_attempts, window_failures, previous_attempts, \
        previous_failures, version) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14 + 1) \
        ON CONFLICT (endpoint_id) DO NOTHING",
};
const UPDATE: Sql = Sql {
    postgres: "UPDATE kurir_endpoint_circuits SET state = $2, since_ms = $3, \
        consecutive_failures = $4, reopens = $5, next_probe_at_ms = $6, probe_until_ms = $7, \
        failing_since_ms = $8, window_started_at_ms = $9, window_attempts = $10, \
        window_failures = $11, previous_attempts = $12, previous_failures = $13, \
        version = $14 + 1 WHERE endpoint_id = $1 AND version = $14",
    sqlite: "UPDATE kurir_endpoint_circuits SET state = ?2, since_ms = ?3, \
        consecutive_failures = ?4, reopens = ?5, next_probe_at_ms = ?6, probe_until_ms = ?7, \
        failing_since_ms = ?8, window_started_at_ms = ?9, window_attempts = ?10, \
        window_failures = ?11, previous_attempts = ?12, previous_failures = ?13, \
        version = ?14 + 1 WHERE endpoint_id = ?1 AND version = ?14",
    mysql: "UPDATE kurir_endpoint_circuits SET state = $2, since_ms = $3, \
        consecutive_failures = $4, reopens = $5, next_probe_at_ms = $6, probe_until_ms = $7, \
        failing_since_ms = $8, window_started_at_ms = $9, window_attempts = $10, \
        window_failures = $11, previous_attempts = $12, previous_failures = $13, \
        version = $14 + 1 WHERE endpoint_id = $1 AND version = $14",
};
/// Timestamps as each dialect's schema defaults write them.
const DISABLE: Sql = Sql {
    postgres: "UPDATE kurir_endpoints SET enabled = FALSE, disabled_reason = $2, \
        updated_at = now() WHERE id = $1 AND enabled",
    sqlite: "UPDATE kurir_endpoints SET enabled = 0, disabled_reason = ?2, \
        updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1 AND enabled",
    mysql: "UPDATE kurir_endpoints SET enabled = FALSE, disabled_reason = $2, \
        updated_at = UTC_TIMESTAMP(3) WHERE id = $1 AND enabled",
};

/// One operator action, audited: the circuit's state before it, who and from where.
const RECORD_ACTION: Sql = Sql {
    postgres: "INSERT INTO kurir_circuit_actions \
        (endpoint_id, action, state_before, actor, via, created_ms) \
        VALUES ($1, $2, $3, $4, $5, $6)",
    mysql: "INSERT INTO kurir_circuit_actions \
        (endpoint_id, action, state_before, actor, via, created_ms) \
        VALUES ($1, $2, $3, $4, $5, $6)",
    sqlite: "INSERT INTO kurir_circuit_actions \
        (endpoint_id, action, state_before, actor, via, created_ms) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
};
/// An endpoint's newest actions first, at most `$2`: its part of the index.
const ACTIONS: Sql = Sql {
    postgres: "SELECT action, state_before, actor, via, created_ms FROM kurir_circuit_actions \
        WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2",
    mysql: "SELECT CAST(action AS CHAR) AS action, CAST(state_before AS CHAR) AS state_before, \
        CAST(actor AS CHAR) AS actor, CAST(via AS CHAR) AS via, created_ms \
        FROM kurir_circuit_actions WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2",
    sqlite: "SELECT action, state_before, actor, via, created_ms FROM kurir_circuit_actions \
        WHERE endpoint_id = ?1 ORDER BY id DESC LIMIT ?2",
};

/// What an operator does to a circuit.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CircuitAction {
    /// Ends an open circuit's cool-down now: the next claim carries the probe.
    Probe,
    /// Closes the circuit: deliveries flow again, nothing counted.
    Close,
}

impl CircuitAction {
    /// `probe` or `close`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Probe => "probe",
            Self::Close => "close",
        }
    }
}

/// An audited operator action on a circuit.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct CircuitActionRecord {
    /// `probe` or `close`.
    pub action: String,
    /// The circuit's state before it.
    pub state_before: String,
    /// The token's name.
    pub actor: String,
    /// Where from (`api`, `cli`, `dashboard`).
    pub via: String,
    /// When, unix milliseconds.
    pub created_ms: i64,
}

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
        let rows: Vec<CircuitRow> = query_as_on!(self, ALL, fetch_all)?;
        rows.into_iter().map(CircuitRow::decode).collect()
    }

    /// The stored circuits of the endpoints whose ids lie from `first` to `last`: those of a
    /// page of endpoints read by [`Store::endpoint_page`] (its first and last ids), and no
    /// more than one row per endpoint of that range. One range read of the primary key; no
    /// locks.
    pub async fn circuits_between(
        &self,
        first: &EndpointId,
        last: &EndpointId,
    ) -> Result<Vec<StoredCircuit>> {
        let (first, last) = (first.as_str(), last.as_str());
        let rows: Vec<CircuitRow> = query_as_on!(self, RANGE, fetch_all, first, last)?;
        rows.into_iter().map(CircuitRow::decode).collect()
    }

    /// One endpoint's stored circuit, if it has a row. No locks.
    pub async fn circuit(&self, endpoint_id: &str) -> Result<Option<StoredCircuit>> {
        let row: Option<CircuitRow> = query_as_on!(self, ONE, fetch_optional, endpoint_id)?;
        row.map(CircuitRow::decode).transpose()
    }

    /// Writes `circuit` if the row is still at `version` (`None`: there is no row yet); whether
    /// it was written. One statement; a row changed since it was read is left alone.
    pub async fn save_circuit(
        &self,
        endpoint_id: &str,
        circuit: &Circuit,
        version: Option<i64>,
    ) -> Result<bool> {
        let sql = if version.is_some() { UPDATE } else { INSERT };
        let c = circuit;
        let written = execute_on!(
            self,
            sql,
            endpoint_id,
            c.state.as_str(),
            ms(c.since),
            int(c.consecutive_failures),
            int(c.reopens),
            c.next_probe_at.map(ms),
            c.probe_until.map(ms),
            c.failing_since.map(ms),
            ms(c.window.started_at),
            int(c.window.attempts),
            int(c.window.failures),
            int(c.window.previous_attempts),
            int(c.window.previous_failures),
            version.unwrap_or(0),
        )?;
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
            || Circuit::closed(self.clock().now_millis()),
            change,
        )
        .await
    }

    /// An operator's `action` on `endpoint_id`'s circuit, compare-and-set like every other
    /// write ([`Store::update_circuit`]), then audited with `actor` (one insert). `Ok(Err(_))`:
    /// refused, nothing changed or recorded. A process's own copy of the circuit follows at its
    /// next read of the circuits.
    pub async fn operate_circuit(
        &self,
        endpoint_id: &EndpointId,
        action: CircuitAction,
        actor: &Actor,
    ) -> Result<std::result::Result<Circuit, Refusal>> {
        let now = self.clock().now_millis();
        let mut refused = None;
        let mut before = State::Closed;
        let (circuit, done) = self
            .update_circuit(endpoint_id.as_str(), |c| {
                before = c.state;
                let done = match action {
                    CircuitAction::Probe => c.probe_now(now),
                    CircuitAction::Close => c.close_now(now).map(|_| ()),
                };
                refused = done.err();
                done.ok()
            })
            .await?;
        if done.is_none() {
            return Ok(Err(refused.unwrap_or(Refusal::Closed)));
        }
        execute_on!(
            self,
            RECORD_ACTION,
            endpoint_id.as_str(),
            action.as_str(),
            before.as_str(),
            actor.name.as_str(),
            actor.via.as_str(),
            ms(now),
        )?;
        Ok(Ok(circuit))
    }

    /// The newest `limit` operator actions on `endpoint_id`'s circuit, newest first. One read
    /// of its index; no locks.
    pub async fn circuit_actions(
        &self,
        endpoint_id: &EndpointId,
        limit: i64,
    ) -> Result<Vec<CircuitActionRecord>> {
        Ok(query_as_on!(
            self,
            ACTIONS,
            fetch_all,
            endpoint_id.as_str(),
            limit
        )?)
    }

    /// Disables an enabled endpoint with `reason` (the breaker's auto-disable); whether it was
    /// enabled. One statement. Its pending deliveries stay pending: claims only read enabled
    /// endpoints.
    pub async fn disable_failing_endpoint(&self, id: &EndpointId, reason: &str) -> Result<bool> {
        let done = match self {
            Store::Mysql(s) => {
                let mut tx = s.pool().begin().await?;
                let done = run_in!(tx, mysql, DISABLE, query, execute, id.as_str(), reason)?;
                if done.rows_affected() == 1 {
                    super::directory::stamp_mysql(&mut tx, &[id.as_str()]).await?;
                }
                tx.commit().await?;
                done.rows_affected()
            }
            _ => execute_on!(self, DISABLE, id.as_str(), reason)?,
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

impl CircuitRow {
    fn decode(self) -> Result<StoredCircuit> {
        let id = self.endpoint_id;
        let corrupt = |what: &str| StoreError::Corrupt {
            table: "kurir_endpoint_circuits",
            message: format!("{what} of {id}"),
        };
        let at =
            |ms: i64, what: &str| DateTime::from_timestamp_millis(ms).ok_or_else(|| corrupt(what));
        let opt_at = |ms: Option<i64>, what: &str| ms.map(|ms| at(ms, what)).transpose();
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        let circuit = Circuit {
            state: State::parse(&self.state).ok_or_else(|| corrupt("state"))?,
            since: at(self.since_ms, "since_ms")?,
            consecutive_failures: count(self.consecutive_failures),
            reopens: count(self.reopens),
            next_probe_at: opt_at(self.next_probe_at_ms, "next_probe_at_ms")?,
            probe_until: opt_at(self.probe_until_ms, "probe_until_ms")?,
            failing_since: opt_at(self.failing_since_ms, "failing_since_ms")?,
            window: Window {
                started_at: at(self.window_started_at_ms, "window_started_at_ms")?,
                attempts: count(self.window_attempts),
                failures: count(self.window_failures),
                previous_attempts: count(self.previous_attempts),
                previous_failures: count(self.previous_failures),
            },
        };
        Ok(StoredCircuit {
            endpoint_id: id,
            circuit,
            version: self.version,
        })
    }
}
