//! Retention: deleting finished history past its keep time ([`Store::prune_batch`]), and counting
//! what would go ([`Store::prunable`], for `kurir prune --dry-run`).
//!
//! An event goes, with its deliveries and attempts, once it was fanned out, none of its
//! deliveries is still to be made (`pending`, `processing`, `failed`; `cancelled` ones, of a
//! deleted endpoint, are finished), and it is older than [`Cutoffs::events`], or
//! [`Cutoffs::dead_letters`] when one of its deliveries was dead-lettered. Each delete is
//! guarded again in its own statement (see [`event_deletes`]), so a delivery replayed after the
//! candidates were read is never deleted, nor its attempts, nor its event. The tombstone of a
//! deleted endpoint goes once none of its deliveries is left.
//! Completed inbox events go by their `updated_at`, with their history (forward attempts and
//! retries, `store::inbox_history`); the replay audit by its `created_at`. The subscriber
//! portal's rows (`store::portal`) go once [`Cutoffs::portal`] is past their end: a link, used or
//! not, by its `expires_at` (a used link says so in plain words to whoever opens it again until
//! then); a session by its `expires_at` or its `revoked_at`, whichever comes first. Neither can
//! open or be in force any more by then.
//!
//! A batch is one short transaction over at most `limit` rows per table. On PostgreSQL it first
//! takes a transaction-level advisory lock without waiting ([`PRUNE_LOCK`]): one process prunes
//! at a time, the others skip the round. On MySQL the same with a session lock (`GET_LOCK`, see
//! [`prune_mysql`]). On SQLite it holds the write lock (`BEGIN IMMEDIATE`).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::rows::Ts;
use super::sql::{query_as_on, run_in, Sql};
use super::{Result, Store};

/// The advisory lock key pruners take on PostgreSQL ("kuri" "r" 2).
pub const PRUNE_LOCK: i64 = 0x6b75_7269_7200_0002;

/// Rows older than these go.
#[derive(Clone, Copy, Debug)]
pub struct Cutoffs {
    /// Events whose deliveries were all sent (or that had none).
    pub events: DateTime<Utc>,
    /// Events with a dead-lettered delivery.
    pub dead_letters: DateTime<Utc>,
    /// Completed inbox events.
    pub inbox: DateTime<Utc>,
    /// Replay audit rows; `None`: kept forever.
    pub replays: Option<DateTime<Utc>>,
    /// Portal links that expired, and portal sessions that expired or were revoked, before
    /// this ([`crate::prune::PORTAL_GRACE`] ago).
    pub portal: DateTime<Utc>,
}

/// Rows deleted (or, for a dry run, that would be), per table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// `kurir_outbox`.
    pub events: u64,
    /// `kurir_deliveries`.
    pub deliveries: u64,
    /// `kurir_attempts`.
    pub attempts: u64,
    /// `kurir_inbox`.
    pub inbox: u64,
    /// `kurir_inbox_attempts`: the forward attempts of the inbox events that went.
    pub inbox_attempts: u64,
    /// `kurir_inbox_retries`: the audited retries of the inbox events that went.
    pub inbox_retries: u64,
    /// `kurir_replays`.
    pub replays: u64,
    /// `kurir_endpoints`: tombstones of deleted endpoints whose last delivery went.
    pub endpoints: u64,
    /// `kurir_portal_links`: expired portal links, used or not.
    pub portal_links: u64,
    /// `kurir_portal_sessions`: expired or revoked portal sessions.
    pub portal_sessions: u64,
}

