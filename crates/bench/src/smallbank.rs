//! `arbordb-bench smallbank`: workload W5, the price of serializability, at
//! engine level.
//!
//! SmallBank (Alomari, Cahill, Fekete, Röhm, ICDE 2008): customers with a
//! savings and a checking balance (tables `savings` and `checking`, keyed by
//! customer id) and five transactions in equal shares: Balance (read-only),
//! DepositChecking, TransactSavings, Amalgamate, WriteCheck. A hotspot of
//! customers takes most of the traffic. The same mix runs for a fixed time
//! under snapshot isolation and under serializable isolation, per sync mode,
//! on a fresh database each time. Conflicted transactions are counted, not
//! retried: throughput is committed transactions per second.
//!
//! Every run records its history (each value names the transaction that
//! wrote it) and checks it with `testkit::history`: the SI rules must hold
//! in both modes, and the number of anomalies is the number of transactions
//! that had to be removed, one per cycle found, until the dependency graph
//! was acyclic. Serializable runs must show none.

use crate::measure;
use crate::BenchResult;
use clap::{Args, ValueEnum};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use storage::{Config, Engine, Isolation, StorageError, SyncMode, Table, TableConfig, Txn, TxnOptions};
use testkit::history::{self, History, TxnId};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sync {
    Fsync,
    Off,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Level {
    Snapshot,
    Serializable,
}

#[derive(Args, Debug, Clone)]
pub struct SmallBankArgs {
    /// Customers (each has a savings and a checking row).
    #[arg(long, default_value_t = 18_000)]
    customers: u32,
    /// Customers in the hotspot.
    #[arg(long, default_value_t = 100)]
    hotspot: u32,
    /// Percent of transactions that pick their customers in the hotspot.
    #[arg(long, default_value_t = 90)]
    hotspot_percent: u32,
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Runs per isolation level and sync mode; rounds alternate which level
    /// goes first, and the ratio uses the summed commits and seconds.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Isolation levels to run, comma separated (both are needed for the ratio;
    /// one alone is for profiling).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "snapshot,serializable")]
    isolation: Vec<Level>,
    /// Sync modes to run, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fsync,off")]
    sync: Vec<Sync>,
    /// Where to write the JSON (default bench/results/smallbank-<UTC timestamp>.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Parent of the data directories (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Timestamps in histories are engine timestamps times this, so read-only
/// transactions get unique commit points between their snapshot and the next commit.
const SCALE: u64 = 1 << 20;
const OPENING: i64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Balance,
    DepositChecking,
    TransactSavings,
    Amalgamate,
    WriteCheck,
}

const KINDS: [Kind; 5] =
    [Kind::Balance, Kind::DepositChecking, Kind::TransactSavings, Kind::Amalgamate, Kind::WriteCheck];

#[derive(Default)]
struct Counts {
    committed: [u64; 5],
    write_conflicts: [u64; 5],
    serialization_failures: [u64; 5],
    /// TransactSavings that would overdraw savings: rolled back by the application.
    app_rollbacks: [u64; 5],
}

struct Bank {
    savings: Table,
    checking: Table,
}

fn encode(balance: i64, writer: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&balance.to_le_bytes());
    v[8..].copy_from_slice(&writer.to_le_bytes());
    v
}

fn decode(v: &[u8]) -> (i64, u64) {
    (i64::from_le_bytes(v[..8].try_into().unwrap()), u64::from_le_bytes(v[8..16].try_into().unwrap()))
}

/// A transaction and its record for the history.
struct Recorded<'a> {
    txn: Txn,
    rec: history::Txn,
    bank: &'a Bank,
    wrote: bool,
}

impl<'a> Recorded<'a> {
    fn read(&mut self, savings: bool, cust: u32) -> storage::Result<i64> {
        let t = if savings { &self.bank.savings } else { &self.bank.checking };
        let key = key_of(savings, cust);
        let v = self.txn.get(t, &cust.to_be_bytes())?.expect("every customer has both rows");
        let (balance, writer) = decode(&v);
        self.rec = std::mem::replace(&mut self.rec, history::Txn::aborted(0, 0)).read(&key, Some(writer));
        Ok(balance)
    }

