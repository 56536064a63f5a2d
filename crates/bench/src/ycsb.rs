//! `arbordb-bench ycsb`: workload W2, YCSB A (50% read, 50% update), B (95%
//! read), C (read only) and U (update only) through the network, ArborDB
//! against PostgreSQL in one run; ArborDB may run several times with
//! different storage options (block compressor, hole punching), each on
//! its own data directory. Each row reports the bytes the server wrote per
//! operation by file kind and page kind, and file sizes on disk sampled
//! during the run (`ycsb_io.rs`).
//!
//! - ArborDB: the harness starts `arbordb serve` (the `arbordb` binary
//!   beside this one, or `--arbordb-bin`) on a
//!   fresh data directory and a free port, and drives it with the official
//!   Rust `mongodb` driver: reads are `find_one({_id})`, updates
//!   `update_one({_id}, {$set: {fieldN: <100 bytes>}})`. Reads return the
//!   record as raw BSON (`RawDocumentBuf`), not decoded into a `Document`,
//!   as `tokio-postgres` returns the row with its `jsonb` undecoded: each
//!   client receives the record's bytes and stops there.
//! - PostgreSQL: started by `../shared/tools/postgres-local` (Debian
//!   packages, loopback), driven by `tokio-postgres`: table
//!   `usertable(ycsb_key text primary key, doc jsonb)`, prepared
//!   `SELECT doc ... WHERE ycsb_key = $1` and
//!   `UPDATE ... SET doc = jsonb_set(doc, $2, $3)`.
//!
//! Both acknowledge a write only once it is durable (ArborDB: journal
//! fsync with group commit, the default; PostgreSQL: `synchronous_commit =
//! on`, `fsync = on`, the defaults). Records are YCSB's: `user<hash>` keys,
//! 10 fields of 100 bytes; keys are chosen by YCSB's scrambled zipfian
//! (theta 0.99). The systems run one after the other, never together, with
//! the same client task count, key sequence seeds and durations.

use crate::measure;
use crate::procs::{free_port, percentile, wait_listening, PeerProcess, ServerProcess};
use crate::report;
use crate::ycsb_io::{self, IoReading};
use crate::BenchResult;
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct YcsbArgs {
    /// Records loaded into each system.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Client tasks (each with its own connection for PostgreSQL); a
    /// list (`1,8,32`) runs every workload at each count (W2: threads
    /// 1..32), the data loaded once.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    threads: Vec<usize>,
    /// Seconds per workload and system.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Workloads to run, comma separated (a: 50/50 read/update, b: 95/5,
    /// c: read only, u: update only).
    #[arg(long, value_delimiter = ',', default_value = "a,c")]
    workloads: Vec<String>,
    /// ArborDB's block compressors (`--block-compressor`): one ArborDB run
    /// per value, and per `--arbordb-punch-every` value.
    #[arg(long, value_delimiter = ',', default_value = "snappy")]
    arbordb_compressors: Vec<storage::Compressor>,
    /// ArborDB's `--punch-every-blocks` values (0: never punch): one run
    /// per value, data loaded afresh each time.
    #[arg(long, value_delimiter = ',', default_value = "20000")]
    arbordb_punch_every: Vec<u64>,
    /// Seconds between samples of file sizes on disk during a workload (0:
    /// only at its end).
    #[arg(long, default_value_t = 5)]
    sample_seconds: u64,
    /// Run ArborDB only (no PostgreSQL peer).
    #[arg(long)]
    skip_peer: bool,
    /// The script that starts and stops the PostgreSQL peer.
    #[arg(long, default_value = "../shared/tools/postgres-local")]
    postgres_local: PathBuf,
    /// Where to write the JSON (default bench/results/ycsb.json).
    #[arg(long, default_value = "bench/results/ycsb.json")]
    out: PathBuf,
    /// Parent of ArborDB's data directory (a fresh temporary directory is
    /// made inside it and removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// ArborDB's cache in MiB. The default holds the 1 M records (about
    /// 1.3 GB of leaves), as PostgreSQL's table sits whole in the OS page
    /// cache on this machine and as MongoDB's default cache (half of RAM
    /// minus 1 GB) would; 0 keeps the server's default (512 MiB).
    #[arg(long, default_value_t = 4096)]
    arbordb_cache_mib: u64,
    /// Also run the workloads through the same driver code against a server
    /// that does no database work (`arbordb-bench canned-server`: prepared replies),
    /// the ceiling of any server reached through this driver on this machine.
    #[arg(long)]
    driver_ceiling: bool,
    /// Threads of the client's tokio runtime, shared by every client task
    /// and the drivers' own tasks: 0 is tokio's default (one per CPU); 1
    /// runs the client on one thread (a current-thread runtime), leaving
    /// the other CPU to the server.
    #[arg(long, default_value_t = 0)]
    client_threads: usize,
    /// The server binary (default: `arbordb` in this executable's folder,
    /// as `cargo build --release --workspace --bins` leaves it).
    #[arg(long)]
    arbordb_bin: Option<PathBuf>,
}

