//! The endpoint directory: every live endpoint of the installation, held in memory by each
//! process and brought up to date by reading only the rows that changed.
//!
//! The relay fans each event out to the endpoints that want it, and the dispatcher needs each
//! endpoint it sends to with its secrets opened. Reading every endpoint for every batch made
//! each installed endpoint cost every delivery something (issue 27). Instead every insert and
//! update of an endpoint raises one number, `kurir_endpoint_changes.seq`, in the writer's own
//! transaction, and stamps it on the row as `change_seq` (migration 0013: a trigger on
//! PostgreSQL and SQLite, kurir's own writes on MySQL). The writer holds that row's lock until
//! it commits, so the numbers become visible in order: a reader that sees `seq` N sees every
//! row stamped N or lower. A read of the directory is then one single-row read of `seq`, and,
//! only when it moved, the rows stamped above the number last applied, through an index.
//!
//! Two readers may race (the relay inside its transaction, the dispatcher outside): each row
//! is applied only over an older stamp of itself, so applying their answers in either order
//! leaves the newer one. A row deleted by hand carries no stamp; every [`FULL_READ_INTERVAL`]
//! the whole table is read again, which also picks up a hand edit on MySQL. kurir itself never
//! deletes a live endpoint: it keeps a tombstone (`deleted_at`), an update like any other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::rows::EndpointRow;
use super::sql::Sql;
use super::{Result, SecretCodec};
use crate::endpoint::{Endpoint, Ordering};

/// How often the whole endpoint table is read again, for what the change numbers cannot show:
/// a live endpoint deleted by hand, or (on MySQL, which has no trigger) changed by hand.
pub const FULL_READ_INTERVAL: Duration = Duration::from_secs(300);

/// The change number every endpoint write raises.
pub(super) const SEQ: Sql = Sql {
    postgres: "SELECT seq FROM kurir_endpoint_changes",
    sqlite: "SELECT seq FROM kurir_endpoint_changes",
    mysql: "SELECT seq FROM kurir_endpoint_changes",
};

/// The rows stamped above `$1` (every row for `-1`), live or not. An endpoint of a disabled
/// subscriber reads as not live (`deleted`): it gets nothing while its subscriber is disabled,
/// and its deliveries wait (disabling stamps the subscriber's endpoints, see
/// `store::subscribers`).
pub(super) const CHANGED: Sql = Sql {
    postgres: concat!(
        "SELECT ",
        super::rows::endpoint_columns!(postgres),
        ", change_seq, (deleted_at IS NOT NULL OR EXISTS (SELECT 1 FROM kurir_subscribers s \
             WHERE s.id = kurir_endpoints.subscriber_id \
             AND (s.disabled_at IS NOT NULL OR s.deleted_at IS NOT NULL)))::int4::int8 \
             AS deleted \
         FROM kurir_endpoints WHERE change_seq > $1"
    ),
    sqlite: concat!(
        "SELECT ",
        super::rows::endpoint_columns!(sqlite),
        ", change_seq, (deleted_at IS NOT NULL OR EXISTS (SELECT 1 FROM kurir_subscribers s \
             WHERE s.id = kurir_endpoints.subscriber_id \
             AND (s.disabled_at IS NOT NULL OR s.deleted_at IS NOT NULL))) AS deleted \
         FROM kurir_endpoints WHERE change_seq > ?1"
    ),
    mysql: concat!(
        "SELECT ",
        super::rows::endpoint_columns!(mysql),
        ", change_seq, CAST(deleted_at IS NOT NULL OR EXISTS (SELECT 1 FROM kurir_subscribers s \
             WHERE s.id = kurir_endpoints.subscriber_id \
             AND (s.disabled_at IS NOT NULL OR s.deleted_at IS NOT NULL)) AS SIGNED) \
             AS deleted \
         FROM kurir_endpoints WHERE change_seq > $1"
    ),
};

/// Raises the change number on MySQL (it has no trigger, see migration 0013); the stamp that
/// follows reads it as `LAST_INSERT_ID()`, this connection's copy of the number just taken.
const BUMP_MYSQL: &str = "UPDATE kurir_endpoint_changes SET seq = LAST_INSERT_ID(seq + 1)";

