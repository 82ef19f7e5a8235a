//! The catalog file `kurir event-types apply` takes: the sender's catalog, checked into its
//! repository and applied in its deploy. YAML (or JSON, by a `.json` name):
//!
//! ```yaml
//! event_types:
//!   - event_type: order.paid
//!     version: 1
//!     description: An order was paid in full.
//!     schema:
//!       type: object
//!       required: [order_id, total]
//!       properties:
//!         order_id: {type: string}
//!         total: {type: integer, minimum: 0}
//!     examples:
//!       - {order_id: "98765", total: 250000}
//!     deprecated: false
//! ```
//!
//! Every entry is checked as the API checks it before anything is sent, so a bad file changes
//! nothing; errors name the entry and the field.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use super::{CatalogError, EntrySpec, EventTypeRef};

/// A catalog file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    /// Its entries, in any order.
    pub event_types: Vec<FileEntry>,
}

/// One entry of a catalog file: its key and what `PUT` would write.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// The event type.
    pub event_type: String,
    /// The payload version.
    pub version: i32,
    /// See [`EntrySpec::description`].
    #[serde(default)]
    pub description: String,
    /// See [`EntrySpec::schema`].
    #[serde(default)]
    pub schema: Option<Value>,
    /// See [`EntrySpec::examples`].
    #[serde(default)]
    pub examples: Vec<Value>,
    /// See [`EntrySpec::deprecated`].
    #[serde(default)]
    pub deprecated: bool,
    /// See [`EntrySpec::successor`].
    #[serde(default)]
    pub successor: Option<EventTypeRef>,
}

impl FileEntry {
    /// Its key.
    pub fn key(&self) -> EventTypeRef {
        EventTypeRef {
            event_type: self.event_type.clone(),
            version: self.version,
        }
    }

    /// What `PUT` writes for it.
    pub fn spec(&self) -> EntrySpec {
        EntrySpec {
            description: self.description.clone(),
            schema: self.schema.clone(),
            examples: self.examples.clone(),
            deprecated: self.deprecated,
            successor: self.successor.clone(),
        }
    }
}

/// Reads a catalog file's text: JSON when `name` ends in `.json`, YAML otherwise. Each entry is
/// checked ([`EntrySpec::check`]) and no key may appear twice.
pub fn parse(name: &str, text: &str) -> Result<Vec<FileEntry>, CatalogError> {
    let file: CatalogFile = if name.ends_with(".json") {
        serde_json::from_str(text).map_err(|e| CatalogError::new(name, e.to_string()))?
    } else {
        serde_norway::from_str(text).map_err(|e| CatalogError::new(name, e.to_string()))?
    };
    let mut seen = HashSet::new();
    for (i, entry) in file.event_types.iter().enumerate() {
        let key = entry.key();
        let at = |field: &str| format!("event_types[{i}] ({key}).{field}");
        entry
            .spec()
            .check(&key)
            .map_err(|e| CatalogError::new(at(&e.field), e.message))?;
        if !seen.insert(key.clone()) {
            return Err(CatalogError::new(
                format!("event_types[{i}]"),
                format!("{key} appears more than once"),
            ));
        }
    }
    Ok(file.event_types)
}

/// The order to write `entries` in: an entry after the successor it names, when the successor
/// is in the file too (the API refuses a successor not yet in the catalog).
pub fn apply_order(entries: &[FileEntry]) -> Vec<usize> {
    let mut order = Vec::with_capacity(entries.len());
    let mut placed: HashSet<EventTypeRef> = HashSet::new();
    let in_file: HashSet<EventTypeRef> = entries.iter().map(FileEntry::key).collect();
    while order.len() < entries.len() {
        let before = order.len();
        for (i, e) in entries.iter().enumerate() {
            let ready = e
                .successor
                .as_ref()
                .is_none_or(|s| !in_file.contains(s) || placed.contains(s));
            if !order.contains(&i) && ready {
                order.push(i);
                placed.insert(e.key());
            }
        }
        if order.len() == before {
            // A cycle of successors: the rest in file order (the API names the one it refuses).
            let rest: Vec<usize> = (0..entries.len()).filter(|i| !order.contains(i)).collect();
            order.extend(rest);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
event_types:
  - event_type: order.paid
    version: 1
    description: An order was paid.
    deprecated: true
    successor: {event_type: order.paid, version: 2}
    examples:
      - {order_id: "1", total: 5}
  - event_type: order.paid
    version: 2
    schema:
      type: object
      required: [total]
      properties:
        total: {type: integer}
    examples:
      - {total: 5}
"#;

    #[test]
    fn a_yaml_file_is_read_and_applied_successors_first() {
        let entries = parse("catalog.yaml", FILE).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].schema.as_ref().unwrap()["required"][0], "total");
        assert_eq!(apply_order(&entries), vec![1, 0]);
    }

    #[test]
    fn a_bad_entry_is_named_by_position_key_and_field() {
        let bad = FILE.replace("- {total: 5}", "- {total: \"5\"}");
        let e = parse("catalog.yaml", &bad).unwrap_err();
        assert_eq!(e.field, "event_types[1] (order.paid v2).examples[0]");
        assert!(e.message.contains("/total"), "{e}");
        let unknown = FILE.replace("description: An", "descripton: An");
        let e = parse("catalog.yaml", &unknown).unwrap_err();
        assert!(e.message.contains("descripton"), "{e}");
        let twice = format!(
            "{FILE}  - event_type: order.paid\n    version: 2\n    examples: [{{total: 1}}]\n"
        );
        assert!(parse("c.yaml", &twice)
            .unwrap_err()
            .message
            .contains("more than once"));
    }
}
