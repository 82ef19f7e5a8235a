//! Subscribers (issue 29): the SQL contract's `subscriber_id` (an unknown subscriber fails the
//! application's INSERT, naming the rule), and the fan-out rule (an event addressed to a
//! subscriber reaches only that subscriber's endpoints, one addressed to none only the
//! operator's), on every database.

use kurir::endpoint::{EventFilter, NewEndpoint};
use kurir::outbox::NewEvent;
use kurir::store::Store;

use crate::on_both_backends;
use crate::support::{enqueue_all, TestDb};

on_both_backends!(
    an_outbox_insert_naming_an_unknown_subscriber_fails_naming_the_rule,
    events_reach_only_their_own_subscribers_endpoints,
    a_disabled_subscribers_endpoints_get_nothing_and_a_deleted_ones_end_as_tombstones,
);

/// Runs `sql` with its text binds on the store's pool, as an application would; the
/// database's error text when it refuses.
async fn exec(store: &Store, sql: &str, binds: &[&str]) -> Result<(), String> {
    macro_rules! run {
        ($pool:expr) => {{
            let mut q = sqlx::query(sql);
            for b in binds {
                q = q.bind(*b);
            }
            q.execute($pool).await.map(drop)
        }};
    }
    let result = match store {
        Store::Postgres(pg) => run!(pg.pool()),
        Store::Sqlite(sq) => run!(sq.pool()),
        Store::Mysql(my) => run!(my.pool()),
    };
    result.map_err(|e| e.to_string())
}

