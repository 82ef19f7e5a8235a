//! Which outbox rows the relay has fanned out (issue 19).
//!
//! On PostgreSQL and SQLite the outbox is append-only: nothing updates a row after its insert.
//! The relay reads past a cursor, the last row it fanned out, kept in the one-row table
//! `kurir_relay_cursor` and moved in the transaction that writes the deliveries (migration 0011).
//!
//! - **PostgreSQL** orders rows by `(txid, id)`, `txid` being the inserting transaction's id. The
//!   relay reads only rows whose transaction is below the oldest transaction of this database
//!   still running ([`horizon_pg`]): each such transaction has ended, so no row can appear
//!   below the cursor later. One process relays at a time, the
//!   one holding the cursor's row lock.
//! - **SQLite** has one writer at a time, so ids are in commit order, and `AUTOINCREMENT` never
//!   hands one out twice: the cursor is an id. A trigger refuses an explicit id at or below it.
//! - **MySQL and MariaDB** have no commit-ordered value to read past: the relay still marks
//!   each row's `dispatched_at` (`store::mysql::relay`).
//!
//! A row past the cursor that carries `dispatched_at` (refused by migration 0005, or marked by a
//! process still running the version before the cursor) is passed over, not fanned out.
//!
//! The conditions below are on outbox row `o`; each is a literal, for `concat!`.

/// Outbox row `o` is past the cursor: the relay has yet to read it.
macro_rules! past_cursor {
    (postgres) => {
        "(o.txid, o.id) > (SELECT txid, outbox_id FROM kurir_relay_cursor)"
    };
    (sqlite) => {
        "o.id > (SELECT outbox_id FROM kurir_relay_cursor)"
    };
}

/// Outbox row `o` is still to be fanned out: past the cursor, and not marked dispatched (a
/// row written before the cursor existed, refused by migration 0005, or marked by a process
/// still running the version before it: the relay passes over such a row).
macro_rules! unrelayed {
    (mysql) => {
        "o.dispatched_at IS NULL"
    };
    ($dialect:tt) => {
        concat!(
            "(",
            super::cursor::past_cursor!($dialect),
            " AND o.dispatched_at IS NULL)"
        )
    };
}

/// The outbox rows still to be fanned out, as a table `o` of their `created_at`, for counts.
/// On PostgreSQL in cursor order: the planner cannot tell how many rows lie past a cursor it
/// reads only when the statement runs, takes a third of the table, and would scan all of it;
/// asked for the index's order, it walks the index from the cursor.
macro_rules! unrelayed_rows {
    (postgres) => {
        concat!(
            "(SELECT o.created_at FROM kurir_outbox o WHERE ",
            super::cursor::unrelayed!(postgres),
            " ORDER BY o.txid, o.id) o"
        )
    };
    ($dialect:tt) => {
        concat!(
            "(SELECT o.created_at FROM kurir_outbox o WHERE ",
            super::cursor::unrelayed!($dialect),
            ") o"
        )
    };
}

/// Outbox row `o` was fanned out (or refused by migration 0005): the negation of
/// [`unrelayed`]. On PostgreSQL, rows fanned out before the cursor existed have no `txid`.
macro_rules! relayed {
    (postgres) => {
        "(o.dispatched_at IS NOT NULL OR o.txid IS NULL \
         OR (o.txid, o.id) <= (SELECT txid, outbox_id FROM kurir_relay_cursor))"
    };
    (sqlite) => {
        "(o.dispatched_at IS NOT NULL OR o.id <= (SELECT outbox_id FROM kurir_relay_cursor))"
    };
    (mysql) => {
        "o.dispatched_at IS NOT NULL"
    };
}

/// On PostgreSQL, the transaction id below which every transaction of this database had ended
/// when the current statement's snapshot was taken (an `xid8`). Rows below it can no longer be
/// joined by an older one that commits later, so the cursor may pass them.
///
/// The snapshot's xmin would do, but it counts the transactions of every database on the
/// server: this is the xmin of this database's alone. The snapshot's running transactions
/// (`xip`, 64-bit) are matched, by their low 32 bits, with the transaction ids of this
/// database's sessions (`pg_stat_activity.backend_xid`, shown to every role) and its prepared
/// transactions; the snapshot's `xmax` bounds the rest. A running transaction the views no
/// longer show has ended since the snapshot, so a statement run after this one sees its rows.
macro_rules! horizon_pg {
    () => {
        "least(pg_snapshot_xmax(pg_current_snapshot()), \
            (SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x \
             WHERE x::text::int8 % 4294967296 IN ( \
                 SELECT backend_xid::text::int8 FROM pg_stat_activity \
                 WHERE datname = current_database() AND backend_xid IS NOT NULL \
                 UNION ALL SELECT transaction::text::int8 FROM pg_prepared_xacts \
                 WHERE database = current_database())))"
    };
}

