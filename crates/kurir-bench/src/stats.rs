//! Turning recorded times into figures: percentiles, rates, rate over time, a latency CDF.

use serde::Serialize;

use crate::clock::ms;
use crate::sink::Recorder;

/// Latency percentiles, in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The `q`-quantile (0..=1) of sorted nanosecond samples, in milliseconds (nearest rank).
pub fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    ms(sorted[rank - 1])
}

/// Percentiles of nanosecond samples (sorted here).
pub fn percentiles(samples: &mut [u64]) -> Percentiles {
    samples.sort_unstable();
    Percentiles {
        count: samples.len(),
        p50: quantile(samples, 0.50),
        p90: quantile(samples, 0.90),
        p99: quantile(samples, 0.99),
        max: quantile(samples, 1.0),
    }
}

/// The latency CDF as `(milliseconds, fraction)` points, about 200 of them, for charts.
pub fn cdf(sorted: &[u64]) -> Vec<[f64; 2]> {
    if sorted.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<[f64; 2]> = (0..=200)
        .map(|i| {
            // Denser towards the tail, where the interesting part of a latency CDF is.
            let q = 1.0 - (1.0 - i as f64 / 200.0).powi(3);
            [quantile(sorted, q), q]
        })
        .collect();
    points.dedup_by(|a, b| a[0] == b[0] && a[1] == b[1]);
    points
}

/// What a set of deliveries looked like from the sink.
#[derive(Clone, Debug, Default)]
pub struct Deliveries {
    /// Deliveries received (first arrivals).
    pub received: usize,
    /// Earliest commit of an event, ns.
    pub first_commit: u64,
    /// Latest commit, ns.
    pub last_commit: u64,
    /// Earliest arrival, ns.
    pub first_arrival: u64,
    /// Latest arrival, ns.
    pub last_arrival: u64,
    /// Every arrival time, sorted, ns.
    pub arrivals: Vec<u64>,
    /// Commit→receipt of every delivery, sorted, ns.
    pub latencies: Vec<u64>,
}

impl Deliveries {
    /// Collects events `0..recorder.events()` at the given endpoints.
    pub fn collect(recorder: &Recorder, endpoints: std::ops::Range<usize>) -> Self {
        Self::collect_events(recorder, 0..recorder.events(), endpoints)
    }

    /// Collects a sub-range of the recorder's events at the given endpoints.
    pub fn collect_events(
        recorder: &Recorder,
        events: std::ops::Range<usize>,
        endpoints: std::ops::Range<usize>,
    ) -> Self {
        let mut d = Deliveries {
            first_commit: u64::MAX,
            first_arrival: u64::MAX,
            ..Default::default()
        };
        for i in events {
            let commit = recorder.commit_of(i);
            if let Some(c) = commit {
                d.first_commit = d.first_commit.min(c);
                d.last_commit = d.last_commit.max(c);
            }
            for k in endpoints.clone() {
                if let Some(a) = recorder.arrival_of(i, k) {
                    d.arrivals.push(a);
                    if let Some(c) = commit {
                        d.latencies.push(a.saturating_sub(c));
                    }
                }
            }
        }
        d.received = d.arrivals.len();
        d.arrivals.sort_unstable();
        d.latencies.sort_unstable();
        d.first_arrival = d.arrivals.first().copied().unwrap_or(0);
        d.last_arrival = d.arrivals.last().copied().unwrap_or(0);
        if d.first_commit == u64::MAX {
            d.first_commit = d.first_arrival;
        }
        d
    }

    /// Deliveries per second from the first commit to the last receipt.
    pub fn end_to_end_rate(&self) -> f64 {
        rate(
            self.received,
            self.last_arrival.saturating_sub(self.first_commit),
        )
    }

    /// Deliveries per second from the first receipt to the last.
    pub fn receipt_rate(&self) -> f64 {
        rate(
            self.received,
            self.last_arrival.saturating_sub(self.first_arrival),
        )
    }

    /// Commit→receipt percentiles.
    pub fn latency(&self) -> Percentiles {
        let mut l = self.latencies.clone();
        percentiles(&mut l)
    }

    /// Deliveries per second in bins of `bin_s` seconds from `start` (ns), as `(t, rate)`.
    pub fn rate_series(&self, start: u64, bin_s: f64) -> Vec<[f64; 2]> {
        let bin_ns = (bin_s * 1e9) as u64;
        if self.arrivals.is_empty() || bin_ns == 0 {
            return Vec::new();
        }
        let bins = (self.last_arrival.saturating_sub(start) / bin_ns + 1) as usize;
        let mut counts = vec![0usize; bins];
        for a in &self.arrivals {
            counts[(a.saturating_sub(start) / bin_ns) as usize] += 1;
        }
        counts
            .iter()
            .enumerate()
            .map(|(i, c)| [(i as f64 + 0.5) * bin_s, *c as f64 / bin_s])
            .collect()
    }

    /// Deliveries per second among arrivals in `[from, to)` (ns).
    pub fn rate_between(&self, from: u64, to: u64) -> f64 {
        let lo = self.arrivals.partition_point(|a| *a < from);
        let hi = self.arrivals.partition_point(|a| *a < to);
        rate(hi - lo, to.saturating_sub(from))
    }
}

/// `count` per second over `ns` nanoseconds.
pub fn rate(count: usize, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        count as f64 / (ns as f64 / 1e9)
    }
}
