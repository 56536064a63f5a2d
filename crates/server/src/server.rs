//! The network server: listeners, one task per connection reading framed
//! messages and writing replies, and a clean shutdown (SIGINT, SIGTERM or
//! the `shutdown` command) that stops accepting and closes the engine with
//! a checkpoint.
//!
//! Invariants:
//! 1. A connection reads exactly the bytes its header announces (bounded by
//!    `message_size_max_bytes`) before parsing; bad input ends in an error
//!    reply or a closed connection, never in a panic of the server.
//! 2. The engine is closed once, after every listener stopped accepting.

use bson::{doc, oid::ObjectId, DateTime, Document};

use std::net::{IpAddr, SocketAddr};

use std::path::PathBuf;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use std::sync::Arc;

use std::time::Instant;

use storage::Engine;

use tokio::net::TcpListener;

use crate::commands::VERSION;
use crate::limits::bson_object_size_max_bytes;
use crate::net::connection::SESSION_REAP_INTERVAL;
use tokio::sync::watch;

/// How the server was started (reported by `getCmdLineOpts`).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub bind: Vec<IpAddr>,
    pub port: u16,
    pub dbpath: PathBuf,
    pub argv: Vec<String>,
    pub parsed: Document,
    /// `--setParameter enableTestCommands=1`: `configureFailPoint` exists.
    pub test_commands: bool,
}

#[derive(Default)]
pub struct Opcounters {
    pub insert: AtomicU64,
    pub query: AtomicU64,
    pub update: AtomicU64,
    pub delete: AtomicU64,
    pub getmore: AtomicU64,
    pub command: AtomicU64,
    /// Finds answered by the point-read fast path (`point.rs`), also
    /// counted in `query` and `command`.
    pub point_reads: AtomicU64,
    /// Runs blocking sorts and groups wrote to disk
    /// (`metrics.query.sort.spillToDisk`, `metrics.query.group`).
    pub spills: Arc<query::pipeline::SpillCounters>,
}

/// Server parameters `setParameter` can change at run time.
pub struct Parameters {
    /// `internalQueryMaxBlockingSortMemoryUsageBytes`.
    pub sort_memory_limit: AtomicUsize,
    /// `allowDiskUseByDefault`: a find with no `allowDiskUse` may spill.
    pub allow_disk_use_by_default: AtomicBool,
    /// `internalDocumentSourceGroupMaxMemoryBytes`.
    pub group_memory_limit: AtomicUsize,
    /// `internalQueryPlannerEnableIndexIntersection`: the planner
    /// considers index intersections (AND_SORTED).
    pub index_intersection: AtomicBool,
    /// `internalQueryForceIntersectionPlans`: an intersection, when one is
    /// considered, wins its race (for tests, as mongod's).
    pub force_intersection: AtomicBool,
    /// `slowms` (the `profile` command): a command that takes longer is
    /// logged as a slow query.
    pub slow_ms: AtomicI64,
    /// `sampleRate` (the `profile` command), as `f64` bits: the share of
    /// slow commands logged (mongod's; every slow command is logged here).
    pub sample_rate_bits: AtomicU64,
}

impl Default for Parameters {
    fn default() -> Parameters {
        Parameters {
            sort_memory_limit: AtomicUsize::new(crate::exec::scan::SORT_MEMORY_LIMIT_BYTES),
            allow_disk_use_by_default: AtomicBool::new(true),
            group_memory_limit: AtomicUsize::new(crate::exec::scan::GROUP_MEMORY_LIMIT_BYTES),
            index_intersection: AtomicBool::new(true),
            force_intersection: AtomicBool::new(false),
            slow_ms: AtomicI64::new(crate::limits::slow_ms_default),
            sample_rate_bits: AtomicU64::new(1.0f64.to_bits()),
        }
    }
}

/// Network counters (`serverStatus.network`), with per-compressor bytes:
/// index = compressor id; [decompressor in, decompressor out, compressor
/// in, compressor out].
#[derive(Default)]
pub struct NetworkCounters {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub requests: AtomicU64,
    pub compression: [[AtomicU64; 4]; 4],
}