/// On MySQL, what the trigger does on the other dialects: raises the change number and stamps
/// the rows of `ids` with it, in the writer's transaction `conn`, after its write. The writer
/// holds the number's row lock from here until it commits, so numbers commit in order; its
/// write locked its rows first, in the same order as every other endpoint write, so two
/// writers never wait for each other in a circle.
pub(super) async fn stamp_mysql(conn: &mut sqlx::MySqlConnection, ids: &[&str]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(BUMP_MYSQL).execute(&mut *conn).await?;
    let sql = format!(
        "UPDATE kurir_endpoints SET change_seq = LAST_INSERT_ID() WHERE {}",
        kurir_sql::mysql::in_list("id", ids.len())
    );
    kurir_sql::mysql::bind_all(sqlx::query(&sql), ids)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// An endpoint row with its change number.
#[derive(sqlx::FromRow)]
pub(super) struct ChangedRow {
    #[sqlx(flatten)]
    endpoint: EndpointRow,
    change_seq: i64,
    deleted: i64,
}

/// Every live, enabled endpoint as of one read, with the index the relay's fan-out looks event
/// types up in. Shared and never changed: a read that changed something makes a new one.
///
/// The index is kept per subscriber (issue 29): an event addressed to a subscriber is looked up
/// only among that subscriber's endpoints, one without only among the operator's, so an event
/// costs what its own subscriber has, however many others are installed, and no lookup can
/// cross from one subscriber to another.
#[derive(Debug, Default)]
pub struct Endpoints {
    /// Oldest first (creation time, then id), as the fan-out writes deliveries.
    ordered: Vec<Arc<Endpoint>>,
    by_id: HashMap<String, usize>,
    /// The operator's own endpoints (no subscriber).
    routes: Routes,
    /// Each subscriber's endpoints.
    subscribers: HashMap<String, Routes>,
    any_ordered: bool,
}

/// Which endpoints an event type can match, by the patterns of their filters: an exact type,
/// a prefix before `*`, or everything (an empty filter, or `*`).
#[derive(Debug, Default)]
struct Routes {
    all: Vec<usize>,
    exact: HashMap<String, Vec<usize>>,
    prefix: HashMap<String, Vec<usize>>,
}

impl Endpoints {
    fn new(mut endpoints: Vec<Arc<Endpoint>>) -> Self {
        endpoints.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let mut operator = Routes::default();
        let mut subscribers: HashMap<String, Routes> = HashMap::new();
        let mut by_id = HashMap::with_capacity(endpoints.len());
        for (i, e) in endpoints.iter().enumerate() {
            by_id.insert(e.id.as_str().to_owned(), i);
            let routes = match &e.subscriber_id {
                None => &mut operator,
                Some(s) => subscribers.entry(s.clone()).or_default(),
            };
            let patterns = e.event_types.patterns();
            if patterns.is_empty() {
                routes.all.push(i);
            }
            for p in patterns {
                match p.strip_suffix('*') {
                    None => routes.exact.entry(p.clone()).or_default().push(i),
                    Some("") => routes.all.push(i),
                    Some(prefix) => routes.prefix.entry(prefix.to_owned()).or_default().push(i),
                }
            }
        }
        let any_ordered = endpoints.iter().any(|e| e.ordering != Ordering::None);
        Self {
            ordered: endpoints,
            by_id,
            routes: operator,
            subscribers,
            any_ordered,
        }
    }

    /// The endpoint with this id, if it is live and enabled.
    pub fn get(&self, id: &str) -> Option<&Arc<Endpoint>> {
        self.by_id.get(id).map(|&i| &self.ordered[i])
    }

    /// Whether some endpoint orders its deliveries per aggregate.
    pub fn any_ordered(&self) -> bool {
        self.any_ordered
    }

    /// All of them, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.ordered.iter()
    }

    /// The endpoints of `subscriber` (`None`: the operator's own) whose filter matches
    /// `event_type`, oldest first: what the index finds, each confirmed by the filter and the
    /// subscriber itself. Costs a lookup per segment of the type and the matches found, whatever
    /// the number of endpoints and subscribers.
    pub fn matching(&self, subscriber: Option<&str>, event_type: &str) -> Vec<&Arc<Endpoint>> {
        let r = match subscriber {
            None => &self.routes,
            Some(s) => match self.subscribers.get(s) {
                Some(r) => r,
                None => return Vec::new(),
            },
        };
        let mut found: Vec<usize> = r.all.clone();
        found.extend(r.exact.get(event_type).into_iter().flatten());
        // A prefix pattern is `segments.*` (`EventFilter::parse`), so the only prefixes to look
        // up end just after one of the type's dots.
        for (dot, _) in event_type.match_indices('.') {
            found.extend(r.prefix.get(&event_type[..=dot]).into_iter().flatten());
        }
        found.sort_unstable();
        found.dedup();
        found
            .into_iter()
            .map(|i| &self.ordered[i])
            .filter(|e| e.subscriber_id.as_deref() == subscriber)
            .filter(|e| e.event_types.matches(event_type))
            .collect()
    }
}

