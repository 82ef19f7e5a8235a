//! The outbox row's insert in each dialect: [`crate::outbox::enqueue`] runs it on the
//! application's own transaction. One statement, no locks beyond the row itself.

use kurir_core::event::EventId;

use super::rows::Ts;
use super::sql::Sql;
use crate::outbox::{NewEvent, OutboxDatabase};

const INSERT_EVENT: Sql = Sql {
    postgres: "INSERT INTO kurir_outbox \
        (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload) \
        VALUES ($1, $2, $3, $4, $5, COALESCE($6, now()), $7::json)",
    sqlite: "INSERT INTO kurir_outbox \
        (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload) \
        VALUES (?1, ?2, ?3, ?4, ?5, COALESCE(?6, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), ?7)",
    mysql: "INSERT INTO kurir_outbox \
        (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload) \
        VALUES ($1, $2, $3, $4, $5, COALESCE($6, UTC_TIMESTAMP(3)), $7)",
};

/// Binds `event`'s columns in `INSERT_EVENT`'s order and runs it on `$conn`.
macro_rules! insert_event {
    ($sql:expr, $conn:expr, $id:expr, $event:expr) => {
        sqlx::query($sql)
            .bind($id.as_str())
            .bind($event.event_type.as_str())
            .bind($event.version)
            .bind($event.aggregate_type.as_deref())
            .bind($event.aggregate_id.as_deref())
            .bind($event.occurred_at.map(Ts))
            .bind($event.payload.get())
            .execute($conn)
            .await
    };
}

/// PostgreSQL's insert for a transaction that goes on after a taken id (the API's batches): a
/// unique violation would abort the whole transaction, so a taken id inserts nothing instead.
const INSERT_EVENT_UNLESS_TAKEN_PG: &str = "INSERT INTO kurir_outbox \
    (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload) \
    VALUES ($1, $2, $3, $4, $5, COALESCE($6, now()), $7::json) \
    ON CONFLICT (event_id) DO NOTHING";

/// Inserts `event` on PostgreSQL unless its id is taken: its id, or `DuplicateEventId`, with the
/// caller's transaction still usable either way.
pub(super) async fn insert_event_unless_taken_pg(
    conn: &mut sqlx::PgConnection,
    event: &NewEvent,
) -> Result<EventId, crate::outbox::EnqueueError> {
    event.validate()?;
    let id = event.event_id.clone().unwrap_or_else(EventId::new_v7);
    let done = insert_event!(INSERT_EVENT_UNLESS_TAKEN_PG, conn, id, event)?;
    if done.rows_affected() == 0 {
        return Err(crate::outbox::EnqueueError::DuplicateEventId(id));
    }
    Ok(id)
}

/// [`INSERT_EVENT_UNLESS_TAKEN_PG`] for many events in one statement: the API's group commit
/// pays one statement's overhead for its whole batch instead of one per event.
const INSERT_EVENTS_UNLESS_TAKEN_PG: &str = "INSERT INTO kurir_outbox \
    (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload) \
    SELECT e, t, v, at, ai, COALESCE(o, now()), p::json \
    FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], \
                $6::timestamptz[], $7::text[]) AS x(e, t, v, at, ai, o, p) \
    ON CONFLICT (event_id) DO NOTHING \
    RETURNING event_id";

/// Inserts `events` on PostgreSQL in one statement, each unless its id is taken (by a stored
/// event or an earlier one of `events`): per event, in order, whether it was inserted, with its
/// id. The caller's transaction stays usable.
pub(super) async fn insert_events_unless_taken_pg(
    conn: &mut sqlx::PgConnection,
    events: &[&NewEvent],
) -> Result<Vec<(bool, EventId)>, crate::outbox::EnqueueError> {
    let mut ids = Vec::with_capacity(events.len());
    for event in events {
        event.validate()?;
        ids.push(event.event_id.clone().unwrap_or_else(EventId::new_v7));
    }
    let column =
        |f: fn(&NewEvent) -> Option<String>| events.iter().map(|e| f(e)).collect::<Vec<_>>();
    let inserted: Vec<String> = sqlx::query_scalar(INSERT_EVENTS_UNLESS_TAKEN_PG)
        .bind(ids.iter().map(EventId::as_str).collect::<Vec<_>>())
        .bind(column(|e| Some(e.event_type.as_str().to_owned())))
        .bind(events.iter().map(|e| e.version).collect::<Vec<_>>())
        .bind(column(|e| e.aggregate_type.clone()))
        .bind(column(|e| e.aggregate_id.clone()))
        .bind(events.iter().map(|e| e.occurred_at).collect::<Vec<_>>())
        .bind(column(|e| Some(e.payload.get().to_owned())))
        .fetch_all(conn)
        .await?;
    let mut inserted: std::collections::HashSet<String> = inserted.into_iter().collect();
    // A repeated id is inserted once, for its first occurrence: `remove` answers true only once.
    Ok(ids
        .into_iter()
        .map(|id| (inserted.remove(id.as_str()), id))
        .collect())
}

impl OutboxDatabase for sqlx::Postgres {
    async fn insert_event(
        conn: &mut sqlx::PgConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<(), sqlx::Error> {
        insert_event!(INSERT_EVENT.postgres, conn, id, event).map(drop)
    }
}

impl OutboxDatabase for sqlx::Sqlite {
    async fn insert_event(
        conn: &mut sqlx::SqliteConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<(), sqlx::Error> {
        insert_event!(INSERT_EVENT.sqlite, conn, id, event).map(drop)
    }
}

impl OutboxDatabase for sqlx::MySql {
    async fn insert_event(
        conn: &mut sqlx::MySqlConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<(), sqlx::Error> {
        // Each value is bound once, in order, so the `?` text takes the binds as they come.
        let (text, _) = super::sql::positional(INSERT_EVENT.mysql);
        insert_event!(&text, conn, id, event).map(drop)
    }
}
