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

/// Start the PostgreSQL peer: its guard and connection URL.
pub(crate) fn start_postgres(postgres_local: &Path) -> BenchResult<(PeerProcess, String)> {
    let out = Command::new(postgres_local).arg("start").output()?;
    if !out.status.success() {
        return Err(format!("postgres-local start failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok((PeerProcess(postgres_local.to_path_buf()), url))
}
