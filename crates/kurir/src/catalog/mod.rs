//! The event catalog (issue 30): what each event type looks like, version by version.
//!
//! An entry is keyed by (`event_type`, `version`) and holds a description, an optional JSON
//! Schema (draft 2020-12) of the event's `data`, one or more examples, and whether the version
//! is deprecated (with the version that replaces it). This module owns the vocabulary and the
//! rules of an entry ([`EntrySpec::check`]); [`schema`] compiles and applies one schema,
//! [`check`] decides what becomes of an event ([`check::Checks`]), [`openapi`] exports the
//! catalog for subscribers, [`file`] reads the file `kurir event-types apply` takes.
//!
//! It does not store entries or cache compiled schemas: `store::catalog` does, per process.
//! Events are checked where they are written: `POST /v1/events` answers `422` and stores
//! nothing; a row written with plain SQL is refused by the relay before fan-out, recorded with
//! its reason like the SQL contract's refusals, and can be checked again (`kurir events
//! recheck`) once the schema or the producer is fixed.

pub mod check;
pub mod file;
pub mod openapi;
pub mod schema;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::endpoint::EventFilter;
pub use check::{Checks, Refusal, Verdict};
pub use schema::{CompiledSchema, Failure};

/// Most examples one entry holds.
pub const MAX_EXAMPLES: usize = 20;

/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4096;

/// How events are checked against the catalog (`KURIR_EVENT_CATALOG`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatalogMode {
    /// Nothing is checked.
    Off,
    /// An event whose (type, version) has a schema is checked; others pass.
    #[default]
    Open,
    /// As `open`, and a (type, version) the catalog does not have is refused.
    Strict,
}

impl CatalogMode {
    /// `off`, `open` or `strict`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Some(Self::Off),
            "open" => Some(Self::Open),
            "strict" => Some(Self::Strict),
            _ => None,
        }
    }

    /// As written in the setting.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Open => "open",
            Self::Strict => "strict",
        }
    }
}

/// One (event type, version): an entry's key, and how a successor is named.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventTypeRef {
    /// The event type, e.g. `order.paid`.
    pub event_type: String,
    /// The payload version, 1 or more.
    pub version: i32,
}

impl std::fmt::Display for EventTypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} v{}", self.event_type, self.version)
    }
}

impl EventTypeRef {
    /// Checks the type's format and the version's range.
    pub fn check(&self) -> Result<(), CatalogError> {
        kurir_core::event::EventType::parse(&self.event_type)
            .map_err(|e| CatalogError::new("event_type", e.to_string()))?;
        if self.version < 1 {
            return Err(CatalogError::new("version", "must be 1 or more"));
        }
        Ok(())
    }
}

/// What is written for one (type, version): the body of `PUT
/// /v1/event-types/{type}/versions/{version}` and one entry of a catalog file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// What the event means and when it is sent.
    #[serde(default)]
    pub description: String,
    /// JSON Schema (draft 2020-12) of the event's `data`; absent: any object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    /// 1 to 20 example `data` objects; each must pass the schema.
    #[serde(default)]
    #[schema(min_items = 1, max_items = 20, value_type = Vec<Object>)]
    pub examples: Vec<Value>,
    /// Still delivered, but producers should move to the successor; each such event is counted
    /// (`kurir_deprecated_events_total`).
    #[serde(default)]
    pub deprecated: bool,
    /// The version that replaces this one (only on a deprecated entry); it must be in the
    /// catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<EventTypeRef>,
}

/// Why an entry, or a catalog file, is refused: the field at fault and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CatalogError {
    /// The field, e.g. `schema`, `examples[1]`, `successor`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl CatalogError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl EntrySpec {
    /// Checks the entry for `key`: a description within its length, a schema that compiles, 1
    /// to [`MAX_EXAMPLES`] examples that are objects and pass the schema, and a successor only
    /// on a deprecated entry, naming another (type, version). Whether the successor exists is
    /// the store's to say. Returns the compiled schema.
    pub fn check(&self, key: &EventTypeRef) -> Result<Option<CompiledSchema>, CatalogError> {
        key.check()?;
        if self.description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(CatalogError::new(
                "description",
                format!("is longer than {MAX_DESCRIPTION_CHARS} characters"),
            ));
        }
        let compiled = self
            .schema
            .as_ref()
            .map(|s| schema::compile(s).map_err(|m| CatalogError::new("schema", m)))
            .transpose()?;
        self.check_examples(compiled.as_ref())?;
        if let Some(successor) = &self.successor {
            if !self.deprecated {
                return Err(CatalogError::new(
                    "successor",
                    "only a deprecated version names a successor (set deprecated: true)",
                ));
            }
            successor
                .check()
                .map_err(|e| CatalogError::new(format!("successor.{}", e.field), e.message))?;
            if successor == key {
                return Err(CatalogError::new("successor", "names the entry itself"));
            }
        }
        Ok(compiled)
    }

    fn check_examples(&self, compiled: Option<&CompiledSchema>) -> Result<(), CatalogError> {
        if self.examples.is_empty() || self.examples.len() > MAX_EXAMPLES {
            return Err(CatalogError::new(
                "examples",
                format!(
                    "must hold 1 to {MAX_EXAMPLES} example data objects, not {}",
                    self.examples.len()
                ),
            ));
        }
        for (i, example) in self.examples.iter().enumerate() {
            let field = || format!("examples[{i}]");
            if !example.is_object() {
                return Err(CatalogError::new(
                    field(),
                    "must be a JSON object (an event's data always is)",
                ));
            }
            let failures = compiled.map(|c| c.failures(example)).unwrap_or_default();
            if !failures.is_empty() {
                return Err(CatalogError::new(
                    field(),
                    format!("fails the entry's own {}", schema::reason(&failures)),
                ));
            }
        }
        Ok(())
    }
}

