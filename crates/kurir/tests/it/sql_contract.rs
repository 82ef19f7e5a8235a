//! The SQL contract: `kurir_outbox` refuses, at `INSERT`, the rows the admin API would refuse,
//! each with a named constraint in the error, so an application's transaction fails loudly. Rows
//! written before the contract existed that break it are recorded as refused, visible in the
//! event's view and in a metric, never silently dropped or delivered.

use kurir::endpoint::NewEndpoint;
use kurir::store::Store;
use serde_json::Value;

use crate::on_both_backends;
use crate::support::receiver::Receiver;
use crate::support::{test_delivery_config, Backend, TestDb, TestServer};

on_both_backends!(
    the_readme_insert_with_bad_values_names_the_constraint,
    an_outbox_insert_maintains_only_what_refuses_a_row_and_what_the_relay_reads,
    a_row_nested_deeper_than_128_levels_is_recorded_as_refused_not_delivered,
    postgres_refuses_through_domains_by_the_same_rule_names,
);

/// The README's plain INSERT, with every value a parameter as an application binds them.
const INSERT_PG: &str =
    "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
    VALUES (COALESCE($1, kurir_uuid_v7()::text), $2, $3, $4, $5::json)";
const INSERT_SQLITE: &str =
    "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
    VALUES (COALESCE(?1, lower(hex(randomblob(16)))), ?2, ?3, ?4, ?5)";

const INSERT_MYSQL: &str =
    "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
    VALUES (COALESCE(?, CAST(UUID() AS CHAR)), ?, ?, ?, ?)";

/// One outbox row as an application would write it.
struct Row<'a> {
    event_id: Option<&'a str>,
    event_type: &'a str,
    aggregate_id: &'a str,
    payload: String,
}

fn row(event_type: &str, payload: &str) -> Row<'static> {
    Row {
        event_id: None,
        event_type: Box::leak(event_type.to_owned().into_boxed_str()),
        aggregate_id: "98765",
        payload: payload.to_owned(),
    }
}

/// Inserts `row` with plain SQL; the database's error text when it refuses.
async fn insert(store: &Store, row: &Row<'_>) -> Result<(), String> {
    let result = match store {
        Store::Postgres(pg) => sqlx::query(INSERT_PG)
            .bind(row.event_id)
            .bind(row.event_type)
            .bind("order")
            .bind(row.aggregate_id)
            .bind(&row.payload)
            .execute(pg.pool())
            .await
            .map(drop),
        Store::Sqlite(sq) => sqlx::query(INSERT_SQLITE)
            .bind(row.event_id)
            .bind(row.event_type)
            .bind("order")
            .bind(row.aggregate_id)
            .bind(&row.payload)
            .execute(sq.pool())
            .await
            .map(drop),
        Store::Mysql(my) => sqlx::query(INSERT_MYSQL)
            .bind(row.event_id)
            .bind(row.event_type)
            .bind("order")
            .bind(row.aggregate_id)
            .bind(&row.payload)
            .execute(my.pool())
            .await
            .map(drop),
    };
    result.map_err(|e| e.to_string())
}