/// The `arbordb` binary to start: `--arbordb-bin`, else the one beside this.
fn arbordb_bin(a: &YcsbArgs) -> BenchResult<PathBuf> {
    let path = match &a.arbordb_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("arbordb"),
    };
    if !path.is_file() {
        return Err(format!(
            "no server binary at {}: build it (cargo build --release -p arbordb) or pass --arbordb-bin",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// The canned-reply server's rows (`--driver-ceiling`).
const CEILING: &str = "driver-ceiling";
pub(crate) const FIELDS: usize = 10;
pub(crate) const FIELD_BYTES: usize = 100;
const LOAD_BATCH: u64 = 1000;
const LOAD_TASKS: u64 = 4;

/// FNV-1a over the key number's bytes, as YCSB hashes key numbers.
fn fnv64(n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in n.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn key(n: u64) -> String {
    format!("user{}", fnv64(n))
}

fn field_value(rng: &mut SmallRng) -> String {
    (0..FIELD_BYTES).map(|_| char::from(b'a' + rng.gen_range(0..26u8))).collect()
}

/// YCSB's zipfian generator (Gray et al., "Quickly generating
/// billion-record synthetic databases"), scrambled by hashing the rank.
struct Zipf {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    fn new(items: u64) -> Zipf {
        let theta = 0.99;
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(items);
        let zeta2 = zeta(2);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf { items, theta, alpha, zetan, eta }
    }

    /// A key number in `0..items`, popular ranks spread over the key space.
    fn next(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.items as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        fnv64(rank.min(self.items - 1)) % self.items
    }
}

/// One system under test.
trait Store: Send + Sync + 'static {
    fn load(&self, first: u64, count: u64, rng: &mut SmallRng) -> impl Future<Output = BenchResult<()>> + Send;
    fn read(&self, task: usize, key: &str) -> impl Future<Output = BenchResult<()>> + Send;
    fn update(
        &self,
        task: usize,
        key: &str,
        field: usize,
        value: String,
    ) -> impl Future<Output = BenchResult<()>> + Send;
    /// CPU seconds the server's processes have used so far.
    fn server_cpu_seconds(&self) -> f64;
    /// Durability fsyncs the server has run so far (ArborDB: journal
    /// fsyncs; PostgreSQL: WAL syncs, `pg_stat_wal.wal_sync`).
    fn fsyncs(&self) -> impl Future<Output = BenchResult<u64>> + Send;
    /// Bytes written so far by kind, and file sizes on disk.
    fn io(&self) -> impl Future<Output = BenchResult<IoReading>> + Send;
    /// Write everything to the data files (after the load, so that file
    /// sizes show the loaded data as stored).
    fn checkpoint(&self) -> impl Future<Output = BenchResult<()>> + Send;
}

struct Arbor {
    /// Whether the server is the canned-reply driver ceiling, which stores
    /// nothing: no load, no fsyncs.
    canned: bool,
    coll: mongodb::Collection<mongodb::bson::Document>,
    /// The same collection, read as raw BSON.
    raw: mongodb::Collection<mongodb::bson::RawDocumentBuf>,
    admin: mongodb::Database,
    server_pid: u32,
    /// The server's data directory (none for the canned-reply server).
    dbpath: Option<PathBuf>,
}

impl Store for Arbor {
    async fn load(&self, first: u64, count: u64, rng: &mut SmallRng) -> BenchResult<()> {
        if self.canned {
            return Ok(());
        }
        let docs: Vec<_> = (first..first + count)
            .map(|n| {
                let mut d = mongodb::bson::doc! { "_id": key(n) };
                for f in 0..FIELDS {
                    d.insert(format!("field{f}"), field_value(rng));
                }
                d
            })
            .collect();
        self.coll.insert_many(docs).ordered(false).await?;
        Ok(())
    }

    async fn read(&self, _task: usize, key: &str) -> BenchResult<()> {
        let found = self.raw.find_one(mongodb::bson::doc! { "_id": key }).await?;
        if found.is_none() {
            return Err(format!("ArborDB: record {key} not found").into());
        }
        Ok(())
    }

    async fn update(&self, _task: usize, key: &str, field: usize, value: String) -> BenchResult<()> {
        let r = self
            .coll
            .update_one(
                mongodb::bson::doc! { "_id": key },
                mongodb::bson::doc! { "$set": { format!("field{field}"): value } },
            )
            .await?;
        if r.matched_count != 1 {
            return Err(format!("ArborDB: update of {key} matched {}", r.matched_count).into());
        }
        Ok(())
    }

    fn server_cpu_seconds(&self) -> f64 {
        measure::process_cpu_seconds(&self.server_pid.to_string()).unwrap_or(0.0)
    }

    async fn fsyncs(&self) -> BenchResult<u64> {
        if self.canned {
            return Ok(0);
        }
        let status = self.admin.run_command(mongodb::bson::doc! { "serverStatus": 1 }).await?;
        Ok(status.get_document("arbordb")?.get_i64("journal_syncs")? as u64)
    }

    async fn io(&self) -> BenchResult<IoReading> {
        let Some(dbpath) = &self.dbpath else { return Ok(IoReading::default()) };
        let status = self.admin.run_command(mongodb::bson::doc! { "serverStatus": 1 }).await?;
        IoReading::arbordb(&status, dbpath)
    }

    async fn checkpoint(&self) -> BenchResult<()> {
        if !self.canned {
            self.admin.run_command(mongodb::bson::doc! { "fsync": 1 }).await?;
        }
        Ok(())
    }
}

struct Postgres {
    /// One connection per client task, with its prepared statements.
    conns: Vec<(tokio_postgres::Client, tokio_postgres::Statement, tokio_postgres::Statement)>,
}

impl Store for Postgres {
    async fn load(&self, first: u64, count: u64, rng: &mut SmallRng) -> BenchResult<()> {
        let (client, _, _) = &self.conns[(first / LOAD_BATCH) as usize % self.conns.len()];
        let mut sql = String::from("INSERT INTO usertable (ycsb_key, doc) VALUES ");
        let mut params: Vec<String> = Vec::new();
        for (i, n) in (first..first + count).enumerate() {
            let mut doc = serde_json::Map::new();
            for f in 0..FIELDS {
                doc.insert(format!("field{f}"), serde_json::Value::String(field_value(rng)));
            }
            params.push(key(n));
            params.push(serde_json::Value::Object(doc).to_string());
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&format!("(${}, ${}::text::jsonb)", 2 * i + 1, 2 * i + 2));
        }
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
        client.execute(sql.as_str(), &refs).await?;
        Ok(())
    }

    async fn read(&self, task: usize, key: &str) -> BenchResult<()> {
        let (client, select, _) = &self.conns[task];
        if client.query_opt(select, &[&key]).await?.is_none() {
            return Err(format!("PostgreSQL: record {key} not found").into());
        }
        Ok(())
    }

    async fn update(&self, task: usize, key: &str, field: usize, value: String) -> BenchResult<()> {
        let (client, _, update) = &self.conns[task];
        let path = vec![format!("field{field}")];
        let n = client.execute(update, &[&key, &path, &serde_json::Value::String(value).to_string()]).await?;
        if n != 1 {
            return Err(format!("PostgreSQL: update of {key} touched {n} rows").into());
        }
        Ok(())
    }

    fn server_cpu_seconds(&self) -> f64 {
        measure::command_cpu_seconds("postgres")
    }

    async fn fsyncs(&self) -> BenchResult<u64> {
        let row = self.conns[0].0.query_one("SELECT wal_sync FROM pg_stat_wal", &[]).await?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    async fn io(&self) -> BenchResult<IoReading> {
        ycsb_io::postgres(&self.conns[0].0, "usertable").await
    }

    async fn checkpoint(&self) -> BenchResult<()> {
        self.conns[0].0.batch_execute("CHECKPOINT").await?;
        Ok(())
    }
}

/// Load `records` with a few concurrent tasks, printing progress.
async fn load<S: Store>(name: &str, store: &Arc<S>, records: u64, seed: u64) -> BenchResult<f64> {
    let start = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..LOAD_TASKS {
        let (store, done) = (store.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed ^ (t + 1));
            let mut first = t * LOAD_BATCH;
            while first < records {
                let count = LOAD_BATCH.min(records - first);
                store.load(first, count, &mut rng).await?;
                done.fetch_add(count, std::sync::atomic::Ordering::Relaxed);
                first += LOAD_TASKS * LOAD_BATCH;
            }
            Ok::<(), crate::BenchError>(())
        }));
    }
    let mut last = Instant::now();
    while !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if last.elapsed() >= Duration::from_secs(5) {
            let n = done.load(std::sync::atomic::Ordering::Relaxed);
            eprintln!("  {name} load: {n}/{records} records, {:.0} s", start.elapsed().as_secs_f64());
            last = Instant::now();
        }
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("  {name} load: {records} records in {secs:.1} s");
    Ok(secs)
}

