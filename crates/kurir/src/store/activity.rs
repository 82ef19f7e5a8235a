//! What the dashboard charts, read from the database so every process's work counts: events
//! written and delivery attempts per time bucket with the latency from `occurred_at` to the
//! delivering answer, and each endpoint's health over a window.
//!
//! Latencies are counted into fixed buckets ([`LATENCY_EDGES_MS`]) by the database and turned
//! into percentiles here ([`Histogram::quantile`]), as Prometheus does: one grouped read per
//! chart instead of every row, the same SQL shape on both dialects. Attempts are counted from
//! their own table; latencies need each attempt's delivery and event, so a busy window reads
//! them for an evenly spread sample ([`Store::latency_counts`]). Reads only; no locks. The
//! windows are found through `kurir_event_list_created` (migration 0025) and
//! `kurir_attempts_started`, so their cost follows the window, not the history.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};

use super::{sqlite_ts, Result, Store};

/// Upper edges, in milliseconds, of the latency and duration buckets; one more bucket holds
/// everything above the last edge.
pub const LATENCY_EDGES_MS: [i64; 14] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000,
];

/// Counts per latency bucket (`LATENCY_EDGES_MS.len() + 1` of them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram(pub Vec<i64>);

impl Histogram {
    /// Counts `n` values in bucket `class`.
    pub fn add(&mut self, class: i64, n: i64) {
        if self.0.is_empty() {
            self.0 = vec![0; LATENCY_EDGES_MS.len() + 1];
        }
        let i = usize::try_from(class)
            .unwrap_or(0)
            .min(LATENCY_EDGES_MS.len());
        self.0[i] += n;
    }

    /// How many values were counted.
    pub fn total(&self) -> i64 {
        self.0.iter().sum()
    }

    /// The `q` quantile (0 to 1) in milliseconds, interpolated within its bucket; `None` when
    /// empty. Values above the last edge are reported as the last edge.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0.0;
        for (i, &n) in self.0.iter().enumerate() {
            let before = seen;
            seen += n as f64;
            if n > 0 && seen >= rank {
                let Some(&upper) = LATENCY_EDGES_MS.get(i) else {
                    return LATENCY_EDGES_MS.last().map(|&e| e as f64);
                };
                let lower = if i == 0 { 0 } else { LATENCY_EDGES_MS[i - 1] };
                let within = ((rank - before) / n as f64).clamp(0.0, 1.0);
                return Some(lower as f64 + within * (upper - lower) as f64);
            }
        }
        None
    }
}

/// One time bucket of delivery attempts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttemptBucket {
    /// Attempts answered 2xx.
    pub delivered: i64,
    /// Attempts that failed (another status, or no answer).
    pub failed: i64,
    /// From the event's `occurred_at` to the 2xx, for the delivered ones (or a sample of them).
    pub latency: Histogram,
}

/// One endpoint's delivery attempts in a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EndpointHealth {
    /// The endpoint.
    pub endpoint_id: String,
    /// Attempts made.
    pub attempts: i64,
    /// Of which answered 2xx.
    pub delivered: i64,
    /// Of which timed out.
    pub timeouts: i64,
    /// The error (or `HTTP <status>`) of the last failed attempt.
    pub last_error: Option<String>,
    /// When that attempt started.
    pub last_error_at: Option<DateTime<Utc>>,
    /// Whether an attempt after it succeeded: the endpoint recovered since.
    pub recovered: bool,
    /// How long its attempts took.
    pub duration: Histogram,
    last_failed_id: i64,
    last_ok_id: i64,
}

/// `(a > e1) + (a > e2) + …`: the bucket number of `value` (an SQL expression), cast to the
/// dialect's 64-bit integer (`int`: `BIGINT`, or MySQL's `SIGNED`).
fn class_of(value: &str, int: &str) -> String {
    let terms: Vec<String> = LATENCY_EDGES_MS
        .iter()
        .map(|e| format!("CASE WHEN {value} > {e} THEN 1 ELSE 0 END"))
        .collect();
    format!("CAST({} AS {int})", terms.join(" + "))
}

