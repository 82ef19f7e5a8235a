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
