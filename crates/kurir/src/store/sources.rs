//! What the inbox gateway asks of the store: its sources, in `kurir_inbox_sources`. (The inbox
//! events themselves are kurir-receiver's business, through [`Store::inbox`].)
//!
//! One statement per operation and per dialect, side by side, decoded into [`SourceRow`]. Each
//! write touches one row (PostgreSQL and MySQL lock it for the statement; SQLite takes its write
//! lock); reads take no locks. MySQL's `INSERT IGNORE` stands for `ON CONFLICT DO NOTHING`: it
//! would also let pass, as a warning, a value the table's checks refuse, and every value here was
//! checked by the API before.

use kurir_core::Scheme;

use super::rows::Ts;
use super::sql::{execute_on, query_as_on, Sql};
use super::{Result, Store, StoreError};
use crate::inbox_source::InboxSource;

/// A `kurir_inbox_sources` row before its scheme and secrets are decoded.
#[derive(sqlx::FromRow)]
pub(crate) struct SourceRow {
    pub name: String,
    pub scheme: String,
    pub secrets: String,
    pub tolerance_seconds: i64,
    pub forward_url: String,
    pub forward_secret: String,
    pub read_token_sha256: String,
    pub created_at: Ts,
    pub updated_at: Ts,
}

impl SourceRow {
    /// The source, its secrets opened by `codec`.
    pub(crate) fn into_source(self, codec: &super::SecretCodec) -> Result<InboxSource> {
        let name = self.name;
        let corrupt = |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt {
            table: "kurir_inbox_sources",
            message: format!("{what} of source {name}: {e}"),
        };
        let scheme: Scheme = self.scheme.parse().map_err(|e| corrupt("scheme", &e))?;
        let secrets: Vec<String> = serde_json::from_str(&codec.open_list(&self.secrets)?)
            .map_err(|e| corrupt("secrets", &e))?;
        let secrets = secrets
            .iter()
            .map(|s| scheme.parse_secret(s))
            .collect::<Result<_, _>>()
            .map_err(|e| corrupt("secrets", &e))?;
        let forward_secret = kurir_core::Secret::parse(&codec.open(&self.forward_secret)?)
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
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
        })
    }
}

/// The `secrets` column: a JSON array of the secret strings, each sealed by `codec`.
pub(crate) fn secrets_json(source: &InboxSource, codec: &super::SecretCodec) -> String {
    let secrets: Vec<String> = source
        .secrets
        .iter()
        .map(|s| codec.seal(s.expose()))
        .collect();
    serde_json::Value::from(secrets).to_string()
}

const INSERT_SOURCE: Sql = Sql {
    postgres: "INSERT INTO kurir_inbox_sources (name, scheme, secrets, tolerance_seconds, \
        forward_url, forward_secret, read_token_sha256, created_at, updated_at) \
        VALUES ($1, $2, $3::json, $4, $5, $6, $7, $8, $8) ON CONFLICT (name) DO NOTHING",
    sqlite: "INSERT INTO kurir_inbox_sources (name, scheme, secrets, tolerance_seconds, \
        forward_url, forward_secret, read_token_sha256, created_at, updated_at) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) ON CONFLICT (name) DO NOTHING",
    mysql: "INSERT IGNORE INTO kurir_inbox_sources (name, scheme, secrets, tolerance_seconds, \
        forward_url, forward_secret, read_token_sha256, created_at, updated_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)",
};

const GET_SOURCE: Sql = Sql {
    postgres: "SELECT name, scheme, secrets::text AS secrets, \
        tolerance_seconds::int8 AS tolerance_seconds, forward_url, forward_secret, \
        read_token_sha256, created_at, updated_at FROM kurir_inbox_sources WHERE name = $1",
    sqlite: "SELECT name, scheme, secrets, tolerance_seconds, forward_url, forward_secret, \
        read_token_sha256, created_at, updated_at FROM kurir_inbox_sources WHERE name = ?1",
    mysql: "SELECT CAST(name AS CHAR) AS name, CAST(scheme AS CHAR) AS scheme, \
        CAST(secrets AS CHAR) AS secrets, tolerance_seconds, \
        CAST(forward_url AS CHAR) AS forward_url, CAST(forward_secret AS CHAR) AS forward_secret, \
        CAST(read_token_sha256 AS CHAR) AS read_token_sha256, created_at, updated_at \
        FROM kurir_inbox_sources WHERE name = $1",
};

