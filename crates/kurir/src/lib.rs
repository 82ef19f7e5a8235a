//! kurir: webhook delivery that never loses an event.
//!
//! An application writes its event into `kurir_outbox` in the same transaction as its business
//! change ([`outbox::enqueue`], or one plain SQL `INSERT`); kurir fans it out to every subscribed
//! endpoint and delivers it signed, with timeouts, retries, dead-letter and replay.
//!
//! # Layout
//!
//! From the edge of the process down to the database.
//!
//! Running it:
//! - [`cli`]: the `kurir` command line (`main.rs` only calls it), including the admin API client.
//! - [`serve`]: `kurir serve`: starts the HTTP server and the workers, and stops them all at
//!   shutdown within a bounded time. It builds no routes and no workers of its own.
//!
//! The HTTP surface:
//! - [`app`]: the one router: health checks, `GET /metrics`, the inbox gateway's routes, the
//!   admin API and the dashboard.
//! - [`ui`]: the operator dashboard under `/ui/` (server-rendered pages, sign-in with the admin
//!   token) and the API reference at `/docs`; it calls the admin API's handlers.
//! - [`portal`]: the subscriber portal under `/portal/`: each subscriber's own endpoints and
//!   deliveries, entered by a single-use link, as an actor scoped to that subscriber; it calls
//!   the admin API's handlers too.
//! - [`api`]: the admin API under `/v1`, one resource per module, and what every handler shares:
//!   [`api::state::AppState`], the token check, the one error shape, the extractors.
//!
//! The workers, each a loop around one step:
//! - [`relay`]: fans outbox rows out into deliveries.
//! - [`dispatch`]: claims due deliveries with a lease, sends them from per-endpoint lanes, records
//!   the outcomes through one completion writer, and sweeps expired leases.
//! - [`gateway`]: the inbox gateway: `POST /inbox/{source}` verifies and stores a partner's
//!   webhook, a runner forwards it to the source's `forward_url`, signed, keeping every forward
//!   attempt in the event's history; status polling.
//! - [`wake`]: wake-ups in the process and across processes (`NOTIFY` after commit, `LISTEN`),
//!   and how rarely an idle process polls.
//! - [`prune`]: deletes finished history past its retention, in small batches.
//! - [`metrics`]: Prometheus counters and histograms, and `GET /metrics` with the backlog gauges.
//!
//! What the workers and the API share:
//! - [`webhook_client`]: the one outbound HTTP client (the dispatcher's deliveries, the gateway's
//!   forwards), its connections and the SSRF guard.
//! - [`probe`]: endpoint checks: the SSRF warning at create time and the `kurir.test` event.
//! - [`admin_token`]: the admin API's bearer token (configured, or generated into the data dir).
//! - [`access`]: what a token may do (roles of the named tokens, decided in one place for the
//!   API and the dashboard), the actor a request acts as, and where an action came from (for the
//!   audit).
//! - [`encryption`]: the keys that encrypt the secrets kurir stores, and the stored form.
//! - [`listener`]: the HTTP listener: connection cap, header and body deadlines, bounded drain.
//!
//! The data:
//! - [`ingest`]: group commit of the API's publishes: concurrent requests share a transaction.
//! - [`outbox`]: the transactional write, the only writer of `kurir_outbox`.
//! - [`store`]: one API over the dialects (PostgreSQL, SQLite and MySQL/MariaDB): every database
//!   operation.
//! - [`endpoint`], [`delivery`]: the vocabulary: endpoints and their filters, delivery states.
//! - [`catalog`]: the event catalog: each event type's versions, their JSON Schemas and
//!   examples; the checks the API and the relay apply, and the OpenAPI export.
//!
//! Time: [`clock`], the one clock every part reads (the store's), corrected to the database's;
//! [`pauses`], the process's own pauses, which a request's timeouts do not count.
//!
//! Settings and small pieces: [`config`] (settings from `kurir.toml`, the environment and flags,
//! validated), [`limits`] (the documented bounds of every number), [`redact`] (secrets that
//! show themselves as `***`), [`telemetry`] (logging).

pub mod access;
pub mod admin_token;
pub mod api;
pub mod app;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod dispatch;
pub mod encryption;
pub mod endpoint;
pub mod gateway;
pub mod inbox_source;
pub mod ingest;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod outbox;
pub mod pauses;
pub mod portal;
pub mod probe;
pub mod prune;
pub mod redact;
pub mod relay;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod ui;
pub mod wake;
pub mod webhook_client;
