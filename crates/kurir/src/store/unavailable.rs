//! Telling a database that cannot work right now from one that refuses the data: the first is
//! worth trying again with the same data (the completion writer does, see
//! `dispatch::record`), the second is not.

use super::StoreError;

impl StoreError {
    /// Whether the database could not do the work for a reason of its own, not the data's: it
    /// is unreachable, restarting, out of connections or space, busy, or the transaction lost a
    /// conflict. Trying the same write again later may succeed. Any other error (a value or
    /// row the database refuses, a decoding failure) would fail again with the same data.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Connect { .. } => true,
            Self::Database(e) => sqlx_unavailable(e),
            _ => false,
        }
    }
}

fn sqlx_unavailable(e: &sqlx::Error) -> bool {
    use sqlx::Error as E;
    match e {
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::PoolTimedOut | E::PoolClosed => true,
        E::WorkerCrashed => true,
        E::Database(db) => {
            let code = db.code().unwrap_or_default();
            if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                // Connection exception, insufficient resources, operator intervention, system
                // error, transaction rollback (serialisation, deadlock), object not in
                // prerequisite state (lock not available, connections not allowed), invalid
                // authorisation, unknown database.
                const CLASSES: [&str; 9] = ["08", "53", "57", "58", "40", "55", "28", "3D", "XX"];
                return CLASSES.iter().any(|c| pg.code().starts_with(c));
            }
            // SQLite: BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL (primary
            // result codes, the low byte of an extended one).
            code.parse::<i32>()
                .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14 | 15))
        }
        _ => false,
    }
}
