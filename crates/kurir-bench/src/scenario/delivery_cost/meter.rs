//! Whose work the database server's CPU did during a run, read from `/proc` per server process
//! or thread and attributed by the server's own list of its connections, polled every
//! [`POLL_EVERY`] so a process that ends mid-run keeps what it spent until its last reading.
//!
//! - **PostgreSQL** runs a process per connection: `pg_stat_activity` names each one's pid,
//!   database and kind. The application's connections are those whose `pg_backend_pid()` the
//!   harness read on each of its writer pool's connections; every other client backend of the
//!   database under test is kurir's; autovacuum workers of that database are counted apart,
//!   and so are the server's own processes (WAL writer, checkpointer, …), which every database
//!   on the server shares.
//! - **MySQL/MariaDB** runs a thread per connection: `information_schema.PROCESSLIST` names
//!   each connection's OS thread (`TID`, MariaDB 10.5 on) and database, and the application's
//!   are those whose `CONNECTION_ID()` the harness read. The server's own threads (InnoDB's
//!   purge, page cleaners, log writer) are the server's total less every connection thread.
//! - **SQLite** runs inside its clients: kurir's database work is in kurir's process, the
//!   application's in the harness's. Nothing to read here.
//!
//! The server must run on this machine (its `/proc`); if it does not, no share is read and the
//! run says so.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::db::AppPool;

/// How often the server's connections are listed and their CPU read.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// Whose work a server process or thread did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The application's writer connections.
    Writer,
    /// kurir's connections to the database under test.
    Kurir,
    /// Autovacuum of the database under test (PostgreSQL).
    Vacuum,
    /// The server's own processes or threads, shared by every database on it.
    Server,
    /// The harness's monitoring connection, and other databases' connections.
    Other,
}

/// CPU clock ticks (1/100 s) spent per owner between [`Meter::start`] and [`Running::stop`].
#[derive(Clone, Debug, Default)]
pub struct Shares {
    ticks: HashMap<Owner, u64>,
    /// Why nothing was read, when nothing was.
    pub unread: Option<String>,
    /// The server's ids of the harness's own connections (the application's and the monitor's).
    pub harness_ids: Vec<i64>,
}

impl Shares {
    /// Core-milliseconds spent by `owner`.
    pub fn core_ms(&self, owner: Owner) -> f64 {
        self.ticks.get(&owner).copied().unwrap_or(0) as f64 * 10.0
    }
}

/// One process or thread, as first and last read.
struct Seen {
    owner: Owner,
    first: u64,
    last: u64,
}

/// The monitor: its own connection, the ids it attributes by, and what it has read.
pub struct Meter {
    monitor: AppPool,
    writers: HashSet<i64>,
    own: i64,
    /// MySQL's server process, whose threads are read.
    server_pid: Option<u32>,
    server_first: u64,
    /// MySQL: every thread of the server at the first reading, with its CPU then. The server
    /// keeps finished connections' threads for new ones, so a connection that first shows up
    /// later may run on a thread that worked before the run.
    threads_first: HashMap<i64, u64>,
    seen: HashMap<i64, Seen>,
    polls: u64,
}

/// A meter polling in the background.
pub struct Running {
    running: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<Meter>>,
}

impl Meter {
    /// Reads the ids of `writers`' connections (every one of them, held at once) and of
    /// `monitor`'s single connection, takes the first reading and starts polling.
    pub async fn start(monitor: AppPool, writers: &AppPool, size: u32) -> anyhow::Result<Running> {
        let writers = connection_ids(writers, size).await?;
        let own = connection_ids(&monitor, 1).await?.into_iter().next();
        let server_pid = match &monitor {
            AppPool::Mysql(pool) => mysql_server_pid(pool).await,
            _ => None,
        };
        let mut meter = Meter {
            monitor,
            writers,
            own: own.unwrap_or(-1),
            server_pid,
            server_first: 0,
            threads_first: HashMap::new(),
            seen: HashMap::new(),
            polls: 0,
        };
        meter.poll().await?;
        let running = Arc::new(AtomicBool::new(true));
        let flag = running.clone();
        let task = tokio::spawn(async move {
            while flag.load(Ordering::Relaxed) {
                tokio::time::sleep(POLL_EVERY).await;
                meter.poll().await?;
            }
            anyhow::Ok(meter)
        });
        Ok(Running { running, task })
    }

    /// Lists the server's connections and reads each one's CPU.
    async fn poll(&mut self) -> anyhow::Result<()> {
        let first = self.polls == 0;
        self.polls += 1;
        let listed = match &self.monitor {
            AppPool::Postgres(pool) => self.postgres_processes(pool).await?,
            AppPool::Mysql(pool) => self.mysql_threads(pool).await?,
            AppPool::Sqlite(_) => return Ok(()),
        };
        if first {
            if let Some(pid) = self.server_pid {
                self.threads_first = server_threads(pid);
            }
        }
        for (id, owner, ticks) in listed {
            let Some(ticks) = ticks else { continue };
            let before = match first {
                true => ticks,
                // Listed after the first reading: its CPU since the run began.
                false => self.threads_first.get(&id).copied().unwrap_or(0),
            };
            let entry = self.seen.entry(id).or_insert(Seen {
                owner,
                first: before,
                last: ticks,
            });
            // A cached MySQL thread may serve another connection later; it stays its first
            // owner's (the run's connections are opened before it starts).
            entry.last = entry.last.max(ticks);
        }
        if first {
            self.server_first = self.server_pid.and_then(process_ticks).unwrap_or(0);
        }
        Ok(())
    }

