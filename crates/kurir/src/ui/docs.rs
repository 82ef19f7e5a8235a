//! `GET /docs`: a readable reference of the admin API, rendered on the server from the same
//! OpenAPI document `GET /v1/openapi.json` serves, so it cannot drift from the code. No token
//! (the document holds no data), no script, nothing fetched from elsewhere.

use askama::Template;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::Value;
use utoipa::OpenApi;

use super::error::UiError;
use crate::api::openapi::ApiDoc;
use crate::api::state::AppState;

/// One operation as the page shows it.
struct Operation {
    method: String,
    path: String,
    id: String,
    summary: String,
    description: String,
    params: Vec<(String, String, bool, String)>,
    body: String,
    responses: Vec<(String, String, String)>,
}

/// One schema: its name, description and `(field, type, required, description)`.
struct Schema {
    name: String,
    description: String,
    fields: Vec<(String, String, bool, String)>,
}

#[derive(Template)]
#[template(path = "docs.html")]
struct DocsPage {
    title: String,
    intro: String,
    tags: Vec<(String, Vec<Operation>)>,
    schemas: Vec<Schema>,
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The order of the sections: the resources an operator reaches for first, first.
const TAG_ORDER: [&str; 9] = [
    "endpoints",
    "events",
    "deliveries",
    "replays",
    "stats",
    "inbox sources",
    "inbox gateway",
    "meta",
    "health",
];

/// `text` as HTML, escaped, with its `code spans` as `<code>` (the document's descriptions are
/// Markdown-ish; nothing else of Markdown is used in them).
pub fn rich(text: &str) -> String {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    escaped
        .split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            1 => format!("<code>{part}</code>"),
            _ => part.to_owned(),
        })
        .collect()
}

/// `#/components/schemas/X` → `X`; an inline type → its type name.
fn type_of(schema: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        return r.rsplit('/').next().unwrap_or(r).to_owned();
    }
    match &schema["type"] {
        Value::Array(types) => types.iter().map(text).collect::<Vec<_>>().join(" | "),
        Value::String(t) if t == "array" => format!("array of {}", type_of(&schema["items"])),
        Value::String(t) => t.clone(),
        _ if schema["allOf"].is_array() => "object".into(),
        _ => "any".into(),
    }
}

fn operation(path: &str, method: &str, op: &Value) -> Operation {
    let params = op["parameters"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                text(&p["name"]),
                text(&p["in"]),
                p["required"].as_bool().unwrap_or(false),
                text(&p["description"]),
            )
        })
        .collect();
    let body = op["requestBody"]["content"]
        .as_object()
        .and_then(|c| c.values().next())
        .map(|media| type_of(&media["schema"]))
        .unwrap_or_default();
    let responses = op["responses"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(code, r)| {
            let schema = r["content"]
                .as_object()
                .and_then(|c| c.values().next())
                .map(|m| type_of(&m["schema"]))
                .unwrap_or_default();
            (code.clone(), text(&r["description"]), schema)
        })
        .collect();
    Operation {
        method: method.to_uppercase(),
        path: path.to_owned(),
        id: text(&op["operationId"]),
        summary: text(&op["summary"]),
        description: text(&op["description"]),
        params,
        body,
        responses,
    }
}

fn schemas(doc: &Value) -> Vec<Schema> {
    doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, s)| {
            let required: Vec<&str> = s["required"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let fields = s["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(f, p)| {
                    (
                        f.clone(),
                        type_of(p),
                        required.contains(&f.as_str()),
                        text(&p["description"]),
                    )
                })
                .collect();
            Schema {
                name: name.clone(),
                description: text(&s["description"]),
                fields,
            }
        })
        .collect()
}

fn page() -> DocsPage {
    let doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let mut tags: Vec<(String, Vec<Operation>)> = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            let tag = op["tags"][0].as_str().unwrap_or("other").to_owned();
            let i = tags.iter().position(|(t, _)| *t == tag).unwrap_or_else(|| {
                tags.push((tag, Vec::new()));
                tags.len() - 1
            });
            tags[i].1.push(operation(path, method, op));
        }
    }
    tags.sort_by_key(|(tag, _)| {
        TAG_ORDER
            .iter()
            .position(|t| t == tag)
            .unwrap_or(TAG_ORDER.len())
    });
    DocsPage {
        title: text(&doc["info"]["title"]),
        intro: text(&doc["info"]["description"]),
        tags,
        schemas: schemas(&doc),
    }
}

async fn docs() -> Result<Response, UiError> {
    super::render(&page())
}

/// `/docs`.
pub fn router() -> Router<AppState> {
    Router::new().route("/docs", get(docs))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_operation_and_schema_is_on_the_page() {
        let page = super::page();
        let operations: usize = page.tags.iter().map(|(_, ops)| ops.len()).sum();
        assert!(operations >= 28, "{operations}");
        assert!(page
            .schemas
            .iter()
            .any(|s| s.name == "EndpointView" && !s.fields.is_empty()));
        let html = askama::Template::render(&page).unwrap();
        assert!(html.contains("test_endpoint") && html.contains("/v1/replays/preview"));
        assert_eq!(page.tags[0].0, "endpoints");
        assert_eq!(super::rich("`a<b>` & c"), "<code>a&lt;b&gt;</code> &amp; c");
    }
}
