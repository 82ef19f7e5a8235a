//! `prune`: what pruning costs delivery (issue 16). A million old rows lie in the tables (events
//! delivered two days ago, each with its delivery and its attempt: a third of a million events),
//! and kurir delivers at half the measured one-endpoint throughput, once keeping everything and
//! once with a retention of one day, so that its pruner deletes those rows meanwhile. The figure
//! is the delivery rate while pruning as a fraction of the rate while keeping, with each run's
//! p99 commit→receipt and the rows pruned during the run.

use super::{produce, result, Ctx, Rig, Via};
use crate::db::{each_pool, AppPool, EVENT_TYPE, PAYLOAD};
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// Old events seeded per million rows (an event, its delivery and its attempt: three rows).
const ROWS_PER_EVENT: usize = 3;

/// Both runs.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    let measured = super::latency::one_endpoint_throughput(ctx, &mut out).await?;
    let rate = (measured / 2.0).max(50.0);
    let keeping = one(ctx, rate, false).await?;
    let mut pruning = one(ctx, rate, true).await?;
    let a = keeping.get("deliveries_per_s").unwrap_or(0.0);
    let b = pruning.get("deliveries_per_s").unwrap_or(0.0);
    let fraction = b / a.max(f64::MIN_POSITIVE);
    pruning.metric("fraction_of_keeping", fraction, "");
    pruning.at_least("delivery rate kept while pruning", fraction, 0.9, "");
    out.extend([keeping, pruning]);
    Ok(out)
}

async fn one(ctx: &Ctx, rate: f64, prune: bool) -> anyhow::Result<ScenarioResult> {
    let old = ctx.sizes.prune_rows / ROWS_PER_EVENT;
    let label = if prune { "pruning" } else { "keeping" };
    let mut r = result(
        "prune",
        format!("{rate:.0}/s, {label} {} old rows", old * ROWS_PER_EVENT),
    );
    let n = (rate * ctx.sizes.duration.as_secs_f64()).ceil() as usize;
    let base = ctx.events(n);
    let mut rig = Rig::new(ctx, base, n, &["e/0".to_owned()]).await?;
    seed_delivered(&rig.app, old as i64, &rig.endpoint_ids[0]).await?;
    let settings = if prune {
        vec![
            ("KURIR_RETENTION", "1d".to_owned()),
            ("KURIR_PRUNE_INTERVAL", "1s".to_owned()),
        ]
    } else {
        vec![("KURIR_RETENTION", "3650d".to_owned())]
    };
    rig.start_kurir_with(ctx, &settings).await?;
    let achieved = produce(
        &rig.app,
        &Via::Rust,
        &rig.recorder,
        base,
        n,
        super::latency::pace(rate),
    )
    .await?;
    if !rig.wait_for(n as u64, ctx.sizes.patience).await {
        r.notes.push(format!(
            "gave up waiting: {} of {n} arrived",
            rig.recorder.received()
        ));
    }
    let left = old_events_left(&rig.app).await?;
    let d = Deliveries::collect(&rig.recorder, 0..1);
    let lat = d.latency();
    r.metric("target_rate", rate, "/s");
    r.metric("achieved_enqueue_rate", achieved, "/s");
    r.metric("deliveries_per_s", d.receipt_rate(), "/s");
    r.metric("latency_p50", lat.p50, "ms");
    r.metric("latency_p99", lat.p99, "ms");
    r.metric(
        "old_rows_pruned",
        ((old as i64 - left) * ROWS_PER_EVENT as i64) as f64,
        "rows",
    );
    r.notes.push(format!(
        "{n} events paced over {:?}; {old} old events seeded, {left} left at the end",
        ctx.sizes.duration
    ));
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}

/// `count` events delivered two days ago to `endpoint_id`, each with its `sent` delivery and
/// one attempt, in bulk: what kurir would have left behind.
async fn seed_delivered(app: &AppPool, count: i64, endpoint_id: &str) -> anyhow::Result<()> {
    let (outbox, analyze) = match app {
        AppPool::Postgres(_) => (OUTBOX_PG.to_owned(), "ANALYZE"),
        AppPool::Sqlite(_) => (OUTBOX_SQLITE.to_owned(), "ANALYZE"),
        AppPool::Mysql(_) => (
            OUTBOX_MYSQL.replace("{numbers}", &crate::db::mysql_numbers()),
            "ANALYZE TABLE kurir_outbox, kurir_deliveries, kurir_attempts",
        ),
    };
    let dialect = |sql: &str| match app {
        AppPool::Postgres(_) => sql.to_owned(),
        AppPool::Sqlite(_) => sql.replace('$', "?"),
        AppPool::Mysql(_) => sql.replace("$1", "?"),
    };
    each_pool!(app, pool => {
        sqlx::query(&outbox)
            .bind(EVENT_TYPE)
            .bind(PAYLOAD)
            .bind(count)
            .execute(pool)
            .await?;
        for sql in [DELIVERIES, ATTEMPTS] {
            sqlx::query(&dialect(sql)).bind(endpoint_id).execute(pool).await?;
        }
        if matches!(app, AppPool::Sqlite(_)) {
            sqlx::query(crate::db::SQLITE_CURSOR_PAST_HISTORY).execute(pool).await?;
        }
        sqlx::query(analyze).execute(pool).await?;
    });
    Ok(())
}

/// The seeded events: `old-1` … (binds: the type, the payload, the count).
const OUTBOX_PG: &str = "INSERT INTO kurir_outbox (event_id, event_type, payload, occurred_at, \
        created_at, dispatched_at, txid) \
     SELECT 'old-' || g, $1, $2::json, t, t, t, NULL \
     FROM generate_series(1, $3) AS g, (SELECT now() - interval '2 days' AS t) AS c";

const OUTBOX_SQLITE: &str = "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g \
        WHERE x < ?3), c(t) AS (SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days')) \
     INSERT INTO kurir_outbox (event_id, event_type, payload, occurred_at, created_at, \
        dispatched_at) \
     SELECT 'old-' || x, ?1, ?2, t, t, t FROM g, c";

const OUTBOX_MYSQL: &str = "INSERT INTO kurir_outbox (event_id, event_type, payload, occurred_at, \
        created_at, dispatched_at) \
     SELECT CONCAT('old-', x.n), ?, ?, t, t, t \
     FROM ({numbers}) AS x, (SELECT UTC_TIMESTAMP(3) - INTERVAL 2 DAY AS t) AS c WHERE x.n < ?";

/// One `sent` delivery per seeded event (`$1`: the endpoint).
const DELIVERIES: &str = "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, \
        status, attempt_count, available_at, sent_at, created_at, updated_at) \
     SELECT id, event_id, $1, 'sent', 1, created_at, created_at, created_at, created_at \
     FROM kurir_outbox WHERE event_id LIKE 'old-%'";

/// One attempt per seeded delivery.
const ATTEMPTS: &str = "INSERT INTO kurir_attempts (delivery_id, attempt, started_at, \
        duration_ms, status_code) \
     SELECT id, 1, created_at, 3, 200 FROM kurir_deliveries \
     WHERE endpoint_id = $1 AND status = 'sent'";

/// Seeded events still in the outbox.
async fn old_events_left(app: &AppPool) -> anyhow::Result<i64> {
    let sql = "SELECT count(*) FROM kurir_outbox WHERE event_id LIKE 'old-%'";
    Ok(each_pool!(app, pool => sqlx::query_scalar(sql).fetch_one(pool).await?))
}
