//! `kurir replay`: one event (`kurir replay EVENT_ID --reason …`) or every delivery matching a
//! filter (`kurir replay --status dead_letter --endpoint ID --reason …`), or the dry run of
//! either (`--dry-run`: which deliveries would go, replaying nothing).
//!
//! An event's replay takes the deliveries that did not succeed; `--include-sent` re-sends the
//! ones that did. The API decides which deliveries go; this module only asks.

use clap::Args;
use indicatif::ProgressBar;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{parse_time, Client, ClientArgs};
use super::output::{self, out};

/// The usage line, written out: clap's own lists every option given on a usage error as if it
/// were required (`kurir replay --url <URL> <EVENT_ID>`), and cannot show the two forms.
const USAGE: &str = "kurir replay <EVENT_ID> [--endpoint <ID>] [--include-sent] (--reason <REASON> | --dry-run) [OPTIONS]
       kurir replay [--status <STATUS>] [--endpoint <ID>] [--type <TYPE>] [--since <TIME>] [--until <TIME>] (--reason <REASON> | --dry-run) [OPTIONS]";

/// Arguments of `kurir replay`.
#[derive(Debug, Args)]
#[command(override_usage = USAGE)]
pub struct ReplayArgs {
    /// Replay this event's deliveries that did not succeed (dead letters); without it, replay
    /// by filter.
    pub event_id: Option<String>,
    /// Why (recorded in the replay audit with your token's name).
    #[arg(long, required_unless_present = "dry_run")]
    pub reason: Option<String>,
    /// Show what the replay would take (an event's: each delivery with its endpoint and
    /// status); replay nothing.
    #[arg(long, conflicts_with = "reason")]
    pub dry_run: bool,
    /// With EVENT_ID: re-send its deliveries that were already sent too.
    #[arg(long, requires = "event_id")]
    pub include_sent: bool,
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
pub async fn run(mut args: ReplayArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    let sent_left_out = args.event_id.is_some() && !args.include_sent;
    let mut body = filter(&mut args);
    let (path, bulk) = match &args.event_id {
        Some(id) => (format!("/v1/events/{id}/replay"), false),
        None => ("/v1/replays".to_owned(), true),
    };
    if args.dry_run {
        let query: Vec<(&str, Option<String>)> = body
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    Some(v.as_str().map_or(v.to_string(), str::to_owned)),
                )
            })
            .collect();
        let preview = client.get_query(&format!("{path}/preview"), &query).await?;
        dry_run(&preview, as_json, sent_left_out);
        return Ok(());
    }
    body.insert("reason".into(), json!(args.reason));
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
    if as_json {
        output::json(&answer);
    } else {
        out!(
            "{} deliveries back to pending (audit #{})",
            output::cell(&answer["replayed"]),
            output::cell(&answer["replay_id"])
        );
        if sent_left_out {
            out!("{SENT_LEFT_OUT}");
        }
    }
    Ok(())
}

/// What to replay, as the replay's body and the dry run's query both take it.
fn filter(args: &mut ReplayArgs) -> Map<String, Value> {
    let given = [
        ("endpoint_id", args.endpoint_id.take()),
        ("status", args.status.take()),
        ("event_type", args.event_type.take()),
        ("since", args.since.take()),
        ("until", args.until.take()),
    ];
    let mut body: Map<String, Value> = given
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_owned(), Value::from(value?))))
        .collect();
    if args.include_sent {
        body.insert("include_sent".into(), Value::Bool(true));
    }
    body
}

/// What an event's replay without `--include-sent` says it left out.
const SENT_LEFT_OUT: &str =
    "deliveries already sent are left out; add --include-sent to send them again";

/// Prints a dry run's answer: the deliveries that would go, and how many.
fn dry_run(preview: &Value, as_json: bool, sent_left_out: bool) {
    if as_json {
        return output::json(preview);
    }
    let deliveries = &preview["deliveries"];
    if deliveries.as_array().is_some_and(|d| !d.is_empty()) {
        output::objects(
            deliveries,
            &[
                ("DELIVERY", "delivery_id"),
                ("ENDPOINT ID", "endpoint_id"),
                ("URL", "endpoint_url"),
                ("STATUS", "status"),
            ],
        );
    }
    out!(
        "{} deliveries match; nothing replayed (drop --dry-run and give --reason to replay them)",
        output::cell(&preview["matching"])
    );
    if sent_left_out {
        out!("{SENT_LEFT_OUT}");
    }
}
