//! Reads of stored records for the API, the CLI and tests: endpoints, events, their deliveries
//! and attempts, and the event and delivery listings (newest first, paged by a keyset on row
//! ids). One statement per read and per dialect, side by side, decoded into the shared rows.
//! Reads only; no locks.

use super::rows::{
    endpoint_columns, AttemptRow, DeliveryListRow, DeliveryRow, EndpointRow, EventRow, ReplayRow,
    Ts,
};
use super::sql::{query_as_on, Sql};
use super::{
    DeliveryListItem, DeliveryQuery, EventQuery, ReplayRecord, Result, Stats, StatusCount, Store,
    StoredEvent,
};
use crate::delivery::{AttemptRecord, DeliveryRecord};
use crate::endpoint::{Endpoint, EndpointId};

const GET_ENDPOINT: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        endpoint_columns!(postgres),
        " FROM kurir_endpoints WHERE id = $1 AND deleted_at IS NULL"
    ),
    sqlite: concat!(
        "SELECT ",
        endpoint_columns!(sqlite),
        " FROM kurir_endpoints WHERE id = ?1 AND deleted_at IS NULL"
    ),
    mysql: concat!(
        "SELECT ",
        endpoint_columns!(mysql),
        " FROM kurir_endpoints WHERE id = $1 AND deleted_at IS NULL"
    ),
};

const LIST_ENDPOINTS: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        endpoint_columns!(postgres),
        " FROM kurir_endpoints WHERE deleted_at IS NULL AND (enabled OR NOT $1) \
        ORDER BY created_at, id"
    ),
    sqlite: concat!(
        "SELECT ",
        endpoint_columns!(sqlite),
        " FROM kurir_endpoints WHERE deleted_at IS NULL AND (enabled OR NOT ?1) \
        ORDER BY created_at, id"
    ),
    mysql: concat!(
        "SELECT ",
        endpoint_columns!(mysql),
        " FROM kurir_endpoints WHERE deleted_at IS NULL AND (enabled OR NOT $1) \
        ORDER BY created_at, id"
    ),
};

/// One page of endpoints in id order (UUIDv7: creation order), after the cursor `$1` (`''` for
/// the first page: every id sorts after it). The cursor is always bound, never `$1 IS NULL OR`:
/// a generic plan cannot turn that disjunction into an index condition and would walk the
/// primary key from its start on every page. `ORDER BY e.id`, qualified: MySQL resolves a bare
/// `id` to the select list's `CAST(id AS CHAR) AS id` and would sort every row past the cursor.
/// Tombstones are skipped while walking the index; no locks.
const ENDPOINT_PAGE: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        endpoint_columns!(postgres),
        " FROM kurir_endpoints e WHERE e.id > $1 AND e.deleted_at IS NULL ORDER BY e.id LIMIT $2"
    ),
    sqlite: concat!(
        "SELECT ",
        endpoint_columns!(sqlite),
        " FROM kurir_endpoints e WHERE e.id > ?1 AND e.deleted_at IS NULL ORDER BY e.id LIMIT ?2"
    ),
    mysql: concat!(
        "SELECT ",
        endpoint_columns!(mysql),
        " FROM kurir_endpoints e WHERE e.id > $1 AND e.deleted_at IS NULL ORDER BY e.id LIMIT $2"
    ),
};

/// [`ENDPOINT_PAGE`] of one subscriber's endpoints (`$3`): a walk of the index on
/// `(subscriber_id, id)` (migration 0019; MySQL's foreign key index) from the cursor, so a page
/// costs what the subscriber has, however many endpoints the others have.
const SUBSCRIBER_ENDPOINT_PAGE: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        endpoint_columns!(postgres),
        " FROM kurir_endpoints e WHERE e.subscriber_id = $3 AND e.id > $1 \
        AND e.deleted_at IS NULL ORDER BY e.id LIMIT $2"
    ),
    sqlite: concat!(
        "SELECT ",
        endpoint_columns!(sqlite),
        " FROM kurir_endpoints e WHERE e.subscriber_id = ?3 AND e.id > ?1 \
        AND e.deleted_at IS NULL ORDER BY e.id LIMIT ?2"
    ),
    mysql: concat!(
        "SELECT ",
        endpoint_columns!(mysql),
        " FROM kurir_endpoints e WHERE e.subscriber_id = $3 AND e.id > $1 \
        AND e.deleted_at IS NULL ORDER BY e.id LIMIT $2"
    ),
};

