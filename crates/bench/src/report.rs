//! Results: one [`Row`] per phase, the JSON document (machine, commit,
//! config, results, ArborDB-to-peer ratios), the progress line on stderr and
//! the compact table on stdout.

use crate::engine::EngineBenchArgs;
use crate::engine::EngineKind;
use crate::engine::OpenOptions;
use crate::measure::{self, DirSize, IoDelta};
use crate::workload::{PhaseOutcome, PhaseSpec, KEY_BYTES, VALUE_BYTES};
use crate::BenchResult;
use serde::Serialize;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// What every row's `durability` says; every engine runs this way.
pub const DURABILITY: &str = "fsync per commit";

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub engine: &'static str,
    pub workload: &'static str,
    pub threads: usize,
    /// Puts per durable commit; `None` for read phases.
    pub batch_ops_per_commit: Option<usize>,
    pub durability: &'static str,
    pub ops: u64,
    pub keys_in_db: u64,
    pub commits: Option<u64>,
    pub entries_read: Option<u64>,
    pub seconds: f64,
    pub ops_per_sec: f64,
    /// `/proc/self/io` write_bytes during the timed phase, per op.
    pub bytes_written_per_op: Option<f64>,
    /// `/proc/self/io` wchar (bytes given to write calls) during the phase, per op.
    pub wchar_per_op: Option<f64>,
    /// Write phases: the untimed settle step after the phase (ArborDB: a checkpoint).
    pub settle_seconds: Option<f64>,
    pub settle_bytes_written_per_op: Option<f64>,
    /// Phase plus settle: the write cost of getting the data into its final form.
    pub total_bytes_written_per_op: Option<f64>,
    /// Write phases: size of the data directory after the settle step.
    pub data_dir_bytes: Option<u64>,
    pub data_dir_allocated_bytes: Option<u64>,
    /// The part of `data_dir_bytes` in ArborDB's journal directory.
    pub data_dir_journal_bytes: Option<u64>,
    /// Resident set of the benchmark process when the phase ended.
    pub rss_after_bytes: Option<u64>,
}

fn per_op(bytes: u64, ops: u64) -> f64 {
    bytes as f64 / ops.max(1) as f64
}

impl Row {
    pub fn new(
        spec: &PhaseSpec,
        outcome: &PhaseOutcome,
        io: Option<IoDelta>,
        settle: Option<(Duration, Option<IoDelta>)>,
        dir: Option<DirSize>,
    ) -> Row {
        let write = spec.workload.is_write();
        let seconds = outcome.elapsed.as_secs_f64();
        let settle_io = settle.and_then(|(_, io)| io);
        Row {
            engine: spec.engine.name(),
            workload: spec.workload.name(),
            threads: spec.threads,
            batch_ops_per_commit: write.then_some(spec.batch),
            durability: DURABILITY,
            ops: outcome.ops,
            keys_in_db: spec.keys_in_db,
            commits: write.then_some(outcome.commits),
            entries_read: (!write).then_some(outcome.entries_read),
            seconds,
            ops_per_sec: outcome.ops as f64 / seconds.max(1e-9),
            bytes_written_per_op: io.map(|d| per_op(d.write_bytes, outcome.ops)),
            wchar_per_op: io.map(|d| per_op(d.wchar, outcome.ops)),
            settle_seconds: settle.map(|(d, _)| d.as_secs_f64()),
            settle_bytes_written_per_op: settle_io.map(|d| per_op(d.write_bytes, outcome.ops)),
            total_bytes_written_per_op: match (io, settle_io) {
                (Some(a), Some(b)) => Some(per_op(a.write_bytes + b.write_bytes, outcome.ops)),
                (Some(a), None) if !write => Some(per_op(a.write_bytes, outcome.ops)),
                _ => None,
            },
            data_dir_bytes: dir.map(|d| d.bytes),
            data_dir_allocated_bytes: dir.map(|d| d.allocated_bytes),
            data_dir_journal_bytes: dir.map(|d| d.journal_bytes),
            rss_after_bytes: measure::rss_bytes(),
        }
    }

    fn batch_label(&self) -> String {
        self.batch_ops_per_commit.map_or_else(|| "-".to_string(), |b| b.to_string())
    }

