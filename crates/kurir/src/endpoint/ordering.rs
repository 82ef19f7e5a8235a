//! Ordered delivery per aggregate: an endpoint's choice ([`Ordering`]), what a dead-lettered
//! delivery does to the rest of its aggregate ([`OnDeadLetter`]), and the key that ties the
//! deliveries of one aggregate at one endpoint together ([`ordering_key`]).
//!
//! The dispatcher's claim enforces the order (see `store::ordering`); this module only names
//! the settings.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Whether an endpoint's deliveries are attempted in outbox order per aggregate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// No order: deliveries are attempted as they come due, many at once.
    #[default]
    None,
    /// Deliveries of events that share (`aggregate_type`, `aggregate_id`) are attempted one at
    /// a time, in outbox order; events without an aggregate are unordered.
    Aggregate,
}

/// What a dead-lettered delivery of an ordered endpoint does to the later ones of its aggregate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadLetter {
    /// They wait until the dead-lettered one is replayed (and sent, or dead-lettered again).
    #[default]
    Block,
    /// They go on; the dead-lettered one waits for a replay on its own.
    Skip,
}

impl Ordering {
    /// The stored and shown form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Aggregate => "aggregate",
        }
    }

    /// The setting a stored text names (the column's CHECK allows no other).
    pub fn from_stored(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::None),
            "aggregate" => Some(Self::Aggregate),
            _ => None,
        }
    }
}

impl OnDeadLetter {
    /// The stored and shown form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Skip => "skip",
        }
    }

    /// The setting a stored text names (the column's CHECK allows no other).
    pub fn from_stored(s: &str) -> Option<Self> {
        match s {
            "block" => Some(Self::Block),
            "skip" => Some(Self::Skip),
            _ => None,
        }
    }
}

/// The ordering key of a delivery of an event to an endpoint with `ordering`: the aggregate,
/// when the endpoint orders by aggregate and the event names both its aggregate's type and id;
/// `None` (unordered) otherwise. The type's length in bytes comes first, so no two aggregates
/// share a key whatever their texts hold (`"a:b" + "c"` and `"a" + "b:c"` differ).
pub fn ordering_key(
    ordering: Ordering,
    aggregate_type: Option<&str>,
    aggregate_id: Option<&str>,
) -> Option<String> {
    match (ordering, aggregate_type, aggregate_id) {
        (Ordering::Aggregate, Some(kind), Some(id)) => Some(format!("{}:{kind}{id}", kind.len())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_ordered_endpoint_and_an_event_with_a_whole_aggregate_get_a_key() {
        let key = |o, t, i| ordering_key(o, t, i);
        assert_eq!(
            key(Ordering::Aggregate, Some("order"), Some("42")).as_deref(),
            Some("5:order42")
        );
        assert_eq!(key(Ordering::None, Some("order"), Some("42")), None);
        assert_eq!(key(Ordering::Aggregate, None, Some("42")), None);
        assert_eq!(key(Ordering::Aggregate, Some("order"), None), None);
    }

    #[test]
    fn keys_of_different_aggregates_differ_even_when_their_texts_join_alike() {
        let a = ordering_key(Ordering::Aggregate, Some("a:b"), Some("c"));
        let b = ordering_key(Ordering::Aggregate, Some("a"), Some("b:c"));
        let c = ordering_key(Ordering::Aggregate, Some("ab"), Some("c"));
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_ne!(a, c);
    }

    #[test]
    fn stored_forms_read_back() {
        for o in [Ordering::None, Ordering::Aggregate] {
            assert_eq!(Ordering::from_stored(o.as_str()), Some(o));
        }
        for p in [OnDeadLetter::Block, OnDeadLetter::Skip] {
            assert_eq!(OnDeadLetter::from_stored(p.as_str()), Some(p));
        }
        assert_eq!(Ordering::from_stored("ordered"), None);
    }
}