/// One process's copy of the endpoints (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Directory {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Every row applied, live or not, with its stamp (`None`: not live or not enabled).
    rows: HashMap<String, (i64, Option<Arc<Endpoint>>)>,
    /// The change number every row up to which has been applied.
    seq: i64,
    current: Arc<Endpoints>,
    /// When the whole table was last read; `None`: never.
    full_read_at: Option<Instant>,
}

/// What a reader must read to bring the directory up to `seq`.
pub(super) enum Read {
    /// Nothing: the directory is at `seq` already.
    Nothing(Arc<Endpoints>),
    /// The rows stamped above this number (`-1`: the whole table).
    Above(i64),
}

impl Directory {
    /// What to read, now that the change number is `seq`.
    pub(super) fn plan(&self, seq: i64) -> Read {
        let state = self.lock();
        let stale = state
            .full_read_at
            .is_none_or(|at| at.elapsed() >= FULL_READ_INTERVAL);
        if stale {
            Read::Above(-1)
        } else if state.seq >= seq {
            Read::Nothing(state.current.clone())
        } else {
            Read::Above(state.seq)
        }
    }

    /// Applies the rows a read of [`Read::Above`] `above` returned, read after the change
    /// number was `seq`; the endpoints as they now are.
    pub(super) fn apply(
        &self,
        seq: i64,
        above: i64,
        rows: Vec<ChangedRow>,
        codec: &SecretCodec,
    ) -> Result<Arc<Endpoints>> {
        let mut opened = Vec::with_capacity(rows.len());
        for r in rows {
            let live = r.deleted == 0 && r.endpoint.enabled;
            let id = r.endpoint.id.clone();
            let endpoint = if live {
                Some(Arc::new(r.endpoint.into_endpoint(codec)?))
            } else {
                None
            };
            opened.push((id, r.change_seq, endpoint));
        }
        let mut state = self.lock();
        let whole = above < 0;
        if whole && seq >= state.seq {
            // Every row there is: those not among them were deleted.
            state.rows.clear();
            state.full_read_at = Some(Instant::now());
        }
        let mut changed = whole;
        for (id, stamp, endpoint) in opened {
            let newer = state.rows.get(&id).is_none_or(|(s, _)| *s < stamp);
            if newer {
                state.rows.insert(id, (stamp, endpoint));
                changed = true;
            }
        }
        state.seq = state.seq.max(seq);
        if changed {
            let live = state.rows.values().filter_map(|(_, e)| e.clone()).collect();
            state.current = Arc::new(Endpoints::new(live));
        }
        Ok(state.current.clone())
    }

