//! `kurir_event_list` (migration 0025): what kurir's own event reads look events up by, kept
//! off the application's INSERT (issue 27, item 3).
//!
//! The outbox carries only what refuses a bad row and what the relay reads. The relay lists
//! each event here in the batch transaction that fans it out ([`LIST_BATCH`]), so a row is
//! listed exactly when the relay has passed it (`store::cursor::relayed`); the rows still
//! waiting are read from the outbox past the relay's cursor ([`waiting!`]), through the index
//! the relay reads it by. The event listing, the activity chart, the catalog's counts, the
//! refused gauge and retention read listed rows through this table's indexes. This module owns
//! that table's writes; it does not own the outbox's.

use super::sql::Sql;

/// Lists the outbox rows of a relay batch (their ids: PostgreSQL an `int8[]`, SQLite and MySQL
/// a JSON array), after the batch recorded its refusals. Copied from the rows, which the batch
/// has just read. A row listed already (one passed over, listed by migration 0025) is left.
pub(crate) const LIST_BATCH: Sql = Sql {
    postgres: "INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, \
            subscriber_id, created_at, refused) \
        SELECT o.id, o.event_type, o.version, o.aggregate_id, o.subscriber_id, o.created_at, \
            o.refused_reason IS NOT NULL \
        FROM unnest($1::int8[]) AS x(id) JOIN kurir_outbox o ON o.id = x.id \
        ON CONFLICT (outbox_id) DO NOTHING",
    sqlite: "INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, \
            subscriber_id, created_at, refused) \
        SELECT o.id, o.event_type, o.version, o.aggregate_id, o.subscriber_id, o.created_at, \
            o.refused_reason IS NOT NULL \
        FROM json_each(?1) AS x JOIN kurir_outbox o ON o.id = x.value \
        WHERE true ON CONFLICT (outbox_id) DO NOTHING",
    // The relay reads only rows not marked dispatched, and migration 0025 listed only marked
    // ones: no row is listed twice.
    mysql: "INSERT INTO kurir_event_list (outbox_id, event_type, version, aggregate_id, \
            subscriber_id, created_at, refused) \
        SELECT o.id, o.event_type, o.version, o.aggregate_id, o.subscriber_id, o.created_at, \
            o.refused_reason IS NOT NULL \
        FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS x \
        JOIN kurir_outbox o ON o.id = x.id",
};

/// A recheck fanned out refused row `$1`: it is no longer counted as refused.
pub(crate) const UNREFUSE: Sql = Sql {
    postgres: "UPDATE kurir_event_list SET refused = FALSE WHERE outbox_id = $1",
    sqlite: "UPDATE kurir_event_list SET refused = FALSE WHERE outbox_id = ?1",
    mysql: "UPDATE kurir_event_list SET refused = FALSE WHERE outbox_id = $1",
};

/// The outbox rows still waiting for the relay, as a table `w` of the columns the readers
/// filter on. On PostgreSQL the rows past the cursor are read in cursor order behind a fence
/// (`OFFSET 0`): the planner cannot know where a cursor it reads only when the statement runs
/// lies, takes a third of the table to be past it, and asked for the index's order walks the
/// index from the cursor. Without the fence it would push the readers' filters down into the
/// walk, estimate one row and scan the whole table. `dispatched_at` is tested above the fence
/// for the same reason: rows fanned out before migration 0011 carry it, and its statistics
/// would make the walk look costlier than a scan.
macro_rules! waiting {
    (postgres) => {
        concat!(
            "(SELECT * FROM (SELECT o.id, o.event_type, o.version, o.aggregate_id, \
                o.subscriber_id, o.created_at, o.refused_reason, o.dispatched_at \
                FROM kurir_outbox o WHERE ",
            super::cursor::past_cursor!(postgres),
            " ORDER BY o.txid, o.id OFFSET 0) p WHERE p.dispatched_at IS NULL) w"
        )
    };
    ($dialect:tt) => {
        concat!(
            "(SELECT o.id, o.event_type, o.version, o.aggregate_id, o.subscriber_id, \
                o.created_at, o.refused_reason FROM kurir_outbox o WHERE ",
            super::cursor::unrelayed!($dialect),
            ") w"
        )
    };
}

pub(crate) use waiting;

/// The relay's batch ids as [`LIST_BATCH`] binds them on SQLite and MySQL.
pub(crate) fn ids_json(ids: &[i64]) -> String {
    serde_json::Value::from(ids.to_vec()).to_string()
}