async fn the_readme_insert_with_bad_values_names_the_constraint(db: TestDb) {
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(1024 * 1024));
    let cases = [
        (row("order.paid", "[1,2,3]"), "kurir_outbox_payload_object"),
        (
            row("order.paid", r#""text""#),
            "kurir_outbox_payload_object",
        ),
        (row("order.paid", "null"), "kurir_outbox_payload_object"),
        (row("order.paid", &big), "kurir_outbox_payload_size"),
        (row("Order.Paid", "{}"), "kurir_outbox_event_type_format"),
        (row("order..paid", "{}"), "kurir_outbox_event_type_format"),
        (row("order.paid.", "{}"), "kurir_outbox_event_type_format"),
        (row("order paid", "{}"), "kurir_outbox_event_type_format"),
        (
            row(&"a".repeat(256), "{}"),
            "kurir_outbox_event_type_format",
        ),
        (
            Row {
                event_id: Some("has space"),
                ..row("order.paid", "{}")
            },
            "kurir_outbox_event_id_format",
        ),
        (
            Row {
                event_id: Some("ünïcode"),
                ..row("order.paid", "{}")
            },
            "kurir_outbox_event_id_format",
        ),
        (
            Row {
                aggregate_id: "",
                ..row("order.paid", "{}")
            },
            "kurir_outbox_aggregate_format",
        ),
    ];
    for (bad, constraint) in &cases {
        let err = insert(&db.store, bad)
            .await
            .expect_err(&format!("{constraint}: refused at INSERT"));
        assert!(err.contains(constraint), "{constraint}: {err}");
    }
    // A NUL in any text: PostgreSQL's text cannot hold one at all; SQLite's and MySQL's is
    // refused by name.
    let nul = Row {
        aggregate_id: "98\u{0}765",
        ..row("order.paid", "{}")
    };
    let err = insert(&db.store, &nul).await.expect_err("a NUL is refused");
    if db.backend != Backend::Postgres {
        assert!(err.contains("kurir_outbox_nul_free"), "{err}");
    }
    insert(&db.store, &row("order.paid", r#"{"order_id":"98765"}"#))
        .await
        .expect("a good row is accepted");
    let stored = db
        .store
        .list_events(&kurir::store::EventQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "only the good row is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_before_the_contract_are_recorded_as_refused_on_sqlite() {
    rows_written_before_the_contract_are_recorded_as_refused(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_before_the_contract_are_recorded_as_refused_on_postgres() {
    rows_written_before_the_contract_are_recorded_as_refused(Backend::Postgres).await
}

/// Applies kurir's migrations before version 5 (the SQL contract's), as a database upgraded
/// from an earlier kurir has them.
async fn migrate_before_the_contract(store: &Store) {
    macro_rules! run {
        ($migrator:expr, $pool:expr) => {{
            let mut migrator = $migrator;
            migrator.migrations = migrator
                .migrations
                .iter()
                // 0008 and 0009 add endpoint columns the store's endpoint writes name; they
                // touch nothing the contract (0005) does.
                .filter(|m| m.version < 5 || m.version == 8 || m.version == 9)
                .cloned()
                .collect::<Vec<_>>()
                .into();
            migrator.run($pool).await.unwrap();
        }};
    }
    match store {
        Store::Postgres(pg) => run!(sqlx::migrate!("./migrations/postgres"), pg.pool()),
        Store::Sqlite(sq) => run!(sqlx::migrate!("./migrations/sqlite"), sq.pool()),
        // The MySQL dialect came with the contract: its first kurir applies 0001 to 0005 at
        // once, so it never holds rows written before it.
        Store::Mysql(_) => unreachable!("no MySQL database predates the contract"),
    }
}

async fn rows_written_before_the_contract_are_recorded_as_refused(backend: Backend) {
    let Some(db) = TestDb::unmigrated(backend).await else {
        return;
    };
    migrate_before_the_contract(&db.store).await;
    let receiver = Receiver::ok().await;
    // Written as the kurir of that migration wrote it: today's statements name later columns.
    let endpoint = format!(
        "INSERT INTO kurir_endpoints (id, url, secret) VALUES \
         ('0190f3c2-0000-7000-8000-000000000001', '{}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')",
        receiver.url("/hook")
    );
    match &db.store {
        Store::Postgres(pg) => drop(sqlx::query(&endpoint).execute(pg.pool()).await.unwrap()),
        Store::Sqlite(sq) => drop(sqlx::query(&endpoint).execute(sq.pool()).await.unwrap()),
        Store::Mysql(my) => drop(sqlx::query(&endpoint).execute(my.pool()).await.unwrap()),
    }
    let legacy = [
        ("legacy-type", "Order.Paid", "{}"),
        ("legacy-array", "order.paid", "[1,2,3]"),
        ("legacy-good", "order.paid", r#"{"n":1}"#),
    ];
    for (event_id, event_type, payload) in legacy {
        let row = Row {
            event_id: Some(event_id),
            ..row(event_type, payload)
        };
        insert(&db.store, &row).await.unwrap();
    }
    db.store
        .migrate()
        .await
        .expect("the contract's migration keeps old rows");

    let server = TestServer::start(&db, test_delivery_config()).await;
    let api = |path: String| {
        let url = format!("http://{}{path}", server.addr);
        async move {
            let response = reqwest::Client::new()
                .get(url)
                .bearer_auth("test-token")
                .send()
                .await
                .unwrap();
            response.text().await.unwrap()
        }
    };
    receiver.wait_for(1).await;
    crate::support::eventually("the good legacy row to be sent", || async {
        let event: Value =
            serde_json::from_str(&api("/v1/events/legacy-good".into()).await).ok()?;
        (event["deliveries"][0]["status"] == "sent").then_some(())
    })
    .await;
    for (event_id, constraint) in [
        ("legacy-type", "kurir_outbox_event_type_format"),
        ("legacy-array", "kurir_outbox_payload_object"),
    ] {
        let event: Value =
            serde_json::from_str(&api(format!("/v1/events/{event_id}")).await).unwrap();
        let reason = event["refused_reason"].as_str().unwrap_or_default();
        assert!(reason.contains(constraint), "{event_id}: {event}");
        assert_eq!(event["deliveries"], serde_json::json!([]), "{event_id}");
    }
    let metrics = reqwest::get(format!("http://{}/metrics", server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for refused in [
        r#"kurir_outbox_refused{event_type="Order.Paid"} 1"#,
        r#"kurir_outbox_refused{event_type="order.paid"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == refused), "{metrics}");
    }
    assert_eq!(
        receiver.requests().len(),
        1,
        "only the good row was delivered"
    );
    server.stop().await;
}

/// A JSON object `levels` deep: `{"a":{"a":…{}}}`.
fn nested(levels: usize) -> String {
    format!(
        "{}{}",
        r#"{"a":"#.repeat(levels - 1) + "{",
        "}".repeat(levels)
    )
}

/// A payload deeper than `limits::MAX_JSON_DEPTH`, written with plain SQL where the API would
/// refuse it (issue 32), is recorded as refused with its reason and the metric, delivered to
/// no one, and the relay goes on with the rows after it. (MariaDB's JSON functions read no
/// deeper than 31 levels, so there the `INSERT` itself is refused, by the contract's rule.)
async fn a_row_nested_deeper_than_128_levels_is_recorded_as_refused_not_delivered(db: TestDb) {
    let deep = Row {
        event_id: Some("too-deep"),
        ..row("order.paid", &nested(129))
    };
    if db.backend == Backend::Mysql {
        let err = insert(&db.store, &deep)
            .await
            .expect_err("refused at INSERT");
        assert!(err.contains("kurir_outbox_payload_object"), "{err}");
        return;
    }
    let receiver = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(receiver.url("/hook")))
        .await
        .unwrap();
    // Brackets in a string are not nesting: this one is delivered.
    let brackets = format!(r#"{{"text":"{}"}}"#, "[{".repeat(200));
    let rows = [
        deep,
        Row {
            event_id: Some("brackets"),
            ..row("order.paid", &brackets)
        },
        Row {
            event_id: Some("after"),
            ..row("order.paid", &nested(128))
        },
    ];
    for r in &rows {
        insert(&db.store, r).await.unwrap();
    }
    let server = TestServer::start(&db, test_delivery_config()).await;
    // Read as text: the view wraps `data` in more levels than serde_json's `Value` parses.
    let view = |id: &'static str| {
        let url = format!("http://{}/v1/events/{id}", server.addr);
        async move {
            let response = reqwest::Client::new()
                .get(url)
                .bearer_auth("test-token")
                .send()
                .await
                .unwrap();
            response.text().await.unwrap()
        }
    };
    receiver.wait_for(2).await;
    let ids: Vec<String> = receiver
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert!(ids.contains(&"brackets".to_owned()), "{ids:?}");
    assert!(ids.contains(&"after".to_owned()), "{ids:?}");
    let refused = view("too-deep").await;
    assert!(
        refused.contains("kurir_outbox_payload_depth: payload must nest at most 128 levels deep"),
        "{refused}"
    );
    assert!(refused.contains(r#""deliveries":[]"#), "{refused}");
    let metrics = reqwest::get(format!("http://{}/metrics", server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"kurir_outbox_refused{event_type="order.paid"} 1"#),
        "{metrics}"
    );
    assert_eq!(
        receiver.requests().len(),
        2,
        "the deep row was not delivered"
    );
    server.stop().await;
}

/// Issue 27, item 3: every index of `kurir_outbox` is paid by the application's INSERT, so it
/// has only the primary key, the unique event id, what the relay reads by (PostgreSQL: the
/// cursor's `(txid, id)`; MySQL: the undispatched rows) and, on MySQL, the index InnoDB requires
/// for the subscriber foreign key. kurir's listings read `kurir_event_list` (migration 0025).
async fn an_outbox_insert_maintains_only_what_refuses_a_row_and_what_the_relay_reads(db: TestDb) {
    let mut indexes: Vec<String> = match &db.store {
        Store::Postgres(pg) => sqlx::query_scalar(
            "SELECT indexname::text FROM pg_indexes WHERE tablename = 'kurir_outbox'",
        )
        .fetch_all(pg.pool())
        .await
        .unwrap(),
        Store::Sqlite(sq) => sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'kurir_outbox'",
        )
        .fetch_all(sq.pool())
        .await
        .unwrap(),
        Store::Mysql(my) => sqlx::query_scalar(
            "SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = 'kurir_outbox'",
        )
        .fetch_all(my.pool())
        .await
        .unwrap(),
    };
    indexes.sort();
    let expected: &[&str] = match db.backend {
        Backend::Postgres => &[
            "kurir_outbox_cursor",
            "kurir_outbox_event_id_key",
            "kurir_outbox_pkey",
        ],
        // SQLite names the UNIQUE constraint's index itself; the id is the rowid.
        Backend::Sqlite => &["sqlite_autoindex_kurir_outbox_1"],
        Backend::Mysql => &[
            "PRIMARY",
            "kurir_outbox_event_id_key",
            "kurir_outbox_subscriber",
            "kurir_outbox_undispatched",
        ],
    };
    assert_eq!(indexes, expected);
}

/// Issue 27, item 3: on PostgreSQL the rules are domain constraints, not table CHECKs, because a
/// table's CHECKs are parsed and planned again by every INSERT. The move must keep every rule,
/// refused at the write, inside the application's transaction, by the rule's name: also for an
/// UPDATE that writes a column, for `version`, and for an empty event type (which the format
/// rule refuses; before the move a CHECK of its own, `kurir_outbox_event_type_check`, did).
async fn postgres_refuses_through_domains_by_the_same_rule_names(db: TestDb) {
    let Store::Postgres(pg) = &db.store else {
        // SQLite's rules are triggers and MySQL's CHECKs, tested above; neither re-plans them
        // per statement.
        return;
    };
    let pool = pg.pool();
    let checks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_constraint \
         WHERE conrelid = 'kurir_outbox'::regclass AND contype = 'c'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(checks, 0, "no table CHECK left for every INSERT to re-plan");

    let refused = |sql: &'static str| async move {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(
            "INSERT INTO kurir_outbox (event_id, event_type, payload) \
                     VALUES ('kept', 'order.paid', '{}')",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        let err = sqlx::query(sql).execute(&mut *tx).await.expect_err(sql);
        // The application's transaction is the one that fails: nothing of it commits.
        drop(tx);
        let sqlx::Error::Database(e) = err else {
            panic!("{sql}: {err}")
        };
        assert_eq!(
            e.code().as_deref(),
            Some("23514"),
            "{sql}: a check violation"
        );
        (e.constraint().map(str::to_owned), e.message().to_owned())
    };
    for (sql, rule) in [
        (
            "INSERT INTO kurir_outbox (event_type, payload) VALUES ('', '{}')",
            "kurir_outbox_event_type_format",
        ),
        (
            "INSERT INTO kurir_outbox (event_type, version, payload) VALUES ('a', 0, '{}')",
            "kurir_outbox_version_check",
        ),
        (
            "UPDATE kurir_outbox SET event_type = 'Order.Paid' WHERE event_id = 'kept'",
            "kurir_outbox_event_type_format",
        ),
        (
            "UPDATE kurir_outbox SET payload = '[1]' WHERE event_id = 'kept'",
            "kurir_outbox_payload_object",
        ),
        (
            "UPDATE kurir_outbox SET aggregate_id = '' WHERE event_id = 'kept'",
            "kurir_outbox_aggregate_format",
        ),
    ] {
        let (constraint, message) = refused(sql).await;
        assert_eq!(constraint.as_deref(), Some(rule), "{sql}: {message}");
        assert!(message.contains(rule), "{sql}: {message}");
    }
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM kurir_outbox")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "every refused transaction left nothing");

    // The default event id (built as text since migration 0027) is a UUIDv7 whose time is the
    // INSERT's, to the millisecond.
    let before = chrono::Utc::now().timestamp_millis();
    let id: String = sqlx::query_scalar(
        "INSERT INTO kurir_outbox (event_type, payload) VALUES ('order.paid', '{}') \
         RETURNING event_id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let after = chrono::Utc::now().timestamp_millis();
    let uuid = uuid::Uuid::parse_str(&id).unwrap_or_else(|_| panic!("{id} is not a UUID"));
    assert_eq!(uuid.get_version_num(), 7, "{id}");
    assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{id}");
    // A UUIDv7's first 48 bits are its Unix milliseconds.
    let millis = i64::from_str_radix(&uuid.simple().to_string()[..12], 16).unwrap();
    // The database's clock and this process's are the same machine's; a second of slack
    // covers rounding, never a wrong layout (which would be off by years).
    assert!(
        (before - 1000..=after + 1000).contains(&millis),
        "{id}: {millis} not within [{before}, {after}]"
    );
}
