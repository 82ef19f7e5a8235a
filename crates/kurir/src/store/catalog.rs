//! The event catalog's table (`kurir_event_types`, migration 0015) and each process's compiled
//! copy of it ([`CatalogCache`]).
//!
//! Every catalog write raises one number, `kurir_event_type_changes.seq`, in its own
//! transaction, as endpoint writes raise `kurir_endpoint_changes.seq` (`store::directory`).
//! A process compiles each schema once and keeps the result; it looks at the number at most
//! every [`CATALOG_REFRESH`] (at once after its own writes) and reads the catalog again only
//! when the number moved, recompiling only the schemas whose text changed. So a change made
//! through another process is applied here within [`CATALOG_REFRESH`]; a hand edit of the table
//! within [`FULL_READ_INTERVAL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::rows::Ts;
use super::sql::{query_as_on, run_in, Sql};
use super::{on_backend, Result, Store, StoreError};
use crate::catalog::check::{CheckedEntry, Checks};
use crate::catalog::{schema, CatalogMode, EntrySpec, EventTypeEntry, EventTypeRef};

/// The longest a change made through another process goes unseen here.
pub const CATALOG_REFRESH: Duration = Duration::from_secs(1);

/// How often the whole catalog is read again even though the change number did not move: what
/// a hand edit of the table (which raises no number) waits at most.
pub const FULL_READ_INTERVAL: Duration = Duration::from_secs(300);

macro_rules! entry_columns {
    (mysql) => {
        "CAST(event_type AS CHAR) AS event_type, version, CAST(description AS CHAR) AS description, \
         CAST(data_schema AS CHAR) AS data_schema, CAST(examples AS CHAR) AS examples, \
         deprecated, CAST(successor_type AS CHAR) AS successor_type, successor_version, \
         created_at, updated_at"
    };
    ($d:ident) => {
        "event_type, version, description, data_schema, examples, deprecated, successor_type, \
         successor_version, created_at, updated_at"
    };
}

/// One entry by its key (`$1`, `$2`).
const ENTRY: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        entry_columns!(postgres),
        " FROM kurir_event_types WHERE event_type = $1 AND version = $2"
    ),
    sqlite: concat!(
        "SELECT ",
        entry_columns!(sqlite),
        " FROM kurir_event_types WHERE event_type = ?1 AND version = ?2"
    ),
    mysql: concat!(
        "SELECT ",
        entry_columns!(mysql),
        " FROM kurir_event_types WHERE event_type = $1 AND version = $2"
    ),
};

/// Up to `$3` entries after (`$1`, `$2`) in key order (`''`, `0` for the first page), through
/// the primary key.
const PAGE: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        entry_columns!(postgres),
        " FROM kurir_event_types WHERE event_type > $1 OR (event_type = $1 AND version > $2) \
         ORDER BY event_type, version LIMIT $3"
    ),
    sqlite: concat!(
        "SELECT ",
        entry_columns!(sqlite),
        " FROM kurir_event_types WHERE event_type > ?1 OR (event_type = ?1 AND version > ?2) \
         ORDER BY event_type, version LIMIT ?3"
    ),
    mysql: concat!(
        "SELECT ",
        entry_columns!(mysql),
        " FROM kurir_event_types WHERE event_type > $1 OR (event_type = $1 AND version > $2) \
         ORDER BY event_type, version LIMIT $3"
    ),
};

/// Writes an entry, created or replaced; `updated_at` by the database's clock.
const UPSERT: Sql = Sql {
    postgres: "INSERT INTO kurir_event_types (event_type, version, description, data_schema, \
            examples, deprecated, successor_type, successor_version) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
        ON CONFLICT (event_type, version) DO UPDATE SET description = EXCLUDED.description, \
            data_schema = EXCLUDED.data_schema, examples = EXCLUDED.examples, \
            deprecated = EXCLUDED.deprecated, successor_type = EXCLUDED.successor_type, \
            successor_version = EXCLUDED.successor_version, updated_at = now()",
    sqlite: "INSERT INTO kurir_event_types (event_type, version, description, data_schema, \
            examples, deprecated, successor_type, successor_version) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
        ON CONFLICT (event_type, version) DO UPDATE SET description = excluded.description, \
            data_schema = excluded.data_schema, examples = excluded.examples, \
            deprecated = excluded.deprecated, successor_type = excluded.successor_type, \
            successor_version = excluded.successor_version, \
            updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    mysql: "INSERT INTO kurir_event_types (event_type, version, description, data_schema, \
            examples, deprecated, successor_type, successor_version) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
        ON DUPLICATE KEY UPDATE description = VALUES(description), \
            data_schema = VALUES(data_schema), examples = VALUES(examples), \
            deprecated = VALUES(deprecated), successor_type = VALUES(successor_type), \
            successor_version = VALUES(successor_version), updated_at = UTC_TIMESTAMP(3)",
};

