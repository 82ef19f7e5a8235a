//! Dashboard sessions and CSRF tokens: signed and stateless, so they work across every kurir
//! process behind a load balancer that shares the admin token, and need no table.
//!
//! Signing in with a token sets the cookie `kurir_session` = `v2.<expiry>.<nonce>.<who>.<mac>`,
//! `<who>` being `admin` for the environment's token or a named token's id, the MAC being
//! HMAC-SHA256 over the rest with a key derived from the admin token
//! ([`crate::admin_token::AdminToken::derive_key`]): any process with the same token accepts it,
//! changing the token ends every session. A named token's session is checked against its row on
//! every request, so revoking the token (or its expiry) ends its sessions at once, on every
//! process; its role is the row's, read then. The cookie is `HttpOnly`, `SameSite=Strict`,
//! `Path=/`, and `Secure` when the request came over HTTPS (kurir behind a TLS proxy that sets
//! `X-Forwarded-Proto: https`). Signing out clears the cookie; a copy of the environment token's
//! cookie taken before stays valid until it expires ([`SESSION_LIFETIME`]), which is what
//! stateless sessions trade for needing no shared store.
//!
//! Every form that changes state carries a CSRF token, HMAC of the session's nonce under another
//! derived key, checked in constant time before the handler runs ([`Session::check_csrf`]), which
//! also asks [`crate::access`] whether the signed-in token may change anything: the dashboard
//! hides a viewer's controls, and the server refuses them all the same.

use axum::extract::FromRequestParts;
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::error::UiError;
use crate::access::{Action, Actor, Via};
use crate::api::error::ApiError;
use crate::api::state::AppState;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "kurir_session";
/// How long a session lasts after signing in.
pub const SESSION_LIFETIME: chrono::Duration = chrono::Duration::hours(8);

const SESSION_KEY: &str = "kurir dashboard session v1";
const CSRF_KEY: &str = "kurir dashboard csrf v1";

/// Who signed in with the environment's token, in a cookie.
const BOOTSTRAP: &str = "admin";

/// A signed-in operator, extracted from a valid session cookie.
#[derive(Clone, Debug)]
pub struct Session {
    csrf: String,
    actor: Actor,
}

impl Session {
    /// The CSRF token forms of this session carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Who is signed in, acting through the dashboard.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// Whether the signed-in actor may do `action`: what the pages ask before showing a control
    /// ([`crate::access::Actor::may`] decides).
    pub fn may(&self, action: Action) -> bool {
        self.actor.may(action)
    }

    /// Refuses the request unless the signed-in actor may do `action`: for the pages that exist
    /// only to change something (a form's page), and for every form through [`Self::check_csrf`].
    pub fn require(&self, action: Action) -> Result<(), UiError> {
        match self.may(action) {
            true => Ok(()),
            false => Err(UiError::Api(ApiError::Forbidden(
                self.actor.refusal(action),
            ))),
        }
    }

    /// Refuses a form that changes state unless its CSRF token is this session's and the
    /// signed-in actor may change things. Every form but signing out goes through here, so the
    /// server refuses a viewer's form whether or not a page showed it.
    pub fn check_csrf(&self, presented: &str) -> Result<(), UiError> {
        self.check_sign_out(presented)?;
        self.require(Action::Change)
    }

    /// Refuses a sign-out form whose CSRF token is not this session's. Every role may sign out:
    /// it changes nothing but the caller's own cookie.
    pub fn check_sign_out(&self, presented: &str) -> Result<(), UiError> {
        match bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes())) {
            true => Ok(()),
            false => Err(UiError::Csrf),
        }
    }
}

/// A cookie's claims, before the named token behind it is checked.
#[derive(Debug)]
pub struct Claims {
    nonce: String,
    who: String,
}

