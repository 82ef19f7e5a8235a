//! The transactional outbox: the only writer of `kurir_outbox`.
//!
//! An application records an event in the same database transaction as its business change, so
//! the event exists if and only if the change committed. Delivery is the relay's and dispatcher's
//! business; this module only writes the row.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use kurir::outbox::{self, NewEvent};
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE orders SET status = 'paid' WHERE id = 98765").execute(&mut *tx).await?;
//! let event = NewEvent::json("order.paid", &serde_json::json!({"order_id": "98765", "total": 250000}))?
//!     .aggregate("order", "98765");
//! let event_id = outbox::enqueue(&mut tx, event).await?;
//! tx.commit().await?;
//! # let _ = event_id;
//! # Ok(())
//! # }
//! ```
//!
//! Applications in other languages write the same row with one plain `INSERT` (see the README's
//! SQL contract); every column but `event_type` and `payload` has a database default. The
//! database refuses a row that breaks the contract's rules (migration 0005), which are the rules
//! checked here: [`EventType`], [`EventId`], a JSON object of at most [`MAX_PAYLOAD_BYTES`], and
//! aggregate fields of 1 to [`MAX_AGGREGATE_BYTES`] bytes without NUL.

use std::future::Future;

use chrono::{DateTime, Utc};
use kurir_core::event::{EventId, EventType};
use serde_json::value::RawValue;

/// Largest payload accepted, in bytes of its JSON text (`kurir_outbox_payload_size`).
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Longest aggregate type or id, in bytes (`kurir_outbox_aggregate_format`).
pub const MAX_AGGREGATE_BYTES: usize = 255;

/// An event to record.
#[derive(Clone, Debug)]
pub struct NewEvent {
    /// A caller-chosen id (for idempotency); a UUIDv7 is generated when `None`.
    pub event_id: Option<EventId>,
    /// Dot-separated type, e.g. `order.paid`.
    pub event_type: EventType,
    /// Payload schema version, starting at 1.
    pub version: i32,
    /// What kind of thing the event is about, e.g. `order`.
    pub aggregate_type: Option<String>,
    /// Which one, e.g. `98765`.
    pub aggregate_id: Option<String>,
    /// When it happened; the database's `now()` when `None`.
    pub occurred_at: Option<DateTime<Utc>>,
    /// The payload snapshot, a JSON object, stored and delivered byte-for-byte.
    pub payload: Box<RawValue>,
    /// The subscriber it is addressed to: delivered only to that subscriber's endpoints.
    /// `None`: only to the endpoints without a subscriber (the operator's own). A subscriber
    /// that does not exist fails the insert (`kurir_outbox_subscriber`).
    pub subscriber_id: Option<String>,
}

/// Why an event could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// An event with this id is already in the outbox.
    #[error("an event with event_id '{0}' already exists")]
    DuplicateEventId(EventId),
    /// The event type is not a dot-separated name.
    #[error("invalid event_type: {0}")]
    InvalidEventType(String),
    /// The payload is not a JSON object.
    #[error("invalid payload: {0}")]
    InvalidPayload(String),
    /// The payload is larger than [`MAX_PAYLOAD_BYTES`].
    #[error("the payload is {0} bytes, more than the limit of {MAX_PAYLOAD_BYTES}")]
    PayloadTooLarge(usize),
    /// The payload nests deeper than [`crate::limits::MAX_JSON_DEPTH`].
    #[error(
        "the payload nests {0} levels deep, more than the limit of {max}",
        max = crate::limits::MAX_JSON_DEPTH
    )]
    PayloadTooDeep(usize),
    /// `occurred_at` is outside the years 1 to 9999, which RFC 3339 (the wire format) and both
    /// databases can all hold.
    #[error("invalid occurred_at: must be within the years 0001 to 9999")]
    InvalidOccurredAt,
    /// An aggregate field is empty, too long or holds a NUL.
    #[error("invalid {field}: must be 1 to {MAX_AGGREGATE_BYTES} bytes without NUL")]
    InvalidAggregate {
        /// `aggregate_type` or `aggregate_id`.
        field: &'static str,
    },
    /// The version is below 1.
    #[error("invalid version {0}: must be 1 or more")]
    InvalidVersion(i32),
    /// The database refused the insert for another reason.
    #[error("database error while enqueuing: {0}")]
    Database(#[from] sqlx::Error),
}

impl NewEvent {
    /// An event of `event_type` whose payload is `payload` serialised to JSON.
    pub fn json(event_type: &str, payload: &impl serde::Serialize) -> Result<Self, EnqueueError> {
        let raw = serde_json::value::to_raw_value(payload)
            .map_err(|e| EnqueueError::InvalidPayload(e.to_string()))?;
        Self::raw(event_type, raw)
    }

    /// An event whose payload is already-serialised JSON, kept byte-for-byte.
    pub fn raw(event_type: &str, payload: Box<RawValue>) -> Result<Self, EnqueueError> {
        let event_type = EventType::parse(event_type)
            .map_err(|e| EnqueueError::InvalidEventType(e.to_string()))?;
        if !payload.get().trim_start().starts_with('{') {
            return Err(EnqueueError::InvalidPayload("must be a JSON object".into()));
        }
        if payload.get().len() > MAX_PAYLOAD_BYTES {
            return Err(EnqueueError::PayloadTooLarge(payload.get().len()));
        }
        let depth = crate::limits::json_depth(payload.get());
        if depth > crate::limits::MAX_JSON_DEPTH {
            return Err(EnqueueError::PayloadTooDeep(depth));
        }
        Ok(Self {
            event_id: None,
            event_type,
            version: 1,
            aggregate_type: None,
            aggregate_id: None,
            occurred_at: None,
            payload,
            subscriber_id: None,
        })
    }

