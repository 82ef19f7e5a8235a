//! The dashboard's static files, embedded in the binary so the pages work offline: kurir's
//! stylesheet and a vendored htmx (see `assets/README.md`). Served with a long cache lifetime;
//! their names change when their content does.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::api::state::AppState;

/// Where the stylesheet is served.
pub const CSS_PATH: &str = "/ui/assets/app-3.css";
/// Where htmx is served.
pub const HTMX_PATH: &str = "/ui/assets/htmx-2.0.11.min.js";

const CSS: &str = include_str!("../../assets/app.css");
const HTMX: &str = include_str!("../../assets/htmx-2.0.11.min.js");
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The asset routes (no session needed: they hold nothing private).
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            CSS_PATH,
            get(|| async {
                (
                    [
                        (CONTENT_TYPE, "text/css; charset=utf-8"),
                        (CACHE_CONTROL, IMMUTABLE),
                    ],
                    CSS,
                )
                    .into_response()
            }),
        )
        .route(
            HTMX_PATH,
            get(|| async {
                (
                    [
                        (CONTENT_TYPE, "text/javascript; charset=utf-8"),
                        (CACHE_CONTROL, IMMUTABLE),
                    ],
                    HTMX,
                )
                    .into_response()
            }),
        )
}
