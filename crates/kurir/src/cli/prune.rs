//! `kurir prune`: deletes, or with `--dry-run` counts, the history past its retention, as the
//! pruner of `kurir serve` does every `KURIR_PRUNE_INTERVAL`. Works on the database directly.

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{migrated_store, output, MigrateArgs};
use crate::prune::{cutoffs, round, RoundOutcome};
use crate::store::retention::Pruned;

/// Arguments of `kurir prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Only count what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
    /// The database and the settings (the retention settings come from the environment or the
    /// configuration file, as for `kurir serve`).
    #[command(flatten)]
    pub database: MigrateArgs,
}

/// `kurir prune`.
pub async fn run(args: PruneArgs) -> anyhow::Result<()> {
    let config = args.database.load_config()?;
    let store = migrated_store(&config).await?;
    // The cutoffs are compared with times the database and every `kurir serve` wrote.
    crate::clock::Follower::new(store.clone(), None)
        .correct()
        .await;
    let result = if args.dry_run {
        let at = cutoffs(&config.retention, store.clock().now_millis());
        store
            .prunable(&at)
            .await
            .map(|p| print(&p, "would be deleted"))
    } else {
        let metrics = crate::metrics::Metrics::new();
        round(
            &store,
            &config.retention,
            &metrics,
            &CancellationToken::new(),
        )
        .await
        .map(|outcome| match outcome {
            RoundOutcome::Pruned(p) => print(&p, "deleted"),
            RoundOutcome::Busy => output::out!("another kurir process is pruning; nothing done"),
        })
    };
    store.close().await;
    Ok(result?)
}

fn print(pruned: &Pruned, what: &str) {
    for (table, n) in pruned.by_table() {
        output::out!("{table:<21} {n:>10} rows {what}");
    }
}
