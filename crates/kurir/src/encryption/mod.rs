//! Secrets at rest: the keys that encrypt the secrets kurir stores (endpoint signing secrets,
//! the rotated-out ones still signing, inbox source secrets, forward secrets), and the stored
//! form of one encrypted value.
//!
//! A stored value is `enc:v1:<key id>:<base64 of nonce and ciphertext>`: ChaCha20-Poly1305 with a
//! random 96-bit nonce per value. The key id (the first 8 hex digits of the key's SHA-256) tells
//! which key sealed a value, so a [`Keyring`] holding the new and the old key reads both during a
//! rotation, and a key that sealed nothing in the database is told apart from a damaged value.
//! A value without the prefix is plain text from before encryption; the store reads it as it is
//! and `kurir serve` seals it at start ([`crate::store::Store::seal_secrets`]).
//!
//! Where the keys come from (the setting, or a file generated in the data directory) is
//! [`source`]; which rows hold secrets is the store's business.

pub mod source;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng};
use chacha20poly1305::ChaCha20Poly1305;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The prefix of every encrypted value of this format.
pub const PREFIX: &str = "enc:v1:";

/// Bytes in a key.
pub const KEY_BYTES: usize = 32;

/// Bytes in a nonce (ChaCha20-Poly1305's 96 bits).
const NONCE_BYTES: usize = 12;

/// Why a key or a stored value could not be used.
#[derive(Debug, thiserror::Error)]
pub enum EncryptionError {
    /// A configured key is not 32 bytes in standard base64.
    #[error("{setting} holds a key that is not 32 bytes in base64 (make one with `openssl rand -base64 32`)")]
    BadKey {
        /// The setting or file that holds it.
        setting: String,
    },
    /// No key at all.
    #[error("{setting} holds no key")]
    NoKey {
        /// The setting or file that should hold one.
        setting: String,
    },
    /// A value was sealed by a key the keyring does not hold: the wrong key is configured.
    #[error("a stored secret was encrypted with key {key_id}, which is not among the keys of {setting} ({held}); give this process the key the database's secrets were encrypted with (every process sharing a database needs the same key)")]
    UnknownKey {
        /// The key id in the stored value.
        key_id: String,
        /// The ids of the keys held.
        held: String,
        /// Where the keys came from.
        setting: String,
    },
    /// A value is marked encrypted but does not decrypt with the key it names: damaged or
    /// edited by hand.
    #[error("a stored secret does not decrypt with key {key_id}: the value is damaged")]
    Damaged {
        /// The key id in the stored value.
        key_id: String,
    },
    /// The key file could not be read or written.
    #[error("cannot {action} the encryption key file {}: {source}", path.display())]
    File {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// An encrypted value was read by a store that has no key.
    #[error("a stored secret is encrypted but this store has no encryption key (set KURIR_ENCRYPTION_KEY)")]
    NoKeyring,
}

/// One key and its id.
struct Key {
    id: String,
    cipher: ChaCha20Poly1305,
}

/// The keys a process holds: the first seals, every one opens. `Debug` shows only the key ids.
///
/// Keys read from a file are read again when a value names a key not held: `kurir
/// rotate-encryption-key` writes the new key into the file before sealing anything with it, so
/// a running process follows the rotation without a restart.
pub struct Keyring {
    keys: std::sync::RwLock<Arc<Vec<Key>>>,
    setting: String,
    file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("key_ids", &self.ids())
            .field("setting", &self.setting)
            .finish()
    }
}

