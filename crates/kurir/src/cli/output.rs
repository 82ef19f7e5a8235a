//! Printing for people (aligned tables, `key: value` lines) and for scripts (`--json`).

use serde_json::Value;

use crate::text::{pretty_raw, preview};

/// `println!` that ignores a closed stdout (`kurir events list | head` must not panic).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
pub(crate) use out;

/// Prints `value` as pretty JSON.
pub fn json(value: &Value) {
    out!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// A JSON value as a table cell: strings bare, null as `-`.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".to_owned(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Prints rows under `headers`, each column as wide as its widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out!("{}", text.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Prints a JSON array of objects as a table: one row per object, one column per `(header, key)`.
pub fn objects(list: &Value, columns: &[(&str, &str)]) {
    let rows: Vec<Vec<String>> = list
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|object| columns.iter().map(|(_, key)| cell(&object[*key])).collect())
        .collect();
    let headers: Vec<&str> = columns.iter().map(|(header, _)| *header).collect();
    table(&headers, &rows);
}

/// Prints `value` as JSON with `--json`, else in the command's own way (`human`).
pub fn shown(value: &Value, as_json: bool, human: fn(&Value)) {
    if as_json {
        json(value);
    } else {
        human(value);
    }
}

/// Says that the `kind` named `id` was deleted.
pub fn deleted(kind: &str, id: &str, as_json: bool) {
    if as_json {
        json(&serde_json::json!({ "deleted": id }));
    } else {
        out!("deleted {kind} {id}");
    }
}

/// Prints `key: value` lines for the named fields of `object`.
pub fn fields(object: &Value, names: &[&str]) {
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0) + 1;
    for name in names {
        out!("{:<width$} {}", format!("{name}:"), cell(&object[*name]));
    }
}

/// Tells how to get the next page, when there is one.
pub fn next_page(page: &Value) {
    if let Some(cursor) = page["next_cursor"].as_str() {
        out!("(more: repeat with --cursor {cursor})");
    }
}

/// A JSON string cell cut to `max` characters (`-` when absent).
pub fn short(value: &Value, max: usize) -> String {
    match value.as_str() {
        Some(s) if !s.is_empty() => preview(s, max),
        _ => cell(value),
    }
}

/// The circuit of a delivery or an endpoint in a few words: `closed`, `open (probe at …)`,
/// `half_open (probing)`.
pub fn circuit(state: &Value, next_probe_at: &Value) -> String {
    match (state.as_str(), next_probe_at.as_str()) {
        (Some(s), Some(at)) => format!("{s} (probe at {at})"),
        (Some("half_open"), None) => "half_open (probing)".into(),
        (Some(s), None) => s.into(),
        _ => "-".into(),
    }
}

/// When a delivery is next attempted: its scheduled time, or, held by an endpoint's circuit
/// that is not closed, that circuit (its scheduled time may be long past).
pub fn next_attempt(d: &Value) -> String {
    if d["held"].as_bool() == Some(true) {
        format!(
            "held: circuit {}",
            circuit(&d["circuit_state"], &d["next_probe_at"])
        )
    } else {
        cell(&d["next_attempt_at"])
    }
}

/// Prints an answer of the API as it came, indented by [`pretty_raw`]: what `--json` shows
/// where the answer holds an event's payload, whose keys and numbers stay as written.
pub fn json_text(text: &str) {
    out!("{}", pretty_raw(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_cell_of_nothing_is_a_dash() {
        assert_eq!(short(&Value::Null, 5), "-");
        assert_eq!(
            short(&Value::String("line one\nline two".into()), 8),
            "line on…"
        );
    }
}
