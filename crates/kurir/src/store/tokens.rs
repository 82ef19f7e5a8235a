//! Named operator tokens (`kurir_tokens`, migration 0014): created with their secret shown
//! once, listed newest first, revoked, and looked up by the SHA-256 of a presented token.
//!
//! Every check reads the row, so a token revoked or expired is refused at once by every process
//! sharing the database; expiry is compared with the database's clock, the one clock all of them
//! share (creation refuses an expiry that clock has passed, by the same comparison).

use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::rows::Ts;
use super::sql::{execute_on, query_as_on, Sql};
use super::{Result, Store, StoreError};
use crate::access::{Actor, Role, Scope, Via};

/// What a token starts with, so secret scanners and people can tell one when they see it.
pub const TOKEN_PREFIX: &str = "kurir_";

/// What a subscriber token starts with: [`TOKEN_PREFIX`] and `sub_`, so whoever finds one (a
/// secret scanner, a support engineer) can tell it reaches one subscriber, not the installation.
/// Only a label: what a token may do is its row's (`subscriber_id`), never its prefix.
pub const SUBSCRIBER_TOKEN_PREFIX: &str = "kurir_sub_";

/// What a token's id starts with.
pub const ID_PREFIX: &str = "tok_";

/// A token's id: `tok_` and 32 lowercase hex digits (a UUIDv7, so ids sort by creation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenId(String);

impl TokenId {
    fn generate() -> Self {
        Self(format!("{ID_PREFIX}{}", uuid::Uuid::now_v7().simple()))
    }

    /// `text` if it is a token id; `None` otherwise (no token has it, so no query is needed).
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix(ID_PREFIX)?;
        let valid = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        valid.then(|| Self(text.to_owned()))
    }

    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TokenId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A token to create.
#[derive(Clone, Debug)]
pub struct NewToken {
    /// Its name, recorded as the actor of what its holder does; unique. Empty: its id.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// When it stops working, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// The name of the token that created it.
    pub created_by: String,
    /// Where the creation came from.
    pub created_via: Via,
    /// The subscriber it is confined to (a subscriber token); `None`: an operator token.
    pub subscriber_id: Option<String>,
}

/// A token as stored: everything but its secret.
#[derive(Clone, Debug)]
pub struct TokenRecord {
    /// `tok_…`.
    pub id: TokenId,
    /// Its name.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it stops working, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The name of the token that created it.
    pub created_by: String,
    /// Where the creation came from (`api`, `cli`, `dashboard`).
    pub created_via: String,
    /// The name of the token that revoked it.
    pub revoked_by: Option<String>,
    /// Where the revocation came from.
    pub revoked_via: Option<String>,
    /// The subscriber it is confined to; `None`: an operator token.
    pub subscriber_id: Option<String>,
}

impl TokenRecord {
    /// The actor this token stands for, acting through `via`: its name and role, confined to
    /// its subscriber if it has one.
    pub fn actor(self, via: Via) -> Actor {
        Actor {
            token_id: Some(self.id.to_string()),
            name: self.name,
            role: self.role,
            scope: self.subscriber_id.map_or(Scope::All, Scope::Subscriber),
            via,
        }
    }
}

/// What [`Store::create_token`] did.
#[derive(Debug)]
pub enum TokenCreated {
    /// Created; the secret is in no row, so this is the only time it is known.
    Created {
        /// The stored token (boxed: the other answers are small).
        token: Box<TokenRecord>,
        /// The bearer token itself.
        secret: crate::redact::Sensitive,
    },
    /// Another token (perhaps revoked) has this name.
    NameTaken,
    /// `expires_at` is not after the database's clock: the token would never work.
    ExpiresInThePast,
    /// The subscriber it was for does not exist, or is deleted.
    NoSubscriber,
}

/// What [`Store::revoke_token`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked now.
    Revoked,
    /// It had been revoked before; nothing changed (who revoked it stays recorded).
    AlreadyRevoked,
    /// No token has this id.
    NotFound,
}

/// The SHA-256, in hex, that a token is stored and looked up by.
pub fn token_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A new random secret: 32 bytes in hex after [`SUBSCRIBER_TOKEN_PREFIX`] for a subscriber's
/// token, [`TOKEN_PREFIX`] otherwise.
fn new_secret(for_subscriber: bool) -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let prefix = match for_subscriber {
        true => SUBSCRIBER_TOKEN_PREFIX,
        false => TOKEN_PREFIX,
    };
    format!("{prefix}{}", hex::encode(bytes))
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: String,
    name: String,
    role: String,
    created_at: Ts,
    expires_at: Option<Ts>,
    revoked_at: Option<Ts>,
    created_by: String,
    created_via: String,
    revoked_by: Option<String>,
    revoked_via: Option<String>,
    subscriber_id: Option<String>,
}