const OK: &str = "a.status_code BETWEEN 200 AND 299";

fn counts_sql(bucket: &str, since: &str) -> String {
    format!(
        "SELECT {bucket} AS bucket, sum(CASE WHEN {OK} THEN 1 ELSE 0 END) AS delivered, \
             sum(CASE WHEN {OK} THEN 0 ELSE 1 END) AS failed \
         FROM kurir_attempts a WHERE a.started_at >= {since} GROUP BY 1 ORDER BY 1"
    )
}

/// Where an attempt's latency is measured from: the event's `occurred_at`, or, for an attempt a
/// replay led to, that replay's first attempt (the replay made the delivery due at once), so one
/// replay of an old event does not read as minutes of latency. `trigger` is quoted as MySQL
/// needs. One probe of `kurir_attempts_delivery` per delivering attempt counted.
fn measured_from(trigger: &str) -> String {
    format!(
        "COALESCE((SELECT MAX(r.started_at) FROM kurir_attempts r \
             WHERE r.delivery_id = a.delivery_id AND r.{trigger} = 'replay' AND r.id <= a.id), \
             o.occurred_at)"
    )
}

/// Delivering attempts by bucket and latency class, every `every`-th by id (`every` = 1: all);
/// `int` as in [`class_of`].
fn latency_sql(bucket: &str, latency_ms: &str, since: &str, every: &str, int: &str) -> String {
    format!(
        "SELECT {bucket} AS bucket, {class} AS class, count(*) AS n \
         FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id \
             JOIN kurir_outbox o ON o.id = d.outbox_id \
         WHERE a.started_at >= {since} AND {OK} AND a.id % {every} = 0 \
         GROUP BY 1, 2 ORDER BY 1, 2",
        class = class_of(latency_ms, int),
    )
}

/// `epoch_ms` reads `a.started_at` as unix milliseconds in the dialect.
fn health_sql(since: &str, epoch_ms: &str) -> String {
    format!(
        "WITH h AS ( \
             SELECT d.endpoint_id, {class} AS class, count(*) AS n, \
                 sum(CASE WHEN {OK} THEN 1 ELSE 0 END) AS ok, \
                 sum(CASE WHEN a.error LIKE 'timeout%' THEN 1 ELSE 0 END) AS timeouts, \
                 max(CASE WHEN {OK} THEN NULL ELSE a.id END) AS last_failed, \
                 max(CASE WHEN {OK} THEN a.id ELSE NULL END) AS last_ok \
             FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id \
             WHERE a.started_at >= {since} GROUP BY 1, 2) \
         SELECT h.endpoint_id, h.class, h.n, h.ok, h.timeouts, h.last_failed, \
             (SELECT coalesce(a.error, 'HTTP ' || a.status_code) FROM kurir_attempts a \
              WHERE a.id = h.last_failed) AS last_error, \
             (SELECT {epoch_ms} FROM kurir_attempts a WHERE a.id = h.last_failed) AS last_error_ms, \
             h.last_ok \
         FROM h",
        class = class_of("a.duration_ms", "BIGINT"),
    )
}

/// MySQL's bucket: its `SUM` answers a decimal and its division a decimal too, so both are cast
/// back to integers; `UNIX_TIMESTAMP` reads a `DATETIME` in the session's time zone, which is
/// UTC in kurir's sessions. Binds in text order: the step, then the window's start.
const BUCKET_MYSQL: &str = "CAST(FLOOR(UNIX_TIMESTAMP(a.started_at) / ?) AS SIGNED)";

