//! The PostgreSQL store: shared by any number of kurir processes, which coordinate only through
//! row locks (`FOR UPDATE SKIP LOCKED`), leases and fences.

mod admin;
mod cursors;
mod leases;
mod notify;
mod relay;

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::query::Query;
use sqlx::{Connection, Postgres, Row};

use super::pool::reject_unfinished;
use super::rules::{gone_endpoints, next_at, next_status};
use super::{Result, StoreError};
use crate::delivery::Completion;
use crate::endpoint::Endpoint;

/// A completion batch in one statement (see [`PgStore::complete_deliveries`]): records every
/// attempt whose delivery still exists, and moves each delivery on where the fence lets it.
/// `$1`–`$6` and `$8`–`$11` are the batch's columns, `$7` the owner.
const COMPLETE_SQL: &str = "WITH recorded AS ( \
         INSERT INTO kurir_attempts (delivery_id, attempt, trigger, started_at, duration_ms, \
             status_code, error, response_body, worker) \
         SELECT id, attempt, trig, started, ms, code, err, body, $7 \
         FROM unnest($1::int8[], $2::int4[], $8::text[], $9::timestamptz[], $10::int8[], \
             $5::int4[], $6::text[], $11::text[]) \
             AS a(id, attempt, trig, started, ms, code, err, body) \
         WHERE EXISTS (SELECT 1 FROM kurir_deliveries WHERE id = a.id) \
     ) \
     UPDATE kurir_deliveries AS d SET status = x.status, \
         available_at = COALESCE(x.next_at, d.available_at), \
         lease_owner = NULL, lease_expires_at = NULL, \
         last_status_code = x.code, last_error = x.err, \
         sent_at = CASE WHEN x.status = 'sent' THEN now() ELSE d.sent_at END, \
         trigger = 'scheduled', updated_at = now() \
     FROM unnest($1::int8[], $2::int4[], $3::text[], $4::timestamptz[], $5::int4[], $6::text[]) \
         AS x(id, attempt, status, next_at, code, err) \
     WHERE d.id = x.id AND CASE WHEN d.lease_owner = $7 \
             AND d.status IN ('processing', 'failed', 'dead_letter') \
         THEN d.attempt_count = x.attempt ELSE FALSE END";

/// The advisory lock that orders fan-out and endpoint deletion: each relay batch holds it
/// shared, a deletion exclusively, so a relay never writes deliveries for an endpoint whose
/// deletion committed after the relay read it (the hot tables have no foreign keys to refuse
/// them, see migration 0004). "kurir" in ASCII, then 1.
pub(super) const FAN_OUT_LOCK: i64 = 0x6b75_7269_7200_0001;

/// kurir's tables in a PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    /// For kurir's own bookkeeping (relay, claims, completions, lease sweeps): sessions with
    /// `synchronous_commit = off`, so these commits do not wait for the WAL flush. A crash may
    /// lose the last few hundred milliseconds of them, always a consistent prefix; every such
    /// loss only makes a delivery due again, which at-least-once delivery already allows (a
    /// duplicate, never a lost event). Writes made for someone else (the admin API's publish,
    /// endpoints, replays) stay on `pool`, durable when they return.
    bookkeeping: PgPool,
    /// When claims look for orphans past the rows they take.
    orphan_looks: std::sync::Arc<super::OrphanLooks>,
    /// This process's copy of the endpoints (see `store::directory`).
    pub(super) directory: std::sync::Arc<super::directory::Directory>,
    /// This process's compiled copy of the event catalog (see `store::catalog`).
    pub(super) catalog: std::sync::Arc<super::catalog::CatalogCache>,
    /// Where each endpoint's next claim starts reading its due rows.
    claim_cursors: std::sync::Arc<cursors::ClaimCursors>,
    /// Seals and opens the secret columns.
    pub(super) secrets: super::SecretCodec,
    /// Where the times this process writes for others to compare come from (see `store::clock`).
    pub(super) clock: kurir_core::Clock,
}

