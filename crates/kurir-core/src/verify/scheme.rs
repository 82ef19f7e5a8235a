//! The [`Scheme`] names a source can be configured with, and the secret parsing each one implies.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::secret::{InvalidSecret, Secret};

/// A signature scheme a source signs its webhooks with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// kurir's own seed scheme: `X-Webhook-Timestamp` + `X-Webhook-Signature` (hex).
    Kurir,
    /// Standard Webhooks, also under Svix's `svix-*` header names.
    StandardWebhooks,
    /// Stripe's `Stripe-Signature: t=…,v1=…`.
    Stripe,
    /// GitHub's `X-Hub-Signature-256: sha256=…`.
    Github,
    /// Shopify's `X-Shopify-Hmac-Sha256` (base64).
    Shopify,
    /// Slack's `X-Slack-Signature: v0=…` with `X-Slack-Request-Timestamp`.
    Slack,
    /// The second seed scheme: `X-Signature` = hex HMAC of the raw body.
    HmacBody,
}

impl Scheme {
    /// Every scheme, in declaration order.
    pub const ALL: [Scheme; 7] = [
        Scheme::Kurir,
        Scheme::StandardWebhooks,
        Scheme::Stripe,
        Scheme::Github,
        Scheme::Shopify,
        Scheme::Slack,
        Scheme::HmacBody,
    ];

    /// The scheme's configuration name, e.g. `standard-webhooks`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Kurir => "kurir",
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Stripe => "stripe",
            Scheme::Github => "github",
            Scheme::Shopify => "shopify",
            Scheme::Slack => "slack",
            Scheme::HmacBody => "hmac-body",
        }
    }

    /// Parses a secret the way this scheme uses it: [`Secret::parse`] for Standard Webhooks (a `whsec_`
    /// prefix must be followed by the base64 key), [`Secret::parse_verbatim`] for the others, which key
    /// on the string as given.
    pub fn parse_secret(self, s: &str) -> Result<Secret, InvalidSecret> {
        match self {
            Scheme::StandardWebhooks => Secret::parse(s),
            _ => Secret::parse_verbatim(s),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scheme name that is not one of [`Scheme::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signature scheme {0:?}; expected one of kurir, standard-webhooks, stripe, github, shopify, slack, hmac-body")]
pub struct UnknownScheme(pub String);

impl FromStr for Scheme {
    type Err = UnknownScheme;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheme::ALL
            .into_iter()
            .find(|scheme| scheme.as_str() == s)
            .ok_or_else(|| UnknownScheme(s.to_owned()))
    }
}
