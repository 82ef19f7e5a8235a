//! `kurir events send|show|list|recheck`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::client::{endpoint_name, Client, ClientArgs, Window};
use super::output::{self, out};

/// `kurir events …`
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: EventsCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Event commands.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Publish one event, or every line of an NDJSON file.
    Send(SendArgs),
    /// Show an event, its deliveries and every attempt.
    Show {
        /// Event id.
        event_id: String,
    },
    /// List events, newest first.
    List(ListArgs),
    /// Check the events the event catalog refused again, and deliver those that now pass
    /// (with their original event ids).
    Recheck {
        /// Only refused events of this type.
        #[arg(long = "type")]
        event_type: Option<String>,
    },
}

/// Arguments of `events send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Event type, e.g. order.paid.
    #[arg(
        long = "type",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    pub event_type: Option<String>,
    /// The payload, a JSON object.
    #[arg(long, required_unless_present = "file")]
    pub data: Option<String>,
    /// Your id for the event (default: a UUIDv7).
    #[arg(long)]
    pub event_id: Option<String>,
    /// Aggregate kind, e.g. order.
    #[arg(long)]
    pub aggregate_type: Option<String>,
    /// Aggregate id, e.g. 98765.
    #[arg(long)]
    pub aggregate_id: Option<String>,
    /// Payload version.
    #[arg(long)]
    pub version: Option<i32>,
    /// Idempotency-Key header: resending with the same key creates nothing new.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// The subscriber it is addressed to (its id): delivered only to that subscriber's
    /// endpoints. Absent: only to your own endpoints (those without a subscriber).
    #[arg(long, value_name = "SUBSCRIBER_ID")]
    pub subscriber: Option<String>,
    /// Send every line of this file (NDJSON: one POST /v1/events body per line), with progress.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["data", "event_id", "aggregate_type", "aggregate_id", "version", "idempotency_key", "subscriber"])]
    pub file: Option<PathBuf>,
}

/// Arguments of `events list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this event type.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Only this aggregate id.
    #[arg(long)]
    pub aggregate_id: Option<String>,
    /// Only the events addressed to this subscriber (its id). An id kurir does not know is an error, not an
    /// empty list.
    #[arg(long, value_name = "SUBSCRIBER_ID")]
    pub subscriber: Option<String>,
    /// The time window and the page.
    #[command(flatten)]
    pub window: Window,
}

/// Runs an event command.
pub async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    match args.command {
        EventsCommand::Send(send) => match send.file.clone() {
            Some(file) => send_file(&client, &file, as_json).await,
            None => send_one(&client, send, as_json).await,
        },
        EventsCommand::Show { event_id } => {
            let text = client.get_text(&format!("/v1/events/{event_id}")).await?;
            if as_json {
                output::json_text(&text);
            } else {
                show(&text)?;
            }
            Ok(())
        }
        EventsCommand::List(l) => list(&client, l, as_json).await,
        EventsCommand::Recheck { event_type } => {
            let body = json!({"event_type": event_type});
            let (_, done) = client
                .call(Method::POST, "/v1/events/recheck", &body)
                .await?;
            if as_json {
                output::json(&done);
            } else {
                out!(
                    "checked {} refused events: {} now pass and were fanned out ({} deliveries), {} still refused",
                    done["checked"], done["delivered"], done["deliveries"], done["still_refused"]
                );
            }
            Ok(())
        }
    }
}

/// `events list`: one page of events.
async fn list(client: &Client, l: ListArgs, as_json: bool) -> anyhow::Result<()> {
    let query = l.window.query([
        ("event_type", l.event_type),
        ("aggregate_id", l.aggregate_id),
        ("subscriber_id", l.subscriber.clone()),
    ]);
    let text = client.get_query_text("/v1/events", &query).await?;
    let page: Value = serde_json::from_str(&text).context("the API's answer is not JSON")?;
    client
        .check_filtered(l.subscriber.as_deref(), &page)
        .await?;
    if as_json {
        output::json_text(&text);
        return Ok(());
    }
    output::objects(
        &page["data"],
        &[
            ("EVENT ID", "event_id"),
            ("TYPE", "event_type"),
            ("AGGREGATE", "aggregate_id"),
            ("CREATED", "created_at"),
            ("DISPATCHED", "dispatched_at"),
        ],
    );
    output::next_page(&page);
    Ok(())
}

