//! What the run happened on: core count, load average, and a process's memory and CPU time read
//! from `/proc` (Linux only; elsewhere the figures are absent, not wrong).

use serde::Serialize;

/// The 1-, 5- and 15-minute load averages.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LoadAverage {
    /// Last minute.
    pub one: f64,
    /// Last five minutes.
    pub five: f64,
    /// Last fifteen minutes.
    pub fifteen: f64,
}

impl std::fmt::Display for LoadAverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} {:.2} {:.2}", self.one, self.five, self.fifteen)
    }
}

/// Reads `/proc/loadavg`.
pub fn load_average() -> LoadAverage {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text.split_whitespace().map(|v| v.parse().unwrap_or(0.0));
    LoadAverage {
        one: it.next().unwrap_or(0.0),
        five: it.next().unwrap_or(0.0),
        fifteen: it.next().unwrap_or(0.0),
    }
}

/// Cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One reading of a process's resource use.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSample {
    /// Peak resident set size since the process started (`VmHWM`), in bytes.
    pub peak_rss_bytes: u64,
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
}

/// Reads `/proc/<pid>/status` and `/proc/<pid>/stat`; `None` when the process is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ProcSample {
        peak_rss_bytes: kib("VmHWM:"),
        cpu_seconds: ticks as f64 / clock_ticks_per_second(),
    })
}

/// `sysconf(_SC_CLK_TCK)` is 100 on every Linux this runs on; without `libc` we take it as given.
fn clock_ticks_per_second() -> f64 {
    100.0
}

/// CPU seconds used so far by every process named `postgres*` (the server and its backends,
/// with the backends it has already reaped): the database's share of the work. On a shared
/// machine this includes other clients of the same server.
pub fn postgres_cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("postgres") {
            continue;
        }
        // utime, stime, cutime, cstime: fields 14 to 17 of the line, 11 to 14 after the name.
        ticks += stat[close + 2..]
            .split_whitespace()
            .skip(11)
            .take(4)
            .filter_map(|v| v.parse::<u64>().ok())
            .sum::<u64>();
    }
    ticks as f64 / clock_ticks_per_second()
}

/// CPU seconds used so far by this process (the sink and the application's side).
pub fn own_cpu_seconds() -> f64 {
    sample(std::process::id()).map_or(0.0, |s| s.cpu_seconds)
}

/// The whole machine's CPU time so far, all cores, from the first line of `/proc/stat`, in clock
/// ticks. `None` off Linux.
pub fn machine_cpu_ticks() -> Option<MachineTicks> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some(MachineTicks {
        busy: total - idle,
        stolen: ticks.get(7).copied().unwrap_or(0),
        total,
    })
}

/// A reading of [`machine_cpu_ticks`].
#[derive(Clone, Copy, Debug)]
pub struct MachineTicks {
    /// Not idle and not waiting for I/O; includes `stolen`.
    pub busy: u64,
    /// Taken by the hypervisor for other guests while this one had work: on a shared VM it
    /// moves every figure of a run, and no process here can use it.
    pub stolen: u64,
    /// Everything.
    pub total: u64,
}

/// The shares of the machine's CPU time between two [`machine_cpu_ticks`] readings that were
/// busy and that were stolen by the hypervisor (part of the busy share).
pub fn busy_share(start: Option<MachineTicks>, end: Option<MachineTicks>) -> Option<(f64, f64)> {
    let (a, b) = (start?, end?);
    let total = b.total.checked_sub(a.total).filter(|t| *t > 0)? as f64;
    let share = |x: u64, y: u64| y.saturating_sub(x) as f64 / total;
    Some((share(a.busy, b.busy), share(a.stolen, b.stolen)))
}

#[cfg(test)]
mod tests {
    use super::{busy_share, MachineTicks};

    /// Shares are of the time between the readings, and the stolen share is part of the busy one.
    #[test]
    fn busy_and_stolen_shares_are_of_the_interval() {
        let at = |busy, stolen, total| {
            Some(MachineTicks {
                busy,
                stolen,
                total,
            })
        };
        let (busy, stolen) = busy_share(at(100, 10, 1_000), at(280, 30, 1_200)).unwrap();
        assert!((busy - 0.9).abs() < 1e-9, "{busy}");
        assert!((stolen - 0.1).abs() < 1e-9, "{stolen}");
        assert_eq!(busy_share(at(5, 0, 100), at(5, 0, 100)), None);
        assert_eq!(busy_share(None, at(5, 0, 100)), None);
    }
}
