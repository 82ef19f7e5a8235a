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
            .map(drop)
    };
}

impl OutboxDatabase for sqlx::Postgres {
    async fn insert_event(
        conn: &mut sqlx::PgConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<(), sqlx::Error> {
        insert_event!(INSERT_EVENT.postgres, conn, id, event)
    }
}

impl OutboxDatabase for sqlx::Sqlite {
    async fn insert_event(
        conn: &mut sqlx::SqliteConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<(), sqlx::Error> {
        insert_event!(INSERT_EVENT.sqlite, conn, id, event)
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
        insert_event!(&text, conn, id, event)
    }
}