/// When an outbox row `o` was fanned out, and whether it was (see `StoredEvent::dispatched_at`):
/// a literal, for `concat!`.
macro_rules! dispatch_columns {
    (mysql) => {
        "o.dispatched_at, o.dispatched_at IS NOT NULL AS dispatched"
    };
    ($dialect:tt) => {
        concat!(
            "COALESCE(o.dispatched_at, CASE WHEN ",
            super::cursor::relayed!($dialect),
            " THEN (SELECT min(d.created_at) FROM kurir_deliveries d WHERE d.outbox_id = o.id) \
            END) AS dispatched_at, CASE WHEN ",
            super::cursor::relayed!($dialect),
            " THEN TRUE ELSE FALSE END AS dispatched"
        )
    };
}

const GET_EVENT: Sql = Sql {
    postgres: concat!(
        "SELECT id, event_id, event_type, version, aggregate_type, aggregate_id, \
        occurred_at, payload::text AS payload, created_at, refused_reason, subscriber_id, ",
        dispatch_columns!(postgres),
        " FROM kurir_outbox o WHERE event_id = $1"
    ),
    sqlite: concat!(
        "SELECT id, event_id, event_type, version, aggregate_type, aggregate_id, \
        occurred_at, payload, created_at, refused_reason, subscriber_id, ",
        dispatch_columns!(sqlite),
        " FROM kurir_outbox o WHERE event_id = ?1"
    ),
    mysql: concat!(
        "SELECT id, CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, version, \
        CAST(aggregate_type AS CHAR) AS aggregate_type, CAST(aggregate_id AS CHAR) AS aggregate_id, \
        occurred_at, CAST(payload AS CHAR) AS payload, created_at, \
        CAST(refused_reason AS CHAR) AS refused_reason, \
        CAST(subscriber_id AS CHAR) AS subscriber_id, ",
        dispatch_columns!(mysql),
        " FROM kurir_outbox o WHERE event_id = $1"
    ),
};

const LIST_EVENTS: Sql = Sql {
    postgres: concat!(
        "SELECT id, event_id, event_type, version, aggregate_type, aggregate_id, \
        occurred_at, payload::text AS payload, created_at, refused_reason, subscriber_id, ",
        dispatch_columns!(postgres),
        " FROM kurir_outbox o \
        WHERE ($1::text IS NULL OR event_type = $1) AND ($2::text IS NULL OR aggregate_id = $2) \
          AND ($3::timestamptz IS NULL OR created_at >= $3) \
          AND ($4::timestamptz IS NULL OR created_at < $4) \
          AND ($5::int8 IS NULL OR id < $5) AND ($7::text IS NULL OR subscriber_id = $7) \
        ORDER BY id DESC LIMIT $6"
    ),
    sqlite: concat!(
        "SELECT id, event_id, event_type, version, aggregate_type, aggregate_id, \
        occurred_at, payload, created_at, refused_reason, subscriber_id, ",
        dispatch_columns!(sqlite),
        " FROM kurir_outbox o \
        WHERE (?1 IS NULL OR event_type = ?1) AND (?2 IS NULL OR aggregate_id = ?2) \
          AND (?3 IS NULL OR created_at >= ?3) AND (?4 IS NULL OR created_at < ?4) \
          AND (?5 IS NULL OR id < ?5) AND (?7 IS NULL OR subscriber_id = ?7) \
        ORDER BY id DESC LIMIT ?6"
    ),
    mysql: concat!(
        "SELECT id, CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, version, \
        CAST(aggregate_type AS CHAR) AS aggregate_type, CAST(aggregate_id AS CHAR) AS aggregate_id, \
        occurred_at, CAST(payload AS CHAR) AS payload, created_at, \
        CAST(refused_reason AS CHAR) AS refused_reason, \
        CAST(subscriber_id AS CHAR) AS subscriber_id, ",
        dispatch_columns!(mysql),
        " FROM kurir_outbox o \
        WHERE ($1 IS NULL OR event_type = $1) AND ($2 IS NULL OR aggregate_id = $2) \
          AND ($3 IS NULL OR created_at >= $3) AND ($4 IS NULL OR created_at < $4) \
          AND ($5 IS NULL OR id < $5) AND ($7 IS NULL OR subscriber_id = $7) \
        ORDER BY id DESC LIMIT $6"
    ),
};