impl TryFrom<TokenRow> for TokenRecord {
    type Error = StoreError;

    fn try_from(r: TokenRow) -> Result<Self> {
        let corrupt = |message: String| StoreError::Corrupt {
            table: "kurir_tokens",
            message,
        };
        Ok(Self {
            role: (r.role.parse()).map_err(|e| corrupt(format!("{}: {e}", r.id)))?,
            id: TokenId::parse(&r.id)
                .ok_or_else(|| corrupt(format!("'{}' is not a token id", r.id)))?,
            name: r.name,
            created_at: r.created_at.0,
            expires_at: r.expires_at.map(|t| t.0),
            revoked_at: r.revoked_at.map(|t| t.0),
            created_by: r.created_by,
            created_via: r.created_via,
            revoked_by: r.revoked_by,
            revoked_via: r.revoked_via,
            subscriber_id: r.subscriber_id,
        })
    }
}

/// The columns a [`TokenRow`] reads, per dialect (MySQL's text comes back as binary otherwise).
macro_rules! token_columns {
    (mysql) => {
        "CAST(id AS CHAR) AS id, CAST(name AS CHAR) AS name, \
        CAST(role AS CHAR) AS role, created_at, expires_at, revoked_at, \
        CAST(created_by AS CHAR) AS created_by, CAST(created_via AS CHAR) AS created_via, \
        CAST(revoked_by AS CHAR) AS revoked_by, CAST(revoked_via AS CHAR) AS revoked_via, \
        CAST(subscriber_id AS CHAR) AS subscriber_id"
    };
    ($dialect:tt) => {
        "id, name, role, created_at, expires_at, revoked_at, \
        created_by, created_via, revoked_by, revoked_via, subscriber_id"
    };
}

/// A token still works when it is not revoked, not expired by the database's clock, and, if it
/// is a subscriber's, its subscriber is not deleted (deleting a subscriber ends its tokens at
/// once, as revoking them would). A literal, for `concat!`.
macro_rules! in_force {
    ($now:literal) => {
        concat!(
            "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ",
            $now,
            ") AND (subscriber_id IS NULL OR EXISTS (SELECT 1 FROM kurir_subscribers s \
             WHERE s.id = kurir_tokens.subscriber_id AND s.deleted_at IS NULL))"
        )
    };
}

/// Inserts a token unless its expiry is not after the database's clock, or the subscriber it is
/// for (`$8`, if any) does not exist or is deleted (then no row).
const INSERT: Sql = Sql {
    postgres: concat!(
        "INSERT INTO kurir_tokens \
            (id, name, role, secret_hash, expires_at, created_by, created_via, subscriber_id) \
        SELECT $1, $2, $3, $4, $5, $6, $7, $8 \
        WHERE ($5::timestamptz IS NULL OR $5 > now()) \
          AND ($8::text IS NULL OR EXISTS (SELECT 1 FROM kurir_subscribers \
              WHERE id = $8 AND deleted_at IS NULL)) \
        RETURNING ",
        token_columns!(postgres)
    ),
    sqlite: concat!(
        "INSERT INTO kurir_tokens \
            (id, name, role, secret_hash, expires_at, created_by, created_via, subscriber_id) \
        SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 \
        WHERE (?5 IS NULL OR ?5 > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) \
          AND (?8 IS NULL OR EXISTS (SELECT 1 FROM kurir_subscribers \
              WHERE id = ?8 AND deleted_at IS NULL)) \
        RETURNING ",
        token_columns!(sqlite)
    ),
    mysql: "INSERT INTO kurir_tokens \
            (id, name, role, secret_hash, expires_at, created_by, created_via, subscriber_id) \
        SELECT $1, $2, $3, $4, $5, $6, $7, $8 FROM DUAL \
        WHERE ($5 IS NULL OR $5 > UTC_TIMESTAMP(3)) \
          AND ($8 IS NULL OR EXISTS (SELECT 1 FROM kurir_subscribers \
              WHERE id = $8 AND deleted_at IS NULL))",
};

