//! The portal's own stylesheet, a few rules on top of the dashboard's ([`crate::ui::assets`]),
//! embedded in the binary. Served with a long cache lifetime; its name changes when its content
//! does. The sender's accent colour is not in it: it is set on each page from the settings.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::api::state::AppState;

/// Where the portal's stylesheet is served.
pub const CSS_PATH: &str = "/portal/assets/portal-2.css";

const CSS: &str = include_str!("../../assets/portal.css");

/// The asset route (no session needed: it holds nothing private).
pub fn router() -> Router<AppState> {
    Router::new().route(
        CSS_PATH,
        get(|| async {
            (
                [
                    (CONTENT_TYPE, "text/css; charset=utf-8"),
                    (CACHE_CONTROL, "public, max-age=31536000, immutable"),
                ],
                CSS,
            )
                .into_response()
        }),
    )
}