/// A delivery's columns with its endpoint's url and tombstone (`e`, joined by `d.endpoint_id`;
/// absent only for an endpoint deleted by hand), as [`DeliveryRow`] reads them.
macro_rules! delivery_columns {
    (postgres) => {
        "d.id, d.event_id, d.endpoint_id, d.status, d.attempt_count, d.available_at, \
        d.last_status_code, d.last_error, d.sent_at, d.created_at, e.url AS endpoint_url, \
        e.deleted_at AS endpoint_deleted_at"
    };
    (mysql) => {
        "d.id, CAST(d.event_id AS CHAR) AS event_id, CAST(d.endpoint_id AS CHAR) AS endpoint_id, \
        CAST(d.status AS CHAR) AS status, d.attempt_count, d.available_at, d.last_status_code, \
        CAST(d.last_error AS CHAR) AS last_error, d.sent_at, d.created_at, \
        CAST(e.url AS CHAR) AS endpoint_url, e.deleted_at AS endpoint_deleted_at"
    };
}

const DELIVERIES_FOR_EVENT: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        delivery_columns!(postgres),
        " FROM kurir_deliveries d LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE d.outbox_id = (SELECT id FROM kurir_outbox WHERE event_id = $1) ORDER BY d.id"
    ),
    sqlite: concat!(
        "SELECT ",
        delivery_columns!(postgres),
        " FROM kurir_deliveries d LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE d.event_id = ?1 ORDER BY d.id"
    ),
    mysql: concat!(
        "SELECT ",
        delivery_columns!(mysql),
        " FROM kurir_deliveries d LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE d.outbox_id = (SELECT id FROM kurir_outbox WHERE event_id = $1) ORDER BY d.id"
    ),
};

const LIST_DELIVERIES: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        delivery_columns!(postgres),
        ", o.event_type \
        FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE ($1::text IS NULL OR d.status = $1) AND ($2::text IS NULL OR d.endpoint_id = $2) \
          AND ($3::text IS NULL OR o.event_type = $3) \
          AND ($4::timestamptz IS NULL OR d.created_at >= $4) \
          AND ($5::timestamptz IS NULL OR d.created_at < $5) \
          AND ($6::int8 IS NULL OR d.id < $6) \
          AND ($8::text IS NULL OR d.endpoint_id IN \
              (SELECT s.id FROM kurir_endpoints s WHERE s.subscriber_id = $8)) \
        ORDER BY d.id DESC LIMIT $7"
    ),
    sqlite: concat!(
        "SELECT ",
        delivery_columns!(postgres),
        ", o.event_type \
        FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE (?1 IS NULL OR d.status = ?1) AND (?2 IS NULL OR d.endpoint_id = ?2) \
          AND (?3 IS NULL OR o.event_type = ?3) \
          AND (?4 IS NULL OR d.created_at >= ?4) AND (?5 IS NULL OR d.created_at < ?5) \
          AND (?6 IS NULL OR d.id < ?6) \
          AND (?8 IS NULL OR d.endpoint_id IN \
              (SELECT s.id FROM kurir_endpoints s WHERE s.subscriber_id = ?8)) \
        ORDER BY d.id DESC LIMIT ?7"
    ),
    mysql: concat!(
        "SELECT ",
        delivery_columns!(mysql),
        ", CAST(o.event_type AS CHAR) AS event_type \
        FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE ($1 IS NULL OR d.status = $1) AND ($2 IS NULL OR d.endpoint_id = $2) \
          AND ($3 IS NULL OR o.event_type = $3) \
          AND ($4 IS NULL OR d.created_at >= $4) AND ($5 IS NULL OR d.created_at < $5) \
          AND ($6 IS NULL OR d.id < $6) \
          AND ($8 IS NULL OR d.endpoint_id IN \
              (SELECT s.id FROM kurir_endpoints s WHERE s.subscriber_id = $8)) \
        ORDER BY d.id DESC LIMIT $7"
    ),
};

