//! Where each endpoint's next claim on PostgreSQL starts reading its due rows: just past the
//! last row the claim before took, so that no claim walks again the index entries that earlier
//! claims left behind. Owns the cursors and when they are dropped; the claim that reads from
//! them is `leases`.
//!
//! A claimed row's entry stays in the partial due index, dead, until a vacuum removes it: a
//! claim that reads an endpoint's entries from the start walks every row claimed before it and
//! not yet vacuumed, more at each claim as a deep backlog drains.
//!
//! Nothing due is left behind. A claim with a cursor reads only rows after `(available_at, id)`
//! of the last row it took; a row can be due below it: skipped by `SKIP LOCKED` while another
//! transaction held it, handed back by a process that shut down, relayed by a transaction that
//! committed after a claim read past its timestamp, or made due again by hand with an older
//! `available_at`. A claim without a cursor reads from the start, in `(available_at, id)`
//! order, and so takes those rows first; a claim goes without one
//! - when the endpoint's last claim took fewer rows than its limit: it read everything due
//!   after its cursor, so whatever is due now may all be below it (an idle endpoint's claims
//!   are all of this kind, as before cursors);
//! - when the cursor was started more than [`RESCAN_INTERVAL`] ago by a claim from the start:
//!   so every due row is read by a claim at least that often while the endpoint has room;
//! - when the claim also looks for orphans, whose bound (`read_to`) counts the rows read from
//!   the start;
//! - always for an ordered endpoint: the rows behind an aggregate's head become claimable when
//!   the head is done, below any cursor that passed them, and would wait for a rescan.
//!
//! A cursor only moves a claim's start: which rows are taken (due, event present, an ordered
//! endpoint's head) is decided by the claim as before.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// The longest a cursor lives: its endpoint's claims read from the start at least this often.
pub(super) const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// A due row's place in the claim's order: its `available_at`, then its id.
pub(super) type Position = (DateTime<Utc>, i64);

/// The cursors of this process, one per endpoint (see the module doc).
#[derive(Debug, Default)]
pub(in crate::store) struct ClaimCursors {
    by_endpoint: Mutex<HashMap<String, Cursor>>,
}

#[derive(Clone, Copy, Debug)]
struct Cursor {
    after: Position,
    /// When the claim from the start that began this run of cursors was sent.
    rescanned_at: Instant,
}

/// What one claim took for one endpoint.
#[derive(Clone, Copy, Debug)]
pub(super) struct Taken {
    /// Where the claim started: after this position, or from the start.
    pub after: Option<Position>,
    /// When the claim was sent.
    pub sent_at: Instant,
    /// Whether it took the endpoint's whole limit.
    pub full: bool,
    /// The last row it took in the claim's order.
    pub last: Option<Position>,
}

impl ClaimCursors {
    /// Where the next claim of `endpoint_id` starts: after the returned position, or from the
    /// start (`None`) when there is no cursor or it is older than [`RESCAN_INTERVAL`].
    pub fn after(&self, endpoint_id: &str) -> Option<Position> {
        let mut cursors = self.lock();
        let cursor = cursors.get(endpoint_id)?;
        if cursor.rescanned_at.elapsed() < RESCAN_INTERVAL {
            return Some(cursor.after);
        }
        cursors.remove(endpoint_id);
        None
    }

    /// Records what a claim of `endpoint_id` took: its cursor moves past the last row taken
    /// when the claim took its whole limit, and is dropped otherwise.
    pub fn took(&self, endpoint_id: &str, taken: Taken) {
        let mut cursors = self.lock();
        let rescanned_at = match (taken.after, cursors.get(endpoint_id)) {
            (None, _) => taken.sent_at,
            (Some(_), Some(cursor)) => cursor.rescanned_at,
            // Dropped while this claim was in flight: the next one reads from the start.
            (Some(_), None) => return,
        };
        match taken.last.filter(|_| taken.full) {
            Some(after) => cursors.insert(
                endpoint_id.to_owned(),
                Cursor {
                    after,
                    rescanned_at,
                },
            ),
            None => cursors.remove(endpoint_id),
        };
    }

