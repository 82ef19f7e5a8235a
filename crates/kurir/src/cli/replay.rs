//! `kurir replay`: one event (`kurir replay EVENT_ID --reason …`) or every delivery matching a
//! filter (`kurir replay --status dead_letter --endpoint ID --reason …`).

use clap::Args;
use indicatif::ProgressBar;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{parse_time, Client, ClientArgs};
use super::output::{self, out};

/// Arguments of `kurir replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Replay this event's sent and dead-lettered deliveries; without it, replay by filter.
    pub event_id: Option<String>,
    /// Why (recorded in the replay audit with your token's name).
    #[arg(long, required_unless_present = "dry_run")]
    pub reason: Option<String>,
    /// Only count what a replay by filter would replay; replay nothing.
    #[arg(long, conflicts_with_all = ["event_id", "reason"])]
    pub dry_run: bool,
    /// Only the delivery to (or deliveries of) this endpoint.
    #[arg(long = "endpoint")]
    pub endpoint_id: Option<String>,
    /// Filter: dead_letter (default) or sent.
    #[arg(long, conflicts_with = "event_id")]
    pub status: Option<String>,
    /// Filter: event type.
    #[arg(long = "type", conflicts_with = "event_id")]
    pub event_type: Option<String>,
    /// Filter: deliveries created at or after (RFC 3339, or a duration ago such as 2h).
    #[arg(long, value_parser = parse_time, conflicts_with = "event_id")]
    pub since: Option<String>,
    /// Filter: deliveries created before.
    #[arg(long, value_parser = parse_time, conflicts_with = "event_id")]
    pub until: Option<String>,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `kurir replay`.
pub async fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let mut body = Map::new();
    let filter = [
        ("endpoint_id", args.endpoint_id),
        ("status", args.status),
        ("event_type", args.event_type),
        ("since", args.since),
        ("until", args.until),
    ];
    for (key, value) in filter {
        if let Some(value) = value {
            body.insert(key.into(), Value::from(value));
        }
    }
    if args.dry_run {
        let query: Vec<(&str, Option<String>)> = body
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().map(str::to_owned)))
            .collect();
        let preview = client.get_query("/v1/replays/preview", &query).await?;
        if args.client.json {
            output::json(&preview);
        } else {
            out!(
                "{} deliveries match; nothing replayed (drop --dry-run and give --reason to replay them)",
                output::cell(&preview["matching"])
            );
        }
        return Ok(());
    }
    body.insert("reason".into(), json!(args.reason));
    let (path, bulk) = match &args.event_id {
        Some(id) => (format!("/v1/events/{id}/replay"), false),
        None => ("/v1/replays".to_owned(), true),
    };
    // A bulk replay is one request that may touch many rows: show that it is working.
    let spinner = bulk.then(|| {
        let s = ProgressBar::new_spinner().with_message("replaying matching deliveries…");
        s.enable_steady_tick(std::time::Duration::from_millis(100));
        s
    });
    let result = client.call(Method::POST, &path, &Value::Object(body)).await;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let (_, answer) = result?;
    if args.client.json {
        output::json(&answer);
    } else {
        out!(
            "{} deliveries back to pending (audit #{})",
            output::cell(&answer["replayed"]),
            output::cell(&answer["replay_id"])
        );
    }
    Ok(())
}