    /// The line printed on stderr when a phase ends.
    pub fn progress_line(&self) -> String {
        let mut line = format!(
            "{:<8} {:<10} threads {} batch {:>5}: {:>9} ops in {:>8.3} s = {:>10.0} ops/s",
            self.engine,
            self.workload,
            self.threads,
            self.batch_label(),
            self.ops,
            self.seconds,
            self.ops_per_sec
        );
        if let Some(b) = self.bytes_written_per_op {
            line += &format!(", {b:.0} B written/op");
        }
        if let (Some(s), Some(b)) = (self.settle_seconds, self.settle_bytes_written_per_op) {
            line += &format!(" (+ settle {s:.3} s, {b:.0} B/op)");
        }
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        if let Some(d) = self.data_dir_bytes {
            line += &format!(", dir {:.1} MiB", mib(d));
        }
        if let Some(j) = self.data_dir_journal_bytes.filter(|&j| j > 0) {
            line += &format!(" (journal {:.1} MiB)", mib(j));
        }
        if let Some(r) = self.rss_after_bytes {
            line += &format!(", RSS {:.0} MiB", mib(r));
        }
        line
    }

    fn group(&self) -> (&'static str, usize, Option<usize>) {
        (self.workload, self.threads, self.batch_ops_per_commit)
    }
}

#[derive(Debug, Serialize)]
struct Ratio {
    workload: &'static str,
    threads: usize,
    batch_ops_per_commit: Option<usize>,
    peer: &'static str,
    /// ArborDB ops/s divided by the peer's: above 1 means ArborDB is faster.
    ops_per_sec_ratio: f64,
    /// ArborDB bytes written per op (phase + settle) divided by the peer's.
    total_bytes_written_per_op_ratio: Option<f64>,
    data_dir_bytes_ratio: Option<f64>,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for ours in rows.iter().filter(|r| r.engine == EngineKind::Arbordb.name()) {
        for peer in rows.iter().filter(|r| r.engine != ours.engine && r.group() == ours.group()) {
            out.push(Ratio {
                workload: ours.workload,
                threads: ours.threads,
                batch_ops_per_commit: ours.batch_ops_per_commit,
                peer: peer.engine,
                ops_per_sec_ratio: ours.ops_per_sec / peer.ops_per_sec.max(1e-9),
                total_bytes_written_per_op_ratio: ratio(
                    ours.total_bytes_written_per_op,
                    peer.total_bytes_written_per_op,
                ),
                data_dir_bytes_ratio: ratio(
                    ours.data_dir_bytes.map(|b| b as f64),
                    peer.data_dir_bytes.map(|b| b as f64),
                ),
            });
        }
    }
    out
}

pub fn document(
    args: &EngineBenchArgs,
    opts: &OpenOptions,
    started_at: &str,
    data_dir_fs: Option<String>,
    rows: &[Row],
) -> serde_json::Value {
    let durability_detail: serde_json::Map<String, serde_json::Value> =
        args.engines.iter().map(|e| (e.name().to_string(), json!(e.durability_detail(opts)))).collect();
    json!({
        "benchmark": "engine (W6)",
        "started_at": started_at,
        "machine": {
            "cpus": measure::cpus(),
            "kernel": measure::kernel(),
            "memory_total_bytes": measure::memory_total_bytes(),
            "data_dir_fs": data_dir_fs,
        },
        "commit": measure::git_commit(),
        "config": {
            "num": args.num,
            "num_sync": args.num_sync,
            "reads": args.reads.unwrap_or(args.num),
            "threads": args.threads,
            "batch_ops_per_commit": args.batch,
            "engines": args.engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
            "seed": args.seed,
            "key_bytes": KEY_BYTES,
            "value_bytes": VALUE_BYTES,
            "seekrandom_entries_per_op": args.seek_entries,
            "durability": DURABILITY,
            "durability_detail": durability_detail,
            "arbordb_checkpoint_interval_secs": opts.arbordb_checkpoint_interval.map(|d| d.as_secs()),
            "cache_bytes_arbordb_and_redb": opts.cache_bytes,
            "arbordb_compressor": opts.arbordb_compressor.name(),
            "arbordb_direct_io": opts.arbordb_direct_io,
            "notes": [
                "Write phases do min(num, num_sync * batch) puts; keys_in_db is what the fill wrote.",
                "fillseq runs on a fresh database; fillrandom on a second fresh one, followed by overwrite and the read phases on that database.",
                "Read phases run once per engine and thread count, on the database of the largest batch size; their batch_ops_per_commit is null.",
                "readrandom and seekrandom use one read transaction per op (redb, LMDB); every get copies the value out.",
                format!("seekrandom: seek to a random existing key, then read it and the next entries, {} in all.", args.seek_entries),
                "readseq: each thread scans its own contiguous key slice once; ops = entries read.",
                "bytes_written_per_op: /proc/self/io write_bytes over the timed phase; settle (ArborDB checkpoint, no-op for peers) is untimed and counted separately; total = both.",
                "data_dir_bytes is measured after the settle step; data_dir_journal_bytes is the part in ArborDB's journal/, whose active file keeps already-checkpointed records until it rotates (100 MiB)."
            ],
        },
        "results": rows,
        "ratios": ratios(rows),
    })
}

