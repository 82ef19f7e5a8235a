//! The admin API, through a real server on port 0, on SQLite and PostgreSQL.

pub mod support;

mod auth;
mod bad_input;
mod batch;
mod database_away;
mod endpoints;
mod events;
mod openapi;
mod property;
mod replays;
mod rotation;
mod sources;
mod stats;
mod wake;
