//! Subscribers (`kurir_subscribers`, migration 0016): the sender's customers, each with its own
//! endpoints and events (issue 29). Created, upserted, read, listed, changed and deleted here;
//! which endpoints an event reaches is the directory's business (`store::directory`), keyed by
//! subscriber.
//!
//! A subscriber's id is the sender's own (1 to 255 visible ASCII characters), so a deleted one
//! stays as a tombstone (`deleted_at`): its id is not taken again while its history remains, and
//! its endpoints end as tombstones too, their undelivered deliveries `cancelled`.

use chrono::{DateTime, Utc};

use super::rows::Ts;
use super::sql::{execute_on, query_as_on, run_in, Sql};
use super::{Result, Store, StoreError};
use crate::access::Actor;

/// Longest subscriber id and name, in characters.
pub const MAX_ID_CHARS: usize = 255;

/// Whether `id` is a subscriber id kurir takes: 1 to [`MAX_ID_CHARS`] visible ASCII characters
/// (the database's `kurir_subscribers_id_format` says the same).
pub fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_CHARS).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A subscriber as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscriber {
    /// The sender's id for it.
    pub id: String,
    /// A name for people.
    pub name: String,
    /// Free-form JSON, kept for the sender.
    pub metadata: serde_json::Value,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// Since when it is disabled: its endpoints get nothing meanwhile.
    pub disabled_at: Option<DateTime<Utc>>,
    /// When it was deleted (a tombstone).
    pub deleted_at: Option<DateTime<Utc>>,
}

/// What [`Store::put_subscriber`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum PutSubscriber {
    /// Created.
    Created(Subscriber),
    /// It existed: its name and metadata are now these.
    Updated(Subscriber),
    /// It existed and was deleted: the id stays taken while its history remains.
    Deleted,
}

/// Changes to a subscriber; `None` leaves a field as it is.
#[derive(Clone, Debug, Default)]
pub struct SubscriberUpdate {
    /// New name.
    pub name: Option<String>,
    /// New metadata.
    pub metadata: Option<serde_json::Value>,
    /// Disable (`true`) or enable (`false`).
    pub disabled: Option<bool>,
}

#[derive(sqlx::FromRow)]
struct SubscriberRow {
    id: String,
    name: String,
    metadata: String,
    created_at: Ts,
    updated_at: Ts,
    disabled_at: Option<Ts>,
    deleted_at: Option<Ts>,
}

impl TryFrom<SubscriberRow> for Subscriber {
    type Error = StoreError;

    fn try_from(r: SubscriberRow) -> Result<Self> {
        let metadata = serde_json::from_str(&r.metadata).map_err(|e| StoreError::Corrupt {
            table: "kurir_subscribers",
            message: format!("metadata of {}: {e}", r.id),
        })?;
        Ok(Self {
            id: r.id,
            name: r.name,
            metadata,
            created_at: r.created_at.0,
            updated_at: r.updated_at.0,
            disabled_at: r.disabled_at.map(|t| t.0),
            deleted_at: r.deleted_at.map(|t| t.0),
        })
    }
}

macro_rules! columns {
    (postgres) => {
        "id, name, metadata, created_at, updated_at, disabled_at, deleted_at"
    };
    (mysql) => {
        "CAST(id AS CHAR) AS id, CAST(name AS CHAR) AS name, CAST(metadata AS CHAR) AS metadata, \
         created_at, updated_at, disabled_at, deleted_at"
    };
}

/// Inserts a subscriber; a taken id is a unique violation.
const INSERT: Sql = Sql {
    postgres: "INSERT INTO kurir_subscribers (id, name, metadata) VALUES ($1, $2, $3)",
    sqlite: "INSERT INTO kurir_subscribers (id, name, metadata) VALUES (?1, ?2, ?3)",
    mysql: "INSERT INTO kurir_subscribers (id, name, metadata) VALUES ($1, $2, $3)",
};

const BY_ID: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        columns!(postgres),
        " FROM kurir_subscribers WHERE id = $1"
    ),
    sqlite: concat!(
        "SELECT ",
        columns!(postgres),
        " FROM kurir_subscribers WHERE id = ?1"
    ),
    mysql: concat!(
        "SELECT ",
        columns!(mysql),
        " FROM kurir_subscribers WHERE id = $1"
    ),
};

