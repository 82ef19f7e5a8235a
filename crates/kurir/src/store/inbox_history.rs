//! The inbox gateway's history (migration 0020): every forward attempt of an inbox event
//! (`kurir_inbox_attempts`) and every operator's retry of one (`kurir_inbox_retries`), named by
//! the event's `(source, event_id)`. `kurir_inbox` itself keeps only the current round (a retry
//! resets its attempt count and error); these rows keep what came before, for the event's page.
//!
//! One statement per operation, written once for the three dialects. Inserts take no lock but
//! their own row; reads are one range of the `(source, event_id, id)` index. Retention deletes
//! the rows with their event (`store::retention`).

use chrono::{DateTime, Utc};

use super::sql::{execute_on, query_as_on, Sql};
use super::{Result, Store};
use crate::access::Actor;

/// The most rows of each kind one event's page reads: far more than a retry policy's attempts
/// times the retries anyone makes, so in practice all of them.
pub const HISTORY_LIMIT: i64 = 1000;

/// One forward attempt, as the gateway records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxAttempt {
    /// The attempt's number within its round (from 1; a retry starts a new round).
    pub attempt: u32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took, in milliseconds.
    pub duration_ms: i64,
    /// The forward URL's HTTP status; `None` without an answer.
    pub status_code: Option<u16>,
    /// What failed; `None` when the forward succeeded.
    pub error: Option<String>,
}

/// An operator's retry of a failed inbox event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxRetry {
    /// The token's name.
    pub actor: String,
    /// Where from (`api`, `cli`, `dashboard`).
    pub via: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

const RECORD_ATTEMPT: Sql = Sql {
    postgres: "INSERT INTO kurir_inbox_attempts \
        (source, event_id, attempt, started_ms, duration_ms, status_code, error) \
        VALUES ($1, $2, $3, $4, $5, $6, $7)",
    mysql: "INSERT INTO kurir_inbox_attempts \
        (source, event_id, attempt, started_ms, duration_ms, status_code, error) \
        VALUES ($1, $2, $3, $4, $5, $6, $7)",
    sqlite: "INSERT INTO kurir_inbox_attempts \
        (source, event_id, attempt, started_ms, duration_ms, status_code, error) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
};

/// One event's attempts, oldest first.
const ATTEMPTS: Sql = Sql {
    postgres: "SELECT attempt::int8, started_ms, duration_ms, status_code::int8, error \
        FROM kurir_inbox_attempts WHERE source = $1 AND event_id = $2 ORDER BY id LIMIT $3",
    mysql: "SELECT CAST(attempt AS SIGNED), started_ms, duration_ms, \
        CAST(status_code AS SIGNED), CAST(error AS CHAR) \
        FROM kurir_inbox_attempts WHERE source = $1 AND event_id = $2 ORDER BY id LIMIT $3",
    sqlite: "SELECT attempt, started_ms, duration_ms, status_code, error \
        FROM kurir_inbox_attempts WHERE source = ?1 AND event_id = ?2 ORDER BY id LIMIT ?3",
};

const RECORD_RETRY: Sql = Sql {
    postgres: "INSERT INTO kurir_inbox_retries (source, event_id, actor, via, created_ms) \
        VALUES ($1, $2, $3, $4, $5)",
    mysql: "INSERT INTO kurir_inbox_retries (source, event_id, actor, via, created_ms) \
        VALUES ($1, $2, $3, $4, $5)",
    sqlite: "INSERT INTO kurir_inbox_retries (source, event_id, actor, via, created_ms) \
        VALUES (?1, ?2, ?3, ?4, ?5)",
};

/// One event's retries, oldest first.
const RETRIES: Sql = Sql {
    postgres: "SELECT actor, via, created_ms FROM kurir_inbox_retries \
        WHERE source = $1 AND event_id = $2 ORDER BY id LIMIT $3",
    mysql: "SELECT CAST(actor AS CHAR), CAST(via AS CHAR), created_ms FROM kurir_inbox_retries \
        WHERE source = $1 AND event_id = $2 ORDER BY id LIMIT $3",
    sqlite: "SELECT actor, via, created_ms FROM kurir_inbox_retries \
        WHERE source = ?1 AND event_id = ?2 ORDER BY id LIMIT ?3",
};

