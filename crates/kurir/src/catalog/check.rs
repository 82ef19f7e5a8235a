//! What becomes of one event, given the catalog: [`Checks`] is one process's compiled view of
//! the catalog at one moment, and [`Checks::check`] its verdict on an event. The API and the
//! relay both ask it, so an event written either way is held to the same rules.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::schema::{self, CompiledSchema, Failure};
use super::{is_kurir_type, CatalogMode};

/// One catalog entry as the checks need it.
#[derive(Debug)]
pub struct CheckedEntry {
    /// The schema as stored (text), to tell whether a reload changed it.
    pub schema_text: Option<String>,
    /// The compiled schema; `Err` when the stored schema does not compile (a hand edit): every
    /// event of that version is then refused with that reason, never let through unchecked.
    pub schema: Option<Result<Arc<CompiledSchema>, String>>,
    /// Whether the version is deprecated.
    pub deprecated: bool,
}

/// The catalog compiled, as of one read. Shared and never changed: a reload makes a new one.
#[derive(Debug, Default)]
pub struct Checks {
    mode: CatalogMode,
    entries: HashMap<(String, i32), Arc<CheckedEntry>>,
    any_schema: bool,
}

/// What becomes of an event.
#[derive(Debug)]
pub enum Verdict {
    /// It is delivered.
    Pass {
        /// Its version is deprecated: delivered, and counted.
        deprecated: bool,
    },
    /// It is refused: never delivered.
    Refused(Refusal),
}

impl Verdict {
    /// Whether the event is delivered.
    pub fn is_pass(&self) -> bool {
        matches!(self, Self::Pass { .. })
    }
}

/// Why an event is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Recorded on the outbox row and answered by the API, e.g.
    /// `schema: /total: "250000" is not of type "integer"`.
    pub reason: String,
    /// The same without any payload value, for the log line.
    pub masked_reason: String,
    /// Each failing value (empty for a version the catalog does not have).
    pub failures: Vec<Failure>,
    /// Why: the schema, or (strict) a version the catalog does not have.
    pub kind: RefusalKind,
}

/// The two ways the catalog refuses an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    /// `data` fails the version's schema.
    Schema,
    /// `KURIR_EVENT_CATALOG=strict` and the catalog has no such (type, version).
    Unknown,
}

/// The prefix of every refusal reason the catalog writes: what `kurir events recheck` looks at
/// again (the SQL contract's refusals cannot pass a recheck and are left alone).
pub const CATALOG_REASON_PREFIXES: [&str; 2] = ["schema:", "catalog:"];

impl Checks {
    /// The catalog's entries, compiled, under `mode`.
    pub fn new(mode: CatalogMode, entries: HashMap<(String, i32), Arc<CheckedEntry>>) -> Self {
        let any_schema = entries.values().any(|e| e.schema.is_some());
        Self {
            mode,
            entries,
            any_schema,
        }
    }

    /// Checks nothing (`KURIR_EVENT_CATALOG=off`).
    pub fn off() -> Self {
        Self {
            mode: CatalogMode::Off,
            ..Self::default()
        }
    }

    /// The mode these checks apply.
    pub fn mode(&self) -> CatalogMode {
        self.mode
    }

    /// The compiled entry of (type, version), for reuse by the next reload.
    pub fn entry(&self, event_type: &str, version: i32) -> Option<&Arc<CheckedEntry>> {
        self.entries.get(&(event_type.to_owned(), version))
    }

    /// Whether some event may need its `data` read to be checked: the relay reads payloads,
    /// which it otherwise never needs, only then.
    pub fn reads_payloads(&self) -> bool {
        self.mode != CatalogMode::Off && self.any_schema
    }

    /// Whether checking an event of (type, version) reads its `data`.
    pub fn needs_data(&self, event_type: &str, version: i32) -> bool {
        self.mode != CatalogMode::Off
            && self
                .entries
                .get(&(event_type.to_owned(), version))
                .is_some_and(|e| e.schema.is_some())
    }