static COUNTS_MYSQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {BUCKET_MYSQL} AS bucket, \
             CAST(SUM(CASE WHEN {OK} THEN 1 ELSE 0 END) AS SIGNED) AS delivered, \
             CAST(SUM(CASE WHEN {OK} THEN 0 ELSE 1 END) AS SIGNED) AS failed \
         FROM kurir_attempts a WHERE a.started_at >= ? GROUP BY 1 ORDER BY 1"
    )
});
static LATENCY_MYSQL: LazyLock<String> = LazyLock::new(|| {
    latency_sql(
        BUCKET_MYSQL,
        &format!(
            "(TIMESTAMPDIFF(MICROSECOND, {}, a.started_at) / 1000 + a.duration_ms)",
            measured_from("`trigger`")
        ),
        "?",
        "?",
        "SIGNED",
    )
});
static HEALTH_MYSQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH h AS ( \
             SELECT CAST(d.endpoint_id AS CHAR) AS endpoint_id, {class} AS class, COUNT(*) AS n, \
                 CAST(SUM(CASE WHEN {OK} THEN 1 ELSE 0 END) AS SIGNED) AS ok, \
                 CAST(SUM(CASE WHEN a.error LIKE 'timeout%' THEN 1 ELSE 0 END) AS SIGNED) AS timeouts, \
                 MAX(CASE WHEN {OK} THEN NULL ELSE a.id END) AS last_failed, \
                 MAX(CASE WHEN {OK} THEN a.id ELSE NULL END) AS last_ok \
             FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id \
             WHERE a.started_at >= ? GROUP BY 1, 2) \
         SELECT h.endpoint_id, h.class, h.n, h.ok, h.timeouts, h.last_failed, \
             (SELECT CAST(COALESCE(a.error, CONCAT('HTTP ', a.status_code)) AS CHAR) \
              FROM kurir_attempts a WHERE a.id = h.last_failed) AS last_error, \
             (SELECT CAST(UNIX_TIMESTAMP(a.started_at) * 1000 AS SIGNED) \
              FROM kurir_attempts a WHERE a.id = h.last_failed) AS last_error_ms, \
             h.last_ok \
         FROM h",
        class = class_of("a.duration_ms", "SIGNED"),
    )
});
const EVENTS_MYSQL: &str = concat!(
    "SELECT CAST(FLOOR(UNIX_TIMESTAMP(created_at) / ?) AS SIGNED) AS bucket, COUNT(*) \
     FROM (SELECT l.created_at FROM kurir_event_list l WHERE l.created_at >= ? \
     UNION ALL SELECT w.created_at FROM ",
    super::event_list::waiting!(mysql),
    " WHERE w.created_at >= ?) e GROUP BY 1 ORDER BY 1"
);

const BUCKET_PG: &str = "floor(extract(epoch FROM a.started_at) / $2)::int8";
const BUCKET_SQLITE: &str = "CAST(strftime('%s', a.started_at) AS INTEGER) / ?2";

static COUNTS_PG: LazyLock<String> = LazyLock::new(|| counts_sql(BUCKET_PG, "$1"));
static COUNTS_SQLITE: LazyLock<String> = LazyLock::new(|| counts_sql(BUCKET_SQLITE, "?1"));
static LATENCY_PG: LazyLock<String> = LazyLock::new(|| {
    latency_sql(
        BUCKET_PG,
        &format!(
            "(extract(epoch FROM a.started_at - {}) * 1000 + a.duration_ms)",
            measured_from("trigger")
        ),
        "$1",
        "$3",
        "BIGINT",
    )
});
static LATENCY_SQLITE: LazyLock<String> = LazyLock::new(|| {
    latency_sql(
        BUCKET_SQLITE,
        &format!(
            "((julianday(a.started_at) - julianday({})) * 86400000.0 + a.duration_ms)",
            measured_from("trigger")
        ),
        "?1",
        "?3",
        "BIGINT",
    )
});
static HEALTH_PG: LazyLock<String> = LazyLock::new(|| {
    health_sql(
        "$1",
        "CAST(floor(extract(epoch FROM a.started_at) * 1000) AS BIGINT)",
    )
});
static HEALTH_SQLITE: LazyLock<String> = LazyLock::new(|| {
    health_sql(
        "?1",
        "CAST(round((julianday(a.started_at) - 2440587.5) * 86400000.0) AS INTEGER)",
    )
});

