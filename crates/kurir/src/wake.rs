//! Wake-up hints across processes: on PostgreSQL, kurir's own publishes (`POST /v1/events`)
//! send `NOTIFY kurir_outbox` in their transaction, and every `kurir serve` listens, so its
//! relay fans the event out at once instead of at its next poll.
//!
//! Only a hint: the relay polls regardless, so a lost notification (or an application's plain
//! `INSERT`, which sends none) costs at most one poll interval. On SQLite the one process
//! wakes its relay directly.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The channel publishes notify.
pub const OUTBOX_CHANNEL: &str = "kurir_outbox";

/// Listens on [`OUTBOX_CHANNEL`] until `shutdown`, waking `relay` on each notification.
/// Reconnects after a lost connection, waiting a little longer each time (at most 30 s).
pub async fn listen_for_outbox(pool: PgPool, relay: Arc<Notify>, shutdown: CancellationToken) {
    let mut backoff = Duration::from_millis(250);
    while !shutdown.is_cancelled() {
        match listen(&pool, &relay, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "outbox LISTEN failed; the relay falls back to polling until it reconnects")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

async fn listen(
    pool: &PgPool,
    relay: &Notify,
    shutdown: &CancellationToken,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(OUTBOX_CHANNEL).await?;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            received = listener.recv() => {
                received?;
                relay.notify_one();
            }
        }
    }
}
