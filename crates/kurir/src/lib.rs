//! kurir: webhook delivery that never loses an event.
//!
//! An application writes its event into `kurir_outbox` in the same transaction as its business
//! change ([`outbox::enqueue`], or one plain SQL `INSERT`); kurir fans it out to every subscribed
//! endpoint and delivers it signed, with timeouts, retries, dead-letter and replay.
//!
//! # Layout
//!
//! - [`outbox`]: the transactional write, the only writer of `kurir_outbox`.
//! - [`endpoint`], [`delivery`]: the vocabulary: endpoints and their filters, delivery states.
//! - [`store`]: every database operation, once for PostgreSQL and once for SQLite.
//! - [`relay`]: fans outbox rows out into deliveries.
//! - [`dispatch`]: claims due deliveries with a lease, sends them, records the outcome.
//! - [`metrics`]: Prometheus counters and histograms, and `GET /metrics` with the backlog gauges.
//! - [`api`]: the admin API under `/v1` (endpoints, events, deliveries, replays, stats, inbox
//!   sources, OpenAPI).
//! - [`gateway`]: the inbox gateway: `POST /inbox/{source}` verifies and stores a partner's
//!   webhook, a runner forwards it to the source's `forward_url`, signed; status polling.
//! - [`ui`]: the operator dashboard under `/ui/` (server-rendered pages, sign-in with the admin
//!   token) and the API reference at `/docs`.
//! - [`probe`]: endpoint checks: the SSRF warning at create time and the `kurir.test` event.
//! - [`admin_token`]: the admin API's bearer token (configured, or generated into the data dir).
//! - [`wake`]: wake-ups in the process and across processes (`NOTIFY` after commit, `LISTEN`),
//!   and how rarely an idle process polls.
//! - [`config`]: settings from `kurir.toml`, the environment and flags, validated.
//! - [`limits`]: the documented bounds of every number, shared by the configuration and the API.
//! - [`redact`]: secrets that show themselves as `***` in `Debug` output.
//! - [`listener`]: the HTTP listener: connection cap, header and body deadlines, bounded drain.
//! - [`serve`]: runs the HTTP server, relay, dispatcher, lease sweep and inbox gateway together
//!   until shutdown.
//! - [`cli`]: the `kurir` command line (`main.rs` only calls it), including the admin API client.

pub mod admin_token;
pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod dispatch;
pub mod endpoint;
pub mod gateway;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod outbox;
pub mod probe;
pub mod redact;
pub mod relay;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod ui;
pub mod wake;
pub mod webhook_client;
