//! Which endpoints a claim asks for: those that may have due deliveries, not every endpoint
//! installed (issue 27: each installed endpoint used to cost every claim its room, its slot in
//! the claim's statement and its rate-limit look).
//!
//! The set is learnt from the database ([`crate::store::Store::endpoints_with_due_deliveries`],
//! an index skip that costs the endpoints with deliveries to make) and kept between looks: an
//! endpoint stays in it while its claims come back full or it has no room to claim, and leaves
//! when a claim takes fewer than it asked for (nothing more is due there now). A look is made
//!
//! - when the dispatcher is woken (new deliveries from this process's relay or another's, a
//!   replay, a finished delivery that may unblock an ordered aggregate),
//! - at every idle poll, and at least every [`LOOK_INTERVAL`] while busy: retries coming due,
//!   leases taken back by the sweep, and rows written without a wake-up are found so;
//! - for an endpoint whose deliveries this process handed back, which are due again at once.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The longest a busy dispatcher goes without looking for endpoints with due deliveries. A
/// retry comes due at most this late on a busy process (an idle one looks at every poll).
pub const LOOK_INTERVAL: Duration = Duration::from_millis(250);

/// The endpoints this process claims for (see the module doc).
#[derive(Debug, Default)]
pub(super) struct DueEndpoints {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ids: HashSet<String>,
    /// When to look next; `None`: at the next step.
    next_look: Option<Instant>,
    /// Whether the last look found any endpoint with due deliveries.
    found_some: bool,
}

impl DueEndpoints {
    /// Whether the next step looks in the database.
    pub fn look_due(&self) -> bool {
        self.lock().next_look.is_none_or(|at| Instant::now() >= at)
    }

    /// Makes the next step look.
    pub fn look_soon(&self) {
        self.lock().next_look = None;
    }

    /// Adds what a look found.
    pub fn looked(&self, found: Vec<String>) {
        let mut inner = self.lock();
        inner.found_some = !found.is_empty();
        inner.ids.extend(found);
        inner.next_look = Some(Instant::now() + LOOK_INTERVAL);
    }

    /// While the last look found endpoints with due deliveries (work is flowing), when the
    /// next look is due: the dispatcher's wait ends there at the latest, whatever its idle
    /// schedule says. Its claims can come back short meanwhile (other processes took the rows
    /// first, or its lanes were full), which empties the set and grows the idle wait; without
    /// this bound such a process slept up to the slowest poll while the others sent the rest.
    pub fn busy_look_at(&self) -> Option<Instant> {
        let inner = self.lock();
        if inner.found_some {
            inner.next_look
        } else {
            None
        }
    }

    /// Adds endpoints known to have due deliveries (handed back by this process).
    pub fn add<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut inner = self.lock();
        inner.ids.extend(ids.into_iter().map(str::to_owned));
    }

    /// The endpoints to claim for.
    pub fn ids(&self) -> Vec<String> {
        self.lock().ids.iter().cloned().collect()
    }

    /// Removes endpoints found to have nothing due now (a claim took less than it asked for),
    /// or that are no longer live.
    pub fn remove<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut inner = self.lock();
        for id in ids {
            inner.ids.remove(id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::DueEndpoints;

    #[test]
    fn a_look_is_due_at_first_and_after_a_wake_but_not_right_after_looking() {
        let due = DueEndpoints::default();
        assert!(due.look_due());
        due.looked(vec!["a".into()]);
        assert!(!due.look_due());
        due.look_soon();
        assert!(due.look_due());
        due.add(["b"]);
        let mut ids = due.ids();
        ids.sort();
        assert_eq!(ids, ["a", "b"]);
        due.remove(["a"]);
        assert_eq!(due.ids(), ["b"]);
    }

    /// While work flows (the last look found some), the next look bounds the dispatcher's
    /// wait even after its claims emptied the set; once a look finds nothing, the idle
    /// schedule alone decides.
    #[test]
    fn the_next_look_bounds_the_wait_only_while_the_last_look_found_work() {
        let due = DueEndpoints::default();
        assert_eq!(due.busy_look_at(), None, "nothing looked at yet");
        due.looked(vec!["a".into()]);
        due.remove(["a"]);
        assert!(
            due.busy_look_at().is_some(),
            "drained, but work was flowing"
        );
        due.looked(Vec::new());
        assert_eq!(due.busy_look_at(), None, "idle");
    }
}
