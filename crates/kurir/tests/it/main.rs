//! kurir's integration tests: one binary, one module per area. Store and delivery tests run on
//! SQLite, PostgreSQL and MySQL/MariaDB (see `support::on_both_backends!`, the one macro for every fixture).

mod support;

mod api;
mod binary;
mod browser;
mod cli;
mod crash;
mod debug_output;
mod delivery;
mod endpoint_writes;
mod faults;
mod gateway;
mod idle;
mod leases;
mod listener;
mod logs;
mod metrics;
mod operator;
mod orphans;
mod out_of_order;
mod outbox;
mod php;
mod recording;
mod sql_contract;
mod store;
mod store_admin;
mod store_dashboard;
mod timeouts;
mod ui;
