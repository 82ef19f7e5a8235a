//! Group commit of the API's publishes (issue 18): several publishes in one transaction keep
//! the meaning each had alone (a repeated key or event id, in the batch or in the database,
//! answers as a repeat), an event that fails does not fail the others, and an event answered
//! `202` survives a SIGKILL of the process right after the answer.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kurir::ingest::publish_all;
use kurir::outbox::{EnqueueError, NewEvent};
use kurir::store::{IdempotencyKey, PublishItem, Published};
use kurir_core::event::EventId;
use serde_json::json;

use crate::support::process::{free_port, kurir_serve, Kurir};
use crate::support::{eventually, lock_waiters, scalar, TestDb};
use crate::{on_both_backends, on_shared_servers};

on_both_backends!(
    a_batch_means_what_each_publish_meant_alone,
    an_event_that_fails_does_not_fail_its_batch_mates,
    every_answered_publish_survives_a_sigkill,
);

on_shared_servers!(a_publish_waiting_for_an_id_in_flight_holds_up_no_insert);

fn item(event_id: Option<&str>, n: u32, key: Option<(&str, &str)>) -> PublishItem {
    let mut event = NewEvent::json("order.paid", &json!({ "n": n })).unwrap();
    if let Some(id) = event_id {
        event = event.event_id(EventId::parse(id).unwrap());
    }
    PublishItem {
        event,
        key: key.map(|(key, hash)| IdempotencyKey {
            key: key.into(),
            request_hash: hash.into(),
        }),
    }
}

/// A publish of an id another transaction inserted and has not committed waits for that one,
/// and meanwhile holds up none of its inserts. On MySQL/MariaDB it used to wait in the insert's
/// duplicate check, queued for a lock on the gap below the id, where the holder's next event
/// (a new id) goes: that insert deadlocked with it and the publish failed.
async fn a_publish_waiting_for_an_id_in_flight_holds_up_no_insert(db: TestDb) {
    macro_rules! run {
        ($pool:expr) => {{
            let mut holder = $pool.begin().await.unwrap();
            let event = item(Some("evt_in_flight"), 1, None).event;
            kurir::outbox::enqueue(&mut holder, event.clone())
                .await
                .unwrap();
            let store = db.store.clone();
            let publish = tokio::spawn(async move { store.publish_event(event, None).await });
            eventually("the publish waits for the holder's insert", || async {
                (lock_waiters(&db.store).await == 1).then_some(())
            })
            .await;
            kurir::outbox::enqueue(&mut holder, item(None, 2, None).event)
                .await
                .expect("the holder's next event");
            holder.commit().await.unwrap();
            let published = publish.await.unwrap().expect("the waiting publish");
            assert_eq!(published, Published::EventIdExists("evt_in_flight".into()));
        }};
    }
    match &db.store {
        kurir::store::Store::Postgres(pg) => run!(pg.pool()),
        kurir::store::Store::Mysql(my) => run!(my.pool()),
        kurir::store::Store::Sqlite(_) => unreachable!("run on the shared servers"),
    }
    assert_eq!(
        scalar(&db.store, "SELECT COUNT(*) FROM kurir_outbox").await,
        2
    );
}

