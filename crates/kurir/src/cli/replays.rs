//! `kurir replays list`: the replay audit (`GET /v1/replays`), newest first: when, who, why,
//! which filter and how many deliveries went back to pending. Replaying is `kurir replay`.

use clap::{Args, Subcommand};

use super::client::{Client, ClientArgs};
use super::output;

/// `kurir replays …`
#[derive(Debug, Args)]
pub struct ReplaysArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ReplaysCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Replay audit commands.
#[derive(Debug, Subcommand)]
pub enum ReplaysCommand {
    /// List the replays, newest first.
    List(ListArgs),
}

/// Arguments of `replays list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Rows per page (1 to 200).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// Runs a replay audit command.
pub async fn run(args: ReplaysArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let ReplaysCommand::List(l) = args.command;
    let query = [
        ("limit", l.limit.map(|n| n.to_string())),
        ("cursor", l.cursor),
    ];
    let page = client.get_query("/v1/replays", &query).await?;
    if args.client.json {
        output::json(&page);
        return Ok(());
    }
    output::objects(
        &page["data"],
        &[
            ("WHEN", "created_at"),
            ("WHO", "actor"),
            ("FROM", "via"),
            ("REASON", "reason"),
            ("FILTER", "filter"),
            ("COUNT", "count"),
        ],
    );
    output::next_page(&page);
    Ok(())
}