impl Pruned {
    /// Each table's name with its count, for metrics and output.
    pub fn by_table(&self) -> [(&'static str, u64); 10] {
        [
            ("kurir_outbox", self.events),
            ("kurir_deliveries", self.deliveries),
            ("kurir_attempts", self.attempts),
            ("kurir_inbox", self.inbox),
            ("kurir_inbox_attempts", self.inbox_attempts),
            ("kurir_inbox_retries", self.inbox_retries),
            ("kurir_replays", self.replays),
            ("kurir_endpoints", self.endpoints),
            ("kurir_portal_links", self.portal_links),
            ("kurir_portal_sessions", self.portal_sessions),
        ]
    }

    /// Rows in all.
    pub fn total(&self) -> u64 {
        self.by_table().iter().map(|(_, n)| n).sum()
    }
}

/// The condition on outbox row `o` for it to go (binds: events cutoff, dead-letter cutoff, the
/// later of the two). Plain SQL, the same in every dialect but for the placeholders and what
/// fanned out means (`store::cursor`).
macro_rules! prunable_event {
    ($dialect:tt, $p1:literal, $p2:literal, $p3:literal) => {
        concat!(
            "o.created_at < ",
            $p3,
            " AND ",
            super::cursor::relayed!($dialect),
            " ",
            "AND NOT EXISTS (SELECT 1 FROM kurir_deliveries d WHERE d.outbox_id = o.id ",
            "AND d.status IN ('pending', 'processing', 'failed')) ",
            "AND CASE WHEN EXISTS (SELECT 1 FROM kurir_deliveries d WHERE d.outbox_id = o.id ",
            "AND d.status = 'dead_letter') THEN o.created_at < ",
            $p2,
            " ELSE o.created_at < ",
            $p1,
            " END"
        )
    };
}

/// The listed outbox rows written before `$p3`, as `o`, through `kurir_event_list_created`; a
/// `WHERE` is open, for [`prunable_event`].
macro_rules! prunable_from {
    ($p3:literal) => {
        concat!(
            "kurir_event_list l JOIN kurir_outbox o ON o.id = l.outbox_id WHERE l.created_at < ",
            $p3,
            " AND "
        )
    };
}

/// The outbox rows that may go, oldest first, found through `kurir_event_list_created`
/// (every row the relay has passed is listed there: see `store::event_list`).
macro_rules! event_candidates {
    ($dialect:tt, $p1:literal, $p2:literal, $p3:literal, $p4:literal) => {
        concat!(
            "SELECT o.id FROM ",
            prunable_from!($p3),
            prunable_event!($dialect, $p1, $p2, $p3),
            " ORDER BY l.created_at, l.outbox_id LIMIT ",
            $p4
        )
    };
}

const EVENT_CANDIDATES: Sql = Sql {
    postgres: event_candidates!(postgres, "$1", "$2", "$3", "$4"),
    sqlite: event_candidates!(sqlite, "?1", "?2", "?3", "?4"),
    mysql: event_candidates!(mysql, "$1", "$2", "$3", "$4"),
};

/// How many events, deliveries and attempts would go.
macro_rules! count_events {
    ($dialect:tt, $p1:literal, $p2:literal, $p3:literal) => {
        concat!(
            "SELECT count(*), ",
            "(SELECT count(*) FROM kurir_deliveries d WHERE d.outbox_id IN (SELECT o.id FROM ",
            prunable_from!($p3),
            prunable_event!($dialect, $p1, $p2, $p3),
            ")), (SELECT count(*) FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id ",
            "WHERE d.outbox_id IN (SELECT o.id FROM ",
            prunable_from!($p3),
            prunable_event!($dialect, $p1, $p2, $p3),
            ")) FROM ",
            prunable_from!($p3),
            prunable_event!($dialect, $p1, $p2, $p3),
        )
    };
}

const COUNT_EVENTS: Sql = Sql {
    postgres: count_events!(postgres, "$1", "$2", "$3"),
    sqlite: count_events!(sqlite, "?1", "?2", "?3"),
    mysql: count_events!(mysql, "$1", "$2", "$3"),
};

const COUNT_INBOX: Sql = Sql {
    postgres: "SELECT count(*) FROM kurir_inbox WHERE status = 'completed' AND updated_at < $1",
    sqlite: "SELECT count(*) FROM kurir_inbox WHERE status = 'completed' AND updated_at < ?1",
    mysql: "SELECT count(*) FROM kurir_inbox WHERE status = 'completed' AND updated_at < $1",
};

const COUNT_REPLAYS: Sql = Sql {
    postgres: "SELECT count(*) FROM kurir_replays WHERE created_at < $1",
    sqlite: "SELECT count(*) FROM kurir_replays WHERE created_at < ?1",
    mysql: "SELECT count(*) FROM kurir_replays WHERE created_at < $1",
};

// MySQL refuses a subquery on the table a DELETE deletes from (and `LIMIT` in an `IN`
// subquery); its single-table DELETE takes `ORDER BY` and `LIMIT` itself.
pub(super) const DELETE_INBOX: Sql = Sql {
    postgres: "DELETE FROM kurir_inbox WHERE id IN (SELECT id FROM kurir_inbox \
        WHERE status = 'completed' AND updated_at < $1 ORDER BY id LIMIT $2)",
    sqlite: "DELETE FROM kurir_inbox WHERE id IN (SELECT id FROM kurir_inbox \
        WHERE status = 'completed' AND updated_at < ?1 ORDER BY id LIMIT ?2)",
    mysql: "DELETE FROM kurir_inbox WHERE status = 'completed' AND updated_at < $1 \
        ORDER BY id LIMIT $2",
};

/// The history of the inbox events [`DELETE_INBOX`] deletes, deleted just before them in the same
/// transaction: the subquery is DELETE_INBOX's, so both choose the same events (the oldest
/// completed ones past the cutoff; a completed event stays completed and keeps its
/// `updated_at`, as only a failed one is retried). By `(source, event_id)`, their
/// `(source, event_id, id)` index.
macro_rules! delete_inbox_history {
    ($table:literal) => {
        Sql {
            postgres: concat!(
                "DELETE FROM ",
                $table,
                " h USING (SELECT source, event_id FROM kurir_inbox \
                WHERE status = 'completed' AND updated_at < $1 ORDER BY id LIMIT $2) i \
                WHERE h.source = i.source AND h.event_id = i.event_id"
            ),
            sqlite: concat!(
                "DELETE FROM ",
                $table,
                " WHERE (source, event_id) IN (SELECT source, event_id FROM kurir_inbox \
                WHERE status = 'completed' AND updated_at < ?1 ORDER BY id LIMIT ?2)"
            ),
            mysql: concat!(
                "DELETE h FROM ",
                $table,
                " h JOIN (SELECT source, event_id FROM kurir_inbox \
                WHERE status = 'completed' AND updated_at < $1 ORDER BY id LIMIT $2) i \
                ON h.source = i.source AND h.event_id = i.event_id"
            ),
        }
    };
}

const DELETE_INBOX_ATTEMPTS: Sql = delete_inbox_history!("kurir_inbox_attempts");
const DELETE_INBOX_RETRIES: Sql = delete_inbox_history!("kurir_inbox_retries");

/// How much history the completed inbox events past the cutoff have (a dry run's count).
macro_rules! count_inbox_history {
    ($table:literal, $p1:literal) => {
        concat!(
            "SELECT count(*) FROM ",
            $table,
            " h WHERE EXISTS (SELECT 1 FROM kurir_inbox i WHERE i.source = h.source \
            AND i.event_id = h.event_id AND i.status = 'completed' AND i.updated_at < ",
            $p1,
            ")"
        )
    };
}

const COUNT_INBOX_ATTEMPTS: Sql = Sql {
    postgres: count_inbox_history!("kurir_inbox_attempts", "$1"),
    sqlite: count_inbox_history!("kurir_inbox_attempts", "?1"),
    mysql: count_inbox_history!("kurir_inbox_attempts", "$1"),
};
const COUNT_INBOX_RETRIES: Sql = Sql {
    postgres: count_inbox_history!("kurir_inbox_retries", "$1"),
    sqlite: count_inbox_history!("kurir_inbox_retries", "?1"),
    mysql: count_inbox_history!("kurir_inbox_retries", "$1"),
};

/// Tombstones of deleted endpoints with no delivery left (retention took the last one, or
/// there never was one). Nothing creates a delivery for a tombstone, so none can appear after
/// the check. A few rows: endpoints are few.
const DELETE_TOMBSTONES: Sql = Sql {
    postgres: "DELETE FROM kurir_endpoints WHERE id IN (SELECT id FROM kurir_endpoints e \
        WHERE e.deleted_at IS NOT NULL AND NOT EXISTS \
            (SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = e.id) ORDER BY id LIMIT $1)",
    sqlite: "DELETE FROM kurir_endpoints WHERE id IN (SELECT id FROM kurir_endpoints e \
        WHERE e.deleted_at IS NOT NULL AND NOT EXISTS \
            (SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = e.id) ORDER BY id LIMIT ?1)",
    mysql: "DELETE FROM kurir_endpoints WHERE deleted_at IS NOT NULL AND NOT EXISTS \
        (SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = kurir_endpoints.id) \
        ORDER BY id LIMIT $1",
};

const COUNT_TOMBSTONES: Sql = Sql {
    postgres: "SELECT count(*) FROM kurir_endpoints e WHERE e.deleted_at IS NOT NULL \
        AND NOT EXISTS (SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = e.id)",
    sqlite: "SELECT count(*) FROM kurir_endpoints e WHERE e.deleted_at IS NOT NULL \
        AND NOT EXISTS (SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = e.id)",
    mysql: "SELECT count(*) FROM kurir_endpoints e WHERE e.deleted_at IS NOT NULL \
        AND NOT EXISTS (SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = e.id)",
};

const DELETE_REPLAYS: Sql = Sql {
    postgres: "DELETE FROM kurir_replays WHERE id IN (SELECT id FROM kurir_replays \
        WHERE created_at < $1 ORDER BY id LIMIT $2)",
    sqlite: "DELETE FROM kurir_replays WHERE id IN (SELECT id FROM kurir_replays \
        WHERE created_at < ?1 ORDER BY id LIMIT ?2)",
    mysql: "DELETE FROM kurir_replays WHERE created_at < $1 ORDER BY id LIMIT $2",
};

/// Deletes at most `$2` rows of a portal table whose `$column` is before `$1`, oldest first,
/// through the column's index (migration 0026).
macro_rules! delete_portal {
    ($table:literal, $column:literal) => {
        Sql {
            postgres: concat!(
                "DELETE FROM ",
                $table,
                " WHERE id IN (SELECT id FROM ",
                $table,
                " WHERE ",
                $column,
                " < $1 ORDER BY ",
                $column,
                " LIMIT $2)"
            ),
            sqlite: concat!(
                "DELETE FROM ",
                $table,
                " WHERE id IN (SELECT id FROM ",
                $table,
                " WHERE ",
                $column,
                " < ?1 ORDER BY ",
                $column,
                " LIMIT ?2)"
            ),
            mysql: concat!(
                "DELETE FROM ",
                $table,
                " WHERE ",
                $column,
                " < $1 ORDER BY ",
                $column,
                " LIMIT $2"
            ),
        }
    };
}

const DELETE_PORTAL_LINKS: Sql = delete_portal!("kurir_portal_links", "expires_at");
const DELETE_EXPIRED_PORTAL_SESSIONS: Sql = delete_portal!("kurir_portal_sessions", "expires_at");
const DELETE_REVOKED_PORTAL_SESSIONS: Sql = delete_portal!("kurir_portal_sessions", "revoked_at");

const COUNT_PORTAL: Sql = Sql {
    postgres: "SELECT (SELECT count(*) FROM kurir_portal_links WHERE expires_at < $1), \
        (SELECT count(*) FROM kurir_portal_sessions WHERE expires_at < $1 OR revoked_at < $1)",
    sqlite: "SELECT (SELECT count(*) FROM kurir_portal_links WHERE expires_at < ?1), \
        (SELECT count(*) FROM kurir_portal_sessions WHERE expires_at < ?1 OR revoked_at < ?1)",
    mysql: "SELECT (SELECT count(*) FROM kurir_portal_links WHERE expires_at < $1), \
        (SELECT count(*) FROM kurir_portal_sessions WHERE expires_at < $1 OR revoked_at < $1)",
};

/// A batch's deliveries: every delivery of its events (`ids`, outbox ids read from the
/// database, written as integer literals), whatever its status; the deletes re-check that.
fn delivery_ids_of(ids: &[i64]) -> String {
    format!(
        "SELECT id FROM kurir_deliveries WHERE outbox_id IN ({})",
        literals(ids)
    )
}

fn literals(ids: &[i64]) -> String {
    ids.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The deletes of one batch of events, in the order they run, each guarded in its own
/// statement: deliveries only while finished, attempts only of deliveries that are gone (this
/// transaction deleted them), events only without deliveries. `ids` are the batch's outbox
/// ids, `deliveries` its delivery ids ([`delivery_ids_of`]).
///
/// Deliveries go before their attempts: a delivery's delete locks it, so a replay committing
/// after the candidates were read either made it `pending` first (the delete re-checks and
/// leaves it, and its attempts, whose delivery still exists) or waits and then finds it gone.
/// Deleting attempts first, guarded by the delivery's status as read by that statement, lost
/// the attempts of a delivery replayed between the two deletes. SQLite is the exception: its
/// attempts reference their delivery `ON DELETE CASCADE`, so they go first there (counted), and
/// the batch holds SQLite's write lock throughout, so no replay commits in between.
fn event_deletes(ids: &[i64], deliveries: &[i64], sqlite: bool) -> [(Table, String); 3] {
    let list = literals(ids);
    let finished = "status IN ('sent', 'dead_letter', 'cancelled')";
    let deliveries_sql =
        format!("DELETE FROM kurir_deliveries WHERE outbox_id IN ({list}) AND {finished}");
    let attempts_sql = if sqlite {
        format!(
            "DELETE FROM kurir_attempts WHERE delivery_id IN (SELECT id FROM kurir_deliveries \
             WHERE outbox_id IN ({list}) AND {finished})"
        )
    } else {
        format!(
            "DELETE FROM kurir_attempts WHERE delivery_id IN ({}) AND NOT EXISTS \
             (SELECT 1 FROM kurir_deliveries d WHERE d.id = kurir_attempts.delivery_id)",
            literals(deliveries)
        )
    };
    let events_sql = format!(
        "DELETE FROM kurir_outbox WHERE id IN ({list}) AND NOT EXISTS \
         (SELECT 1 FROM kurir_deliveries d WHERE d.outbox_id = kurir_outbox.id)"
    );
    let (first, second) = if sqlite {
        (
            (Table::Attempts, attempts_sql),
            (Table::Deliveries, deliveries_sql),
        )
    } else {
        (
            (Table::Deliveries, deliveries_sql),
            (Table::Attempts, attempts_sql),
        )
    };
    [first, second, (Table::Events, events_sql)]
}

/// Deletes the listing rows (`store::event_list`) of the batch's events that went.
fn unlist(ids: &[i64]) -> String {
    format!(
        "DELETE FROM kurir_event_list WHERE outbox_id IN ({}) AND NOT EXISTS \
         (SELECT 1 FROM kurir_outbox o WHERE o.id = kurir_event_list.outbox_id)",
        literals(ids)
    )
}

/// Which count of [`Pruned`] a delete adds to.
#[derive(Clone, Copy)]
enum Table {
    Events,
    Deliveries,
    Attempts,
}

impl Pruned {
    fn add(&mut self, table: Table, n: u64) {
        match table {
            Table::Events => self.events += n,
            Table::Deliveries => self.deliveries += n,
            Table::Attempts => self.attempts += n,
        }
    }
}

/// Runs one batch on transaction `$tx` of any dialect.
macro_rules! prune_in {
    ($tx:expr, $dialect:ident, $c:expr, $limit:expr) => {{
        let c: &Cutoffs = $c;
        let limit = i64::from($limit);
        let later = Ts(c.events.max(c.dead_letters));
        let ids: Vec<i64> = run_in!(
            $tx,
            $dialect,
            EVENT_CANDIDATES,
            query_scalar,
            fetch_all,
            Ts(c.events),
            Ts(c.dead_letters),
            later,
            limit
        )?;
        let mut done = Pruned::default();
        if !ids.is_empty() {
            let deliveries: Vec<i64> = sqlx::query_scalar(&delivery_ids_of(&ids))
                .fetch_all(&mut *$tx)
                .await?;
            let sqlite = stringify!($dialect) == "sqlite";
            for (table, sql) in event_deletes(&ids, &deliveries, sqlite) {
                if matches!(table, Table::Attempts) && deliveries.is_empty() {
                    continue;
                }
                let n = sqlx::query(&sql).execute(&mut *$tx).await?.rows_affected();
                done.add(table, n);
            }
            sqlx::query(&unlist(&ids)).execute(&mut *$tx).await?;
        }
        done.endpoints =
            run_in!($tx, $dialect, DELETE_TOMBSTONES, query, execute, limit)?.rows_affected();
        for (sql, n) in [
            (DELETE_INBOX_ATTEMPTS, &mut done.inbox_attempts),
            (DELETE_INBOX_RETRIES, &mut done.inbox_retries),
        ] {
            *n = run_in!($tx, $dialect, sql, query, execute, Ts(c.inbox), limit)?.rows_affected();
        }
        done.inbox = run_in!(
            $tx,
            $dialect,
            DELETE_INBOX,
            query,
            execute,
            Ts(c.inbox),
            limit
        )?
        .rows_affected();
        let portal = Ts(c.portal);
        done.portal_links = run_in!(
            $tx,
            $dialect,
            DELETE_PORTAL_LINKS,
            query,
            execute,
            portal,
            limit
        )?
        .rows_affected();
        for sql in [
            DELETE_EXPIRED_PORTAL_SESSIONS,
            DELETE_REVOKED_PORTAL_SESSIONS,
        ] {
            done.portal_sessions +=
                run_in!($tx, $dialect, sql, query, execute, portal, limit)?.rows_affected();
        }
        if let Some(replays) = c.replays {
            done.replays = run_in!(
                $tx,
                $dialect,
                DELETE_REPLAYS,
                query,
                execute,
                Ts(replays),
                limit
            )?
            .rows_affected();
        }
        done
    }};
}

/// The name of the lock pruners take on MySQL, as an SQL expression: `GET_LOCK`'s names are the
/// server's, not the database's, so it names the database (hashed, as a name is at most 64
/// characters).
pub const MYSQL_PRUNE_LOCK: &str = "CONCAT('kurir_prune_', SHA1(COALESCE(DATABASE(), '')))";

/// One batch on MySQL under the session lock [`MYSQL_PRUNE_LOCK`], taken without waiting:
/// MySQL has no transaction-level advisory lock, so it is released after the commit (or the
/// failure) on the same connection, and a connection that cannot release it is closed, which
/// releases it.
async fn prune_mysql(
    s: &super::MySqlStore,
    cutoffs: &Cutoffs,
    limit: u32,
) -> Result<Option<(Pruned, Duration)>> {
    use sqlx::Connection;
    let mut conn = s.pool().acquire().await?;
    let locked: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT CAST(GET_LOCK({MYSQL_PRUNE_LOCK}, 0) AS SIGNED)"
    ))
    .fetch_one(&mut *conn)
    .await?;
    if locked != Some(1) {
        return Ok(None);
    }
    let done = async {
        let mut tx = conn.begin().await?;
        let held = Instant::now();
        let done = prune_in!(tx, mysql, cutoffs, limit);
        tx.commit().await?;
        Ok::<_, super::StoreError>((done, held.elapsed()))
    }
    .await;
    let released = sqlx::query(&format!("DO RELEASE_LOCK({MYSQL_PRUNE_LOCK})"))
        .execute(&mut *conn)
        .await;
    if released.is_err() {
        conn.close_on_drop();
    }
    Ok(Some(done?))
}

