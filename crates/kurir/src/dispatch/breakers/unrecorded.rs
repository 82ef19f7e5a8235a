//! What a process has counted into its copy of the circuits and not written yet.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use kurir_core::{BreakerPolicy, Circuit, Health};

/// This process's attempts the recorder has not written yet, and its own writes of circuits.
#[derive(Default)]
pub(super) struct Unrecorded {
    /// Per endpoint, the attempts counted in this process's copy and not written, in order.
    pub attempts: HashMap<String, Vec<(BreakerPolicy, Health, DateTime<Utc>)>>,
    /// This process's writes of circuits so far.
    pub writes: u64,
    /// Per endpoint, `writes` at its last write: a read of the circuits begun before it is
    /// older than the copy that write left, and must not replace it.
    pub written_at: HashMap<String, u64>,
}

impl Unrecorded {
    /// Counts the attempts not written of `id` into `c`.
    pub fn count_into(&self, id: &str, c: &mut Circuit, now: DateTime<Utc>) {
        for (policy, health, started_at) in self.attempts.get(id).into_iter().flatten() {
            c.record(policy, *health, *started_at, now);
        }
    }

    /// Forgets the first `n` attempts not written of `id`.
    pub fn forget(&mut self, id: &str, n: usize) {
        if let Some(rest) = self.attempts.get_mut(id) {
            rest.drain(..n.min(rest.len()));
            if rest.is_empty() {
                self.attempts.remove(id);
            }
        }
    }
}
