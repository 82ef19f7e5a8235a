//! What crosses between the backend-neutral [`Inbox`](super::Inbox) and the SQL backends: the
//! values of a new row, rows read back, and the `headers` column's JSON form.
//!
//! Keeping these conversions here is what lets `postgres.rs`, `sqlite.rs` and `mysql.rs` be
//! nothing but SQL.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, TimeDelta, Utc};
use http::{HeaderMap, HeaderName, HeaderValue};
use kurir_sql::Ts;

use super::{ClaimedEvent, Completion, SourceCount, StoreError};
use crate::event::{EventRecord, InboxEvent, InboxStatus, VerifiedEvent};

/// `available_at` of an event whose attempts are exhausted: the column is `NOT NULL`, so "never" is
/// the last millisecond of year 9999, which every backend stores and orders correctly.
pub(crate) fn never() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(253_402_300_799_999).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The current time truncated to milliseconds, the precision every backend keeps alike.
pub(crate) fn now_millis() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
}

/// `at + duration`, saturating at [`never`].
pub(crate) fn later(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_add_signed(delta))
        .map_or(never(), |t| t.min(never()))
}

/// Headers never written to the database: they carry the sender's credentials, not the event's.
const NOT_STORED: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// The `headers` column: a JSON object of lowercase header names to values (repeated headers
/// joined by ", ").
pub(crate) fn headers_to_json(headers: &HeaderMap) -> String {
    let mut map: BTreeMap<&str, String> = BTreeMap::new();
    for (name, value) in headers {
        if NOT_STORED.contains(&name.as_str()) {
            continue;
        }
        let value = String::from_utf8_lossy(value.as_bytes());
        map.entry(name.as_str())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    serde_json::to_string(&map).unwrap_or_else(|_| "{}".to_owned())
}

/// The headers back from the `headers` column. Entries that are not valid headers (a hand-edited
/// row) are skipped rather than failing the event.
pub(crate) fn headers_from_json(json: &str) -> HeaderMap {
    let map: BTreeMap<String, String> = serde_json::from_str(json).unwrap_or_default();
    let mut headers = HeaderMap::new();
    for (name, value) in map {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            headers.append(name, value);
        }
    }
    headers
}

/// The values of a row about to be inserted, in the insert's bind order.
pub(crate) struct NewRow<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub status: &'static str,
    pub payload: &'a [u8],
    pub headers: String,
    pub attempts: i64,
    pub lease_owner: Option<&'a str>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// `available_at`, `created_at` and `updated_at`.
    pub now: DateTime<Utc>,
}

/// A [`NewRow`]'s binds, in the order of the insert's `$n`: source, event id, event type,
/// idempotency key, signature, status, payload, headers, attempts, `available_at` (also
/// `created_at` and `updated_at`), lease owner, lease expiry, last attempt.
pub(crate) type NewRowBinds<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    &'static str,
    &'a [u8],
    &'a str,
    i32,
    Ts,
    Option<&'a str>,
    Option<Ts>,
    Option<Ts>,
);

impl<'a> NewRow<'a> {
    /// The values the insert binds, each once.
    pub(crate) fn binds(&self) -> NewRowBinds<'_> {
        (
            self.source,
            self.event_id,
            self.event_type,
            self.idempotency_key,
            self.signature,
            self.status,
            self.payload,
            &self.headers,
            i32::try_from(self.attempts).unwrap_or(i32::MAX),
            Ts(self.now),
            self.lease_owner,
            self.lease_expires_at.map(Ts),
            self.last_attempt_at.map(Ts),
        )
    }

    /// A `pending` row, or with `claim` a row already leased to its owner for attempt 1.
    pub(crate) fn new(
        event: &'a VerifiedEvent,
        claim: Option<(&'a str, Duration)>,
        now: DateTime<Utc>,
    ) -> NewRow<'a> {
        let (status, attempts) = match claim {
            Some(_) => (InboxStatus::Processing, 1),
            None => (InboxStatus::Pending, 0),
        };
        NewRow {
            source: &event.source,
            event_id: event.event_id.as_str(),
            event_type: event.event_type.as_deref(),
            idempotency_key: event.idempotency_key.as_deref(),
            signature: event.signature(),
            status: status.as_str(),
            payload: &event.payload,
            headers: headers_to_json(&event.headers),
            attempts,
            lease_owner: claim.map(|(owner, _)| owner),
            lease_expires_at: claim.map(|(_, lease)| later(now, lease)),
            last_attempt_at: claim.map(|_| now),
            now,
        }
    }
}

/// What a claim asks for: due rows (of `sources`, when given) leased to `owner` until
/// `lease_until`, at most `limit`, the attempt starting `now`.
pub(crate) struct Claim<'a> {
    pub owner: &'a str,
    pub now: DateTime<Utc>,
    pub lease_until: DateTime<Utc>,
    pub limit: u32,
    pub sources: Option<&'a [String]>,
}

