//! Publishing through the admin API, written once for every dialect: an event with its
//! idempotency key, alone or in a batch sharing one transaction (the types are in
//! [`super::admin`]). The caller wakes relays after the commit ([`crate::wake`]), never inside
//! the transaction: PostgreSQL's notifying transactions commit one at a time.
//!
//! A publish looks the key up, inserts the event and records the key, in that order, on its
//! transaction. What differs by dialect:
//!
//! - SQLite takes the write lock up front (`BEGIN IMMEDIATE`), so no other writer comes in
//!   between the key's lookup and its insert: the key is never found taken at the insert.
//! - PostgreSQL and MySQL/MariaDB let the unique `event_id` decide between concurrent
//!   duplicates (on MySQL a chosen id is looked up under a row lock first, which waits for a
//!   concurrent insert of it without the gap lock of InnoDB's duplicate check: see
//!   [`super::enqueue`]), and a concurrent holder of the same key makes the key's insert wait
//!   for its commit, then lose: the event is rolled back and the winner's answer given.
//! - A taken event id must leave the transaction usable for the next publish of a batch: on
//!   PostgreSQL a unique violation would abort it, so its insert skips a taken id instead
//!   ([`super::enqueue`]); SQLite and InnoDB undo only the failed statement.
//! - MySQL ends every transaction explicitly, a failed one included: a dropped transaction is
//!   rolled back only when its connection is next used, and a failed duplicate insert holds a
//!   lock until then. The others leave a failed one to be rolled back as it is dropped.

use super::admin::{IdempotencyKey, PublishItem, Published};
use super::enqueue::{
    insert_event_unless_taken_mysql, insert_event_unless_taken_pg, insert_events_unless_taken_pg,
};
use super::sql::{run_in, Sql};
use super::{Result, Store};
use crate::outbox::{self, EnqueueError, NewEvent};

/// The key's row; binds the key. No lock: a concurrent insert of the same key is settled by
/// [`INSERT_KEY`].
const FIND_KEY: Sql = Sql {
    postgres: "SELECT event_id, request_hash FROM kurir_idempotency_keys WHERE key = $1",
    sqlite: "SELECT event_id, request_hash FROM kurir_idempotency_keys WHERE key = ?1",
    mysql: "SELECT CAST(event_id AS CHAR), CAST(request_hash AS CHAR) \
        FROM kurir_idempotency_keys WHERE `key` = $1",
};

/// Records the key; binds the key, the event id, the request's hash. Another transaction's
/// insert of the same key makes it wait for that one to end; if that one commits, PostgreSQL
/// inserts nothing and MySQL fails with a unique violation (SQLite's write lock leaves no such
/// transaction).
const INSERT_KEY: Sql = Sql {
    postgres: "INSERT INTO kurir_idempotency_keys (key, event_id, request_hash) \
        VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING",
    sqlite: "INSERT INTO kurir_idempotency_keys (key, event_id, request_hash, created_at) \
        VALUES (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
    mysql: "INSERT INTO kurir_idempotency_keys (`key`, event_id, request_hash, created_at) \
        VALUES ($1, $2, $3, UTC_TIMESTAMP(3))",
};

/// What one publish on a transaction did.
enum Step {
    /// Decided: what the caller answers once the transaction commits.
    Done(Published),
    /// The event was inserted but a concurrent transaction holds its key: roll back.
    KeyTaken(String),
}

/// The event's insert on `$conn` in `$dialect`: its id, or `DuplicateEventId` with the
/// transaction still usable.
macro_rules! insert_event {
    ($conn:expr, postgres, $event:expr) => {
        insert_event_unless_taken_pg(&mut *$conn, $event).await
    };
    ($conn:expr, sqlite, $event:expr) => {
        outbox::insert::<sqlx::Sqlite>(&mut *$conn, $event).await
    };
    ($conn:expr, mysql, $event:expr) => {
        insert_event_unless_taken_mysql(&mut *$conn, $event).await
    };
}

/// The key's row as [`Published::KeyExists`], read on `$conn` in `$dialect`.
macro_rules! find_key {
    ($conn:expr, $dialect:ident, $key:expr) => {
        run_in!($conn, $dialect, FIND_KEY, query_as, fetch_optional, $key).map(
            |row: Option<(String, String)>| {
                row.map(|(event_id, request_hash)| Published::KeyExists {
                    event_id,
                    request_hash,
                })
            },
        )
    };
}

/// One publish on transaction `$tx` in `$dialect`: a [`Step`], or the error of a statement.
macro_rules! publish_in {
    ($tx:expr, $dialect:ident, $event:expr, $key:expr) => {
        async {
            let key: Option<&IdempotencyKey> = $key;
            if let Some(key) = key {
                if let Some(found) = find_key!($tx, $dialect, &key.key)? {
                    return Ok(Step::Done(found));
                }
            }
            let event_id = match insert_event!($tx, $dialect, $event) {
                Ok(id) => id.to_string(),
                Err(EnqueueError::DuplicateEventId(id)) => {
                    return Ok(Step::Done(Published::EventIdExists(id.to_string())))
                }
                Err(e) => return Err(e),
            };
            if let Some(k) = key {
                let inserted = run_in!(
                    $tx,
                    $dialect,
                    INSERT_KEY,
                    query,
                    execute,
                    &k.key,
                    &event_id,
                    &k.request_hash
                );
                match inserted {
                    Ok(done) if done.rows_affected() == 0 => return Ok(Step::KeyTaken(event_id)),
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                        return Ok(Step::KeyTaken(event_id))
                    }
                    Err(e) => return Err(e.into()),
                    Ok(_) => {}
                }
            }
            Ok::<_, EnqueueError>(Step::Done(Published::Created(event_id)))
        }
        .await
    };
}