    fn write(&mut self, savings: bool, cust: u32, balance: i64) -> storage::Result<()> {
        let t = if savings { &self.bank.savings } else { &self.bank.checking };
        self.txn.put(t, &cust.to_be_bytes(), &encode(balance, self.txn.id()))?;
        self.rec = std::mem::replace(&mut self.rec, history::Txn::aborted(0, 0)).put(&key_of(savings, cust));
        self.wrote = true;
        Ok(())
    }
}

/// History key: table tag + customer.
fn key_of(savings: bool, cust: u32) -> Vec<u8> {
    let mut k = vec![if savings { b's' } else { b'c' }];
    k.extend_from_slice(&cust.to_be_bytes());
    k
}

enum Outcome {
    Committed(history::Txn),
    Aborted(history::Txn, StorageError),
    AppRollback(history::Txn),
}

fn run_one(
    engine: &Engine,
    bank: &Bank,
    opts: TxnOptions,
    kind: Kind,
    rng: &mut SmallRng,
    pick: &dyn Fn(&mut SmallRng) -> u32,
    ro_seq: &AtomicU64,
) -> Outcome {
    let opts = TxnOptions { read_only: kind == Kind::Balance, ..opts };
    let txn = engine.begin(opts).expect("begin");
    let rec = history::Txn::aborted(txn.id(), txn.read_ts() * SCALE);
    let mut r = Recorded { txn, rec, bank, wrote: false };
    let n1 = pick(rng);
    let amount = rng.gen_range(1..=100i64);
    let body = (|| -> storage::Result<bool> {
        match kind {
            Kind::Balance => {
                r.read(true, n1)?;
                r.read(false, n1)?;
            }
            Kind::DepositChecking => {
                let c = r.read(false, n1)?;
                r.write(false, n1, c + amount)?;
            }
            Kind::TransactSavings => {
                // Deposit or withdraw; overdrawing savings rolls back.
                let delta = if rng.gen_bool(0.5) { amount } else { -amount * 20 };
                let s = r.read(true, n1)?;
                if s + delta < 0 {
                    return Ok(false);
                }
                r.write(true, n1, s + delta)?;
            }
            Kind::Amalgamate => {
                let mut n2 = pick(rng);
                while n2 == n1 {
                    n2 = pick(rng);
                }
                let s1 = r.read(true, n1)?;
                let c1 = r.read(false, n1)?;
                let c2 = r.read(false, n2)?;
                r.write(true, n1, 0)?;
                r.write(false, n1, 0)?;
                r.write(false, n2, c2 + s1 + c1)?;
            }
            Kind::WriteCheck => {
                let s = r.read(true, n1)?;
                let c = r.read(false, n1)?;
                let penalty = if s + c < amount { 1 } else { 0 };
                r.write(false, n1, c - amount - penalty)?;
            }
        }
        Ok(true)
    })();
    let Recorded { txn, mut rec, wrote, .. } = r;
    let read_ts = txn.read_ts();
    match body {
        Ok(false) => {
            txn.rollback();
            Outcome::AppRollback(rec)
        }
        Err(e) => {
            txn.rollback();
            Outcome::Aborted(rec, e)
        }
        Ok(true) => match txn.commit() {
            Ok(ts) => {
                let at = if wrote { ts * SCALE } else { read_ts * SCALE + ro_seq.fetch_add(1, Ordering::Relaxed) };
                rec.outcome = history::Outcome::Committed(history::Timestamp(at));
                Outcome::Committed(rec)
            }
            Err(e) => Outcome::Aborted(rec, e),
        },
    }
}

/// Transactions that must go, one per cycle, before the graph is acyclic.
pub(crate) fn anomalies(h: &History) -> (u64, Option<String>) {
    let mut graph = history::dependency_graph(h);
    let mut removed = 0;
    let mut example = None;
    while let Some(cycle) = graph.find_cycle() {
        if example.is_none() {
            example = Some(format!("{:?}", cycle.edges.iter().map(|e| (e.from.0, e.to.0, e.kind)).collect::<Vec<_>>()));
        }
        let victim: TxnId = cycle.edges[0].to;
        graph.nodes.remove(&victim);
        graph.edges.retain(|e| e.from != victim && e.to != victim);
        removed += 1;
    }
    (removed, example)
}

