//! The catalog for subscribers: an OpenAPI 3.1 document with one entry under `webhooks` per
//! (type, version) (`GET /v1/event-types/openapi.json`).
//!
//! Each webhook is what the subscriber's endpoint receives: a `POST` whose body is kurir's
//! envelope (`event_id`, `event_type`, `version`, `occurred_at`, `delivery_attempt`, `data`)
//! with `data` held to the entry's schema, the entry's examples as whole envelopes, and the
//! headers kurir sends on every attempt (both signature schemes). Each entry's schema of `data`
//! is a component of its own (`components/schemas/<type>.v<version>.data`); its local `$ref`s
//! (`#/$defs/…`) are rewritten to point inside that component, so they resolve within the
//! document as they did within the schema.

use serde_json::{json, Map, Value};

use super::EventTypeEntry;

/// The name of the envelope's component and of the webhook: `order.paid.v1`.
pub fn webhook_name(event_type: &str, version: i32) -> String {
    format!("{event_type}.v{version}")
}

/// The document for `entries` (in the order given). `title` names the sender.
pub fn document(entries: &[EventTypeEntry], title: &str) -> Value {
    let mut webhooks = Map::new();
    let mut schemas = Map::new();
    for entry in entries {
        let name = webhook_name(&entry.event_type, entry.version);
        let data_name = format!("{name}.data");
        let data_schema = match &entry.spec.schema {
            Some(schema) => rebased(schema, &format!("#/components/schemas/{data_name}")),
            None => json!({"type": "object"}),
        };
        schemas.insert(data_name.clone(), data_schema);
        schemas.insert(name.clone(), envelope_schema(entry, &data_name));
        webhooks.insert(name.clone(), json!({"post": operation(entry, &name)}));
    }
    let version = entries
        .iter()
        .map(|e| e.updated_at)
        .max()
        .map_or_else(|| "0".to_owned(), |t| t.format("%Y%m%d.%H%M%S").to_string());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": "The events this sender delivers, one webhook per event type and \
                version. Every delivery is a signed POST of the envelope below; only a 2xx \
                answer counts as received, anything else is retried with backoff (the same \
                event_id each time: deduplicate on it). Verify `webhook-signature` \
                (Standard Webhooks) or `x-webhook-signature` before trusting a body."
        },
        "webhooks": webhooks,
        "components": {
            "schemas": schemas,
            "parameters": header_parameters(),
        }
    })
}

fn operation(entry: &EventTypeEntry, name: &str) -> Value {
    let mut description = entry.spec.description.clone();
    if let Some(s) = &entry.spec.successor {
        description.push_str(&format!(
            "\n\nDeprecated: {} v{} replaces this version.",
            s.event_type, s.version
        ));
    }
    let examples: Map<String, Value> = entry
        .spec
        .examples
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let value = json!({
                "event_id": "0190f3c2-7b1e-7cc4-9a55-5d3f1c2e8a10",
                "event_type": entry.event_type,
                "version": entry.version,
                "occurred_at": "2026-06-11T08:15:30Z",
                "delivery_attempt": 1,
                "data": data,
            });
            (format!("example{}", i + 1), json!({"value": value}))
        })
        .collect();
    let parameters: Vec<Value> = HEADERS
        .iter()
        .map(|(h, _, _)| json!({"$ref": format!("#/components/parameters/{h}")}))
        .collect();
    let mut op = json!({
        "operationId": name,
        "summary": format!("{} v{}", entry.event_type, entry.version),
        "description": description,
        "deprecated": entry.spec.deprecated,
        "tags": [entry.event_type],
        "parameters": parameters,
        "requestBody": {
            "required": true,
            "content": {"application/json": {
                "schema": {"$ref": format!("#/components/schemas/{name}")},
                "examples": examples,
            }}
        },
        "responses": {
            "2XX": {"description": "Received: kurir records the delivery as sent."},
            "410": {"description": "Gone: kurir disables the endpoint and sends it nothing more."},
            "default": {"description": "Not received: kurir retries with backoff (429 and 503 may say when with Retry-After)."}
        }
    });
    if let Some(s) = &entry.spec.successor {
        op["x-kurir-successor"] = json!({"event_type": s.event_type, "version": s.version});
    }
    op
}