/// Events written per bucket since the window's start: the listed ones through
/// `kurir_event_list_created`, the waiting ones from the outbox past the relay's cursor.
const EVENTS_PG: &str = concat!(
    "SELECT floor(extract(epoch FROM created_at) / $2)::int8 AS bucket, count(*) \
     FROM (SELECT l.created_at FROM kurir_event_list l WHERE l.created_at >= $1 \
     UNION ALL SELECT w.created_at FROM ",
    super::event_list::waiting!(postgres),
    " WHERE w.created_at >= $1) e GROUP BY 1 ORDER BY 1"
);
const EVENTS_SQLITE: &str = concat!(
    "SELECT CAST(strftime('%s', created_at) AS INTEGER) / ?2 AS bucket, count(*) \
     FROM (SELECT l.created_at FROM kurir_event_list l WHERE l.created_at >= ?1 \
     UNION ALL SELECT w.created_at FROM ",
    super::event_list::waiting!(sqlite),
    " WHERE w.created_at >= ?1) e GROUP BY 1 ORDER BY 1"
);

/// A health row: endpoint, duration class, attempts, delivered, timeouts, last failed attempt id,
/// its error.
type HealthRow = (
    String,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

impl Store {
    /// Events written since `since`, per bucket of `step_seconds`: `(bucket start, count)`.
    pub async fn event_counts(
        &self,
        since: DateTime<Utc>,
        step_seconds: i64,
    ) -> Result<Vec<(DateTime<Utc>, i64)>> {
        let rows: Vec<(i64, i64)> = match self {
            Store::Postgres(s) => {
                sqlx::query_as(EVENTS_PG)
                    .bind(since)
                    .bind(step_seconds as f64)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                sqlx::query_as(EVENTS_SQLITE)
                    .bind(sqlite_ts(since))
                    .bind(step_seconds)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Mysql(s) => {
                sqlx::query_as(EVENTS_MYSQL)
                    .bind(step_seconds)
                    .bind(since.naive_utc())
                    .bind(since.naive_utc())
                    .fetch_all(s.pool())
                    .await?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|(b, n)| Some((bucket_start(b, step_seconds)?, n)))
            .collect())
    }

    /// Delivery attempts started since `since`, per bucket of `step_seconds`, oldest first:
    /// how many delivered and how many failed (`latency` is left empty: see
    /// [`Store::latency_counts`]). Reads the attempts of the window only.
    pub async fn attempt_counts(
        &self,
        since: DateTime<Utc>,
        step_seconds: i64,
    ) -> Result<Vec<(DateTime<Utc>, AttemptBucket)>> {
        let rows: Vec<(i64, i64, i64)> = match self {
            Store::Postgres(s) => {
                sqlx::query_as(&COUNTS_PG)
                    .bind(since)
                    .bind(step_seconds as f64)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                sqlx::query_as(&COUNTS_SQLITE)
                    .bind(sqlite_ts(since))
                    .bind(step_seconds)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Mysql(s) => {
                sqlx::query_as(&COUNTS_MYSQL)
                    .bind(step_seconds)
                    .bind(since.naive_utc())
                    .fetch_all(s.pool())
                    .await?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|(b, delivered, failed)| {
                let bucket = AttemptBucket {
                    delivered,
                    failed,
                    latency: Histogram::default(),
                };
                Some((bucket_start(b, step_seconds)?, bucket))
            })
            .collect())
    }

    /// The latency from `occurred_at` (for a replay's attempts: from the replay) to the
    /// delivering answer of the attempts answered 2xx
    /// since `since`, per bucket of `step_seconds`, oldest first; only every `every`-th attempt
    /// by id when `every` > 1, so a busy window costs a bounded number of lookups of its
    /// deliveries and events (ids are spread evenly over time, so the sample is too).
    pub async fn latency_counts(
        &self,
        since: DateTime<Utc>,
        step_seconds: i64,
        every: i64,
    ) -> Result<Vec<(DateTime<Utc>, Histogram)>> {
        let every = every.max(1);
        let rows: Vec<(i64, i64, i64)> = match self {
            Store::Postgres(s) => {
                sqlx::query_as(&LATENCY_PG)
                    .bind(since)
                    .bind(step_seconds as f64)
                    .bind(every)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                sqlx::query_as(&LATENCY_SQLITE)
                    .bind(sqlite_ts(since))
                    .bind(step_seconds)
                    .bind(every)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Mysql(s) => {
                sqlx::query_as(&LATENCY_MYSQL)
                    .bind(step_seconds)
                    .bind(since.naive_utc())
                    .bind(every)
                    .fetch_all(s.pool())
                    .await?
            }
        };
        let mut buckets: Vec<(DateTime<Utc>, Histogram)> = Vec::new();
        for (b, class, n) in rows {
            let Some(start) = bucket_start(b, step_seconds) else {
                continue;
            };
            if buckets.last().is_none_or(|(s, _)| *s != start) {
                buckets.push((start, Histogram::default()));
            }
            buckets.last_mut().expect("just pushed").1.add(class, n);
        }
        Ok(buckets)
    }

    /// Every endpoint's attempts since `since` (endpoints without any are absent).
    pub async fn endpoint_health(&self, since: DateTime<Utc>) -> Result<Vec<EndpointHealth>> {
        let rows: Vec<HealthRow> = match self {
            Store::Postgres(s) => {
                sqlx::query_as(&HEALTH_PG)
                    .bind(since)
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                sqlx::query_as(&HEALTH_SQLITE)
                    .bind(sqlite_ts(since))
                    .fetch_all(s.pool())
                    .await?
            }
            Store::Mysql(s) => {
                sqlx::query_as(&HEALTH_MYSQL)
                    .bind(since.naive_utc())
                    .fetch_all(s.pool())
                    .await?
            }
        };
        let mut health: Vec<EndpointHealth> = Vec::new();
        for row in rows {
            let (endpoint_id, class, n, ok, timeouts, last_failed, last_error, error_ms, last_ok) =
                row;
            let i = match health.iter().position(|h| h.endpoint_id == endpoint_id) {
                Some(i) => i,
                None => {
                    health.push(EndpointHealth {
                        endpoint_id,
                        ..EndpointHealth::default()
                    });
                    health.len() - 1
                }
            };
            let h = &mut health[i];
            h.attempts += n;
            h.delivered += ok;
            h.timeouts += timeouts;
            h.duration.add(class, n);
            if let Some(id) = last_failed.filter(|id| *id > h.last_failed_id) {
                h.last_failed_id = id;
                h.last_error = last_error;
                h.last_error_at = error_ms.and_then(DateTime::from_timestamp_millis);
            }
            h.last_ok_id = h.last_ok_id.max(last_ok.unwrap_or(0));
        }
        for h in &mut health {
            // Attempt ids rise with time within a database, so a success with a larger id came
            // after the last failure.
            h.recovered = h.last_error.is_some() && h.last_ok_id > h.last_failed_id;
        }
        Ok(health)
    }
}

fn bucket_start(bucket: i64, step_seconds: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(bucket.checked_mul(step_seconds)?, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        h.add(0, 50); // up to 25 ms
        h.add(3, 50); // 100 to 250 ms
        assert_eq!(h.quantile(0.5), Some(25.0));
        assert_eq!(h.quantile(0.75), Some(175.0));
        assert_eq!(h.quantile(1.0), Some(250.0));
        h.add(99, 1000); // above every edge
        assert_eq!(h.quantile(0.99), Some(3_600_000.0));
    }
}
