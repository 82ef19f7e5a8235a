//! `kurir stats`, and `kurir stats --watch`: the same numbers sampled every `--interval`, with
//! rates computed from successive samples of `/v1/stats` (so they cover every process sharing
//! the database, like the numbers themselves).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use super::client::{Client, ClientArgs};
use super::output::{self, out};

/// Arguments of `kurir stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Keep sampling and show rates (events, sent and dead-lettered per second) until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// Time between samples with --watch, e.g. 500ms, 2s, 1m.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// With --watch, stop after this many samples.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
}

/// Runs `kurir stats`.
pub async fn run(args: StatsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    if args.watch {
        return watch(&client, &args).await;
    }
    let stats = client.get("/v1/stats").await?;
    if args.client.json {
        output::json(&stats);
    } else {
        print_stats(&stats);
    }
    Ok(())
}

fn print_stats(stats: &Value) {
    let d = &stats["deliveries"];
    let e = &stats["events"];
    out!(
        "backlog: {} ({} pending, {} processing, {} retrying); oldest waiting: {}",
        backlog(stats),
        d["pending"],
        d["processing"],
        d["retrying"],
        age(&stats["oldest_pending_age_seconds"]),
    );
    out!(
        "events: {} ({} dispatched, {} waiting for the relay)",
        e["total"],
        e["dispatched"],
        e["undispatched"]
    );
    let i = &stats["inbox"];
    if i.is_object() {
        out!(
            "inbox: {} completed, {} pending, {} processing, {} failed; oldest unforwarded: {}",
            i["completed"],
            i["pending"],
            i["processing"],
            i["failed"],
            age(&i["oldest_unforwarded_age_seconds"]),
        );
    }
    let r = &stats["retention"];
    if r.is_object() {
        out!(
            "retention: sent events {}, dead letters {}, inbox {}, replay audit {}",
            kept(&r["events_seconds"]),
            kept(&r["dead_letters_seconds"]),
            kept(&r["inbox_seconds"]),
            kept(&r["replay_audit_seconds"]),
        );
    }
    let statuses = [
        "pending",
        "processing",
        "sent",
        "retrying",
        "dead_letter",
        "cancelled",
    ];
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
}

fn backlog(stats: &Value) -> i64 {
    let d = &stats["deliveries"];
    ["pending", "processing", "retrying"]
        .iter()
        .map(|s| d[*s].as_i64().unwrap_or(0))
        .sum()
}

/// A retention in seconds as `30d`, `12h`; `forever` when absent.
fn kept(seconds: &Value) -> String {
    let Some(s) = seconds.as_u64() else {
        return "forever".to_owned();
    };
    let unit = [(86_400, "d"), (3_600, "h"), (60, "m")]
        .into_iter()
        .find(|(n, _)| s > 0 && s % n == 0);
    match unit {
        Some((n, name)) => format!("{}{name}", s / n),
        None => format!("{s}s"),
    }
}

fn age(seconds: &Value) -> String {
    seconds
        .as_f64()
        .map_or("-".to_owned(), |s| format!("{s:.1}s"))
}

/// Samples until Ctrl-C or `--count`. A failed sample is reported and the next one tried, so a
/// restarting server does not end the watch.
async fn watch(client: &Client, args: &StatsArgs) -> anyhow::Result<()> {
    let mut ticker = tokio::time::interval(args.interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let tty = std::io::stdout().is_terminal() && !args.client.json;
    let mut previous: Option<(Instant, Value)> = None;
    let mut taken = 0;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let stats = match client.get("/v1/stats").await {
            Ok(stats) => stats,
            Err(e) => {
                eprintln!("kurir stats: {e}; trying again");
                previous = None;
                continue;
            }
        };
        let now = Instant::now();
        let rates = previous
            .as_ref()
            .map(|(at, before)| rates(before, &stats, (now - *at).as_secs_f64()));
        show_sample(&stats, rates.as_ref(), args, tty);
        taken += 1;
        if args.count.is_some_and(|n| taken >= n) {
            return Ok(());
        }
        previous = Some((now, stats));
    }
}

fn show_sample(stats: &Value, rates: Option<&Value>, args: &StatsArgs, tty: bool) {
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if args.client.json {
        let mut sample = stats.clone();
        sample["at"] = json!(at);
        sample["rates"] = rates.cloned().unwrap_or(Value::Null);
        out!("{sample}");
        return;
    }
    let rate = |name: &str| {
        rates
            .and_then(|r| r[name].as_f64())
            .map_or("-".to_owned(), |v| format!("{v:.1}/s"))
    };
    if tty {
        // Clear the screen and go home: a refreshing view, like `watch`.
        out!(
            "\x1b[2J\x1b[H{at}  (every {}; Ctrl-C to stop)\n",
            humantime::format_duration(args.interval)
        );
        print_stats(stats);
        out!(
            "\nrates: events {}  sent {}  dead-lettered {}  backlog {}",
            rate("events_per_second"),
            rate("sent_per_second"),
            rate("dead_letter_per_second"),
            rate("backlog_per_second"),
        );
    } else {
        out!(
            "{at} backlog {} oldest {} | events {} sent {} dead-lettered {} backlog {}",
            backlog(stats),
            age(&stats["oldest_pending_age_seconds"]),
            rate("events_per_second"),
            rate("sent_per_second"),
            rate("dead_letter_per_second"),
            rate("backlog_per_second"),
        );
    }
}

/// Per-second changes between two `/v1/stats` samples `seconds` apart. Events, sent and
/// dead-lettered only grow in normal operation; a replay moves deliveries out of `sent` and
/// `dead_letter`, so a negative change shows as 0 rather than as a negative rate. The backlog's
/// change keeps its sign: positive means it is growing.
pub fn rates(before: &Value, after: &Value, seconds: f64) -> Value {
    let seconds = seconds.max(1e-3);
    let delta = |pointer: &str| {
        let get = |v: &Value| v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
        (get(after) - get(before)) as f64
    };
    let per_second = |pointer: &str| delta(pointer).max(0.0) / seconds;
    json!({
        "events_per_second": per_second("/events/total"),
        "sent_per_second": per_second("/deliveries/sent"),
        "dead_letter_per_second": per_second("/deliveries/dead_letter"),
        "backlog_per_second": (backlog(after) - backlog(before)) as f64 / seconds,
        "interval_seconds": seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(events: i64, sent: i64, dead: i64, pending: i64) -> Value {
        json!({
            "events": {"total": events},
            "deliveries": {"pending": pending, "processing": 0, "retrying": 0, "sent": sent, "dead_letter": dead},
        })
    }

    #[test]
    fn rates_are_changes_per_second_between_samples() {
        let r = rates(&sample(10, 4, 1, 6), &sample(30, 20, 1, 2), 2.0);
        assert_eq!(r["events_per_second"], 10.0);
        assert_eq!(r["sent_per_second"], 8.0);
        assert_eq!(r["dead_letter_per_second"], 0.0);
        assert_eq!(r["backlog_per_second"], -2.0);
    }

    #[test]
    fn a_replay_does_not_make_a_rate_negative() {
        let r = rates(&sample(10, 20, 5, 0), &sample(10, 15, 0, 10), 1.0);
        assert_eq!(r["sent_per_second"], 0.0);
        assert_eq!(r["dead_letter_per_second"], 0.0);
        assert_eq!(r["backlog_per_second"], 10.0);
    }
}