fn placeholders(store: &Store, n: usize) -> String {
    (1..=n)
        .map(|i| match store {
            Store::Postgres(_) => format!("${i}"),
            Store::Sqlite(_) => format!("?{i}"),
            Store::Mysql(_) => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The README's two statements: the subscriber, then an event addressed to it.
async fn insert_event(store: &Store, subscriber: &str) -> Result<(), String> {
    let sql = format!(
        "INSERT INTO kurir_outbox (event_type, aggregate_type, aggregate_id, payload, \
         subscriber_id) VALUES ({})",
        placeholders(store, 5).replace("$4", "$4::json")
    );
    let payload = r#"{"order_id":"98765"}"#;
    exec(
        store,
        &sql,
        &["order.paid", "order", "98765", payload, subscriber],
    )
    .await
}

async fn an_outbox_insert_naming_an_unknown_subscriber_fails_naming_the_rule(db: TestDb) {
    let s = &db.store;
    let refused = insert_event(s, "cus_missing").await.unwrap_err();
    assert!(refused.contains("kurir_outbox_subscriber"), "{refused}");
    let new_subscriber = format!(
        "INSERT INTO kurir_subscribers (id, name) VALUES ({})",
        placeholders(s, 2)
    );
    exec(s, &new_subscriber, &["cus_8Hq2", "Toko Makmur"])
        .await
        .unwrap();
    insert_event(s, "cus_8Hq2").await.unwrap();
    let bad_id = exec(s, &new_subscriber, &["has space", "x"])
        .await
        .unwrap_err();
    assert!(bad_id.contains("kurir_subscribers_id_format"), "{bad_id}");
    let stored = s
        .list_events(&kurir::store::EventQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "the refused insert stored nothing");
    assert_eq!(stored[0].subscriber_id.as_deref(), Some("cus_8Hq2"));
}

/// Who the store's audit records for the changes these tests make.
fn operator() -> kurir::access::Actor {
    kurir::access::Actor::bootstrap("admin", kurir::access::Via::Cli)
}

fn endpoint(url: &str, filter: &str, subscriber: Option<&str>) -> NewEndpoint {
    NewEndpoint {
        event_types: EventFilter::parse(vec![filter.to_owned()]).unwrap(),
        subscriber_id: subscriber.map(str::to_owned),
        ..NewEndpoint::new(url)
    }
}

fn order(subscriber: Option<&str>) -> NewEvent {
    let e = NewEvent::json("order.paid", &serde_json::json!({"n": 1})).unwrap();
    match subscriber {
        Some(s) => e.subscriber(s),
        None => e,
    }
}

/// The endpoints event `id` was fanned out to.
async fn targets(s: &Store, id: &str) -> Vec<String> {
    let mut got: Vec<String> = (s.deliveries_for_event(id).await.unwrap().into_iter())
        .map(|d| d.endpoint_id)
        .collect();
    got.sort();
    got
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

async fn events_reach_only_their_own_subscribers_endpoints(db: TestDb) {
    let s = &db.store;
    let meta = serde_json::json!({});
    for id in ["cus_a", "cus_b"] {
        s.create_subscriber(id, id, &meta).await.unwrap().unwrap();
    }
    // Every endpoint's filter matches: only the subscriber decides.
    let a1 = s.create_endpoint(endpoint("https://a1.example/", "order.*", Some("cus_a")));
    let a1 = a1.await.unwrap().id.to_string();
    let a2 = s.create_endpoint(endpoint("https://a2.example/", "*", Some("cus_a")));
    let a2 = a2.await.unwrap().id.to_string();
    let b1 = s.create_endpoint(endpoint("https://b1.example/", "*", Some("cus_b")));
    let b1 = b1.await.unwrap().id.to_string();
    let op = s.create_endpoint(endpoint("https://op.example/", "order.paid", None));
    let op = op.await.unwrap().id.to_string();
    crate::support::eventually("the clock to pass the endpoints' creation", || async {
        let id = kurir::endpoint::EndpointId::parse(&op).unwrap();
        let newest = s.get_endpoint(&id).await.unwrap().unwrap().created_at;
        (s.clock().now_millis() > newest).then_some(())
    })
    .await;
    let ids = enqueue_all(
        s,
        vec![order(Some("cus_a")), order(Some("cus_b")), order(None)],
    )
    .await;
    s.relay_batch(100).await.unwrap();
    assert_eq!(targets(s, &ids[0]).await, sorted(vec![a1, a2]), "A's event");
    assert_eq!(targets(s, &ids[1]).await, vec![b1], "B's event");
    assert_eq!(targets(s, &ids[2]).await, vec![op], "the operator's event");
}

async fn a_disabled_subscribers_endpoints_get_nothing_and_a_deleted_ones_end_as_tombstones(
    db: TestDb,
) {
    use kurir::store::subscribers::SubscriberUpdate;
    let s = &db.store;
    s.create_subscriber("cus_a", "A", &serde_json::json!({"plan": "pro"}))
        .await
        .unwrap()
        .unwrap();
    let a1 = s.create_endpoint(endpoint("https://a1.example/", "*", Some("cus_a")));
    let a1 = a1.await.unwrap();
    crate::support::eventually("the clock to pass the endpoint's creation", || async {
        (s.clock().now_millis() > a1.created_at).then_some(())
    })
    .await;
    let disable = SubscriberUpdate {
        disabled: Some(true),
        ..Default::default()
    };
    let off = s
        .update_subscriber("cus_a", &disable, &operator())
        .await
        .unwrap()
        .unwrap();
    assert!(off.disabled_at.is_some());
    let held = enqueue_all(s, vec![order(Some("cus_a"))]).await;
    s.relay_batch(100).await.unwrap();
    assert!(targets(s, &held[0]).await.is_empty(), "disabled: nothing");

    let enable = SubscriberUpdate {
        disabled: Some(false),
        ..Default::default()
    };
    s.update_subscriber("cus_a", &enable, &operator())
        .await
        .unwrap()
        .unwrap();
    let sent = enqueue_all(s, vec![order(Some("cus_a"))]).await;
    s.relay_batch(100).await.unwrap();
    assert_eq!(targets(s, &sent[0]).await, vec![a1.id.to_string()]);

    assert!(s.delete_subscriber("cus_a", &operator()).await.unwrap());
    assert!(
        !s.delete_subscriber("cus_a", &operator()).await.unwrap(),
        "once"
    );
    let buried = s.endpoint_deleted_at(&a1.id).await.unwrap();
    assert!(buried.is_some(), "its endpoint is a tombstone");
    let empty = serde_json::json!({});
    let taken = s.create_subscriber("cus_a", "again", &empty).await.unwrap();
    assert!(taken.is_none(), "the id stays taken");
    let tombstone = s.subscriber("cus_a").await.unwrap().unwrap();
    assert!(tombstone.deleted_at.is_some());
}
