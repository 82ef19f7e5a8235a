//! The receiving side under test (the child of the `inbox` scenario): kurir-receiver's
//! [`Receiver`] for one source, `bench` (kurir scheme), at `POST /inbox/bench`, the path the
//! `kurir serve` gateway uses, with a [`Runner`] whose handler does nothing.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use axum::routing::get;
use axum::Router;
use kurir_receiver::{
    CancellationToken, Inbox, InboxEvent, Processor, Receiver, Runner, Scheme, WebhookSource,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

/// `args`: database URL, listen address, secret.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let [url, listen, secret] = args else {
        anyhow::bail!("usage: kurir-bench __inbox <database-url> <listen> <secret>");
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(url, listen, secret))
}

async fn handle(_event: InboxEvent) -> Result<(), std::io::Error> {
    Ok(())
}

async fn serve(url: &str, listen: &str, secret: &str) -> anyhow::Result<()> {
    kurir::telemetry::init();
    let inbox = if url.starts_with("postgres") {
        Inbox::from(
            PgPoolOptions::new()
                .max_connections(16)
                .connect_with(PgConnectOptions::from_str(url)?)
                .await?,
        )
    } else {
        Inbox::from(
            SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(
                    SqliteConnectOptions::from_str(url)?
                        .create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal)
                        .synchronous(SqliteSynchronous::Full)
                        .busy_timeout(Duration::from_secs(10)),
                )
                .await?,
        )
    };
    inbox.migrate().await.context("inbox migrations")?;
    let source = WebhookSource::new("bench", Scheme::Kurir, [secret])?;
    let runner = Runner::new(inbox.clone(), Processor::new(handle));
    let receiver = Receiver::new(source, inbox.clone()).wake(runner.waker());
    let shutdown = CancellationToken::new();
    kurir::serve::cancel_on_signals(shutdown.clone());
    let runner_task = tokio::spawn(runner.run(shutdown.clone()));
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .nest("/inbox/bench", receiver.router());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let stop = shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await?;
    shutdown.cancel();
    let _ = runner_task.await;
    inbox.close().await;
    Ok(())
}