    /// The verdict on an event of (type, version) whose `data` is `data` (`None`: not read,
    /// when [`Checks::needs_data`] said so).
    pub fn check(&self, event_type: &str, version: i32, data: Option<&Value>) -> Verdict {
        if self.mode == CatalogMode::Off {
            return Verdict::Pass { deprecated: false };
        }
        let Some(entry) = self.entries.get(&(event_type.to_owned(), version)) else {
            if self.mode == CatalogMode::Strict && !is_kurir_type(event_type) {
                return Verdict::Refused(unknown(event_type, version));
            }
            return Verdict::Pass { deprecated: false };
        };
        let failures = match (&entry.schema, data) {
            (None, _) => Vec::new(),
            (Some(Ok(compiled)), Some(data)) => compiled.failures(data),
            (Some(Ok(_)), None) => vec![failure("", "the event's data was not read")],
            (Some(Err(broken)), _) => vec![failure(
                "",
                &format!(
                    "the catalog's schema of {event_type} v{version} does not compile: {broken}"
                ),
            )],
        };
        if failures.is_empty() {
            return Verdict::Pass {
                deprecated: entry.deprecated,
            };
        }
        Verdict::Refused(Refusal {
            reason: schema::reason(&failures),
            masked_reason: schema::masked_reason(&failures),
            failures,
            kind: RefusalKind::Schema,
        })
    }

    /// [`Checks::check`] on a payload as stored (text); a payload that is not JSON fails.
    pub fn check_text(&self, event_type: &str, version: i32, payload: Option<&str>) -> Verdict {
        if !self.needs_data(event_type, version) {
            return self.check(event_type, version, None);
        }
        match payload.map(serde_json::from_str::<Value>) {
            Some(Ok(data)) => self.check(event_type, version, Some(&data)),
            Some(Err(e)) => {
                let f = failure("", &format!("data is not JSON kurir can read: {e}"));
                Verdict::Refused(Refusal {
                    reason: schema::reason(std::slice::from_ref(&f)),
                    masked_reason: schema::masked_reason(std::slice::from_ref(&f)),
                    failures: vec![f],
                    kind: RefusalKind::Schema,
                })
            }
            None => self.check(event_type, version, None),
        }
    }
}

fn failure(pointer: &str, message: &str) -> Failure {
    Failure {
        pointer: pointer.to_owned(),
        rule: "schema".to_owned(),
        message: message.to_owned(),
        masked: message.to_owned(),
    }
}

fn unknown(event_type: &str, version: i32) -> Refusal {
    let reason = format!(
        "catalog: {event_type} v{version} is not in the event catalog \
         (KURIR_EVENT_CATALOG=strict refuses unknown types and versions)"
    );
    Refusal {
        masked_reason: reason.clone(),
        reason,
        failures: Vec::new(),
        kind: RefusalKind::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checks(mode: CatalogMode, deprecated: bool) -> Checks {
        let compiled = schema::compile(&json!({"properties": {"total": {"type": "integer"}}}));
        let entry = CheckedEntry {
            schema_text: None,
            schema: Some(compiled.map(Arc::new)),
            deprecated,
        };
        let mut entries = HashMap::new();
        entries.insert(("order.paid".to_owned(), 1), Arc::new(entry));
        Checks::new(mode, entries)
    }

    #[test]
    fn open_checks_known_versions_and_passes_the_rest() {
        let open = checks(CatalogMode::Open, false);
        let bad = open.check_text("order.paid", 1, Some(r#"{"total":"250000"}"#));
        let Verdict::Refused(r) = bad else {
            panic!("refused")
        };
        assert_eq!(
            r.reason,
            r#"schema: /total: "250000" is not of type "integer""#
        );
        assert!(!r.masked_reason.contains("250000"));
        assert!(matches!(
            open.check_text("order.paid", 2, None),
            Verdict::Pass { deprecated: false }
        ));
        assert!(matches!(
            open.check_text("order.paid", 1, Some(r#"{"total":1}"#)),
            Verdict::Pass { deprecated: false }
        ));
        assert!(open.reads_payloads());
    }

    #[test]
    fn strict_refuses_what_the_catalog_lacks_except_kurirs_own_types() {
        let strict = checks(CatalogMode::Strict, true);
        let Verdict::Refused(r) = strict.check_text("order.paid", 2, None) else {
            panic!("refused")
        };
        assert_eq!(r.kind, RefusalKind::Unknown);
        assert!(
            r.reason.starts_with("catalog: order.paid v2"),
            "{}",
            r.reason
        );
        assert!(matches!(
            strict.check_text("kurir.test", 1, None),
            Verdict::Pass { .. }
        ));
        assert!(matches!(
            strict.check_text("order.paid", 1, Some(r#"{"total":1}"#)),
            Verdict::Pass { deprecated: true }
        ));
        assert!(!Checks::off().reads_payloads());
        assert!(matches!(
            Checks::off().check_text("x", 1, None),
            Verdict::Pass { .. }
        ));
    }
}
