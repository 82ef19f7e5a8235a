//! What the inbox gateway asks of the store: its sources, in `kurir_inbox_sources`. (The inbox
//! events themselves are kurir-receiver's business, through [`Store::inbox`].)
//!
//! The backend-neutral [`Store`] methods and the row conversion live here; the SQL lives in
//! `postgres/sources.rs` and `sqlite/sources.rs`, one statement per operation.

use chrono::{DateTime, Utc};
use kurir_core::Scheme;

use super::{on_backend, Result, Store, StoreError};
use crate::gateway::source::InboxSource;

/// A `kurir_inbox_sources` row before its scheme and secrets are decoded.
pub(crate) struct SourceRow {
    pub name: String,
    pub scheme: String,
    pub secrets: String,
    pub tolerance_seconds: i64,
    pub forward_url: String,
    pub forward_secret: String,
    pub read_token_sha256: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl SourceRow {
    pub(crate) fn into_source(self) -> Result<InboxSource> {
        let name = self.name;
        let corrupt = |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt {
            table: "kurir_inbox_sources",
            message: format!("{what} of source {name}: {e}"),
        };
        let scheme: Scheme = self.scheme.parse().map_err(|e| corrupt("scheme", &e))?;
        let secrets: Vec<String> =
            serde_json::from_str(&self.secrets).map_err(|e| corrupt("secrets", &e))?;
        let secrets = secrets
            .iter()
            .map(|s| scheme.parse_secret(s))
            .collect::<Result<_, _>>()
            .map_err(|e| corrupt("secrets", &e))?;
        let forward_secret = kurir_core::Secret::parse(&self.forward_secret)
            .map_err(|e| corrupt("forward_secret", &e))?;
        let tolerance_seconds =
            u32::try_from(self.tolerance_seconds).map_err(|e| corrupt("tolerance_seconds", &e))?;
        Ok(InboxSource {
            name,
            scheme,
            secrets,
            tolerance_seconds,
            forward_url: self.forward_url,
            forward_secret,
            read_token_sha256: self.read_token_sha256,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The `secrets` column: a JSON array of the secret strings.
pub(crate) fn secrets_json(source: &InboxSource) -> String {
    let secrets: Vec<&str> = source.secrets.iter().map(|s| s.expose()).collect();
    serde_json::Value::from(secrets).to_string()
}

impl Store {
    /// Stores a new source; `false`, and nothing written, when its name is taken.
    pub async fn create_source(&self, source: &InboxSource) -> Result<bool> {
        on_backend!(self, s => s.insert_source(source).await)
    }

    /// One source, if it exists.
    pub async fn get_source(&self, name: &str) -> Result<Option<InboxSource>> {
        on_backend!(self, s => s.get_source(name).await)
    }

    /// Every source, oldest first.
    pub async fn list_sources(&self) -> Result<Vec<InboxSource>> {
        on_backend!(self, s => s.list_sources().await)
    }

    /// The names of every source (what the gateway's runner claims events of).
    pub async fn source_names(&self) -> Result<Vec<String>> {
        on_backend!(self, s => s.source_names().await)
    }

    /// Overwrites a source's changeable columns; `false` if it no longer exists. Callers read,
    /// change and save: of two concurrent changes to one source, the later write wins whole.
    pub async fn save_source(&self, source: &InboxSource) -> Result<bool> {
        on_backend!(self, s => s.save_source(source).await)
    }

    /// Deletes a source; `false` if it did not exist. Its events stay in `kurir_inbox`.
    pub async fn delete_source(&self, name: &str) -> Result<bool> {
        on_backend!(self, s => s.delete_source(name).await)
    }
}