/// [`LIST_DELIVERIES`] of one subscriber's endpoints (`$8`, a listing confined to it). On
/// PostgreSQL each of the subscriber's endpoints (tombstones too) is read through the index on
/// `(endpoint_id, id DESC)`, at most a page from each, so a page costs what the subscriber has
/// rather than a walk of every delivery newest first (the planner's choice for the `IN` filter
/// of [`LIST_DELIVERIES`], which reads the whole table for a small subscriber). SQLite and MySQL
/// take that `IN` filter, their planners looking the endpoints up first.
const LIST_SUBSCRIBER_DELIVERIES: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        delivery_columns!(postgres),
        ", o.event_type \
        FROM kurir_endpoints s CROSS JOIN LATERAL ( \
            SELECT d.* FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
            WHERE d.endpoint_id = s.id \
              AND ($1::text IS NULL OR d.status = $1) AND ($2::text IS NULL OR d.endpoint_id = $2) \
              AND ($3::text IS NULL OR o.event_type = $3) \
              AND ($4::timestamptz IS NULL OR d.created_at >= $4) \
              AND ($5::timestamptz IS NULL OR d.created_at < $5) \
              AND ($6::int8 IS NULL OR d.id < $6) \
            ORDER BY d.id DESC LIMIT $7) d \
        JOIN kurir_outbox o ON o.id = d.outbox_id \
        LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE s.subscriber_id = $8 \
        ORDER BY d.id DESC LIMIT $7"
    ),
    sqlite: LIST_DELIVERIES.sqlite,
    mysql: LIST_DELIVERIES.mysql,
};

const ATTEMPTS_FOR_DELIVERY: Sql = Sql {
    postgres: "SELECT delivery_id, attempt, trigger, started_at, duration_ms, status_code, \
        error, response_body FROM kurir_attempts WHERE delivery_id = $1 ORDER BY id",
    sqlite: "SELECT delivery_id, attempt, trigger, started_at, duration_ms, status_code, \
        error, response_body FROM kurir_attempts WHERE delivery_id = ?1 ORDER BY id",
    mysql: "SELECT delivery_id, attempt, CAST(`trigger` AS CHAR) AS `trigger`, \
        started_at, duration_ms, status_code, CAST(error AS CHAR) AS error, \
        CAST(response_body AS CHAR) AS response_body \
        FROM kurir_attempts WHERE delivery_id = $1 ORDER BY id",
};

const LIST_REPLAYS: Sql = Sql {
    postgres: "SELECT id, actor, via, reason, filter::text AS filter, count, created_at \
        FROM kurir_replays WHERE ($1::int8 IS NULL OR id < $1) \
          AND ($3::text IS NULL OR subscriber_id = $3) ORDER BY id DESC LIMIT $2",
    sqlite: "SELECT id, actor, via, reason, filter, count, created_at \
        FROM kurir_replays WHERE (?1 IS NULL OR id < ?1) \
          AND (?3 IS NULL OR subscriber_id = ?3) ORDER BY id DESC LIMIT ?2",
    mysql: "SELECT id, CAST(actor AS CHAR) AS actor, CAST(via AS CHAR) AS via, \
        CAST(reason AS CHAR) AS reason, CAST(filter AS CHAR) AS filter, count, created_at \
        FROM kurir_replays WHERE ($1 IS NULL OR id < $1) \
          AND ($3 IS NULL OR subscriber_id = $3) ORDER BY id DESC LIMIT $2",
};

