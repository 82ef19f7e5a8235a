//! Endpoint and source secrets: generating them, validating them, and turning them into HMAC keys.
//!
//! A [`Secret`] never shows itself in `Debug` output and has no `Display`; [`Secret::expose`] is the one
//! deliberate way to read it. Which key a scheme derives from a secret is decided here
//! ([`Secret::hmac_key_standard`] for Standard Webhooks; every other scheme keys on the string as given).

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;
use subtle::ConstantTimeEq;

/// Prefix of Standard Webhooks secrets; what follows it is the base64 of the HMAC key.
pub const STANDARD_PREFIX: &str = "whsec_";

/// Random bytes in a generated secret's key (the Standard Webhooks recommendation is 24 to 64).
const GENERATED_KEY_LEN: usize = 24;
const MIN_LEN: usize = 8;
const MAX_LEN: usize = 512;

/// A webhook signing secret. `Debug` prints `Secret(***)`.
#[derive(Clone)]
pub struct Secret(String);

/// Why a string is not a usable [`Secret`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSecret {
    /// Fewer than 8 characters.
    #[error("secret is {len} characters long, at least {MIN_LEN} are required")]
    TooShort {
        /// Length of the rejected secret in characters.
        len: usize,
    },
    /// More than 512 characters.
    #[error("secret is {len} characters long, at most {MAX_LEN} are allowed")]
    TooLong {
        /// Length of the rejected secret in characters.
        len: usize,
    },
    /// Holds a control character (a NUL, a newline): no secret has one, and a NUL cannot even be
    /// stored in PostgreSQL's text.
    #[error("secret contains a control character")]
    ControlCharacter,
    /// Starts with `whsec_` but the rest is not standard base64, so no Standard Webhooks key can be had.
    #[error("secret starts with \"whsec_\" but the rest is not valid standard base64")]
    InvalidBase64,
    /// Starts with `whsec_` and nothing follows.
    #[error("secret \"whsec_\" has an empty key")]
    EmptyKey,
}

impl Secret {
    /// A new secret: `whsec_` + standard base64 of 24 random bytes (32 characters, no padding).
    pub fn generate() -> Secret {
        let mut key = [0u8; GENERATED_KEY_LEN];
        rand::thread_rng().fill_bytes(&mut key);
        Secret(format!("{STANDARD_PREFIX}{}", STANDARD.encode(key)))
    }

    /// Accepts any string of 8 to 512 characters without control characters; one starting with
    /// `whsec_` must continue with valid
    /// standard base64, which is its Standard Webhooks key.
    ///
    /// Use this for secrets kurir signs with and for Standard Webhooks sources. Providers whose secrets
    /// merely look like `whsec_…` (Stripe) are read with [`Secret::parse_verbatim`].
    pub fn parse(s: &str) -> Result<Secret, InvalidSecret> {
        let secret = Secret::parse_verbatim(s)?;
        if let Some(encoded) = s.strip_prefix(STANDARD_PREFIX) {
            let key = STANDARD
                .decode(encoded)
                .map_err(|_| InvalidSecret::InvalidBase64)?;
            if key.is_empty() {
                return Err(InvalidSecret::EmptyKey);
            }
        }
        Ok(secret)
    }

    /// Accepts any string of 8 to 512 characters without control characters, without looking at a
    /// `whsec_` prefix.
    ///
    /// For schemes that key the HMAC on the secret string itself (every scheme but Standard Webhooks):
    /// Stripe's `whsec_…` secrets, for one, are not base64 after the prefix.
    pub fn parse_verbatim(s: &str) -> Result<Secret, InvalidSecret> {
        let len = s.chars().count();
        if len < MIN_LEN {
            return Err(InvalidSecret::TooShort { len });
        }
        if len > MAX_LEN {
            return Err(InvalidSecret::TooLong { len });
        }
        if s.chars().any(char::is_control) {
            return Err(InvalidSecret::ControlCharacter);
        }
        Ok(Secret(s.to_owned()))
    }

    /// The full secret string, for storage and API responses only. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The Standard Webhooks HMAC key: the base64-decoded part after `whsec_` if prefixed, else the
    /// UTF-8 bytes of the whole string.
    ///
    /// A secret made by [`Secret::parse_verbatim`] whose prefixed part does not decode also falls back
    /// to its UTF-8 bytes.
    pub fn hmac_key_standard(&self) -> Vec<u8> {
        self.0
            .strip_prefix(STANDARD_PREFIX)
            .and_then(|encoded| STANDARD.decode(encoded).ok())
            .unwrap_or_else(|| self.0.as_bytes().to_vec())
    }

    /// The key of every scheme but Standard Webhooks: the secret string's UTF-8 bytes.
    pub(crate) fn hmac_key_verbatim(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Constant-time, so comparing secrets does not leak how much of them matched.
impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl Eq for Secret {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_limits_count_characters() {
        assert_eq!(
            Secret::parse("short"),
            Err(InvalidSecret::TooShort { len: 5 })
        );
        assert!(Secret::parse("12345678").is_ok());
        assert!(Secret::parse(&"x".repeat(512)).is_ok());
        assert_eq!(
            Secret::parse(&"x".repeat(513)),
            Err(InvalidSecret::TooLong { len: 513 })
        );
        assert!(Secret::parse("ééééééé").is_err(), "7 characters, 14 bytes");
    }

    #[test]
    fn control_characters_are_refused() {
        for bad in ["secret-\0-nul", "secret\nwith-newline", "secret\twith-tab"] {
            assert_eq!(
                Secret::parse_verbatim(bad),
                Err(InvalidSecret::ControlCharacter),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn whsec_prefix_requires_base64_unless_verbatim() {
        assert_eq!(
            Secret::parse("whsec_test_secret_stripe"),
            Err(InvalidSecret::InvalidBase64)
        );
        assert_eq!(Secret::parse("whsec_AA"), Err(InvalidSecret::InvalidBase64));
        assert_eq!(
            Secret::parse("whsec_xx").map(|_| ()),
            Err(InvalidSecret::InvalidBase64)
        );
        let stripe = Secret::parse_verbatim("whsec_test_secret_stripe").unwrap();
        assert_eq!(stripe.hmac_key_standard(), b"whsec_test_secret_stripe");
    }

    #[test]
    fn standard_key_is_decoded_after_the_prefix_only() {
        let prefixed = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(prefixed.hmac_key_standard().len(), 24);
        let plain = Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            plain.hmac_key_standard(),
            b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        );
    }

    #[test]
    fn secrets_compare_by_value() {
        let a = Secret::parse("seed_secret_0123456789").unwrap();
        assert_eq!(a, a.clone());
        assert_ne!(a, Secret::parse("seed_secret_0123456780").unwrap());
    }
}
