//! One subscriber's deliveries log: the delivery listing confined to a subscriber (a subscriber
//! token's `GET /v1/deliveries`, the subscriber portal's log, the dashboard's recent failures),
//! newest first, filtered by status, endpoint, event type and time.
//!
//! A subscriber's deliveries are those of its endpoints (tombstones too: their history). Each
//! endpoint's are read through the index on `(endpoint_id, id DESC)`, at most a page from each,
//! newest first from the cursor, and the pages merged: a page costs what the subscriber has,
//! however many deliveries the others have. Walking every delivery newest first and keeping the
//! subscriber's (the plan each database picks for an `IN (its endpoints)` filter) reads the
//! whole table for a small subscriber. How each dialect reads a page per endpoint differs, so
//! the statements do too. Reads only; no locks.

use super::records::delivery_columns;
use super::rows::{DeliveryListRow, Ts};
use super::sql::{query_as_on, Sql};
use super::{DeliveryListItem, DeliveryQuery, Result, Store};

/// No cursor: every delivery id is below it. Bound instead of `$6 IS NULL OR`, so the cursor
/// is a range on the index wherever the plan is made before the values are known.
const NO_CURSOR: i64 = i64::MAX;

/// PostgreSQL: a lateral page per endpoint of the subscriber (`$8`), each a walk of
/// `kurir_deliveries_endpoint_id` from the cursor (`$6`), or of
/// `kurir_deliveries_endpoint_status` (migration 0022) when a status is asked for.
pub(super) const SUBSCRIBER_DELIVERIES_PG: &str = concat!(
    "SELECT ",
    delivery_columns!(postgres),
    ", o.event_type \
    FROM kurir_endpoints s CROSS JOIN LATERAL ( \
        SELECT d.* FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
        WHERE d.endpoint_id = s.id AND d.id < $6 \
          AND ($1::text IS NULL OR d.status = $1) AND ($2::text IS NULL OR d.endpoint_id = $2) \
          AND ($3::text IS NULL OR o.event_type = $3) \
          AND ($4::timestamptz IS NULL OR d.created_at >= $4) \
          AND ($5::timestamptz IS NULL OR d.created_at < $5) \
        ORDER BY d.id DESC LIMIT $7) d \
    JOIN kurir_outbox o ON o.id = d.outbox_id \
    LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
    WHERE s.subscriber_id = $8 \
    ORDER BY d.id DESC LIMIT $7"
);

/// SQLite has no `LATERAL`: the page per endpoint is a correlated `IN (… LIMIT)` subquery, which
/// SQLite runs once per endpoint. Its index is named (`INDEXED BY`): without statistics (a
/// connection opened before the last `ANALYZE`, or none ever run) SQLite takes the cursor's
/// `id <` for the better range and walks every delivery below it. SQLite cannot read a status
/// given or not (`?1 IS NULL OR`) through an index, so a status has a statement of its own.
macro_rules! subscriber_deliveries_sqlite {
    ($index:literal, $status:literal) => {
        concat!(
            "SELECT ",
            delivery_columns!(postgres),
            ", o.event_type \
            FROM kurir_endpoints s JOIN kurir_deliveries d ON d.id IN ( \
                SELECT x.id FROM kurir_deliveries x INDEXED BY ",
            $index,
            " JOIN kurir_outbox xo ON xo.id = x.outbox_id \
                WHERE x.endpoint_id = s.id AND x.id < ?6 AND ",
            $status,
            " AND (?2 IS NULL OR x.endpoint_id = ?2) \
                  AND (?3 IS NULL OR xo.event_type = ?3) \
                  AND (?4 IS NULL OR x.created_at >= ?4) AND (?5 IS NULL OR x.created_at < ?5) \
                ORDER BY x.id DESC LIMIT ?7) \
            JOIN kurir_outbox o ON o.id = d.outbox_id \
            LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
            WHERE s.subscriber_id = ?8 \
            ORDER BY d.id DESC LIMIT ?7"
        )
    };
}