const LIST_SOURCES: Sql = Sql {
    postgres: "SELECT name, scheme, secrets::text AS secrets, \
        tolerance_seconds::int8 AS tolerance_seconds, forward_url, forward_secret, \
        read_token_sha256, created_at, updated_at FROM kurir_inbox_sources \
        ORDER BY created_at, name",
    sqlite: "SELECT name, scheme, secrets, tolerance_seconds, forward_url, forward_secret, \
        read_token_sha256, created_at, updated_at FROM kurir_inbox_sources \
        ORDER BY created_at, name",
    mysql: "SELECT CAST(name AS CHAR) AS name, CAST(scheme AS CHAR) AS scheme, \
        CAST(secrets AS CHAR) AS secrets, tolerance_seconds, \
        CAST(forward_url AS CHAR) AS forward_url, CAST(forward_secret AS CHAR) AS forward_secret, \
        CAST(read_token_sha256 AS CHAR) AS read_token_sha256, created_at, updated_at \
        FROM kurir_inbox_sources ORDER BY created_at, name",
};

const SOURCE_NAMES_SQL: &str = "SELECT name FROM kurir_inbox_sources ORDER BY name";
const SOURCE_NAMES: Sql = Sql {
    postgres: SOURCE_NAMES_SQL,
    sqlite: SOURCE_NAMES_SQL,
    mysql: "SELECT CAST(name AS CHAR) FROM kurir_inbox_sources ORDER BY name",
};

const SAVE_SOURCE: Sql = Sql {
    postgres: "UPDATE kurir_inbox_sources SET scheme = $2, secrets = $3::json, \
        tolerance_seconds = $4, forward_url = $5, updated_at = $6 WHERE name = $1",
    sqlite: "UPDATE kurir_inbox_sources SET scheme = ?2, secrets = ?3, tolerance_seconds = ?4, \
        forward_url = ?5, updated_at = ?6 WHERE name = ?1",
    mysql: "UPDATE kurir_inbox_sources SET scheme = $2, secrets = $3, tolerance_seconds = $4, \
        forward_url = $5, updated_at = $6 WHERE name = $1",
};

const DELETE_SOURCE: Sql = Sql {
    postgres: "DELETE FROM kurir_inbox_sources WHERE name = $1",
    sqlite: "DELETE FROM kurir_inbox_sources WHERE name = ?1",
    mysql: "DELETE FROM kurir_inbox_sources WHERE name = $1",
};

impl Store {
    /// Stores a new source; `false`, and nothing written, when its name is taken (the primary
    /// key decides between concurrent creators).
    pub async fn create_source(&self, s: &InboxSource) -> Result<bool> {
        let inserted = execute_on!(
            self,
            INSERT_SOURCE,
            &s.name,
            s.scheme.as_str(),
            secrets_json(s, self.secrets()),
            i64::from(s.tolerance_seconds),
            &s.forward_url,
            self.secrets().seal(s.forward_secret.expose()),
            &s.read_token_sha256,
            Ts(s.created_at),
        )?;
        Ok(inserted == 1)
    }

    /// One source, if it exists.
    pub async fn get_source(&self, name: &str) -> Result<Option<InboxSource>> {
        let row: Option<SourceRow> = query_as_on!(self, GET_SOURCE, fetch_optional, name)?;
        row.map(|r| r.into_source(self.secrets())).transpose()
    }

    /// Every source, oldest first.
    pub async fn list_sources(&self) -> Result<Vec<InboxSource>> {
        let rows: Vec<SourceRow> = query_as_on!(self, LIST_SOURCES, fetch_all)?;
        rows.into_iter()
            .map(|r| r.into_source(self.secrets()))
            .collect()
    }

    /// The names of every source (what the gateway's runner claims events of).
    pub async fn source_names(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = query_as_on!(self, SOURCE_NAMES, fetch_all)?;
        Ok(rows.into_iter().map(|(name,)| name).collect())
    }

    /// Overwrites a source's changeable columns; `false` if it no longer exists. Callers read,
    /// change and save: of two concurrent changes to one source, the later write wins whole.
    pub async fn save_source(&self, s: &InboxSource) -> Result<bool> {
        let saved = execute_on!(
            self,
            SAVE_SOURCE,
            &s.name,
            s.scheme.as_str(),
            secrets_json(s, self.secrets()),
            i64::from(s.tolerance_seconds),
            &s.forward_url,
            Ts(s.updated_at),
        )?;
        Ok(saved == 1)
    }

    /// Deletes a source; `false` if it did not exist. Its events stay in `kurir_inbox`.
    pub async fn delete_source(&self, name: &str) -> Result<bool> {
        Ok(execute_on!(self, DELETE_SOURCE, name)? == 1)
    }
}
