//! The claim's look for orphans on MySQL and MariaDB: due deliveries whose event is gone,
//! removed with their attempts (see `OrphanLooks`).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{MySql, Row, Transaction};

use crate::store::{EndpointSlot, Orphan, OrphanReason, Result};
use kurir_sql::mysql::{bind_all, in_list};

/// The due rows of one endpoint up to a time whose outbox row seems gone, locked: candidates
/// only (see [`still_orphaned`]). The locking read sees each delivery as last committed, but
/// the subquery is a consistent read from a snapshot the statement takes at its first
/// evaluation, so a delivery the relay commits during the walk can be read here without the
/// event it was written for. The outbox is probed by key per row, as a scalar subquery: as
/// `NOT EXISTS` MariaDB turned it into `NOT IN` and materialised the whole outbox.
const ORPHANS_SQL: &str = "SELECT d.id, d.outbox_id, CAST(d.endpoint_id AS CHAR) AS endpoint_id, \
         CAST(d.event_id AS CHAR) AS event_id FROM kurir_deliveries AS d \
     WHERE d.endpoint_id = ? AND d.due_at <= ? \
       AND (SELECT o.id FROM kurir_outbox AS o WHERE o.id = d.outbox_id) IS NULL \
     FOR UPDATE SKIP LOCKED";

/// Removes the due rows of `slot`'s endpoint up to `upto` (all of them when `None`) whose
/// outbox row is gone, with their attempts.
pub(super) async fn remove_orphans(
    tx: &mut Transaction<'static, MySql>,
    slot: &EndpointSlot,
    upto: Option<DateTime<Utc>>,
) -> Result<Vec<Orphan>> {
    let upto = upto.map_or_else(|| "9999-12-31 23:59:59.999".to_owned(), super::datetime);
    let rows = sqlx::query(ORPHANS_SQL)
        .bind(slot.endpoint.id.as_str())
        .bind(upto)
        .fetch_all(&mut **tx)
        .await?;
    let candidates = rows
        .iter()
        .map(|r| {
            Ok((
                r.try_get("outbox_id")?,
                Orphan::of_row(r, OrphanReason::EventDeleted)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let orphans = still_orphaned(tx, candidates).await?;
    delete_deliveries(tx, &orphans).await?;
    Ok(orphans)
}

/// Of `candidates` (each with its outbox row's id), those whose outbox row is gone when read
/// again after [`ORPHANS_SQL`] locked them. The relay commits a delivery after the event it
/// was written for, so a delivery read then has an event a later read sees, unless the event
/// was deleted. The read locks (shared) for a read of the rows as last committed whatever the
/// session's isolation level (`from_pool` takes the application's pool as it is): a consistent
/// read under `REPEATABLE READ` would use the transaction's first snapshot.
async fn still_orphaned(
    tx: &mut Transaction<'static, MySql>,
    candidates: Vec<(i64, Orphan)>,
) -> Result<Vec<Orphan>> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = candidates.iter().map(|(outbox_id, _)| *outbox_id).collect();
    let sql = format!(
        "SELECT id FROM kurir_outbox WHERE {} LOCK IN SHARE MODE",
        in_list("id", ids.len())
    );
    let live = bind_all(sqlx::query(&sql), &ids)
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|r| r.try_get::<i64, _>(0))
        .collect::<std::result::Result<HashSet<_>, _>>()?;
    Ok(candidates
        .into_iter()
        .filter(|(outbox_id, _)| !live.contains(outbox_id))
        .map(|(_, orphan)| orphan)
        .collect())
}

/// Deletes the deliveries of `removed` and their attempts (the hot tables have no foreign keys).
pub(super) async fn delete_deliveries(
    tx: &mut Transaction<'static, MySql>,
    removed: &[Orphan],
) -> Result<()> {
    if removed.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = removed.iter().map(|o| o.delivery_id).collect();
    let sql = format!(
        "DELETE FROM kurir_attempts WHERE {}",
        in_list("delivery_id", ids.len())
    );
    bind_all(sqlx::query(&sql), &ids).execute(&mut **tx).await?;
    let sql = format!(
        "DELETE FROM kurir_deliveries WHERE {}",
        in_list("id", ids.len())
    );
    bind_all(sqlx::query(&sql), &ids).execute(&mut **tx).await?;
    Ok(())
}
