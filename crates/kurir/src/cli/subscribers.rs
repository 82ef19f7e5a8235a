//! `kurir subscribers create|list|show|disable|enable|delete`: the sender's customers (issue 29)
//! through `/v1/subscribers`; `kurir subscribers token …`, their tokens, is [`super::subscriber_tokens`].
//!
//! A subscriber's id is the sender's own and may hold any visible ASCII character, `/`, `?`,
//! `#` and `%` too, so it goes into a request's path percent-encoded ([`Client::url_of`]).

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{insert_given, Client, ClientArgs};
use super::output::{self, out};
use super::subscriber_tokens::{self, TokenCommand};

/// `kurir subscribers …`
#[derive(Debug, Args)]
pub struct SubscribersArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SubscribersCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Subscriber commands.
#[derive(Debug, Subcommand)]
pub enum SubscribersCommand {
    /// Create a subscriber with your own id for it (your customer's id).
    Create(CreateArgs),
    /// List the subscribers by id, a page at a time (deleted ones are not listed).
    List(ListArgs),
    /// Show one subscriber (a deleted one too, with when it was deleted).
    Show {
        /// Subscriber id.
        id: String,
    },
    /// Disable a subscriber: its endpoints get nothing, and their deliveries wait until it is
    /// enabled again.
    Disable {
        /// Subscriber id.
        id: String,
    },
    /// Enable a disabled subscriber: the deliveries that waited go out.
    Enable {
        /// Subscriber id.
        id: String,
    },
    /// Delete a subscriber: its endpoints are deleted and their undelivered deliveries
    /// cancelled. Its history stays until retention takes it, and its id stays taken meanwhile.
    /// To pause it and keep everything, disable it instead.
    #[command(
        after_help = "On a terminal, asks for confirmation first; --yes skips the question. \
                      Deleting cannot be undone: every endpoint of the subscriber is deleted, \
                      their pending deliveries end `cancelled` and are never replayed. \
                      `kurir subscribers disable` pauses them and keeps everything."
    )]
    Delete {
        /// Subscriber id.
        id: String,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Create, list or revoke a subscriber's tokens: each sees and changes only that
    /// subscriber's endpoints, events, deliveries and replays.
    Token {
        /// What to do.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Make a single-use link into the subscriber's portal (its endpoints, secrets and
    /// deliveries), for your customer to open within its expiry.
    PortalLink {
        /// Subscriber id.
        id: String,
        /// A session that looks but changes nothing.
        #[arg(long)]
        read_only: bool,
        /// How long the link may wait to be opened, e.g. 15m (1m to 7d) [default: 15m].
        #[arg(long, value_parser = parse_expires_in)]
        expires_in: Option<u64>,
        /// Where the portal's "Back" link goes (an http(s) URL).
        #[arg(long)]
        return_url: Option<String>,
    },
}

/// `15m` as seconds, within the range the API takes (1m to 7d): refused here, in the flag's own
/// words, rather than as the API's `expires_in` in seconds.
fn parse_expires_in(s: &str) -> Result<u64, String> {
    let seconds = humantime::parse_duration(s)
        .map(|d| d.as_secs())
        .map_err(|e| format!("{e}; e.g. 15m, 1h"))?;
    let range = crate::limits::PORTAL_LINK_EXPIRES_IN;
    let shown = |n: u64| humantime::format_duration(std::time::Duration::from_secs(n));
    match u32::try_from(seconds).is_ok_and(|n| range.contains(&n)) {
        true => Ok(seconds),
        false => Err(format!(
            "{} is out of range: a link may wait from {} to {} to be opened",
            shown(seconds),
            shown((*range.start()).into()),
            shown((*range.end()).into()),
        )),
    }
}

/// Arguments of `subscribers create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Your id for it (your customer's id, e.g. cus_8Hq2): 1 to 255 visible ASCII characters.
    pub id: String,
    /// A name for people.
    #[arg(long)]
    pub name: String,
    /// Free-form JSON object kept for you, e.g. '{"plan":"pro"}'.
    #[arg(long, value_parser = parse_metadata)]
    pub metadata: Option<Value>,
}

/// Arguments of `subscribers list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the subscribers of exactly this name.
    #[arg(long)]
    pub name: Option<String>,
    /// Rows per page (1 to 200).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// Parses `--metadata`: a JSON object.
fn parse_metadata(s: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("must be a JSON object, e.g. '{\"plan\":\"pro\"}'".into()),
        Err(e) => Err(format!("not JSON ({e}); e.g. '{{\"plan\":\"pro\"}}'")),
    }
}