async fn a_batch_means_what_each_publish_meant_alone(db: TestDb) {
    let s = &db.store;
    assert!(matches!(
        s.publish_event(item(Some("stored-1"), 0, None).event, None)
            .await
            .unwrap(),
        Published::Created(_)
    ));
    let items = [
        item(Some("new-1"), 1, None),
        item(Some("new-1"), 1, None),
        item(Some("stored-1"), 0, None),
        item(None, 2, Some(("key-a", "h1"))),
        item(None, 3, Some(("key-a", "h2"))),
    ];
    let done = s
        .publish_events(&items)
        .await
        .unwrap()
        .expect("no key taken meanwhile");
    assert_eq!(done[0], Published::Created("new-1".into()));
    assert_eq!(done[1], Published::EventIdExists("new-1".into()));
    assert_eq!(done[2], Published::EventIdExists("stored-1".into()));
    let Published::Created(keyed) = &done[3] else {
        panic!("{:?}", done[3])
    };
    assert_eq!(
        done[4],
        Published::KeyExists {
            event_id: keyed.clone(),
            request_hash: "h1".into()
        },
        "the key's second use in the batch answers with the first's event"
    );
    // Without keys, PostgreSQL records a batch with one multi-row insert: the same answers.
    let unkeyed = [
        item(Some("new-2"), 4, None),
        item(Some("stored-1"), 0, None),
        item(Some("new-2"), 4, None),
    ];
    let done = s.publish_events(&unkeyed).await.unwrap().unwrap();
    assert_eq!(
        done,
        [
            Published::Created("new-2".into()),
            Published::EventIdExists("stored-1".into()),
            Published::EventIdExists("new-2".into()),
        ]
    );
    let page = s
        .list_events(&kurir::store::EventQuery {
            limit: 50,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.len(),
        4,
        "stored-1, new-1, the keyed event and new-2 only"
    );
}

async fn an_event_that_fails_does_not_fail_its_batch_mates(db: TestDb) {
    let mut bad = item(Some("bad-1"), 1, None);
    // Past the API's checks, as a bug or a database rule might let one through: the store's own
    // check refuses it, and that would fail the whole transaction.
    bad.event.aggregate_id = Some(String::new());
    let items = [
        item(Some("ok-1"), 0, None),
        bad,
        item(Some("ok-2"), 2, None),
    ];
    let done = publish_all(&db.store, &items).await;
    assert!(
        matches!(&done[0], Ok(Published::Created(id)) if id == "ok-1"),
        "{done:?}"
    );
    assert!(
        matches!(&done[1], Err(EnqueueError::InvalidAggregate { .. })),
        "{done:?}"
    );
    assert!(
        matches!(&done[2], Ok(Published::Created(id)) if id == "ok-2"),
        "{done:?}"
    );
    for id in ["ok-1", "ok-2"] {
        assert!(db.store.get_event(id).await.unwrap().is_some(), "{id}");
    }
    assert!(db.store.get_event("bad-1").await.unwrap().is_none());
}

/// 32 clients publish as fast as kurir answers; the process is killed with SIGKILL while
/// requests are in flight, after at least 200 answers. Every event answered `202` is in the
/// database: an answer waits for its batch's commit.
async fn every_answered_publish_survives_a_sigkill(db: TestDb) {
    let port = free_port();
    let mut cmd = kurir_serve(&db.url, db.dir.path());
    cmd.env("KURIR_LISTEN", format!("127.0.0.1:{port}"));
    let kurir = Kurir::spawn(cmd);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    eventually("kurir to answer", || async {
        let ready = client.get(format!("{base}/readyz")).send().await.ok()?;
        ready.status().is_success().then_some(())
    })
    .await;
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..32 {
        let (client, base, answered) = (client.clone(), base.clone(), answered.clone());
        clients.spawn(async move {
            for i in 0.. {
                let id = format!("kill-{c}-{i}");
                let sent = client
                    .post(format!("{base}/v1/events"))
                    .bearer_auth("crash-test-token")
                    .header("content-type", "application/json")
                    .body(
                        json!({"event_id": id, "event_type": "order.paid", "data": {"i": i}})
                            .to_string(),
                    )
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().as_u16() == 202 => answered.lock().unwrap().push(id),
                    Ok(r) => panic!("{id}: {}", r.status()),
                    // The process is gone.
                    Err(_) => return,
                }
            }
        });
    }
    eventually("200 publishes to be answered", || async {
        (answered.lock().unwrap().len() >= 200).then_some(())
    })
    .await;
    nix_kill(kurir.pid());
    while clients.join_next().await.is_some() {}
    drop(kurir);
    let answered = answered.lock().unwrap().clone();
    let mut missing = HashSet::new();
    for id in &answered {
        if db.store.get_event(id).await.unwrap().is_none() {
            missing.insert(id.clone());
        }
    }
    eprintln!("sigkill after {} answered publishes", answered.len());
    assert!(
        missing.is_empty(),
        "answered 202 but not stored: {missing:?}"
    );
}

/// SIGKILL, at once.
fn nix_kill(pid: u32) {
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL");
}
