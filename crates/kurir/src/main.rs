//! The `kurir` binary. Everything lives in the library; see [`kurir::cli`].

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = kurir::cli::Cli::parse();
    kurir::telemetry::init();
    if let Err(e) = kurir::cli::main(cli).await {
        eprintln!("kurir: {}", one_line(&e));
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