const BY_ID: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        token_columns!(postgres),
        " FROM kurir_tokens WHERE id = $1"
    ),
    sqlite: concat!(
        "SELECT ",
        token_columns!(sqlite),
        " FROM kurir_tokens WHERE id = ?1"
    ),
    mysql: concat!(
        "SELECT ",
        token_columns!(mysql),
        " FROM kurir_tokens WHERE id = $1"
    ),
};

/// The token with this hash that still works ([`in_force!`]).
const ACTIVE_BY_HASH: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        token_columns!(postgres),
        " FROM kurir_tokens WHERE secret_hash = $1 AND ",
        in_force!("now()")
    ),
    sqlite: concat!(
        "SELECT ",
        token_columns!(sqlite),
        " FROM kurir_tokens WHERE secret_hash = ?1 AND ",
        in_force!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
    ),
    mysql: concat!(
        "SELECT ",
        token_columns!(mysql),
        " FROM kurir_tokens WHERE secret_hash = $1 AND ",
        in_force!("UTC_TIMESTAMP(3)")
    ),
};

/// The token with this id, if it still works (as [`ACTIVE_BY_HASH`]).
const ACTIVE_BY_ID: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        token_columns!(postgres),
        " FROM kurir_tokens WHERE id = $1 AND ",
        in_force!("now()")
    ),
    sqlite: concat!(
        "SELECT ",
        token_columns!(sqlite),
        " FROM kurir_tokens WHERE id = ?1 AND ",
        in_force!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
    ),
    mysql: concat!(
        "SELECT ",
        token_columns!(mysql),
        " FROM kurir_tokens WHERE id = $1 AND ",
        in_force!("UTC_TIMESTAMP(3)")
    ),
};

/// Newest first (ids are UUIDv7s, so they sort by creation), below the cursor.
const LIST: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        token_columns!(postgres),
        " FROM kurir_tokens WHERE ($1::text IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
    ),
    sqlite: concat!(
        "SELECT ",
        token_columns!(sqlite),
        " FROM kurir_tokens WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2"
    ),
    mysql: concat!(
        "SELECT ",
        token_columns!(mysql),
        " FROM kurir_tokens WHERE ($1 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
    ),
};

/// One subscriber's tokens, newest first, below the cursor: a walk of the index on
/// `(subscriber_id, id)` (migration 0019; MySQL's foreign key index).
const LIST_OF_SUBSCRIBER: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        token_columns!(postgres),
        " FROM kurir_tokens WHERE subscriber_id = $3 AND ($1::text IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
    ),
    sqlite: concat!(
        "SELECT ",
        token_columns!(sqlite),
        " FROM kurir_tokens WHERE subscriber_id = ?3 AND (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2"
    ),
    mysql: concat!(
        "SELECT ",
        token_columns!(mysql),
        " FROM kurir_tokens WHERE subscriber_id = $3 AND ($1 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
    ),
};

/// Revokes a token still in force, of the subscriber `$4` when given; a revoked one keeps its
/// first revocation.
const REVOKE: Sql = Sql {
    postgres: "UPDATE kurir_tokens SET revoked_at = now(), revoked_by = $2, revoked_via = $3 \
        WHERE id = $1 AND revoked_at IS NULL AND ($4::text IS NULL OR subscriber_id = $4)",
    sqlite: "UPDATE kurir_tokens SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
            revoked_by = ?2, revoked_via = ?3 \
        WHERE id = ?1 AND revoked_at IS NULL AND (?4 IS NULL OR subscriber_id = ?4)",
    mysql: "UPDATE kurir_tokens SET revoked_at = UTC_TIMESTAMP(3), revoked_by = $2, \
            revoked_via = $3 \
        WHERE id = $1 AND revoked_at IS NULL AND ($4 IS NULL OR subscriber_id = $4)",
};