/// The live subscribers by id above the cursor, optionally of one name. On MySQL `ORDER BY`
/// names the column: a bare `id` is the select list's `CAST(id AS CHAR)`, sorted in the
/// connection's collation (`_` before `/`) while the cursor compares the column's binary one, so
/// pages skipped and repeated subscribers.
const LIST: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        columns!(postgres),
        " FROM kurir_subscribers WHERE deleted_at IS NULL AND ($1::text IS NULL OR id > $1) \
          AND ($2::text IS NULL OR name = $2) ORDER BY id LIMIT $3"
    ),
    sqlite: concat!(
        "SELECT ",
        columns!(postgres),
        " FROM kurir_subscribers WHERE deleted_at IS NULL AND (?1 IS NULL OR id > ?1) \
          AND (?2 IS NULL OR name = ?2) ORDER BY id LIMIT ?3"
    ),
    mysql: concat!(
        "SELECT ",
        columns!(mysql),
        " FROM kurir_subscribers WHERE deleted_at IS NULL AND ($1 IS NULL OR id > $1) \
          AND ($2 IS NULL OR name = $2) ORDER BY kurir_subscribers.id LIMIT $3"
    ),
};

/// Changes the fields given (`$4`: 1 disables, 0 enables, NULL leaves) of a live subscriber.
const UPDATE: Sql = Sql {
    postgres: "UPDATE kurir_subscribers SET name = COALESCE($2, name), \
            metadata = COALESCE($3, metadata), updated_at = now(), \
            disabled_at = CASE WHEN $4::int8 IS NULL THEN disabled_at \
                WHEN $4 = 1 THEN COALESCE(disabled_at, now()) END \
        WHERE id = $1 AND deleted_at IS NULL",
    sqlite: "UPDATE kurir_subscribers SET name = COALESCE(?2, name), \
            metadata = COALESCE(?3, metadata), \
            updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
            disabled_at = CASE WHEN ?4 IS NULL THEN disabled_at \
                WHEN ?4 = 1 THEN COALESCE(disabled_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) END \
        WHERE id = ?1 AND deleted_at IS NULL",
    mysql: "UPDATE kurir_subscribers SET name = COALESCE($2, name), \
            metadata = COALESCE($3, metadata), updated_at = UTC_TIMESTAMP(3), \
            disabled_at = CASE WHEN $4 IS NULL THEN disabled_at \
                WHEN $4 = 1 THEN COALESCE(disabled_at, UTC_TIMESTAMP(3)) END \
        WHERE id = $1 AND deleted_at IS NULL",
};

/// Marks a live subscriber deleted.
const BURY: Sql = Sql {
    postgres: "UPDATE kurir_subscribers SET deleted_at = now(), updated_at = now() \
        WHERE id = $1 AND deleted_at IS NULL",
    sqlite: "UPDATE kurir_subscribers SET deleted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
            updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
        WHERE id = ?1 AND deleted_at IS NULL",
    mysql: "UPDATE kurir_subscribers SET deleted_at = UTC_TIMESTAMP(3), \
            updated_at = UTC_TIMESTAMP(3) WHERE id = $1 AND deleted_at IS NULL",
};

/// One operator action on a subscriber, audited: binds the subscriber's id, the action, the
/// actor's name, where from, when (unix milliseconds).
const RECORD_ACTION: Sql = Sql {
    postgres: "INSERT INTO kurir_subscriber_actions \
        (subscriber_id, action, actor, via, created_ms) VALUES ($1, $2, $3, $4, $5)",
    sqlite: "INSERT INTO kurir_subscriber_actions \
        (subscriber_id, action, actor, via, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    mysql: "INSERT INTO kurir_subscriber_actions \
        (subscriber_id, action, actor, via, created_ms) VALUES ($1, $2, $3, $4, $5)",
};

/// A subscriber's newest actions first, at most `$2`: its part of the index.
const ACTIONS: Sql = Sql {
    postgres: "SELECT action, actor, via, created_ms FROM kurir_subscriber_actions \
        WHERE subscriber_id = $1 ORDER BY id DESC LIMIT $2",
    sqlite: "SELECT action, actor, via, created_ms FROM kurir_subscriber_actions \
        WHERE subscriber_id = ?1 ORDER BY id DESC LIMIT ?2",
    mysql: "SELECT CAST(action AS CHAR) AS action, CAST(actor AS CHAR) AS actor, \
        CAST(via AS CHAR) AS via, created_ms FROM kurir_subscriber_actions \
        WHERE subscriber_id = $1 ORDER BY id DESC LIMIT $2",
};