async fn send_one(client: &Client, s: SendArgs, as_json: bool) -> anyhow::Result<()> {
    // Checked as JSON but sent as given: kurir delivers the payload byte for byte, and a trip
    // through `Value` would sort its keys and rewrite its numbers (`1e3` as `1000.0`).
    let data: &RawValue = serde_json::from_str(s.data.as_deref().unwrap_or_default())
        .context("--data must be JSON, e.g. '{\"order_id\":\"98765\"}'")?;
    let body = Publish {
        event_type: s.event_type.as_deref(),
        data,
        event_id: s.event_id.as_deref(),
        aggregate_type: s.aggregate_type.as_deref(),
        aggregate_id: s.aggregate_id.as_deref(),
        version: s.version,
        subscriber_id: s.subscriber.as_deref(),
    };
    let url = client.url("/v1/events")?;
    let headers: Vec<(&str, &str)> = s
        .idempotency_key
        .as_deref()
        .map(|k| ("Idempotency-Key", k))
        .into_iter()
        .collect();
    let (status, answer) = client
        .send_text(
            Method::POST,
            url,
            Some(serde_json::to_string(&body)?),
            &headers,
        )
        .await?;
    let answer: Value = serde_json::from_str(&answer).unwrap_or_default();
    if as_json {
        output::json(&answer);
    } else if status == StatusCode::OK {
        out!(
            "already accepted earlier: event {} (nothing new created)",
            output::cell(&answer["event_id"])
        );
    } else {
        out!("accepted event {}", output::cell(&answer["event_id"]));
    }
    Ok(())
}

/// Sends each non-empty line of `file`; failures are reported per line and make the command fail.
async fn send_file(client: &Client, file: &PathBuf, as_json: bool) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    let bar = ProgressBar::new(lines.len() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} events sent ({elapsed}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (mut accepted, mut duplicates, mut failed) = (0, 0, Vec::new());
    let url = client.url("/v1/events")?;
    for (line_no, line) in lines {
        // Each line goes as written, like `--data`.
        let result = match serde_json::from_str::<&RawValue>(line) {
            Ok(_) => {
                client
                    .send_text(Method::POST, url.clone(), Some(line.to_owned()), &[])
                    .await
            }
            Err(e) => Err(anyhow::anyhow!("not JSON: {e}")),
        };
        match result {
            Ok((StatusCode::OK, _)) => duplicates += 1,
            Ok(_) => accepted += 1,
            Err(e) => {
                bar.suspend(|| eprintln!("line {line_no}: {e}"));
                failed.push(json!({"line": line_no, "error": e.to_string()}));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if as_json {
        output::json(
            &json!({"accepted": accepted, "already_accepted": duplicates, "failed": failed}),
        );
    } else {
        out!(
            "{accepted} accepted, {duplicates} already accepted earlier, {} failed",
            failed.len()
        );
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} of the lines in {} were not accepted",
            failed.len(),
            file.display()
        )
    }
}

/// Widest error and response-body previews in the attempt tables.
const PREVIEW: usize = 60;

/// Body of `POST /v1/events` as `send` builds it, with the payload as given.
#[derive(Serialize)]
struct Publish<'a> {
    event_type: Option<&'a str>,
    data: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregate_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregate_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscriber_id: Option<&'a str>,
}

/// The payload of an event as the API answered it, the stored bytes.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    data: &'a RawValue,
}

