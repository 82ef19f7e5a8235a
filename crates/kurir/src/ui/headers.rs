//! Headers every dashboard answer carries: a content security policy that lets the pages load
//! only their own stylesheet and script and forbids framing them (a page of buttons that change
//! things must not be clickable through someone else's frame), no MIME sniffing, and no referrer
//! leaving the dashboard. And the one request header the pages read: whether htmx asked.

use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;

/// Inline styles are allowed for the few `style` attributes and htmx's indicator style; scripts
/// come only from `/ui/assets/`.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Adds the headers to `response`.
pub async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// Whether the request came from htmx (which then gets a fragment, not the whole page).
pub(crate) fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request") && !headers.contains_key("hx-history-restore-request")
}
