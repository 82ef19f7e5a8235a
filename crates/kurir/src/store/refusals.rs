//! Outbox rows refused before fan-out, and checking them again.
//!
//! The relay records a row written with plain SQL that the API would have refused (a payload
//! nested too deep, or one the event catalog refuses) with its `refused_reason`, in the
//! transaction that passes it (`store::rules::fan_out`, the dialects' relays). Such a row is
//! never delivered and never dropped: it is counted ([`Store::refused_by_type`]) and shown with
//! its event. Once the schema or the producer is fixed, [`Store::recheck_refused`] checks the
//! catalog's refusals again and fans out those that now pass, with their original `event_id`,
//! exactly as the relay would have: to the live endpoints created no later than the event whose
//! filter matches its type. The SQL contract's refusals cannot pass and are left alone.

use std::collections::BTreeMap;

use super::directory::{read_directory, SEQ};
use super::event_list::UNREFUSE;
use super::rows::{OutboxHead, Ts};
use super::rules::{fan_out, FanOut};
use super::sql::{execute_on, query_as_on, run_in, Sql};
use super::{Result, Store};
use crate::catalog::check::CATALOG_REASON_PREFIXES;
use crate::catalog::{Checks, Verdict};

/// Rows checked per round of a recheck.
const RECHECK_PAGE: u32 = 200;

/// Refused rows per event type, through the refused rows' index of `kurir_event_list` (the
/// relay lists a row in the transaction that refuses it).
const REFUSED_BY_TYPE: Sql = Sql {
    postgres: "SELECT event_type, count(*) FROM kurir_event_list WHERE refused \
        GROUP BY event_type",
    sqlite: "SELECT event_type, count(*) FROM kurir_event_list WHERE refused \
        GROUP BY event_type",
    mysql: "SELECT CAST(event_type AS CHAR), COUNT(*) FROM kurir_event_list \
        WHERE refused = TRUE GROUP BY event_type",
};

/// Up to `$3` rows the catalog refused, with ids above `$1`, of type `$2` (`''`: any), in id
/// order, through the refused rows' index of `kurir_event_list`.
const CANDIDATES: Sql = Sql {
    postgres: "SELECT o.id, o.event_id, o.event_type, o.version, o.aggregate_type, \
            o.aggregate_id, o.created_at, o.subscriber_id, o.payload::text AS payload, \
            o.refused_reason \
        FROM kurir_event_list l JOIN kurir_outbox o ON o.id = l.outbox_id \
        WHERE l.refused AND l.outbox_id > $1 AND ($2 = '' OR l.event_type = $2) \
            AND (o.refused_reason LIKE 'schema:%' OR o.refused_reason LIKE 'catalog:%') \
        ORDER BY l.outbox_id LIMIT $3",
    sqlite: "SELECT o.id, o.event_id, o.event_type, o.version, o.aggregate_type, \
            o.aggregate_id, o.created_at, o.subscriber_id, o.payload, o.refused_reason \
        FROM kurir_event_list l JOIN kurir_outbox o ON o.id = l.outbox_id \
        WHERE l.refused AND l.outbox_id > ?1 AND (?2 = '' OR l.event_type = ?2) \
            AND (o.refused_reason LIKE 'schema:%' OR o.refused_reason LIKE 'catalog:%') \
        ORDER BY l.outbox_id LIMIT ?3",
    mysql: "SELECT o.id, CAST(o.event_id AS CHAR) AS event_id, \
            CAST(o.event_type AS CHAR) AS event_type, o.version, \
            CAST(o.aggregate_type AS CHAR) AS aggregate_type, \
            CAST(o.aggregate_id AS CHAR) AS aggregate_id, o.created_at, \
            CAST(o.subscriber_id AS CHAR) AS subscriber_id, CAST(o.payload AS CHAR) AS payload, \
            CAST(o.refused_reason AS CHAR) AS refused_reason \
        FROM kurir_event_list l JOIN kurir_outbox o ON o.id = l.outbox_id \
        WHERE l.refused = TRUE AND l.outbox_id > $1 AND ($2 = '' OR l.event_type = $2) \
            AND (o.refused_reason LIKE 'schema:%' OR o.refused_reason LIKE 'catalog:%') \
        ORDER BY l.outbox_id LIMIT $3",
};

