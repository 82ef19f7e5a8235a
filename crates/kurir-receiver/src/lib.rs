//! Receive webhooks without processing any event twice: verify the signature on the raw body, store
//! each event once in `kurir_inbox` (PostgreSQL, SQLite or MySQL/MariaDB), answer the sender at once, and process
//! the event with your handler, retrying with backoff until it succeeds. Senders may retry, duplicate
//! and reorder; the inbox key `(source, event_id)` makes that harmless.
//!
//! # Layout
//!
//! - [`source`]: a [`WebhookSource`]: name, scheme, secrets (several during a rotation), tolerance,
//!   body limit, [`Clock`].
//! - [`extract`]: the axum extractor that turns a request into a [`VerifiedEvent`] or a
//!   [`Rejection`] (`401`, `400`, `413`).
//! - [`store`]: the [`Inbox`]: insert-or-get, leased claims, fenced completions, status, retry; its
//!   migrations ([`migrate_postgres`], [`migrate_sqlite`], [`migrate_mysql`]).
//! - [`process`]: the [`Processor`]: one attempt of your handler, judged by the retry policy.
//! - [`runner`]: the [`Runner`]: a loop around [`Runner::step`], stopped by a [`CancellationToken`];
//!   [`source_set`]: the [`SourceSet`] a runner may be limited to.
//! - [`receiver`]: the [`Receiver`]'s routes, `POST /` and `GET /events/{event_id}` (whose body is
//!   an [`EventStatus`]).
//! - [`metrics`]: `kurir_inbox_events_total{source, outcome}`, counted as requests are judged.
//! - [`event`], [`error`], [`clock`]: the vocabulary, the error types, the injectable clock.
//!
//! # Example
//!
//! ```no_run
//! use axum::Router;
//! use kurir_receiver::{
//!     CancellationToken, Inbox, InboxEvent, Processor, Receiver, Runner, Scheme, WebhookSource,
//! };
//!
//! /// Your business logic. It may run again after a crash, so keep it idempotent per event id.
//! async fn on_event(event: InboxEvent) -> Result<(), std::io::Error> {
//!     println!("{} {:?}: {} bytes", event.event_id, event.event_type, event.payload.len());
//!     Ok(())
//! }
//!
//! async fn webhooks(inbox: Inbox, shutdown: CancellationToken) -> Result<Router, Box<dyn std::error::Error>> {
//!     inbox.migrate().await?;
//!     let source = WebhookSource::new("billing", Scheme::Kurir, ["whsec_c2VjcmV0LWZyb20ta3VyaXI="])?;
//!     let runner = Runner::new(inbox.clone(), Processor::new(on_event));
//!     let receiver = Receiver::new(source, inbox).wake(runner.waker());
//!     tokio::spawn(runner.run(shutdown));
//!     // POST /webhooks/billing, GET /webhooks/billing/events/{event_id}
//!     Ok(Router::new().nest("/webhooks/billing", receiver.router()))
//! }
//! ```
//!
//! An [`Inbox`] is made from the application's pool: `Inbox::from(pg_pool)`, or for SQLite a pool
//! opened in WAL mode with a busy timeout. See `examples/receive_kurir.rs` for a complete program.
//!
//! # Where the event id comes from
//!
//! Each scheme keeps it somewhere else ([`EventIdSource`] tells which): `standard-webhooks` in the
//! signed `webhook-id` (or `svix-id`) header; `kurir` and `slack` in the signed body's `event_id`;
//! `stripe` in the signed body's `id`; `github` in `X-GitHub-Delivery`, `shopify` in
//! `X-Shopify-Webhook-Id` and `hmac-body` in `X-Event-Id`, delivery headers that those schemes do not
//! sign. A request without one is refused with `400 missing_event_id`, since it could not be stored
//! once; where the id is signed, an id header that disagrees with it is refused with
//! `400 event_id_mismatch` (a captured request replayed under a new id).
//!
//! # Features
//!
//! `postgres`, `sqlite` and `mysql` (MySQL and MariaDB; all three on by default) each enable one
//! backend and its sqlx driver.

#[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "mysql")))]
compile_error!(
    "kurir-receiver needs at least one backend feature: `postgres`, `sqlite` or `mysql`"
);

pub mod clock;
pub mod error;
pub mod event;
pub mod extract;
pub mod metrics;
pub mod process;
pub mod receiver;
pub mod runner;
pub mod source;
pub mod source_set;
pub mod store;

pub use clock::Clock;
pub use error::{ApiError, ConfigError};
pub use event::{EventRecord, InboxEvent, InboxStatus, VerifiedEvent};
pub use extract::Rejection;
pub use kurir_core::{EventIdSource, RetryPolicy, Scheme};
pub use process::{Failure, ProcessOutcome, Processor};
pub use receiver::{Accepted, EventStatus, Receiver};
pub use runner::{Runner, StepCounts, StepOutcome, Waker};
pub use source::WebhookSource;
pub use source_set::SourceSet;
#[cfg(feature = "mysql")]
pub use store::migrate_mysql;
#[cfg(feature = "postgres")]
pub use store::migrate_postgres;
#[cfg(feature = "sqlite")]
pub use store::migrate_sqlite;
pub use store::{
    database_unavailable, ClaimedEvent, Completion, Fence, Inbox, ListQuery, Listed, Receipt,
    RetryNow, SourceCount, StoreError,
};
pub use tokio_util::sync::CancellationToken;
