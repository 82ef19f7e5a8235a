//! The runner: [`run!`] runs a [`Sql`](crate::Sql) on an executor of a dialect the caller names;
//! [`run_in!`] is it on a transaction or connection; [`query_as_on!`] and [`execute_on!`] pick the
//! dialect from a store's [`Pool`] and run it there. They choose the dialect's text and bind; none
//! builds SQL.

/// An uninhabited stand-in for the pool of a dialect this build leaves out (its feature is off),
/// so [`Pool`] has the same variants in every build.
#[derive(Debug, Clone, Copy)]
pub enum Never {}

#[cfg(feature = "postgres")]
type PgPool = sqlx::PgPool;
#[cfg(not(feature = "postgres"))]
type PgPool = Never;
#[cfg(feature = "sqlite")]
type SqlitePool = sqlx::SqlitePool;
#[cfg(not(feature = "sqlite"))]
type SqlitePool = Never;
#[cfg(feature = "mysql")]
type MySqlPool = sqlx::MySqlPool;
#[cfg(not(feature = "mysql"))]
type MySqlPool = Never;

/// The pool a statement runs on, by dialect.
#[derive(Debug, Clone, Copy)]
pub enum Pool<'a> {
    /// PostgreSQL.
    Postgres(&'a PgPool),
    /// SQLite.
    Sqlite(&'a SqlitePool),
    /// MySQL or MariaDB.
    Mysql(&'a MySqlPool),
}

/// A store that runs statements on one pool: what [`query_as_on!`] and [`execute_on!`] take.
pub trait OnPool {
    /// The store's pool.
    fn sql_pool(&self) -> Pool<'_>;
}

impl<T: OnPool + ?Sized> OnPool for &T {
    fn sql_pool(&self) -> Pool<'_> {
        (**self).sql_pool()
    }
}

impl OnPool for Pool<'_> {
    fn sql_pool(&self) -> Pool<'_> {
        *self
    }
}

/// Runs `$sql` (a [`Sql`](crate::Sql)) on `$store` (an [`OnPool`]) with `$fetch` (`fetch_one`,
/// `fetch_optional`, `fetch_all`), binding each `$bind` in number order, decoding rows with
/// `sqlx::query_as`. A `sqlx::Result`.
#[macro_export]
macro_rules! query_as_on {
    ($store:expr, $sql:expr, $fetch:ident $(, $bind:expr)* $(,)?) => {
        match $crate::OnPool::sql_pool(&$store) {
            $crate::Pool::Postgres(pool) => $crate::__postgres!(pool => {
                $crate::run!(pool, postgres, $sql, query_as, $fetch $(, $bind)*)
            }),
            $crate::Pool::Sqlite(pool) => $crate::__sqlite!(pool => {
                $crate::run!(pool, sqlite, $sql, query_as, $fetch $(, $bind)*)
            }),
            $crate::Pool::Mysql(pool) => $crate::__mysql!(pool => {
                $crate::run!(pool, mysql, $sql, query_as, $fetch $(, $bind)*)
            }),
        }
    };
}

/// Runs `$sql` (a [`Sql`](crate::Sql)) on `$store` (an [`OnPool`]) as a write, binding each
/// `$bind` in number order: a `sqlx::Result` of the number of rows it touched.
#[macro_export]
macro_rules! execute_on {
    ($store:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        match $crate::OnPool::sql_pool(&$store) {
            $crate::Pool::Postgres(pool) => $crate::__postgres!(pool => {
                $crate::run!(pool, postgres, $sql, query, execute $(, $bind)*)
                    .map(|done| done.rows_affected())
            }),
            $crate::Pool::Sqlite(pool) => $crate::__sqlite!(pool => {
                $crate::run!(pool, sqlite, $sql, query, execute $(, $bind)*)
                    .map(|done| done.rows_affected())
            }),
            $crate::Pool::Mysql(pool) => $crate::__mysql!(pool => {
                $crate::run!(pool, mysql, $sql, query, execute $(, $bind)*)
                    .map(|done| done.rows_affected())
            }),
        }
    };
}

/// [`run!`] on a transaction or connection `$tx`, reborrowed as `&mut *tx` (so one can be used for
/// several statements).
#[macro_export]
macro_rules! run_in {
    ($tx:expr, $dialect:ident, $sql:expr, $make:ident, $run:ident $(, $bind:expr)* $(,)?) => {
        $crate::run!(&mut *$tx, $dialect, $sql, $make, $run $(, $bind)*)
    };
}

/// The runner: `$sql`'s text for `$dialect` (`postgres`, `sqlite` or `mysql`) run on `$exec`, any
/// sqlx executor taken as it is (a pool by reference, `&mut *tx`), with `$make` (`query`,
/// `query_scalar` or `query_as`) and `$run` (`execute`, `fetch_one`, …), binding each `$bind` in
/// number order. MySQL's `$n` placeholders are made positional
/// ([`mysql::positional`](crate::mysql::positional)), so each bind is used wherever its number
/// stands, as on the other dialects. A `sqlx::Result`.
#[macro_export]
macro_rules! run {
    ($exec:expr, mysql, $sql:expr, $make:ident, $run:ident $(, $bind:expr)* $(,)?) => {
        async {
            let (text, order) = $crate::mysql::positional($sql.mysql);
            let args = $crate::mysql::arguments(&order, &[
                $(&|a: &mut $crate::__sqlx::mysql::MySqlArguments| {
                    $crate::__sqlx::Arguments::add(a, &$bind)
                }),*
            ])?;
            ($crate::__with_arguments!($make))(&text, args).$run($exec).await
        }
        .await
    };
    ($exec:expr, $dialect:ident, $sql:expr, $make:ident, $run:ident $(, $bind:expr)* $(,)?) => {
        $crate::__sqlx::$make($sql.$dialect)$(.bind($bind))*.$run($exec).await
    };
}

/// The `_with` form of a query constructor: the one taking its arguments built.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_arguments {
    (query) => {
        $crate::__sqlx::query_with
    };
    (query_scalar) => {
        $crate::__sqlx::query_scalar_with
    };
    (query_as) => {
        $crate::__sqlx::query_as_with
    };
}

// A dialect's arm in the macros above: its body when this build has the dialect, else nothing to
// run (the pool is `Never`). Defined here, so the choice follows this crate's features and not
// those of the crate the macros expand in.

#[cfg(feature = "postgres")]
#[doc(hidden)]
#[macro_export]
macro_rules! __postgres {
    ($pool:ident => $body:expr) => {
        $body
    };
}
#[cfg(not(feature = "postgres"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __postgres {
    ($pool:ident => $body:expr) => {
        match *$pool {}
    };
}
#[cfg(feature = "sqlite")]
#[doc(hidden)]
#[macro_export]
macro_rules! __sqlite {
    ($pool:ident => $body:expr) => {
        $body
    };
}
#[cfg(not(feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __sqlite {
    ($pool:ident => $body:expr) => {
        match *$pool {}
    };
}
#[cfg(feature = "mysql")]
#[doc(hidden)]
#[macro_export]
macro_rules! __mysql {
    ($pool:ident => $body:expr) => {
        $body
    };
}
#[cfg(not(feature = "mysql"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __mysql {
    ($pool:ident => $body:expr) => {
        match *$pool {}
    };
}
