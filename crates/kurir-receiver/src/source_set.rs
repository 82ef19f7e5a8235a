//! [`SourceSet`]: the names of the sources a [`Runner`](crate::Runner) processes, shared with
//! whoever keeps the list current while the runner runs.
//!
//! A runner over every source of the table is [`Runner::new`](crate::Runner::new)'s default; one
//! over a fixed source is [`Runner::source`](crate::Runner::source). A set is for a list that
//! changes: kurir's inbox gateway adds a source when an operator creates one, and only ever
//! claims its own sources' events from a table an application may share.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

/// A shared, changeable set of source names. Cheap to clone; clones see the same set.
#[derive(Debug, Clone, Default)]
pub struct SourceSet(Arc<RwLock<BTreeSet<String>>>);

impl SourceSet {
    /// A set holding `names`.
    pub fn new<I, S>(names: I) -> SourceSet
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SourceSet(Arc::new(RwLock::new(
            names.into_iter().map(Into::into).collect(),
        )))
    }

    /// Adds `name`; `true` if it was not there yet.
    pub fn insert(&self, name: &str) -> bool {
        if self.contains(name) {
            return false;
        }
        self.write().insert(name.to_owned())
    }

    /// Removes `name`; `true` if it was there.
    pub fn remove(&self, name: &str) -> bool {
        self.write().remove(name)
    }

    /// Makes the set exactly `names`.
    pub fn replace<I, S>(&self, names: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        *self.write() = names.into_iter().map(Into::into).collect();
    }

    /// Whether `name` is in the set.
    pub fn contains(&self, name: &str) -> bool {
        self.read().contains(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.read().iter().cloned().collect()
    }

    // A panic while holding the lock cannot leave a set of strings half-changed: use it anyway.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeSet<String>> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeSet<String>> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_set() {
        let set = SourceSet::new(["billing"]);
        let clone = set.clone();
        assert!(clone.insert("shipping"));
        assert!(!clone.insert("shipping"));
        assert_eq!(set.names(), ["billing", "shipping"]);
        assert!(set.remove("billing"));
        set.replace(["github"]);
        assert_eq!(clone.names(), ["github"]);
        assert!(!clone.contains("shipping"));
    }
}
