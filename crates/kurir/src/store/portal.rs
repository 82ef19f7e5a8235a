//! The subscriber portal's links and sessions (`kurir_portal_links`, `kurir_portal_sessions`,
//! migration 0021; issue 31).
//!
//! A link is created for one subscriber with its token's SHA-256 only, and opened at most once:
//! opening it inserts the session, then marks the link used, and a second opener that lost the
//! race ends the session it had just made. A session is a row read on every portal request
//! ([`Store::portal_session`]): revoking it, or disabling or deleting its subscriber, signs it
//! out at its next request on every process sharing the database. Expiries are compared with
//! the database's clock, the one all processes share.

use chrono::{DateTime, Utc};
use rand::RngCore;

use super::rows::Ts;
use super::sql::{execute_on, query_as_on, Sql};
use super::{Result, Store};
use crate::access::Via;

/// What a portal link's token starts with, so people and secret scanners can tell one.
pub const LINK_TOKEN_PREFIX: &str = "kurir_portal_";

/// A portal link to create.
#[derive(Clone, Debug)]
pub struct NewPortalLink {
    /// The subscriber whose portal it opens.
    pub subscriber_id: String,
    /// Whether its session may change nothing.
    pub read_only: bool,
    /// Where the portal's "back" link goes.
    pub return_url: Option<String>,
    /// When it stops opening.
    pub expires_at: DateTime<Utc>,
    /// The actor that made it.
    pub created_by: String,
    /// Where the request came from.
    pub created_via: Via,
}

/// A created link: its id and the token, known only now.
#[derive(Debug)]
pub struct PortalLink {
    /// `pl_…`.
    pub id: String,
    /// The token that opens it (only its hash is stored).
    pub token: crate::redact::Sensitive,
}

/// A session in force, as every portal request reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortalSession {
    /// `ps_…`.
    pub id: String,
    /// Whose portal it is.
    pub subscriber_id: String,
    /// Whether it may change nothing.
    pub read_only: bool,
    /// Where the portal's "back" link goes.
    pub return_url: Option<String>,
    /// When it ends.
    pub expires_at: DateTime<Utc>,
}

/// What opening a link did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A session started.
    Session(PortalSession),
    /// The link was opened before.
    Used,
    /// Its time is up.
    Expired,
    /// Its subscriber's sessions and links were revoked.
    Revoked,
    /// Its subscriber is disabled or deleted.
    SubscriberUnavailable,
    /// No link has this token.
    Unknown,
}

/// An id with `prefix` and a UUIDv7 in hex (ids sort by creation).
fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

/// A new random link token: 32 bytes in hex after [`LINK_TOKEN_PREFIX`].
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("{LINK_TOKEN_PREFIX}{}", hex::encode(bytes))
}

/// A subscriber that may use its portal: neither disabled nor deleted. A literal, for `concat!`;
/// `$alias.subscriber_id` names it.
macro_rules! subscriber_active {
    ($alias:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM kurir_subscribers sub WHERE sub.id = ",
            $alias,
            ".subscriber_id AND sub.deleted_at IS NULL AND sub.disabled_at IS NULL)"
        )
    };
}