fn mac(key: &[u8; 32], text: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(text.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn csrf_for(state: &AppState, nonce: &str) -> String {
    mac(&state.admin.derive_key(CSRF_KEY), nonce)
}

/// A new session's cookie value for the environment's token (`token_id` `None`) or a named one.
pub fn issue(state: &AppState, token_id: Option<&str>) -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    let expires = (state.store.clock().now() + SESSION_LIFETIME).timestamp();
    let who = token_id.unwrap_or(BOOTSTRAP);
    let body = format!("v2.{expires}.{}.{who}", hex::encode(bytes));
    let signature = mac(&state.admin.derive_key(SESSION_KEY), &body);
    format!("{body}.{signature}")
}

/// What a cookie value claims, if it is signed by this token and not expired.
pub fn verify(state: &AppState, value: &str) -> Option<Claims> {
    let (body, signature) = value.rsplit_once('.')?;
    let expected = mac(&state.admin.derive_key(SESSION_KEY), body);
    if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
        return None;
    }
    let mut parts = body.split('.');
    let (Some("v2"), Some(expires), Some(nonce), Some(who), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let expires: i64 = expires.parse().ok()?;
    (expires > state.store.clock().now().timestamp()).then(|| Claims {
        nonce: nonce.to_owned(),
        who: who.to_owned(),
    })
}

/// The session the claims stand for: the environment's token's, or a named token's that still
/// works (read now, so a revoked token's session ends at once).
pub async fn session(state: &AppState, claims: Claims) -> Result<Option<Session>, UiError> {
    let actor = if claims.who == BOOTSTRAP {
        Actor::bootstrap(state.admin.name(), Via::Dashboard)
    } else {
        match state.store.active_token_by_id(&claims.who).await? {
            Some(t) => t.actor(Via::Dashboard),
            None => return Ok(None),
        }
    };
    // The dashboard shows every subscriber's rows: an actor that may not read them (a
    // subscriber token) has no session.
    if !actor.may(Action::Read) {
        return Ok(None);
    }
    Ok(Some(Session {
        csrf: csrf_for(state, &claims.nonce),
        actor,
    }))
}

/// The value of cookie `name` in `headers`.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether the browser reached kurir over HTTPS (directly or through a TLS-terminating proxy).
pub(crate) fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').next().is_some_and(|p| p.trim() == "https"))
}

/// `Set-Cookie` for `value` (a new session), or clearing the cookie when `None`.
pub fn set_cookie(request: &HeaderMap, value: Option<&str>) -> (HeaderName, HeaderValue) {
    let secure = if over_https(request) { "; Secure" } else { "" };
    let cookie = match value {
        Some(v) => format!(
            "{COOKIE_NAME}={v}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            SESSION_LIFETIME.num_seconds()
        ),
        None => format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    (
        SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("cookie text is visible ASCII"),
    )
}

impl FromRequestParts<AppState> for Session {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, UiError> {
        let claims = cookie(&parts.headers, COOKIE_NAME)
            .and_then(|value| verify(state, value))
            .ok_or(UiError::SignInRequired)?;
        session(state, claims).await?.ok_or(UiError::SignInRequired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin_token::AdminToken;
    use crate::gateway::Gateway;
    use crate::store::Store;

    async fn state(token: &str) -> AppState {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        let gateway = Gateway::new(store.clone(), &Default::default()).unwrap();
        AppState::new(store, AdminToken::new("admin", token), gateway)
    }

    #[tokio::test]
    async fn a_session_is_accepted_by_any_process_with_the_same_token_only() {
        let (one, other, stranger) = (state("t1").await, state("t1").await, state("t2").await);
        let cookie = issue(&one, None);
        let claims = verify(&other, &cookie).expect("same token, other process");
        let session = session(&other, claims).await.unwrap().unwrap();
        let mine = session_of(&one, &cookie).await;
        assert!(session.check_csrf(mine.csrf()).is_ok());
        assert!(session.check_csrf("forged").is_err());
        assert!(verify(&stranger, &cookie).is_none(), "another token");
        let tampered = cookie.replacen("v2.", "v2.9", 1);
        assert!(verify(&one, &tampered).is_none());
        let body = format!("v2.{}.abcd.admin", one.store.clock().now().timestamp() - 1);
        let expired = format!("{body}.{}", mac(&one.admin.derive_key(SESSION_KEY), &body));
        assert!(verify(&one, &expired).is_none(), "expired");
    }

    async fn session_of(state: &AppState, cookie: &str) -> Session {
        let claims = verify(state, cookie).unwrap();
        session(state, claims).await.unwrap().unwrap()
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_behind_https() {
        let mut headers = HeaderMap::new();
        let (_, plain) = set_cookie(&headers, Some("x"));
        let plain = plain.to_str().unwrap();
        assert!(plain.contains("HttpOnly") && plain.contains("SameSite=Strict"));
        assert!(!plain.contains("Secure"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let (_, secure) = set_cookie(&headers, None);
        assert!(secure.to_str().unwrap().contains("; Secure"));
        assert!(secure.to_str().unwrap().contains("Max-Age=0"));
    }
}