    /// Sets the event id (for idempotent producers).
    pub fn event_id(mut self, id: EventId) -> Self {
        self.event_id = Some(id);
        self
    }

    /// Sets the aggregate the event is about.
    pub fn aggregate(mut self, kind: impl Into<String>, id: impl Into<String>) -> Self {
        self.aggregate_type = Some(kind.into());
        self.aggregate_id = Some(id.into());
        self
    }

    /// Sets the payload version.
    pub fn version(mut self, version: i32) -> Self {
        self.version = version;
        self
    }

    /// Addresses the event to a subscriber (its id, as the sender chose it): it goes only to
    /// that subscriber's endpoints.
    pub fn subscriber(mut self, id: impl Into<String>) -> Self {
        self.subscriber_id = Some(id.into());
        self
    }

    /// Sets when the event happened.
    pub fn occurred_at(mut self, at: DateTime<Utc>) -> Self {
        self.occurred_at = Some(at);
        self
    }

    /// [`NewEvent::validate`]s the event and gives the id it is inserted under: the one chosen,
    /// else a new UUIDv7.
    pub(crate) fn checked_id(&self) -> Result<EventId, EnqueueError> {
        self.validate()?;
        Ok(self.event_id.clone().unwrap_or_else(EventId::new_v7))
    }

    /// Checks what the setters cannot: the version, the time and the aggregate fields.
    pub fn validate(&self) -> Result<(), EnqueueError> {
        if self.version < 1 {
            return Err(EnqueueError::InvalidVersion(self.version));
        }
        if self
            .occurred_at
            .is_some_and(|at| !crate::limits::time_in_range(&at))
        {
            return Err(EnqueueError::InvalidOccurredAt);
        }
        for (field, value) in [
            ("aggregate_type", &self.aggregate_type),
            ("aggregate_id", &self.aggregate_id),
        ] {
            if value.as_deref().is_some_and(|v| !valid_aggregate(v)) {
                return Err(EnqueueError::InvalidAggregate { field });
            }
        }
        Ok(())
    }
}

/// An aggregate type or id the outbox takes: 1 to [`MAX_AGGREGATE_BYTES`] bytes, no NUL.
pub fn valid_aggregate(value: &str) -> bool {
    (1..=MAX_AGGREGATE_BYTES).contains(&value.len()) && !value.contains('\0')
}

/// Records `event` in `kurir_outbox` inside the caller's transaction and returns its id.
///
/// Nothing is visible to kurir until the caller commits; if the caller rolls back, the event
/// never existed. Works on a PostgreSQL, SQLite or MySQL/MariaDB transaction.
pub async fn enqueue<DB: OutboxDatabase>(
    tx: &mut sqlx::Transaction<'_, DB>,
    event: NewEvent,
) -> Result<EventId, EnqueueError> {
    insert::<DB>(&mut **tx, &event).await
}

/// [`enqueue`] on a connection the caller holds in a transaction. On PostgreSQL a duplicate id
/// aborts that transaction; on SQLite and MySQL only the statement is undone.
pub(crate) async fn insert<DB: OutboxDatabase>(
    conn: &mut DB::Connection,
    event: &NewEvent,
) -> Result<EventId, EnqueueError> {
    let id = event.checked_id()?;
    let result = DB::insert_event(conn, &id, event).await;
    inserted(id, result)
}

/// What [`OutboxDatabase::insert_event`]'s `result` for `id` means to the caller: a taken id,
/// whether the look-up or the insert found it, is `DuplicateEventId`.
pub(crate) fn inserted(
    id: EventId,
    result: Result<bool, sqlx::Error>,
) -> Result<EventId, EnqueueError> {
    match result {
        Ok(true) => Ok(id),
        Ok(false) => Err(EnqueueError::DuplicateEventId(id)),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            Err(EnqueueError::DuplicateEventId(id))
        }
        Err(e) => Err(e.into()),
    }
}

/// A database kurir's outbox can be written to: PostgreSQL, SQLite and MySQL/MariaDB (each
/// dialect's statement is in the store, beside its other SQL).
pub trait OutboxDatabase: sqlx::Database {
    /// Inserts one outbox row, locking nothing beyond the row itself: `Ok(true)`. An id found
    /// taken before the insert is `Ok(false)`, one the insert meets a unique violation.
    fn insert_event<'c>(
        conn: &'c mut Self::Connection,
        id: &'c EventId,
        event: &'c NewEvent,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_database_would_refuse_is_refused_before_the_insert() {
        let at_limit = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_PAYLOAD_BYTES - 8));
        let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
        assert!(NewEvent::raw("order.paid", raw(&at_limit)).is_ok());
        let over = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_PAYLOAD_BYTES - 7));
        assert!(matches!(
            NewEvent::raw("order.paid", raw(&over)),
            Err(EnqueueError::PayloadTooLarge(n)) if n == MAX_PAYLOAD_BYTES + 1
        ));
        assert!(matches!(
            NewEvent::raw("order.paid", raw("[1,2,3]")),
            Err(EnqueueError::InvalidPayload(_))
        ));
        let event = NewEvent::raw("order.paid", raw("{}")).unwrap();
        for (kind, id) in [("", "1"), ("order", "9\u{0}8"), ("order", &"x".repeat(256))] {
            let err = event.clone().aggregate(kind, id).validate().unwrap_err();
            assert!(
                matches!(err, EnqueueError::InvalidAggregate { .. }),
                "{kind:?} {id:?}"
            );
        }
        assert!(event.clone().aggregate("order", "98765").validate().is_ok());
        let far = DateTime::<Utc>::MAX_UTC;
        assert!(matches!(
            event.occurred_at(far).validate(),
            Err(EnqueueError::InvalidOccurredAt)
        ));
    }
}