/// Every status: a walk of `kurir_deliveries_endpoint_id` per endpoint (`?1` is NULL).
pub(super) const SUBSCRIBER_DELIVERIES_SQLITE: &str =
    subscriber_deliveries_sqlite!("kurir_deliveries_endpoint_id", "?1 IS NULL");

/// One status (`?1`): a walk of `kurir_deliveries_endpoint_status` (migration 0022) per endpoint.
pub(super) const SUBSCRIBER_STATUS_DELIVERIES_SQLITE: &str =
    subscriber_deliveries_sqlite!("kurir_deliveries_endpoint_status", "x.status = ?1");

/// MariaDB has neither `LATERAL` nor `LIMIT` in an `IN` subquery, and a correlated bound is
/// evaluated per delivery row: the page of each endpoint is this statement, run once per
/// endpoint of [`SUBSCRIBER_ENDPOINTS`] and merged. A range of `kurir_deliveries_endpoint_id`,
/// or of `kurir_deliveries_endpoint_status` (migration 0022) when a status is asked for.
pub(super) const ENDPOINT_DELIVERIES_MYSQL: &str = concat!(
    "SELECT ",
    delivery_columns!(mysql),
    ", CAST(o.event_type AS CHAR) AS event_type \
    FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
    LEFT JOIN kurir_endpoints e ON e.id = d.endpoint_id \
    WHERE d.endpoint_id = $2 AND d.id < $6 \
      AND ($1 IS NULL OR d.status = $1) AND ($3 IS NULL OR o.event_type = $3) \
      AND ($4 IS NULL OR d.created_at >= $4) AND ($5 IS NULL OR d.created_at < $5) \
    ORDER BY d.id DESC LIMIT $7"
);

const SUBSCRIBER_DELIVERIES: Sql = Sql {
    postgres: SUBSCRIBER_DELIVERIES_PG,
    sqlite: SUBSCRIBER_DELIVERIES_SQLITE,
    mysql: "unused: see ENDPOINT_DELIVERIES_MYSQL",
};

const SUBSCRIBER_STATUS_DELIVERIES: Sql = Sql {
    postgres: SUBSCRIBER_DELIVERIES_PG,
    sqlite: SUBSCRIBER_STATUS_DELIVERIES_SQLITE,
    mysql: "unused: see ENDPOINT_DELIVERIES_MYSQL",
};

const ENDPOINT_DELIVERIES: Sql = Sql {
    postgres: "unused: see SUBSCRIBER_DELIVERIES_PG",
    sqlite: "unused: see SUBSCRIBER_DELIVERIES_SQLITE",
    mysql: ENDPOINT_DELIVERIES_MYSQL,
};

/// The ids of a subscriber's endpoints, tombstones too (their deliveries are its history), by
/// the index on `subscriber_id`.
const SUBSCRIBER_ENDPOINTS: Sql = Sql {
    postgres: "SELECT id FROM kurir_endpoints WHERE subscriber_id = $1",
    sqlite: "SELECT id FROM kurir_endpoints WHERE subscriber_id = ?1",
    mysql: "SELECT CAST(id AS CHAR) FROM kurir_endpoints WHERE subscriber_id = $1",
};