fn load(engine: &Engine, customers: u32) -> BenchResult<(Bank, history::Txn)> {
    let savings = engine.create_table("savings", TableConfig::default())?;
    let checking = engine.create_table("checking", TableConfig::default())?;
    let txn = engine.begin(TxnOptions::default())?;
    let mut rec = history::Txn::aborted(txn.id(), txn.read_ts() * SCALE);
    for c in 0..customers {
        txn.put(&savings, &c.to_be_bytes(), &encode(OPENING, txn.id()))?;
        txn.put(&checking, &c.to_be_bytes(), &encode(OPENING, txn.id()))?;
        rec = rec.put(&key_of(true, c)).put(&key_of(false, c));
    }
    let ts = txn.commit()?;
    rec.outcome = history::Outcome::Committed(history::Timestamp(ts * SCALE));
    Ok((Bank { savings, checking }, rec))
}

fn run_mode(
    a: &SmallBankArgs,
    parent: &std::path::Path,
    isolation: Isolation,
    sync: Sync,
) -> BenchResult<serde_json::Value> {
    let dir = tempfile::Builder::new().prefix("smallbank-").tempdir_in(parent)?;
    let config = Config {
        sync_mode: match sync {
            Sync::Fsync => SyncMode::Fsync,
            Sync::Off => SyncMode::Off,
        },
        ..Config::default()
    };
    let engine = Engine::open(dir.path(), config)?;
    let (bank, setup) = load(&engine, a.customers)?;
    let bank = Arc::new(bank);
    let stop = Arc::new(AtomicBool::new(false));
    let ro_seq = Arc::new(AtomicU64::new(1));
    let results = Arc::new(Mutex::new((Counts::default(), vec![setup])));
    let cpu_before = measure::cpu_seconds();
    let machine_before = measure::machine_ticks();
    let started = Instant::now();
    let workers: Vec<_> = (0..a.threads)
        .map(|i| {
            let (engine, bank, stop, ro_seq, results) =
                (engine.clone(), bank.clone(), stop.clone(), ro_seq.clone(), results.clone());
            let (customers, hotspot, hot_pct, seed) =
                (a.customers, a.hotspot.min(a.customers), a.hotspot_percent, a.seed);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed ^ ((i as u64) << 32));
                let pick = move |rng: &mut SmallRng| {
                    if rng.gen_range(0..100) < hot_pct {
                        rng.gen_range(0..hotspot)
                    } else {
                        rng.gen_range(0..customers)
                    }
                };
                let opts = TxnOptions { isolation, read_only: false, ..TxnOptions::default() };
                let mut counts = Counts::default();
                let mut recs = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.gen_range(0..KINDS.len());
                    match run_one(&engine, &bank, opts, KINDS[k], &mut rng, &pick, &ro_seq) {
                        Outcome::Committed(rec) => {
                            counts.committed[k] += 1;
                            recs.push(rec);
                        }
                        Outcome::AppRollback(rec) => {
                            counts.app_rollbacks[k] += 1;
                            recs.push(rec);
                        }
                        Outcome::Aborted(rec, e) => {
                            match e {
                                StorageError::WriteConflict { .. } => counts.write_conflicts[k] += 1,
                                StorageError::SerializationFailure { .. } => counts.serialization_failures[k] += 1,
                                e => panic!("smallbank transaction failed: {e}"),
                            }
                            recs.push(rec);
                        }
                    }
                }
                let mut r = results.lock().unwrap();
                for k in 0..5 {
                    r.0.committed[k] += counts.committed[k];
                    r.0.write_conflicts[k] += counts.write_conflicts[k];
                    r.0.serialization_failures[k] += counts.serialization_failures[k];
                    r.0.app_rollbacks[k] += counts.app_rollbacks[k];
                }
                r.1.extend(recs);
            })
        })
        .collect();
    let run_for = Duration::from_secs(a.seconds);
    while started.elapsed() < run_for {
        std::thread::sleep(Duration::from_secs(1).min(run_for.saturating_sub(started.elapsed())));
        eprint!("\r  {isolation:?} / {sync:?}: {:>3} s", started.elapsed().as_secs());
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| "a smallbank worker panicked")?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // CPU the run used, and the share of the machine's CPUs it kept busy
    // (waiting, and time the hypervisor stole, show as less).
    let cpu_seconds = cpu_before.zip(measure::cpu_seconds()).map(|(before, after)| after - before);
    let cpu_busy = cpu_seconds.map(|c| c / elapsed / measure::cpus() as f64);
    let steal = machine_before
        .zip(measure::machine_ticks())
        .map(|((all0, st0), (all1, st1))| (st1 - st0) as f64 / (all1 - all0).max(1) as f64);
    let stats = engine.stats();
    engine.close()?;
    let (counts, txns) = std::mem::take(&mut *results.lock().unwrap());
    eprintln!("\r  {isolation:?} / {sync:?}: checking {} transactions", txns.len());
    let h = History::new(txns);
    let si = history::check_snapshot_isolation(&h).err().map(|v| v.to_string());
    let (anomalies, example) = anomalies(&h);
    let committed: u64 = counts.committed.iter().sum();
    let per_kind = |a: &[u64; 5]| -> serde_json::Value {
        KINDS.iter().zip(a.iter()).map(|(k, n)| (format!("{k:?}"), json!(n))).collect::<serde_json::Map<_, _>>().into()
    };
    let attempts = committed
        + counts.write_conflicts.iter().sum::<u64>()
        + counts.serialization_failures.iter().sum::<u64>()
        + counts.app_rollbacks.iter().sum::<u64>();
    let rate = |n: u64| n as f64 / attempts.max(1) as f64;
    Ok(json!({
        "isolation": format!("{isolation:?}"),
        "sync": format!("{sync:?}"),
        "seconds": elapsed,
        "cpu_busy": cpu_busy,
        "cpu_seconds": cpu_seconds,
        "commits_per_cpu_second": cpu_seconds.map(|c| committed as f64 / c),
        "steal_share": steal,
        "committed": committed,
        "committed_per_sec": committed as f64 / elapsed,
        "attempts": attempts,
        "abort_rate_write_conflict": rate(counts.write_conflicts.iter().sum()),
        "abort_rate_serialization_failure": rate(counts.serialization_failures.iter().sum()),
        "rollback_rate_application": rate(counts.app_rollbacks.iter().sum()),
        "committed_by_kind": per_kind(&counts.committed),
        "write_conflicts_by_kind": per_kind(&counts.write_conflicts),
        "serialization_failures_by_kind": per_kind(&counts.serialization_failures),
        "si_violation": si,
        "anomalies": anomalies,
        "anomaly_example": example,
        "journal_syncs": stats.journal_syncs,
    }))
}