/// Run one workload for `seconds` with `threads` tasks; returns the
/// operation and update counts and every latency in microseconds.
async fn run_workload<S: Store>(
    name: &str,
    store: &Arc<S>,
    a: &YcsbArgs,
    (threads, update_percent): (usize, u32),
) -> BenchResult<(u64, u64, Vec<u32>, f64)> {
    let zipf = Arc::new(Zipf::new(a.records));
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..threads {
        let (store, zipf) = (store.clone(), zipf.clone());
        let seed = a.seed.wrapping_mul(1000) + t as u64;
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let (mut latencies, mut updates) = (Vec::new(), 0u64);
            while Instant::now() < deadline {
                let k = key(zipf.next(&mut rng));
                let began = Instant::now();
                if rng.gen_range(0..100) < update_percent {
                    let (field, value) = (rng.gen_range(0..FIELDS), field_value(&mut rng));
                    store.update(t, &k, field, value).await?;
                    updates += 1;
                } else {
                    store.read(t, &k).await?;
                }
                latencies.push(began.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
            }
            Ok::<_, crate::BenchError>((latencies, updates))
        }));
    }
    let (mut all, mut updates) = (Vec::new(), 0);
    for t in tasks {
        let (latencies, n) = t.await??;
        all.extend(latencies);
        updates += n;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("  {name}: {} ops in {secs:.1} s", all.len());
    Ok((all.len() as u64, updates, all, secs))
}

