//! Portal sessions and CSRF tokens.
//!
//! Opening a portal link sets the cookie `kurir_portal` = `p1.<session id>.<mac>`, the MAC being
//! HMAC-SHA256 over the rest with a key derived from the admin token, as the dashboard's are
//! ([`crate::ui::session`]) but under a key of its own: a dashboard cookie is no portal session
//! and a portal cookie no dashboard session, whichever name it is sent under. Unlike the
//! dashboard's, every portal session is a row ([`crate::store::portal`]) read on every request,
//! so revoking a subscriber's sessions, or disabling or deleting it, signs it out at its next
//! request on every process.
//!
//! The portal may be shown in a cross-site iframe, where a `SameSite=Strict` or `Lax` cookie is
//! never sent: the cookie is `SameSite=None; Secure; Partitioned` (partitioned by the embedding
//! site, so it works where third-party cookies are blocked, and is no use to another site), on
//! HTTPS and on loopback hosts, which browsers treat as secure. Over plain HTTP to another host a
//! `Secure` cookie would be dropped, so there it is `SameSite=Lax` and the portal works only at
//! the top level. Since the cookie crosses sites, every form that changes something carries a
//! CSRF token (HMAC of the session id under another derived key), checked in constant time
//! before its handler runs ([`Visitor::check`]), which also asks [`crate::access`] whether the
//! session may do what the form asks, by the API route whose handler the form calls.

use axum::extract::FromRequestParts;
use axum::http::header::{HOST, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::error::PortalError;
use crate::access::{Action, Actor, Role, Scope, Via};
use crate::api::state::AppState;
use crate::store::portal::PortalSession;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "kurir_portal";

const SESSION_KEY: &str = "kurir portal session v1";
const CSRF_KEY: &str = "kurir portal csrf v1";
const VERSION: &str = "p1";

fn mac(key: &[u8; 32], text: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(text.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The cookie value of session `id`.
pub fn cookie_value(state: &AppState, id: &str) -> String {
    let body = format!("{VERSION}.{id}");
    let signature = mac(&state.admin.derive_key(SESSION_KEY), &body);
    format!("{body}.{signature}")
}

/// The session id a cookie value carries, if this admin token signed it.
pub fn verify(state: &AppState, value: &str) -> Option<String> {
    let (body, signature) = value.rsplit_once('.')?;
    let expected = mac(&state.admin.derive_key(SESSION_KEY), body);
    if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
        return None;
    }
    let (VERSION, id) = body.split_once('.')? else {
        return None;
    };
    Some(id.to_owned())
}

/// Whether a browser treats the request's origin as secure: it came over HTTPS (directly, or
/// through a TLS-terminating proxy that says so), or to a loopback host.
fn secure_context(headers: &HeaderMap) -> bool {
    let https = crate::ui::session::over_https(headers);
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let loopback = name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    https || loopback
}

/// `Set-Cookie` for session cookie `value`, or clearing it when `None`.
pub fn set_cookie(
    request: &HeaderMap,
    value: Option<&str>,
    max_age: i64,
) -> (HeaderName, HeaderValue) {
    let attributes = match secure_context(request) {
        true => "SameSite=None; Secure; Partitioned",
        false => "SameSite=Lax",
    };
    let (value, max_age) = match value {
        Some(v) => (v, max_age),
        None => ("", 0),
    };
    let cookie =
        format!("{COOKIE_NAME}={value}; Path=/portal/; HttpOnly; {attributes}; Max-Age={max_age}");
    (
        SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("cookie text is visible ASCII"),
    )
}

/// A subscriber signed in to its portal: its session as read now, the actor its requests act
/// as, and the CSRF token of its forms.
#[derive(Clone, Debug)]
pub struct Visitor {
    session: PortalSession,
    actor: Actor,
    csrf: String,
}

impl Visitor {
    /// The visitor of a session in force.
    pub fn new(state: &AppState, session: PortalSession) -> Self {
        let actor = Actor {
            token_id: None,
            name: format!("portal:{}", session.subscriber_id),
            // A read-only session reads as a viewer does; any other changes its subscriber's
            // endpoints as an operator's subscriber token would. Its scope is one subscriber
            // whatever the role, so neither reaches anything else ([`Actor::may`]).
            role: match session.read_only {
                true => Role::Viewer,
                false => Role::Operator,
            },
            scope: Scope::Subscriber(session.subscriber_id.clone()),
            via: Via::Portal,
        };
        let csrf = mac(&state.admin.derive_key(CSRF_KEY), &session.id);
        Self {
            session,
            actor,
            csrf,
        }
    }

    /// The session, as read for this request.
    pub fn session(&self) -> &PortalSession {
        &self.session
    }

    /// The subscriber whose portal this is.
    pub fn subscriber_id(&self) -> &str {
        &self.session.subscriber_id
    }

    /// What the portal's handlers act as: confined to the subscriber, through the portal.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// The CSRF token this session's forms carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether the session may change anything: the pages show their controls only then.
    pub fn can_change(&self) -> bool {
        self.actor.may(Action::ChangeOwn)
    }

    /// Refuses the request unless the session may call the API route `method` `api_path`
    /// (below `/v1`): the same decision a subscriber token gets ([`Action::of_api_request`],
    /// [`Actor::may`]).
    pub fn allow(&self, method: &Method, api_path: &str) -> Result<(), PortalError> {
        match self.actor.may(Action::of_api_request(method, api_path)) {
            true => Ok(()),
            false => Err(PortalError::ReadOnly),
        }
    }

    /// Refuses a form unless its CSRF token is this session's and the session may call the API
    /// route its handler calls ([`Self::allow`]). Every form but signing out goes through here.
    pub fn check(
        &self,
        presented: &str,
        method: &Method,
        api_path: &str,
    ) -> Result<(), PortalError> {
        self.check_csrf(presented)?;
        self.allow(method, api_path)
    }

    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, presented: &str) -> Result<(), PortalError> {
        match bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes())) {
            true => Ok(()),
            false => Err(PortalError::Csrf),
        }
    }
}

impl FromRequestParts<AppState> for Visitor {
    type Rejection = PortalError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PortalError> {
        let id = crate::ui::session::cookie(&parts.headers, COOKIE_NAME)
            .and_then(|value| verify(state, value))
            .ok_or(PortalError::SignedOut)?;
        let session = state.store.portal_session(&id).await?;
        Ok(Self::new(state, session.ok_or(PortalError::SignedOut)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_crosses_sites_only_where_the_browser_keeps_a_secure_cookie() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("127.0.0.1:8080"));
        let (_, local) = set_cookie(&headers, Some("x"), 60);
        let local = local.to_str().unwrap();
        assert!(
            local.contains("SameSite=None; Secure; Partitioned"),
            "{local}"
        );
        assert!(local.contains("HttpOnly") && local.contains("Path=/portal/"));
        headers.insert(HOST, HeaderValue::from_static("hooks.example.com"));
        let (_, plain) = set_cookie(&headers, Some("x"), 60);
        assert!(plain.to_str().unwrap().contains("SameSite=Lax"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let (_, tls) = set_cookie(&headers, None, 60);
        let tls = tls.to_str().unwrap();
        assert!(tls.contains("Secure") && tls.contains("Max-Age=0"), "{tls}");
        headers.insert(HOST, HeaderValue::from_static("[::1]:8080"));
        headers.remove("x-forwarded-proto");
        assert!(secure_context(&headers));
    }
}