    async fn postgres_processes(
        &self,
        pool: &sqlx::PgPool,
    ) -> anyhow::Result<Vec<(i64, Owner, Option<u64>)>> {
        let rows: Vec<(i32, Option<String>, Option<bool>)> = sqlx::query_as(
            "SELECT pid, backend_type, datname = current_database() FROM pg_stat_activity",
        )
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(pid, kind, ours)| {
                let id = i64::from(pid);
                let owner = match (kind.as_deref().unwrap_or(""), ours.unwrap_or(false)) {
                    ("client backend", true) if self.writers.contains(&id) => Owner::Writer,
                    ("client backend", true) if id == self.own => Owner::Other,
                    ("client backend" | "parallel worker", true) => Owner::Kurir,
                    ("autovacuum worker", true) => Owner::Vacuum,
                    ("client backend" | "autovacuum worker" | "parallel worker", false) => {
                        Owner::Other
                    }
                    _ => Owner::Server,
                };
                (id, owner, process_ticks(pid as u32))
            })
            .collect())
    }

    async fn mysql_threads(
        &self,
        pool: &sqlx::MySqlPool,
    ) -> anyhow::Result<Vec<(i64, Owner, Option<u64>)>> {
        let Some(server) = self.server_pid else {
            return Ok(Vec::new());
        };
        let rows: Vec<(i64, i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT CAST(ID AS SIGNED), CAST(TID AS SIGNED), DB, DATABASE() \
             FROM information_schema.PROCESSLIST",
        )
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, tid, db, ours)| {
                let owner = match db.is_some() && db == ours {
                    true if self.writers.contains(&id) => Owner::Writer,
                    true if id != self.own => Owner::Kurir,
                    _ => Owner::Other,
                };
                let path = format!("/proc/{server}/task/{tid}/stat");
                (tid, owner, stat_ticks(&path))
            })
            .collect())
    }
}

impl Running {
    /// Takes a last reading and returns what each owner spent since the first.
    pub async fn stop(self) -> anyhow::Result<Shares> {
        self.running.store(false, Ordering::Relaxed);
        let mut meter = self.task.await??;
        meter.poll().await?;
        let mut shares = Shares {
            harness_ids: meter.writers.iter().copied().chain([meter.own]).collect(),
            ..Shares::default()
        };
        for s in meter.seen.values() {
            *shares.ticks.entry(s.owner).or_default() += s.last.saturating_sub(s.first);
        }
        match &meter.monitor {
            AppPool::Sqlite(_) => {}
            AppPool::Mysql(_) if meter.server_pid.is_none() => {
                shares.unread = Some("the MySQL server's process was not found here".into());
            }
            AppPool::Mysql(_) => {
                let total = meter.server_pid.and_then(process_ticks).unwrap_or(0);
                let threads: u64 = shares.ticks.values().sum();
                let own = total.saturating_sub(meter.server_first);
                shares
                    .ticks
                    .insert(Owner::Server, own.saturating_sub(threads));
            }
            AppPool::Postgres(_) if meter.seen.values().all(|s| s.last == 0) => {
                shares.unread =
                    Some("the PostgreSQL server's processes were not found here".into());
            }
            AppPool::Postgres(_) => {}
        }
        Ok(shares)
    }
}

/// The server's ids of all `size` connections of `pool` (held together, so each is read once):
/// PostgreSQL's backend pids, MySQL's connection ids; none on SQLite.
async fn connection_ids(pool: &AppPool, size: u32) -> anyhow::Result<HashSet<i64>> {
    let mut ids = HashSet::new();
    match pool {
        AppPool::Postgres(p) => {
            let mut held = Vec::new();
            for _ in 0..size {
                let mut c = p.acquire().await?;
                let id: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                    .fetch_one(&mut *c)
                    .await?;
                ids.insert(i64::from(id));
                held.push(c);
            }
        }
        AppPool::Mysql(p) => {
            let mut held = Vec::new();
            for _ in 0..size {
                let mut c = p.acquire().await?;
                let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                    .fetch_one(&mut *c)
                    .await?;
                ids.insert(id);
                held.push(c);
            }
        }
        AppPool::Sqlite(_) => {}
    }
    Ok(ids)
}

/// The MySQL server's pid, from its pid file, if the server runs on this machine.
async fn mysql_server_pid(pool: &sqlx::MySqlPool) -> Option<u32> {
    let file: String = sqlx::query_scalar("SELECT @@pid_file")
        .fetch_one(pool)
        .await
        .ok()?;
    let pid: u32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    process_ticks(pid).map(|_| pid)
}

/// Every thread of process `pid` with its CPU ticks so far.
fn server_threads(pid: u32) -> HashMap<i64, u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid: i64 = e.file_name().to_str()?.parse().ok()?;
            Some((tid, stat_ticks(e.path().join("stat").to_str()?)?))
        })
        .collect()
}

/// User plus system CPU ticks of process `pid` (all its threads).
fn process_ticks(pid: u32) -> Option<u64> {
    stat_ticks(&format!("/proc/{pid}/stat"))
}

/// `utime + stime` from a `/proc/…/stat` file.
fn stat_ticks(path: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces: utime and
    // stime are the 14th and 15th of the line, the 12th and 13th after the name.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::stat_ticks;

    /// utime and stime are read after the command name, spaces and parentheses in it included.
    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let dir = std::env::temp_dir().join(format!("kurir-bench-stat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stat");
        let line = "42 (postgres: a (b) c) S 1 2 3 4 5 6 7 8 9 10 120 35 0 0 20 0 1 0 99 1 1";
        std::fs::write(&path, line).unwrap();
        assert_eq!(stat_ticks(path.to_str().unwrap()), Some(155));
        std::fs::write(&path, "42 (x) S 1 2").unwrap();
        assert_eq!(stat_ticks(path.to_str().unwrap()), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
