//! An endpoint refusing connections (its port closed, behind a proxy the test cuts) until each
//! of its deliveries has been refused again and again: every event still reaches it
//! afterwards, and another endpoint is served throughout.

use kurir::endpoint::NewEndpoint;

use super::{assert_all_arrived, wait_all_sent};
use crate::on_both_backends;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::proxy::Proxy;
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, TestDb};

on_both_backends!(an_endpoint_refusing_connections_through_many_retries_loses_no_event);

/// Refused attempts of a delivery made during the outage before it ends: the outage outlasts
/// that many rounds of retries.
const REFUSED_EACH: usize = 3;

async fn an_endpoint_refusing_connections_through_many_retries_loses_no_event(db: TestDb) {
    let (healthy, flaky) = (Receiver::ok().await, Receiver::ok().await);
    let proxy = Proxy::start(flaky.addr).await;
    for url in [
        healthy.url("/healthy"),
        format!("http://{}/flaky", proxy.addr),
    ] {
        db.store
            .create_endpoint(NewEndpoint::new(url))
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = kurir_serve(&db.url, dir.path());
    // Retries every 2 s at most, and more of them than the outage takes.
    cmd.env("KURIR_RETRY_INITIAL_DELAY", "500ms")
        .env("KURIR_RETRY_MAX_DELAY", "2s")
        .env("KURIR_RETRY_MAX_ATTEMPTS", "50");
    let mut kurir = Kurir::spawn(cmd);

    let mut ids = enqueue_events(&db.store, "order.paid", 10).await;
    // Recorded first: a request cut while its answer is on the way is rightly sent again.
    wait_all_sent(&db.store, 2 * ids.len() as i64).await;
    proxy.cut();
    ids.extend(enqueue_events(&db.store, "order.paid", 20).await);
    // The healthy endpoint gets every event while the other refuses.
    healthy.wait_for(ids.len()).await;
    // The outage lasts until the first and the last delivery made during it were retried
    // while refused.
    let refused = eventually("deliveries to be refused again and again", || async {
        let first = refused_attempts(&db.store, &ids[10]).await;
        let last = refused_attempts(&db.store, &ids[ids.len() - 1]).await;
        (first.min(last) >= REFUSED_EACH).then_some(first.min(last))
    })
    .await;
    assert!(flaky.requests().len() <= 10, "nothing got through the cut");
    proxy.restore().await;

    wait_all_sent(&db.store, 2 * ids.len() as i64).await;
    assert_eq!(assert_all_arrived(&healthy.requests(), &ids), 0);
    assert_eq!(assert_all_arrived(&flaky.requests(), &ids), 0);
    eprintln!("receiver outage: {refused} refused attempts of a delivery or more, then delivered");
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}

/// Attempts of `event_id`'s deliveries that failed to connect.
async fn refused_attempts(store: &kurir::store::Store, event_id: &str) -> usize {
    let mut refused = 0;
    for d in store.deliveries_for_event(event_id).await.unwrap() {
        let attempts = store.attempts_for_delivery(d.id).await.unwrap();
        refused += attempts
            .iter()
            .filter(|a| a.error.as_deref().is_some_and(|e| e.contains("connect")))
            .count();
    }
    refused
}