impl Store {
    /// Deletes at most `limit` rows of each kind past `cutoffs`, in one transaction. `None` when
    /// another process holds the pruning lock (PostgreSQL, MySQL): it is pruning now.
    pub async fn prune_batch(&self, cutoffs: &Cutoffs, limit: u32) -> Result<Option<Pruned>> {
        Ok(self.prune_batch_held(cutoffs, limit).await?.map(|(p, _)| p))
    }

    /// [`Store::prune_batch`], with how long the batch held its locks: from the moment its
    /// transaction had them (on SQLite, the write lock) to its commit, without the wait for
    /// them. The pruner paces itself by it ([`crate::prune::Pacing`]).
    pub async fn prune_batch_held(
        &self,
        cutoffs: &Cutoffs,
        limit: u32,
    ) -> Result<Option<(Pruned, Duration)>> {
        match self {
            Store::Postgres(s) => {
                let mut tx = s.pool().begin().await?;
                let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                    .bind(PRUNE_LOCK)
                    .fetch_one(&mut *tx)
                    .await?;
                if !locked {
                    return Ok(None);
                }
                let held = Instant::now();
                let done = prune_in!(tx, postgres, cutoffs, limit);
                tx.commit().await?;
                Ok(Some((done, held.elapsed())))
            }
            Store::Sqlite(s) => {
                let mut tx = s.pool().begin_with("BEGIN IMMEDIATE").await?;
                let held = Instant::now();
                let done = prune_in!(tx, sqlite, cutoffs, limit);
                tx.commit().await?;
                Ok(Some((done, held.elapsed())))
            }
            Store::Mysql(s) => prune_mysql(s, cutoffs, limit).await,
        }
    }

