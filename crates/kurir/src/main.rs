//! The `kurir` binary. Everything lives in the library; see [`kurir::cli`].

use std::io::Write;
use std::time::Duration;

use clap::Parser;

/// How long the runtime waits, once the command is done, for work still running in it (a
/// blocking DNS lookup, say) before the process exits anyway: `kurir serve` has already kept
/// its shutdown bound, and nothing left then is worth waiting for.
const RUNTIME_SHUTDOWN: Duration = Duration::from_millis(500);

fn main() {
    let cli = kurir::cli::Cli::parse();
    kurir::telemetry::init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(kurir::cli::main(cli));
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    if let Err(e) = result {
        // Not `eprintln!`: a closed stderr must not turn an error exit into a panic.
        let _ = writeln!(std::io::stderr(), "kurir: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// The error and its causes on one line, skipping a cause whose text its parent already shows
/// (many library errors print their source themselves).
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