/// Load, then run every workload, on one system; rows for the report.
/// The most client tasks any run uses.
fn max_threads(a: &YcsbArgs) -> usize {
    a.threads.iter().copied().max().unwrap_or(1)
}

/// The driver's view of a server speaking the MongoDB protocol on `port`:
/// ArborDB's, or the canned-reply ceiling's.
async fn mongo_store(port: u16, a: &YcsbArgs, server_pid: u32, dbpath: Option<PathBuf>) -> BenchResult<Arbor> {
    wait_listening(port).await?;
    let uri = format!("mongodb://127.0.0.1:{port}/?directConnection=true&maxPoolSize={}", max_threads(a) + 8);
    let client = mongodb::Client::with_uri_str(&uri).await?;
    let db = client.database("ycsb");
    Ok(Arbor {
        canned: dbpath.is_none(),
        coll: db.collection("usertable"),
        raw: db.collection("usertable"),
        admin: client.database("admin"),
        server_pid,
        dbpath,
    })
}

async fn bench_system<S: Store>(name: &str, store: Arc<S>, a: &YcsbArgs) -> BenchResult<Vec<serde_json::Value>> {
    let load_secs = if name == CEILING { 0.0 } else { load(name, &store, a.records, a.seed).await? };
    let loaded = store.io().await?;
    store.checkpoint().await?;
    let checkpointed = store.io().await?;
    let load_io = json!({
        "written": checkpointed.per_op_since(&IoReading::default(), a.records),
        "disk_after_checkpoint": checkpointed.disk_json(),
        "allocated_bytes_before_checkpoint": loaded.allocated_bytes(),
        "allocated_bytes_after_checkpoint": checkpointed.allocated_bytes(),
    });
    let mut rows = Vec::new();
    for (&threads, w) in a.threads.iter().flat_map(|t| a.workloads.iter().map(move |w| (t, w))) {
        let update_percent = update_percent(w)?;
        // The previous workload's deferred page writes stay out of this one;
        // this one's are written by the checkpoint at its end, counted in
        // its bytes written and in its server CPU (as a checkpoint during
        // it would be), not in its seconds.
        store.checkpoint().await?;
        let (fsyncs_before, io_before) = (store.fsyncs().await?, store.io().await?);
        let (server_before, client_before) = (store.server_cpu_seconds(), measure::cpu_seconds().unwrap_or(0.0));
        let sampler = sample_disk(store.clone(), a.seconds, a.sample_seconds);
        let (ops, updates, mut lat, secs) =
            run_workload(&format!("{name} workload {w}, {threads} tasks"), &store, a, (threads, update_percent))
                .await?;
        let client_cpu = measure::cpu_seconds().unwrap_or(0.0) - client_before;
        let fsyncs = store.fsyncs().await?.saturating_sub(fsyncs_before);
        let before_checkpoint = store.server_cpu_seconds();
        store.checkpoint().await?;
        let server_after = store.server_cpu_seconds();
        let (server_cpu, checkpoint_cpu) = (server_after - server_before, server_after - before_checkpoint);
        let (samples, io_after) = (sampler.await??, store.io().await?);
        lat.sort_unstable();
        rows.push(json!({
            "system": name,
            "workload": w,
            "threads": threads,
            "ops": ops,
            "seconds": secs,
            "ops_per_sec": ops as f64 / secs,
            "p50_us": percentile(&lat, 0.50),
            "p99_us": percentile(&lat, 0.99),
            "p999_us": percentile(&lat, 0.999),
            "server_cpu_us_per_op": server_cpu * 1e6 / ops.max(1) as f64,
            // The part of it spent in the closing checkpoint.
            "checkpoint_cpu_us_per_op": checkpoint_cpu * 1e6 / ops.max(1) as f64,
            "client_cpu_us_per_op": client_cpu * 1e6 / ops.max(1) as f64,
            "updates": updates,
            "fsyncs": fsyncs,
            "updates_per_fsync": if fsyncs > 0 && updates > 0 { json!(updates as f64 / fsyncs as f64) } else { json!(null) },
            "load_seconds": if name == CEILING { json!(null) } else { json!(load_secs) },
            "load_records_per_sec": if name == CEILING { json!(null) } else { json!(a.records as f64 / load_secs) },
            "load_io": load_io,
            "written": io_after.per_op_since(&io_before, ops),
            "disk_after": io_after.disk_json(),
            "allocated_bytes_after": io_after.allocated_bytes(),
            "disk_over_time": samples,
        }));
    }
    Ok(rows)
}

