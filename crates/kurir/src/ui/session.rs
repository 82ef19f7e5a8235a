//! Dashboard sessions and CSRF tokens: signed and stateless, so they work across every kurir
//! process behind a load balancer that shares the admin token, and need no table.
//!
//! Signing in with the admin token sets the cookie `kurir_session` = `v1.<expiry>.<nonce>.<mac>`,
//! the MAC being HMAC-SHA256 over `v1.<expiry>.<nonce>` with a key derived from the admin token
//! ([`crate::admin_token::AdminToken::derive_key`]): any process with the same token accepts it,
//! changing the token ends every session. The cookie is `HttpOnly`, `SameSite=Strict`, `Path=/`,
//! and `Secure` when the request came over HTTPS (kurir behind a TLS proxy that sets
//! `X-Forwarded-Proto: https`). Signing out clears the cookie; a copy taken before stays valid
//! until it expires ([`SESSION_LIFETIME`]), which is what stateless sessions trade for needing no
//! shared store.
//!
//! Every form that changes state carries a CSRF token, HMAC of the session's nonce under another
//! derived key, checked in constant time before the handler runs ([`Session::check_csrf`]).

use axum::extract::FromRequestParts;
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use chrono::Utc;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::error::UiError;
use crate::api::state::AppState;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "kurir_session";
/// How long a session lasts after signing in.
pub const SESSION_LIFETIME: chrono::Duration = chrono::Duration::hours(8);

const SESSION_KEY: &str = "kurir dashboard session v1";
const CSRF_KEY: &str = "kurir dashboard csrf v1";

/// A signed-in operator, extracted from a valid session cookie.
#[derive(Clone, Debug)]
pub struct Session {
    csrf: String,
}

impl Session {
    /// The CSRF token forms of this session carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, presented: &str) -> Result<(), UiError> {
        match bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes())) {
            true => Ok(()),
            false => Err(UiError::Csrf),
        }
    }
}

fn mac(key: &[u8; 32], text: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(text.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn csrf_for(state: &AppState, nonce: &str) -> String {
    mac(&state.admin.derive_key(CSRF_KEY), nonce)
}

/// A new session's cookie value.
pub fn issue(state: &AppState) -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    let expires = (Utc::now() + SESSION_LIFETIME).timestamp();
    let body = format!("v1.{expires}.{}", hex::encode(bytes));
    let signature = mac(&state.admin.derive_key(SESSION_KEY), &body);
    format!("{body}.{signature}")
}

/// The session a cookie value stands for, if it is signed by this token and not expired.
pub fn verify(state: &AppState, value: &str) -> Option<Session> {
    let (body, signature) = value.rsplit_once('.')?;
    let expected = mac(&state.admin.derive_key(SESSION_KEY), body);
    if !bool::from(expected.as_bytes().ct_eq(signature.as_bytes())) {
        return None;
    }
    let mut parts = body.split('.');
    let (Some("v1"), Some(expires), Some(nonce), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let expires: i64 = expires.parse().ok()?;
    (expires > Utc::now().timestamp()).then(|| Session {
        csrf: csrf_for(state, nonce),
    })
}

/// The value of cookie `name` in `headers`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
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
fn over_https(headers: &HeaderMap) -> bool {
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
        cookie(&parts.headers, COOKIE_NAME)
            .and_then(|value| verify(state, value))
            .ok_or(UiError::SignInRequired)
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
        let cookie = issue(&one);
        let session = verify(&other, &cookie).expect("same token, other process");
        assert!(session
            .check_csrf(verify(&one, &cookie).unwrap().csrf())
            .is_ok());
        assert!(session.check_csrf("forged").is_err());
        assert!(verify(&stranger, &cookie).is_none(), "another token");
        let tampered = cookie.replacen("v1.", "v1.9", 1);
        assert!(verify(&one, &tampered).is_none());
        let body = format!("v1.{}.abcd", Utc::now().timestamp() - 1);
        let expired = format!("{body}.{}", mac(&one.admin.derive_key(SESSION_KEY), &body));
        assert!(verify(&one, &expired).is_none(), "expired");
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