const INSERT_LINK: Sql = Sql {
    postgres: "INSERT INTO kurir_portal_links (id, token_hash, subscriber_id, read_only, \
        return_url, created_by, created_via, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    sqlite: "INSERT INTO kurir_portal_links (id, token_hash, subscriber_id, read_only, \
        return_url, created_by, created_via, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    mysql: "INSERT INTO kurir_portal_links (id, token_hash, subscriber_id, read_only, \
        return_url, created_by, created_via, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
};

/// A session from the link with this token hash (`$2`), if the link is unused, unrevoked, not
/// expired and its subscriber active.
const OPEN: Sql = Sql {
    postgres: concat!(
        "INSERT INTO kurir_portal_sessions (id, subscriber_id, link_id, read_only, return_url, \
            expires_at) \
        SELECT $1, l.subscriber_id, l.id, l.read_only, l.return_url, $3 \
        FROM kurir_portal_links l WHERE l.token_hash = $2 AND l.used_at IS NULL \
        AND l.revoked_at IS NULL AND l.expires_at > now() AND ",
        subscriber_active!("l")
    ),
    sqlite: concat!(
        "INSERT INTO kurir_portal_sessions (id, subscriber_id, link_id, read_only, return_url, \
            expires_at) \
        SELECT ?1, l.subscriber_id, l.id, l.read_only, l.return_url, ?3 \
        FROM kurir_portal_links l WHERE l.token_hash = ?2 AND l.used_at IS NULL \
        AND l.revoked_at IS NULL AND l.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AND ",
        subscriber_active!("l")
    ),
    mysql: concat!(
        "INSERT INTO kurir_portal_sessions (id, subscriber_id, link_id, read_only, return_url, \
            expires_at) \
        SELECT $1, l.subscriber_id, l.id, l.read_only, l.return_url, $3 \
        FROM kurir_portal_links l WHERE l.token_hash = $2 AND l.used_at IS NULL \
        AND l.revoked_at IS NULL AND l.expires_at > UTC_TIMESTAMP(3) AND ",
        subscriber_active!("l")
    ),
};

/// Marks the link used, unless another opener did first.
const MARK_USED: Sql = Sql {
    postgres: "UPDATE kurir_portal_links SET used_at = now() \
        WHERE token_hash = $1 AND used_at IS NULL",
    sqlite: "UPDATE kurir_portal_links SET used_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
        WHERE token_hash = ?1 AND used_at IS NULL",
    mysql: "UPDATE kurir_portal_links SET used_at = UTC_TIMESTAMP(3) \
        WHERE token_hash = $1 AND used_at IS NULL",
};

/// Why a link did not open: `(used, revoked, expired, subscriber active)` as 0 or 1.
const LINK_STATE: Sql = Sql {
    postgres: concat!(
        "SELECT (l.used_at IS NOT NULL)::int4::int8, (l.revoked_at IS NOT NULL)::int4::int8, \
            (l.expires_at <= now())::int4::int8, (",
        subscriber_active!("l"),
        ")::int4::int8 FROM kurir_portal_links l WHERE l.token_hash = $1"
    ),
    sqlite: concat!(
        "SELECT l.used_at IS NOT NULL, l.revoked_at IS NOT NULL, \
            l.expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ",
        subscriber_active!("l"),
        " FROM kurir_portal_links l WHERE l.token_hash = ?1"
    ),
    mysql: concat!(
        "SELECT CAST(l.used_at IS NOT NULL AS SIGNED), CAST(l.revoked_at IS NOT NULL AS SIGNED), \
            CAST(l.expires_at <= UTC_TIMESTAMP(3) AS SIGNED), CAST(",
        subscriber_active!("l"),
        " AS SIGNED) FROM kurir_portal_links l WHERE l.token_hash = $1"
    ),
};

/// The session `$1` if it is in force: not revoked, not expired, its subscriber active.
const SESSION: Sql = Sql {
    postgres: concat!(
        "SELECT s.id, s.subscriber_id, s.read_only, s.return_url, s.expires_at \
        FROM kurir_portal_sessions s WHERE s.id = $1 AND s.revoked_at IS NULL \
        AND s.expires_at > now() AND ",
        subscriber_active!("s")
    ),
    sqlite: concat!(
        "SELECT s.id, s.subscriber_id, s.read_only, s.return_url, s.expires_at \
        FROM kurir_portal_sessions s WHERE s.id = ?1 AND s.revoked_at IS NULL \
        AND s.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AND ",
        subscriber_active!("s")
    ),
    mysql: concat!(
        "SELECT CAST(s.id AS CHAR) AS id, CAST(s.subscriber_id AS CHAR) AS subscriber_id, \
            s.read_only, CAST(s.return_url AS CHAR) AS return_url, s.expires_at \
        FROM kurir_portal_sessions s WHERE s.id = $1 AND s.revoked_at IS NULL \
        AND s.expires_at > UTC_TIMESTAMP(3) AND ",
        subscriber_active!("s")
    ),
};

/// Ends one session.
const END_SESSION: Sql = Sql {
    postgres: "UPDATE kurir_portal_sessions SET revoked_at = now() \
        WHERE id = $1 AND revoked_at IS NULL",
    sqlite: "UPDATE kurir_portal_sessions SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
        WHERE id = ?1 AND revoked_at IS NULL",
    mysql: "UPDATE kurir_portal_sessions SET revoked_at = UTC_TIMESTAMP(3) \
        WHERE id = $1 AND revoked_at IS NULL",
};

/// Ends every session of subscriber `$1` still open (through its partial index).
const END_SESSIONS_OF: Sql = Sql {
    postgres: "UPDATE kurir_portal_sessions SET revoked_at = now() \
        WHERE subscriber_id = $1 AND revoked_at IS NULL",
    sqlite: "UPDATE kurir_portal_sessions SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
        WHERE subscriber_id = ?1 AND revoked_at IS NULL",
    mysql: "UPDATE kurir_portal_sessions SET revoked_at = UTC_TIMESTAMP(3) \
        WHERE subscriber_id = $1 AND revoked_at IS NULL",
};

/// Revokes every link of subscriber `$1` not yet used (through its partial index).
const REVOKE_LINKS_OF: Sql = Sql {
    postgres: "UPDATE kurir_portal_links SET revoked_at = now() \
        WHERE subscriber_id = $1 AND used_at IS NULL AND revoked_at IS NULL",
    sqlite: "UPDATE kurir_portal_links SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
        WHERE subscriber_id = ?1 AND used_at IS NULL AND revoked_at IS NULL",
    mysql: "UPDATE kurir_portal_links SET revoked_at = UTC_TIMESTAMP(3) \
        WHERE subscriber_id = $1 AND used_at IS NULL AND revoked_at IS NULL",
};

#[derive(sqlx::FromRow)]
struct SessionRow {
    id: String,
    subscriber_id: String,
    read_only: bool,
    return_url: Option<String>,
    expires_at: Ts,
}

impl From<SessionRow> for PortalSession {
    fn from(r: SessionRow) -> Self {
        Self {
            id: r.id,
            subscriber_id: r.subscriber_id,
            read_only: r.read_only,
            return_url: r.return_url,
            expires_at: r.expires_at.0,
        }
    }
}

impl Store {
    /// Creates a portal link with a new random token, storing only its hash. One insert; the
    /// subscriber's foreign key refuses one that does not exist (the caller checks it first, to
    /// answer 404).
    pub async fn create_portal_link(&self, new: &NewPortalLink) -> Result<PortalLink> {
        let (id, token) = (new_id("pl_"), new_token());
        let hash = super::tokens::token_hash(&token);
        let expires_at = Ts(new.expires_at);
        execute_on!(
            self,
            INSERT_LINK,
            &id,
            &hash,
            &new.subscriber_id,
            new.read_only,
            new.return_url.as_deref(),
            &new.created_by,
            new.created_via.as_str(),
            expires_at
        )?;
        Ok(PortalLink {
            id,
            token: token.into(),
        })
    }

    /// Opens the link whose token has this hash: a session until `session_expires_at`, once.
    /// Inserts the session from the link if it may open, then marks the link used; when another
    /// opener marked it first, ends the session just made (no row is locked across the two).
    pub async fn open_portal_link(
        &self,
        token_hash: &str,
        session_expires_at: DateTime<Utc>,
    ) -> Result<Opened> {
        let id = new_id("ps_");
        let expires = Ts(session_expires_at);
        if execute_on!(self, OPEN, &id, token_hash, expires)? == 0 {
            return self.why_not_opened(token_hash).await;
        }
        if execute_on!(self, MARK_USED, token_hash)? == 0 {
            execute_on!(self, END_SESSION, &id)?;
            return Ok(Opened::Used);
        }
        Ok(match self.portal_session(&id).await? {
            Some(session) => Opened::Session(session),
            // Revoked or disabled between the two statements.
            None => Opened::Revoked,
        })
    }

    /// Why the link with this hash did not open. One read by its unique index.
    async fn why_not_opened(&self, token_hash: &str) -> Result<Opened> {
        let state: Option<(i64, i64, i64, i64)> =
            query_as_on!(self, LINK_STATE, fetch_optional, token_hash)?;
        Ok(match state {
            None => Opened::Unknown,
            Some((1, _, _, _)) => Opened::Used,
            Some((_, 1, _, _)) => Opened::Revoked,
            Some((_, _, 1, _)) => Opened::Expired,
            Some((_, _, _, 0)) => Opened::SubscriberUnavailable,
            // It could open now (its subscriber enabled in between): say so plainly.
            Some(_) => Opened::Unknown,
        })
    }

    /// The session `id` if it is in force: not revoked or expired, its subscriber neither
    /// disabled nor deleted. One read by primary key (and the subscriber's), no lock.
    pub async fn portal_session(&self, id: &str) -> Result<Option<PortalSession>> {
        let row: Option<SessionRow> = query_as_on!(self, SESSION, fetch_optional, id)?;
        Ok(row.map(Into::into))
    }

    /// Ends the session `id` (signing out). One update by primary key.
    pub async fn end_portal_session(&self, id: &str) -> Result<()> {
        execute_on!(self, END_SESSION, id)?;
        Ok(())
    }

    /// Ends every open session of `subscriber` and revokes its unused links: `(sessions,
    /// links)` ended. Two updates, each through its table's partial index: the links first, so
    /// a link opened just before them yields a session the second one ends.
    pub async fn revoke_portal_access(&self, subscriber: &str) -> Result<(u64, u64)> {
        let links = execute_on!(self, REVOKE_LINKS_OF, subscriber)?;
        let sessions = execute_on!(self, END_SESSIONS_OF, subscriber)?;
        Ok((sessions, links))
    }
}
