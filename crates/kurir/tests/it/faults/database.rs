//! The database (PostgreSQL, MySQL/MariaDB) unreachable for 20 s in the middle of a burst:
//! kurir reaches it through a proxy the test cuts (open connections dropped, new ones refused)
//! while the application goes on writing events on its own connection.

use std::collections::HashSet;
use std::time::Duration;

use kurir::endpoint::NewEndpoint;

use super::{assert_all_arrived, receipts, wait_all_sent};
use crate::on_shared_servers;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::proxy::{server_addr, url_through, Proxy};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, TestDb};

on_shared_servers!(database_unreachable_for_20_s_mid_burst_loses_no_event);

/// How long the database is out of kurir's reach.
const OUTAGE: Duration = Duration::from_secs(20);

async fn database_unreachable_for_20_s_mid_burst_loses_no_event(db: TestDb) {
    let rx = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(rx.url("/burst")))
        .await
        .unwrap();
    let proxy = Proxy::start(server_addr(&db.url)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut kurir = Kurir::spawn(kurir_serve(&url_through(&db.url, &proxy), dir.path()));

    let mut ids = enqueue_events(&db.store, "order.paid", 2000).await;
    rx.wait_for(200).await;
    proxy.cut();
    let at_cut = rx.requests().len();
    assert!(at_cut < ids.len(), "the outage starts mid-burst");
    ids.extend(enqueue_events(&db.store, "order.paid", 100).await);
    // The outage itself is what must pass for kurir: long enough that the leases held at the
    // cut run out within it.
    tokio::time::sleep(OUTAGE).await;
    let before_restore: HashSet<String> = rx.requests().iter().map(|r| r.event_id()).collect();
    proxy.restore().await;
    ids.extend(enqueue_events(&db.store, "order.paid", 100).await);

    wait_all_sent(&db.store, ids.len() as i64).await;
    let duplicates = assert_all_arrived(&rx.requests(), &ids);
    eprintln!(
        "{:?} outage: {} events, {at_cut} received before the cut, {} during it, \
         {duplicates} received twice",
        db.backend,
        ids.len(),
        before_restore.len() - at_cut,
    );
    // A delivery sent but not recorded before its lease ran out (13 s here, the outage is 20 s)
    // is sent again; nothing first sent after the outage is.
    let repeated: Vec<String> = receipts(&rx.requests())
        .into_iter()
        .filter(|(id, n)| *n > 1 && !before_restore.contains(id))
        .map(|(id, _)| id)
        .collect();
    assert!(
        repeated.is_empty(),
        "sent twice after the outage: {repeated:?}"
    );
    assert!(kurir.terminate().await.success(), "SIGTERM exits 0");
}
