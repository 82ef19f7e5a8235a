//! `kurir sources create|list|show|update|delete`: the inbox gateway's sources.

use crate::redact::Sensitive;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{insert_given, Client, ClientArgs, Window};
use super::output::{self, out};

/// `kurir sources …`
#[derive(Debug, Args)]
pub struct SourcesArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SourcesCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Source commands.
#[derive(Debug, Subcommand)]
pub enum SourcesCommand {
    /// Create a source; prints its forward secret and read token (shown only now).
    Create(SourceFields),
    /// List every source.
    List,
    /// Show one source.
    Show {
        /// Source name.
        name: String,
    },
    /// Change a source.
    Update {
        /// Source name.
        name: String,
        /// Fields to change.
        #[command(flatten)]
        fields: UpdateFields,
    },
    /// List a source's received events, newest first.
    Events(EventsArgs),
    /// Show one received event with every forward attempt (across retries) and every retry.
    Event {
        /// Source name.
        name: String,
        /// The sender's event id.
        event_id: String,
    },
    /// Give a failed event a fresh set of forward attempts, due now.
    Retry {
        /// Source name.
        name: String,
        /// The sender's event id.
        event_id: String,
    },
    /// Delete a source (its received events stay in the inbox).
    Delete {
        /// Source name.
        name: String,
    },
}

/// Fields of `sources create`.
#[derive(Debug, Args)]
pub struct SourceFields {
    /// Source name: partners POST to `/inbox/NAME`.
    pub name: String,
    /// Signature scheme: kurir, standard-webhooks, stripe, github, shopify, slack or hmac-body.
    #[arg(long)]
    pub scheme: String,
    /// A secret the sender signs with (repeat during a rotation).
    #[arg(long = "secret", required = true)]
    pub secrets: Vec<Sensitive>,
    /// Where accepted events are forwarded (absolute http or https URL).
    #[arg(long)]
    pub forward_url: String,
    /// Timestamp tolerance in seconds [default: 300].
    #[arg(long)]
    pub tolerance_seconds: Option<u32>,
}

/// Fields of `sources update`.
#[derive(Debug, Args)]
pub struct UpdateFields {
    /// New signature scheme.
    #[arg(long)]
    pub scheme: Option<String>,
    /// New secrets (repeat; replaces the list).
    #[arg(long = "secret")]
    pub secrets: Vec<Sensitive>,
    /// New forward URL.
    #[arg(long)]
    pub forward_url: Option<String>,
    /// New timestamp tolerance in seconds.
    #[arg(long)]
    pub tolerance_seconds: Option<u32>,
}

/// Arguments of `sources events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Source name.
    pub name: String,
    /// pending, processing, completed or failed.
    #[arg(long)]
    pub status: Option<String>,
    /// Only this event type.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// The time window and the page.
    #[command(flatten)]
    pub window: Window,
}

/// Runs a source command.
pub async fn run(args: SourcesArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    let shown = match args.command {
        SourcesCommand::Create(f) => {
            client
                .call(Method::POST, "/v1/inbox/sources", &create_body(f))
                .await?
                .1
        }
        SourcesCommand::List => {
            let list = client.get("/v1/inbox/sources").await?;
            output::shown(&list, as_json, list_table);
            return Ok(());
        }
        SourcesCommand::Show { name } => client.get(&format!("/v1/inbox/sources/{name}")).await?,
        SourcesCommand::Update { name, fields: f } => {
            let path = format!("/v1/inbox/sources/{name}");
            client.call(Method::PATCH, &path, &update_body(f)).await?.1
        }
        SourcesCommand::Events(e) => return list_events(&client, e, as_json).await,
        SourcesCommand::Event { name, event_id } => {
            let event = client
                .get(&format!("/v1/inbox/sources/{name}/events/{event_id}"))
                .await?;
            output::shown(&event, as_json, event_history);
            return Ok(());
        }
        SourcesCommand::Retry { name, event_id } => {
            return retry(&client, &name, &event_id, as_json).await
        }
        SourcesCommand::Delete { name } => {
            let path = format!("/v1/inbox/sources/{name}");
            client.call(Method::DELETE, &path, &Value::Null).await?;
            output::deleted("source", &name, as_json);
            return Ok(());
        }
    };
    output::shown(&shown, as_json, show);
    Ok(())
}

/// The body of a create request.
fn create_body(f: SourceFields) -> Value {
    let mut body = Map::new();
    body.insert("name".into(), json!(f.name));
    body.insert("scheme".into(), json!(f.scheme));
    body.insert("secrets".into(), json!(f.secrets));
    body.insert("forward_url".into(), json!(f.forward_url));
    insert_given(
        &mut body,
        "tolerance_seconds",
        f.tolerance_seconds.map(Value::from),
    );
    Value::Object(body)
}