/// How many actions subscriber `$1` has: its part of the index, read alone.
const COUNT_ACTIONS: Sql = Sql {
    postgres: "SELECT count(*) FROM kurir_subscriber_actions WHERE subscriber_id = $1",
    sqlite: "SELECT count(*) FROM kurir_subscriber_actions WHERE subscriber_id = ?1",
    mysql: "SELECT count(*) FROM kurir_subscriber_actions WHERE subscriber_id = $1",
};

/// What an operator did to a subscriber, as audited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriberAction {
    /// Disabled it: its endpoints get nothing, their deliveries wait.
    Disable,
    /// Enabled it again: the deliveries that waited go out.
    Enable,
    /// Deleted it.
    Delete,
}

impl SubscriberAction {
    /// `disable`, `enable` or `delete`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Enable => "enable",
            Self::Delete => "delete",
        }
    }
}

/// An audited operator action on a subscriber.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct SubscriberActionRecord {
    /// `disable`, `enable` or `delete`.
    pub action: String,
    /// The token's name (`admin` for the environment's token).
    pub actor: String,
    /// Where from (`api`, `cli`, `dashboard`).
    pub via: String,
    /// When, unix milliseconds.
    pub created_ms: i64,
}

/// Runs `$sql` (a change of subscriber `$id`, binding `$binds`) on `$store` in one transaction
/// with the audit of `$action` by `$actor`, written only if the change touched a row; the rows
/// it touched. The change and its audit commit together or not at all.
macro_rules! audited {
    ($store:expr, $sql:expr, [$($bind:expr),*], $id:expr, $action:expr, $actor:expr) => {{
        let (id, action, actor): (&str, SubscriberAction, &Actor) = ($id, $action, $actor);
        let now = $store.clock().now_millis().timestamp_millis();
        let (what, via) = (action.as_str(), actor.via.as_str());
        let name = actor.name.as_str();
        match $store {
            Store::Postgres(s) => {
                let mut tx = s.pool().begin().await?;
                let n = run_in!(tx, postgres, $sql, query, execute $(, $bind)*)?.rows_affected();
                if n > 0 {
                    run_in!(tx, postgres, RECORD_ACTION, query, execute, id, what, name, via, now)?;
                }
                tx.commit().await?;
                n
            }
            Store::Sqlite(s) => {
                let mut tx = s.pool().begin_with("BEGIN IMMEDIATE").await?;
                let n = run_in!(tx, sqlite, $sql, query, execute $(, $bind)*)?.rows_affected();
                if n > 0 {
                    run_in!(tx, sqlite, RECORD_ACTION, query, execute, id, what, name, via, now)?;
                }
                tx.commit().await?;
                n
            }
            Store::Mysql(s) => {
                let mut tx = s.pool().begin().await?;
                let n = run_in!(tx, mysql, $sql, query, execute $(, $bind)*)?.rows_affected();
                if n > 0 {
                    run_in!(tx, mysql, RECORD_ACTION, query, execute, id, what, name, via, now)?;
                }
                tx.commit().await?;
                n
            }
        }
    }};
}

/// An endpoint update that changes nothing but its change number (the trigger's stamp).
const TOUCH: Sql = Sql {
    postgres: "UPDATE kurir_endpoints SET updated_at = updated_at WHERE id = $1",
    sqlite: "UPDATE kurir_endpoints SET updated_at = updated_at WHERE id = ?1",
    mysql: "UPDATE kurir_endpoints SET updated_at = updated_at WHERE id = $1",
};

/// The live endpoints of a subscriber.
const LIVE_ENDPOINTS: Sql = Sql {
    postgres: "SELECT id FROM kurir_endpoints WHERE subscriber_id = $1 AND deleted_at IS NULL",
    sqlite: "SELECT id FROM kurir_endpoints WHERE subscriber_id = ?1 AND deleted_at IS NULL",
    mysql: "SELECT CAST(id AS CHAR) FROM kurir_endpoints \
        WHERE subscriber_id = $1 AND deleted_at IS NULL",
};

