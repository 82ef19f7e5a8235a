//! The outbox row's insert in each dialect: [`crate::outbox::enqueue`] runs it on the
//! application's own transaction. It locks nothing beyond the row itself.

use kurir_core::event::EventId;

use super::rows::Ts;
use super::sql::Sql;
use crate::outbox::{NewEvent, OutboxDatabase};

const INSERT_EVENT: Sql = Sql {
    postgres: "INSERT INTO kurir_outbox \
        (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload, \
        subscriber_id) \
        VALUES ($1, $2, $3, $4, $5, COALESCE($6, now()), $7::json, $8)",
    sqlite: "INSERT INTO kurir_outbox \
        (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload, \
        subscriber_id) \
        VALUES (?1, ?2, ?3, ?4, ?5, COALESCE(?6, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), ?7, ?8)",
    mysql: "INSERT INTO kurir_outbox \
        (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload, \
        subscriber_id) \
        VALUES ($1, $2, $3, $4, $5, COALESCE($6, UTC_TIMESTAMP(3)), $7, $8)",
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
            .bind($event.subscriber_id.as_deref())
            .execute($conn)
            .await
    };
}

/// PostgreSQL's insert for a transaction that goes on after a taken id (the API's batches): a
/// unique violation would abort the whole transaction, so a taken id inserts nothing instead.
const INSERT_EVENT_UNLESS_TAKEN_PG: &str = "INSERT INTO kurir_outbox \
    (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload, \
        subscriber_id) \
    VALUES ($1, $2, $3, $4, $5, COALESCE($6, now()), $7::json, $8) \
    ON CONFLICT (event_id) DO NOTHING";

/// Inserts `event` on PostgreSQL unless its id is taken: its id, or `DuplicateEventId`, with the
/// caller's transaction still usable either way.
pub(super) async fn insert_event_unless_taken_pg(
    conn: &mut sqlx::PgConnection,
    event: &NewEvent,
) -> Result<EventId, crate::outbox::EnqueueError> {
    let id = event.checked_id()?;
    let inserted =
        insert_event!(INSERT_EVENT_UNLESS_TAKEN_PG, conn, id, event).map(|d| d.rows_affected() > 0);
    crate::outbox::inserted(id, inserted)
}

/// [`INSERT_EVENT_UNLESS_TAKEN_PG`] for many events in one statement: the API's group commit
/// pays one statement's overhead for its whole batch instead of one per event.
const INSERT_EVENTS_UNLESS_TAKEN_PG: &str = "INSERT INTO kurir_outbox \
    (event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, payload, \
        subscriber_id) \
    SELECT e, t, v, at, ai, COALESCE(o, now()), p::json, s \
    FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], \
                $6::timestamptz[], $7::text[], $8::text[]) AS x(e, t, v, at, ai, o, p, s) \
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
        ids.push(event.checked_id()?);
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
        .bind(column(|e| e.subscriber_id.clone()))
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
    ) -> Result<bool, sqlx::Error> {
        insert_event!(INSERT_EVENT.postgres, conn, id, event).map(|_| true)
    }
}

impl OutboxDatabase for sqlx::Sqlite {
    async fn insert_event(
        conn: &mut sqlx::SqliteConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<bool, sqlx::Error> {
        insert_event!(INSERT_EVENT.sqlite, conn, id, event).map(|_| true)
    }
}

// On MySQL/MariaDB an id the caller chose is looked up before the insert, because InnoDB checks
// a duplicate key under a shared lock on the taken id *and the gap below it*, held until the
// transaction ends, and queues a waiting check the same way. Inserts into that gap (where new
// ids go, UUIDv7s being ascending) wait for it meanwhile, and two transactions that both hold it,
// or one holding the id while another's check waits for it, deadlock at the next insert. The
// API's group commit met both under concurrent publishes of one `event_id`.

/// Whether an event has id `?`: a consistent read, which locks nothing in any isolation level.
/// An application's transaction looks up with it: an id inserted by a transaction not yet
/// committed, or after a `REPEATABLE READ` snapshot, is still met by the insert's check.
const EVENT_ID_TAKEN_MYSQL: &str = "SELECT 1 FROM kurir_outbox WHERE event_id = ?";

/// The same as a locking read, for kurir's own sessions: under their `READ COMMITTED` it locks
/// the row found and no gap, so it waits for another transaction's uncommitted insert of the id
/// without holding up anyone's inserts, then sees whether that one committed. (Under `REPEATABLE
/// READ` a locking read that finds nothing locks the gap: not for applications' transactions.)
const EVENT_ID_TAKEN_LOCKING_MYSQL: &str =
    "SELECT 1 FROM kurir_outbox WHERE event_id = ? LOCK IN SHARE MODE";

/// Inserts `event` as `id` on MySQL unless `look` (one of the reads above) finds a chosen id
/// taken: whether it inserted.
async fn insert_mysql(
    conn: &mut sqlx::MySqlConnection,
    id: &EventId,
    event: &NewEvent,
    look: &str,
) -> Result<bool, sqlx::Error> {
    if event.event_id.is_some() {
        let taken = sqlx::query(look)
            .bind(id.as_str())
            .fetch_optional(&mut *conn)
            .await?;
        if taken.is_some() {
            return Ok(false);
        }
    }
    // Each value is bound once, in order, so the `?` text takes the binds as they come.
    let (text, _) = super::sql::positional(INSERT_EVENT.mysql);
    insert_event!(&text, conn, id, event).map(|_| true)
}

/// Inserts `event` on one of kurir's own MySQL sessions: its id, or `DuplicateEventId`, with the
/// transaction still usable either way. A concurrent insert of the same id is waited for by the
/// look-up, where waiting blocks no other insert.
pub(super) async fn insert_event_unless_taken_mysql(
    conn: &mut sqlx::MySqlConnection,
    event: &NewEvent,
) -> Result<EventId, crate::outbox::EnqueueError> {
    let id = event.checked_id()?;
    let inserted = insert_mysql(conn, &id, event, EVENT_ID_TAKEN_LOCKING_MYSQL).await;
    crate::outbox::inserted(id, inserted)
}

impl OutboxDatabase for sqlx::MySql {
    async fn insert_event(
        conn: &mut sqlx::MySqlConnection,
        id: &EventId,
        event: &NewEvent,
    ) -> Result<bool, sqlx::Error> {
        insert_mysql(conn, id, event, EVENT_ID_TAKEN_MYSQL).await
    }
}
