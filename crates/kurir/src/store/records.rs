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

/// An event's columns as [`EventRow`] reads them, from outbox row `o`.
macro_rules! event_columns {
    (postgres) => {
        concat!(
            "o.id, o.event_id, o.event_type, o.version, o.aggregate_type, o.aggregate_id, \
            o.occurred_at, o.payload::text AS payload, o.created_at, o.refused_reason, \
            o.subscriber_id, ",
            dispatch_columns!(postgres)
        )
    };
    (sqlite) => {
        concat!(
            "o.id, o.event_id, o.event_type, o.version, o.aggregate_type, o.aggregate_id, \
            o.occurred_at, o.payload, o.created_at, o.refused_reason, o.subscriber_id, ",
            dispatch_columns!(sqlite)
        )
    };
    (mysql) => {
        concat!(
            "o.id, CAST(o.event_id AS CHAR) AS event_id, CAST(o.event_type AS CHAR) AS event_type, \
            o.version, CAST(o.aggregate_type AS CHAR) AS aggregate_type, \
            CAST(o.aggregate_id AS CHAR) AS aggregate_id, o.occurred_at, \
            CAST(o.payload AS CHAR) AS payload, o.created_at, \
            CAST(o.refused_reason AS CHAR) AS refused_reason, \
            CAST(o.subscriber_id AS CHAR) AS subscriber_id, ",
            dispatch_columns!(mysql)
        )
    };
}

const GET_EVENT: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        event_columns!(postgres),
        " FROM kurir_outbox o WHERE o.event_id = $1"
    ),
    sqlite: concat!(
        "SELECT ",
        event_columns!(sqlite),
        " FROM kurir_outbox o WHERE o.event_id = ?1"
    ),
    mysql: concat!(
        "SELECT ",
        event_columns!(mysql),
        " FROM kurir_outbox o WHERE o.event_id = $1"
    ),
};

/// The event listing's filters on rows `$t` (`l`, listed; `w`, waiting) whose outbox id is
/// `$t.$id`: type `$1`, aggregate id `$2`, written at or after `$3` and before `$4`, below the
/// keyset cursor `$5` (always bound, so it bounds the index walk), subscriber `$7`.
macro_rules! event_filters {
    (postgres, $t:literal, $id:literal) => {
        concat!(
            "($1::text IS NULL OR ",
            $t,
            ".event_type = $1) \
            AND ($2::text IS NULL OR ",
            $t,
            ".aggregate_id = $2) \
            AND ($3::timestamptz IS NULL OR ",
            $t,
            ".created_at >= $3) \
            AND ($4::timestamptz IS NULL OR ",
            $t,
            ".created_at < $4) \
            AND ",
            $t,
            ".",
            $id,
            " < $5 AND ($7::text IS NULL OR ",
            $t,
            ".subscriber_id = $7)"
        )
    };
    (sqlite, $t:literal, $id:literal) => {
        concat!(
            "(?1 IS NULL OR ",
            $t,
            ".event_type = ?1) AND (?2 IS NULL OR ",
            $t,
            ".aggregate_id = ?2) \
            AND (?3 IS NULL OR ",
            $t,
            ".created_at >= ?3) AND (?4 IS NULL OR ",
            $t,
            ".created_at < ?4) \
            AND ",
            $t,
            ".",
            $id,
            " < ?5 AND (?7 IS NULL OR ",
            $t,
            ".subscriber_id = ?7)"
        )
    };
    (mysql, $t:literal, $id:literal) => {
        concat!(
            "($1 IS NULL OR ",
            $t,
            ".event_type = $1) AND ($2 IS NULL OR ",
            $t,
            ".aggregate_id = $2) \
            AND ($3 IS NULL OR ",
            $t,
            ".created_at >= $3) AND ($4 IS NULL OR ",
            $t,
            ".created_at < $4) \
            AND ",
            $t,
            ".",
            $id,
            " < $5 AND ($7 IS NULL OR ",
            $t,
            ".subscriber_id = $7)"
        )
    };
}