    /// What [`Store::prune_batch`] would delete, all batches together (a dry run). Takes no lock.
    pub async fn prunable(&self, c: &Cutoffs) -> Result<Pruned> {
        let later = Ts(c.events.max(c.dead_letters));
        let (events, deliveries, attempts): (i64, i64, i64) = query_as_on!(
            self,
            COUNT_EVENTS,
            fetch_one,
            Ts(c.events),
            Ts(c.dead_letters),
            later
        )?;
        let (inbox,): (i64,) = query_as_on!(self, COUNT_INBOX, fetch_one, Ts(c.inbox))?;
        let (inbox_attempts,): (i64,) =
            query_as_on!(self, COUNT_INBOX_ATTEMPTS, fetch_one, Ts(c.inbox))?;
        let (inbox_retries,): (i64,) =
            query_as_on!(self, COUNT_INBOX_RETRIES, fetch_one, Ts(c.inbox))?;
        let replays = match c.replays {
            Some(at) => {
                query_as_on!(self, COUNT_REPLAYS, fetch_one, Ts(at)).map(|(n,): (i64,)| n)?
            }
            None => 0,
        };
        let (endpoints,): (i64,) = query_as_on!(self, COUNT_TOMBSTONES, fetch_one)?;
        let (portal_links, portal_sessions): (i64, i64) =
            query_as_on!(self, COUNT_PORTAL, fetch_one, Ts(c.portal))?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Pruned {
            endpoints: n(endpoints),
            events: n(events),
            deliveries: n(deliveries),
            attempts: n(attempts),
            inbox: n(inbox),
            inbox_attempts: n(inbox_attempts),
            inbox_retries: n(inbox_retries),
            replays: n(replays),
            portal_links: n(portal_links),
            portal_sessions: n(portal_sessions),
        })
    }
}