fn envelope_schema(entry: &EventTypeEntry, data_name: &str) -> Value {
    json!({
        "type": "object",
        "description": entry.spec.description,
        "required": ["event_id", "event_type", "version", "occurred_at", "delivery_attempt", "data"],
        "properties": {
            "event_id": {"type": "string", "description": "The event's id, the same on every attempt: deduplicate on it."},
            "event_type": {"type": "string", "const": entry.event_type},
            "version": {"type": "integer", "const": entry.version},
            "occurred_at": {"type": "string", "format": "date-time"},
            "delivery_attempt": {"type": "integer", "minimum": 1, "description": "1 on the first attempt, counting up on each retry."},
            "data": {"$ref": format!("#/components/schemas/{data_name}")}
        }
    })
}

/// The headers of every attempt: name, description, example.
const HEADERS: [(&str, &str, &str); 8] = [
    ("User-Agent", "kurir/<version>", "kurir/0.1.0"),
    ("x-webhook-event", "The event type.", "order.paid"),
    ("x-webhook-event-id", "The event id (as event_id in the body).", "0190f3c2-7b1e-7cc4-9a55-5d3f1c2e8a10"),
    ("x-webhook-timestamp", "RFC 3339 UTC time of this attempt, signed verbatim.", "2026-06-11T08:15:31Z"),
    ("x-webhook-signature", "Lowercase hex HMAC-SHA256, keyed with the endpoint's secret (UTF-8), of x-webhook-timestamp + \".\" + the raw body.", "5d41402abc4b2a76b9719d911017c592"),
    ("webhook-id", "Standard Webhooks: the event id.", "0190f3c2-7b1e-7cc4-9a55-5d3f1c2e8a10"),
    ("webhook-timestamp", "Standard Webhooks: unix seconds of this attempt.", "1781165491"),
    ("webhook-signature", "Standard Webhooks: space-separated v1,<base64 HMAC-SHA256> signatures of webhook-id + \".\" + webhook-timestamp + \".\" + the raw body, one per valid secret during a rotation.", "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="),
];

fn header_parameters() -> Value {
    let params: Map<String, Value> = HEADERS
        .iter()
        .map(|(name, description, example)| {
            let p = json!({
                "name": name, "in": "header", "required": true,
                "description": description, "schema": {"type": "string"}, "example": example,
            });
            ((*name).to_owned(), p)
        })
        .collect();
    Value::Object(params)
}

/// `schema` placed at `base` (a pointer into the document): each local `$ref` (`#…`) made to
/// point inside it. A schema with its own `$id` is a resource of its own, whose references
/// resolve against that id, and is left as it is; so are the subtrees that hold data rather
/// than schemas (`const`, `enum`, `default`, `examples`).
fn rebased(schema: &Value, base: &str) -> Value {
    if schema.get("$id").is_some() {
        return schema.clone();
    }
    let mut out = schema.clone();
    rebase_refs(&mut out, base);
    out
}

fn rebase_refs(value: &mut Value, base: &str) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match (key.as_str(), &*v) {
                    ("$ref", Value::String(r)) if r.starts_with('#') => {
                        let rest = r.trim_start_matches('#').to_owned();
                        *v = Value::String(format!("{base}{rest}"));
                    }
                    ("const" | "enum" | "default" | "examples", _) => {}
                    _ => rebase_refs(v, base),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rebase_refs(v, base)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_refs_point_inside_the_component_and_data_is_left_alone() {
        let schema = json!({
            "$defs": {"money": {"type": "integer"}},
            "properties": {
                "total": {"$ref": "#/$defs/money"},
                "self": {"$ref": "#"},
                "kind": {"const": {"$ref": "#/not/a/ref"}}
            }
        });
        let out = rebased(&schema, "#/components/schemas/x.v1.data");
        assert_eq!(
            out["properties"]["total"]["$ref"],
            "#/components/schemas/x.v1.data/$defs/money"
        );
        assert_eq!(
            out["properties"]["self"]["$ref"],
            "#/components/schemas/x.v1.data"
        );
        assert_eq!(out["properties"]["kind"]["const"]["$ref"], "#/not/a/ref");
        let own = json!({"$id": "urn:x", "$ref": "#/$defs/a", "$defs": {"a": {}}});
        assert_eq!(rebased(&own, "#/c"), own);
    }
}