/// What every connection shares.
pub struct Shared {
    pub catalog: doc::catalog::Catalog,
    pub cursors: crate::exec::cursors::Cursors,
    /// Sessions' check-outs and retryable writes' statement records.
    pub sessions: crate::session::SessionCatalog,
    pub options: ServerOptions,
    pub started: Instant,
    pub process_id: ObjectId,
    /// The wall-clock second this process started: the `time` of its
    /// cluster times (`commands::cluster_time_of`).
    pub cluster_epoch: u32,
    pub connections_current: AtomicU64,
    pub connections_total: AtomicU64,
    pub opcounters: Opcounters,
    pub network: NetworkCounters,
    pub parameters: Parameters,
    pub durability: Arc<crate::durability::Durability>,
    /// Bumped after inserts into capped collections: awaitData cursors
    /// waiting at their end look again.
    pub capped_inserts: watch::Sender<u64>,
    /// `configureFailPoint`'s `failCommand` (test commands only).
    pub fail_points: crate::failpoint::FailPoints,
    /// The TTL monitor's parameters and counters (`ttl.rs`).
    pub ttl: crate::ttl::Ttl,
    /// Winning indexes by query shape (`exec/plan_cache.rs`).
    pub plan_cache: crate::exec::plan_cache::PlanCache,
    /// Index builds under way, for `currentOp` (`exec/index_builds.rs`).
    pub index_builds: crate::exec::index_builds::IndexBuilds,
    /// Sessions' multi-document transactions (`transactions.rs`).
    pub transactions: crate::transactions::Transactions,
    /// Snapshots kept for reads at `atClusterTime` (`snapshots.rs`).
    pub snapshots: crate::snapshots::Snapshots,
    /// Profiling levels by database (`profiler.rs`).
    pub profiler: crate::profiler::Profiler,
    /// The operations under way (`exec/ops.rs`).
    pub ops: crate::exec::ops::Ops,
    next_request_id: AtomicI32,
    pub(crate) shutdown: watch::Sender<bool>,
}

impl Shared {
    /// Everything a server shares, over an open engine: the catalog, the
    /// session records, the sync thread. A server binds it to sockets; a
    /// test can run commands on it in process (`commands::run`).
    pub fn open(engine: Engine, options: ServerOptions) -> std::io::Result<Arc<Shared>> {
        let (tx, _) = watch::channel(false);
        let catalog = doc::catalog::Catalog::open_with(engine.clone(), query::hooks())
            .map_err(|e| std::io::Error::other(format!("opening the catalog: {e}")))?;
        record_startup(&catalog, &options)
            .map_err(|e| std::io::Error::other(format!("recording the start in local.startup_log: {e}")))?;
        let sessions = crate::session::SessionCatalog::open(&engine)
            .map_err(|e| std::io::Error::other(format!("opening the session records: {e}")))?;
        Ok(Arc::new(Shared {
            catalog,
            cursors: Default::default(),
            sessions,
            options,
            started: Instant::now(),
            process_id: ObjectId::new(),
            cluster_epoch: (bson::DateTime::now().timestamp_millis() / 1000) as u32,
            connections_current: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            opcounters: Opcounters::default(),
            network: NetworkCounters::default(),
            parameters: Parameters::default(),
            durability: crate::durability::Durability::start(engine.clone())?,
            capped_inserts: watch::channel(0).0,
            plan_cache: Default::default(),
            index_builds: Default::default(),
            transactions: Default::default(),
            snapshots: Default::default(),
            profiler: Default::default(),
            ops: Default::default(),
            ttl: crate::ttl::Ttl::default(),
            fail_points: crate::failpoint::FailPoints::default(),
            next_request_id: AtomicI32::new(1),
            shutdown: tx,
        }))
    }

    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub(crate) fn request_id(&self) -> i32 {
        self.next_request_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// One client connection.
#[derive(Debug, Clone)]
pub struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    /// The address the client reached us at: what `hello` names as us.
    pub local: SocketAddr,
    /// The client's `application.name` from its first `hello`.
    pub app_name: Arc<std::sync::OnceLock<String>>,
}

/// A bound server, not yet serving.
pub struct Server {
    shared: Arc<Shared>,
    listeners: Vec<TcpListener>,
}

impl Server {
    /// Bind every address of `options.bind` on `options.port`.
    pub async fn bind(engine: Engine, options: ServerOptions) -> std::io::Result<Server> {
        let mut listeners = Vec::new();
        for ip in &options.bind {
            listeners.push(TcpListener::bind(SocketAddr::new(*ip, options.port)).await?);
        }
        Ok(Server { shared: Shared::open(engine, options)?, listeners })
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    /// Serve until SIGINT, SIGTERM or the `shutdown` command; then close
    /// the engine (a checkpoint).
    pub async fn run(self) -> storage::Result<()> {
        let mut stop = self.shared.shutdown.subscribe();
        for listener in self.listeners {
            let shared = self.shared.clone();
            let mut stop = shared.shutdown.subscribe();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, peer)) => {
                                tokio::spawn(crate::net::connection::connection(shared.clone(), stream, peer));
                            }
                            Err(e) => tracing::warn!(error = %e, "accept failed"),
                        },
                        _ = stop.changed() => break,
                    }
                }
            });
        }
        // Sessions unused for the session timeout are forgotten, with
        // their retryable writes' records.
        // The first pass waits one interval (start-up stays quick); the
        // reaper stops with the server.
        let reaper = self.shared.clone();
        let mut reaper_stop = self.shared.shutdown.subscribe();
        tokio::spawn(async move {
            let start = tokio::time::Instant::now() + SESSION_REAP_INTERVAL;
            let mut tick = tokio::time::interval_at(start, SESSION_REAP_INTERVAL);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = reaper_stop.wait_for(|s| *s) => break,
                }
                let s = reaper.clone();
                let reaped = tokio::task::spawn_blocking(move || s.sessions.reap(s.catalog.engine())).await;
                match reaped {
                    Ok(Ok(0)) => {}
                    Ok(Ok(n)) => tracing::debug!(records = n, "reaped expired sessions' statement records"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "reaping expired sessions failed"),
                    Err(_) => {}
                }
            }
        });
        tokio::spawn(crate::ttl::monitor(self.shared.clone(), self.shared.shutdown.subscribe()));
        tokio::spawn(crate::transactions::reaper(self.shared.clone(), self.shared.shutdown.subscribe()));
        let signals = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("SIGTERM handler installs");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            }
        };
        let why = tokio::select! {
            sig = signals => sig,
            _ = stop.wait_for(|s| *s) => "shutdown command",
        };
        tracing::info!(reason = why, "shutting down");
        self.shared.request_shutdown();
        self.shared.durability.stop();
        let engine = self.shared.catalog.engine().clone();
        tokio::task::spawn_blocking(move || engine.close()).await.expect("close does not panic")?;
        tracing::info!("engine closed with a checkpoint; exiting");
        Ok(())
    }
}