impl Store {
    /// The deliveries of `subscriber`'s endpoints matching `q` (its `subscriber_id` aside),
    /// newest first: at most `q.limit` of them, each endpoint's read through its index from the
    /// cursor (see the module's doc).
    pub(super) async fn subscriber_deliveries(
        &self,
        q: &DeliveryQuery,
        subscriber: &str,
    ) -> Result<Vec<DeliveryListItem>> {
        if let Store::Mysql(_) = self {
            return self.merged_endpoint_pages(q, subscriber).await;
        }
        let sql = match q.status {
            Some(_) => SUBSCRIBER_STATUS_DELIVERIES,
            None => SUBSCRIBER_DELIVERIES,
        };
        let rows: Vec<DeliveryListRow> = query_as_on!(
            self,
            sql,
            fetch_all,
            q.status.map(|s| s.as_str()),
            q.endpoint_id.as_deref(),
            q.event_type.as_deref(),
            q.since.map(Ts),
            q.until.map(Ts),
            q.before_id.unwrap_or(NO_CURSOR),
            i64::from(q.limit),
            subscriber,
        )?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// MySQL's [`Store::subscriber_deliveries`]: a page of each endpoint, merged newest first.
    async fn merged_endpoint_pages(
        &self,
        q: &DeliveryQuery,
        subscriber: &str,
    ) -> Result<Vec<DeliveryListItem>> {
        let endpoints: Vec<(String,)> =
            query_as_on!(self, SUBSCRIBER_ENDPOINTS, fetch_all, subscriber)?;
        let mut rows: Vec<DeliveryListItem> = Vec::new();
        let asked = q.endpoint_id.as_deref();
        for (endpoint,) in endpoints
            .iter()
            .filter(|(id,)| asked.is_none_or(|a| a == id))
        {
            let page: Vec<DeliveryListRow> = query_as_on!(
                self,
                ENDPOINT_DELIVERIES,
                fetch_all,
                q.status.map(|s| s.as_str()),
                endpoint.as_str(),
                q.event_type.as_deref(),
                q.since.map(Ts),
                q.until.map(Ts),
                q.before_id.unwrap_or(NO_CURSOR),
                i64::from(q.limit),
            )?;
            for row in page {
                rows.push(row.try_into()?);
            }
        }
        rows.sort_unstable_by_key(|r| std::cmp::Reverse(r.delivery.id));
        rows.truncate(q.limit as usize);
        Ok(rows)
    }
}

#[cfg(test)]
pub(in crate::store) mod tests {
    //! The plans of a subscriber's log on each database, with the history of others far larger
    //! than the subscriber's: each reads the subscriber's endpoints' index, never every
    //! delivery. Rows are inserted in SQL (thousands, for the planners' statistics), and the
    //! listing's pages checked against them.

    use super::*;
    use crate::delivery::DeliveryStatus;

    /// Deliveries of the others (the operator's endpoint and subscriber `cus_b`'s), and of
    /// `cus_a`'s two endpoints (every tenth event, alternating; every 50th of them dead).
    const OTHERS_PER_A: i64 = 9;
    const EVENTS: i64 = 20_000;