/// Removes an entry.
const DELETE: Sql = Sql {
    postgres: "DELETE FROM kurir_event_types WHERE event_type = $1 AND version = $2",
    sqlite: "DELETE FROM kurir_event_types WHERE event_type = ?1 AND version = ?2",
    mysql: "DELETE FROM kurir_event_types WHERE event_type = $1 AND version = $2",
};

/// Raises the change number; the row's lock is held until the writer commits, so the numbers
/// commit in order.
const BUMP: Sql = Sql {
    postgres: "UPDATE kurir_event_type_changes SET seq = seq + 1",
    sqlite: "UPDATE kurir_event_type_changes SET seq = seq + 1",
    mysql: "UPDATE kurir_event_type_changes SET seq = seq + 1",
};

/// The change number.
const SEQ: Sql = Sql {
    postgres: "SELECT seq FROM kurir_event_type_changes",
    sqlite: "SELECT seq FROM kurir_event_type_changes",
    mysql: "SELECT seq FROM kurir_event_type_changes",
};

/// What the checks need of every entry.
const CHECKED: Sql = Sql {
    postgres: "SELECT event_type, version, data_schema, deprecated FROM kurir_event_types",
    sqlite: "SELECT event_type, version, data_schema, deprecated FROM kurir_event_types",
    mysql: "SELECT CAST(event_type AS CHAR), version, CAST(data_schema AS CHAR), deprecated \
        FROM kurir_event_types",
};

/// The entries that name (`$1`, `$2`) as their successor.
const PREDECESSORS: Sql = Sql {
    postgres: "SELECT event_type, version FROM kurir_event_types \
        WHERE successor_type = $1 AND successor_version = $2 ORDER BY event_type, version",
    sqlite: "SELECT event_type, version FROM kurir_event_types \
        WHERE successor_type = ?1 AND successor_version = ?2 ORDER BY event_type, version",
    mysql: "SELECT CAST(event_type AS CHAR), version FROM kurir_event_types \
        WHERE successor_type = $1 AND successor_version = $2 ORDER BY event_type, version",
};

/// Events of (`$1`, `$2`) not yet delivered: still to be fanned out, refused (a recheck may
/// deliver them), or with a delivery neither sent nor given up on for good (dead letters can
/// be replayed). The listed ones through `kurir_event_list_event_type`, the waiting ones from
/// the outbox past the relay's cursor (see `store::event_list`).
macro_rules! undelivered {
    ($dialect:tt, $p1:literal, $p2:literal) => {
        concat!(
            "SELECT (SELECT count(*) FROM kurir_event_list l WHERE l.event_type = ",
            $p1,
            " AND l.version = ",
            $p2,
            " AND (l.refused OR EXISTS (SELECT 1 FROM kurir_deliveries d \
                 WHERE d.outbox_id = l.outbox_id AND d.status <> 'sent'))) \
             + (SELECT count(*) FROM ",
            super::event_list::waiting!($dialect),
            " WHERE w.event_type = ",
            $p1,
            " AND w.version = ",
            $p2,
            ")"
        )
    };
}
const UNDELIVERED: Sql = Sql {
    postgres: undelivered!(postgres, "$1", "$2"),
    sqlite: undelivered!(sqlite, "?1", "?2"),
    mysql: undelivered!(mysql, "$1", "$2"),
};