#[cfg(test)]
mod tests {
    //! The portal's deletes find their rows through migration 0026's indexes, with many live
    //! rows beside them, on each database.

    use super::{
        Sql, DELETE_EXPIRED_PORTAL_SESSIONS, DELETE_PORTAL_LINKS, DELETE_REVOKED_PORTAL_SESSIONS,
    };
    use crate::store::subscriber_log::tests::{drop_database, fresh, run};
    use crate::store::Store;

    /// Live links and sessions, expiring far ahead, none revoked.
    const LIVE: i64 = 20_000;

    /// `LIVE` rows of numbers `i` from 1, and the dialect's literals for a time far ahead and
    /// one long ago, and `false`.
    fn dialect(store: &Store) -> (String, &'static str, &'static str) {
        match store {
            Store::Mysql(_) => (
                format!(
                    "(SELECT a.i * 10000 + b.i * 1000 + c.i * 100 + d.i * 10 + e.i + 1 AS i \
                     FROM {d} a, {d} b, {d} c, {d} d, {d} e) n WHERE i <= {LIVE}",
                    d = "(SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                         UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 \
                         UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
                ),
                "'2999-01-01 00:00:00.000'",
                "'2020-01-01 00:00:00.000'",
            ),
            Store::Postgres(_) => (
                format!("generate_series(1, {LIVE}) n(i)"),
                "'2999-01-01T00:00:00.000Z'",
                "'2020-01-01T00:00:00.000Z'",
            ),
            Store::Sqlite(_) => (
                format!(
                    "(WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r \
                     WHERE i < {LIVE}) SELECT i FROM r) n"
                ),
                "'2999-01-01T00:00:00.000Z'",
                "'2020-01-01T00:00:00.000Z'",
            ),
        }
    }