/// Runs a subscriber command.
pub async fn run(args: SubscribersArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    let path = |id: &str| client.url_of(&["v1", "subscribers", id]);
    let shown = match args.command {
        SubscribersCommand::Create(c) => {
            let mut body = Map::new();
            body.insert("id".into(), json!(c.id));
            body.insert("name".into(), json!(c.name));
            insert_given(&mut body, "metadata", c.metadata);
            let url = client.url("/v1/subscribers")?;
            client
                .send(Method::POST, url, Some(&Value::Object(body)), &[])
                .await?
                .1
        }
        SubscribersCommand::List(l) => {
            let query = [
                ("name", l.name),
                ("limit", l.limit.map(|n| n.to_string())),
                ("cursor", l.cursor),
            ];
            let page = client.get_query("/v1/subscribers", &query).await?;
            output::shown(&page, as_json, list_table);
            return Ok(());
        }
        SubscribersCommand::Show { id } => with_actions(&client, &id).await?,
        SubscribersCommand::Disable { id } => set_enabled(&client, path(&id)?, false).await?,
        SubscribersCommand::Enable { id } => set_enabled(&client, path(&id)?, true).await?,
        SubscribersCommand::PortalLink {
            id,
            read_only,
            expires_in,
            return_url,
        } => {
            let made = portal_link(&client, &id, read_only, expires_in, return_url).await?;
            output::shown(&made, as_json, |m| {
                out!("{}", m["url"].as_str().unwrap_or_default());
                out!(
                    "Opens once, until {}.",
                    m["expires_at"].as_str().unwrap_or_default()
                );
            });
            return Ok(());
        }
        SubscribersCommand::Delete { id, yes } => {
            if !yes && !confirmed(&id)? {
                anyhow::bail!("subscriber {id} not deleted");
            }
            client.send(Method::DELETE, path(&id)?, None, &[]).await?;
            output::deleted("subscriber", &id, as_json);
            return Ok(());
        }
        SubscribersCommand::Token { command } => {
            return subscriber_tokens::run(&client, command, as_json).await;
        }
    };
    output::shown(&shown, as_json, show);
    Ok(())
}

/// Subscriber `id` with its action history (`GET /v1/subscribers/{id}/actions`) under
/// `actions`.
async fn with_actions(client: &Client, id: &str) -> anyhow::Result<Value> {
    let url = client.url_of(&["v1", "subscribers", id])?;
    let mut shown = client.send(Method::GET, url, None, &[]).await?.1;
    let actions = client.url_of(&["v1", "subscribers", id, "actions"])?;
    let actions = client.send(Method::GET, actions, None, &[]).await?.1;
    if let Value::Object(fields) = &mut shown {
        fields.insert("actions".into(), actions);
    }
    Ok(shown)
}

/// `POST /v1/subscribers/{id}/portal-links` with the options given.
async fn portal_link(
    client: &Client,
    id: &str,
    read_only: bool,
    expires_in: Option<u64>,
    return_url: Option<String>,
) -> anyhow::Result<Value> {
    let mut body = Map::new();
    body.insert("read_only".into(), json!(read_only));
    insert_given(&mut body, "expires_in", expires_in.map(|s| json!(s)));
    insert_given(&mut body, "return_url", return_url.map(|u| json!(u)));
    let url = client.url_of(&["v1", "subscribers", id, "portal-links"])?;
    let body = Value::Object(body);
    Ok(client.send(Method::POST, url, Some(&body), &[]).await?.1)
}

async fn set_enabled(client: &Client, url: reqwest::Url, enabled: bool) -> anyhow::Result<Value> {
    let body = json!({ "enabled": enabled });
    Ok(client.send(Method::PATCH, url, Some(&body), &[]).await?.1)
}

fn list_table(page: &Value) {
    output::objects(
        &page["data"],
        &[
            ("ID", "id"),
            ("NAME", "name"),
            ("ENABLED", "enabled"),
            ("CREATED", "created_at"),
            ("DISABLED", "disabled_at"),
        ],
    );
    output::next_page(page);
}

/// The newest actions `subscribers show` lists; `--json` has every one the API answered.
const ACTIONS_LISTED: usize = 10;

fn show(s: &Value) {
    output::fields(
        s,
        &[
            "id",
            "name",
            "enabled",
            "created_at",
            "updated_at",
            "disabled_at",
            "deleted_at",
            "metadata",
        ],
    );
    // Subscriber answers of `disable`, `enable` and `create` have no history.
    if s.get("actions").is_some() {
        actions(&s["actions"]);
    }
}

/// The subscriber's action history (`GET /v1/subscribers/{id}/actions`): who disabled, enabled
/// or deleted it, from where and when, newest first, and how many older ones are not listed.
fn actions(answer: &Value) {
    let all = answer["data"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let total = answer["total"]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(all.len());
    output::out!();
    if all.is_empty() {
        output::out!("actions: none (nobody has disabled, enabled or deleted it)");
        return;
    }
    let listed = &all[..all.len().min(ACTIONS_LISTED)];
    output::out!("actions (newest first):");
    output::objects(
        &Value::Array(listed.to_vec()),
        &[
            ("WHEN", "created_at"),
            ("ACTION", "action"),
            ("BY", "actor"),
            ("VIA", "via"),
        ],
    );
    let more = total.saturating_sub(listed.len());
    if more > 0 {
        let older = if more == 1 { "action" } else { "actions" };
        let json = match all.len() >= total {
            true => format!("--json lists all {total}"),
            false => format!("--json lists the newest {}", all.len()),
        };
        output::out!("({more} older {older} not listed; {json})");
    }
}

/// Whether the operator, asked on a terminal, agrees to delete subscriber `id`; `true` without a
/// terminal to ask on (a script decided already).
fn confirmed(id: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Ok(true);
    }
    eprint!(
        "Delete subscriber {id}? Every endpoint of it is deleted and their pending deliveries \
         cancelled; its history stays until retention. Disabling it instead keeps everything. \
         [y/N] "
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .context("cannot read the answer")?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
