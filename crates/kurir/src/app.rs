//! The HTTP application: one [`router`] that mounts the health checks, `GET /metrics`, the inbox
//! gateway's routes, the admin API, the dashboard and the subscriber portal on one [`AppState`]. It builds the routes
//! and runs nothing; [`crate::serve`] serves it beside the workers.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::api::error::ApiError;
use crate::api::state::AppState;

/// The HTTP routes: health checks, metrics, the inbox gateway, the admin API, the dashboard and
/// the subscriber portal.
pub fn router(state: AppState) -> Router {
    let require_token = state.metrics_require_token;
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(crate::gateway::routes::router())
        .with_state(state.clone())
        .merge(crate::metrics::scrape::router(state.clone(), require_token))
        .merge(crate::api::router(state.clone()))
        .merge(crate::portal::router(state.clone()))
        .merge(crate::ui::router(state))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
}

/// How long `/readyz` waits for the database: it answers within a second whatever the database
/// does (connecting to one that is away would otherwise take the pool's whole acquire timeout).
const READINESS_TIMEOUT: Duration = Duration::from_millis(900);

/// Ready when the database answers and takes a write ([`crate::store::Store::probe_write`]):
/// a kurir whose SQLite disk is full answers reads but stores no event, so it says so, and
/// says ready again by itself once space is back.
async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    let store = &state.store;
    let check = async {
        store
            .ping()
            .await
            .map_err(|e| (e, "database unreachable"))?;
        let writes = store.probe_write().await;
        writes.map_err(|e| (e, "database cannot write (is its disk full?)"))
    };
    match tokio::time::timeout(READINESS_TIMEOUT, check).await {
        Ok(Ok(())) => (StatusCode::OK, "ready"),
        Ok(Err((e, reason))) => {
            tracing::warn!(error = %e, reason, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, reason)
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = READINESS_TIMEOUT.as_millis() as u64,
                "readiness check failed: the database did not answer in time"
            );
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable")
        }
    }
}
