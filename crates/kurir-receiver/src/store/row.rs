//! What crosses between the backend-neutral [`Inbox`](super::Inbox) and the two SQL backends: the
//! values of a new row, rows read back, and the `headers` column's JSON form.
//!
//! Keeping these conversions here is what lets `postgres.rs` and `sqlite.rs` be nothing but SQL.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use http::{HeaderMap, HeaderName, HeaderValue};
use sqlx::encode::IsNull;

use super::{ClaimedEvent, Completion, StoreError};
use crate::event::{EventRecord, InboxEvent, InboxStatus, VerifiedEvent};

/// `available_at` of an event whose attempts are exhausted: the column is `NOT NULL`, so "never" is
/// the last millisecond of year 9999, which both backends store and order correctly.
pub(crate) fn never() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(253_402_300_799_999).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The current time truncated to milliseconds, the precision both backends keep alike.
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

/// SQLite's fixed-width text timestamp, `YYYY-MM-DDTHH:MM:SS.sssZ`, which orders as a string.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn sqlite_ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Reads a SQLite timestamp: our format, any RFC 3339, or `YYYY-MM-DD HH:MM:SS` (what SQLite's own
/// `CURRENT_TIMESTAMP` writes, for rows inserted by hand) taken as UTC.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn parse_sqlite_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .ok()
                .map(|n| n.and_utc())
        })
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

/// The values of a row about to be inserted, in both backends' bind order.
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

impl<'a> NewRow<'a> {
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

/// A stored timestamp: PostgreSQL's `timestamptz`, SQLite's text (any form [`parse_sqlite_ts`]
/// reads; written in [`sqlite_ts`]'s), MySQL's `DATETIME(3)` in UTC. What lets one row type below
/// serve every backend, and one bind every dialect; a new backend implements `sqlx::Type`,
/// `sqlx::Decode` and `sqlx::Encode` for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ts(pub DateTime<Utc>);

#[cfg(feature = "postgres")]
impl sqlx::Type<sqlx::Postgres> for Ts {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <DateTime<Utc> as sqlx::Type<sqlx::Postgres>>::type_info()
    }
    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <DateTime<Utc> as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

#[cfg(feature = "postgres")]
impl<'r> sqlx::Decode<'r, sqlx::Postgres> for Ts {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <DateTime<Utc> as sqlx::Decode<sqlx::Postgres>>::decode(value).map(Ts)
    }
}

#[cfg(feature = "postgres")]
impl<'q> sqlx::Encode<'q, sqlx::Postgres> for Ts {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<IsNull, sqlx::error::BoxDynError> {
        <DateTime<Utc> as sqlx::Encode<sqlx::Postgres>>::encode_by_ref(&self.0, buf)
    }
}

#[cfg(feature = "sqlite")]
impl sqlx::Type<sqlx::Sqlite> for Ts {
    fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
        <String as sqlx::Type<sqlx::Sqlite>>::type_info()
    }
    fn compatible(ty: &sqlx::sqlite::SqliteTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Sqlite>>::compatible(ty)
    }
}

#[cfg(feature = "sqlite")]
impl<'r> sqlx::Decode<'r, sqlx::Sqlite> for Ts {
    fn decode(value: sqlx::sqlite::SqliteValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let text = <&str as sqlx::Decode<sqlx::Sqlite>>::decode(value)?;
        parse_sqlite_ts(text)
            .map(Ts)
            .ok_or_else(|| format!("not a timestamp: {text:?}").into())
    }
}

#[cfg(feature = "sqlite")]
impl<'q> sqlx::Encode<'q, sqlx::Sqlite> for Ts {
    fn encode_by_ref(
        &self,
        buf: &mut Vec<sqlx::sqlite::SqliteArgumentValue<'q>>,
    ) -> Result<IsNull, sqlx::error::BoxDynError> {
        <String as sqlx::Encode<sqlx::Sqlite>>::encode(sqlite_ts(self.0), buf)
    }
}

/// MySQL's `DATETIME(3)`, read as UTC (sqlx's sessions use the time zone `+00:00`).
#[cfg(feature = "mysql")]
impl sqlx::Type<sqlx::MySql> for Ts {
    fn type_info() -> sqlx::mysql::MySqlTypeInfo {
        <chrono::NaiveDateTime as sqlx::Type<sqlx::MySql>>::type_info()
    }
    fn compatible(ty: &sqlx::mysql::MySqlTypeInfo) -> bool {
        <DateTime<Utc> as sqlx::Type<sqlx::MySql>>::compatible(ty)
    }
}

#[cfg(feature = "mysql")]
impl<'r> sqlx::Decode<'r, sqlx::MySql> for Ts {
    fn decode(value: sqlx::mysql::MySqlValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <DateTime<Utc> as sqlx::Decode<sqlx::MySql>>::decode(value).map(Ts)
    }
}

/// Bound as a `DATETIME` (`NaiveDateTime`): sqlx sends a `DateTime<Utc>` as a `TIMESTAMP`, which
/// ends in 2038 and turns "never", year 9999, into NULL.
#[cfg(feature = "mysql")]
impl<'q> sqlx::Encode<'q, sqlx::MySql> for Ts {
    fn encode_by_ref(&self, buf: &mut Vec<u8>) -> Result<IsNull, sqlx::error::BoxDynError> {
        <chrono::NaiveDateTime as sqlx::Encode<sqlx::MySql>>::encode_by_ref(
            &self.0.naive_utc(),
            buf,
        )
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
        assert_eq!(sqlite_ts(never()), "9999-12-31T23:59:59.999Z");
        assert_eq!(parse_sqlite_ts(&sqlite_ts(never())), Some(never()));
        assert_eq!(later(never(), Duration::from_secs(60)), never());
    }
}