/// Every source's retries, newest first, below an id (the audit's page cursor): a walk down the
/// primary key.
const RECENT_RETRIES: Sql = Sql {
    postgres: "SELECT id, source, event_id, actor, via, created_ms FROM kurir_inbox_retries \
        WHERE id < $1 ORDER BY id DESC LIMIT $2",
    mysql: "SELECT id, CAST(source AS CHAR), CAST(event_id AS CHAR), CAST(actor AS CHAR), \
        CAST(via AS CHAR), created_ms FROM kurir_inbox_retries \
        WHERE id < $1 ORDER BY id DESC LIMIT $2",
    sqlite: "SELECT id, source, event_id, actor, via, created_ms FROM kurir_inbox_retries \
        WHERE id < ?1 ORDER BY id DESC LIMIT ?2",
};

/// An operator's retry as the audit lists it: whose event, and its place in the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditedInboxRetry {
    /// Its row's id: the list's cursor (older retries have smaller ids).
    pub id: i64,
    /// The inbox source.
    pub source: String,
    /// The retried event.
    pub event_id: String,
    /// Who, from where and when.
    pub retry: InboxRetry,
}

type AttemptRow = (i64, i64, i64, Option<i64>, Option<String>);

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl Store {
    /// Records one forward attempt of `source`'s event `event_id`. One insert.
    pub async fn record_inbox_attempt(
        &self,
        source: &str,
        event_id: &str,
        a: &InboxAttempt,
    ) -> Result<()> {
        execute_on!(
            self,
            RECORD_ATTEMPT,
            source,
            event_id,
            i32::try_from(a.attempt).unwrap_or(i32::MAX),
            a.started_at.timestamp_millis(),
            a.duration_ms,
            a.status_code.map(i32::from),
            a.error.as_deref(),
        )?;
        Ok(())
    }

    /// Every forward attempt of `source`'s event `event_id`, oldest first (at most
    /// [`HISTORY_LIMIT`]). One index range; no locks.
    pub async fn inbox_attempts(&self, source: &str, event_id: &str) -> Result<Vec<InboxAttempt>> {
        let rows: Vec<AttemptRow> =
            query_as_on!(self, ATTEMPTS, fetch_all, source, event_id, HISTORY_LIMIT)?;
        Ok(rows
            .into_iter()
            .map(
                |(attempt, started, duration_ms, status_code, error)| InboxAttempt {
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    started_at: at(started),
                    duration_ms,
                    status_code: status_code.and_then(|s| u16::try_from(s).ok()),
                    error,
                },
            )
            .collect())
    }

    /// Audits `actor`'s retry of `source`'s event `event_id`, now by the store's clock. One
    /// insert.
    pub async fn record_inbox_retry(
        &self,
        source: &str,
        event_id: &str,
        actor: &Actor,
    ) -> Result<()> {
        let now = self.clock().now_millis().timestamp_millis();
        execute_on!(
            self,
            RECORD_RETRY,
            source,
            event_id,
            actor.name.as_str(),
            actor.via.as_str(),
            now,
        )?;
        Ok(())
    }

    /// Every audited retry of `source`'s event `event_id`, oldest first (at most
    /// [`HISTORY_LIMIT`]). One index range; no locks.
    pub async fn inbox_retries(&self, source: &str, event_id: &str) -> Result<Vec<InboxRetry>> {
        let rows: Vec<(String, String, i64)> =
            query_as_on!(self, RETRIES, fetch_all, source, event_id, HISTORY_LIMIT)?;
        Ok(rows
            .into_iter()
            .map(|(actor, via, created)| InboxRetry {
                actor,
                via,
                created_at: at(created),
            })
            .collect())
    }

    /// Every source's audited retries with an id below `before` (all of them when `None`),
    /// newest first, at most `limit`. One range of the primary key; no locks.
    pub async fn recent_inbox_retries(
        &self,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditedInboxRetry>> {
        let rows: Vec<(i64, String, String, String, String, i64)> = query_as_on!(
            self,
            RECENT_RETRIES,
            fetch_all,
            before.unwrap_or(i64::MAX),
            limit
        )?;
        Ok(rows
            .into_iter()
            .map(
                |(id, source, event_id, actor, via, created)| AuditedInboxRetry {
                    id,
                    source,
                    event_id,
                    retry: InboxRetry {
                        actor,
                        via,
                        created_at: at(created),
                    },
                },
            )
            .collect())
    }
}