impl Store {
    /// Creates a token with a new random secret (32 bytes, hex, after [`TOKEN_PREFIX`]); only its
    /// hash is stored. One insert, which refuses an expiry the database's clock has passed; a
    /// name already taken is [`TokenCreated::NameTaken`].
    pub async fn create_token(&self, new: &NewToken) -> Result<TokenCreated> {
        let secret = new_secret(new.subscriber_id.is_some());
        let id = TokenId::generate().0;

        let expires_at = new.expires_at.map(Ts);
        let (role, hash, via) = (
            new.role.as_str(),
            token_hash(&secret),
            new.created_via.as_str(),
        );
        let name = match new.name.as_str() {
            "" => &id,
            given => given,
        };
        let (by, subscriber) = (&new.created_by, new.subscriber_id.as_deref());
        let inserted = match self {
            // MySQL has no RETURNING: the row is read back when the insert took.
            Store::Mysql(_) => {
                match execute_on!(
                    self, INSERT, &id, name, role, &hash, expires_at, by, via, subscriber
                ) {
                    Ok(0) => Ok(None),
                    Ok(_) => query_as_on!(self, BY_ID, fetch_optional, &id),
                    Err(e) => Err(e),
                }
            }
            _ => query_as_on!(
                self,
                INSERT,
                fetch_optional,
                &id,
                name,
                role,
                &hash,
                expires_at,
                by,
                via,
                subscriber
            ),
        };
        let row: Option<TokenRow> = match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Ok(TokenCreated::NameTaken)
            }
            // A subscriber deleted by hand (no tombstone) between the check and the insert.
            Err(sqlx::Error::Database(e)) if e.is_foreign_key_violation() => {
                return Ok(TokenCreated::NoSubscriber)
            }
            other => other?,
        };
        Ok(match row {
            Some(row) => TokenCreated::Created {
                token: Box::new(row.try_into()?),
                secret: secret.into(),
            },
            None => self.why_not_created(subscriber).await?,
        })
    }

    /// Why [`INSERT`] made no row: the subscriber is gone (read now), or else the expiry has
    /// passed.
    async fn why_not_created(&self, subscriber: Option<&str>) -> Result<TokenCreated> {
        if let Some(id) = subscriber {
            if (self.subscriber(id).await?).is_none_or(|s| s.deleted_at.is_some()) {
                return Ok(TokenCreated::NoSubscriber);
            }
        }
        Ok(TokenCreated::ExpiresInThePast)
    }

    /// The token whose secret has this hash ([`token_hash`]), if it still works. One read by
    /// the unique index, no lock.
    pub async fn active_token(&self, hash: &str) -> Result<Option<TokenRecord>> {
        let row: Option<TokenRow> = query_as_on!(self, ACTIVE_BY_HASH, fetch_optional, hash)?;
        row.map(TryInto::try_into).transpose()
    }

    /// The token with this id, if it still works (a dashboard session's check). One read by
    /// primary key, no lock.
    pub async fn active_token_by_id(&self, id: &str) -> Result<Option<TokenRecord>> {
        let row: Option<TokenRow> = query_as_on!(self, ACTIVE_BY_ID, fetch_optional, id)?;
        row.map(TryInto::try_into).transpose()
    }

    /// The tokens, revoked and expired ones too, newest first, with an id below `before_id`:
    /// every token, or only `subscriber`'s.
    pub async fn list_tokens(
        &self,
        before_id: Option<&str>,
        limit: u32,
        subscriber: Option<&str>,
    ) -> Result<Vec<TokenRecord>> {
        let limit = i64::from(limit);
        let rows: Vec<TokenRow> = match subscriber {
            None => query_as_on!(self, LIST, fetch_all, before_id, limit)?,
            Some(s) => query_as_on!(self, LIST_OF_SUBSCRIBER, fetch_all, before_id, limit, s)?,
        };
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Revokes a token (of `subscriber` only, when given: another's answers
    /// [`Revoked::NotFound`]), recording who did it and from where: from this statement's
    /// commit, no process accepts it. One update of the row; a token revoked before keeps its
    /// first revocation ([`Revoked::AlreadyRevoked`]).
    pub async fn revoke_token(
        &self,
        id: &TokenId,
        by: &str,
        via: Via,
        subscriber: Option<&str>,
    ) -> Result<Revoked> {
        if execute_on!(self, REVOKE, id.as_str(), by, via.as_str(), subscriber)? > 0 {
            return Ok(Revoked::Revoked);
        }
        let row: Option<TokenRow> = query_as_on!(self, BY_ID, fetch_optional, id.as_str())?;
        Ok(match row {
            Some(r) if subscriber.is_none_or(|s| r.subscriber_id.as_deref() == Some(s)) => {
                Revoked::AlreadyRevoked
            }
            _ => Revoked::NotFound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_are_checked_before_any_query() {
        let id = TokenId::generate();
        assert_eq!(TokenId::parse(id.as_str()), Some(id));
        for bad in ["", "tok_", "tok_XYZ", "ep_0190", "tok_' OR 1=1 --"] {
            assert_eq!(TokenId::parse(bad), None, "{bad}");
        }
    }
}