impl PgStore {
    /// Connects with a pool sized for one kurir process.
    /// One connection is opened first, so an unreachable database fails with the driver's own
    /// reason (refused, unknown host, authentication) rather than a pool timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        let connect_err = StoreError::connecting("postgres");
        let options = PgConnectOptions::from_str(url).map_err(connect_err)?;
        let probe = PgConnection::connect_with(&options)
            .await
            .map_err(connect_err)?;
        probe.close().await.map_err(connect_err)?;
        // kurir's working set (the partial indexes of what is due or leased, recent rows) is in
        // memory: random reads cost about what sequential ones do, as on SSDs, so say so, or the
        // planner prefers reading a whole table to a few hundred primary-key lookups.
        let options = options.options([("random_page_cost", "1.1")]);
        let bookkeeping = reject_unfinished(PgPoolOptions::new())
            .max_connections(6)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_lazy_with(options.clone().options([("synchronous_commit", "off")]));
        let pool = reject_unfinished(PgPoolOptions::new())
            .max_connections(16)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_lazy_with(options);
        Ok(Self {
            pool,
            bookkeeping,
            orphan_looks: Default::default(),
            directory: Default::default(),
            catalog: Default::default(),
            claim_cursors: Default::default(),
            secrets: Default::default(),
            clock: Default::default(),
        })
    }

    /// Wraps an existing pool (the application's own, for example); bookkeeping then commits
    /// with the pool's own settings.
    /// The pool keeps its own options: unlike `connect`'s, it may hand out a connection that a
    /// failed statement left inside a transaction (see `store::pool`).
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            bookkeeping: pool.clone(),
            orphan_looks: Default::default(),
            directory: Default::default(),
            catalog: Default::default(),
            claim_cursors: Default::default(),
            secrets: Default::default(),
            clock: Default::default(),
            pool,
        }
    }

    /// The pool, for callers that enqueue on their own transactions.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(super) async fn close(&self) {
        self.bookkeeping.close().await;
        self.pool.close().await;
    }

    /// Inserts the row; the database's clock sets `created_at`, so the relay compares it with
    /// event times from the same clock.
    pub(super) async fn insert_endpoint(&self, e: &Endpoint) -> Result<DateTime<Utc>> {
        let sql = concat!(
            super::rows::insert_endpoint!(),
            "VALUES ($1, $2, $3, $4::json, $5, $6::json, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
                $16, $17, $18, $19, $20, now(), now()) \
            RETURNING created_at"
        );
        let row = bind_endpoint(sqlx::query(sql), e, &self.secrets)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("created_at")?)
    }

    /// Records a batch of completions in one statement ([`COMPLETE_SQL`]), its own
    /// transaction: inserts every attempt, moves each delivery on only where its last lease is
    /// `owner`'s at the same attempt number (the fence). The attempts of a delivery deleted
    /// meanwhile (its endpoint was) are dropped with it. A batch where an endpoint answered 410
    /// also disables that endpoint, in the same transaction.
    ///
    /// One statement, not an attempts insert and an update in a transaction: a batch costs one
    /// round trip and one commit instead of four round trips, and the attempts are written in
    /// the same statement as the state they explain.
    ///
    /// The fence is one `CASE` over both sides of the join, so the planner can apply it neither
    /// to an index on `status` nor to `kurir_deliveries` alone: each row is looked up by primary
    /// key. Between vacuums the `processing` entries of the status indexes are mostly dead
    /// (every delivery passes through), and the planner would walk them all for every batch,
    /// far slower than looking each row up by key (`EXPLAIN ANALYZE` shows it); and with the
    /// fence's columns as filters on the table it estimated one matching row, scanned the whole
    /// table first and then joined every row with the batch. The unit test
    /// `a_completion_batch_is_looked_up_by_key_whatever_the_statistics_say` holds the plan.
    ///
    /// The statement joins the batch with `kurir_deliveries` and is not a prepared statement
    /// (`persistent(false)`): it is planned for each batch. A cached generic plan is made once
    /// per connection, often while the table is still empty, and then kept: on a fresh database
    /// the join was planned as a sequential scan and went on scanning every delivery for every
    /// batch, however small. The claim and the relay keep theirs: their generic plans use the
    /// partial indexes even on empty tables, and planning the claim per call cost as much as
    /// running it.
    pub(super) async fn complete_deliveries(
        &self,
        owner: &str,
        done: &[Completion],
    ) -> Result<u64> {
        let delivery_ids: Vec<i64> = done.iter().map(|c| c.delivery_id).collect();
        let attempts: Vec<i32> = done.iter().map(|c| c.attempt as i32).collect();
        let triggers: Vec<&str> = done.iter().map(|c| c.trigger.as_str()).collect();
        let started: Vec<DateTime<Utc>> = done.iter().map(|c| c.started_at).collect();
        let durations: Vec<i64> = done.iter().map(|c| c.duration_ms).collect();
        let codes: Vec<Option<i32>> = done.iter().map(|c| c.status_code.map(i32::from)).collect();
        let errors: Vec<Option<&str>> = done.iter().map(|c| c.error.as_deref()).collect();
        let bodies: Vec<Option<&str>> = done.iter().map(|c| c.response_body.as_deref()).collect();
        let statuses: Vec<&str> = done.iter().map(|c| next_status(&c.next)).collect();
        let next_at: Vec<Option<DateTime<Utc>>> = done.iter().map(|c| next_at(&c.next)).collect();
        let complete = sqlx::query(COMPLETE_SQL)
            .persistent(false)
            .bind(&delivery_ids)
            .bind(&attempts)
            .bind(&statuses)
            .bind(&next_at)
            .bind(&codes)
            .bind(&errors)
            .bind(owner)
            .bind(&triggers)
            .bind(&started)
            .bind(&durations)
            .bind(&bodies);
        let gone = gone_endpoints(done);
        let moved = if gone.is_empty() {
            complete.execute(&self.bookkeeping).await?.rows_affected()
        } else {
            let mut tx = self.bookkeeping.begin().await?;
            let moved = complete.execute(&mut *tx).await?.rows_affected();
            disable_gone(&mut tx, &gone).await?;
            tx.commit().await?;
            moved
        };
        Ok(done.len() as u64 - moved)
    }
}