/// A workload's share of updates, in percent.
fn update_percent(w: &str) -> BenchResult<u32> {
    match w {
        "a" => Ok(50),
        "b" => Ok(5),
        "c" => Ok(0),
        "u" => Ok(100),
        other => Err(format!("unknown workload {other:?} (a, b, c or u)").into()),
    }
}

/// Sample file sizes on disk every `every` seconds for `seconds` (none
/// when `every` is 0).
fn sample_disk<S: Store>(
    store: Arc<S>,
    seconds: u64,
    every: u64,
) -> tokio::task::JoinHandle<BenchResult<Vec<serde_json::Value>>> {
    tokio::spawn(async move {
        let (start, mut samples) = (Instant::now(), Vec::new());
        while every > 0 && start.elapsed() + Duration::from_secs(every) <= Duration::from_secs(seconds) {
            tokio::time::sleep(Duration::from_secs(every)).await;
            let r = store.io().await?;
            samples.push(json!({
                "t_s": start.elapsed().as_secs_f64(),
                "allocated_bytes": r.allocated_bytes(),
                "disk": r.disk_json(),
            }));
        }
        Ok(samples)
    })
}

/// The system name of one ArborDB configuration: `arbordb` with the
/// defaults, else its options.
fn arbordb_name(compressor: storage::Compressor, punch_every: u64) -> String {
    let default = storage::Config::default();
    if compressor == default.table_compressor && punch_every == default.punch_every_blocks {
        return "arbordb".to_string();
    }
    format!("arbordb[{},punch={punch_every}]", compressor.name())
}

