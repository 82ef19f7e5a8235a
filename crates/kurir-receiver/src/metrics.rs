//! The receiving side's metric: `kurir_inbox_events_total{source, outcome}`, one count per
//! webhook request a [`WebhookSource`](crate::WebhookSource) judged.
//!
//! `outcome` is `accepted` (stored, or processed inline), `duplicate` (already in the inbox),
//! `error` (verified, but the inbox could not store it: the sender gets `500` and retries), or the
//! rejection's code (`signature_mismatch`, `timestamp_too_old`, `missing_header`,
//! `payload_too_large`, `missing_event_id`, …: see [`Rejection::code`](crate::Rejection::code)).
//! `source` is the configured source's name, so the labels stay bounded; a request for a source
//! that is not configured never reaches a `WebhookSource` and is not counted.
//!
//! Counts go through the [`metrics`](::metrics) facade: to the recorder given with
//! [`WebhookSource::metrics_recorder`](crate::WebhookSource::metrics_recorder) (what `kurir serve`
//! does), else to whatever recorder the application installed globally (none: nothing is counted).
//! [`WebhookSource::verify`](crate::WebhookSource::verify), the extractor and
//! [`Receiver::accept`](crate::Receiver::accept) count for you; code that stores events some other
//! way counts with [`WebhookSource::count`](crate::WebhookSource::count).

use std::sync::Arc;

use ::metrics::{Key, Label, Level, Metadata, Recorder};

/// The counter's name.
pub const INBOX_EVENTS: &str = "kurir_inbox_events_total";

/// `outcome` of an event stored (or processed inline) for the first time.
pub const ACCEPTED: &str = "accepted";
/// `outcome` of an event the inbox already had.
pub const DUPLICATE: &str = "duplicate";
/// `outcome` of a verified event the inbox failed to store.
pub const ERROR: &str = "error";

static METADATA: Metadata<'static> =
    Metadata::new("kurir_receiver", Level::INFO, Some(module_path!()));

/// Where a source's counts go: a recorder of its own, or the facade's current one.
#[derive(Clone, Default)]
pub(crate) struct InboxMetrics(Option<Arc<dyn Recorder + Send + Sync>>);

impl std::fmt::Debug for InboxMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let to = if self.0.is_some() { "own" } else { "global" };
        f.debug_tuple("InboxMetrics").field(&to).finish()
    }
}

impl InboxMetrics {
    pub(crate) fn new(recorder: Arc<dyn Recorder + Send + Sync>) -> Self {
        Self(Some(recorder))
    }

    /// Adds one to `kurir_inbox_events_total{source, outcome}`.
    pub(crate) fn count(&self, source: &str, outcome: &'static str) {
        let key = Key::from_parts(
            INBOX_EVENTS,
            vec![
                Label::new("source", source.to_owned()),
                Label::from_static_parts("outcome", outcome),
            ],
        );
        match &self.0 {
            Some(recorder) => recorder.register_counter(&key, &METADATA).increment(1),
            None => ::metrics::with_recorder(|r| r.register_counter(&key, &METADATA).increment(1)),
        }
    }
}
