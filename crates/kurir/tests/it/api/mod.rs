//! The admin API, through a real server on port 0, on SQLite and PostgreSQL.

pub mod support;

mod auth;
mod bad_input;
mod batch;
mod catalog;
mod circuit;
mod contract;
mod database_away;
mod deep_nesting;
mod disk_full;
mod document_agrees;
mod endpoints;
mod events;
mod openapi;
mod portal;
mod portal_types;
mod property;
pub(crate) mod replays;
mod rotation;
mod sources;
mod stats;
mod subscriber_tokens;
mod subscribers;
pub(crate) mod tokens;
mod wake;
