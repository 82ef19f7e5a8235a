//! An axum service that receives kurir's webhooks with `kurir-receiver`.
//!
//! ```text
//! WEBHOOK_SECRET=whsec_… cargo run -p kurir-receiver --example receive_kurir
//! ```
//!
//! Then point a kurir endpoint at `http://127.0.0.1:3000/webhooks/kurir` with the same secret.
//! Each event is verified, stored once in `kurir_inbox`, answered `202`, and handed to
//! [`on_event`] by the runner, which retries failures with backoff. Poll an event's status at
//! `GET /webhooks/kurir/events/{event_id}`.
//!
//! Settings: `WEBHOOK_SECRET` (required; the endpoint secret kurir shows when you create the
//! endpoint, several separated by commas during a rotation), `DATABASE_URL` (default
//! `sqlite://kurir-receiver-example.sqlite`; `postgres://…` works too when the `postgres` feature is
//! on), `LISTEN` (default `127.0.0.1:3000`).

use std::error::Error;
use std::str::FromStr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use kurir_receiver::{
    CancellationToken, Inbox, InboxEvent, Processor, Receiver, Runner, Scheme, WebhookSource,
};
use serde::Deserialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool};

/// The part of kurir's envelope this service reads; `data` is the sender's payload.
#[derive(Deserialize)]
struct Envelope {
    event_type: String,
    data: serde_json::Value,
}

/// The business logic. It runs at least once per event and, barring a crash mid-way, exactly once;
/// a side effect that must never repeat should itself be keyed by `event.event_id`.
async fn on_event(event: InboxEvent) -> Result<(), serde_json::Error> {
    let envelope: Envelope = serde_json::from_slice(&event.payload)?;
    match envelope.event_type.as_str() {
        "order.paid" => {
            tracing::info!(event_id = %event.event_id, order = %envelope.data["order_id"], "order paid")
        }
        other => tracing::info!(event_id = %event.event_id, event_type = other, "ignored"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let secrets = std::env::var("WEBHOOK_SECRET").map_err(|_| "set WEBHOOK_SECRET")?;
    let database_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "sqlite://kurir-receiver-example.sqlite".to_owned());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());

    let inbox = open_inbox(&database_url).await?;
    inbox.migrate().await?;

    // kurir signs every delivery twice: its own `kurir` scheme and Standard Webhooks. Either works;
    // `Scheme::StandardWebhooks` also covers the event id with the signature.
    let source = WebhookSource::new("kurir", Scheme::Kurir, secrets.split(','))?;
    let runner = Runner::new(inbox.clone(), Processor::new(on_event));
    let receiver = Receiver::new(source, inbox.clone()).wake(runner.waker());

    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .nest("/webhooks/kurir", receiver.router());

    let shutdown = CancellationToken::new();
    let runner = tokio::spawn(runner.run(shutdown.clone()));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    tracing::info!(%listen, "receiving kurir webhooks at /webhooks/kurir");
    let stop = shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        })
        .await?;
    shutdown.cancel();
    runner.await?;
    inbox.close().await;
    Ok(())
}

/// An inbox on the application's own database.
async fn open_inbox(url: &str) -> Result<Inbox, Box<dyn Error>> {
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        return Ok(Inbox::from(sqlx::PgPool::connect(url).await?));
    }
    // WAL and a busy timeout: the receiver and the runner write from several tasks.
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    Ok(Inbox::from(SqlitePool::connect_with(options).await?))
}