/// A page of the event listing, newest first (`$6` rows): the listed rows through the index of
/// `kurir_event_list` that `$drive` (a condition on `l`, or `TRUE`) walks, newest first from
/// the cursor, and the rows still waiting for the relay (see `store::event_list`), each at
/// most a page, then their outbox rows by primary key. The driving condition is a literal of
/// each statement, not a `$n IS NULL OR` test: a generic plan cannot turn such a test into an
/// index condition and would walk every listed row for a rare type.
macro_rules! list_events {
    ($dialect:tt, $drive:literal, $limit:literal) => {
        concat!(
            "SELECT ",
            event_columns!($dialect),
            " FROM (SELECT * FROM (SELECT l.outbox_id FROM kurir_event_list l WHERE ",
            $drive,
            " AND ",
            event_filters!($dialect, "l", "outbox_id"),
            " ORDER BY l.outbox_id DESC LIMIT ",
            $limit,
            ") listed UNION ALL SELECT * FROM (SELECT w.id FROM ",
            super::event_list::waiting!($dialect),
            " WHERE ",
            event_filters!($dialect, "w", "id"),
            " ORDER BY w.id DESC LIMIT ",
            $limit,
            ") unlisted) x JOIN kurir_outbox o ON o.id = x.outbox_id ORDER BY o.id DESC LIMIT ",
            $limit
        )
    };
}

/// Every event, newest first: the primary key of `kurir_event_list`, walked from the cursor.
const LIST_EVENTS: Sql = Sql {
    postgres: list_events!(postgres, "TRUE", "$6"),
    sqlite: list_events!(sqlite, "1", "?6"),
    mysql: list_events!(mysql, "TRUE", "$6"),
};

/// Events of one type, through `kurir_event_list_event_type`.
const LIST_EVENTS_OF_TYPE: Sql = Sql {
    postgres: list_events!(postgres, "l.event_type = $1", "$6"),
    sqlite: list_events!(sqlite, "l.event_type = ?1", "?6"),
    mysql: list_events!(mysql, "l.event_type = $1", "$6"),
};

/// Events of one aggregate id, through `kurir_event_list_aggregate`.
const LIST_EVENTS_OF_AGGREGATE: Sql = Sql {
    postgres: list_events!(postgres, "l.aggregate_id = $2", "$6"),
    sqlite: list_events!(sqlite, "l.aggregate_id = ?2", "?6"),
    mysql: list_events!(mysql, "l.aggregate_id = $2", "$6"),
};

