//! The fault suite: the real `kurir` binary under the faults production brings, each test small
//! and independent so they run in parallel. `docs/reliability.md`'s fault matrix names the test
//! behind each row; SIGKILL mid-burst is `crash.rs`'s.

mod database;
mod kills;
mod pause;
mod receiver_down;
mod shapes;
mod skewed_clock;

use std::collections::HashMap;

use kurir::delivery::DeliveryStatus;
use kurir::store::Store;

use crate::support::eventually;
use crate::support::receiver::Recorded;

/// Receipts per event id.
fn receipts(requests: &[Recorded]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in requests {
        *seen.entry(r.event_id()).or_default() += 1;
    }
    seen
}

/// Waits until `n` deliveries are `sent`.
async fn wait_all_sent(store: &Store, n: i64) {
    eventually(&format!("{n} deliveries to be sent"), || async {
        let counts = store.count_deliveries_by_status().await.ok()?;
        let sent = counts
            .iter()
            .find(|(s, _)| s == DeliveryStatus::Sent.as_str())
            .map_or(0, |(_, n)| *n);
        (sent == n).then_some(())
    })
    .await
}

/// Asserts every id in `ids` arrived, and returns how many arrived more than once.
fn assert_all_arrived(requests: &[Recorded], ids: &[String]) -> usize {
    let seen = receipts(requests);
    for id in ids {
        assert!(seen.contains_key(id), "event {id} was never delivered");
    }
    seen.values().map(|n| n - 1).sum()
}
