//! Secrets at rest in the store: every secret column is written sealed by the store's
//! [`Keyring`] and opened when read ([`SecretCodec`]), and [`Store::seal_secrets`] goes over the
//! stored ones: at start, to seal plain text from before encryption (and, by opening every
//! value, to refuse a wrong key before anything is sent); in `kurir rotate-encryption-key`, to
//! move every value to the new key.
//!
//! The columns: `kurir_endpoints.secret`, the `secret` of each entry of
//! `kurir_endpoints.previous_secrets`, each entry of `kurir_inbox_sources.secrets`, and
//! `kurir_inbox_sources.forward_secret`. The JSON columns keep their shape; only the strings in
//! them are sealed.

use std::sync::Arc;

use serde_json::Value;

use super::sql::{execute_on, query_as_on, Sql};
use super::{on_backend, Result, Store, StoreError};
use crate::encryption::{is_sealed, Keyring};

/// Seals and opens secret columns. Without a keyring (a store the library's user connected
/// without [`Store::with_keyring`]) values are written as they are, and a sealed one cannot be
/// read.
#[derive(Clone, Debug, Default)]
pub(crate) struct SecretCodec(Option<Arc<Keyring>>);

impl SecretCodec {
    /// `plain` as it is stored.
    pub(crate) fn seal(&self, plain: &str) -> String {
        match &self.0 {
            Some(keys) => keys.seal(plain),
            None => plain.to_owned(),
        }
    }

    /// The plain text of a stored value.
    pub(crate) fn open(&self, stored: &str) -> Result<String> {
        match &self.0 {
            Some(keys) => Ok(keys.open(stored)?),
            None if is_sealed(stored) => Err(crate::encryption::EncryptionError::NoKeyring.into()),
            None => Ok(stored.to_owned()),
        }
    }

    /// An endpoint's rotated-out secrets as stored: the `previous_secrets` JSON, each sealed.
    pub(crate) fn seal_previous(&self, previous: &[crate::endpoint::PreviousSecret]) -> String {
        let list: Vec<Value> = previous
            .iter()
            .map(|p| serde_json::json!({"secret": self.seal(p.secret.expose()), "expires_at": p.expires_at}))
            .collect();
        Value::from(list).to_string()
    }

    /// A JSON list of secrets (strings, or objects with a `secret`) with each one sealed.
    pub(crate) fn seal_list(&self, json: &str) -> Result<String> {
        map_list(json, |s| Ok(self.seal(s)))
    }

    /// A stored JSON list of secrets with each one opened.
    pub(crate) fn open_list(&self, json: &str) -> Result<String> {
        map_list(json, |s| self.open(s))
    }

    /// The stored value `stored` should become: sealed under the current key when it is plain,
    /// or (with `rotate`) sealed under another key. `None` when it stays; an error when it does
    /// not open.
    fn reseal(&self, stored: &str, rotate: bool) -> Result<Option<String>> {
        let plain = self.open(stored)?;
        let Some(keys) = &self.0 else {
            return Ok(None);
        };
        let stays = keys.is_current(stored) || (is_sealed(stored) && !rotate);
        Ok((!stays).then(|| keys.seal(&plain)))
    }

    fn reseal_list(&self, json: &str, rotate: bool) -> Result<Option<String>> {
        let mut changed = false;
        let mapped = map_list(json, |s| {
            Ok(match self.reseal(s, rotate)? {
                Some(sealed) => {
                    changed = true;
                    sealed
                }
                None => s.to_owned(),
            })
        })?;
        Ok(changed.then_some(mapped))
    }
}

/// `json` (an array of strings, or of objects with a string `secret`) with `f` applied to each
/// secret.
fn map_list(json: &str, mut f: impl FnMut(&str) -> Result<String>) -> Result<String> {
    let corrupt = |m: String| StoreError::Corrupt {
        table: "secrets",
        message: m,
    };
    let mut list: Vec<Value> =
        serde_json::from_str(json).map_err(|e| corrupt(format!("a list of secrets: {e}")))?;
    for item in &mut list {
        let slot = match item {
            Value::Object(entry) => entry.get_mut("secret"),
            other => Some(other),
        };
        match slot {
            Some(Value::String(s)) => *s = f(s)?,
            _ => return Err(corrupt("a list of secrets holds a non-string".into())),
        }
    }
    Ok(Value::from(list).to_string())
}

/// What [`Store::seal_secrets`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sealed {
    /// Rows read (endpoints and sources).
    pub rows: u64,
    /// Rows with a value to seal anew.
    pub needed: u64,
    /// Of those, the rows rewritten; the others changed since they were read (they were
    /// written sealed, under the key of whoever wrote them).
    pub rewritten: u64,
}

impl Sealed {
    /// Counts a row read, and one needing a rewrite when `resealed` holds its new values.
    fn count<T>(&mut self, resealed: Option<T>) -> Option<T> {
        self.rows += 1;
        self.needed += u64::from(resealed.is_some());
        resealed
    }
}