impl Keyring {
    /// The keys in `text` (base64, separated by commas or line breaks; the first seals), read
    /// from `setting` (named in errors).
    pub fn parse(text: &str, setting: &str) -> Result<Self, EncryptionError> {
        let keys = text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|k| key_from_base64(k, setting))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(EncryptionError::NoKey {
                setting: setting.to_owned(),
            });
        }
        Ok(Self {
            keys: std::sync::RwLock::new(Arc::new(keys)),
            setting: setting.to_owned(),
            file: None,
        })
    }

    /// The keys in the file at `path`, read again when a value names a key not held.
    pub fn from_file_text(text: &str, path: &std::path::Path) -> Result<Self, EncryptionError> {
        let setting = format!(
            "the key file {} (used while {} is unset)",
            path.display(),
            source::SETTING
        );
        let mut keys = Self::parse(text, &setting)?;
        keys.file = Some(path.to_owned());
        Ok(keys)
    }

    fn held(&self) -> Arc<Vec<Key>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A fresh random key in base64, as [`Keyring::parse`] reads it.
    pub fn generate_key() -> String {
        BASE64.encode(ChaCha20Poly1305::generate_key(&mut OsRng))
    }

    /// The id of the key that seals.
    pub fn primary_id(&self) -> String {
        self.held()[0].id.clone()
    }

    /// The ids of every key held, the sealing one first.
    pub fn ids(&self) -> Vec<String> {
        self.held().iter().map(|k| k.id.clone()).collect()
    }

    /// `plain` encrypted under the first key, in the stored form.
    pub fn seal(&self, plain: &str) -> String {
        let held = self.held();
        let key = &held[0];
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = key
            .cipher
            .encrypt(&nonce, plain.as_bytes())
            .expect("ChaCha20-Poly1305 encrypts any secret-sized message");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!("{PREFIX}{}:{}", key.id, BASE64.encode(bytes))
    }

    /// The plain text of a stored value: decrypted when it is sealed, as it is when it is plain
    /// text from before encryption.
    pub fn open(&self, stored: &str) -> Result<String, EncryptionError> {
        let Some((key_id, body)) = split_sealed(stored) else {
            return Ok(stored.to_owned());
        };
        let held = self.key_held(key_id)?;
        let key = held
            .iter()
            .find(|k| k.id == key_id)
            .expect("key_held found it");
        let damaged = || EncryptionError::Damaged {
            key_id: key_id.to_owned(),
        };
        let bytes = BASE64.decode(body).map_err(|_| damaged())?;
        if bytes.len() < NONCE_BYTES {
            return Err(damaged());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let plain = key
            .cipher
            .decrypt(nonce.into(), sealed)
            .map_err(|_| damaged())?;
        String::from_utf8(plain).map_err(|_| damaged())
    }

    /// Whether `stored` is sealed under the key that seals now (nothing to do for a rotation).
    pub fn is_current(&self, stored: &str) -> bool {
        split_sealed(stored).is_some_and(|(id, _)| id == self.held()[0].id)
    }

    /// The keys held, once they include `key_id` (reading the key file again if need be).
    fn key_held(&self, key_id: &str) -> Result<Arc<Vec<Key>>, EncryptionError> {
        let held = self.held();
        if held.iter().any(|k| k.id == key_id) {
            return Ok(held);
        }
        if let Some(reread) = self
            .file
            .as_deref()
            .and_then(|f| source::read_file(f).ok().flatten())
        {
            let keys = reread.held();
            if keys.iter().any(|k| k.id == key_id) {
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys.clone();
                return Ok(keys);
            }
        }
        Err(EncryptionError::UnknownKey {
            key_id: key_id.to_owned(),
            held: self.ids().join(", "),
            setting: self.setting.clone(),
        })
    }
}

/// Whether `stored` is in the encrypted form (whatever key sealed it).
pub fn is_sealed(stored: &str) -> bool {
    split_sealed(stored).is_some()
}

/// A stored value as its key id and body, if it is sealed.
fn split_sealed(stored: &str) -> Option<(&str, &str)> {
    stored.strip_prefix(PREFIX)?.split_once(':')
}

fn key_from_base64(text: &str, setting: &str) -> Result<Key, EncryptionError> {
    let bad = || EncryptionError::BadKey {
        setting: setting.to_owned(),
    };
    let bytes = BASE64.decode(text).map_err(|_| bad())?;
    if bytes.len() != KEY_BYTES {
        return Err(bad());
    }
    let digest = Sha256::digest(&bytes);
    Ok(Key {
        id: hex::encode(&digest[..4]),
        cipher: ChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| bad())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(keys: &[&str]) -> Keyring {
        Keyring::parse(&keys.join(","), "KURIR_ENCRYPTION_KEY").unwrap()
    }

    #[test]
    fn a_sealed_value_opens_and_hides_the_secret() {
        let key = Keyring::generate_key();
        let keys = ring(&[&key]);
        let sealed = keys.seal("whsec_c2VjcmV0");
        assert!(sealed.starts_with(&format!("enc:v1:{}:", keys.primary_id())));
        assert!(!sealed.contains("whsec_") && !sealed.contains("c2VjcmV0"));
        assert_ne!(
            sealed,
            keys.seal("whsec_c2VjcmV0"),
            "a fresh nonce per value"
        );
        assert_eq!(keys.open(&sealed).unwrap(), "whsec_c2VjcmV0");
        assert_eq!(keys.open("whsec_plain").unwrap(), "whsec_plain");
    }

    #[test]
    fn old_and_new_keys_both_open_during_a_rotation() {
        let (old, new) = (Keyring::generate_key(), Keyring::generate_key());
        let before = ring(&[&old]).seal("s1");
        let during = ring(&[&new, &old]);
        assert_eq!(during.open(&before).unwrap(), "s1");
        assert!(!during.is_current(&before));
        assert!(during.is_current(&during.seal("s2")));
    }

    #[test]
    fn a_wrong_key_is_named_and_a_damaged_value_refused() {
        let sealed = ring(&[&Keyring::generate_key()]).seal("s");
        let other = ring(&[&Keyring::generate_key()]);
        let err = other.open(&sealed).unwrap_err();
        assert!(matches!(err, EncryptionError::UnknownKey { .. }), "{err}");
        assert!(err.to_string().contains("KURIR_ENCRYPTION_KEY"), "{err}");
        let keys = ring(&[&Keyring::generate_key()]);
        let mut damaged = keys.seal("s");
        damaged.replace_range(damaged.len() - 4.., "AAAA");
        assert!(matches!(
            keys.open(&damaged),
            Err(EncryptionError::Damaged { .. })
        ));
    }

    #[test]
    fn keys_must_be_32_bytes_of_base64() {
        for bad in ["", "not base64!", &BASE64.encode([0u8; 16])] {
            assert!(
                Keyring::parse(bad, "KURIR_ENCRYPTION_KEY").is_err(),
                "{bad}"
            );
        }
        assert!(!format!("{:?}", ring(&[&Keyring::generate_key()])).contains('='));
    }
}
