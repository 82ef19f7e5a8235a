//! Headers every portal answer carries. A content security policy like the dashboard's
//! ([`crate::ui::headers`]), except that `frame-ancestors` lists the origins of
//! `KURIR_PORTAL_FRAME_ANCESTORS` (the sender's own settings page may frame the portal), or
//! `'none'` without them, and that images may come from the configured logo's origin.
//! `X-Frame-Options: DENY` only when framing is refused: it cannot list origins, and a browser
//! that knows CSP lets `frame-ancestors` decide. `Cache-Control: no-store` on everything but the stylesheet: pages
//! show secrets and a subscriber's data, and must not outlive the session in a cache. No
//! referrer leaves the portal, so a link's token never reaches another site.

use axum::extract::State;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::response::Response;

use crate::api::state::AppState;
use crate::config::PortalConfig;

/// The policy for `portal`'s settings.
pub fn policy(portal: &PortalConfig) -> String {
    let ancestors = match portal.frame_ancestors.is_empty() {
        true => "'none'".to_owned(),
        false => portal.frame_ancestors.join(" "),
    };
    let logo = portal
        .logo_url
        .as_deref()
        .and_then(|u| url::Url::parse(u).ok())
        .map(|u| format!(" {}", u.origin().ascii_serialization()))
        .unwrap_or_default();
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:{logo}; frame-ancestors {ancestors}; base-uri 'none'; \
         form-action 'self'"
    )
}

/// Adds the headers to `response`.
pub async fn secure(State(state): State<AppState>, mut response: Response) -> Response {
    let portal = &state.portal;
    let headers = response.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&policy(portal)) {
        headers.insert(CONTENT_SECURITY_POLICY, csp);
    }
    if portal.frame_ancestors.is_empty() {
        headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    // The stylesheet sets its own (it holds nothing private); everything else is no-store.
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_is_refused_unless_origins_are_listed() {
        let mut portal = PortalConfig::default();
        assert!(policy(&portal).contains("frame-ancestors 'none';"));
        portal.frame_ancestors = vec![
            "https://app.example.com".into(),
            "http://localhost:3000".into(),
        ];
        portal.logo_url = Some("https://cdn.example.com/logo.svg".into());
        let csp = policy(&portal);
        assert!(
            csp.contains("frame-ancestors https://app.example.com http://localhost:3000;"),
            "{csp}"
        );
        assert!(
            csp.contains("img-src 'self' data: https://cdn.example.com;"),
            "{csp}"
        );
    }
}