pub fn write_json(path: &Path, doc: &serde_json::Value) -> BenchResult<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut text = serde_json::to_string_pretty(doc)?;
    text.push('\n');
    std::fs::write(path, text)?;
    Ok(())
}

/// `write_json`, then say where on stderr.
pub fn save(path: &Path, doc: &serde_json::Value) -> BenchResult<()> {
    write_json(path, doc)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Run a benchmark's async body on a multi-threaded runtime.
pub fn block_on<T>(body: impl std::future::Future<Output = BenchResult<T>>) -> BenchResult<T> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(body)
}

/// One line per (workload, threads, batch): each engine's ops/s, ArborDB's
/// ratio to each peer, and each engine's bytes written per op.
pub fn print_table(rows: &[Row]) {
    let mut engines: Vec<&str> = Vec::new();
    let mut groups = Vec::new();
    for r in rows {
        if !engines.contains(&r.engine) {
            engines.push(r.engine);
        }
        if !groups.contains(&r.group()) {
            groups.push(r.group());
        }
    }
    let arbor = EngineKind::Arbordb.name();
    let peers: Vec<&str> = engines.iter().copied().filter(|e| *e != arbor).collect();
    let with_ratios = engines.contains(&arbor);
    let mut header = format!("{:<10} {:>3} {:>5} {:>9}", "workload", "thr", "batch", "ops");
    for e in &engines {
        header += &format!(" {:>12}", format!("{e} op/s"));
    }
    if with_ratios {
        for p in &peers {
            header += &format!(" {:>9}", format!("arb/{p}"));
        }
    }
    for e in &engines {
        header += &format!(" {:>11}", format!("{e} B/op"));
    }
    println!("\n{header}");
    println!("{}", "-".repeat(header.len()));
    for g in groups {
        let find = |e: &str| rows.iter().find(|r| r.engine == e && r.group() == g);
        let ops = rows.iter().find(|r| r.group() == g).map_or(0, |r| r.ops);
        let batch = g.2.map_or_else(|| "-".to_string(), |b| b.to_string());
        let mut line = format!("{:<10} {:>3} {:>5} {:>9}", g.0, g.1, batch, ops);
        for e in &engines {
            line += &match find(e) {
                Some(r) => format!(" {:>12.0}", r.ops_per_sec),
                None => format!(" {:>12}", "-"),
            };
        }
        if with_ratios {
            for p in &peers {
                line += &match (find(arbor), find(p)) {
                    (Some(a), Some(b)) => format!(" {:>9.2}", a.ops_per_sec / b.ops_per_sec),
                    _ => format!(" {:>9}", "-"),
                };
            }
        }
        for e in &engines {
            line += &match find(e).and_then(|r| r.total_bytes_written_per_op) {
                Some(b) => format!(" {b:>11.0}"),
                None => format!(" {:>11}", "-"),
            };
        }
        println!("{line}");
    }
    println!(
        "\ndurability: {DURABILITY} for every engine; batch = puts per durable commit (- = read \
         phase); B/op = bytes written per op incl. settle (ArborDB checkpoint)"
    );
}