/// Events per (type, version) written since `$1`: the listed ones through
/// `kurir_event_list_created`, the waiting ones from the outbox past the relay's cursor.
macro_rules! recent_counts {
    ($dialect:tt, $type:literal, $p1:literal) => {
        concat!(
            "SELECT ",
            $type,
            ", version, count(*) FROM (SELECT l.event_type, l.version FROM kurir_event_list l \
             WHERE l.created_at >= ",
            $p1,
            " UNION ALL SELECT w.event_type, w.version FROM ",
            super::event_list::waiting!($dialect),
            " WHERE w.created_at >= ",
            $p1,
            ") r GROUP BY event_type, version"
        )
    };
}
const RECENT_COUNTS: Sql = Sql {
    postgres: recent_counts!(postgres, "event_type", "$1"),
    sqlite: recent_counts!(sqlite, "event_type", "?1"),
    mysql: recent_counts!(mysql, "CAST(event_type AS CHAR)", "$1"),
};

/// A catalog row.
#[derive(sqlx::FromRow)]
struct EntryRow {
    event_type: String,
    version: i32,
    description: String,
    data_schema: Option<String>,
    examples: String,
    deprecated: bool,
    successor_type: Option<String>,
    successor_version: Option<i32>,
    created_at: Ts,
    updated_at: Ts,
}

impl EntryRow {
    fn into_entry(self) -> Result<EventTypeEntry> {
        let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt {
            table: "kurir_event_types",
            message: format!("{} v{}: {what}: {e}", self.event_type, self.version),
        };
        let schema = (self.data_schema.as_deref())
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| corrupt("data_schema", e))?;
        let examples = serde_json::from_str(&self.examples).map_err(|e| corrupt("examples", e))?;
        let successor = match (&self.successor_type, self.successor_version) {
            (Some(t), Some(v)) => Some(EventTypeRef {
                event_type: t.clone(),
                version: v,
            }),
            _ => None,
        };
        Ok(EventTypeEntry {
            spec: EntrySpec {
                description: self.description,
                schema,
                examples,
                deprecated: self.deprecated,
                successor,
            },
            event_type: self.event_type,
            version: self.version,
            created_at: self.created_at.into(),
            updated_at: self.updated_at.into(),
        })
    }
}

/// What a write of an entry did.
#[derive(Clone, Debug)]
pub enum PutOutcome {
    /// The entry is new.
    Created(EventTypeEntry),
    /// The entry existed with other content, now replaced.
    Updated(EventTypeEntry),
    /// The entry existed with this content: nothing was written.
    Unchanged(EventTypeEntry),
}

impl PutOutcome {
    /// The entry as stored now.
    pub fn entry(&self) -> &EventTypeEntry {
        match self {
            Self::Created(e) | Self::Updated(e) | Self::Unchanged(e) => e,
        }
    }
}

/// One process's compiled copy of the catalog (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct CatalogCache {
    mode: CatalogMode,
    state: Mutex<CacheState>,
    /// One refresh at a time; the others wait for it and take its result.
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct CacheState {
    seq: i64,
    /// When the number was last looked at; `None`: look before the next use.
    looked_at: Option<Instant>,
    full_read_at: Option<Instant>,
    checks: Arc<Checks>,
}