pub fn run(a: SmallBankArgs) -> BenchResult<()> {
    if a.customers < 2
        || a.hotspot < 2
        || a.hotspot_percent > 100
        || a.threads == 0
        || a.seconds == 0
        || a.sync.is_empty()
    {
        return Err(
            "need --customers >= 2, --hotspot >= 2, --hotspot-percent <= 100, --threads > 0, --seconds > 0, --rounds > 0, --sync"
                .into(),
        );
    }
    let parent = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent)?;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench/results/smallbank-{}.json", measure::utc_timestamp_compact())));
    eprintln!(
        "smallbank: {} customers, hotspot {} at {}%, {} threads, {} s per run",
        a.customers, a.hotspot, a.hotspot_percent, a.threads, a.seconds
    );
    let mut runs = Vec::new();
    let mut ratios = serde_json::Map::new();
    let mut cpu_ratios = serde_json::Map::new();
    for &sync in &a.sync {
        // (commits, seconds, CPU seconds) per level over all rounds.
        let mut sums = [(0.0, 0.0, 0.0); 2];
        for round in 0..a.rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                if !a.isolation.contains(&[Level::Snapshot, Level::Serializable][i]) {
                    continue;
                }
                let isolation = [Isolation::Snapshot, Isolation::Serializable][i];
                let mut r = run_mode(&a, &parent, isolation, sync)?;
                sums[i].0 += r["committed"].as_f64().unwrap_or(0.0);
                sums[i].1 += r["seconds"].as_f64().unwrap_or(1.0);
                sums[i].2 += r["cpu_seconds"].as_f64().unwrap_or(f64::NAN);
                r["round"] = json!(round);
                runs.push(r);
            }
        }
        if a.isolation.len() == 2 {
            let ratio = (sums[1].0 / sums[1].1) / (sums[0].0 / sums[0].1);
            ratios.insert(format!("{sync:?}"), json!(ratio));
            // The same per CPU second: what SSI costs in work, whatever the
            // machine's neighbours and lock waits did to wall-clock time.
            let cpu_ratio = (sums[1].0 / sums[1].2) / (sums[0].0 / sums[0].2);
            cpu_ratios.insert(format!("{sync:?}"), json!(cpu_ratio));
        }
    }
    let doc = json!({
        "benchmark": "W5 smallbank (engine level)",
        "machine": { "cpus": measure::cpus(), "kernel": measure::kernel(), "memory_bytes": measure::memory_total_bytes() },
        "commit": measure::git_commit(),
        "started": measure::utc_timestamp_iso(),
        "config": {
            "customers": a.customers, "hotspot": a.hotspot, "hotspot_percent": a.hotspot_percent,
            "threads": a.threads, "seconds_per_run": a.seconds, "rounds": a.rounds, "seed": a.seed,
            "mix": "Balance, DepositChecking, TransactSavings, Amalgamate, WriteCheck, 20% each; conflicts are not retried",
        },
        "runs": runs,
        "serializable_over_si_throughput": ratios,
        "serializable_over_si_commits_per_cpu_second": cpu_ratios,
    });
    crate::report::write_json(&out, &doc)?;
    println!(
        "{:<13} {:<6} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>7} {:>10}",
        "isolation",
        "sync",
        "commits/s",
        "per cpu-s",
        "ww-abort",
        "ser-abort",
        "app-rb",
        "cpu-busy",
        "steal",
        "anomalies"
    );
    for r in doc["runs"].as_array().unwrap() {
        println!(
            "{:<13} {:<6} {:>12.0} {:>12.0} {:>8.2}% {:>8.2}% {:>8.2}% {:>8.0}% {:>6.1}% {:>10}",
            r["isolation"].as_str().unwrap(),
            r["sync"].as_str().unwrap(),
            r["committed_per_sec"].as_f64().unwrap(),
            r["commits_per_cpu_second"].as_f64().unwrap_or(f64::NAN),
            100.0 * r["abort_rate_write_conflict"].as_f64().unwrap(),
            100.0 * r["abort_rate_serialization_failure"].as_f64().unwrap(),
            100.0 * r["rollback_rate_application"].as_f64().unwrap(),
            100.0 * r["cpu_busy"].as_f64().unwrap_or(f64::NAN),
            100.0 * r["steal_share"].as_f64().unwrap_or(f64::NAN),
            r["anomalies"],
        );
    }
    for (sync, ratio) in &ratios {
        println!(
            "serializable / SI throughput ({sync}): {:.3}; per CPU second: {:.3}",
            ratio.as_f64().unwrap(),
            cpu_ratios[sync].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!("\nJSON written to {}", out.display());
    for r in doc["runs"].as_array().unwrap() {
        if let Some(v) = r["si_violation"].as_str() {
            return Err(format!("{} run broke snapshot isolation: {v}", r["isolation"]).into());
        }
        if r["isolation"] == "Serializable" && r["anomalies"].as_u64() != Some(0) {
            return Err(format!("a serializable run has {} anomalies: {}", r["anomalies"], r["anomaly_example"]).into());
        }
    }
    Ok(())
}
