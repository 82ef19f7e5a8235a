//! The row types every dialect decodes into, one struct per kind of row (`sqlx::FromRow`).
//!
//! What differs between dialects is absorbed here, so the structs serve them all: [`Ts`]
//! (kurir-sql's) reads a timestamp however the dialect keeps it, and integer columns are read as
//! `i32` where the PostgreSQL column is `int4` (SQLite's and MySQL's integers decode into any
//! width), `i64` where the SQL selects them as `int8`. MySQL's text columns are binary-collated,
//! which sqlx will not decode into a `String`: its statements select them through
//! `CAST(… AS CHAR)`. A new dialect implements `sqlx::Type` and `sqlx::Decode` for [`Ts`] and
//! reuses every row below.

use super::{Result, StoreError, StoredEvent};
use crate::delivery::{AttemptRecord, DeliveryRecord, EventSnapshot, Trigger};

pub(crate) use kurir_sql::Ts;

fn u32_of(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn corrupt(table: &'static str, message: String) -> StoreError {
    StoreError::Corrupt { table, message }
}

/// The columns of an [`EndpointRow`] as each dialect selects them (a literal, for `concat!`):
/// PostgreSQL's JSON as text and its `int4` columns as `int8`, MySQL's text through
/// `CAST(… AS CHAR)`.
macro_rules! endpoint_columns {
    (postgres) => {
        "id, url, description, event_types::text AS event_types, secret, \
            previous_secrets::text AS previous_secrets, enabled, disabled_reason, \
            connect_timeout_ms::int8 AS connect_timeout_ms, request_timeout_ms::int8 AS request_timeout_ms, \
            retry_initial_delay_ms, retry_max_delay_ms, retry_max_attempts::int8 AS retry_max_attempts, \
            circuit_failure_threshold::int8 AS circuit_failure_threshold, circuit_cooldown_ms, \
            max_in_flight::int8 AS max_in_flight, rate_limit_per_second::int8 AS rate_limit_per_second, \
            ordering, ordering_on_dead_letter, subscriber_id, created_at, updated_at"
    };
    (sqlite) => {
        "id, url, description, event_types, secret, previous_secrets, \
            enabled, disabled_reason, connect_timeout_ms, request_timeout_ms, retry_initial_delay_ms, \
            retry_max_delay_ms, retry_max_attempts, circuit_failure_threshold, circuit_cooldown_ms, \
            max_in_flight, rate_limit_per_second, ordering, ordering_on_dead_letter, subscriber_id, \
            created_at, updated_at"
    };
    (mysql) => {
        "CAST(id AS CHAR) AS id, CAST(url AS CHAR) AS url, \
            CAST(description AS CHAR) AS description, CAST(event_types AS CHAR) AS event_types, \
            CAST(secret AS CHAR) AS secret, CAST(previous_secrets AS CHAR) AS previous_secrets, \
            enabled, CAST(disabled_reason AS CHAR) AS disabled_reason, connect_timeout_ms, \
            request_timeout_ms, retry_initial_delay_ms, retry_max_delay_ms, retry_max_attempts, \
            circuit_failure_threshold, circuit_cooldown_ms, max_in_flight, rate_limit_per_second, \
            CAST(ordering AS CHAR) AS ordering, \
            CAST(ordering_on_dead_letter AS CHAR) AS ordering_on_dead_letter, \
            CAST(subscriber_id AS CHAR) AS subscriber_id, created_at, updated_at"
    };
}
pub(crate) use endpoint_columns;

/// An endpoint insert up to its `VALUES`, in the order [`super::bind_endpoint`] binds (a
/// literal, for `concat!`).
macro_rules! insert_endpoint {
    () => {
        "INSERT INTO kurir_endpoints (id, url, description, event_types, secret, \
            previous_secrets, enabled, disabled_reason, connect_timeout_ms, request_timeout_ms, \
            retry_initial_delay_ms, retry_max_delay_ms, retry_max_attempts, max_in_flight, \
            circuit_failure_threshold, circuit_cooldown_ms, rate_limit_per_second, ordering, \
            ordering_on_dead_letter, subscriber_id, created_at, updated_at) "
    };
}
pub(crate) use insert_endpoint;

/// An endpoint row before its JSON columns are decoded (see `EndpointRow::into_endpoint`).
#[derive(sqlx::FromRow)]
pub(crate) struct EndpointRow {
    pub id: String,
    pub url: String,
    pub description: String,
    pub event_types: String,
    pub secret: String,
    pub previous_secrets: String,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub connect_timeout_ms: Option<i64>,
    pub request_timeout_ms: Option<i64>,
    pub retry_initial_delay_ms: Option<i64>,
    pub retry_max_delay_ms: Option<i64>,
    pub retry_max_attempts: Option<i64>,
    pub circuit_failure_threshold: Option<i64>,
    pub circuit_cooldown_ms: Option<i64>,
    pub max_in_flight: i64,
    pub rate_limit_per_second: Option<i64>,
    pub ordering: String,
    pub ordering_on_dead_letter: String,
    pub subscriber_id: Option<String>,
    pub created_at: Ts,
    pub updated_at: Ts,
}

impl EndpointRow {
    /// The endpoint, its secrets opened by `codec`.
    pub(crate) fn into_endpoint(
        self,
        codec: &super::SecretCodec,
    ) -> Result<crate::endpoint::Endpoint> {
        let corrupt = |m: String| StoreError::Corrupt {
            table: "kurir_endpoints",
            message: m,
        };
        let event_types = serde_json::from_str(&self.event_types)
            .map_err(|e| corrupt(format!("event_types of {}: {e}", self.id)))?;
        let previous_secrets = serde_json::from_str(&codec.open_list(&self.previous_secrets)?)
            .map_err(|e| corrupt(format!("previous_secrets of {}: {e}", self.id)))?;
        let secret = kurir_core::secret::Secret::parse(&codec.open(&self.secret)?)
            .map_err(|e| corrupt(format!("secret of {}: {e}", self.id)))?;
        let u32_of = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        let ordering = crate::endpoint::Ordering::from_stored(&self.ordering)
            .ok_or_else(|| corrupt(format!("ordering of {}: '{}'", self.id, self.ordering)))?;
        let on_dead_letter = crate::endpoint::OnDeadLetter::from_stored(
            &self.ordering_on_dead_letter,
        )
        .ok_or_else(|| {
            let stored = &self.ordering_on_dead_letter;
            corrupt(format!(
                "ordering_on_dead_letter of {}: '{stored}'",
                self.id
            ))
        })?;
        Ok(crate::endpoint::Endpoint {
            id: crate::endpoint::EndpointId::from_stored(self.id),
            url: self.url,
            description: self.description,
            event_types,
            secret,
            previous_secrets,
            enabled: self.enabled,
            disabled_reason: self.disabled_reason,
            overrides: crate::endpoint::Overrides {
                connect_timeout_ms: u32_of(self.connect_timeout_ms),
                request_timeout_ms: u32_of(self.request_timeout_ms),
                retry_initial_delay_ms: self.retry_initial_delay_ms.and_then(|v| v.try_into().ok()),
                retry_max_delay_ms: self.retry_max_delay_ms.and_then(|v| v.try_into().ok()),
                retry_max_attempts: u32_of(self.retry_max_attempts),
                circuit_failure_threshold: u32_of(self.circuit_failure_threshold),
                circuit_cooldown_ms: self.circuit_cooldown_ms.and_then(|v| v.try_into().ok()),
            },
            max_in_flight: u32_of(Some(self.max_in_flight)).unwrap_or(1).max(1),
            rate_limit_per_second: u32_of(self.rate_limit_per_second),
            ordering,
            ordering_on_dead_letter: on_dead_letter,
            subscriber_id: self.subscriber_id,
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
        })
    }
}

/// A delivery row, as [`DeliveryRecord`] shows it.
#[derive(sqlx::FromRow)]
pub(crate) struct DeliveryRow {
    id: i64,
    event_id: String,
    endpoint_id: String,
    status: String,
    attempt_count: i32,
    available_at: Ts,
    last_status_code: Option<i32>,
    last_error: Option<String>,
    sent_at: Option<Ts>,
    created_at: Ts,
    endpoint_url: Option<String>,
    endpoint_deleted_at: Option<Ts>,
}

impl TryFrom<DeliveryRow> for DeliveryRecord {
    type Error = StoreError;

    fn try_from(r: DeliveryRow) -> Result<Self> {
        Ok(DeliveryRecord {
            id: r.id,
            event_id: r.event_id,
            endpoint_id: r.endpoint_id,
            status: r
                .status
                .parse()
                .map_err(|e: crate::delivery::UnknownStatus| {
                    corrupt("kurir_deliveries", e.to_string())
                })?,
            attempt_count: u32_of(r.attempt_count),
            available_at: r.available_at.0,
            last_status_code: r.last_status_code.map(|c| c as u16),
            last_error: r.last_error,
            sent_at: r.sent_at.map(Into::into),
            created_at: r.created_at.0,
            endpoint_url: r.endpoint_url,
            endpoint_deleted_at: r.endpoint_deleted_at.map(Into::into),
        })
    }
}

/// An attempt row.
#[derive(sqlx::FromRow)]
pub(crate) struct AttemptRow {
    delivery_id: i64,
    attempt: i32,
    trigger: String,
    started_at: Ts,
    duration_ms: i64,
    status_code: Option<i32>,
    error: Option<String>,
    response_body: Option<String>,
}

impl From<AttemptRow> for AttemptRecord {
    fn from(r: AttemptRow) -> Self {
        AttemptRecord {
            delivery_id: r.delivery_id,
            attempt: u32_of(r.attempt),
            trigger: Trigger::from_db(&r.trigger),
            started_at: r.started_at.0,
            duration_ms: r.duration_ms,
            status_code: r.status_code.map(|c| c as u16),
            error: r.error,
            response_body: r.response_body,
        }
    }
}

/// An outbox row, whole (the payload as text).
#[derive(sqlx::FromRow)]
pub(crate) struct EventRow {
    id: i64,
    event_id: String,
    event_type: String,
    version: i32,
    aggregate_type: Option<String>,
    aggregate_id: Option<String>,
    occurred_at: Ts,
    payload: String,
    created_at: Ts,
    dispatched_at: Option<Ts>,
    dispatched: bool,
    refused_reason: Option<String>,
    subscriber_id: Option<String>,
}

impl From<EventRow> for StoredEvent {
    fn from(r: EventRow) -> Self {
        StoredEvent {
            id: r.id,
            event_id: r.event_id,
            event_type: r.event_type,
            version: r.version,
            aggregate_type: r.aggregate_type,
            aggregate_id: r.aggregate_id,
            occurred_at: r.occurred_at.0,
            payload: r.payload,
            created_at: r.created_at.0,
            dispatched_at: r.dispatched_at.map(Into::into),
            dispatched: r.dispatched,
            refused_reason: r.refused_reason,
            subscriber_id: r.subscriber_id,
        }
    }
}

/// A delivery in a listing, with its event's type.
#[derive(sqlx::FromRow)]
pub(crate) struct DeliveryListRow {
    #[sqlx(flatten)]
    delivery: DeliveryRow,
    event_type: String,
}

impl TryFrom<DeliveryListRow> for super::DeliveryListItem {
    type Error = StoreError;

    fn try_from(r: DeliveryListRow) -> Result<Self> {
        Ok(Self {
            delivery: r.delivery.try_into()?,
            event_type: r.event_type,
        })
    }
}

pub(crate) use super::cursor::OutboxHead;

/// A replay's audit row.
#[derive(sqlx::FromRow)]
pub(crate) struct ReplayRow {
    id: i64,
    actor: String,
    via: Option<String>,
    reason: String,
    filter: String,
    count: i64,
    created_at: Ts,
}

impl TryFrom<ReplayRow> for super::ReplayRecord {
    type Error = StoreError;

    fn try_from(r: ReplayRow) -> Result<Self> {
        Ok(Self {
            id: r.id,
            actor: r.actor,
            via: r.via,
            reason: r.reason,
            filter: serde_json::from_str(&r.filter)
                .map_err(|e| corrupt("kurir_replays", format!("filter: {e}")))?,
            count: r.count,
            created_at: r.created_at.0,
        })
    }
}

/// A leased delivery's event and its outbox row id, as the claims that lease first read it.
#[derive(sqlx::FromRow)]
pub(crate) struct SnapshotRow {
    id: i64,
    event_id: String,
    event_type: String,
    version: i32,
    occurred_at: Ts,
    aggregate_id: Option<String>,
    payload: String,
}

impl From<SnapshotRow> for (i64, EventSnapshot) {
    fn from(r: SnapshotRow) -> Self {
        let (event_id, event_type, payload) = (r.event_id, r.event_type, r.payload);
        let (version, occurred_at, aggregate_id) = (r.version, r.occurred_at.0, r.aggregate_id);
        let snapshot = EventSnapshot {
            event_id,
            event_type,
            version,
            occurred_at,
            aggregate_id,
            payload,
        };
        (r.id, snapshot)
    }
}

/// A removed delivery's row (see [`super::Orphan::of_row`]).
#[derive(sqlx::FromRow)]
pub(crate) struct OrphanRow {
    pub id: i64,
    pub endpoint_id: String,
    pub event_id: String,
}