/// The status columns of one row, as every backend reads them (`attempts` is `int4` on
/// PostgreSQL).
#[derive(sqlx::FromRow)]
pub(crate) struct RecordRow {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub idempotency_key: Option<String>,
    pub status: String,
    pub attempts: i32,
    pub available_at: Ts,
    pub last_attempt_at: Option<Ts>,
    pub last_error: Option<String>,
    pub created_at: Ts,
    pub updated_at: Ts,
}

impl RecordRow {
    pub(crate) fn into_listed(self) -> Result<super::Listed, StoreError> {
        let id = self.id;
        let record = self.into_record()?;
        Ok(super::Listed { id, record })
    }

    pub(crate) fn into_record(self) -> Result<EventRecord, StoreError> {
        let status: InboxStatus = self.status.parse().map_err(|e| StoreError::Corrupt {
            event_id: self.event_id.clone(),
            message: format!("{e}"),
        })?;
        let waiting = matches!(status, InboxStatus::Pending | InboxStatus::Failed);
        Ok(EventRecord {
            next_attempt_at: (waiting && self.available_at.0 < never())
                .then_some(self.available_at.0),
            source: self.source,
            event_id: self.event_id,
            event_type: self.event_type,
            idempotency_key: self.idempotency_key,
            status,
            attempts: attempts_u32(self.attempts),
            last_attempt_at: self.last_attempt_at.map(|t| t.0),
            last_error: self.last_error,
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
        })
    }
}

/// A source's count of rows in one status, as [`COUNTS`](super::sql) reads it.
#[derive(sqlx::FromRow)]
pub(crate) struct CountRow {
    pub source: String,
    pub status: String,
    pub n: i64,
    pub oldest: Option<Ts>,
}

impl CountRow {
    pub(crate) fn into_count(self) -> Result<SourceCount, StoreError> {
        let status = self.status.parse().map_err(|e| StoreError::Corrupt {
            event_id: format!("(any of source {})", self.source),
            message: format!("{e}"),
        })?;
        Ok(SourceCount {
            source: self.source,
            status,
            count: self.n,
            oldest_created_at: self.oldest.map(|t| t.0),
        })
    }
}

/// A row just leased by a claim, with what the handler needs.
#[derive(sqlx::FromRow)]
pub(crate) struct ClaimedRow {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub idempotency_key: Option<String>,
    pub payload: Vec<u8>,
    pub headers: String,
    pub attempts: i32,
    pub created_at: Ts,
}

impl ClaimedRow {
    pub(crate) fn into_claimed(self, owner: &str) -> ClaimedEvent {
        ClaimedEvent {
            row_id: self.id,
            owner: owner.to_owned(),
            event: InboxEvent {
                source: self.source,
                event_id: self.event_id,
                event_type: self.event_type,
                payload: Bytes::from(self.payload),
                headers: headers_from_json(&self.headers),
                idempotency_key: self.idempotency_key,
                attempt: attempts_u32(self.attempts),
                received_at: self.created_at.0,
            },
        }
    }
}

/// The columns a completion writes: `status`, `available_at`, `last_error`.
pub(crate) fn completion_columns(
    completion: &Completion,
    now: DateTime<Utc>,
) -> (&'static str, DateTime<Utc>, Option<&str>) {
    match completion {
        Completion::Completed => (InboxStatus::Completed.as_str(), now, None),
        Completion::Retry { at, error } => (InboxStatus::Failed.as_str(), *at, Some(error)),
        Completion::GiveUp { error } => (InboxStatus::Failed.as_str(), never(), Some(error)),
    }
}

fn attempts_u32(attempts: i32) -> u32 {
    u32::try_from(attempts.max(0)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_without_credentials() {
        let mut headers = HeaderMap::new();
        headers.insert("x-webhook-event-id", HeaderValue::from_static("evt_1"));
        headers.insert("authorization", HeaderValue::from_static("Bearer t0ken"));
        headers.append("x-multi", HeaderValue::from_static("a"));
        headers.append("x-multi", HeaderValue::from_static("b"));
        let json = headers_to_json(&headers);
        assert!(!json.contains("t0ken"), "{json}");
        let back = headers_from_json(&json);
        assert_eq!(back["x-webhook-event-id"], "evt_1");
        assert_eq!(back["x-multi"], "a, b");
        assert!(back.get("authorization").is_none());
    }

    #[test]
    fn never_sorts_last_in_both_forms() {
        use kurir_sql::{parse_sqlite_ts, sqlite_ts};
        assert_eq!(sqlite_ts(never()), "9999-12-31T23:59:59.999Z");
        assert_eq!(parse_sqlite_ts(&sqlite_ts(never())), Some(never()));
        assert_eq!(later(never(), Duration::from_secs(60)), never());
    }
}