async fn run_async(a: YcsbArgs) -> BenchResult<()> {
    if a.threads.is_empty() || a.threads.contains(&0) {
        return Err("--threads needs positive client task counts".into());
    }
    for w in &a.workloads {
        update_percent(w)?;
    }
    let mut rows = Vec::new();
    let mut arbordb_systems = Vec::new();
    // ArborDB, once per configuration.
    for (&compressor, &punch) in
        a.arbordb_compressors.iter().flat_map(|c| a.arbordb_punch_every.iter().map(move |p| (c, p)))
    {
        let name = arbordb_name(compressor, punch);
        let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new().prefix("arbordb-ycsb-").tempdir_in(parent)?;
        let (port, dbpath) = (free_port()?, dir.path().join("db"));
        let server = ServerProcess(
            Command::new(arbordb_bin(&a)?)
                .args(["serve", "--dbpath"])
                .arg(&dbpath)
                .args(["--port", &port.to_string()])
                .args(["--block-compressor", compressor.name(), "--punch-every-blocks", &punch.to_string()])
                .args(if a.arbordb_cache_mib > 0 {
                    vec!["--cache-mib".to_string(), a.arbordb_cache_mib.to_string()]
                } else {
                    Vec::new()
                })
                .stderr(Stdio::null())
                .spawn()?,
        );
        let store = mongo_store(port, &a, server.0.id(), Some(dbpath)).await?;
        rows.extend(bench_system(&name, Arc::new(store), &a).await?);
        arbordb_systems.push(name);
        drop(server);
    }
    // PostgreSQL.
    if !a.skip_peer {
        let out = Command::new(&a.postgres_local).arg("start").output().map_err(|e| {
            format!("cannot run {} (use --skip-peer to run ArborDB alone): {e}", a.postgres_local.display())
        })?;
        if !out.status.success() {
            return Err(format!("postgres-local start failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let _peer = PeerProcess(a.postgres_local.clone());
        let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut conns = Vec::new();
        for i in 0..max_threads(&a).max(LOAD_TASKS as usize) {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            if i == 0 {
                client.batch_execute("CREATE TABLE usertable (ycsb_key text PRIMARY KEY, doc jsonb NOT NULL)").await?;
            }
            let select = client.prepare("SELECT doc FROM usertable WHERE ycsb_key = $1").await?;
            let update = client
                .prepare("UPDATE usertable SET doc = jsonb_set(doc, $2::text[], $3::text::jsonb) WHERE ycsb_key = $1")
                .await?;
            conns.push((client, select, update));
        }
        rows.extend(bench_system("postgresql", Arc::new(Postgres { conns }), &a).await?);
    }
    // The driver's ceiling: the same client code against prepared replies.
    if a.driver_ceiling {
        let port = free_port()?;
        let server = ServerProcess(
            Command::new(std::env::current_exe()?).args(["canned-server", "--port", &port.to_string()]).spawn()?,
        );
        let store = mongo_store(port, &a, server.0.id(), None).await?;
        rows.extend(bench_system(CEILING, Arc::new(store), &a).await?);
    }
    let (mut ratios, mut server_cpu_ratios) = (serde_json::Map::new(), serde_json::Map::new());
    let mut ceiling_ratios = serde_json::Map::new();
    // Keyed "workload@tasks" (`a@8`), prefixed by the ArborDB
    // configuration when it is not the default one.
    for (&t, w) in a.threads.iter().flat_map(|t| a.workloads.iter().map(move |w| (t, w))) {
        let field = |sys: &str, name: &str| {
            rows.iter()
                .find(|r| r["system"] == sys && r["workload"] == w.as_str() && r["threads"] == t)
                .and_then(|r| r[name].as_f64())
        };
        let key = format!("{w}@{t}");
        if let (Some(x), Some(y)) = (field(CEILING, "ops_per_sec"), field("postgresql", "ops_per_sec")) {
            ceiling_ratios.insert(key.clone(), json!(x / y));
        }
        for sys in &arbordb_systems {
            let key = if sys == "arbordb" { key.clone() } else { format!("{sys} {key}") };
            if let (Some(x), Some(y)) = (field(sys, "ops_per_sec"), field("postgresql", "ops_per_sec")) {
                ratios.insert(key.clone(), json!(x / y));
            }
            let cpu = |sys| field(sys, "server_cpu_us_per_op").filter(|c| *c > 0.0);
            if let (Some(x), Some(y)) = (cpu(sys), cpu("postgresql")) {
                server_cpu_ratios.insert(key, json!(y / x));
            }
        }
    }
    println!(
        "{:<26} {:>8} {:>6} {:>12} {:>9} {:>9} {:>9} {:>10} {:>14} {:>12} {:>14} {:>13}",
        "system",
        "workload",
        "tasks",
        "ops/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "load s",
        "server cpu us",
        "(checkpoint)",
        "client cpu us",
        "updates/fsync"
    );
    for r in &rows {
        println!(
            "{:<26} {:>8} {:>6} {:>12.0} {:>9} {:>9} {:>9} {:>10.1} {:>14.1} {:>12.1} {:>14.1} {:>13}",
            r["system"].as_str().unwrap_or(""),
            r["workload"].as_str().unwrap_or(""),
            r["threads"].as_u64().unwrap_or(0),
            r["ops_per_sec"].as_f64().unwrap_or(0.0),
            r["p50_us"].as_u64().unwrap_or(0),
            r["p99_us"].as_u64().unwrap_or(0),
            r["p999_us"].as_u64().unwrap_or(0),
            r["load_seconds"].as_f64().unwrap_or(0.0),
            r["server_cpu_us_per_op"].as_f64().unwrap_or(0.0),
            r["checkpoint_cpu_us_per_op"].as_f64().unwrap_or(0.0),
            r["client_cpu_us_per_op"].as_f64().unwrap_or(0.0),
            r["updates_per_fsync"].as_f64().map_or("-".to_string(), |u| format!("{u:.2}"))
        );
    }
    print_io(&rows);
    for (w, r) in &ratios {
        println!("workload {w} tasks: ArborDB / PostgreSQL throughput = {:.2}x", r.as_f64().unwrap_or(0.0));
    }
    for (w, r) in &ceiling_ratios {
        println!(
            "workload {w} tasks: driver ceiling (a server doing no work) / PostgreSQL throughput = {:.2}x",
            r.as_f64().unwrap_or(0.0)
        );
    }
    for (w, r) in &server_cpu_ratios {
        println!(
            "workload {w} tasks: server CPU per operation, PostgreSQL / ArborDB = {:.2}x (above 1: ArborDB uses less)",
            r.as_f64().unwrap_or(0.0)
        );
    }
    let doc = json!({
        "benchmark": "ycsb (W2)",
        "time": measure::utc_timestamp_compact(),
        "records": a.records,
        "fields": FIELDS,
        "field_bytes": FIELD_BYTES,
        "client_tasks": a.threads.clone(),
        "arbordb_cache_mib": if a.arbordb_cache_mib > 0 { json!(a.arbordb_cache_mib) } else { json!("server default (512)") },
        "seconds_per_workload": a.seconds,
        "key_distribution": "scrambled zipfian, theta 0.99",
        "durability": "ArborDB: journal fsync per acknowledged write (group commit); PostgreSQL: synchronous_commit=on, fsync=on",
        "reads": "ArborDB: find_one({_id}) into RawDocumentBuf; PostgreSQL: prepared SELECT doc, the row's jsonb undecoded",
        "machine_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "client_runtime_threads": if a.client_threads == 0 { json!("one per CPU") } else { json!(a.client_threads) },
        "arbordb_configurations": arbordb_systems,
        "results": rows,
        "arbordb_over_postgresql_throughput": ratios,
        "postgresql_over_arbordb_server_cpu_per_op": server_cpu_ratios,
        "driver_ceiling_over_postgresql_throughput": ceiling_ratios,
    });
    report::save(&a.out, &doc)?;
    Ok(())
}

/// Bytes written per operation by file kind, and allocated bytes on disk
/// at the end of each workload.
fn print_io(rows: &[serde_json::Value]) {
    let kinds = ["collection", "index", "metadata", "journal", "wal", "relations"];
    print!("{:<26} {:>8} {:>6}", "bytes written per op", "workload", "tasks");
    for k in kinds {
        print!(" {k:>10}");
    }
    println!(" {:>8} {:>12}", "punched", "on disk MiB");
    for r in rows.iter().filter(|r| r["system"] != CEILING) {
        print!(
            "{:<26} {:>8} {:>6}",
            r["system"].as_str().unwrap_or(""),
            r["workload"].as_str().unwrap_or(""),
            r["threads"].as_u64().unwrap_or(0)
        );
        for k in kinds {
            match r["written"][format!("file.{k}_bytes_per_op")].as_f64() {
                Some(b) => print!(" {b:>10.0}"),
                None => print!(" {:>10}", "-"),
            }
        }
        let punched = r["written"]["blocks_punched"].as_u64().map_or("-".to_string(), |n| n.to_string());
        let mib = r["allocated_bytes_after"].as_f64().unwrap_or(0.0) / (1u64 << 20) as f64;
        println!(" {punched:>8} {mib:>12.1}");
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in rows.iter().filter(|r| r["system"] != CEILING) {
        let system = r["system"].as_str().unwrap_or("");
        if seen.insert(system) {
            let load = &r["load_io"];
            let mib = |f: &str| load[f].as_f64().unwrap_or(0.0) / (1u64 << 20) as f64;
            let per_record = |k: &str| load["written"][format!("file.{k}_bytes_per_op")].as_f64();
            println!(
                "{system}: load wrote {:.0} collection + {:.0} index (PostgreSQL: relations) + {:.0} journal/WAL \
                 bytes per record; {:.1} MiB on disk before its checkpoint, {:.1} MiB after",
                per_record("collection").unwrap_or(0.0),
                per_record("index").or(per_record("relations")).unwrap_or(0.0),
                per_record("journal").or(per_record("wal")).unwrap_or(0.0),
                mib("allocated_bytes_before_checkpoint"),
                mib("allocated_bytes_after_checkpoint"),
            );
        }
    }
}

pub fn run(a: YcsbArgs) -> BenchResult<()> {
    let runtime = match a.client_threads {
        0 => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
    };
    runtime.block_on(run_async(a))
}