/// Total and not-yet-fanned-out events, and the oldest of the latter.
macro_rules! outbox_counts {
    ($dialect:tt) => {
        concat!(
            "SELECT (SELECT count(*) FROM kurir_outbox), count(*), min(o.created_at) FROM ",
            super::cursor::unrelayed_rows!($dialect)
        )
    };
}
const OUTBOX_COUNTS: Sql = Sql {
    postgres: outbox_counts!(postgres),
    sqlite: outbox_counts!(sqlite),
    mysql: outbox_counts!(mysql),
};

/// Per status: how many deliveries, and the oldest one's creation.
const DELIVERY_COUNTS_SQL: &str =
    "SELECT status, count(*), min(created_at) FROM kurir_deliveries GROUP BY status";
const DELIVERY_COUNTS: Sql = Sql {
    postgres: DELIVERY_COUNTS_SQL,
    sqlite: DELIVERY_COUNTS_SQL,
    mysql: "SELECT CAST(status AS CHAR), count(*), min(created_at) FROM kurir_deliveries \
        GROUP BY status",
};

const COUNT_BY_STATUS: &str =
    "SELECT status, count(*) FROM kurir_deliveries GROUP BY status ORDER BY status";
const COUNT_DELIVERIES_BY_STATUS: Sql = Sql {
    postgres: COUNT_BY_STATUS,
    sqlite: COUNT_BY_STATUS,
    mysql: "SELECT CAST(status AS CHAR), count(*) FROM kurir_deliveries \
        GROUP BY status ORDER BY status",
};

impl Store {
    /// One endpoint, if it exists.
    pub async fn get_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>> {
        let row: Option<EndpointRow> =
            query_as_on!(self, GET_ENDPOINT, fetch_optional, id.as_str())?;
        row.map(|r| r.into_endpoint(self.secrets())).transpose()
    }

    /// Every endpoint, oldest first. Reads (and decrypts) the whole table: for the metrics'
    /// per-endpoint gauges; listings read [`Store::endpoint_page`].
    pub async fn list_endpoints(&self) -> Result<Vec<Endpoint>> {
        self.endpoints(false).await
    }

    /// Up to `limit` endpoints (`subscriber`'s only, when given), oldest first (by id: a UUIDv7
    /// is its creation time), those after `after` (the last of the previous page) when given. Reads only the page's rows,
    /// walking the primary key from `after`; no locks.
    pub async fn endpoint_page(
        &self,
        after: Option<&EndpointId>,
        limit: u32,
        subscriber: Option<&str>,
    ) -> Result<Vec<Endpoint>> {
        let (after, limit) = (after.map_or("", EndpointId::as_str), i64::from(limit));
        let rows: Vec<EndpointRow> = match subscriber {
            None => query_as_on!(self, ENDPOINT_PAGE, fetch_all, after, limit)?,
            Some(s) => query_as_on!(self, SUBSCRIBER_ENDPOINT_PAGE, fetch_all, after, limit, s)?,
        };
        rows.into_iter()
            .map(|r| r.into_endpoint(self.secrets()))
            .collect()
    }

    /// Every enabled endpoint, oldest first.
    pub async fn enabled_endpoints(&self) -> Result<Vec<Endpoint>> {
        self.endpoints(true).await
    }

    async fn endpoints(&self, enabled_only: bool) -> Result<Vec<Endpoint>> {
        let rows: Vec<EndpointRow> = query_as_on!(self, LIST_ENDPOINTS, fetch_all, enabled_only)?;
        rows.into_iter()
            .map(|r| r.into_endpoint(self.secrets()))
            .collect()
    }

    /// One event by its id.
    pub async fn get_event(&self, event_id: &str) -> Result<Option<StoredEvent>> {
        let row: Option<EventRow> = query_as_on!(self, GET_EVENT, fetch_optional, event_id)?;
        Ok(row.map(Into::into))
    }

