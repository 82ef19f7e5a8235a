//! Inbox sources: the senders whose webhooks the gateway takes at `/inbox/{name}`, how their
//! requests are verified (scheme, secrets, tolerance), and where each accepted event is forwarded
//! (the forward URL, signed with the source's generated forward secret).
//!
//! This module owns the source model and its rules, below everything that uses them. Storing
//! sources is the store's job; receiving and forwarding are [`crate::gateway`]'s.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kurir_core::{Scheme, Secret};
use kurir_receiver::{ConfigError, WebhookSource};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::endpoint::validate_url;
use crate::redact::Sensitive;

/// Timestamp tolerance of a source unless given: 5 minutes.
pub const DEFAULT_TOLERANCE_SECONDS: u32 = 300;
/// Longest tolerance accepted: one day. A wider window only helps replayed requests.
pub const MAX_TOLERANCE_SECONDS: u32 = 86_400;
/// Most secrets a source may have at once (a rotation needs two).
pub const MAX_SECRETS: usize = 10;

/// A problem with source input, naming the field at fault as the admin API names it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct InvalidSource {
    /// The field that is wrong.
    pub field: &'static str,
    /// What is wrong with it (never a secret).
    pub message: String,
}

impl InvalidSource {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// A source as stored.
#[derive(Clone, Debug)]
pub struct InboxSource {
    /// Its name: the `{source}` of `/inbox/{source}` and `kurir_inbox.source`.
    pub name: String,
    /// How its requests are signed.
    pub scheme: Scheme,
    /// The secrets its requests may be signed with.
    pub secrets: Vec<Secret>,
    /// How far a signed timestamp may be from now, either way.
    pub tolerance_seconds: u32,
    /// Where each accepted event is forwarded.
    pub forward_url: String,
    /// What forwards are signed with (`kurir` scheme, and Standard Webhooks alongside).
    pub forward_secret: Secret,
    /// Hex SHA-256 of the token that may poll this source's event statuses.
    pub read_token_sha256: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl InboxSource {
    /// The receiving kit's view of this source, which verifies its requests.
    pub fn webhook_source(&self) -> Result<WebhookSource, ConfigError> {
        let secrets = self.secrets.iter().map(Secret::expose);
        Ok(WebhookSource::new(&self.name, self.scheme, secrets)?
            .tolerance(Duration::from_secs(self.tolerance_seconds.into())))
    }

    /// Whether `presented` is this source's read token (compared as digests, in constant time).
    pub fn read_token_matches(&self, presented: &str) -> bool {
        let digest = token_digest(presented);
        digest
            .as_bytes()
            .ct_eq(self.read_token_sha256.as_bytes())
            .into()
    }

    /// Where partners send this source's webhooks, relative to kurir's base URL.
    pub fn inbox_path(&self) -> String {
        format!("/inbox/{}", self.name)
    }
}

/// A source to create, as an operator describes it.
#[derive(Clone, Debug)]
pub struct NewSource {
    /// Its name (1 to 64 characters from `A-Z a-z 0-9 . _ -`).
    pub name: String,
    /// A scheme name, e.g. `standard-webhooks`.
    pub scheme: String,
    /// The secrets requests may be signed with.
    pub secrets: Vec<Sensitive>,
    /// The tolerance; [`DEFAULT_TOLERANCE_SECONDS`] when `None`.
    pub tolerance_seconds: Option<u32>,
    /// Where to forward: an absolute http(s) URL.
    pub forward_url: String,
}

/// A new source and its read token, which exists in the clear only until it is shown once.
#[derive(Clone, Debug)]
pub struct CreatedSource {
    /// The source, ready to store.
    pub source: InboxSource,
    /// The bearer token for its status route.
    pub read_token: Sensitive,
}

impl NewSource {
    /// Checks every field and generates the forward secret and the read token.
    pub fn validate(self, now: DateTime<Utc>) -> Result<CreatedSource, InvalidSource> {
        let scheme = parse_scheme(&self.scheme)?;
        let given: Vec<&str> = self.secrets.iter().map(Sensitive::expose).collect();
        let secrets = parse_secrets(&self.name, scheme, &given)?;
        let tolerance_seconds =
            check_tolerance(self.tolerance_seconds.unwrap_or(DEFAULT_TOLERANCE_SECONDS))?;
        check_forward_url(&self.forward_url)?;
        let read_token = generate_read_token();
        let source = InboxSource {
            name: self.name,
            scheme,
            secrets,
            tolerance_seconds,
            forward_url: self.forward_url,
            forward_secret: Secret::generate(),
            read_token_sha256: token_digest(read_token.expose()),
            created_at: now,
            updated_at: now,
        };
        Ok(CreatedSource { source, read_token })
    }
}

/// Changes to a source; `None` leaves a field as it is. The name, forward secret and read token
/// never change.
#[derive(Clone, Debug, Default)]
pub struct SourceUpdate {
    /// New scheme; the secrets (given or kept) must suit it.
    pub scheme: Option<String>,
    /// New secrets (replaces the list).
    pub secrets: Option<Vec<Sensitive>>,
    /// New tolerance.
    pub tolerance_seconds: Option<u32>,
    /// New forward URL.
    pub forward_url: Option<String>,
}

impl SourceUpdate {
    /// Applies the changes to `source`, checking the result as a whole; on error `source` is
    /// unchanged.
    pub fn apply(self, source: &mut InboxSource, now: DateTime<Utc>) -> Result<(), InvalidSource> {
        let scheme = match &self.scheme {
            Some(name) => parse_scheme(name)?,
            None => source.scheme,
        };
        let given: Vec<&str> = match &self.secrets {
            Some(secrets) => secrets.iter().map(Sensitive::expose).collect(),
            None => source.secrets.iter().map(Secret::expose).collect(),
        };
        let secrets = parse_secrets(&source.name, scheme, &given)?;
        let tolerance_seconds = match self.tolerance_seconds {
            Some(t) => check_tolerance(t)?,
            None => source.tolerance_seconds,
        };
        if let Some(url) = &self.forward_url {
            check_forward_url(url)?;
        }
        source.scheme = scheme;
        source.secrets = secrets;
        source.tolerance_seconds = tolerance_seconds;
        if let Some(url) = self.forward_url {
            source.forward_url = url;
        }
        source.updated_at = now;
        Ok(())
    }
}

fn parse_scheme(name: &str) -> Result<Scheme, InvalidSource> {
    name.parse()
        .map_err(|e: kurir_core::UnknownScheme| InvalidSource::new("scheme", e.to_string()))
}

/// The secrets as `scheme` reads them, checked by building the source the receiving kit would
/// (which also checks the name).
fn parse_secrets(
    name: &str,
    scheme: Scheme,
    secrets: &[&str],
) -> Result<Vec<Secret>, InvalidSource> {
    if secrets.len() > MAX_SECRETS {
        return Err(InvalidSource::new(
            "secrets",
            format!("at most {MAX_SECRETS} secrets"),
        ));
    }
    WebhookSource::new(name, scheme, secrets).map_err(|e| match e {
        ConfigError::InvalidSourceName(_) => InvalidSource::new("name", e.to_string()),
        other => InvalidSource::new("secrets", other.to_string()),
    })?;
    secrets
        .iter()
        .map(|s| scheme.parse_secret(s))
        .collect::<Result<_, _>>()
        .map_err(|e| InvalidSource::new("secrets", e.to_string()))
}

fn check_tolerance(seconds: u32) -> Result<u32, InvalidSource> {
    if !(1..=MAX_TOLERANCE_SECONDS).contains(&seconds) {
        return Err(InvalidSource::new(
            "tolerance_seconds",
            format!("must be between 1 and {MAX_TOLERANCE_SECONDS}"),
        ));
    }
    Ok(seconds)
}

fn check_forward_url(url: &str) -> Result<(), InvalidSource> {
    validate_url(url).map_err(|e| InvalidSource::new("forward_url", e.message))
}

/// `kurir_read_` and 32 random bytes in hex.
fn generate_read_token() -> Sensitive {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("kurir_read_{}", hex::encode(bytes)).into()
}

/// What is stored of a read token: its SHA-256, in hex.
fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_source() -> NewSource {
        NewSource {
            name: "stripe-live".into(),
            scheme: "stripe".into(),
            secrets: vec!["whsec_not-base64-but-stripe".into()],
            tolerance_seconds: None,
            forward_url: "https://app.example/hooks/stripe".into(),
        }
    }

