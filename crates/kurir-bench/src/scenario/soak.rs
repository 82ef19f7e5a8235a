//! `soak`: retention keeps the tables flat (issue 16). Events arrive at a steady rate for three
//! `--duration`s (at least 6 s) while kurir keeps one second of history and prunes every 200 ms;
//! the rows of `kurir_outbox`, `kurir_deliveries` and `kurir_attempts` are counted twice a
//! second, and on PostgreSQL their `pg_total_relation_size`. Flat means the most rows seen in the
//! last third is no more than half again the most seen in the second third.

use std::time::{Duration, Instant};

use super::{result, Ctx, Rig};
use crate::db::Backend;
use crate::report::ScenarioResult;

/// Events per second written.
const RATE: u64 = 100;

/// How much the last third may exceed the second third and still count as flat.
const MOST_GROWTH: f64 = 1.5;

const COUNT_ROWS: &str = "SELECT (SELECT count(*) FROM kurir_outbox) \
    + (SELECT count(*) FROM kurir_deliveries) + (SELECT count(*) FROM kurir_attempts)";

const PG_SIZE: &str = "SELECT (pg_total_relation_size('kurir_outbox') \
    + pg_total_relation_size('kurir_deliveries') + pg_total_relation_size('kurir_attempts'))::int8";

/// One soak run.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut r = result("soak", format!("{RATE} events/s, retention 1s"));
    let length = (ctx.sizes.duration * 3).max(Duration::from_secs(6));
    let events = (RATE * length.as_secs()) as usize;
    let base = ctx.events(events);
    let mut rig = Rig::new(ctx, base, events, &["e/0".to_owned()]).await?;
    let settings = [
        ("KURIR_RETENTION", "1s".to_owned()),
        ("KURIR_PRUNE_INTERVAL", "200ms".to_owned()),
    ];
    let k = crate::child::UnderTest::kurir(&rig.db.url, &ctx.dir, &settings).await?;
    rig.kurir = Some(k);
    let store = rig.db.store().await?;
    let (mut rows, mut sizes) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut next = 0u64;
    while started.elapsed() < length {
        let due = (started.elapsed().as_secs_f64() * RATE as f64) as u64;
        if due > next {
            super::write(&rig.app, &super::Via::Rust, base + next..base + due).await?;
            next = due;
        }
        if rows.len() < (started.elapsed().as_millis() / 500) as usize {
            let (count, size) = sample(&store).await?;
            rows.push(count);
            sizes.push(size);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.close().await;
    figures(&mut r, &rows, &sizes, ctx.backend);
    r.notes.push(format!(
        "{next} events over {length:?}; rows every 500 ms: {rows:?}"
    ));
    let written = next as usize;
    rig.finish(&mut r, written).await?;
    Ok(vec![r])
}

/// Rows in the three tables, and their size in bytes on PostgreSQL (0 on SQLite, and on MySQL,
/// whose `information_schema` sizes are InnoDB's estimates, refreshed long after the rows go).
async fn sample(store: &kurir::store::Store) -> anyhow::Result<(i64, i64)> {
    Ok(match store {
        kurir::store::Store::Postgres(pg) => (
            sqlx::query_scalar(COUNT_ROWS).fetch_one(pg.pool()).await?,
            sqlx::query_scalar(PG_SIZE).fetch_one(pg.pool()).await?,
        ),
        kurir::store::Store::Sqlite(sq) => (
            sqlx::query_scalar(COUNT_ROWS).fetch_one(sq.pool()).await?,
            0,
        ),
        kurir::store::Store::Mysql(my) => (
            sqlx::query_scalar(COUNT_ROWS).fetch_one(my.pool()).await?,
            0,
        ),
    })
}

fn figures(r: &mut ScenarioResult, rows: &[i64], sizes: &[i64], backend: Backend) {
    let third = rows.len() / 3;
    let most = |v: &[i64]| v.iter().copied().max().unwrap_or(0) as f64;
    let middle = most(&rows[third..2 * third]);
    let last = most(&rows[2 * third..]);
    r.metric("rows_max_second_third", middle, "rows");
    r.metric("rows_max_last_third", last, "rows");
    r.at_most(
        "rows in the last third over the second third",
        last / middle.max(1.0),
        MOST_GROWTH,
        "x",
    );
    if backend == Backend::Postgres {
        r.metric(
            "table_bytes_second_third",
            most(&sizes[third..2 * third]) / 1e6,
            "MB",
        );
        r.metric(
            "table_bytes_last_third",
            most(&sizes[2 * third..]) / 1e6,
            "MB",
        );
    }
}
