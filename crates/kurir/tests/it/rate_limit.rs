//! The rate limit per endpoint with real receivers (issue 15): a limit of 20/s holds across two
//! processes together, counted in every one-second window at the receiver; nothing is lost.

use std::time::Duration;

use kurir::endpoint::NewEndpoint;

use crate::on_both_backends;
use crate::support::dispatcher::Process;
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, Backend, TestDb};

on_both_backends!(a_rate_limit_holds_across_processes_in_every_second);

async fn a_rate_limit_holds_across_processes_in_every_second(db: TestDb) {
    let receiver = Receiver::ok().await;
    let rate = 20;
    let mut new = NewEndpoint::new(receiver.url("/hook"));
    new.rate_limit_per_second = Some(rate);
    db.store.create_endpoint(new).await.unwrap();
    enqueue_events(&db.store, "order.paid", 200).await;
    db.store.relay_batch(500).await.unwrap();
    // Two processes on PostgreSQL; SQLite is one process per file.
    let n = if db.backend == Backend::Postgres {
        2
    } else {
        1
    };
    let processes: Vec<Process> = (0..n)
        .map(|i| Process::start(&db.store, test_delivery_config(), &format!("p{i}")))
        .collect();
    receiver.wait_for(200).await;
    let at: Vec<_> = receiver.requests().iter().map(|r| r.at).collect();
    for (i, from) in at.iter().enumerate() {
        let within = at[i..]
            .iter()
            .take_while(|t| **t - *from < Duration::from_secs(1))
            .count();
        assert!(
            within <= 2 * rate as usize,
            "{within} requests within a second of request {i}"
        );
    }
    let span = (at[at.len() - 1] - at[0]).as_secs_f64();
    let average = (at.len() as f64 - f64::from(rate)) / span;
    assert!(
        average <= f64::from(rate) * 1.1,
        "{average:.1}/s after the first burst, over {span:.1} s"
    );
    eventually("every delivery to be recorded", || async {
        let counts = db.store.count_deliveries_by_status().await.unwrap();
        counts
            .iter()
            .any(|(s, n)| s == "sent" && *n == 200)
            .then_some(())
    })
    .await;
    for p in processes {
        p.stop().await;
    }
}