/// A row's two secret columns to write back, each new or as read; `None` when neither changes.
fn both(a: Option<String>, b: Option<String>, read: (&str, &str)) -> Option<(String, String)> {
    if a.is_none() && b.is_none() {
        return None;
    }
    Some((
        a.unwrap_or_else(|| read.0.to_owned()),
        b.unwrap_or_else(|| read.1.to_owned()),
    ))
}

const ENDPOINT_SECRETS: Sql = Sql {
    postgres: "SELECT id, secret, previous_secrets::text FROM kurir_endpoints \
        WHERE deleted_at IS NULL ORDER BY id",
    sqlite: "SELECT id, secret, previous_secrets FROM kurir_endpoints WHERE deleted_at IS NULL \
        ORDER BY id",
    mysql: "SELECT CAST(id AS CHAR), CAST(secret AS CHAR), CAST(previous_secrets AS CHAR) \
        FROM kurir_endpoints WHERE deleted_at IS NULL ORDER BY id",
};

/// Rewrites one endpoint's secrets only if they are still what was read, so a rotation or an
/// update in between is never undone (it wrote sealed values of its own).
const RESEAL_ENDPOINT: Sql = Sql {
    postgres: "UPDATE kurir_endpoints SET secret = $2, previous_secrets = $3::json \
        WHERE id = $1 AND secret = $4 AND previous_secrets::text = $5",
    sqlite: "UPDATE kurir_endpoints SET secret = ?2, previous_secrets = ?3 \
        WHERE id = ?1 AND secret = ?4 AND previous_secrets = ?5",
    mysql: "UPDATE kurir_endpoints SET secret = $2, previous_secrets = $3 \
        WHERE id = $1 AND secret = $4 AND previous_secrets = $5",
};

const SOURCE_SECRETS: Sql = Sql {
    postgres: "SELECT name, secrets::text, forward_secret FROM kurir_inbox_sources ORDER BY name",
    sqlite: "SELECT name, secrets, forward_secret FROM kurir_inbox_sources ORDER BY name",
    mysql: "SELECT CAST(name AS CHAR), CAST(secrets AS CHAR), CAST(forward_secret AS CHAR) \
        FROM kurir_inbox_sources ORDER BY name",
};

/// As [`RESEAL_ENDPOINT`], for a source.
const RESEAL_SOURCE: Sql = Sql {
    postgres: "UPDATE kurir_inbox_sources SET secrets = $2::json, forward_secret = $3 \
        WHERE name = $1 AND secrets::text = $4 AND forward_secret = $5",
    sqlite: "UPDATE kurir_inbox_sources SET secrets = ?2, forward_secret = ?3 \
        WHERE name = ?1 AND secrets = ?4 AND forward_secret = ?5",
    mysql: "UPDATE kurir_inbox_sources SET secrets = $2, forward_secret = $3 \
        WHERE name = $1 AND secrets = $4 AND forward_secret = $5",
};

impl Store {
    /// This store with `keys` sealing every secret it writes and opening every one it reads.
    #[must_use]
    pub fn with_keyring(mut self, keys: Arc<Keyring>) -> Self {
        let codec = SecretCodec(Some(keys));
        match &mut self {
            Store::Postgres(s) => s.secrets = codec,
            Store::Sqlite(s) => s.secrets = codec,
            Store::Mysql(s) => s.secrets = codec,
        }
        self
    }

    pub(crate) fn secrets(&self) -> &SecretCodec {
        on_backend!(self, s => &s.secrets)
    }

    /// Opens every stored secret (an error names a key the keyring lacks, or a damaged value)
    /// and seals the plain ones under the current key; with `rotate`, also those sealed under
    /// another key. Each row is rewritten on its own, only if unchanged since read.
    pub async fn seal_secrets(&self, rotate: bool) -> Result<Sealed> {
        let codec = self.secrets();
        let mut done = Sealed::default();
        let endpoints: Vec<(String, String, String)> =
            query_as_on!(self, ENDPOINT_SECRETS, fetch_all)?;
        for (id, secret, previous) in endpoints {
            let resealed = both(
                codec.reseal(&secret, rotate)?,
                codec.reseal_list(&previous, rotate)?,
                (&secret, &previous),
            );
            if let Some((s, p)) = done.count(resealed) {
                done.rewritten +=
                    execute_on!(self, RESEAL_ENDPOINT, &id, &s, &p, &secret, &previous)?;
            }
        }
        let sources: Vec<(String, String, String)> = query_as_on!(self, SOURCE_SECRETS, fetch_all)?;
        for (name, secrets, forward) in sources {
            let resealed = both(
                codec.reseal_list(&secrets, rotate)?,
                codec.reseal(&forward, rotate)?,
                (&secrets, &forward),
            );
            if let Some((s, f)) = done.count(resealed) {
                done.rewritten +=
                    execute_on!(self, RESEAL_SOURCE, &name, &s, &f, &secrets, &forward)?;
            }
        }
        Ok(done)
    }
}
