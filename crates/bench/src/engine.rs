//! `arbordb-bench engine`: the W6 raw storage engine benchmark, db_bench
//! style, comparing ArborDB's storage engine with redb and LMDB in one run.
//!
//! Layout: this file holds the command-line arguments, the small
//! [`BenchEngine`] trait every engine implements (one file per engine:
//! `arbor.rs`, `redb_peer.rs`, `lmdb_peer.rs`) and the driver that runs the
//! phases in order. `workload.rs` generates keys and values and runs one
//! phase on N threads; `measure.rs` reads the process I/O counters and
//! directory sizes; `report.rs` writes the JSON and the stdout table.
//!
//! Invariants:
//! 1. Every engine runs with the same durability: `write_batch` returns only
//!    once the batch is fsynced. Every row states durability and batching.
//! 2. Phases run one at a time, so the process-wide `/proc/self/io`
//!    counters read around a phase belong to that phase (and to the
//!    engine's own background threads, which is intended).
//! 3. Read phases run on the database the preceding fill phase of the same
//!    engine built, whose keys are exactly `0..keys_in_db`; the readers
//!    check that every key is found and that scans return consecutive keys.

use crate::workload::{self, PhaseSpec, Workload};
use crate::{arbor, lmdb_peer, measure, redb_peer, report, BenchResult};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The operations the benchmark needs from an engine. Implementations are
/// shared by all worker threads of a phase.
pub trait BenchEngine: Send + Sync {
    /// Commit `puts` as one transaction; durable (fsynced) when this returns.
    fn write_batch(&self, puts: &[(&[u8], &[u8])]) -> BenchResult<()>;

    /// Copy the value of `key` into `out`; `false` if the key is absent.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool>;

    /// Visit up to `entries_max` entries in key order, starting at the first
    /// key >= `start`; returns how many were visited.
    fn scan(&self, start: &[u8], entries_max: u64, visit: &mut dyn FnMut(&[u8], &[u8])) -> BenchResult<u64>;

    /// Finish deferred work so the data sits in its final on-disk form
    /// (ArborDB: a checkpoint). Timed separately from the phase.
    fn settle(&self) -> BenchResult<()>;

    /// Close cleanly, releasing the data directory.
    fn close(self: Box<Self>) -> BenchResult<()>;
}

