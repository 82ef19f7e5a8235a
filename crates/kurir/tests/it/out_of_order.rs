//! Ids that commit out of order: an application's transaction takes an outbox id, another takes
//! the next one and commits first. A relay that went on from the highest id it had seen would
//! step over the first event for ever. kurir's does not: on PostgreSQL it reads past a cursor in
//! the order of the inserting transactions' ids (`store::cursor`), on MySQL it looks for rows
//! not yet marked dispatched; the late one is fanned out once it commits. PostgreSQL's
//! sequences and InnoDB's auto-increment both hand out ids before commit; SQLite has one writer
//! at a time, so it cannot happen there.

use kurir::endpoint::NewEndpoint;
use kurir::outbox::{enqueue, NewEvent};
use kurir::store::Store;

use crate::support::TestDb;

crate::on_shared_servers!(an_event_whose_id_commits_after_a_later_one_is_still_relayed);

fn event(n: u32) -> NewEvent {
    NewEvent::json("order.paid", &serde_json::json!({ "n": n })).unwrap()
}

async fn an_event_whose_id_commits_after_a_later_one_is_still_relayed(db: TestDb) {
    let s = &db.store;
    s.create_endpoint(NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    // PostgreSQL's relay reads in the order of the inserting transactions' ids, and an older
    // one still open holds later ones back (`cursor::a_long_transaction_holds_the_relay_back…`):
    // the quick transaction takes its id first, so only the outbox ids are out of order.
    let take_xid = match s {
        Store::Postgres(_) => "SELECT pg_current_xact_id()::text",
        _ => "SELECT 'none'",
    };
    macro_rules! run {
        ($pool:expr) => {{
            let mut quick = $pool.begin().await.unwrap();
            sqlx::query(take_xid).execute(&mut *quick).await.unwrap();
            let mut slow = $pool.begin().await.unwrap();
            let first = enqueue(&mut slow, event(1)).await.unwrap();
            let second = enqueue(&mut quick, event(2)).await.unwrap();
            quick.commit().await.unwrap();

            let relayed = s.relay_batch(100).await.unwrap();
            assert_eq!(relayed.events, 1, "only the committed event is fanned out");
            slow.commit().await.unwrap();
            let relayed = s.relay_batch(100).await.unwrap();
            assert_eq!(relayed.events, 1, "the late commit is fanned out next");
            (first, second)
        }};
    }
    let (first, second) = match s {
        Store::Postgres(pg) => run!(pg.pool()),
        Store::Mysql(my) => run!(my.pool()),
        Store::Sqlite(_) => unreachable!("one writer at a time"),
    };
    let (a, b) = (
        s.get_event(first.as_str()).await.unwrap().unwrap(),
        s.get_event(second.as_str()).await.unwrap().unwrap(),
    );
    assert!(a.id < b.id, "the first event took the lower id");
    for id in [first, second] {
        let deliveries = s.deliveries_for_event(id.as_str()).await.unwrap();
        assert_eq!(deliveries.len(), 1, "{id} has its delivery");
    }
}