    /// The endpoints as of the last read, without reading.
    pub(super) fn current(&self) -> Arc<Endpoints> {
        self.lock().current.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads the directory up to date on `$conn` (a pool, or `&mut *tx` to read inside a
/// transaction) in `$dialect`, with `$seq_sql` as the read of the change number: the
/// endpoints as they now are.
macro_rules! read_directory {
    ($directory:expr, $codec:expr, $conn:expr, $dialect:ident, $seq_sql:expr) => {{
        let seq: i64 = sqlx::query_scalar($seq_sql).fetch_one($conn).await?;
        match $directory.plan(seq) {
            $crate::store::directory::Read::Nothing(now) => now,
            $crate::store::directory::Read::Above(above) => {
                let changed = &$crate::store::directory::CHANGED;
                let rows = kurir_sql::run!($conn, $dialect, changed, query_as, fetch_all, above)?;
                $directory.apply(seq, above, rows, $codec)?
            }
        }
    }};
}

pub(super) use read_directory;

impl super::Store {
    /// Every live, enabled endpoint, as of now: one read of the change number, and the rows
    /// changed since the last read, if any (see the module doc).
    pub async fn live_endpoints(&self) -> Result<Arc<Endpoints>> {
        Ok(match self {
            super::Store::Postgres(s) => {
                read_directory!(s.directory, &s.secrets, s.pool(), postgres, SEQ.postgres)
            }
            super::Store::Sqlite(s) => {
                read_directory!(s.directory, &s.secrets, s.pool(), sqlite, SEQ.sqlite)
            }
            super::Store::Mysql(s) => {
                read_directory!(s.directory, &s.secrets, s.pool(), mysql, SEQ.mysql)
            }
        })
    }

    /// Brings this process's copy up to date after one of its own endpoint or subscriber
    /// writes, so that its lanes stop sending to an endpoint deleted or disabled here at once,
    /// not at the dispatcher's next step. A failed read is not the write's failure: the next
    /// step reads again.
    pub(super) async fn refresh_directory(&self) {
        if let Err(e) = self.live_endpoints().await {
            tracing::debug!(error = %e, "reading the endpoints after a write failed; the dispatcher reads them again");
        }
    }

    /// The live, enabled endpoints as this process last read them ([`Self::live_endpoints`]),
    /// without a read: what a delivery waiting in a lane is checked against before it is sent.
    /// Before the first read, none.
    pub fn known_endpoints(&self) -> Arc<Endpoints> {
        match self {
            super::Store::Postgres(s) => s.directory.current(),
            super::Store::Sqlite(s) => s.directory.current(),
            super::Store::Mysql(s) => s.directory.current(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Endpoints;
    use crate::endpoint::{EventFilter, NewEndpoint};
    use crate::store::endpoint_from_new;

    fn with_filter(patterns: &[&str]) -> Arc<crate::endpoint::Endpoint> {
        let mut new = NewEndpoint::new("https://example.com/hook");
        new.event_types = EventFilter::parse(patterns.iter().map(|p| p.to_string()).collect())
            .expect("valid patterns");
        Arc::new(endpoint_from_new(new, chrono::Utc::now()))
    }

    /// The index finds exactly what each filter's own rule matches, for every kind of pattern,
    /// an endpoint with several matching patterns once.
    #[test]
    fn matching_finds_what_the_filters_match_once_each() {
        let filters: &[&[&str]] = &[
            &[],
            &["*"],
            &["order.paid"],
            &["order.*"],
            &["order.*", "order.paid"],
            &["order.paid.*"],
            &["payment.*"],
            &["order.paid.late"],
        ];
        let all: Vec<_> = filters.iter().map(|f| with_filter(f)).collect();
        let endpoints = Endpoints::new(all.clone());
        for t in ["order.paid", "order", "order.paid.late", "payment.x", "x"] {
            let found: Vec<_> = (endpoints.matching(None, t).iter())
                .map(|e| e.id.clone())
                .collect();
            let expected: Vec<_> = (endpoints.iter())
                .filter(|e| e.event_types.matches(t))
                .map(|e| e.id.clone())
                .collect();
            assert_eq!(found, expected, "event type {t}");
        }
    }

    /// An event finds only its own subscriber's endpoints, one without a subscriber only the
    /// operator's, whatever the filters say.
    #[test]
    fn matching_never_crosses_from_one_subscriber_to_another() {
        let owned = |s: Option<&str>| {
            let mut e = (*with_filter(&["*"])).clone();
            e.subscriber_id = s.map(str::to_owned);
            Arc::new(e)
        };
        let (a, b, op) = (owned(Some("cus_a")), owned(Some("cus_b")), owned(None));
        let endpoints = Endpoints::new(vec![a.clone(), b.clone(), op.clone()]);
        let ids = |s: Option<&str>| -> Vec<_> {
            (endpoints.matching(s, "order.paid").iter())
                .map(|e| e.id.clone())
                .collect()
        };
        assert_eq!(ids(Some("cus_a")), vec![a.id.clone()]);
        assert_eq!(ids(Some("cus_b")), vec![b.id.clone()]);
        assert_eq!(ids(None), vec![op.id.clone()]);
        assert!(ids(Some("cus_unknown")).is_empty());
    }
}