/// Prints the event that `text`, the API's answer, holds.
fn show(text: &str) -> anyhow::Result<()> {
    let event: Value = serde_json::from_str(text).context("the API's answer is not JSON")?;
    let Payload { data } = serde_json::from_str(text).context("the event has no data")?;
    show_event(&event, data);
    Ok(())
}

fn show_event(event: &Value, data: &RawValue) {
    output::fields(
        event,
        &[
            "event_id",
            "event_type",
            "subscriber_id",
            "version",
            "aggregate_type",
            "aggregate_id",
            "occurred_at",
            "created_at",
            "dispatched",
            "dispatched_at",
        ],
    );
    out!("data: {}", crate::text::pretty_raw(data.get()));
    if let Some(reason) = event["refused_reason"].as_str() {
        out!("\nrefused, never delivered: {reason}");
        if reason.starts_with("schema:") || reason.starts_with("catalog:") {
            out!("(the event catalog refuses it; once the schema or its producer is fixed, `kurir events recheck` delivers it)");
        } else {
            out!("(it breaks the outbox's SQL contract; see the README's SQL contract)");
        }
        return;
    }
    let deliveries = event["deliveries"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default();
    if deliveries.is_empty() {
        out!("\nno deliveries yet (the relay has not fanned the event out, or no endpoint subscribes to it)");
        return;
    }
    let endpoint = |d: &Value| {
        let id = output::cell(&d["endpoint_id"]);
        match endpoint_name(d) {
            Some(name) => format!("{name} [{id}]"),
            None => id,
        }
    };
    out!();
    deliveries_table(deliveries, &endpoint);
    attempt_tables(deliveries, &endpoint);
}

/// One row per delivery, headed by `endpoint`'s label for it.
fn deliveries_table(deliveries: &[Value], endpoint: &dyn Fn(&Value) -> String) {
    let rows: Vec<Vec<String>> = deliveries
        .iter()
        .map(|d| {
            let mut row = vec![endpoint(d)];
            row.extend(
                ["status", "attempt_count", "last_status_code"]
                    .iter()
                    .map(|k| output::cell(&d[*k])),
            );
            row.push(output::next_attempt(d));
            row.push(output::short(&d["last_error"], PREVIEW));
            row
        })
        .collect();
    output::table(
        &[
            "ENDPOINT",
            "STATUS",
            "ATTEMPTS",
            "LAST CODE",
            "NEXT ATTEMPT",
            "LAST ERROR",
        ],
        &rows,
    );
}

/// One table of attempts per delivery, headed by `endpoint`'s label for it.
fn attempt_tables(deliveries: &[Value], endpoint: &dyn Fn(&Value) -> String) {
    for d in deliveries {
        out!("\nattempts to {}:", endpoint(d));
        attempts_table(d);
    }
}

/// Which run an attempt belongs to: `attempt 2` before any replay, `replay 1, attempt 1` after.
fn run_of(a: &Value) -> String {
    match a["replay"].as_u64() {
        Some(0) | None => format!("attempt {}", output::cell(&a["attempt"])),
        Some(n) => format!("replay {n}, attempt {}", output::cell(&a["attempt"])),
    }
}

/// A delivery's attempts, with the error and the first bytes of each response body.
fn attempts_table(d: &Value) {
    let rows: Vec<Vec<String>> = d["attempts"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|a| {
            let mut row = vec![output::cell(&a["number"]), run_of(a)];
            row.extend(
                ["started_at", "duration_ms", "status_code"]
                    .iter()
                    .map(|k| output::cell(&a[*k])),
            );
            row.push(output::short(&a["error"], PREVIEW));
            row.push(output::short(&a["response_body"], PREVIEW));
            row
        })
        .collect();
    output::table(
        &[
            "#",
            "RUN",
            "STARTED",
            "MS",
            "CODE",
            "ERROR",
            "RESPONSE BODY",
        ],
        &rows,
    );
}
