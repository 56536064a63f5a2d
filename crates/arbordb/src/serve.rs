//! `arbordb serve`: the MongoDB-compatible server, with mongod's flags for
//! what we support (`--dbpath`, `--port`, `--bind_ip`, `--logpath`) plus our
//! storage options. Logs are JSON lines on stderr or in `--logpath`.

use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use storage::{Config, Engine, SyncMode};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Data directory (created if missing).
    #[arg(long, default_value = "arbordb-data")]
    dbpath: PathBuf,
    #[arg(long, default_value_t = 27017)]
    port: u16,
    /// Comma-separated addresses to listen on.
    #[arg(long = "bind_ip", default_value = "127.0.0.1", value_delimiter = ',')]
    bind_ip: Vec<IpAddr>,
    /// Write the log here instead of stderr.
    #[arg(long)]
    logpath: Option<PathBuf>,
    /// Cache size in MiB (default: the engine's, 512).
    #[arg(long)]
    cache_mib: Option<usize>,
    /// Journal sync: fsync (each acknowledged commit is durable), background
    /// (fsync every 100 ms), off (at checkpoints only).
    #[arg(long, default_value = "fsync")]
    journal_sync: SyncMode,
}

pub fn run(a: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    init_logging(a.logpath.as_deref())?;
    std::fs::create_dir_all(&a.dbpath)?;
    let mut config = Config { sync_mode: a.journal_sync, ..Config::default() };
    if let Some(mib) = a.cache_mib {
        config.cache_size_bytes = mib << 20;
    }
    let engine = Engine::open(&a.dbpath, config)?;
    let options = server::ServerOptions {
        bind: a.bind_ip.clone(),
        port: a.port,
        dbpath: a.dbpath.clone(),
        argv: std::env::args().collect(),
        parsed: server::parsed_options(&a.bind_ip, a.port, &a.dbpath),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("arbordb-net").build()?;
    runtime.block_on(async move {
        let server = server::Server::bind(engine, options).await?;
        for addr in server.local_addrs() {
            tracing::info!(%addr, dbpath = %a.dbpath.display(), "waiting for connections");
        }
        server.run().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

fn init_logging(logpath: Option<&std::path::Path>) -> std::io::Result<()> {
    let builder = tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ARBORDB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_current_span(false);
    match logpath {
        Some(p) => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(p)?;
            builder.with_writer(std::sync::Mutex::new(file)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
