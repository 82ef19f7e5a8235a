//! `kurir event-types apply|list|show|delete|export`: the event catalog through the admin API.
//!
//! `apply FILE` makes the catalog hold what the file says (see [`crate::catalog::file`]): every
//! entry is checked first, so a bad file changes nothing; then each entry that is new or
//! differs is written (`PUT`), successors before the entries naming them. Applying the same
//! file again changes nothing. It reports what it created, updated (and which fields) and left
//! unchanged, and the entries in the catalog the file does not mention (kept: removing one is
//! `kurir event-types delete`); `--dry-run` reports the same and writes nothing.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use super::client::{Client, ClientArgs};
use super::output::{self, out};
use crate::catalog::file::{self, FileEntry};
use crate::catalog::EventTypeRef;

/// `kurir event-types …`
#[derive(Debug, Args)]
pub struct EventTypesArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: EventTypesCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Event catalog commands.
#[derive(Debug, Subcommand)]
pub enum EventTypesCommand {
    /// Make the catalog hold what a catalog file (YAML, or JSON by a .json name) says.
    Apply {
        /// The catalog file.
        file: PathBuf,
        /// Report what would change, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the catalog's entries.
    List,
    /// Show one entry: description, schema, examples.
    Show {
        /// Event type, e.g. order.paid.
        event_type: String,
        /// Payload version.
        version: i32,
    },
    /// Remove an entry (refused while events of that version are not delivered yet).
    Delete {
        /// Event type.
        event_type: String,
        /// Payload version.
        version: i32,
    },
    /// Print the catalog as an OpenAPI 3.1 document (one webhook per type and version).
    Export,
}

/// Runs an event catalog command.
pub async fn run(args: EventTypesArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    match args.command {
        EventTypesCommand::Apply { file, dry_run } => apply(&client, &file, dry_run, as_json).await,
        EventTypesCommand::List => {
            let all = catalog(&client).await?;
            if as_json {
                output::json(&Value::from(all));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = all.iter().map(summary_row).collect();
            output::table(
                &[
                    "EVENT TYPE",
                    "VERSION",
                    "SCHEMA",
                    "DEPRECATED",
                    "DESCRIPTION",
                ],
                &rows,
            );
            Ok(())
        }
        EventTypesCommand::Show {
            event_type,
            version,
        } => {
            let entry = client.get(&entry_path(&event_type, version)).await?;
            output::shown(&entry, as_json, show);
            Ok(())
        }
        EventTypesCommand::Delete {
            event_type,
            version,
        } => {
            client
                .call(
                    Method::DELETE,
                    &entry_path(&event_type, version),
                    &Value::Null,
                )
                .await?;
            output::deleted("event type", &format!("{event_type} v{version}"), as_json);
            Ok(())
        }
        EventTypesCommand::Export => {
            output::json(&client.get("/v1/event-types/openapi.json").await?);
            Ok(())
        }
    }
}

fn entry_path(event_type: &str, version: i32) -> String {
    format!("/v1/event-types/{event_type}/versions/{version}")
}

fn summary_row(e: &Value) -> Vec<String> {
    vec![
        output::cell(&e["event_type"]),
        output::cell(&e["version"]),
        if e["schema"].is_null() { "-" } else { "yes" }.to_owned(),
        if e["deprecated"] == true { "yes" } else { "-" }.to_owned(),
        crate::text::preview(e["description"].as_str().unwrap_or_default(), 60),
    ]
}

fn show(entry: &Value) {
    output::fields(
        entry,
        &[
            "event_type",
            "version",
            "description",
            "deprecated",
            "successor",
            "created_at",
            "updated_at",
        ],
    );
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    out!(
        "schema:\n{}",
        if entry["schema"].is_null() {
            "(none: any object)".to_owned()
        } else {
            pretty(&entry["schema"])
        }
    );
    for (i, example) in entry["examples"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out!("example {}:\n{}", i + 1, pretty(example));
    }
}

/// Every entry of the catalog, page by page.
async fn catalog(client: &Client) -> anyhow::Result<Vec<Value>> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client
            .get_query(
                "/v1/event-types",
                &[("limit", Some("200".into())), ("cursor", cursor.clone())],
            )
            .await?;
        all.extend(page["data"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(all),
        }
    }
}

/// What applying one entry does.
enum Change {
    Create,
    Update(Vec<&'static str>),
    Unchanged,
}

/// The fields of `entry` that differ from `current` (an entry as the API shows it).
fn changed_fields(entry: &FileEntry, current: &Value) -> Vec<&'static str> {
    let spec = serde_json::to_value(entry.spec()).unwrap_or_default();
    [
        "description",
        "schema",
        "examples",
        "deprecated",
        "successor",
    ]
    .into_iter()
    .filter(|f| spec.get(*f).unwrap_or(&Value::Null) != current.get(*f).unwrap_or(&Value::Null))
    .collect()
}

/// Reads, checks and plans a catalog file against the catalog as it is: each entry in the
/// order it is written, with what applying it does.
async fn plan(
    client: &Client,
    path: &PathBuf,
) -> anyhow::Result<(Vec<(FileEntry, Change)>, Vec<EventTypeRef>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let entries =
        file::parse(&path.display().to_string(), &text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let current: BTreeMap<EventTypeRef, Value> = (catalog(client).await?)
        .into_iter()
        .filter_map(|e| {
            let key = json!({"event_type": e["event_type"], "version": e["version"]});
            serde_json::from_value(key).ok().map(|k| (k, e))
        })
        .collect();
    let in_file: HashSet<EventTypeRef> = entries.iter().map(FileEntry::key).collect();
    for e in &entries {
        let missing =
            (e.successor.as_ref()).filter(|s| !in_file.contains(s) && !current.contains_key(s));
        if let Some(s) = missing {
            bail!(
                "{}: successor {s} is neither in the file nor in the catalog",
                e.key()
            );
        }
    }
    let planned = file::apply_order(&entries)
        .into_iter()
        .map(|i| {
            let entry = entries[i].clone();
            let change = match current.get(&entry.key()) {
                None => Change::Create,
                Some(c) => match changed_fields(&entry, c) {
                    fields if fields.is_empty() => Change::Unchanged,
                    fields => Change::Update(fields),
                },
            };
            (entry, change)
        })
        .collect();
    let kept = current
        .into_keys()
        .filter(|k| !in_file.contains(k))
        .collect();
    Ok((planned, kept))
}

async fn apply(
    client: &Client,
    path: &PathBuf,
    dry_run: bool,
    as_json: bool,
) -> anyhow::Result<()> {
    let (planned, kept) = plan(client, path).await?;
    let mut report = json!({"dry_run": dry_run, "created": [], "updated": [], "unchanged": []});
    let verb = |done: &'static str, would: &'static str| if dry_run { would } else { done };
    for (entry, change) in &planned {
        let key = entry.key();
        let mut item = json!({"event_type": key.event_type, "version": key.version});
        let (list, line) = match change {
            Change::Create => (
                "created",
                format!("{} {key}", verb("created", "would create")),
            ),
            Change::Update(fields) => {
                item["fields"] = json!(fields);
                let line = format!(
                    "{} {key} ({})",
                    verb("updated", "would update"),
                    fields.join(", ")
                );
                ("updated", line)
            }
            Change::Unchanged => ("unchanged", format!("unchanged {key}")),
        };
        if !dry_run && !matches!(change, Change::Unchanged) {
            let body = serde_json::to_value(entry.spec())?;
            client
                .call(
                    Method::PUT,
                    &entry_path(&key.event_type, key.version),
                    &body,
                )
                .await
                .with_context(|| {
                    format!("writing {key} (the entries listed above were written)")
                })?;
        }
        if let Some(items) = report[list].as_array_mut() {
            items.push(item);
        }
        if !as_json {
            out!("{line}");
        }
    }
    let count = |l: &str| report[l].as_array().map_or(0, Vec::len);
    let summary = format!(
        "{} {} created, {} updated, {} unchanged; {} in the catalog but not in the file (kept)",
        verb("applied:", "dry run, nothing changed:"),
        count("created"),
        count("updated"),
        count("unchanged"),
        kept.len()
    );
    report["not_in_file"] = json!(kept);
    if as_json {
        output::json(&report);
    } else {
        out!("{summary}");
    }
    Ok(())
}