/// Ends transaction `$tx`, which failed or lost a key, without committing: explicitly on MySQL
/// (see the module's documentation), by dropping it elsewhere.
macro_rules! abandon {
    ($tx:expr, mysql) => {
        $tx.rollback().await?
    };
    ($tx:expr, $dialect:ident) => {
        drop($tx)
    };
}

/// [`Store::publish_event`] on `$pool` in `$dialect`, its transaction begun by `$begin`.
macro_rules! publish_one {
    ($pool:expr, $begin:expr, $dialect:ident, $event:expr, $key:expr) => {{
        let mut tx = $begin.await?;
        match publish_in!(tx, $dialect, $event, $key) {
            Ok(Step::Done(published)) => {
                tx.commit().await?;
                Ok(published)
            }
            Ok(Step::KeyTaken(event_id)) => {
                tx.rollback().await?;
                let key = $key.map(|k| k.key.as_str()).unwrap_or_default();
                let mut conn = $pool.acquire().await?;
                Ok(find_key!(conn, $dialect, key)?.unwrap_or(Published::Created(event_id)))
            }
            Err(e) => {
                abandon!(tx, $dialect);
                Err(e)
            }
        }
    }};
}

/// [`Store::publish_events`] in `$dialect`, its transaction begun by `$begin`.
macro_rules! publish_all {
    ($begin:expr, $dialect:ident, $items:expr) => {{
        let mut tx = $begin.await?;
        let mut done = Vec::with_capacity($items.len());
        for item in $items {
            match publish_in!(tx, $dialect, &item.event, item.key.as_ref()) {
                Ok(Step::Done(published)) => done.push(published),
                Ok(Step::KeyTaken(_)) => {
                    abandon!(tx, $dialect);
                    return Ok(None);
                }
                Err(e) => {
                    abandon!(tx, $dialect);
                    return Err(e);
                }
            }
        }
        tx.commit().await?;
        Ok(Some(done))
    }};
}

impl Store {
    /// Records `event` in its own transaction, with `key` if given. Nothing is written when the
    /// key or the event id is already taken. It wakes no relay: the caller does, after it
    /// returns ([`crate::wake::Wake::wake`]).
    pub async fn publish_event(
        &self,
        event: NewEvent,
        key: Option<&IdempotencyKey>,
    ) -> Result<Published, EnqueueError> {
        let event = &event;
        match self {
            Store::Postgres(s) => publish_one!(s.pool(), s.pool().begin(), postgres, event, key),
            Store::Sqlite(s) => {
                let begin = s.pool().begin_with("BEGIN IMMEDIATE");
                publish_one!(s.pool(), begin, sqlite, event, key)
            }
            Store::Mysql(s) => publish_one!(s.pool(), s.pool().begin(), mysql, event, key),
        }
    }

    /// Records `items` in one transaction, each exactly as [`Store::publish_event`] would have
    /// recorded it alone, in order (a later item sees the earlier ones: a repeated key or event
    /// id answers as a repeat of the first). All or nothing: an error rolls back every item, and
    /// so does a key another transaction inserted meanwhile (`Ok(None)`; never on SQLite, whose
    /// write lock keeps other writers out); either way the caller publishes the items one at a
    /// time, so no item fails because of another.
    pub async fn publish_events(
        &self,
        items: &[PublishItem],
    ) -> Result<Option<Vec<Published>>, EnqueueError> {
        match self {
            Store::Postgres(s) if items.iter().all(|i| i.key.is_none()) => {
                publish_without_keys_pg(s.pool(), items).await
            }
            Store::Postgres(s) => publish_all!(s.pool().begin(), postgres, items),
            Store::Sqlite(s) => {
                publish_all!(s.pool().begin_with("BEGIN IMMEDIATE"), sqlite, items)
            }
            Store::Mysql(s) => publish_all!(s.pool().begin(), mysql, items),
        }
    }
}

/// [`Store::publish_events`] on PostgreSQL when no item has a key: nothing to look up or
/// record, so one multi-row insert, in one transaction, says which events are new.
async fn publish_without_keys_pg(
    pool: &sqlx::PgPool,
    items: &[PublishItem],
) -> Result<Option<Vec<Published>>, EnqueueError> {
    let mut tx = pool.begin().await?;
    let events: Vec<&NewEvent> = items.iter().map(|i| &i.event).collect();
    let done = insert_events_unless_taken_pg(&mut tx, &events)
        .await?
        .into_iter()
        .map(|(inserted, id)| match inserted {
            true => Published::Created(id.to_string()),
            false => Published::EventIdExists(id.to_string()),
        })
        .collect();
    tx.commit().await?;
    Ok(Some(done))
}