/// Events addressed to one subscriber, through `kurir_event_list_subscriber`.
const LIST_EVENTS_OF_SUBSCRIBER: Sql = Sql {
    postgres: list_events!(postgres, "l.subscriber_id = $7", "$6"),
    sqlite: list_events!(sqlite, "l.subscriber_id = ?7", "?6"),
    mysql: list_events!(mysql, "l.subscriber_id = $7", "$6"),
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
pub(super) use delivery_columns;

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
        ORDER BY d.id DESC LIMIT $7"
    ),
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

    /// Events matching `query`, newest first: those the relay has passed through the indexes of
    /// `kurir_event_list`, those still waiting for it from the outbox past its cursor.
    pub async fn list_events(&self, q: &EventQuery) -> Result<Vec<StoredEvent>> {
        // The most selective filter given drives the walk.
        let sql = if q.aggregate_id.is_some() {
            LIST_EVENTS_OF_AGGREGATE
        } else if q.subscriber_id.is_some() {
            LIST_EVENTS_OF_SUBSCRIBER
        } else if q.event_type.is_some() {
            LIST_EVENTS_OF_TYPE
        } else {
            LIST_EVENTS
        };
        let rows: Vec<EventRow> = query_as_on!(
            self,
            sql,
            fetch_all,
            q.event_type.as_deref(),
            q.aggregate_id.as_deref(),
            q.since.map(Ts),
            q.until.map(Ts),
            q.before_id.unwrap_or(i64::MAX),
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

    /// Deliveries matching `query`, newest first. One subscriber's are read through its
    /// endpoints' index (`store::subscriber_log`).
    pub async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Vec<DeliveryListItem>> {
        if let Some(subscriber) = &q.subscriber_id {
            return self.subscriber_deliveries(q, subscriber).await;
        }
        let rows: Vec<DeliveryListRow> = query_as_on!(
            self,
            LIST_DELIVERIES,
            fetch_all,
            q.status.map(|s| s.as_str()),
            q.endpoint_id.as_deref(),
            q.event_type.as_deref(),
            q.since.map(Ts),
            q.until.map(Ts),
            q.before_id,
            i64::from(q.limit),
        )?;
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

/// The event listing stays index-backed at a million events on every database (issue 27,
/// item 3): each filter walks its index of `kurir_event_list`, newest first from the cursor,
/// and nothing reads a table whole. On PostgreSQL also with a generic plan, as a statement
/// cached by a connection may be planned.
#[cfg(test)]
mod tests {
    use super::*;

    /// Events in the history.
    const EVENTS: i64 = 1_000_000;

    /// A listing statement, the index it must walk (per dialect: PostgreSQL, SQLite, MySQL),
    /// and its filters (type, aggregate id, subscriber) and keyset cursor.
    struct Listing {
        sql: Sql,
        index: [&'static str; 3],
        event_type: Option<&'static str>,
        aggregate_id: Option<&'static str>,
        subscriber: Option<&'static str>,
        before: i64,
    }

    fn listings() -> [Listing; 5] {
        let pkey = ["kurir_event_list_pkey", "INTEGER PRIMARY KEY", "PRIMARY"];
        let none = || Listing {
            sql: LIST_EVENTS,
            index: pkey,
            event_type: None,
            aggregate_id: None,
            subscriber: None,
            before: i64::MAX,
        };
        [
            none(),
            Listing {
                before: EVENTS / 2,
                ..none()
            },
            Listing {
                sql: LIST_EVENTS_OF_TYPE,
                index: ["kurir_event_list_event_type"; 3],
                event_type: Some("rare.type"),
                ..none()
            },
            Listing {
                sql: LIST_EVENTS_OF_AGGREGATE,
                index: ["kurir_event_list_aggregate"; 3],
                aggregate_id: Some("a77"),
                ..none()
            },
            Listing {
                sql: LIST_EVENTS_OF_SUBSCRIBER,
                index: ["kurir_event_list_subscriber"; 3],
                subscriber: Some("s1"),
                ..none()
            },
        ]
    }

    /// Each scan of a PostgreSQL JSON plan, as "<index, or node type> on <relation>".
    fn scans_of(plan: &serde_json::Value, out: &mut Vec<String>) {
        match plan {
            serde_json::Value::Object(node) => {
                let text = |key: &str| node.get(key).and_then(|v| v.as_str());
                // A bitmap's index is named on its child, the relation on its heap scan.
                match (text("Index Name"), text("Relation Name")) {
                    (Some(index), relation) => {
                        out.push(format!("{index} on {}", relation.unwrap_or("a bitmap")));
                    }
                    (None, Some(relation)) => {
                        out.push(format!(
                            "{} on {relation}",
                            text("Node Type").unwrap_or("?")
                        ));
                    }
                    (None, None) => {}
                }
                node.values().for_each(|v| scans_of(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| scans_of(v, out)),
            _ => {}
        }
    }

    /// A literal of `v` for SQL text.
    fn literal(v: Option<&str>) -> String {
        v.map_or("NULL".to_owned(), |v| format!("'{v}'"))
    }

    /// `sql` with the listing's values in place of `$1`…`$7` (a page of 50).
    fn with_values(sql: &str, l: &Listing) -> String {
        [
            ("$7", literal(l.subscriber)),
            ("$6", "50".to_owned()),
            ("$5", l.before.to_string()),
            ("$4", "NULL".to_owned()),
            ("$3", "NULL".to_owned()),
            ("$2", literal(l.aggregate_id)),
            ("$1", literal(l.event_type)),
        ]
        .iter()
        .fold(sql.to_owned(), |s, (p, v)| s.replace(p, v))
    }

    /// Each listing's plan, as chosen by default and as a generic plan.
    async fn pg_plans(pool: &sqlx::PgPool) -> Vec<(&'static str, &'static str, serde_json::Value)> {
        let mut plans = Vec::new();
        for (i, l) in listings().iter().enumerate() {
            let mut conn = pool.acquire().await.unwrap();
            sqlx::raw_sql(&format!(
                "PREPARE listing{i} (text, text, timestamptz, timestamptz, int8, int8, text) AS {}",
                l.sql.postgres
            ))
            .execute(&mut *conn)
            .await
            .unwrap();
            let execute = with_values(
                &format!("EXPLAIN (FORMAT JSON) EXECUTE listing{i} ($1, $2, $3, $4, $5, $6, $7)"),
                l,
            );
            for mode in ["auto", "force_generic_plan"] {
                sqlx::raw_sql(&format!("SET plan_cache_mode = {mode}"))
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                let plan: serde_json::Value = sqlx::query_scalar(&execute)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                plans.push((l.index[0], mode, plan));
            }
            sqlx::raw_sql(&format!("DEALLOCATE listing{i}"))
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        plans
    }

    #[tokio::test]
    async fn the_event_listing_walks_an_index_at_a_million_events_on_postgres() {
        let Some((url, admin, name)) = crate::store::postgres::tests::fresh_database().await else {
            return;
        };
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        for sql in [
            "INSERT INTO kurir_outbox (event_type, aggregate_type, aggregate_id, payload, \
                 created_at) \
             SELECT CASE WHEN i % 100000 = 0 THEN 'rare.type' ELSE 'order.paid' END, 'order', \
                 'a' || i, '{}', now() - (1000000 - i) * interval '1 second' \
             FROM generate_series(1, 1000000) i",
            // Some history from before the relay's cursor (migration 0011): marked, no txid.
            "UPDATE kurir_outbox SET dispatched_at = now(), txid = NULL WHERE id <= 100000",
            "UPDATE kurir_relay_cursor SET (txid, outbox_id) = \
                 (SELECT txid, id FROM kurir_outbox ORDER BY id DESC LIMIT 1)",
            "INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, \
                 subscriber_id, created_at, refused) \
             SELECT id, event_type, version, aggregate_id, \
                 CASE WHEN id % 100000 = 0 THEN 's1' END, created_at, id % 200000 = 0 \
             FROM kurir_outbox",
            // A few still waiting for the relay.
            "INSERT INTO kurir_outbox (event_type, payload) \
             SELECT 'order.paid', '{}' FROM generate_series(1, 5)",
            "ANALYZE",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        let plans = pg_plans(&pool).await;
        pool.close().await;
        crate::store::postgres::tests::drop_database(&admin, &name).await;
        for (index, mode, plan) in plans {
            let mut scans = Vec::new();
            scans_of(&plan, &mut scans);
            // The outbox and the list are read through their indexes only (the relay's one-row
            // cursor is read whole).
            assert!(
                scans.iter().any(|s| s.starts_with(&format!("{index} on ")))
                    && scans.contains(&"kurir_outbox_cursor on kurir_outbox".to_owned())
                    && !scans
                        .iter()
                        .any(|s| s.starts_with("Seq Scan on kurir_event_list")
                            || s.starts_with("Seq Scan on kurir_outbox")),
                "{mode}: {scans:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_event_listing_walks_an_index_at_a_million_events_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("kurir.db").display());
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let Store::Sqlite(s) = &store else {
            unreachable!("a SQLite URL")
        };
        for sql in [
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) \
             INSERT INTO kurir_outbox (event_type, aggregate_type, aggregate_id, payload, \
                 dispatched_at, created_at) \
             SELECT CASE WHEN i % 100000 = 0 THEN 'rare.type' ELSE 'order.paid' END, 'order', \
                 'a' || i, '{}', '2026-01-01T00:00:00.000Z', \
                 strftime('%Y-%m-%dT%H:%M:%fZ', 1700000000 + i, 'unixepoch') FROM n",
            "UPDATE kurir_relay_cursor SET outbox_id = (SELECT max(id) FROM kurir_outbox)",
            "INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, \
                 subscriber_id, created_at, refused) \
             SELECT id, event_type, version, aggregate_id, \
                 CASE WHEN id % 100000 = 0 THEN 's1' END, created_at, id % 200000 = 0 \
             FROM kurir_outbox",
            "INSERT INTO kurir_outbox (event_type, payload) VALUES ('order.paid', '{}')",
            "ANALYZE",
        ] {
            sqlx::query(sql).execute(s.pool()).await.unwrap();
        }
        let mut plans = Vec::new();
        for l in listings() {
            let sql = with_values(&l.sql.sqlite.replace('?', "$"), &l);
            let rows: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .fetch_all(s.pool())
                    .await
                    .unwrap();
            let details: Vec<String> = rows.into_iter().map(|r| r.3).collect();
            plans.push((l.index[1], details));
        }
        store.close().await;
        for (index, details) in plans {
            let whole = |d: &&String| {
                d.starts_with("SCAN ")
                    && !["kurir_relay_cursor", "x", "listed", "unlisted", "w"]
                        .iter()
                        .any(|t| d.split_whitespace().nth(1) == Some(*t))
            };
            assert!(
                details.iter().any(|d| d.contains(index)) && !details.iter().any(|d| whole(&d)),
                "{details:#?}"
            );
        }
    }

    /// A million events fanned out, and one waiting, on MySQL.
    async fn mysql_history(pool: &sqlx::MySqlPool) {
        let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
             UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
             UNION ALL SELECT 8 UNION ALL SELECT 9)";
        let numbers = format!(
            "SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d + 1 AS i \
             FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f, {digits} g"
        );
        for sql in [
            format!(
                "INSERT INTO kurir_outbox (event_type, aggregate_type, aggregate_id, payload, \
                     dispatched_at, created_at) \
                 SELECT CASE WHEN i % 100000 = 0 THEN 'rare.type' ELSE 'order.paid' END, \
                     'order', CONCAT('a', i), '{{}}', UTC_TIMESTAMP(3), \
                     UTC_TIMESTAMP(3) - INTERVAL (1000000 - i) SECOND FROM ({numbers}) n"
            ),
            "INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, \
                 subscriber_id, created_at, refused) \
             SELECT id, event_type, version, aggregate_id, \
                 CASE WHEN id % 100000 = 0 THEN 's1' END, created_at, id % 200000 = 0 \
             FROM kurir_outbox"
                .to_owned(),
            "INSERT INTO kurir_outbox (event_type, payload) VALUES ('order.paid', '{}')".to_owned(),
            "ANALYZE TABLE kurir_outbox, kurir_event_list".to_owned(),
        ] {
            sqlx::raw_sql(&sql).execute(pool).await.unwrap();
        }
    }

    /// Each listing's plan on MySQL: (table, access type, index) per row of `EXPLAIN`.
    async fn mysql_plans(
        pool: &sqlx::MySqlPool,
    ) -> Vec<(&'static str, Vec<(String, String, String)>)> {
        let mut plans = Vec::new();
        for l in listings() {
            let rows = sqlx::raw_sql(&format!("EXPLAIN {}", with_values(l.sql.mysql, &l)))
                .fetch_all(pool)
                .await
                .unwrap();
            let text = |r: &sqlx::mysql::MySqlRow, c: &str| {
                use sqlx::Row;
                r.try_get::<Option<String>, _>(c)
                    .unwrap()
                    .unwrap_or_default()
            };
            let scans: Vec<(String, String, String)> = rows
                .iter()
                .map(|r| (text(r, "table"), text(r, "type"), text(r, "key")))
                .collect();
            plans.push((l.index[2], scans));
        }
        plans
    }

    #[tokio::test]
    async fn the_event_listing_walks_an_index_at_a_million_events_on_mysql() {
        let Ok(server) = std::env::var("KURIR_TEST_MYSQL_URL") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but KURIR_TEST_MYSQL_URL is not"
            );
            return;
        };
        let admin = sqlx::MySqlPool::connect(&server).await.unwrap();
        let name = format!("kurir_unit_{}", uuid::Uuid::now_v7().simple());
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let url = format!("{}/{name}", &server[..server.rfind('/').unwrap()]);
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let Store::Mysql(s) = &store else {
            unreachable!("a MySQL URL")
        };
        mysql_history(s.pool()).await;
        let plans = mysql_plans(s.pool()).await;
        store.close().await;
        sqlx::raw_sql(&format!("DROP DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        for (index, scans) in plans {
            assert!(
                scans.iter().any(|(t, _, k)| t == "l" && k == index)
                    && !scans
                        .iter()
                        .any(|(t, how, _)| how == "ALL" && (t == "l" || t == "o")),
                "{scans:?}"
            );
        }
    }
}
