//! `kurir deliveries list`: e.g. `--status dead_letter`, what was not delivered.

use clap::{Args, Subcommand};

use super::client::{endpoint_name, Client, ClientArgs, Window};
use super::output;

/// `kurir deliveries …`
#[derive(Debug, Args)]
pub struct DeliveriesArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: DeliveriesCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Delivery commands.
#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// List deliveries, newest first.
    List(ListArgs),
}

/// Arguments of `deliveries list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// pending, processing, sent, retrying (the last attempt failed, another is scheduled),
    /// dead_letter or cancelled.
    #[arg(long)]
    pub status: Option<String>,
    /// Only this endpoint.
    #[arg(long = "endpoint")]
    pub endpoint_id: Option<String>,
    /// Only this event type.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Only the deliveries to this subscriber's endpoints (its id). An id kurir does not know is an error, not an
    /// empty list.
    #[arg(long, value_name = "SUBSCRIBER_ID")]
    pub subscriber: Option<String>,
    /// The time window and the page.
    #[command(flatten)]
    pub window: Window,
}

/// Runs a delivery command.
pub async fn run(args: DeliveriesArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let DeliveriesCommand::List(l) = args.command;
    let page = client
        .get_query(
            "/v1/deliveries",
            &l.window.query([
                ("status", l.status),
                ("endpoint_id", l.endpoint_id),
                ("event_type", l.event_type),
                ("subscriber_id", l.subscriber.clone()),
            ]),
        )
        .await?;
    client
        .check_filtered(l.subscriber.as_deref(), &page)
        .await?;
    if args.client.json {
        output::json(&page);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = page["data"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(row)
        .collect();
    output::table(
        &[
            "ID",
            "EVENT ID",
            "TYPE",
            "ENDPOINT",
            "ENDPOINT ID",
            "STATUS",
            "ATTEMPTS",
            "LAST CODE",
            "NEXT ATTEMPT",
            "LAST ERROR",
        ],
        &rows,
    );
    output::next_page(&page);
    Ok(())
}

/// One delivery's table row: the endpoint's URL beside its id, the error cut short.
fn row(d: &serde_json::Value) -> Vec<String> {
    let id = output::cell(&d["endpoint_id"]);
    let mut row: Vec<String> = ["id", "event_id", "event_type"]
        .iter()
        .map(|k| output::cell(&d[*k]))
        .collect();
    row.push(endpoint_name(d).unwrap_or_else(|| id.clone()));
    row.push(id);
    row.extend(
        ["status", "attempt_count", "last_status_code"]
            .iter()
            .map(|k| output::cell(&d[*k])),
    );
    row.push(output::next_attempt(d));
    row.push(output::short(&d["last_error"], 60));
    row
}
