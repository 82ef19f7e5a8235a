//! `kurir subscribers token create|list|revoke SUBSCRIBER …`: a subscriber's own tokens (issue
//! 29) through `/v1/subscribers/{id}/tokens`. A subscriber token reaches only that subscriber's
//! endpoints, events, deliveries and replays; the operator hands it to the subscriber (or to the
//! portal that serves it). Its secret is answered once, by `create`, and never again.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{insert_given, Client};
use super::output::{self, out};

/// Subscriber token commands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token confined to the subscriber; prints it once (kurir keeps only its hash).
    #[command(
        after_help = "The token is printed once and cannot be shown again: hand it to the \
                      subscriber, who sends it as `Authorization: Bearer …` to /v1. It sees and \
                      changes only that subscriber's endpoints, events, deliveries and replays. \
                      Lost: revoke it and create another."
    )]
    Create(CreateArgs),
    /// List the subscriber's tokens, newest first, revoked and expired ones too (never their
    /// secrets).
    List(ListArgs),
    /// Revoke one of the subscriber's tokens: every kurir process sharing the database refuses
    /// it from now on.
    Revoke {
        /// Subscriber id.
        subscriber: String,
        /// Token id (`tok_…`, from `kurir subscribers token list`).
        token_id: String,
    },
}

/// Arguments of `subscribers token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Subscriber id.
    pub subscriber: String,
    /// Who holds it (`portal`, `acme-ci`), unique among every token; the audit records it.
    /// Default: the token's id.
    #[arg(long)]
    pub name: Option<String>,
    /// How long it works, from now: a duration such as 12h, 30d or 1y. Never expires when absent.
    #[arg(long, value_name = "DURATION", value_parser = parse_expires_in)]
    pub expires_in: Option<String>,
}

/// Arguments of `subscribers token list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Subscriber id.
    pub subscriber: String,
    /// Rows per page (1 to 200).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// Parses `--expires-in`: a duration from now (`12h`, `90d`), as the RFC 3339 time it ends.
fn parse_expires_in(s: &str) -> Result<String, String> {
    let ahead = humantime::parse_duration(s)
        .map_err(|_| format!("'{s}' is not a duration such as 12h, 30d or 1y"))?;
    if ahead.is_zero() {
        return Err("must be longer than 0s: the token would never work".into());
    }
    let ahead = chrono::Duration::from_std(ahead).map_err(|e| e.to_string())?;
    chrono::Utc::now()
        .checked_add_signed(ahead)
        .map(|t| t.to_rfc3339())
        .ok_or_else(|| format!("'{s}' is too far in the future"))
}

/// Runs a subscriber token command.
pub async fn run(client: &Client, command: TokenCommand, as_json: bool) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create(c) => {
            let mut body = Map::new();
            insert_given(&mut body, "name", c.name.map(Value::from));
            insert_given(&mut body, "expires_at", c.expires_in.map(Value::from));
            let url = client.url_of(&["v1", "subscribers", &c.subscriber, "tokens"])?;
            let body = Value::Object(body);
            let (_, created) = client.send(Method::POST, url, Some(&body), &[]).await?;
            output::shown(&created, as_json, show_created);
        }
        TokenCommand::List(l) => {
            let url = client.url_of(&["v1", "subscribers", &l.subscriber, "tokens"])?;
            let page = client
                .get_url_query(
                    url,
                    &[
                        ("limit", l.limit.map(|n| n.to_string())),
                        ("cursor", l.cursor),
                    ],
                )
                .await?;
            output::shown(&page, as_json, list_table);
        }
        TokenCommand::Revoke {
            subscriber,
            token_id,
        } => {
            let url = client.url_of(&["v1", "subscribers", &subscriber, "tokens", &token_id])?;
            client.send(Method::DELETE, url, None, &[]).await?;
            if as_json {
                output::json(&json!({ "revoked": token_id, "subscriber_id": subscriber }));
            } else {
                out!("revoked token {token_id} of subscriber {subscriber}: it no longer works anywhere");
            }
        }
    }
    Ok(())
}

fn show_created(t: &Value) {
    output::fields(t, &["id", "name", "subscriber_id", "expires_at"]);
    out!("token: {}", output::cell(&t["token"]));
    out!(
        "(this token will not be shown again: kurir keeps only its hash. Hand it to the \
         subscriber, who sends it as a Bearer token)"
    );
}

fn list_table(page: &Value) {
    output::objects(
        &page["data"],
        &[
            ("ID", "id"),
            ("NAME", "name"),
            ("STATUS", "status"),
            ("CREATED", "created_at"),
            ("BY", "created_by"),
            ("EXPIRES", "expires_at"),
            ("REVOKED", "revoked_at"),
        ],
    );
    output::next_page(page);
}
