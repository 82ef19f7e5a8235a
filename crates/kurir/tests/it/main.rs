//! kurir's integration tests: one binary, one module per area. Store and delivery tests run on
//! SQLite and on PostgreSQL (see `support::on_both_backends!`).

mod support;

mod api;
mod binary;
mod cli;
mod crash;
mod delivery;
mod faults;
mod gateway;
mod idle;
mod logs;
mod metrics;
mod outbox;
mod store;