/// A refused row's new reason (`$1`), where it is still refused (row `$2`).
const REFUSE_AGAIN: Sql = Sql {
    postgres: "UPDATE kurir_outbox SET refused_reason = $1 \
        WHERE id = $2 AND refused_reason IS NOT NULL",
    sqlite: "UPDATE kurir_outbox SET refused_reason = ?1 \
        WHERE id = ?2 AND refused_reason IS NOT NULL",
    mysql: "UPDATE kurir_outbox SET refused_reason = $1 \
        WHERE id = $2 AND refused_reason IS NOT NULL",
};

/// Clears row `$1`'s refusal if it still has the reason `$2` the recheck read: of two rechecks
/// at once, only one clears it, and only that one writes its deliveries. Locks the row.
const CLEAR: Sql = Sql {
    postgres: "UPDATE kurir_outbox SET refused_reason = NULL WHERE id = $1 AND refused_reason = $2",
    sqlite: "UPDATE kurir_outbox SET refused_reason = NULL WHERE id = ?1 AND refused_reason = ?2",
    mysql: "UPDATE kurir_outbox SET refused_reason = NULL WHERE id = $1 AND refused_reason = $2",
};

/// The deliveries of one event (outbox row `$1`, event `$2`), from a JSON array of
/// `[endpoint_id, ordering_key]` (`$3`), pending and due now.
const INSERT_DELIVERIES: Sql = Sql {
    postgres: "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key) \
        SELECT $1, $2, x->>0, x->>1 FROM json_array_elements($3::json) AS x \
        ON CONFLICT (outbox_id, endpoint_id) DO NOTHING",
    sqlite: "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key, \
            status, attempt_count, available_at, created_at, updated_at) \
        SELECT ?1, ?2, json_extract(value, '$[0]'), json_extract(value, '$[1]'), 'pending', 0, \
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
        FROM json_each(?3) WHERE true ON CONFLICT (outbox_id, endpoint_id) DO NOTHING",
    mysql: "INSERT IGNORE INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key) \
        SELECT $1, $2, x.e, x.k FROM JSON_TABLE($3, '$[*]' COLUMNS ( \
            e VARCHAR(255) PATH '$[0]', k VARCHAR(520) PATH '$[1]')) AS x",
};

/// On MySQL, the endpoints' change number read shared, as the relay reads it: an endpoint's
/// change waits for this transaction, and this one sees every change committed before it.
const SEQ_SHARED_MYSQL: &str = "SELECT seq FROM kurir_endpoint_changes LOCK IN SHARE MODE";

/// A refused row, as a recheck reads it.
#[derive(sqlx::FromRow)]
struct RefusedRow {
    id: i64,
    event_id: String,
    event_type: String,
    version: i32,
    aggregate_type: Option<String>,
    aggregate_id: Option<String>,
    created_at: Ts,
    subscriber_id: Option<String>,
    payload: String,
    refused_reason: String,
}

/// What a recheck did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Rechecked {
    /// Refused events checked again (the catalog's refusals; the SQL contract's cannot pass).
    pub checked: u64,
    /// Of those, the events that now pass and were fanned out, with their original event_id.
    pub delivered: u64,
    /// The deliveries written for them.
    pub deliveries: u64,
    /// The events that still fail (their reason is brought up to date).
    pub still_refused: u64,
}

impl Store {
    /// Refused outbox rows per event type (the `kurir_outbox_refused` gauge).
    pub async fn refused_by_type(&self) -> Result<BTreeMap<String, i64>> {
        let rows: Vec<(String, i64)> = query_as_on!(self, REFUSED_BY_TYPE, fetch_all)?;
        Ok(rows.into_iter().collect())
    }

    /// Checks the events the catalog refused (of `event_type`, or all) against the catalog as
    /// it is now, and fans out those that pass (see the module doc). Rows are read a page at a
    /// time; each page's fan-out is one transaction.
    pub async fn recheck_refused(&self, event_type: Option<&str>) -> Result<Rechecked> {
        let checks = self.event_checks_now().await?;
        let mut done = Rechecked::default();
        let mut after = 0i64;
        let only = event_type.unwrap_or("");
        loop {
            let rows: Vec<RefusedRow> = query_as_on!(
                self,
                CANDIDATES,
                fetch_all,
                after,
                only,
                i64::from(RECHECK_PAGE)
            )?;
            let Some(last) = rows.last() else {
                return Ok(done);
            };
            after = last.id;
            let full = rows.len() as u32 == RECHECK_PAGE;
            let mut passing = Vec::new();
            for row in rows {
                done.checked += 1;
                debug_assert!(CATALOG_REASON_PREFIXES
                    .iter()
                    .any(|p| row.refused_reason.starts_with(p)));
                match checks.check_text(&row.event_type, row.version, Some(&row.payload)) {
                    Verdict::Refused(r) => {
                        done.still_refused += 1;
                        if r.reason != row.refused_reason {
                            execute_on!(self, REFUSE_AGAIN, &r.reason, row.id)?;
                        }
                    }
                    Verdict::Pass { .. } => passing.push(row),
                }
            }
            if !passing.is_empty() {
                let (events, deliveries) = self.fan_out_rechecked(passing).await?;
                done.delivered += events;
                done.deliveries += deliveries;
            }
            if !full {
                return Ok(done);
            }
        }
    }