    /// `sql` of `store`'s dialect with its two binds written in: the cutoff and the batch size.
    fn with_binds(store: &Store, sql: &Sql, cutoff: &str) -> String {
        let (text, first, second) = match store {
            Store::Postgres(_) => (sql.postgres, "$1", "$2"),
            Store::Sqlite(_) => (sql.sqlite, "?1", "?2"),
            Store::Mysql(_) => (sql.mysql, "$1", "$2"),
        };
        text.replace(first, cutoff).replace(second, "500")
    }

    async fn plan(store: &Store, statement: &str) -> String {
        match store {
            Store::Postgres(s) => {
                let plan: serde_json::Value =
                    sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {statement}"))
                        .fetch_one(s.pool())
                        .await
                        .unwrap();
                plan.to_string()
            }
            Store::Sqlite(s) => {
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(&format!("EXPLAIN QUERY PLAN {statement}"))
                        .fetch_all(s.pool())
                        .await
                        .unwrap();
                rows.into_iter()
                    .map(|(.., detail)| detail)
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Store::Mysql(s) => sqlx::query_scalar(&format!("EXPLAIN FORMAT=JSON {statement}"))
                .fetch_one(s.pool())
                .await
                .unwrap(),
        }
    }

    /// Whether `plan` reads its table through `index` and never reads a table whole.
    fn through(store: &Store, plan: &str, index: &str) -> bool {
        match store {
            Store::Postgres(_) => plan.contains(index) && !plan.contains("Seq Scan"),
            Store::Sqlite(_) => {
                plan.contains(&format!("INDEX {index} ("))
                    && !plan.lines().any(|l| l.starts_with("SCAN "))
            }
            Store::Mysql(_) => {
                plan.contains(&format!(r#""key": "{index}""#))
                    && !plan.contains(r#""access_type": "ALL""#)
                    && !plan.contains(r#""access_type": "index""#)
            }
        }
    }

    async fn portal_pruning_reads_the_expiry_indexes(backend: &str) {
        let Some((store, admin)) = fresh(backend).await else {
            return;
        };
        let (numbers, ahead, long_ago) = dialect(&store);
        let id = |prefix: &str| match store {
            Store::Mysql(_) => format!("CONCAT('{prefix}', i)"),
            _ => format!("'{prefix}' || i"),
        };
        let (link, hash, session) = (id("pl_"), id("h_"), id("ps_"));
        for sql in [
            "INSERT INTO kurir_subscribers (id, name) VALUES ('cus_a', 'A')".to_owned(),
            format!(
                "INSERT INTO kurir_portal_links (id, token_hash, subscriber_id, read_only, \
                 created_by, created_via, expires_at) \
                 SELECT {link}, {hash}, 'cus_a', 1 = 0, 'admin', 'api', {ahead} FROM {numbers}"
            ),
            format!(
                "INSERT INTO kurir_portal_sessions (id, subscriber_id, link_id, read_only, \
                 expires_at) SELECT {session}, 'cus_a', {link}, 1 = 0, {ahead} FROM {numbers}"
            ),
        ] {
            run(&store, &sql).await;
        }
        let analyze = match store {
            Store::Mysql(_) => "ANALYZE TABLE kurir_portal_links, kurir_portal_sessions",
            _ => "ANALYZE",
        };
        run(&store, analyze).await;
        for (sql, index) in [
            (DELETE_PORTAL_LINKS, "kurir_portal_links_expires"),
            (
                DELETE_EXPIRED_PORTAL_SESSIONS,
                "kurir_portal_sessions_expires",
            ),
            (
                DELETE_REVOKED_PORTAL_SESSIONS,
                "kurir_portal_sessions_revoked",
            ),
        ] {
            let plan = plan(&store, &with_binds(&store, &sql, long_ago)).await;
            assert!(through(&store, &plan, index), "{backend}, {index}: {plan}");
        }
        store.close().await;
        drop_database(admin).await;
    }

    #[tokio::test]
    async fn portal_pruning_reads_the_expiry_indexes_on_sqlite() {
        portal_pruning_reads_the_expiry_indexes("sqlite").await;
    }

    #[tokio::test]
    async fn portal_pruning_reads_the_expiry_indexes_on_postgres() {
        portal_pruning_reads_the_expiry_indexes("postgres").await;
    }

    #[tokio::test]
    async fn portal_pruning_reads_the_expiry_indexes_on_mysql() {
        portal_pruning_reads_the_expiry_indexes("mysql").await;
    }
}
