//! Statements kurir ran per delivery, from `pg_stat_statements` when the PostgreSQL server
//! loads it (`shared_preload_libraries`); nothing otherwise. The harness's own statements are
//! taken out: its monitoring queries by their text, the application's `INSERT`s and their
//! transactions' `BEGIN` and `COMMIT` by their known number.

use std::collections::HashMap;

use crate::report::ScenarioResult;

/// The harness's monitoring queries, which kurir does not run.
const HARNESS: [&str; 6] = [
    "shared_preload_libraries",
    "pg_stat_activity",
    "pg_backend_pid",
    "pg_stat_user_tables",
    "pg_stat_statements",
    "FROM kurir_deliveries WHERE status =",
];

/// The application's `INSERT`, as `pg_stat_statements` normalises it.
const APP_INSERT: &str =
    "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload)";

/// Calls and rows per normalised statement of this database.
#[derive(Default)]
pub struct Counts(HashMap<i64, (String, i64, i64)>);

/// Reads the counts, creating the extension in this (scratch) database first; `None` when the
/// server does not load the library.
pub async fn read(pool: &sqlx::PgPool) -> anyhow::Result<Option<Counts>> {
    let loaded: bool = sqlx::query_scalar(
        "SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'",
    )
    .fetch_one(pool)
    .await?;
    if !loaded {
        return Ok(None);
    }
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await?;
    let rows: Vec<(i64, String, i64, i64)> = sqlx::query_as(
        "SELECT queryid, query, calls, rows FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND queryid IS NOT NULL",
    )
    .fetch_all(pool)
    .await?;
    Ok(Some(Counts(
        rows.into_iter()
            .map(|(id, q, calls, rows)| (id, (q, calls, rows)))
            .collect(),
    )))
}

/// Adds kurir's statements per delivery between `before` and `after` to `r`, the busiest in
/// a note; `app_transactions` are the application's (each a `BEGIN` and a `COMMIT`).
pub fn record(
    r: &mut ScenarioResult,
    before: &Counts,
    after: &Counts,
    app_transactions: i64,
    deliveries: usize,
) {
    let mut kurir: Vec<(String, i64, i64)> = Vec::new();
    for (id, (query, calls, rows)) in &after.0 {
        let (_, c0, r0) = before.0.get(id).cloned().unwrap_or_default();
        let mut calls = calls - c0;
        let query = query.split_whitespace().collect::<Vec<_>>().join(" ");
        if calls <= 0 || HARNESS.iter().any(|h| query.contains(h)) || query.starts_with(APP_INSERT)
        {
            continue;
        }
        if query.eq_ignore_ascii_case("BEGIN") || query.eq_ignore_ascii_case("COMMIT") {
            calls -= app_transactions;
        }
        if calls > 0 {
            kurir.push((query, calls, rows - r0));
        }
    }
    kurir.sort_by_key(|(_, calls, _)| std::cmp::Reverse(*calls));
    let per = |n: i64| n as f64 / deliveries.max(1) as f64;
    let total: i64 = kurir.iter().map(|(_, c, _)| c).sum();
    r.metric("statements_per_delivery", per(total), "");
    let top: Vec<String> = (kurir.iter().take(12))
        .map(|(q, calls, rows)| {
            let q: String = q.chars().take(90).collect();
            let rows_per_call = *rows as f64 / *calls as f64;
            format!(
                "{:.3}/delivery ({rows_per_call:.1} rows/call) {q}",
                per(*calls)
            )
        })
        .collect();
    r.notes.push(format!(
        "kurir's statements (pg_stat_statements), per delivery: {}",
        top.join(" | ")
    ));
}