/// This machine's name, as `hello`, `serverStatus` and `$collStats` report it.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// `getCmdLineOpts`' `parsed` for the options we take.
pub fn parsed_options(bind: &[IpAddr], port: u16, dbpath: &std::path::Path) -> Document {
    let ips: Vec<String> = bind.iter().map(|ip| ip.to_string()).collect();
    doc! {
        "net": { "bindIp": ips.join(","), "port": i32::from(port) },
        "storage": { "dbPath": dbpath.display().to_string() },
    }
}

pub(crate) fn build_info() -> Document {
    doc! {
        "version": VERSION,
        "gitVersion": "arbordb",
        "versionArray": [8, 0, 0, 0],
        "arbordbVersion": env!("CARGO_PKG_VERSION"),
        "bits": 64,
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": bson_object_size_max_bytes as i32,
        "storageEngines": ["arbordb"],
        "javascriptEngine": "none",
        "modules": [],
        "openssl": { "running": "disabled" },
        "ok": 1.0,
    }
}

/// The collections a replica-set member always has, written at start:
/// `admin.system.version` (the feature compatibility version) and the
/// capped `local.startup_log`, which gets one document per start (as
/// mongod's), so `show dbs` lists admin and local.
pub fn record_startup(
    catalog: &doc::catalog::Catalog,
    options: &crate::server::ServerOptions,
) -> Result<(), doc::catalog::DocError> {
    use doc::catalog::{Ack, Namespace};
    let engine = catalog.engine();
    // A `$out` cut short by a crash leaves its temporary collection.
    for db in catalog.databases() {
        for c in catalog.list(&db) {
            if c.ns.coll.starts_with(crate::exec::agg_write::TMP_PREFIX) {
                catalog.drop(&c.ns)?;
            }
        }
    }
    let version = Namespace::new("admin", "system.version")?;
    if catalog.get(&version).is_none() {
        let c = catalog.get_or_create(&version)?;
        let fcv = doc! { "_id": "featureCompatibilityVersion", "version": "8.0" };
        match c.insert(engine, &fcv, (Ack::Journaled, &Default::default()), None) {
            Ok(_) | Err(doc::catalog::DocError::DuplicateKey { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    // A replica-set primary keeps its sessions in `config.system.sessions`
    // (so `show dbs` lists config). Ours live in the `_sessions` table
    // (`doc::sessions`); the collection is there, empty, as the place
    // drivers and tools expect.
    let sessions = Namespace::new("config", "system.sessions")?;
    catalog.get_or_create(&sessions)?;
    let log = Namespace::new("local", "startup_log")?;
    let c = match catalog.get(&log) {
        Some(c) => c,
        None => match catalog.create(&log, doc! { "capped": true, "size": 10 * 1024 * 1024 }) {
            Err(doc::catalog::DocError::NamespaceExists(_)) => catalog.get(&log).expect("exists"),
            other => other?,
        },
    };
    let now = DateTime::now();
    let host = hostname();
    let entry = doc! {
        "_id": format!("{host}-{}", now.timestamp_millis()),
        "hostname": &host,
        "startTime": now,
        "startTimeLocal": now.try_to_rfc3339_string().unwrap_or_default(),
        "cmdLine": options.parsed.clone(),
        "pid": std::process::id() as i64,
        "buildinfo": build_info(),
    };
    c.insert(engine, &entry, (Ack::Journaled, &Default::default()), None)?;
    Ok(())
}