/// How every engine is opened; the durability is fixed (invariant 1).
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// ArborDB's checkpoint timer; `None` turns it off.
    pub arbordb_checkpoint_interval: Option<Duration>,
    /// Cache size for ArborDB and redb; `None`: each engine's default.
    /// (LMDB reads through the OS page cache and has no such knob.)
    pub cache_bytes: Option<usize>,
    pub lmdb_map_size_bytes: usize,
    /// How ArborDB stores its leaf pages.
    pub arbordb_compressor: storage::Compressor,
    /// ArborDB reads and writes its data files by direct I/O.
    pub arbordb_direct_io: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    Arbordb,
    /// ArborDB's engine with its table in the write-optimized format
    /// (issue 22: its reads against the B+tree's).
    #[value(name = "arbordb-wo")]
    ArbordbWo,
    Redb,
    Lmdb,
    /// Only in a build with the `rocksdb` feature.
    Rocksdb,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Arbordb => "arbordb",
            EngineKind::ArbordbWo => "arbordb-wo",
            EngineKind::Redb => "redb",
            EngineKind::Lmdb => "lmdb",
            EngineKind::Rocksdb => "rocksdb",
        }
    }

    /// What "fsync per commit" means for this engine, for the JSON config.
    pub(crate) fn durability_detail(self, opts: &OpenOptions) -> String {
        match self {
            EngineKind::ArbordbWo => {
                format!(
                    "{}; the table in the write-optimized format, its settle merging every run, the \
                     memtable included, into one first (more than a quiet table's idle merge does)",
                    EngineKind::Arbordb.durability_detail(opts)
                )
            }
            EngineKind::Arbordb => format!(
                "SyncMode::Fsync: the journal is fsynced before write() returns (concurrent \
                 commits may share one fsync); checkpoint timer {}, checkpoint after 2 GiB of \
                 journal (engine default), plus an explicit checkpoint after each write phase, \
                 timed separately as settle; leaf pages stored {}",
                match opts.arbordb_checkpoint_interval {
                    Some(d) => format!("{} s", d.as_secs()),
                    None => "off".to_string(),
                },
                opts.arbordb_compressor.name()
            ),
            EngineKind::Redb => "redb 4: Durability::Immediate set on every write transaction; \
                                 redb default cache (1 GiB)"
                .to_string(),
            EngineKind::Lmdb => format!(
                "heed 0.23 (LMDB 0.9): default env flags (no NOSYNC, NOMETASYNC or WRITEMAP): every commit \
                 is fsynced; map size {} GiB",
                opts.lmdb_map_size_bytes >> 30
            ),
            EngineKind::Rocksdb => format!(
                "rocksdb 0.24 (RocksDB 10.4): WriteOptions sync = true on every write batch (the WAL \
                 is fsynced); no compression; block cache {} MiB; settle = flush of the memtable",
                opts.cache_bytes.unwrap_or(512 << 20) >> 20
            ),
        }
    }

    pub(crate) fn open(self, dir: &Path, opts: &OpenOptions) -> BenchResult<Box<dyn BenchEngine>> {
        std::fs::create_dir_all(dir)?;
        Ok(match self {
            EngineKind::Arbordb => Box::new(arbor::ArborEngine::open(dir, opts, storage::TableFormat::BTree)?),
            EngineKind::ArbordbWo => {
                Box::new(arbor::ArborEngine::open(dir, opts, storage::TableFormat::WriteOptimized)?)
            }
            EngineKind::Redb => Box::new(redb_peer::RedbEngine::open(dir, opts)?),
            EngineKind::Lmdb => Box::new(lmdb_peer::LmdbEngine::open(dir, opts)?),
            #[cfg(feature = "rocksdb")]
            EngineKind::Rocksdb => Box::new(crate::rocksdb_peer::RocksEngine::open(dir, opts)?),
            #[cfg(not(feature = "rocksdb"))]
            EngineKind::Rocksdb => {
                return Err("this arbordb-bench was built without RocksDB: \
                            cargo run --release -p arbordb-bench --features rocksdb -- engine ..."
                    .into())
            }
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct EngineBenchArgs {
    /// Keys per database (fills write 0..num; reads run num ops).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) num: u64,
    /// Cap on durable commits per write phase: a write phase does
    /// min(num, num_sync * batch) ops, so with --batch 1 it does num_sync.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) num_sync: u64,
    /// Read ops per read phase (default: --num).
    #[arg(long)]
    pub(crate) reads: Option<u64>,
    /// Thread counts to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub(crate) threads: Vec<usize>,
    /// Ops per durable commit, comma separated. Reads run once per engine and
    /// thread count, on the database of the largest batch size.
    #[arg(long, value_delimiter = ',', default_value = "1000,1")]
    pub(crate) batch: Vec<usize>,
    /// Engines to run, comma separated (rocksdb needs a build with
    /// `--features rocksdb`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "arbordb,redb,lmdb")]
    pub(crate) engines: Vec<EngineKind>,
    /// Where to write the JSON (default bench/results/engine-<UTC timestamp>.json).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Parent of the data directories (a fresh temporary directory is made
    /// inside it and removed at the end). Default: the system temp dir.
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// ArborDB checkpoint timer in seconds; 0 turns it off.
    #[arg(long, default_value_t = 60)]
    pub(crate) arbordb_checkpoint_secs: u64,
    /// Cache size in MiB for ArborDB and redb (default: their defaults,
    /// 512 MiB and 1 GiB). LMDB has no cache of its own.
    #[arg(long)]
    pub(crate) cache_mib: Option<usize>,
    /// How ArborDB stores its leaf pages (its default: snappy).
    #[arg(long, default_value = "snappy")]
    pub(crate) arbordb_compressor: storage::Compressor,
    /// ArborDB reads and writes its data files by direct I/O (O_DIRECT), so
    /// a miss in its cache reads the device, not the OS page cache.
    #[arg(long)]
    pub(crate) arbordb_direct_io: bool,
    /// Entries each seekrandom op reads from the key it seeks (db_bench: 11).
    #[arg(long, default_value_t = workload::SEEK_ENTRIES)]
    pub(crate) seek_entries: u64,
    /// Seed of every random choice (key order, values).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

fn validate(a: &EngineBenchArgs) -> BenchResult<()> {
    let fail = |m: &str| -> BenchResult<()> { Err(m.into()) };
    if a.num == 0 || a.num_sync == 0 || a.reads == Some(0) || a.seek_entries == 0 {
        return fail("--num, --num-sync, --reads and --seek-entries must be positive");
    }
    if a.num >= 10u64.pow(16) {
        return fail("--num must be below 10^16 (keys are 16 decimal digits)");
    }
    if a.threads.is_empty() || a.threads.contains(&0) {
        return fail("--threads needs positive thread counts");
    }
    if a.batch.is_empty() || a.batch.contains(&0) {
        return fail("--batch needs positive batch sizes");
    }
    if a.engines.is_empty() {
        return fail("--engines needs at least one engine");
    }
    Ok(())
}

/// Everything the driver needs besides the engine and thread count.
struct Plan {
    args: EngineBenchArgs,
    opts: OpenOptions,
    data_root: tempfile::TempDir,
    values: workload::ValueSource,
    batch_for_reads: usize,
}

pub fn run(mut args: EngineBenchArgs) -> BenchResult<()> {
    validate(&args)?;
    args.batch.dedup();
    args.threads.dedup();
    let opts = OpenOptions {
        arbordb_checkpoint_interval: match args.arbordb_checkpoint_secs {
            0 => None,
            s => Some(Duration::from_secs(s)),
        },
        lmdb_map_size_bytes: 8 << 30,
        cache_bytes: args.cache_mib.map(|m| m << 20),
        arbordb_compressor: args.arbordb_compressor,
        arbordb_direct_io: args.arbordb_direct_io,
    };
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent)?;
    let data_root = tempfile::Builder::new().prefix("arbordb-bench-").tempdir_in(&parent)?;
    let fs_type = measure::fs_type(data_root.path());
    if matches!(fs_type.as_deref(), Some("tmpfs" | "ramfs")) {
        eprintln!(
            "warning: {} is on {}: fsync costs nothing there; use --dir on a real disk",
            data_root.path().display(),
            fs_type.as_deref().unwrap_or("?")
        );
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench/results/engine-{}.json", measure::utc_timestamp_compact())));
    let batch_for_reads = *args.batch.iter().max().expect("validated non-empty");
    let plan = Plan { values: workload::ValueSource::new(args.seed), args, opts, data_root, batch_for_reads };
    eprintln!(
        "engine bench: num {} num_sync {} threads {:?} batch {:?} engines {:?}; data in {} ({})",
        plan.args.num,
        plan.args.num_sync,
        plan.args.threads,
        plan.args.batch,
        plan.args.engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
        plan.data_root.path().display(),
        fs_type.as_deref().unwrap_or("unknown fs"),
    );
    let started_at = measure::utc_timestamp_iso();
    let mut rows = Vec::new();
    for &threads in &plan.args.threads {
        for &batch in &plan.args.batch {
            for &engine in &plan.args.engines {
                run_engine_config(&plan, engine, threads, batch, &mut rows)?;
            }
        }
    }
    let doc = report::document(&plan.args, &plan.opts, &started_at, fs_type, &rows);
    report::write_json(&out, &doc)?;
    report::print_table(&rows);
    println!("\nJSON written to {}", out.display());
    Ok(())
}

/// One engine, thread count and batch size: fillseq on a fresh database,
/// then fillrandom, overwrite and (for the read batch size) the read phases
/// on a second fresh database.
fn run_engine_config(
    plan: &Plan,
    engine: EngineKind,
    threads: usize,
    batch: usize,
    rows: &mut Vec<report::Row>,
) -> BenchResult<()> {
    let a = &plan.args;
    let write_ops = a.num.min(a.num_sync.saturating_mul(batch as u64));
    let keys_in_db = write_ops;
    let spec = |workload, ops| PhaseSpec {
        engine,
        workload,
        threads,
        batch,
        ops,
        keys_in_db,
        seek_entries: a.seek_entries,
        seed: a.seed,
    };
    let dir_name = |what: &str| format!("{}-t{threads}-b{batch}-{what}", engine.name());
    let ctx = PhaseContext { plan, engine };

    let dir = plan.data_root.path().join(dir_name("seq"));
    let db = engine.open(&dir, &plan.opts)?;
    rows.push(ctx.run(&*db, &dir, &spec(Workload::FillSeq, write_ops))?);
    db.close()?;
    std::fs::remove_dir_all(&dir)?;

    let dir = plan.data_root.path().join(dir_name("random"));
    let db = engine.open(&dir, &plan.opts)?;
    rows.push(ctx.run(&*db, &dir, &spec(Workload::FillRandom, write_ops))?);
    rows.push(ctx.run(&*db, &dir, &spec(Workload::Overwrite, write_ops))?);
    if batch == plan.batch_for_reads {
        let reads = a.reads.unwrap_or(a.num);
        for w in [Workload::ReadRandom, Workload::ReadSeq, Workload::SeekRandom] {
            let ops = if w == Workload::ReadSeq { keys_in_db } else { reads };
            rows.push(ctx.run(&*db, &dir, &spec(w, ops))?);
        }
    }
    db.close()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

struct PhaseContext<'a> {
    plan: &'a Plan,
    engine: EngineKind,
}

impl PhaseContext<'_> {
    /// Run one phase, measure it, print its line on stderr, return its row.
    fn run(&self, db: &dyn BenchEngine, dir: &Path, spec: &PhaseSpec) -> BenchResult<report::Row> {
        assert_eq!(spec.engine, self.engine);
        let io_before = measure::IoCounters::read();
        let outcome = workload::run_phase(db, spec, &self.plan.values)?;
        let io_after = measure::IoCounters::read();
        let (settle, io_settled) = if spec.workload.is_write() {
            let t = std::time::Instant::now();
            db.settle()?;
            (Some(t.elapsed()), measure::IoCounters::read())
        } else {
            (None, io_after)
        };
        let row = report::Row::new(
            spec,
            &outcome,
            measure::IoDelta::between(io_before, io_after),
            settle.map(|d| (d, measure::IoDelta::between(io_after, io_settled))),
            spec.workload.is_write().then(|| measure::dir_size(dir)).transpose()?,
        );
        eprintln!("{}", row.progress_line());
        Ok(row)
    }
}