/// The body of an update request: only the fields given.
fn update_body(f: UpdateFields) -> Value {
    let mut body = Map::new();
    insert_given(&mut body, "scheme", f.scheme.map(Value::from));
    insert_given(
        &mut body,
        "secrets",
        (!f.secrets.is_empty()).then(|| json!(f.secrets)),
    );
    insert_given(&mut body, "forward_url", f.forward_url.map(Value::from));
    insert_given(
        &mut body,
        "tolerance_seconds",
        f.tolerance_seconds.map(Value::from),
    );
    Value::Object(body)
}

fn list_table(list: &Value) {
    output::objects(
        list,
        &[
            ("NAME", "name"),
            ("SCHEME", "scheme"),
            ("INBOX PATH", "inbox_path"),
            ("FORWARD URL", "forward_url"),
        ],
    );
}

fn show(s: &Value) {
    output::fields(
        s,
        &[
            "name",
            "scheme",
            "secret_count",
            "tolerance_seconds",
            "inbox_path",
            "forward_url",
            "created_at",
            "updated_at",
        ],
    );
    if let (Some(secret), Some(token)) = (s["forward_secret"].as_str(), s["read_token"].as_str()) {
        out!("forward_secret: {secret}");
        out!("read_token: {token}");
        out!("{FORWARD_HINT}");
    }
}

/// What a new source's creator is told: the README's step 3 in one breath. Forwards carry the
/// partner's body, which has no kurir `event_id`, so the Standard Webhooks signature (which
/// covers the id) is the one to check, not the `kurir` scheme's.
pub const FORWARD_HINT: &str =
    "(verify forwards in your app with the forward secret under Standard \
     Webhooks: webhook-signature over webhook-id, webhook-timestamp and the body, keyed with the \
     base64-decoded part after whsec_, as the README's \"Verifying a delivery\" shows; poll \
     statuses with the read token; kurir shows both only now)";
/// `sources event`: the event, then its attempts and retries in the order they happened.
fn event_history(e: &Value) {
    output::fields(
        e,
        &[
            "event_id",
            "event_type",
            "status",
            "received_at",
            "next_attempt_at",
        ],
    );
    let empty = Vec::new();
    let list = |k: &str| e[k].as_array().unwrap_or(&empty).clone();
    let time = |v: &Value| {
        let text = output::cell(v);
        (chrono::DateTime::parse_from_rfc3339(&text).ok(), text)
    };
    let mut lines: Vec<(_, Vec<String>)> = list("retries")
        .iter()
        .map(|r| {
            let (at, text) = time(&r["created_at"]);
            let who = format!(
                "retried by {} via {}",
                output::cell(&r["actor"]),
                output::cell(&r["via"])
            );
            (
                at,
                vec![text, who, String::new(), String::new(), String::new()],
            )
        })
        .collect();
    lines.extend(list("history").iter().map(|a| {
        let (at, text) = time(&a["started_at"]);
        let row = vec![
            text,
            format!("attempt {}", output::cell(&a["attempt"])),
            format!("{} ms", output::cell(&a["duration_ms"])),
            output::cell(&a["status_code"]),
            output::short(&a["error"], 60),
        ];
        (at, row)
    }));
    // A stable sort: a retry stays before the attempt of the same millisecond it let start.
    lines.sort_by_key(|(at, _)| *at);
    let rows: Vec<Vec<String>> = lines.into_iter().map(|(_, row)| row).collect();
    output::table(&["WHEN", "WHAT", "TOOK", "STATUS", "ERROR"], &rows);
}

/// `sources retry`.
async fn retry(client: &Client, name: &str, event_id: &str, as_json: bool) -> anyhow::Result<()> {
    let path = format!("/v1/inbox/sources/{name}/events/{event_id}/retry");
    let (_, answer) = client.call(Method::POST, &path, &json!({})).await?;
    if as_json {
        output::json(&answer);
    } else {
        out!("event {event_id} of {name} is due now, with a fresh set of attempts");
    }
    Ok(())
}

async fn list_events(client: &Client, e: EventsArgs, as_json: bool) -> anyhow::Result<()> {
    let page = client
        .get_query(
            &format!("/v1/inbox/sources/{}/events", e.name),
            &e.window
                .query([("status", e.status), ("event_type", e.event_type)]),
        )
        .await?;
    if as_json {
        output::json(&page);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = page["data"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|ev| {
            let mut row: Vec<String> = [
                "event_id",
                "event_type",
                "status",
                "attempts",
                "received_at",
                "next_attempt_at",
            ]
            .iter()
            .map(|k| output::cell(&ev[*k]))
            .collect();
            row.push(output::short(&ev["last_error"], 60));
            row
        })
        .collect();
    output::table(
        &[
            "EVENT ID",
            "TYPE",
            "STATUS",
            "ATTEMPTS",
            "RECEIVED",
            "NEXT ATTEMPT",
            "LAST ERROR",
        ],
        &rows,
    );
    output::next_page(&page);
    Ok(())
}
