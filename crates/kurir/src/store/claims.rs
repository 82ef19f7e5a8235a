//! What claims and lease endings report: the deliveries claimed, the orphans removed on the
//! way, the leases ended without a recorded attempt.

use std::sync::Mutex;
use std::time::Duration;

use kurir_core::retry::RetryPolicy;
use tokio::time::Instant;

use super::rows::OrphanRow;
use crate::delivery::{ClaimedDelivery, EventSnapshot};

/// How often a claim also looks for orphans past the rows it takes, while none are found.
pub const ORPHAN_LOOK_INTERVAL: Duration = Duration::from_secs(1);

/// When a claim also looks for orphans (deliveries whose event is gone) among the due rows it
/// read past: at most every [`ORPHAN_LOOK_INTERVAL`], and at every claim while the last look
/// found some. Orphans never take a claim's place (only rows whose event exists are taken), so
/// removing them can wait; looking at every claim cost a measurable share of the claim+complete
/// throughput of `kurir-bench ceiling` on PostgreSQL.
#[derive(Debug, Default)]
pub(crate) struct OrphanLooks {
    next: Mutex<Option<Instant>>,
}

impl OrphanLooks {
    /// Whether this claim looks.
    pub fn due(&self) -> bool {
        let next = *self.next.lock().unwrap_or_else(|p| p.into_inner());
        next.is_none_or(|at| Instant::now() >= at)
    }

    /// Records a claim that looked, and whether it found orphans.
    pub fn looked(&self, found: bool) {
        let wait = if found {
            Duration::ZERO
        } else {
            ORPHAN_LOOK_INTERVAL
        };
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + wait);
    }

    /// Puts the next look an hour away, for tests of claims that must not look.
    #[cfg(test)]
    pub fn hold_off(&self) {
        let later = Instant::now() + Duration::from_secs(3600);
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = Some(later);
    }
}

/// What a claim asks of its dialect (see [`super::Store::claim_due_deliveries`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClaimAsk<'a> {
    /// Who takes the leases.
    pub owner: &'a str,
    /// The endpoints to claim for, each with its limit and lease.
    pub slots: &'a [super::EndpointSlot],
    /// At most this many deliveries in all.
    pub limit: u32,
    /// When the claim was sent: each lease's deadline counts from it.
    pub sent_at: Instant,
}

/// What one claim did.
#[derive(Clone, Debug, Default)]
pub struct Claim {
    /// The deliveries leased to the claimer, to be attempted.
    pub deliveries: Vec<ClaimedDelivery>,
    /// Due deliveries whose event no longer exists, among those the claim read past: removed.
    pub orphans: Vec<Orphan>,
}

/// A delivery removed because what it would deliver, or where, no longer exists (deleted by
/// hand: kurir deletes neither without its deliveries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The delivery row, removed with its attempts.
    pub delivery_id: i64,
    /// Its endpoint.
    pub endpoint_id: String,
    /// Its event.
    pub event_id: String,
    /// Which of the two is gone.
    pub reason: OrphanReason,
}

impl Orphan {
    /// The orphan that `row` names (its `id`, `endpoint_id` and `event_id` columns).
    pub(crate) fn of_row<'r, R: sqlx::Row>(row: &'r R, reason: OrphanReason) -> super::Result<Self>
    where
        OrphanRow: sqlx::FromRow<'r, R>,
    {
        let r = <OrphanRow as sqlx::FromRow<R>>::from_row(row)?;
        Ok(Self {
            delivery_id: r.id,
            endpoint_id: r.endpoint_id,
            event_id: r.event_id,
            reason,
        })
    }
}

/// Why a delivery was an [`Orphan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrphanReason {
    /// Its outbox row was deleted.
    EventDeleted,
    /// Its endpoint row was deleted.
    EndpointDeleted,
}

impl OrphanReason {
    /// `event_deleted` or `endpoint_deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EventDeleted => "event_deleted",
            Self::EndpointDeleted => "endpoint_deleted",
        }
    }
}

/// Leases that ended without a recorded attempt (expired, or left at shutdown): each counts as
/// an attempt, since it may have been made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requeued {
    /// Due again after the retry backoff.
    pub retried: u64,
    /// Dead-lettered: that was the endpoint's last attempt.
    pub dead_lettered: u64,
}

impl Requeued {
    /// Both counts together.
    pub fn total(&self) -> u64 {
        self.retried + self.dead_lettered
    }

    /// The counts from the status each requeued delivery now has.
    pub(crate) fn of_statuses(statuses: &[String]) -> Self {
        let dead_lettered = statuses.iter().filter(|s| *s == "dead_letter").count() as u64;
        Self {
            retried: statuses.len() as u64 - dead_lettered,
            dead_lettered,
        }
    }
}

/// The leases a requeue ends without a recorded attempt (see [`super::Store::release_leases`]
/// and [`super::Store::sweep_expired_leases`]): each counts as an attempt, under its endpoint's
/// retry overrides, else `defaults`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseEnd<'a> {
    /// `Some`: the leases this owner still holds at shutdown; `None`: every lease that expired.
    pub owner: Option<&'a str>,
    /// The retry policy where the endpoint overrides nothing.
    pub defaults: &'a RetryPolicy,
}

impl LeaseEnd<'_> {
    /// The `last_error` the requeued deliveries get.
    pub fn error(&self) -> &'static str {
        match self.owner {
            Some(_) => "released at shutdown before the attempt was recorded",
            None => "lease expired: the worker stopped before recording the attempt",
        }
    }
}