    /// Events matching `query`, newest first.
    pub async fn list_events(&self, q: &EventQuery) -> Result<Vec<StoredEvent>> {
        let rows: Vec<EventRow> = query_as_on!(
            self,
            LIST_EVENTS,
            fetch_all,
            q.event_type.as_deref(),
            q.aggregate_id.as_deref(),
            q.since.map(Ts),
            q.until.map(Ts),
            q.before_id,
            i64::from(q.limit),
            q.subscriber_id.as_deref(),
        )?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// The deliveries of one event, by endpoint creation order.
    pub async fn deliveries_for_event(&self, event_id: &str) -> Result<Vec<DeliveryRecord>> {
        let rows: Vec<DeliveryRow> = query_as_on!(self, DELIVERIES_FOR_EVENT, fetch_all, event_id)?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Deliveries matching `query`, newest first.
    pub async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Vec<DeliveryListItem>> {
        macro_rules! list {
            ($sql:expr) => {
                query_as_on!(
                    self,
                    $sql,
                    fetch_all,
                    q.status.map(|s| s.as_str()),
                    q.endpoint_id.as_deref(),
                    q.event_type.as_deref(),
                    q.since.map(Ts),
                    q.until.map(Ts),
                    q.before_id,
                    i64::from(q.limit),
                    q.subscriber_id.as_deref(),
                )
            };
        }
        let rows: Vec<DeliveryListRow> = match q.subscriber_id {
            Some(_) => list!(LIST_SUBSCRIBER_DELIVERIES)?,
            None => list!(LIST_DELIVERIES)?,
        };
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The attempts of one delivery, in the order they were recorded (a replay restarts the
    /// attempt numbers, so they are not unique).
    pub async fn attempts_for_delivery(&self, delivery_id: i64) -> Result<Vec<AttemptRecord>> {
        let rows: Vec<AttemptRow> =
            query_as_on!(self, ATTEMPTS_FOR_DELIVERY, fetch_all, delivery_id)?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Number of deliveries per status.
    pub async fn count_deliveries_by_status(&self) -> Result<Vec<(String, i64)>> {
        Ok(query_as_on!(self, COUNT_DELIVERIES_BY_STATUS, fetch_all)?)
    }

    /// The replay audit, newest first.
    pub async fn list_replays(
        &self,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ReplayRecord>> {
        self.list_subscriber_replays(before_id, limit, None).await
    }

    /// The replay audit, newest first: only the replays confined to `subscriber` when given
    /// (by the index on `(subscriber_id, id)`, migration 0019).
    pub async fn list_subscriber_replays(
        &self,
        before_id: Option<i64>,
        limit: u32,
        subscriber: Option<&str>,
    ) -> Result<Vec<ReplayRecord>> {
        let rows: Vec<ReplayRow> = query_as_on!(
            self,
            LIST_REPLAYS,
            fetch_all,
            before_id,
            i64::from(limit),
            subscriber
        )?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Outbox and delivery counts: two reads, not one snapshot.
    pub async fn stats(&self) -> Result<Stats> {
        let (events_total, events_undispatched, oldest): (i64, i64, Option<Ts>) =
            query_as_on!(self, OUTBOX_COUNTS, fetch_one)?;
        let deliveries: Vec<(String, i64, Option<Ts>)> =
            query_as_on!(self, DELIVERY_COUNTS, fetch_all)?;
        Ok(Stats {
            events_total,
            events_undispatched,
            oldest_undispatched_at: oldest.map(Into::into),
            deliveries: status_counts(deliveries),
        })
    }
}

/// Turns `(status, count, oldest)` rows into [`StatusCount`]s, skipping unknown statuses.
fn status_counts(rows: Vec<(String, i64, Option<Ts>)>) -> Vec<StatusCount> {
    rows.into_iter()
        .filter_map(|(status, count, oldest)| {
            Some(StatusCount {
                status: status.parse().ok()?,
                count,
                oldest_created_at: oldest.map(Into::into),
            })
        })
        .collect()
}
