//! One JSON Schema (draft 2020-12) compiled, and what checking `data` against it found.
//!
//! Schemas are compiled offline: a `$ref` to anything outside the schema itself is refused at
//! compile time rather than fetched, so a catalog entry can never make kurir reach out to the
//! network. `format` is asserted (`date-time`, `email`, `uuid`, …), not only annotated: a
//! contract that says `date-time` means it.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The `$schema` kurir checks against; a schema naming another draft is refused.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// At most this many failures are reported for one value (the rest are counted).
pub const MAX_FAILURES: usize = 20;

/// Longest message kept for one failure, in characters: a failing value is quoted in its
/// message, and a long string must not make the refusal reason huge.
const MAX_MESSAGE_CHARS: usize = 200;

/// A schema compiled once, checked against many values. Cheap to share (`Send + Sync`).
#[derive(Debug)]
pub struct CompiledSchema(jsonschema::Validator);

/// One rule a value broke.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Failure {
    /// JSON pointer (RFC 6901) of the failing value within `data`; `""` for `data` itself.
    pub pointer: String,
    /// The schema keyword that failed, e.g. `type`, `required`, `maximum`.
    pub rule: String,
    /// What is wrong, quoting the failing value (at most 200 characters).
    pub message: String,
    /// The same without the value, for logs (which never carry payload content).
    #[serde(skip)]
    pub masked: String,
}

impl Failure {
    /// `/total: "250000" is not of type "integer"`; the root is written `(root)`.
    pub fn describe(&self) -> String {
        format!("{}: {}", shown_pointer(&self.pointer), self.message)
    }

    /// [`Failure::describe`] without the failing value.
    pub fn describe_masked(&self) -> String {
        format!("{}: {}", shown_pointer(&self.pointer), self.masked)
    }
}

fn shown_pointer(pointer: &str) -> &str {
    if pointer.is_empty() {
        "(root)"
    } else {
        pointer
    }
}

/// Compiles `schema` as draft 2020-12, checking it against the draft's meta-schema first. The
/// error names where in the schema the problem is.
pub fn compile(schema: &Value) -> Result<CompiledSchema, String> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err("must be a JSON object (or true/false)".into());
    }
    if let Some(declared) = schema.get("$schema") {
        let declared = declared.as_str().unwrap_or_default().trim_end_matches('#');
        if declared != DRAFT_2020_12 {
            return Err(format!(
                "$schema is {}: kurir checks JSON Schema draft 2020-12 ({DRAFT_2020_12}); \
                 remove $schema or name that draft",
                schema["$schema"]
            ));
        }
    }
    jsonschema::draft202012::options()
        .offline()
        .should_validate_formats(true)
        .build(schema)
        .map(CompiledSchema)
        .map_err(|e| {
            let at = e.instance_path().as_str();
            let message = truncated(&e.to_string());
            if at.is_empty() {
                message
            } else {
                format!("{at}: {message}")
            }
        })
}

impl CompiledSchema {
    /// Whether `data` passes (the fast path: no error is built).
    pub fn passes(&self, data: &Value) -> bool {
        self.0.is_valid(data)
    }

    /// Every rule `data` breaks (at most [`MAX_FAILURES`]), in the order the schema checks them;
    /// empty when it passes.
    pub fn failures(&self, data: &Value) -> Vec<Failure> {
        if self.passes(data) {
            return Vec::new();
        }
        self.0
            .iter_errors(data)
            .take(MAX_FAILURES)
            .map(|e| Failure {
                pointer: e.instance_path().as_str().to_owned(),
                rule: e.kind().keyword().to_owned(),
                message: truncated(&e.to_string()),
                masked: truncated(&e.masked().to_string()),
            })
            .collect()
    }
}

/// The refusal reason for `failures`, as recorded on a refused outbox row and answered by the
/// API: `schema: /total: "250000" is not of type "integer"`, several joined by `; `.
pub fn reason(failures: &[Failure]) -> String {
    let parts: Vec<String> = failures.iter().map(Failure::describe).collect();
    format!("schema: {}", parts.join("; "))
}

/// [`reason`] without the failing values, for the log line.
pub fn masked_reason(failures: &[Failure]) -> String {
    let parts: Vec<String> = failures.iter().map(Failure::describe_masked).collect();
    format!("schema: {}", parts.join("; "))
}

fn truncated(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message.to_owned();
    }
    let mut cut: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_failure_names_the_pointer_the_rule_and_the_value() {
        let schema = compile(&json!({
            "type": "object",
            "properties": {"total": {"type": "integer"}},
            "required": ["total", "currency"]
        }))
        .unwrap();
        let failures = schema.failures(&json!({"total": "250000"}));
        assert_eq!(failures.len(), 2, "{failures:?}");
        let text = reason(&failures);
        assert!(
            text.contains(r#"/total: "250000" is not of type "integer""#),
            "{text}"
        );
        assert!(
            text.contains("(root): \"currency\" is a required property"),
            "{text}"
        );
        let rules: Vec<&str> = failures.iter().map(|f| f.rule.as_str()).collect();
        assert!(
            rules.contains(&"type") && rules.contains(&"required"),
            "{rules:?}"
        );
        assert!(!masked_reason(&failures).contains("250000"));
        assert!(schema
            .failures(&json!({"total": 1, "currency": "IDR"}))
            .is_empty());
    }

    #[test]
    fn invalid_schemas_and_other_drafts_and_remote_refs_are_refused_with_the_reason() {
        let bad_type = compile(&json!({"type": "integr"})).unwrap_err();
        assert!(bad_type.contains("integr"), "{bad_type}");
        let draft7 =
            compile(&json!({"$schema": "http://json-schema.org/draft-07/schema#"})).unwrap_err();
        assert!(draft7.contains("2020-12"), "{draft7}");
        let remote = compile(&json!({"$ref": "https://example.com/order.json"})).unwrap_err();
        assert!(!remote.is_empty());
        assert!(compile(&json!([1])).is_err());
        assert!(compile(&json!({"$schema": DRAFT_2020_12, "type": "object"})).is_ok());
    }

    #[test]
    fn formats_are_asserted() {
        let schema = compile(&json!({"properties": {"at": {"format": "date-time"}}})).unwrap();
        assert!(!schema.passes(&json!({"at": "yesterday"})));
        assert!(schema.passes(&json!({"at": "2026-06-11T08:15:30Z"})));
    }
}
