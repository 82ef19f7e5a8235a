//! How a statement is written once per dialect and run on whichever the store is: kurir-sql's
//! dialect layer (see its crate docs for when to use what), shared with kurir-receiver and
//! re-exported here under the paths the store's modules use.
//!
//! A statement that differs only in its SQL text is a [`Sql`] constant (one field per dialect)
//! run with [`query_as_on!`] (or [`execute_on!`] for a write) on the [`Store`], or with
//! [`run_in!`] in a transaction; the rows are the shared ones of [`super::rows`], and the binds
//! the same on every dialect ([`kurir_sql::Ts`] for timestamps), each given once in the order of
//! its `$n` (MySQL's text is written with `$n` too, see [`positional`]).

pub(crate) use kurir_sql::mysql::positional;
pub(crate) use kurir_sql::{execute_on, query_as_on, run_in, Sql};

use super::Store;

impl kurir_sql::OnPool for Store {
    fn sql_pool(&self) -> kurir_sql::Pool<'_> {
        match self {
            Store::Postgres(s) => kurir_sql::Pool::Postgres(s.pool()),
            Store::Sqlite(s) => kurir_sql::Pool::Sqlite(s.pool()),
            Store::Mysql(s) => kurir_sql::Pool::Mysql(s.pool()),
        }
    }
}
