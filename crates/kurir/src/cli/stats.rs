//! `kurir stats`.

use clap::Args;

use super::client::{Client, ClientArgs};
use super::output::{self, out};

/// Arguments of `kurir stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `kurir stats`.
pub async fn run(args: StatsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let stats = client.get("/v1/stats").await?;
    if args.client.json {
        output::json(&stats);
        return Ok(());
    }
    let d = &stats["deliveries"];
    let e = &stats["events"];
    out!(
        "backlog: {} ({} pending, {} processing, {} failed); oldest waiting: {}",
        d["pending"].as_i64().unwrap_or(0)
            + d["processing"].as_i64().unwrap_or(0)
            + d["failed"].as_i64().unwrap_or(0),
        d["pending"],
        d["processing"],
        d["failed"],
        stats["oldest_pending_age_seconds"]
            .as_f64()
            .map_or("-".to_owned(), |s| format!("{s:.1}s")),
    );
    out!(
        "events: {} ({} dispatched, {} waiting for the relay)",
        e["total"],
        e["dispatched"],
        e["undispatched"]
    );
    let statuses = ["pending", "processing", "sent", "failed", "dead_letter"];
    output::table(
        &statuses
            .iter()
            .map(|s| s.to_uppercase())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[statuses.iter().map(|s| output::cell(&d[*s])).collect()],
    );
    Ok(())
}
