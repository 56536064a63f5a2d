//! The processes a benchmark runs beside itself: the ArborDB server
//! (`arbordb serve`, as a user starts it) and the PostgreSQL peer
//! (`../shared/tools/postgres-local`), each stopped when dropped; ports,
//! and latency percentiles.

use crate::BenchResult;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

pub(crate) fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(crate) fn free_port() -> BenchResult<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Options of the benchmarks that start a server of their own.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// The server binary (default: `arbordb` beside this one).
    #[arg(long)]
    pub bin: Option<PathBuf>,
    /// Where to write the JSON (default: stdout only).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The ArborDB server process, stopped (SIGTERM, clean checkpoint) on drop.
pub(crate) struct ServerProcess(pub(crate) Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// The PostgreSQL peer, stopped and removed on drop.
pub(crate) struct PeerProcess(pub(crate) PathBuf);

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = Command::new(&self.0).arg("stop").status();
    }
}

pub(crate) async fn wait_listening(port: u16) -> BenchResult<()> {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("nothing listening on port {port}").into())
}

/// A running ArborDB server over a new data directory (removed with it).
pub(crate) struct Arbordb {
    pub server: ServerProcess,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Arbordb {
    /// The server's `--dbpath`.
    pub fn dbpath(&self) -> PathBuf {
        self.dir.path().join("db")
    }
}

/// Start `arbordb serve` (`bin`, or the `arbordb` beside this binary) on
/// a free port with a cache of `cache_mib` (0: the server's default).
pub(crate) async fn start_arbordb(bin: Option<&Path>, cache_mib: u64, name: &str) -> BenchResult<Arbordb> {
    let cache = cache_mib.to_string();
    let flags: &[&str] = match cache_mib {
        0 => &[],
        _ => &["--cache-mib", &cache],
    };
    start_arbordb_with(bin, name, flags).await
}

/// Start `arbordb serve` on a free port with `flags` besides its port and
/// data directory.
pub(crate) async fn start_arbordb_with(bin: Option<&Path>, name: &str, flags: &[&str]) -> BenchResult<Arbordb> {
    let bin = match bin {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?.with_file_name("arbordb"),
    };
    let dir = tempfile::Builder::new().prefix(&format!("arbordb-{name}-")).tempdir()?;
    let port = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--dbpath"]).arg(dir.path().join("db")).args(["--port", &port.to_string()]).args(flags);
    let log = dir.path().join("server.log");
    let server = ServerProcess(cmd.stderr(std::fs::File::create(&log)?).spawn()?);
    if let Err(e) = wait_listening(port).await {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
        return Err(format!("{e}; the server's log ends: {tail}").into());
    }
    Ok(Arbordb { server, port, dir })
}

/// The peer's postmaster, from `postmaster.pid` in its data directory
/// (`PGDATA` as `postgres-local` reads it).
pub(crate) fn postmaster_pid() -> BenchResult<String> {
    let dir = std::env::var("PGDATA").unwrap_or_else(|_| "/tmp/arbordb-peer-pg".to_string());
    let text = std::fs::read_to_string(Path::new(&dir).join("postmaster.pid"))?;
    Ok(text.lines().next().ok_or("an empty postmaster.pid")?.trim().to_string())
}

/// A memory cgroup holding the PostgreSQL peer's processes: its shared
/// buffers, its backends' memory and the page cache its files take from
/// then on count towards the limit, as ArborDB is held to its cache with
/// direct I/O. Needs root and a memory controller (cgroup v1, or v2 with
/// `memory` in the root's controllers).
pub(crate) struct MemoryCage {
    dir: PathBuf,
    v2: bool,
}

impl MemoryCage {
    fn place() -> (PathBuf, bool) {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let dir = if v2 { "/sys/fs/cgroup/arbordb-bench-peer" } else { "/sys/fs/cgroup/memory/arbordb-bench-peer" };
        (PathBuf::from(dir), v2)
    }

    fn fail(dir: &Path, what: &str, e: std::io::Error) -> String {
        format!("{what} {}: {e} (needs root and a memory cgroup)", dir.display())
    }

    /// A fresh, empty cgroup (a leftover one removed first); v2's memory
    /// controller enabled for it.
    fn create() -> BenchResult<(PathBuf, bool)> {
        let (dir, v2) = Self::place();
        remove_cgroup(&dir);
        if v2 {
            let controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")?;
            if !controllers.split_whitespace().any(|c| c == "memory") {
                return Err("cgroup v2 without the memory controller".into());
            }
            std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+memory")
                .map_err(|e| Self::fail(&dir, "enabling memory for", e))?;
        }
        std::fs::create_dir(&dir).map_err(|e| Self::fail(&dir, "creating", e))?;
        Ok((dir, v2))
    }

    /// Check that a cage can be made here, before a long run needs one.
    pub(crate) fn probe() -> BenchResult<()> {
        let (dir, _) = Self::create()?;
        remove_cgroup(&dir);
        Ok(())
    }

    /// Move process `root` and its live children (a postmaster's helpers;
    /// its later backends follow it) into a cgroup limited to `limit` bytes.
    pub(crate) fn hold(root: &str, limit: u64) -> BenchResult<MemoryCage> {
        let (dir, v2) = Self::create()?;
        let cage = MemoryCage { dir, v2 };
        let limit_file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        let write = |file: &str, what: &str, value: &str| {
            std::fs::write(cage.dir.join(file), value).map_err(|e| Self::fail(&cage.dir, what, e))
        };
        write(limit_file, "limiting", &limit.to_string())?;
        write("cgroup.procs", "joining", root)?;
        for pid in crate::measure::children_of(root) {
            // A child may have exited since it was listed.
            if let Err(e) = write("cgroup.procs", "joining", &pid) {
                if std::fs::metadata(format!("/proc/{pid}")).is_ok() {
                    return Err(e.into());
                }
            }
        }
        Ok(cage)
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(file)).ok()
    }

    /// The most memory the cgroup has held, in bytes (v2 needs Linux 5.19).
    pub(crate) fn peak_bytes(&self) -> Option<u64> {
        self.read(if self.v2 { "memory.peak" } else { "memory.max_usage_in_bytes" })?.trim().parse().ok()
    }

    /// Processes the kernel killed for want of memory in the cgroup.
    pub(crate) fn oom_kills(&self) -> Option<u64> {
        let text = self.read(if self.v2 { "memory.events" } else { "memory.oom_control" })?;
        text.lines().find_map(|l| l.strip_prefix("oom_kill "))?.trim().parse().ok()
    }
}

impl Drop for MemoryCage {
    fn drop(&mut self) {
        remove_cgroup(&self.dir);
    }
}

/// Remove a cgroup once its processes are gone (a stopped server's last
/// ones may take a moment to exit); a leftover is removed by the next run.
fn remove_cgroup(dir: &Path) {
    for _ in 0..20 {
        if !dir.exists() || std::fs::remove_dir(dir).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("warning: could not remove the cgroup {}", dir.display());
}

/// Start the PostgreSQL peer: its guard and connection URL.
pub(crate) fn start_postgres(postgres_local: &Path) -> BenchResult<(PeerProcess, String)> {
    let out = Command::new(postgres_local).arg("start").output()?;
    if !out.status.success() {
        return Err(format!("postgres-local start failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok((PeerProcess(postgres_local.to_path_buf()), url))
}