    fn field_of(change: impl FnOnce(&mut NewSource)) -> &'static str {
        let mut source = new_source();
        change(&mut source);
        source.validate(Utc::now()).unwrap_err().field
    }

    #[test]
    fn a_valid_source_gets_a_forward_secret_and_a_read_token() {
        let created = new_source().validate(Utc::now()).unwrap();
        let source = &created.source;
        assert_eq!(source.tolerance_seconds, DEFAULT_TOLERANCE_SECONDS);
        assert!(source.forward_secret.expose().starts_with("whsec_"));
        assert!(source.read_token_matches(created.read_token.expose()));
        assert!(!source.read_token_matches("kurir_read_guess"));
        assert!(!source
            .read_token_sha256
            .contains(created.read_token.expose()));
        assert!(source.webhook_source().is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(field_of(|s| s.name = "has space".into()), "name");
        assert_eq!(field_of(|s| s.scheme = "paypal".into()), "scheme");
        assert_eq!(field_of(|s| s.secrets.clear()), "secrets");
        assert_eq!(field_of(|s| s.secrets = vec!["short".into()]), "secrets");
        assert_eq!(
            field_of(|s| {
                s.scheme = "standard-webhooks".into();
                s.secrets = vec!["whsec_!!not base64!!".into()];
            }),
            "secrets"
        );
        assert_eq!(
            field_of(|s| s.tolerance_seconds = Some(0)),
            "tolerance_seconds"
        );
        assert_eq!(
            field_of(|s| s.forward_url = "ftp://x.example".into()),
            "forward_url"
        );
    }

    #[test]
    fn an_update_is_checked_as_a_whole_and_leaves_a_bad_one_unapplied() {
        let mut source = new_source().validate(Utc::now()).unwrap().source;
        let to_standard = SourceUpdate {
            scheme: Some("standard-webhooks".into()),
            ..SourceUpdate::default()
        };
        let err = to_standard.apply(&mut source, Utc::now()).unwrap_err();
        assert_eq!(
            err.field, "secrets",
            "stripe's secret is no Standard Webhooks key"
        );
        assert_eq!(source.scheme, Scheme::Stripe);
        let with_secret = SourceUpdate {
            scheme: Some("standard-webhooks".into()),
            secrets: Some(vec!["whsec_MDEyMzQ1Njc4OWFiY2RlZg==".into()]),
            tolerance_seconds: Some(60),
            ..SourceUpdate::default()
        };
        with_secret.apply(&mut source, Utc::now()).unwrap();
        assert_eq!(
            (source.scheme, source.tolerance_seconds),
            (Scheme::StandardWebhooks, 60)
        );
    }
}