impl CatalogCache {
    /// An empty cache under `mode`.
    pub(crate) fn new(mode: CatalogMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The checks, if they were looked at within [`CATALOG_REFRESH`].
    fn fresh(&self) -> Option<Arc<Checks>> {
        let state = self.lock();
        let fresh = state
            .looked_at
            .is_some_and(|at| at.elapsed() < CATALOG_REFRESH);
        fresh.then(|| state.checks.clone())
    }

    /// Makes the next use look at the change number (after this process's own write).
    fn invalidate(&self) {
        self.lock().looked_at = None;
    }

    /// Whether the catalog must be read, now that its number is `seq`.
    fn must_read(&self, seq: i64) -> bool {
        let mut state = self.lock();
        let full_due = state
            .full_read_at
            .is_none_or(|at| at.elapsed() >= FULL_READ_INTERVAL);
        if !full_due && state.seq == seq {
            state.looked_at = Some(Instant::now());
            return false;
        }
        true
    }

    /// Compiles what changed among `rows` (read after the number was `seq`), reusing the
    /// schemas whose text is the same.
    fn apply(&self, seq: i64, rows: Vec<(String, i32, Option<String>, bool)>) -> Arc<Checks> {
        let previous = self.lock().checks.clone();
        let mut entries = HashMap::with_capacity(rows.len());
        for (event_type, version, text, deprecated) in rows {
            let reused = previous
                .entry(&event_type, version)
                .filter(|e| e.schema_text == text && e.deprecated == deprecated)
                .cloned();
            let entry = reused.unwrap_or_else(|| Arc::new(compiled(text, deprecated)));
            entries.insert((event_type, version), entry);
        }
        let checks = Arc::new(Checks::new(self.mode, entries));
        let mut state = self.lock();
        let now = Instant::now();
        state.seq = seq;
        state.looked_at = Some(now);
        state.full_read_at = Some(now);
        state.checks = checks.clone();
        checks
    }
}

fn compiled(text: Option<String>, deprecated: bool) -> CheckedEntry {
    let schema = text.as_deref().map(|t| {
        serde_json::from_str(t)
            .map_err(|e| format!("not JSON: {e}"))
            .and_then(|v| schema::compile(&v))
            .map(Arc::new)
    });
    if let Some(Err(e)) = &schema {
        tracing::error!(error = %e, "a stored catalog schema does not compile; its events are refused");
    }
    CheckedEntry {
        schema_text: text,
        schema,
        deprecated,
    }
}

impl Store {
    /// Checks events against the catalog in `mode` (`KURIR_EVENT_CATALOG`; `open` unless set).
    pub fn with_event_catalog(mut self, mode: CatalogMode) -> Self {
        let cache = Arc::new(CatalogCache::new(mode));
        match &mut self {
            Store::Postgres(s) => s.catalog = cache,
            Store::Sqlite(s) => s.catalog = cache,
            Store::Mysql(s) => s.catalog = cache,
        }
        self
    }

    fn catalog_cache(&self) -> &CatalogCache {
        on_backend!(self, s => &s.catalog)
    }

    /// The mode events are checked in.
    pub fn catalog_mode(&self) -> CatalogMode {
        self.catalog_cache().mode
    }

    /// The catalog compiled, as of at most [`CATALOG_REFRESH`] ago (this process's own writes
    /// at once): one read of the change number per interval, and the catalog itself only when
    /// it changed.
    pub async fn event_checks(&self) -> Result<Arc<Checks>> {
        let cache = self.catalog_cache();
        if cache.mode == CatalogMode::Off {
            return Ok(Arc::new(Checks::off()));
        }
        if let Some(fresh) = cache.fresh() {
            return Ok(fresh);
        }
        let _turn = cache.refreshing.lock().await;
        if let Some(fresh) = cache.fresh() {
            return Ok(fresh);
        }
        let (seq,): (i64,) = query_as_on!(self, SEQ, fetch_one)?;
        if !cache.must_read(seq) {
            return Ok(cache.lock().checks.clone());
        }
        let rows: Vec<(String, i32, Option<String>, bool)> =
            query_as_on!(self, CHECKED, fetch_all)?;
        Ok(cache.apply(seq, rows))
    }

    /// The checks as of now, whatever [`CATALOG_REFRESH`] allows (a recheck asks for this).
    pub async fn event_checks_now(&self) -> Result<Arc<Checks>> {
        self.catalog_cache().invalidate();
        self.event_checks().await
    }

    /// One entry.
    pub async fn event_type(&self, key: &EventTypeRef) -> Result<Option<EventTypeEntry>> {
        let row: Option<EntryRow> =
            query_as_on!(self, ENTRY, fetch_optional, &key.event_type, key.version)?;
        row.map(EntryRow::into_entry).transpose()
    }

    /// Up to `limit` entries after `after` in (type, version) order.
    pub async fn event_type_page(
        &self,
        after: Option<&EventTypeRef>,
        limit: u32,
    ) -> Result<Vec<EventTypeEntry>> {
        let (t, v) = after.map_or(("", 0), |k| (k.event_type.as_str(), k.version));
        let rows: Vec<EntryRow> = query_as_on!(self, PAGE, fetch_all, t, v, i64::from(limit))?;
        rows.into_iter().map(EntryRow::into_entry).collect()
    }

