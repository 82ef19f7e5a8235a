//! Text shown to people, by the CLI and the dashboard alike: a one-line preview of a body or an
//! error, and JSON indented as written.

/// The first `max` characters of `text` on one line (newlines and tabs as spaces), with `…` when
/// cut: response bodies and errors in a table cell.
pub fn preview(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() <= max {
        return flat.to_owned();
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// `text` indented two spaces a level, as `serde_json::to_string_pretty` indents, with nothing
/// else changed: keys keep their order, numbers (`1e3`, `100.50`) and strings their spelling,
/// because kurir delivers a payload byte for byte and its views must show those bytes. Only the
/// whitespace between tokens changes. Text that is not JSON comes back as it is.
pub fn pretty_raw(text: &str) -> String {
    // A parse through `Value` would sort the keys and rewrite the numbers, so it only checks.
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
                // An empty object or array stays on one line, as serde_json prints it.
                if let Some(close) = chars.next_if(|n| matches!(n, '}' | ']')) {
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn pretty_raw_indents_without_reordering_keys_or_rewriting_numbers() {
        let text = r#" {"b":1e3, "a":[100.50,-0,{}],"c":{"s":"x\"}:{,","e":[]}} "#;
        assert_eq!(
            pretty_raw(text),
            "{\n  \"b\": 1e3,\n  \"a\": [\n    100.50,\n    -0,\n    {}\n  ],\n  \"c\": {\n    \
             \"s\": \"x\\\"}:{,\",\n    \"e\": []\n  }\n}"
        );
        assert_eq!(pretty_raw("not json {"), "not json {");
        // The layout is serde_json's own for a payload it would not reorder.
        let ordered = r#"{"a":{"b":[1,2]},"c":"d"}"#;
        let value: Value = serde_json::from_str(ordered).unwrap();
        assert_eq!(
            pretty_raw(ordered),
            serde_json::to_string_pretty(&value).unwrap()
        );
    }

    #[test]
    fn previews_are_one_line_and_cut_with_an_ellipsis() {
        assert_eq!(preview("ok", 10), "ok");
        assert_eq!(preview("line one\nline two", 8), "line on…");
    }
}