/// A catalog entry as stored.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct EventTypeEntry {
    /// The event type.
    pub event_type: String,
    /// The payload version.
    pub version: i32,
    /// The entry as written.
    #[serde(flatten)]
    pub spec: EntrySpec,
    /// When it was first written.
    pub created_at: DateTime<Utc>,
    /// When its content last changed (a write of the same content changes nothing).
    pub updated_at: DateTime<Utc>,
}

impl EventTypeEntry {
    /// Its key.
    pub fn key(&self) -> EventTypeRef {
        EventTypeRef {
            event_type: self.event_type.clone(),
            version: self.version,
        }
    }
}

/// The patterns of an endpoint's filter that match no event type of `catalog_types`: each
/// such pattern subscribes to nothing the catalog documents (a typo, or a type not yet
/// catalogued). `*` and an empty filter match everything and are never reported.
pub fn unmatched_patterns(filter: &EventFilter, catalog_types: &[String]) -> Vec<String> {
    filter
        .patterns()
        .iter()
        .filter(|p| p.as_str() != "*")
        .filter(|p| {
            let one = EventFilter::parse(vec![(*p).clone()]).unwrap_or_default();
            !catalog_types.iter().any(|t| one.matches(t))
        })
        .cloned()
        .collect()
}

/// Whether kurir itself owns the type (`kurir.test`, kurir's operational events): never
/// refused for being absent from the catalog.
pub fn is_kurir_type(event_type: &str) -> bool {
    event_type.starts_with("kurir.")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key() -> EventTypeRef {
        EventTypeRef {
            event_type: "order.paid".into(),
            version: 1,
        }
    }

    fn spec() -> EntrySpec {
        EntrySpec {
            description: "An order was paid".into(),
            schema: Some(json!({"type": "object", "properties": {"total": {"type": "integer"}}})),
            examples: vec![json!({"total": 5})],
            ..Default::default()
        }
    }

    #[test]
    fn an_entry_is_refused_naming_the_field_at_fault() {
        assert!(spec().check(&key()).unwrap().is_some());
        let field = |s: EntrySpec| s.check(&key()).unwrap_err().field;
        let no_examples = EntrySpec {
            examples: vec![],
            ..spec()
        };
        assert_eq!(field(no_examples), "examples");
        let failing = EntrySpec {
            examples: vec![json!({"total": 5}), json!({"total": "5"})],
            ..spec()
        };
        let e = failing.check(&key()).unwrap_err();
        assert_eq!(e.field, "examples[1]");
        assert!(e.message.contains("/total"), "{e}");
        let bad_schema = EntrySpec {
            schema: Some(json!({"type": 5})),
            ..spec()
        };
        assert_eq!(field(bad_schema), "schema");
        let not_deprecated = EntrySpec {
            successor: Some(EventTypeRef {
                event_type: "order.paid".into(),
                version: 2,
            }),
            ..spec()
        };
        assert_eq!(field(not_deprecated), "successor");
        let itself = EntrySpec {
            deprecated: true,
            successor: Some(key()),
            ..spec()
        };
        assert_eq!(field(itself), "successor");
        let bad_key = EventTypeRef {
            event_type: "Order Paid".into(),
            version: 1,
        };
        assert_eq!(spec().check(&bad_key).unwrap_err().field, "event_type");
    }

    #[test]
    fn filter_patterns_matching_no_catalogued_type_are_reported() {
        let types = vec!["order.paid".to_owned(), "invoice.sent".to_owned()];
        let filter = EventFilter::parse(
            ["order.*", "order.payd", "refund.*", "*", "invoice.sent"]
                .map(String::from)
                .to_vec(),
        )
        .unwrap();
        assert_eq!(
            unmatched_patterns(&filter, &types),
            ["order.payd", "refund.*"]
        );
    }
}