/// A row a claim leased, before its event is read (the claims that lease first and read the
/// events after: SQLite's and MySQL's).
pub(crate) struct Leased<'a> {
    pub delivery_id: i64,
    pub outbox_id: i64,
    pub attempt: u32,
    pub trigger: crate::delivery::Trigger,
    pub slot: &'a super::EndpointSlot,
}

impl Claim {
    /// The claim of the claims that lease first and read the events after: `leased`, each with
    /// its event from `events` (by outbox row id), and the `orphans` removed on the way.
    pub(crate) fn of_leased(
        leased: Vec<Leased<'_>>,
        events: &std::collections::HashMap<i64, EventSnapshot>,
        sent_at: Instant,
        orphans: Vec<Orphan>,
    ) -> super::Result<Self> {
        let deliveries = leased.into_iter().map(|l| l.claimed(events, sent_at));
        Ok(Self {
            deliveries: deliveries.collect::<super::Result<_>>()?,
            orphans,
        })
    }
}

impl Leased<'_> {
    /// The claimed delivery, with its event from `events` (by outbox row id). Several
    /// deliveries of one event can be claimed together: each gets a copy. The lease took only
    /// rows whose event exists, in the claim's own transaction.
    pub(crate) fn claimed(
        self,
        events: &std::collections::HashMap<i64, EventSnapshot>,
        sent_at: Instant,
    ) -> super::Result<ClaimedDelivery> {
        let event =
            events
                .get(&self.outbox_id)
                .cloned()
                .ok_or_else(|| super::StoreError::Corrupt {
                    table: "kurir_deliveries",
                    message: format!(
                        "delivery {} points at missing outbox row {}",
                        self.delivery_id, self.outbox_id
                    ),
                })?;
        Ok(ClaimedDelivery {
            delivery_id: self.delivery_id,
            attempt: self.attempt,
            trigger: self.trigger,
            event,
            endpoint: self.slot.endpoint.clone(),
            lease_deadline: sent_at + self.slot.lease,
        })
    }
}

/// The endpoints with due deliveries on PostgreSQL and SQLite (`$now`: the dialect's clock):
/// `owners` skips through the due index (`kurir_deliveries_due`, partial on the two statuses a
/// claim takes) from one endpoint to the next, so the look costs an index probe per endpoint
/// that has deliveries to make, now or later, and nothing for the installed endpoints that have
/// none; each is kept if one of its rows is due now.
macro_rules! due_endpoints_sql {
    ($now:literal) => {
        concat!(
            "WITH RECURSIVE owners(endpoint_id) AS ( \
                SELECT * FROM (SELECT endpoint_id FROM kurir_deliveries \
                    WHERE status IN ('pending', 'failed') ORDER BY endpoint_id LIMIT 1) AS first \
                UNION ALL \
                SELECT (SELECT d.endpoint_id FROM kurir_deliveries d \
                        WHERE d.status IN ('pending', 'failed') AND d.endpoint_id > o.endpoint_id \
                        ORDER BY d.endpoint_id LIMIT 1) \
                FROM owners o WHERE o.endpoint_id IS NOT NULL \
             ) \
             SELECT o.endpoint_id FROM owners o WHERE o.endpoint_id IS NOT NULL AND EXISTS ( \
                SELECT 1 FROM kurir_deliveries d WHERE d.endpoint_id = o.endpoint_id \
                  AND d.status IN ('pending', 'failed') AND d.available_at <= ",
            $now,
            ")"
        )
    };
}

/// The endpoints with deliveries due now (see [`super::Store::endpoints_with_due_deliveries`]).
/// MySQL's generated `due_at` is set only on the statuses a claim takes, and its index
/// `(endpoint_id, due_at)` is read for each endpoint's least `due_at` in range, one jump per
/// endpoint (a loose index scan, `Using index for group-by`).
const DUE_ENDPOINTS_POSTGRES: &str = due_endpoints_sql!("now()");
const DUE_ENDPOINTS_SQLITE: &str = due_endpoints_sql!("?1");
const DUE_ENDPOINTS_MYSQL: &str = "SELECT CAST(endpoint_id AS CHAR), MIN(due_at) \
     FROM kurir_deliveries WHERE due_at <= UTC_TIMESTAMP(3) GROUP BY endpoint_id";

impl super::Store {
    /// The ids of the endpoints that have deliveries due now: what a dispatcher claims for,
    /// instead of every installed endpoint. Costs the endpoints that have deliveries to make,
    /// not the installation. No locks.
    pub async fn endpoints_with_due_deliveries(&self) -> super::Result<Vec<String>> {
        Ok(match self {
            super::Store::Postgres(s) => {
                sqlx::query_scalar(DUE_ENDPOINTS_POSTGRES)
                    .fetch_all(s.pool())
                    .await?
            }
            super::Store::Sqlite(s) => {
                sqlx::query_scalar(DUE_ENDPOINTS_SQLITE)
                    .bind(super::sqlite_ts(s.clock.now_millis()))
                    .fetch_all(s.pool())
                    .await?
            }
            super::Store::Mysql(s) => {
                let rows: Vec<(String, Option<chrono::NaiveDateTime>)> =
                    sqlx::query_as(DUE_ENDPOINTS_MYSQL)
                        .fetch_all(s.pool())
                        .await?;
                rows.into_iter().map(|(id, _)| id).collect()
            }
        })
    }
}