    /// Drops the cursor of `endpoint_id`: its next claim reads from the start.
    pub fn forget(&self, endpoint_id: &str) {
        self.lock().remove(endpoint_id);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Cursor>> {
        self.by_endpoint.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every cursor as old as the rescan interval, as if that much time had passed.
    #[cfg(test)]
    pub fn age(&self) {
        for cursor in self.lock().values_mut() {
            cursor.rescanned_at -= RESCAN_INTERVAL;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::delivery::ClaimedDelivery;
    use crate::store::postgres::tests::{drop_database, fresh_database};
    use crate::store::postgres::PgStore;
    use crate::store::{EndpointSlot, Store};

    /// A delivery handed back after the claim's cursor passed it keeps its old `available_at`,
    /// below the cursor: the claims with a cursor read past it, and it is still claimed, by
    /// the rescan once the cursor is as old as [`RESCAN_INTERVAL`], and by the claim after one
    /// that came back short. With cursors that never expire, or that outlive a short claim,
    /// it was never claimed again while rows after the cursor were due.
    #[tokio::test]
    async fn a_row_due_again_below_the_cursor_is_claimed_by_a_rescan() {
        let Some((url, admin, name)) = fresh_database().await else {
            return;
        };
        let pg = PgStore::connect(&url).await.unwrap();
        for sql in [
            "INSERT INTO kurir_endpoints (id, url, secret) VALUES ('ep', 'https://x', 'whsec-test-secret')",
            "INSERT INTO kurir_outbox (event_type, payload, dispatched_at) \
             SELECT 'order.paid', '{}', now() FROM generate_series(1, 10)",
            // One relay batch: one `available_at` for all, ordered by id.
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, available_at) \
             SELECT id, event_id, 'ep', now() - interval '1 minute' FROM kurir_outbox",
        ] {
            sqlx::query(sql).execute(pg.pool()).await.unwrap();
        }
        let d: Vec<i64> = sqlx::query_scalar("SELECT id FROM kurir_deliveries ORDER BY id")
            .fetch_all(pg.pool())
            .await
            .unwrap();
        pg.orphan_looks.hold_off();
        let store = Store::Postgres(pg.clone());
        let endpoint = store.list_endpoints().await.unwrap().remove(0);
        let slot = EndpointSlot {
            endpoint: Arc::new(endpoint),
            limit: 2,
            lease: Duration::from_secs(30),
        };
        let claim = || async {
            let claim = store.claim_due_deliveries("w", std::slice::from_ref(&slot), 2);
            claim.await.unwrap().deliveries
        };
        let ids = |claimed: &[ClaimedDelivery]| -> Vec<i64> {
            let mut ids: Vec<i64> = claimed.iter().map(|c| c.delivery_id).collect();
            ids.sort_unstable();
            ids
        };

        // Each claim's deliveries and what they must be, checked once the database is gone.
        let mut seen = Vec::new();
        let first = claim().await;
        seen.push((ids(&first), vec![d[0], d[1]]));
        store.hand_back("w", &first[..1]).await.unwrap();
        // The cursor reads past it.
        seen.push((ids(&claim().await), vec![d[2], d[3]]));
        pg.claim_cursors.age();
        let rescan = claim().await;
        // The rescan takes it first.
        seen.push((ids(&rescan), vec![d[0], d[4]]));
        let fifth: Vec<ClaimedDelivery> = rescan
            .into_iter()
            .filter(|c| c.delivery_id == d[4])
            .collect();
        store.hand_back("w", &fifth).await.unwrap();
        seen.push((ids(&claim().await), vec![d[5], d[6]]));
        seen.push((ids(&claim().await), vec![d[7], d[8]]));
        // Short: the cursor is dropped, and the next claim reads from the start.
        seen.push((ids(&claim().await), vec![d[9]]));
        seen.push((ids(&claim().await), vec![d[4]]));
        store.close().await;
        drop_database(&admin, &name).await;
        for (i, (got, wanted)) in seen.iter().enumerate() {
            assert_eq!(got, wanted, "claim {i}: {seen:?}");
        }
    }
}
