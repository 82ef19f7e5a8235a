//! How a statement is written once per dialect and run on whichever the store is.
//!
//! A statement that differs only in its SQL text is a [`Sql`] constant (one field per dialect)
//! run with [`query_as_on!`] (or [`execute_on!`] for a write); the rows are the shared ones of
//! [`super::rows`], and the binds the same on every dialect ([`super::rows::Ts`] for
//! timestamps). A third dialect adds a field to [`Sql`] (the compiler then asks for its text in
//! every statement), an arm to [`query_as_on!`], [`execute_on!`] and `on_backend!`, and its
//! store type.

/// One statement's text in each dialect.
pub(crate) struct Sql {
    pub postgres: &'static str,
    pub sqlite: &'static str,
}

/// Runs `$sql` (a [`Sql`]) on `$store`'s pool with `$fetch` (`fetch_one`, `fetch_optional`,
/// `fetch_all`), binding each `$bind` in order, decoding rows with `sqlx::query_as`.
macro_rules! query_as_on {
    ($store:expr, $sql:expr, $fetch:ident $(, $bind:expr)* $(,)?) => {
        match $store {
            $crate::store::Store::Postgres(s) => {
                sqlx::query_as($sql.postgres)$(.bind($bind))*.$fetch(s.pool()).await
            }
            $crate::store::Store::Sqlite(s) => {
                sqlx::query_as($sql.sqlite)$(.bind($bind))*.$fetch(s.pool()).await
            }
        }
    };
}
pub(crate) use query_as_on;

/// Runs `$sql` (a [`Sql`]) on `$store`'s pool as a write, binding each `$bind` in order; the
/// number of rows it touched.
macro_rules! execute_on {
    ($store:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        match $store {
            $crate::store::Store::Postgres(s) => {
                sqlx::query($sql.postgres)$(.bind($bind))*.execute(s.pool()).await
                    .map(|done| done.rows_affected())
            }
            $crate::store::Store::Sqlite(s) => {
                sqlx::query($sql.sqlite)$(.bind($bind))*.execute(s.pool()).await
                    .map(|done| done.rows_affected())
            }
        }
    };
}
pub(crate) use execute_on;
