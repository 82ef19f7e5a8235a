//! kurir's integration tests: one binary, one module per area. Store and delivery tests run on
//! SQLite, PostgreSQL and MySQL/MariaDB (see `support::on_both_backends!`, the one macro for every fixture).

// A test reads best as one story from setup to assertions; the function length the workspace
// keeps to (clippy.toml) is for the product code.
#![allow(clippy::too_many_lines)]

mod support;

mod api;
mod binary;
mod born;
mod breaker;
mod browser;
mod cli;
mod cli_wording;
mod crash;
mod cursor;
mod debug_output;
mod delivery;
mod endpoint_writes;
mod faults;
mod gateway;
mod history;
mod idle;
mod ingest;
mod leases;
mod listener;
mod logs;
mod metrics;
mod operator;
mod operator_history;
mod ordering;
mod ordering_race;
mod orphan_race;
mod orphans;
mod out_of_order;
mod outbox;
mod payload_bytes;
mod phone;
mod php;
mod portal_browser;
mod portal_cli;
mod portal_deliveries;
mod portal_embed;
mod portal_isolation;
mod rate_limit;
mod recording;
mod retention;
mod scale;
mod secrets_at_rest;
mod sql_contract;
mod stopped_lanes;
mod store;
mod store_admin;
mod store_breaker;
mod store_dashboard;
mod subscriber_filters;
mod subscriber_surfaces;
mod subscribers;
mod timeouts;
mod ui;
mod unfinished_transactions;
mod verify_snippets;
