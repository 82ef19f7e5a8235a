//! Retention: deleting finished history past its keep time ([`Store::prune_batch`]), and counting
//! what would go ([`Store::prunable`], for `kurir prune --dry-run`).
//!
//! An event goes, with its deliveries and attempts, once it was fanned out, none of its
//! deliveries is still to be made (`pending`, `processing`, `failed`), and it is older than
//! [`Cutoffs::events`], or [`Cutoffs::dead_letters`] when one of its deliveries was dead-lettered.
//! Each delete is guarded by the delivery statuses again, so a delivery replayed after the
//! candidates were read is never deleted (nor its event, which then still has a delivery).
//! Completed inbox events go by their `updated_at`; the replay audit by its `created_at`.
//!
//! A batch is one short transaction over at most `limit` rows per table. On PostgreSQL it first
//! takes a transaction-level advisory lock without waiting ([`PRUNE_LOCK`]): one process prunes
//! at a time, the others skip the round. On SQLite it holds the write lock (`BEGIN IMMEDIATE`).

use chrono::{DateTime, Utc};

use super::rows::Ts;
use super::sql::{query_as_on, Sql};
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
    /// `kurir_replays`.
    pub replays: u64,
}

impl Pruned {
    /// Each table's name with its count, for metrics and output.
    pub fn by_table(&self) -> [(&'static str, u64); 5] {
        [
            ("kurir_outbox", self.events),
            ("kurir_deliveries", self.deliveries),
            ("kurir_attempts", self.attempts),
            ("kurir_inbox", self.inbox),
            ("kurir_replays", self.replays),
        ]
    }

    /// Rows in all.
    pub fn total(&self) -> u64 {
        self.by_table().iter().map(|(_, n)| n).sum()
    }
}

/// The condition on outbox row `o` for it to go (binds: events cutoff, dead-letter cutoff, the
/// later of the two). Plain SQL, the same in every dialect but for the placeholders.
macro_rules! prunable_event {
    ($p1:literal, $p2:literal, $p3:literal) => {
        concat!(
            "o.created_at < ",
            $p3,
            " AND o.dispatched_at IS NOT NULL ",
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

const EVENT_CANDIDATES: Sql = Sql {
    postgres: concat!(
        "SELECT o.id FROM kurir_outbox o WHERE ",
        prunable_event!("$1", "$2", "$3"),
        " ORDER BY o.created_at, o.id LIMIT $4"
    ),
    sqlite: concat!(
        "SELECT o.id FROM kurir_outbox o WHERE ",
        prunable_event!("?1", "?2", "?3"),
        " ORDER BY o.created_at, o.id LIMIT ?4"
    ),
};

const COUNT_EVENTS: Sql = Sql {
    postgres: concat!(
        "SELECT count(*), ",
        "(SELECT count(*) FROM kurir_deliveries d WHERE d.outbox_id IN (SELECT o.id FROM kurir_outbox o WHERE ",
        prunable_event!("$1", "$2", "$3"),
        ")), (SELECT count(*) FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id ",
        "WHERE d.outbox_id IN (SELECT o.id FROM kurir_outbox o WHERE ",
        prunable_event!("$1", "$2", "$3"),
        ")) FROM kurir_outbox o WHERE ",
        prunable_event!("$1", "$2", "$3"),
    ),
    sqlite: concat!(
        "SELECT count(*), ",
        "(SELECT count(*) FROM kurir_deliveries d WHERE d.outbox_id IN (SELECT o.id FROM kurir_outbox o WHERE ",
        prunable_event!("?1", "?2", "?3"),
        ")), (SELECT count(*) FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id ",
        "WHERE d.outbox_id IN (SELECT o.id FROM kurir_outbox o WHERE ",
        prunable_event!("?1", "?2", "?3"),
        ")) FROM kurir_outbox o WHERE ",
        prunable_event!("?1", "?2", "?3"),
    ),
};

const COUNT_INBOX: Sql = Sql {
    postgres: "SELECT count(*) FROM kurir_inbox WHERE status = 'completed' AND updated_at < $1",
    sqlite: "SELECT count(*) FROM kurir_inbox WHERE status = 'completed' AND updated_at < ?1",
};

const COUNT_REPLAYS: Sql = Sql {
    postgres: "SELECT count(*) FROM kurir_replays WHERE created_at < $1",
    sqlite: "SELECT count(*) FROM kurir_replays WHERE created_at < ?1",
};

const DELETE_INBOX: Sql = Sql {
    postgres: "DELETE FROM kurir_inbox WHERE id IN (SELECT id FROM kurir_inbox \
        WHERE status = 'completed' AND updated_at < $1 ORDER BY id LIMIT $2)",
    sqlite: "DELETE FROM kurir_inbox WHERE id IN (SELECT id FROM kurir_inbox \
        WHERE status = 'completed' AND updated_at < ?1 ORDER BY id LIMIT ?2)",
};

const DELETE_REPLAYS: Sql = Sql {
    postgres: "DELETE FROM kurir_replays WHERE id IN (SELECT id FROM kurir_replays \
        WHERE created_at < $1 ORDER BY id LIMIT $2)",
    sqlite: "DELETE FROM kurir_replays WHERE id IN (SELECT id FROM kurir_replays \
        WHERE created_at < ?1 ORDER BY id LIMIT ?2)",
};

/// The three deletes of one batch of events, children first, each guarded by the delivery
/// statuses. `ids` are outbox ids read from the database, written as integer literals.
fn event_deletes(ids: &[i64]) -> [String; 3] {
    let list = ids
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    [
        format!(
            "DELETE FROM kurir_attempts WHERE delivery_id IN (SELECT id FROM kurir_deliveries \
             WHERE outbox_id IN ({list}) AND status IN ('sent', 'dead_letter'))"
        ),
        format!(
            "DELETE FROM kurir_deliveries WHERE outbox_id IN ({list}) \
             AND status IN ('sent', 'dead_letter')"
        ),
        format!(
            "DELETE FROM kurir_outbox WHERE id IN ({list}) AND NOT EXISTS \
             (SELECT 1 FROM kurir_deliveries d WHERE d.outbox_id = kurir_outbox.id)"
        ),
    ]
}

/// Runs one batch on transaction `$tx` of either dialect.
macro_rules! prune_in {
    ($tx:expr, $dialect:ident, $c:expr, $limit:expr) => {{
        let c: &Cutoffs = $c;
        let limit = i64::from($limit);
        let later = Ts(c.events.max(c.dead_letters));
        let ids: Vec<i64> = sqlx::query_scalar(EVENT_CANDIDATES.$dialect)
            .bind(Ts(c.events))
            .bind(Ts(c.dead_letters))
            .bind(later)
            .bind(limit)
            .fetch_all(&mut *$tx)
            .await?;
        let mut done = Pruned::default();
        if !ids.is_empty() {
            let [attempts, deliveries, events] = event_deletes(&ids);
            done.attempts = sqlx::query(&attempts)
                .execute(&mut *$tx)
                .await?
                .rows_affected();
            done.deliveries = sqlx::query(&deliveries)
                .execute(&mut *$tx)
                .await?
                .rows_affected();
            done.events = sqlx::query(&events)
                .execute(&mut *$tx)
                .await?
                .rows_affected();
        }
        done.inbox = sqlx::query(DELETE_INBOX.$dialect)
            .bind(Ts(c.inbox))
            .bind(limit)
            .execute(&mut *$tx)
            .await?
            .rows_affected();
        if let Some(replays) = c.replays {
            done.replays = sqlx::query(DELETE_REPLAYS.$dialect)
                .bind(Ts(replays))
                .bind(limit)
                .execute(&mut *$tx)
                .await?
                .rows_affected();
        }
        done
    }};
}

impl Store {
    /// Deletes at most `limit` rows of each kind past `cutoffs`, in one transaction. `None` when
    /// another process holds the pruning lock (PostgreSQL): it is pruning now.
    pub async fn prune_batch(&self, cutoffs: &Cutoffs, limit: u32) -> Result<Option<Pruned>> {
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
                let done = prune_in!(tx, postgres, cutoffs, limit);
                tx.commit().await?;
                Ok(Some(done))
            }
            Store::Sqlite(s) => {
                let mut tx = s.pool().begin_with("BEGIN IMMEDIATE").await?;
                let done = prune_in!(tx, sqlite, cutoffs, limit);
                tx.commit().await?;
                Ok(Some(done))
            }
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
        let replays = match c.replays {
            Some(at) => {
                query_as_on!(self, COUNT_REPLAYS, fetch_one, Ts(at)).map(|(n,): (i64,)| n)?
            }
            None => 0,
        };
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Pruned {
            events: n(events),
            deliveries: n(deliveries),
            attempts: n(attempts),
            inbox: n(inbox),
            replays: n(replays),
        })
    }
}
