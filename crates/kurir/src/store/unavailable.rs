//! Telling a database that cannot work right now from one that refuses the data: the first is
//! worth trying again with the same data (the completion writer does, see `dispatch::record`)
//! and is answered `503` with `Retry-After` by the API; the second is not.

use super::StoreError;

impl StoreError {
    /// Whether the database could not do the work for a reason of its own, not the data's: it
    /// is unreachable, restarting, out of connections or space, busy, or the transaction lost a
    /// conflict (see [`kurir_receiver::database_unavailable`], the one list of such errors).
    /// Trying the same write again later may succeed. Any other error (a value or row the
    /// database refuses, a decoding failure) would fail again with the same data.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::LowOnSpace { .. } => true,
            Self::Database(e) => kurir_receiver::database_unavailable(e),
            Self::Inbox(e) => e.is_unavailable(),
            _ => false,
        }
    }

    /// Whether the database refused a row by the SQL contract's rule `constraint` (named in
    /// its error, as every dialect's CHECK or trigger names it).
    pub fn breaks_contract_rule(&self, constraint: &str) -> bool {
        match self {
            Self::Database(sqlx::Error::Database(e)) => {
                e.constraint() == Some(constraint) || e.message().contains(constraint)
            }
            _ => false,
        }
    }
}
