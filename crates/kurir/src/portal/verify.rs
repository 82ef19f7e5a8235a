//! How to verify (issue 31): the headers every delivery carries, and a short verification
//! example for each scheme kurir signs with: a Standard Webhooks library, and the seed's
//! `hash_hmac` check of `X-Webhook-Signature` (with the library-free Standard Webhooks check
//! and both in Python). The examples are the README's "Verifying a delivery" snippets, read
//! from it when kurir is built: the test that runs them against a real delivery
//! (`tests/it/verify_snippets.rs`) runs what this page shows.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use kurir_core::sign::headers;

use super::error::PortalError;
use super::session::Visitor;
use super::view::Chrome;
use crate::api::state::AppState;

const README: &str = include_str!("../../../../README.md");

/// The ```lang block that follows the README line starting with `heading` (empty when the
/// README has none: a test keeps every one the page names there).
pub fn readme_block(heading: &str, lang: &str) -> &'static str {
    README
        .split_once(&format!("\n{heading}"))
        .and_then(|(_, after)| after.split_once(&format!("```{lang}\n")))
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map_or("", |(block, _)| block)
}

/// The examples the page shows: its title, what it checks, the README heading, the language.
pub const EXAMPLES: [(&str, &str, &str, &str); 5] = [
    (
        "Python, with a Standard Webhooks library",
        "webhook-signature",
        "**Python, a Standard Webhooks library**",
        "python",
    ),
    (
        "PHP, kurir's scheme with hash_hmac",
        "X-Webhook-Signature",
        "**PHP, kurir scheme**",
        "php",
    ),
    (
        "PHP, Standard Webhooks without a library",
        "webhook-signature",
        "**PHP, Standard Webhooks**",
        "php",
    ),
    (
        "Python, kurir's scheme",
        "X-Webhook-Signature",
        "**Python, kurir scheme**",
        "python",
    ),
    (
        "Python, Standard Webhooks without a library",
        "webhook-signature",
        "**Python, Standard Webhooks**",
        "python",
    ),
];

/// The headers of a delivery: name, what it holds.
const HEADERS: [(&str, &str); 7] = [
    (
        headers::WEBHOOK_ID,
        "Standard Webhooks: the event's id. The same on every retry and replay: process each id once.",
    ),
    (
        headers::WEBHOOK_TIMESTAMP_STD,
        "Standard Webhooks: when this attempt was signed, in Unix seconds.",
    ),
    (
        headers::WEBHOOK_SIGNATURE_STD,
        "Standard Webhooks: v1,<base64 HMAC-SHA256> of id.timestamp.body; during a secret's rotation one per valid secret, space-separated (accept any).",
    ),
    (
        "X-Webhook-Event",
        "kurir's scheme: the event's type, e.g. order.paid.",
    ),
    ("X-Webhook-Event-Id", "kurir's scheme: the event's id."),
    (
        "X-Webhook-Timestamp",
        "kurir's scheme: when this attempt was signed, RFC 3339 UTC to the second (the same instant as webhook-timestamp).",
    ),
    (
        "X-Webhook-Signature",
        "kurir's scheme: lowercase hex HMAC-SHA256 of timestamp.body, keyed with the whole secret string (whsec_ included), current secret only.",
    ),
];

#[derive(Template)]
#[template(path = "portal/verify.html")]
struct VerifyPage {
    chrome: Chrome,
    headers: &'static [(&'static str, &'static str)],
    examples: Vec<(&'static str, &'static str, &'static str, &'static str)>,
}

async fn page(State(state): State<AppState>, visitor: Visitor) -> Result<Response, PortalError> {
    super::render(&VerifyPage {
        chrome: Chrome::new(&state, &visitor, "verify", "Verify").await?,
        headers: &HEADERS,
        examples: EXAMPLES
            .iter()
            .map(|(title, header, heading, lang)| {
                (*title, *header, readme_block(heading, lang), *lang)
            })
            .collect(),
    })
}

/// The verification page's routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/portal/verify", get(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_is_a_readme_block() {
        for (title, _, heading, lang) in EXAMPLES {
            let block = readme_block(heading, lang);
            assert!(block.lines().count() >= 3, "{title}: {heading} ```{lang}");
        }
        assert!(readme_block("**PHP, kurir scheme**", "php").contains("hash_hmac('sha256'"));
    }
}
