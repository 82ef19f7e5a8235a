//! kurir-receiver's integration tests: one binary, every test body run on SQLite and on PostgreSQL
//! (see `macros.rs`), against a real server on 127.0.0.1:0 and a real runner.
//!
//! PostgreSQL: set `KURIR_TEST_POSTGRES_URL` (e.g. `postgres://root@127.0.0.1:5432/postgres`); each
//! test creates and drops its own database. Without it the PostgreSQL half of each test prints a
//! notice and passes, unless `CI` is set, where it fails.

// A test reads best as one story from setup to assertions; the function length the workspace
// keeps to (clippy.toml) is for the product code.
#![allow(clippy::too_many_lines)]

#[macro_use]
mod macros;

mod client;
mod db;
mod signing;
mod support;

mod inbox_metrics;
mod process;
mod receive;
mod schemes;
mod store;