    /// Fans `rows` out as the relay would, in one transaction that reads the endpoints as the
    /// relay's does (PostgreSQL: under the fan-out lock, shared; SQLite: the write lock; MySQL:
    /// the endpoints' change number shared). Each row is cleared of its refusal first; a row
    /// another recheck cleared meanwhile is skipped. How many events and deliveries it wrote.
    async fn fan_out_rechecked(&self, rows: Vec<RefusedRow>) -> Result<(u64, u64)> {
        let reasons: Vec<(i64, String)> = rows
            .iter()
            .map(|r| (r.id, r.refused_reason.clone()))
            .collect();
        let heads: Vec<OutboxHead> = rows.into_iter().map(head).collect();
        // Checked already: the fan-out checks nothing again.
        let unchecked = Checks::off();
        macro_rules! fan_out_in {
            ($tx:expr, $dialect:ident, $endpoints:expr) => {{
                let out = fan_out(heads, &$endpoints, &unchecked);
                let mut written = (0u64, 0u64);
                for (id, reason) in &reasons {
                    let cleared = run_in!($tx, $dialect, CLEAR, query, execute, id, reason)?;
                    if cleared.rows_affected() == 0 {
                        continue;
                    }
                    run_in!($tx, $dialect, UNREFUSE, query, execute, id)?;
                    let (event_id, targets) = targets_of(&out, *id);
                    let inserted = run_in!(
                        $tx,
                        $dialect,
                        INSERT_DELIVERIES,
                        query,
                        execute,
                        id,
                        &event_id,
                        &targets
                    )?;
                    written.0 += 1;
                    written.1 += inserted.rows_affected();
                }
                $tx.commit().await?;
                written
            }};
        }
        Ok(match self {
            Store::Postgres(s) => {
                let mut tx = s.pool().begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock_shared($1)::text")
                    .bind(super::postgres::FAN_OUT_LOCK)
                    .execute(&mut *tx)
                    .await?;
                let endpoints =
                    read_directory!(s.directory, &s.secrets, &mut *tx, postgres, SEQ.postgres);
                fan_out_in!(tx, postgres, endpoints)
            }
            Store::Sqlite(s) => {
                let mut tx = s.pool().begin_with("BEGIN IMMEDIATE").await?;
                let endpoints =
                    read_directory!(s.directory, &s.secrets, &mut *tx, sqlite, SEQ.sqlite);
                fan_out_in!(tx, sqlite, endpoints)
            }
            Store::Mysql(s) => {
                let mut tx = s.pool().begin().await?;
                let endpoints =
                    read_directory!(s.directory, &s.secrets, &mut *tx, mysql, SEQ_SHARED_MYSQL);
                fan_out_in!(tx, mysql, endpoints)
            }
        })
    }
}

/// The relay's view of a refused row.
fn head(r: RefusedRow) -> OutboxHead {
    OutboxHead {
        id: r.id,
        event_id: r.event_id,
        event_type: r.event_type,
        aggregate_type: r.aggregate_type,
        aggregate_id: r.aggregate_id,
        version: r.version,
        created_at: r.created_at,
        subscriber_id: r.subscriber_id,
        payload: None,
        passed: false,
        suspect: None,
    }
}

/// Outbox row `id`'s event id and its deliveries in `out`, as [`INSERT_DELIVERIES`]' JSON.
fn targets_of(out: &FanOut, id: i64) -> (String, String) {
    let mut event_id = String::new();
    let mut targets = Vec::new();
    for (i, outbox_id) in out.outbox_ids.iter().enumerate() {
        if *outbox_id == id {
            event_id.clone_from(&out.event_ids[i]);
            targets.push(serde_json::json!([
                out.endpoint_ids[i],
                out.ordering_keys[i]
            ]));
        }
    }
    (event_id, serde_json::Value::from(targets).to_string())
}