/// The backlog of a subscriber's endpoints: deliveries waiting (`pending`), being made
/// (`processing`) or to be retried (`failed`), per endpoint and status. Each endpoint's waiting
/// deliveries are read through the partial `kurir_deliveries_due` index, so the cost follows
/// the backlog, not the history.
const BACKLOG: Sql = Sql {
    postgres: "SELECT d.endpoint_id, d.status, count(*) FROM kurir_deliveries d \
        JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE e.subscriber_id = $1 AND d.status IN ('pending', 'processing', 'failed') \
        GROUP BY d.endpoint_id, d.status",
    sqlite: "SELECT d.endpoint_id, d.status, count(*) FROM kurir_deliveries d \
        JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE e.subscriber_id = ?1 AND d.status IN ('pending', 'processing', 'failed') \
        GROUP BY d.endpoint_id, d.status",
    mysql: "SELECT CAST(d.endpoint_id AS CHAR), CAST(d.status AS CHAR), COUNT(*) \
        FROM kurir_deliveries d JOIN kurir_endpoints e ON e.id = d.endpoint_id \
        WHERE e.subscriber_id = $1 AND d.status IN ('pending', 'processing', 'failed') \
        GROUP BY d.endpoint_id, d.status",
};

/// What a subscriber's endpoints have not delivered yet, per endpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubscriberBacklog {
    /// `(endpoint id, status, deliveries)`; `status` as stored (`failed` is shown `retrying`).
    pub rows: Vec<(String, String, i64)>,
}

impl SubscriberBacklog {
    /// The deliveries of `endpoint` (every endpoint's: `None`) in `status`.
    pub fn count(&self, endpoint: Option<&str>, status: &str) -> i64 {
        self.rows
            .iter()
            .filter(|(e, s, _)| s == status && endpoint.is_none_or(|id| id == e))
            .map(|(_, _, n)| n)
            .sum()
    }
}

impl Store {
    /// Creates a subscriber; `None` when its id is taken (by a live or a deleted one). One
    /// insert.
    pub async fn create_subscriber(
        &self,
        id: &str,
        name: &str,
        metadata: &serde_json::Value,
    ) -> Result<Option<Subscriber>> {
        let meta = metadata.to_string();
        match execute_on!(self, INSERT, id, name, &meta) {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            other => other?,
        };
        self.subscriber(id).await
    }

    /// Creates the subscriber or sets its name and metadata: how a sender keeps its customer
    /// list in step, as often as it likes. A deleted one is left as it is.
    pub async fn put_subscriber(
        &self,
        id: &str,
        name: &str,
        metadata: &serde_json::Value,
    ) -> Result<PutSubscriber> {
        if let Some(created) = self.create_subscriber(id, name, metadata).await? {
            return Ok(PutSubscriber::Created(created));
        }
        let update = SubscriberUpdate {
            name: Some(name.to_owned()),
            metadata: Some(metadata.clone()),
            disabled: None,
        };
        Ok(match self.change_subscriber(id, &update, None).await? {
            Some(s) => PutSubscriber::Updated(s),
            None => PutSubscriber::Deleted,
        })
    }

    /// The subscriber with this id, deleted ones too. One read by primary key.
    pub async fn subscriber(&self, id: &str) -> Result<Option<Subscriber>> {
        let row: Option<SubscriberRow> = query_as_on!(self, BY_ID, fetch_optional, id)?;
        row.map(TryInto::try_into).transpose()
    }

