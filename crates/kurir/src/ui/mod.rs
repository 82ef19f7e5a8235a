//! The operator dashboard under `/ui/` and the API reference at `/docs`.

use axum::Router;

use crate::serve::AppState;

/// The dashboard's routes.
pub fn router(state: AppState) -> Router {
    Router::new().with_state(state)
}
