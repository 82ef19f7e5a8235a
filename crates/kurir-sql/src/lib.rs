//! kurir's dialect layer, shared by `kurir` and `kurir-receiver`: how a statement is written once
//! per dialect and run on whichever database a store holds (PostgreSQL, SQLite, MySQL/MariaDB).
//!
//! What to use when:
//!
//! - A statement whose dialects differ only in their text is a [`Sql`] constant, the three texts
//!   side by side, each a plain string literal (so it can be read whole and found with grep).
//! - It runs on a store's pool with [`query_as_on!`] (rows decoded with `sqlx::FromRow`) or
//!   [`execute_on!`] (a write: the number of rows it touched); the store names its pool through
//!   [`OnPool`]. Inside a transaction, where the code already knows its dialect, it runs with
//!   [`run_in!`] (or [`run!`] on any executor). None of them builds SQL: they pick the dialect's text, bind, and run.
//! - Binds are the same values on every dialect, given once each in the order of their numbers
//!   (`$1`, `$2`, …). Timestamps are bound and read as [`Ts`], which each dialect keeps its own way.
//! - The placeholder rule ([`mysql`]): PostgreSQL's text uses `$n`, SQLite's `?n`, and MySQL's is
//!   written with `$n` like PostgreSQL's; the runner rewrites it to MySQL's positional `?`, binding
//!   each value wherever its number stands (a value used twice is given once).
//! - What differs in shape, not only in text (a claim that locks then leases on MySQL but is one
//!   `UPDATE … RETURNING` elsewhere), is written per dialect in the store's own modules, calling
//!   sqlx directly with the dialect's native placeholders.
//!
//! A further dialect adds a field to [`Sql`] (the compiler then asks for its text in every
//! statement), a variant to [`Pool`], an arm to the runner's macros, and [`Ts`]'s sqlx traits.

pub mod mysql;
mod run;
mod ts;

pub use run::{Never, OnPool, Pool};
pub use ts::{parse_sqlite_ts, sqlite_ts, Ts};

/// The sqlx the runner's macros expand to, so a caller's own `sqlx` import does not matter.
#[doc(hidden)]
pub use sqlx as __sqlx;

/// One statement's text in each dialect, each a complete string literal.
#[derive(Clone, Copy, Debug)]
pub struct Sql {
    /// PostgreSQL's text, with `$n` placeholders.
    pub postgres: &'static str,
    /// SQLite's text, with `?n` placeholders.
    pub sqlite: &'static str,
    /// MySQL's and MariaDB's text, written with PostgreSQL's `$n` placeholders, which the runner
    /// turns into MySQL's `?` ([`mysql::positional`]). Text columns are selected through
    /// `CAST(… AS CHAR)`: kurir's are `utf8mb4_bin`, which the server reports as binary and sqlx
    /// will not decode into a `String`.
    pub mysql: &'static str,
}