/// Disables the endpoints that answered 410, inside the completion's transaction; locks their
/// rows.
async fn disable_gone(conn: &mut PgConnection, gone: &[&str]) -> Result<()> {
    if gone.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE kurir_endpoints SET enabled = FALSE, updated_at = now(), \
         disabled_reason = 'the endpoint answered 410 Gone at ' || \
             to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') \
         WHERE id = ANY($1) AND enabled",
    )
    .bind(gone)
    .execute(conn)
    .await?;
    Ok(())
}

fn bind_endpoint<'q>(
    q: Query<'q, Postgres, PgArguments>,
    e: &'q Endpoint,
    codec: &super::SecretCodec,
) -> Query<'q, Postgres, PgArguments> {
    let o = &e.overrides;
    super::bind_endpoint_text!(q, e, codec)
        .bind(o.connect_timeout_ms.map(|v| v as i32))
        .bind(o.request_timeout_ms.map(|v| v as i32))
        .bind(o.retry_initial_delay_ms.map(|v| v as i64))
        .bind(o.retry_max_delay_ms.map(|v| v as i64))
        .bind(o.retry_max_attempts.map(|v| v as i32))
        .bind(e.max_in_flight as i32)
        .bind(o.circuit_failure_threshold.map(|v| v as i32))
        .bind(o.circuit_cooldown_ms.map(|v| v as i64))
        .bind(e.rate_limit_per_second.map(|v| v as i32))
        .bind(e.ordering.as_str())
        .bind(e.ordering_on_dead_letter.as_str())
        .bind(e.subscriber_id.as_deref())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A fresh, migrated database on `KURIR_TEST_POSTGRES_URL`'s server: its URL, and the
    /// server's pool and the database's name to drop it with. `None` (skipped) without that
    /// variable, except under CI, where PostgreSQL tests must run.
    pub(in crate::store) async fn fresh_database() -> Option<(String, PgPool, String)> {
        let Ok(url) = std::env::var("KURIR_TEST_POSTGRES_URL") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but KURIR_TEST_POSTGRES_URL is not"
            );
            return None;
        };
        let admin = PgPool::connect(&url)
            .await
            .expect("KURIR_TEST_POSTGRES_URL");
        let name = format!("kurir_unit_{}", uuid::Uuid::now_v7().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        let (base, query) = url.split_once('?').unwrap_or((&url, ""));
        let server = &base[..base.rfind('/').expect("a database in the URL")];
        let url = format!("{server}/{name}?{query}");
        let store = crate::store::Store::Postgres(PgStore::connect(&url).await.unwrap());
        store.migrate().await.unwrap();
        store.close().await;
        Some((url, admin, name))
    }

    /// Drops database `name` made by [`fresh_database`], its connections closed by force.
    pub(in crate::store) async fn drop_database(admin: &PgPool, name: &str) {
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(admin)
            .await
            .unwrap();
    }

    /// The completion's plan, with statistics taken before the rows were claimed (as under load,
    /// between autovacuum's ANALYZEs): a primary-key lookup per row of the batch, never a scan
    /// of the table, both in kurir's own sessions and on an application's pool with the
    /// server's defaults. With the fence as plain filters the planner estimated one matching
    /// row and scanned every delivery, joined with the whole batch (a nested loop).
    #[tokio::test]
    async fn a_completion_batch_is_looked_up_by_key_whatever_the_statistics_say() {
        let Some((url, admin, name)) = fresh_database().await else {
            return;
        };
        let own = PgStore::connect(&url).await.unwrap();
        let pool = own.pool();
        sqlx::query(
            "INSERT INTO kurir_endpoints (id, url, secret) VALUES ('ep', 'https://x', 's')",
        )
        .execute(pool)
        .await
        .unwrap();
        // Statistics taken while every delivery was pending, then all of them claimed.
        for sql in [
            "INSERT INTO kurir_outbox (event_type, payload) \
             SELECT 'order.paid', '{}' FROM generate_series(1, 30000)",
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id) \
             SELECT id, event_id, 'ep' FROM kurir_outbox",
            "ANALYZE kurir_deliveries",
            "UPDATE kurir_deliveries SET status = 'processing', lease_owner = 'w', attempt_count = 1",
        ] {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
        let applications = PgStore::from_pool(PgPool::connect(&url).await.unwrap());
        let ids: Vec<i64> = (10_001..10_513).collect();
        let n = ids.len();
        let mut plans = Vec::new();
        for store in [&own, &applications] {
            let plan: serde_json::Value =
                sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {COMPLETE_SQL}"))
                    .bind(&ids)
                    .bind(vec![1i32; n])
                    .bind(vec!["sent"; n])
                    .bind(vec![None::<DateTime<Utc>>; n])
                    .bind(vec![Some(200i32); n])
                    .bind(vec![None::<&str>; n])
                    .bind("w")
                    .bind(vec!["scheduled"; n])
                    .bind(vec![Utc::now(); n])
                    .bind(vec![5i64; n])
                    .bind(vec![None::<&str>; n])
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            plans.push(plan.to_string());
            store.close().await;
        }
        drop_database(&admin, &name).await;
        for plan in plans {
            assert!(
                plan.contains("kurir_deliveries_pkey") && !plan.contains("Seq Scan"),
                "{plan}"
            );
        }
    }
}