    /// Live subscribers by id, after `after_id`, of `name` when given.
    pub async fn list_subscribers(
        &self,
        after_id: Option<&str>,
        name: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Subscriber>> {
        let rows: Vec<SubscriberRow> =
            query_as_on!(self, LIST, fetch_all, after_id, name, i64::from(limit))?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// Changes a live subscriber; `None` when there is none with this id. Disabling or
    /// enabling is audited with `actor`, in the change's transaction, and raises its endpoints'
    /// change number, so every process's directory drops or takes them back at its next read
    /// (this process's at once), and its lanes stop sending to them (see `dispatch::lanes`).
    pub async fn update_subscriber(
        &self,
        id: &str,
        update: &SubscriberUpdate,
        actor: &Actor,
    ) -> Result<Option<Subscriber>> {
        self.change_subscriber(id, update, Some(actor)).await
    }

    /// [`Self::update_subscriber`]; without an `actor` (a `PUT`'s name and metadata), it must
    /// not disable or enable.
    async fn change_subscriber(
        &self,
        id: &str,
        update: &SubscriberUpdate,
        actor: Option<&Actor>,
    ) -> Result<Option<Subscriber>> {
        let meta = update.metadata.as_ref().map(|m| m.to_string());
        let disabled = update.disabled.map(i64::from);
        let (name, meta) = (update.name.as_deref(), meta.as_deref());
        let changed = match (update.disabled, actor) {
            (None, _) | (Some(_), None) => execute_on!(self, UPDATE, id, name, meta, disabled)?,
            (Some(off), Some(actor)) => {
                let action = if off {
                    SubscriberAction::Disable
                } else {
                    SubscriberAction::Enable
                };
                audited!(self, UPDATE, [id, name, meta, disabled], id, action, actor)
            }
        };
        if changed == 0 {
            return Ok(None);
        }
        if update.disabled.is_some() {
            let ids = self.subscriber_endpoint_ids(id).await?;
            self.touch_endpoints(&ids).await?;
            self.refresh_directory().await;
        }
        self.subscriber(id).await
    }

    /// Deletes a subscriber, keeping its history: the row stays as a tombstone, and each of its
    /// endpoints is deleted as `delete_endpoint` deletes one (a tombstone, its undelivered
    /// deliveries `cancelled`). `false` when there was no live subscriber with this id. The
    /// deletion is audited with `actor`, in the transaction that marks the subscriber deleted;
    /// from then on its endpoints read as not live in every process's directory.
    pub async fn delete_subscriber(&self, id: &str, actor: &Actor) -> Result<bool> {
        if audited!(self, BURY, [id], id, SubscriberAction::Delete, actor) == 0 {
            return Ok(false);
        }
        for endpoint in self.subscriber_endpoint_ids(id).await? {
            self.delete_endpoint(&crate::endpoint::EndpointId::from_stored(endpoint))
                .await?;
        }
        Ok(true)
    }

    /// Raises the change number of each endpoint of `ids` (see `store::directory`): an update
    /// that changes nothing, which the trigger stamps (PostgreSQL, SQLite), or kurir's own stamp
    /// (MySQL).
    async fn touch_endpoints(&self, ids: &[String]) -> Result<()> {
        for id in ids {
            match self {
                Store::Mysql(s) => {
                    let mut tx = s.pool().begin().await?;
                    super::directory::stamp_mysql(&mut tx, &[id.as_str()]).await?;
                    tx.commit().await?;
                }
                _ => {
                    execute_on!(self, TOUCH, id.as_str())?;
                }
            }
        }
        Ok(())
    }

    /// The newest `limit` operator actions on subscriber `id` (disable, enable, delete), newest
    /// first. One read of its index; no locks.
    pub async fn subscriber_actions(
        &self,
        id: &str,
        limit: i64,
    ) -> Result<Vec<SubscriberActionRecord>> {
        Ok(query_as_on!(self, ACTIONS, fetch_all, id, limit)?)
    }

    /// How many operator actions subscriber `id` has in all (of which
    /// [`Store::subscriber_actions`] reads the newest). One count over its part of the index.
    pub async fn subscriber_action_count(&self, id: &str) -> Result<u64> {
        let (n,): (i64,) = query_as_on!(self, COUNT_ACTIONS, fetch_one, id)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The backlog of a subscriber's endpoints (see [`SubscriberBacklog`]). One read.
    pub async fn subscriber_backlog(&self, id: &str) -> Result<SubscriberBacklog> {
        let rows: Vec<(String, String, i64)> = query_as_on!(self, BACKLOG, fetch_all, id)?;
        Ok(SubscriberBacklog { rows })
    }

    /// The ids of a subscriber's live endpoints.
    async fn subscriber_endpoint_ids(&self, id: &str) -> Result<Vec<String>> {
        let ids: Vec<(String,)> = query_as_on!(self, LIVE_ENDPOINTS, fetch_all, id)?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn subscriber_ids_are_visible_ascii_of_1_to_255() {
        assert!(super::valid_id("cus_8Hq2"));
        assert!(super::valid_id(&"x".repeat(255)));
        for bad in ["", "a b", "ñ", "tab\t", &"x".repeat(256)] {
            assert!(!super::valid_id(bad), "{bad:?}");
        }
    }
}