    /// Every entry, in (type, version) order (the export, `apply`'s comparison).
    pub async fn all_event_types(&self) -> Result<Vec<EventTypeEntry>> {
        let mut all = Vec::new();
        loop {
            let page = self
                .event_type_page(all.last().map(|e: &EventTypeEntry| e.key()).as_ref(), 500)
                .await?;
            let done = page.len() < 500;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// Writes `spec` (checked by [`EntrySpec::check`]) for `key`, and raises the change number,
    /// in one transaction. Content equal to what is stored writes nothing.
    pub async fn put_event_type(&self, key: &EventTypeRef, spec: &EntrySpec) -> Result<PutOutcome> {
        let existing = self.event_type(key).await?;
        if let Some(e) = existing.as_ref().filter(|e| &e.spec == spec) {
            return Ok(PutOutcome::Unchanged(e.clone()));
        }
        let schema = spec.schema.as_ref().map(|s| s.to_string());
        let examples = serde_json::Value::from(spec.examples.clone()).to_string();
        let (successor_type, successor_version) = match &spec.successor {
            Some(s) => (Some(s.event_type.as_str()), Some(s.version)),
            None => (None, None),
        };
        macro_rules! upsert {
            ($begin:expr, $dialect:ident) => {{
                let mut tx = $begin.await?;
                run_in!(
                    tx,
                    $dialect,
                    UPSERT,
                    query,
                    execute,
                    &key.event_type,
                    &key.version,
                    &spec.description,
                    &schema,
                    &examples,
                    &spec.deprecated,
                    &successor_type,
                    &successor_version
                )?;
                run_in!(tx, $dialect, BUMP, query, execute)?;
                tx.commit().await?;
            }};
        }
        match self {
            Store::Postgres(s) => upsert!(s.pool().begin(), postgres),
            Store::Sqlite(s) => upsert!(s.pool().begin_with("BEGIN IMMEDIATE"), sqlite),
            Store::Mysql(s) => upsert!(s.pool().begin(), mysql),
        }
        self.catalog_cache().invalidate();
        let stored = self
            .event_type(key)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                table: "kurir_event_types",
                message: format!("{key} was written and is gone"),
            })?;
        Ok(match existing {
            None => PutOutcome::Created(stored),
            Some(_) => PutOutcome::Updated(stored),
        })
    }

    /// Removes an entry and raises the change number; `false` when there was none.
    pub async fn delete_event_type(&self, key: &EventTypeRef) -> Result<bool> {
        macro_rules! delete {
            ($begin:expr, $dialect:ident) => {{
                let mut tx = $begin.await?;
                let done = run_in!(
                    tx,
                    $dialect,
                    DELETE,
                    query,
                    execute,
                    &key.event_type,
                    &key.version
                )?;
                run_in!(tx, $dialect, BUMP, query, execute)?;
                tx.commit().await?;
                done.rows_affected() > 0
            }};
        }
        let deleted = match self {
            Store::Postgres(s) => delete!(s.pool().begin(), postgres),
            Store::Sqlite(s) => delete!(s.pool().begin_with("BEGIN IMMEDIATE"), sqlite),
            Store::Mysql(s) => delete!(s.pool().begin(), mysql),
        };
        self.catalog_cache().invalidate();
        Ok(deleted)
    }

    /// The entries that name `key` as their successor.
    pub async fn predecessors(&self, key: &EventTypeRef) -> Result<Vec<EventTypeRef>> {
        let rows: Vec<(String, i32)> =
            query_as_on!(self, PREDECESSORS, fetch_all, &key.event_type, key.version)?;
        Ok(rows
            .into_iter()
            .map(|(event_type, version)| EventTypeRef {
                event_type,
                version,
            })
            .collect())
    }

    /// How many events of `key` are not yet delivered (see [`UNDELIVERED`]).
    pub async fn undelivered_events(&self, key: &EventTypeRef) -> Result<i64> {
        let (n,): (i64,) =
            query_as_on!(self, UNDELIVERED, fetch_one, &key.event_type, key.version)?;
        Ok(n)
    }

    /// Events written since `since`, per (type, version).
    pub async fn events_per_version(
        &self,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<HashMap<EventTypeRef, i64>> {
        let rows: Vec<(String, i32, i64)> =
            query_as_on!(self, RECENT_COUNTS, fetch_all, Ts(since))?;
        Ok(rows
            .into_iter()
            .map(|(event_type, version, n)| {
                (
                    EventTypeRef {
                        event_type,
                        version,
                    },
                    n,
                )
            })
            .collect())
    }
}