/// What the relay reads of an outbox row past the cursor (on MySQL: not marked dispatched).
#[derive(sqlx::FromRow)]
pub(crate) struct OutboxHead {
    pub id: i64,
    pub event_id: String,
    pub event_type: String,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub version: i32,
    pub created_at: super::rows::Ts,
    /// The subscriber the event is addressed to: it goes only to that subscriber's endpoints
    /// (`None`: only to the operator's own).
    pub subscriber_id: Option<String>,
    /// The payload, read only while the event catalog has a schema to check it against (see
    /// `catalog::Checks::reads_payloads`).
    #[sqlx(default)]
    pub payload: Option<String>,
    /// Read past the cursor but marked dispatched already: passed over (see `store::cursor`).
    #[sqlx(default)]
    pub passed: bool,
    /// The payload, read only when it holds more than [`crate::limits::MAX_JSON_DEPTH`]
    /// opening brackets (see [`suspect!`]): only such a payload can nest too deep.
    #[sqlx(default)]
    pub suspect: Option<String>,
}

/// The relay's `suspect` column, per dialect: outbox row `o`'s payload when it holds more
/// than 128 (`limits::MAX_JSON_DEPTH`) `{` and `[` together, else `NULL`. Counting brackets is
/// one pass over text the database already has in memory, and it spares the relay reading
/// every payload, which it otherwise never needs; [`crate::limits::json_depth`] then tells
/// the few suspects that really nest too deep (a string full of brackets does not).
macro_rules! suspect {
    (postgres) => {
        "CASE WHEN length(o.payload::text) - length(translate(o.payload::text, '{[', '')) > 128 \
             THEN o.payload::text END AS suspect"
    };
    (sqlite) => {
        "CASE WHEN length(o.payload) - length(replace(replace(o.payload, '{', ''), '[', '')) > 128 \
             THEN o.payload END AS suspect"
    };
    (mysql) => {
        "CASE WHEN CHAR_LENGTH(payload) - CHAR_LENGTH(REPLACE(REPLACE(payload, '{', ''), '[', '')) \
             > 128 THEN CAST(payload AS CHAR) END AS suspect"
    };
}

pub(crate) use {horizon_pg, past_cursor, relayed, suspect, unrelayed, unrelayed_rows};

/// Whether the relay has work now (`pending`), and how many microseconds ago, by the database's
/// clock, the installation's last batch moved the cursor (`since_move_us`, the relay's pace: see
/// [`crate::relay`]). On PostgreSQL, rows past the cursor whose transaction is not
/// yet below [`horizon_pg`] (a long transaction in this database holds it back) are not work
/// yet: the relay waits for a wake or its next poll rather than spin. Written as a subquery
/// with `ORDER BY … LIMIT 1`, not `EXISTS`, so the planner walks the `(txid, id)` index from
/// the cursor instead of scanning the table.
pub(crate) const OUTBOX_PENDING_PG: &str = concat!(
    "SELECT (SELECT o.id FROM kurir_outbox o WHERE ",
    past_cursor!(postgres),
    " AND o.txid < ",
    horizon_pg!(),
    " ORDER BY o.txid, o.id LIMIT 1) IS NOT NULL AS pending, \
     (SELECT (extract(epoch FROM now() - moved_at) * 1000000)::int8 FROM kurir_relay_cursor) \
         AS since_move_us"
);

/// SQLite's [`OUTBOX_PENDING_PG`]: a primary-key range from the cursor. No pace: one process
/// per SQLite file.
pub(crate) const OUTBOX_PENDING_SQLITE: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM kurir_outbox o WHERE ",
    past_cursor!(sqlite),
    ") AS pending, NULL AS since_move_us"
);

/// MySQL's: one probe of the `(dispatched_at, id)` index, and the pace from `kurir_relay_pace`
/// (migration 0018).
pub(crate) const OUTBOX_PENDING_MYSQL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM kurir_outbox o WHERE ",
    unrelayed!(mysql),
    ") AS pending, \
     (SELECT TIMESTAMPDIFF(MICROSECOND, moved_at, UTC_TIMESTAMP(3)) FROM kurir_relay_pace) \
         AS since_move_us"
);

/// What the relay's look at the outbox found: see [`crate::store::OutboxLook`].
#[derive(sqlx::FromRow)]
pub(crate) struct Look {
    pub pending: bool,
    pub since_move_us: Option<i64>,
}

impl From<Look> for super::OutboxLook {
    fn from(l: Look) -> Self {
        Self {
            pending: l.pending,
            since_move: l
                .since_move_us
                .map(|us| std::time::Duration::from_micros(us.max(0).unsigned_abs())),
        }
    }
}

#[cfg(test)]
mod tests {
    /// `suspect!` writes the limit as a literal (SQL text is assembled at compile time).
    #[test]
    fn the_suspect_column_counts_past_the_documented_depth_limit() {
        let past = format!("> {}", crate::limits::MAX_JSON_DEPTH);
        for sql in [suspect!(postgres), suspect!(sqlite), suspect!(mysql)] {
            assert!(sql.contains(&past), "{sql}");
        }
    }
}
