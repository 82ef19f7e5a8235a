//! The head check of an ordered endpoint's claim on MySQL and MariaDB (see `store::ordering`):
//! the text both reads of the claim use, and the second read.

use std::collections::HashSet;

use sqlx::{MySql, Row, Transaction};

use crate::store::Result;
use kurir_sql::mysql::{bind_all, in_list};

/// The earliest `outbox_id` among the deliveries of `d`'s endpoint and key in `$status`, or
/// `d`'s own when there is none: one probe of `kurir_deliveries_ordering` that reads one entry
/// (the index orders a key's rows of one status by `outbox_id`). Forced: with the statistics of
/// a table that was small when they were taken, MariaDB probed the endpoint's rows through
/// `kurir_deliveries_due` instead, so a claim over a blocked backlog read every row of the
/// endpoint once for each row it checked.
macro_rules! earliest {
    ($status:literal) => {
        concat!(
            "COALESCE((SELECT p.outbox_id \
                 FROM kurir_deliveries AS p FORCE INDEX (kurir_deliveries_ordering) \
                 WHERE p.endpoint_id = d.endpoint_id AND p.ordering_key = d.ordering_key \
                   AND p.status = ",
            $status,
            " ORDER BY p.outbox_id LIMIT 1), d.outbox_id)"
        )
    };
}

/// Whether the keyed delivery `d` is the head of its aggregate: no delivery of its endpoint and
/// key before it is `pending`, `processing`, `failed`, or in the status the one bind names
/// (`dead_letter` under `block`). One probe per status, each reading one index entry: a
/// `NOT EXISTS` over all four statuses is one range over the key's entries whatever their
/// status, which reads the aggregate's whole history of sent rows whenever `d` is the head.
macro_rules! head_of_aggregate {
    () => {
        concat!(
            "d.outbox_id <= LEAST(",
            $crate::store::mysql::ordered::earliest!("'pending'"),
            ", ",
            $crate::store::mysql::ordered::earliest!("'processing'"),
            ", ",
            $crate::store::mysql::ordered::earliest!("'failed'"),
            ", ",
            $crate::store::mysql::ordered::earliest!("?"),
            ")"
        )
    };
}
pub(super) use {earliest, head_of_aggregate};

/// Of the rows `ids` a claim has just locked as heads of their aggregates, those that are not
/// when read again. The claim's read decided from the snapshot its subquery took at its first
/// evaluation, while the locking read saw rows as last committed: a relay batch that committed
/// two deliveries of one aggregate after that snapshot showed both without a predecessor.
/// Every predecessor of a locked row committed no later than it (fan-out in outbox order), so
/// this read, a new statement under `READ COMMITTED` (the claim's transaction always is, see
/// `claim_due_deliveries`), sees every predecessor, as it is or less finished. A row another
/// claim holds is read as last committed (unfinished, since only its completion finishes it),
/// so no read here waits for a lock.
pub(super) async fn not_heads(
    tx: &mut Transaction<'static, MySql>,
    dead_letter: &str,
    ids: &[i64],
) -> Result<HashSet<i64>> {
    let sql = format!(
        "SELECT d.id FROM kurir_deliveries AS d \
         WHERE d.ordering_key IS NOT NULL AND NOT ({}) AND {}",
        head_of_aggregate!(),
        in_list("d.id", ids.len())
    );
    let rows = bind_all(sqlx::query(&sql).bind(dead_letter), ids)
        .fetch_all(&mut **tx)
        .await?;
    Ok(rows
        .iter()
        .map(|r| r.try_get::<i64, _>(0))
        .collect::<std::result::Result<_, _>>()?)
}
