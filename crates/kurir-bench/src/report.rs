//! What a run reports: a table for people, JSON for machines. Every scenario result carries its
//! own load average at start and end, since the machine is shared and noisy.

use std::fmt::Write as _;

use serde::Serialize;

use crate::db::TableSize;
use crate::machine::{busy_share, machine_cpu_ticks, LoadAverage, MachineTicks};

/// The whole run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The exact command line.
    pub command: String,
    /// When it started (UTC).
    pub started_at: String,
    /// Cores available.
    pub cores: usize,
    /// Load average when the run started.
    pub load_start: LoadAverage,
    /// Load average when it ended.
    pub load_end: LoadAverage,
    /// kurir's version (and commit, when built from a git checkout).
    pub kurir_version: String,
    /// Whether this was the smoke mode (tiny sizes: the figures mean nothing).
    pub smoke: bool,
    /// One entry per database.
    pub databases: Vec<DatabaseRun>,
}

/// The scenarios run on one database.
#[derive(Debug, Serialize)]
pub struct DatabaseRun {
    /// `postgres` or `sqlite`.
    pub backend: &'static str,
    /// Server or library version.
    pub version: String,
    /// Results, in the order run.
    pub results: Vec<ScenarioResult>,
}

/// One measured run of one scenario (a scenario may produce several, e.g. E=1 and E=10).
#[derive(Debug, Default, Serialize)]
pub struct ScenarioResult {
    /// The scenario: `ceiling`, `throughput`, …
    pub scenario: &'static str,
    /// Which variant, e.g. `E=10`.
    pub label: String,
    /// Load average at its start.
    pub load_start: LoadAverage,
    /// Load average at its end.
    pub load_end: LoadAverage,
    /// Figures, in display order.
    pub metrics: Vec<Metric>,
    /// Targets from issue 7, checked.
    pub targets: Vec<Target>,
    /// Remarks (timeouts, what was measured how).
    pub notes: Vec<String>,
    /// Table and index sizes, where measured.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes_before: Vec<TableSize>,
    /// Table and index sizes after the scenario.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes_after: Vec<TableSize>,
    /// Deliveries (or requests) per second over time: `[seconds, rate]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_series: Vec<[f64; 2]>,
    /// Latency CDF: `[milliseconds, fraction]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub latency_cdf: Vec<[f64; 2]>,
}

/// One figure.
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    /// Machine name, e.g. `deliveries_per_s`.
    pub key: String,
    /// The value.
    pub value: f64,
    /// Its unit, e.g. `/s`, `ms`, `MB`.
    pub unit: &'static str,
}

/// A target and whether it was met.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// What is measured, e.g. `p99 commit→receipt`.
    pub what: String,
    /// The goal, e.g. `≤ 10 ms`.
    pub goal: String,
    /// The measured value.
    pub value: f64,
    /// Met or not.
    pub met: bool,
}

impl ScenarioResult {
    /// Adds how busy the whole machine was since `start` (every process counts, so read it with
    /// the load average) and how much of that the hypervisor took, as `machine_cpu_busy` and
    /// `machine_cpu_stolen`: whether the machine, not a setting, limited the run.
    pub fn record_busy(&mut self, start: Option<MachineTicks>) {
        if let Some((busy, stolen)) = busy_share(start, machine_cpu_ticks()) {
            self.metric("machine_cpu_busy", busy * 100.0, "%");
            self.metric("machine_cpu_stolen", stolen * 100.0, "%");
        }
    }

    /// Adds a figure.
    pub fn metric(&mut self, key: &str, value: f64, unit: &'static str) {
        self.metrics.push(Metric {
            key: key.to_owned(),
            value,
            unit,
        });
    }

    /// Checks `value ≥ goal`.
    pub fn at_least(&mut self, what: &str, value: f64, goal: f64, unit: &str) {
        self.targets.push(Target {
            what: what.to_owned(),
            goal: format!(">= {} {unit}", fmt_num(goal)),
            value,
            met: value >= goal,
        });
    }

    /// Checks `value ≤ goal`.
    pub fn at_most(&mut self, what: &str, value: f64, goal: f64, unit: &str) {
        self.targets.push(Target {
            what: what.to_owned(),
            goal: format!("<= {} {unit}", fmt_num(goal)),
            value,
            met: value <= goal,
        });
    }

    /// A figure by key.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.iter().find(|m| m.key == key).map(|m| m.value)
    }
}

/// A number as people read it: thousands separated, sensible decimals.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.abs() >= 100.0 {
        let s = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{}{out}", if v < 0.0 { "-" } else { "" })
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn mb(bytes: i64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "kurir-bench — {}", self.command);
        let _ = writeln!(
            out,
            "kurir {} · {} cores · load average start {} / end {} · {}{}",
            self.kurir_version,
            self.cores,
            self.load_start,
            self.load_end,
            self.started_at,
            if self.smoke {
                " · SMOKE (tiny sizes, figures mean nothing)"
            } else {
                ""
            }
        );
        for db in &self.databases {
            let _ = writeln!(out, "\n== {} ({})", db.backend, db.version);
            for r in &db.results {
                r.write_table(&mut out);
            }
        }
        out
    }
}

impl ScenarioResult {
    /// This result's part of [`Report::table`].
    fn write_table(&self, out: &mut String) {
        let r = self;
        let _ = writeln!(
            out,
            "\n-- {} {}   (load {} → {})",
            r.scenario, r.label, r.load_start, r.load_end
        );
        for m in &r.metrics {
            let _ = writeln!(out, "   {:<34} {:>14} {}", m.key, fmt_num(m.value), m.unit);
        }
        for t in &r.targets {
            let _ = writeln!(
                out,
                "   target {:<27} {:>14}   {:<14} {}",
                t.what,
                fmt_num(t.value),
                t.goal,
                if t.met { "met" } else { "MISSED" }
            );
        }
        for (when, sizes) in [("before", &r.sizes_before), ("after", &r.sizes_after)] {
            for s in sizes.iter() {
                let _ = writeln!(
                    out,
                    "   size {when:<6} {:<18} table {:>10}  indexes {:>10}{}",
                    s.table,
                    mb(s.table_bytes),
                    mb(s.index_bytes),
                    match (s.live_rows, s.dead_rows) {
                        (Some(l), Some(d)) =>
                            format!("  live {}  dead {}", fmt_num(l as f64), fmt_num(d as f64)),
                        _ => String::new(),
                    }
                );
            }
        }
        for n in &r.notes {
            let _ = writeln!(out, "   note: {n}");
        }
    }
}
