//! Small formatting helpers the page views share: times, durations, ratios, and the page chrome
//! (navigation, who is signed in, and the session's CSRF token) every signed-in page carries.

use std::borrow::Borrow;

use chrono::{DateTime, NaiveDateTime, Utc};

use super::session::Session;
use crate::access::Action;

/// What the layout needs: the section to highlight, who is signed in, whether the page may show
/// controls that change something, and the CSRF token of its forms.
#[derive(Clone, Debug)]
pub struct Chrome {
    /// The page title.
    pub title: String,
    /// `overview`, `endpoints`, `subscribers`, `events`, `catalog`, `dead-letters`, `audit` or
    /// `inbox`.
    pub section: &'static str,
    /// The session's CSRF token.
    pub csrf: String,
    /// The signed-in token's name.
    pub who: String,
    /// Its role.
    pub role: &'static str,
    /// Whether it may change anything: the pages show their controls only then (the server
    /// refuses them all the same, [`Session::check_csrf`]).
    pub can_change: bool,
}

impl Chrome {
    /// The chrome of a page in `section`.
    pub fn new(session: &Session, section: &'static str, title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            section,
            csrf: session.csrf().to_owned(),
            who: session.actor().name.clone(),
            role: session.actor().role.as_str(),
            can_change: session.may(Action::Change),
        }
    }

    /// Whether `section` is this page's.
    pub fn current(&self, section: &str) -> bool {
        self.section == section
    }

    /// The navigation: `(section, label, href)`.
    pub fn links(&self) -> [(&'static str, &'static str, &'static str); 8] {
        [
            ("overview", "Overview", "/ui/"),
            ("endpoints", "Endpoints", "/ui/endpoints"),
            ("subscribers", "Subscribers", "/ui/subscribers"),
            ("events", "Events", "/ui/events"),
            ("catalog", "Event types", "/ui/event-types"),
            ("dead-letters", "Dead letters", "/ui/dead-letters"),
            ("audit", "Replay audit", "/ui/audit"),
            ("inbox", "Inbox", "/ui/inbox"),
        ]
    }
}

/// `2026-06-11 08:15:30` (UTC).
pub fn time(at: impl Borrow<DateTime<Utc>>) -> String {
    at.borrow().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// [`time`], or `–` when absent.
pub fn opt_time(at: impl Borrow<Option<DateTime<Utc>>>) -> String {
    at.borrow().map_or_else(|| "–".to_owned(), time)
}

/// A duration in seconds, readably: `850 ms`, `12.5 s`, `4 min`, `3.2 h`, `2.1 d`.
pub fn seconds(s: f64) -> String {
    match s {
        s if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        s if s < 60.0 => format!("{s:.1} s"),
        s if s < 3600.0 => format!("{:.0} min", s / 60.0),
        s if s < 86_400.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} d", s / 86_400.0),
    }
}

/// A ratio as a percentage with one decimal, or `–` without a denominator.
pub fn percent(part: i64, whole: i64) -> String {
    if whole == 0 {
        return "–".to_owned();
    }
    format!("{:.1} %", part as f64 * 100.0 / whole as f64)
}

/// The value of an optional form field: `None` when blank.
pub fn given(field: &Option<String>) -> Option<String> {
    field
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// A time filter from a form: RFC 3339, or the `YYYY-MM-DDTHH:MM` of a `datetime-local` input,
/// read as UTC. `None` when blank.
pub fn form_time(
    field: &str,
    value: &Option<String>,
) -> Result<Option<DateTime<Utc>>, crate::api::error::ApiError> {
    let Some(text) = given(value) else {
        return Ok(None);
    };
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M").map(|n| n.and_utc()))
        .or_else(|_| NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M:%S").map(|n| n.and_utc()))
        .map(Some)
        .map_err(|_| {
            crate::api::error::ApiError::field(field, format!("'{text}' is not a date and time"))
        })
}

/// The `datetime-local` form of a time, to refill a filter form.
pub fn input_time(at: &Option<DateTime<Utc>>) -> String {
    at.map(|t| t.format("%Y-%m-%dT%H:%M").to_string())
        .unwrap_or_default()
}

/// The first `max` characters of `text`, with `…` when cut.
pub fn preview(text: &str, max: usize) -> String {
    crate::text::preview(text, max)
}

/// JSON indented, its keys and numbers as written (see [`crate::text::pretty_raw`]);
/// `text` itself when it is not JSON.
pub fn pretty_json(text: &str) -> String {
    crate::text::pretty_raw(text)
}

/// Percent-encodes a query value.
pub fn enc(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// Percent-encodes one path segment (a space as `%20`: `+` is literal in a path).
pub fn seg(value: &str) -> String {
    // `enc` writes a literal `+` as `%2B`, so every `+` it leaves stands for a space.
    enc(value).replace('+', "%20")
}

/// `url` as HTML that a browser may wrap only after a `/` (a `<wbr>` after each), escaped.
pub fn url_breaks(url: &str) -> String {
    let mut html = String::with_capacity(url.len() + 16);
    for c in url.chars() {
        match c {
            '&' => html.push_str("&amp;"),
            '<' => html.push_str("&lt;"),
            '>' => html.push_str("&gt;"),
            '"' => html.push_str("&quot;"),
            '\'' => html.push_str("&#39;"),
            '/' => html.push_str("/<wbr>"),
            c => html.push(c),
        }
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_read_and_written_back() {
        let at = form_time("since", &Some("2026-06-11T08:15".into())).unwrap();
        assert_eq!(input_time(&at), "2026-06-11T08:15");
        assert_eq!(form_time("since", &Some("  ".into())).unwrap(), None);
        assert!(form_time("since", &Some("yesterday".into())).is_err());
        assert_eq!(seconds(0.25), "250 ms");
        assert_eq!(seconds(7200.0), "2.0 h");
        assert_eq!(percent(1, 3), "33.3 %");
        assert_eq!(percent(0, 0), "–");
    }

    #[test]
    fn a_url_may_wrap_only_after_a_slash_and_is_escaped() {
        assert_eq!(
            url_breaks("https://a.example/x?a=<1>&b"),
            "https:/<wbr>/<wbr>a.example/<wbr>x?a=&lt;1&gt;&amp;b"
        );
    }
}