    /// A fresh, migrated database on `backend` (`None`: its server not configured, outside CI),
    /// and how to drop it.
    pub(in crate::store) async fn fresh(backend: &str) -> Option<(Store, Option<(Store, String)>)> {
        let var = match backend {
            "sqlite" => {
                let dir = std::env::temp_dir()
                    .join(format!("kurir_unit_{}.db", uuid::Uuid::now_v7().simple()));
                let store = Store::connect(&format!("sqlite://{}", dir.display()))
                    .await
                    .unwrap();
                store.migrate().await.unwrap();
                return Some((store, None));
            }
            "postgres" => "KURIR_TEST_POSTGRES_URL",
            _ => "KURIR_TEST_MYSQL_URL",
        };
        let Ok(url) = std::env::var(var) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but {var} is not"
            );
            return None;
        };
        let admin = Store::connect(&url).await.unwrap();
        let name = format!("kurir_unit_{}", uuid::Uuid::now_v7().simple());
        let create = format!("CREATE DATABASE {name}");
        match &admin {
            Store::Postgres(s) => sqlx::query(&create).execute(s.pool()).await.map(drop),
            Store::Mysql(s) => sqlx::query(&create).execute(s.pool()).await.map(drop),
            Store::Sqlite(_) => unreachable!("a server URL"),
        }
        .unwrap();
        let (base, query) = url
            .split_once('?')
            .map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
        let server = &base[..base.rfind('/').expect("a database in the URL")];
        let url = match query {
            Some(q) => format!("{server}/{name}?{q}"),
            None => format!("{server}/{name}"),
        };
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        Some((store, Some((admin, name))))
    }

    pub(in crate::store) async fn drop_database(admin: Option<(Store, String)>) {
        let Some((admin, name)) = admin else { return };
        match &admin {
            Store::Postgres(s) => sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
                .execute(s.pool())
                .await
                .map(drop),
            Store::Mysql(s) => sqlx::query(&format!("DROP DATABASE {name}"))
                .execute(s.pool())
                .await
                .map(drop),
            Store::Sqlite(_) => Ok(()),
        }
        .unwrap();
        admin.close().await;
    }

    pub(in crate::store) async fn run(store: &Store, sql: &str) {
        match store {
            Store::Postgres(s) => sqlx::query(sql).execute(s.pool()).await.map(drop),
            Store::Sqlite(s) => sqlx::query(sql).execute(s.pool()).await.map(drop),
            Store::Mysql(s) => sqlx::query(sql).execute(s.pool()).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// `EVENTS` events: every tenth `cus_a`'s (to `ep_a1` and `ep_a2` in turn), the rest
    /// `cus_b`'s or the operator's, each with its delivery.
    async fn history(store: &Store) {
        let numbers = match store {
            Store::Mysql(_) => format!(
                "(SELECT a.i * 10000 + b.i * 1000 + c.i * 100 + d.i * 10 + e.i + 1 AS i FROM {d} a, {d} b, {d} c, {d} d, {d} e) n WHERE i <= {EVENTS}",
                d = "(SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                     UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                     UNION ALL SELECT 8 UNION ALL SELECT 9)"
            ),
            Store::Postgres(_) => format!("generate_series(1, {EVENTS}) n(i)"),
            Store::Sqlite(_) => format!(
                "(WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < {EVENTS}) SELECT i FROM r) n"
            ),
        };
        let period = OTHERS_PER_A + 1;
        for sql in [
            "INSERT INTO kurir_subscribers (id, name) VALUES ('cus_a', 'A'), ('cus_b', 'B')".to_owned(),
            "INSERT INTO kurir_endpoints (id, url, secret, subscriber_id) VALUES \
             ('ep_a1', 'https://a.example', 's', 'cus_a'), ('ep_a2', 'https://a.example', 's', 'cus_a'), \
             ('ep_b', 'https://b.example', 's', 'cus_b'), ('ep_op', 'https://o.example', 's', NULL)"
                .to_owned(),
            format!(
                "INSERT INTO kurir_outbox (event_type, payload, subscriber_id) \
                 SELECT CASE WHEN i % 3 = 0 THEN 'order.paid' ELSE 'order.created' END, '{{}}', \
                 CASE WHEN i % {period} = 0 THEN 'cus_a' WHEN i % 2 = 0 THEN 'cus_b' END FROM {numbers}"
            ),
            format!(
                "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, status) \
                 SELECT id, event_id, CASE WHEN subscriber_id = 'cus_a' THEN \
                 CASE WHEN id % {} = 0 THEN 'ep_a1' ELSE 'ep_a2' END \
                 WHEN subscriber_id = 'cus_b' THEN 'ep_b' ELSE 'ep_op' END, \
                 CASE WHEN id % {} = 0 THEN 'dead_letter' ELSE 'sent' END FROM kurir_outbox",
                period * 2,
                period * 50
            ),
        ] {
            run(store, &sql).await;
        }
        let analyze = match store {
            Store::Mysql(_) => "ANALYZE TABLE kurir_deliveries, kurir_outbox, kurir_endpoints",
            _ => "ANALYZE",
        };
        run(store, analyze).await;
    }

    /// The plan of a page of `cus_a`'s log, `status` or not, as text.
    async fn plan(store: &Store, status: Option<&str>) -> String {
        match store {
            Store::Postgres(s) => postgres_plan(s, status).await,
            Store::Sqlite(s) => sqlite_plan(s, status).await,
            Store::Mysql(s) => mysql_plan(s, status).await,
        }
    }

    const LIMIT: i64 = 50;

    async fn postgres_plan(s: &crate::store::postgres::PgStore, status: Option<&str>) -> String {
        let sql = format!("EXPLAIN (FORMAT JSON) {SUBSCRIBER_DELIVERIES_PG}");
        let plan: serde_json::Value = sqlx::query_scalar(&sql)
            .bind(status)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(None::<Ts>)
            .bind(None::<Ts>)
            .bind(NO_CURSOR)
            .bind(LIMIT)
            .bind("cus_a")
            .fetch_one(s.pool())
            .await
            .unwrap();
        plan.to_string()
    }

    async fn sqlite_plan(s: &crate::store::sqlite::SqliteStore, status: Option<&str>) -> String {
        let statement = match status {
            Some(_) => SUBSCRIBER_STATUS_DELIVERIES_SQLITE,
            None => SUBSCRIBER_DELIVERIES_SQLITE,
        };
        let sql = format!("EXPLAIN QUERY PLAN {statement}");
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(&sql)
            .bind(status)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(None::<Ts>)
            .bind(None::<Ts>)
            .bind(NO_CURSOR)
            .bind(LIMIT)
            .bind("cus_a")
            .fetch_all(s.pool())
            .await
            .unwrap();
        rows.into_iter()
            .map(|(.., detail)| detail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn mysql_plan(s: &crate::store::mysql::MySqlStore, status: Option<&str>) -> String {
        let sql = format!("EXPLAIN FORMAT=JSON {ENDPOINT_DELIVERIES_MYSQL}");
        let (text, order) = crate::store::sql::positional(&sql);
        let mut q = sqlx::query_scalar::<_, String>(&text);
        for i in order {
            q = match i {
                0 => q.bind(status),
                1 => q.bind("ep_a1"),
                2 => q.bind(None::<&str>),
                3 | 4 => q.bind(None::<Ts>),
                5 => q.bind(NO_CURSOR),
                _ => q.bind(LIMIT),
            };
        }
        q.fetch_one(s.pool()).await.unwrap()
    }

    /// The relations a PostgreSQL plan reads by a sequential scan.
    fn seq_scans(node: &serde_json::Value, found: &mut Vec<String>) {
        match node {
            serde_json::Value::Object(map) => {
                if map.get("Node Type").and_then(|t| t.as_str()) == Some("Seq Scan") {
                    let relation = map.get("Relation Name").and_then(|r| r.as_str());
                    found.push(relation.unwrap_or("?").to_owned());
                }
                map.values().for_each(|v| seq_scans(v, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| seq_scans(v, found)),
            _ => {}
        }
    }

    /// Whether `plan` reads deliveries through an index of the subscriber's endpoints, never all
    /// of them nor every subscriber's of a status (the few endpoints may be read whole).
    fn reads_an_index(store: &Store, plan: &str) -> bool {
        match store {
            Store::Postgres(_) => {
                let mut scans = Vec::new();
                seq_scans(&serde_json::from_str(plan).unwrap(), &mut scans);
                (plan.contains("kurir_deliveries_endpoint_id")
                    || plan.contains("kurir_deliveries_endpoint_status"))
                    && !plan.contains("kurir_deliveries_status_id")
                    && scans.iter().all(|r| r == "kurir_endpoints")
            }
            Store::Sqlite(_) => {
                (plan.contains("USING INDEX kurir_deliveries_endpoint_id")
                    || plan.contains("USING INDEX kurir_deliveries_endpoint_status"))
                    && !plan.lines().any(|l| {
                        ["SCAN d", "SCAN x", "SCAN o"]
                            .iter()
                            .any(|s| l.starts_with(s))
                    })
            }
            Store::Mysql(_) => {
                (plan.contains(r#""key": "kurir_deliveries_endpoint_id""#)
                    || plan.contains(r#""key": "kurir_deliveries_endpoint_status""#))
                    && !plan.contains(r#""key": "kurir_deliveries_status_id""#)
                    && !plan.contains(r#""access_type": "ALL""#)
                    && !plan.contains(r#""access_type": "index""#)
            }
        }
    }

    /// The ids `sql` selects, in its order.
    async fn ids_of(store: &Store, sql: &str) -> Vec<i64> {
        match store {
            Store::Postgres(s) => sqlx::query_scalar(sql).fetch_all(s.pool()).await,
            Store::Sqlite(s) => sqlx::query_scalar(sql).fetch_all(s.pool()).await,
            Store::Mysql(s) => sqlx::query_scalar(sql).fetch_all(s.pool()).await,
        }
        .unwrap()
    }

    fn ids(page: &[DeliveryListItem]) -> Vec<i64> {
        page.iter().map(|r| r.delivery.id).collect()
    }

    async fn a_subscribers_log_reads_its_endpoints_index_whatever_the_others_have(backend: &str) {
        let Some((store, admin)) = fresh(backend).await else {
            return;
        };
        history(&store).await;
        let plans = [
            plan(&store, None).await,
            plan(&store, Some("dead_letter")).await,
        ];
        let query = |status, before_id| DeliveryQuery {
            status,
            endpoint_id: None,
            event_type: None,
            since: None,
            until: None,
            before_id,
            limit: 7,
            subscriber_id: Some("cus_a".into()),
        };
        let first = store.list_deliveries(&query(None, None)).await.unwrap();
        let second = store
            .list_deliveries(&query(None, Some(first[6].delivery.id)))
            .await
            .unwrap();
        let dead = store
            .list_deliveries(&query(Some(DeliveryStatus::DeadLetter), None))
            .await
            .unwrap();
        let mut one = query(None, None);
        one.endpoint_id = Some("ep_a1".into());
        one.event_type = Some("order.paid".into());
        let filtered = store.list_deliveries(&one).await.unwrap();
        // The same, read by brute force.
        let of_a = "SELECT d.id FROM kurir_deliveries d \
            JOIN kurir_endpoints e ON e.id = d.endpoint_id \
            JOIN kurir_outbox o ON o.id = d.outbox_id WHERE e.subscriber_id = 'cus_a'";
        let newest = ids_of(&store, &format!("{of_a} ORDER BY d.id DESC LIMIT 14")).await;
        let newest_dead = ids_of(
            &store,
            &format!("{of_a} AND d.status = 'dead_letter' ORDER BY d.id DESC LIMIT 7"),
        )
        .await;
        let newest_paid = ids_of(
            &store,
            &format!(
                "{of_a} AND d.endpoint_id = 'ep_a1' AND o.event_type = 'order.paid' \
                 ORDER BY d.id DESC LIMIT 7"
            ),
        )
        .await;
        store.close().await;
        drop_database(admin).await;
        for plan in plans {
            assert!(reads_an_index(&store, &plan), "{backend}: {plan}");
        }
        assert_eq!(ids(&first), newest[..7], "{backend}");
        assert_eq!(ids(&second), newest[7..], "{backend}");
        assert_eq!(ids(&dead), newest_dead, "{backend}");
        assert_eq!(ids(&filtered), newest_paid, "{backend}");
        assert!(!newest_dead.is_empty() && newest_paid.len() == 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribers_log_reads_its_endpoints_index_on_sqlite() {
        a_subscribers_log_reads_its_endpoints_index_whatever_the_others_have("sqlite").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribers_log_reads_its_endpoints_index_on_postgres() {
        a_subscribers_log_reads_its_endpoints_index_whatever_the_others_have("postgres").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribers_log_reads_its_endpoints_index_on_mysql() {
        a_subscribers_log_reads_its_endpoints_index_whatever_the_others_have("mysql").await;
    }
}
