//! Model-based transaction tests: random transactions run against the
//! engine, their history is recorded, and `testkit::history` checks it:
//! snapshot isolation for every run; an acyclic dependency graph for
//! serializable runs; and, so the checker is known to catch anomalies,
//! the same workloads under plain SI must produce some cycles.
//!
//! Every value names its writer (the transaction id), so a read records
//! which version it saw. Timestamps are scaled by `SCALE` so that read-only
//! transactions, which the engine gives no commit timestamp, get unique
//! ones between their snapshot and the next commit.
//!
//! `ARBORDB_TXN_WORKLOADS` sets how many interleaved workloads run per
//! isolation level (default 1500).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use storage::{Config, Engine, Isolation, StorageError, SyncMode, Table, TableConfig, Txn, TxnOptions};
use testkit::history::{self, History};

const SCALE: u64 = 1_000_000;

fn engine(dir: &std::path::Path) -> Engine {
    let config = Config { sync_mode: SyncMode::Off, checkpoint_interval: None, ..Config::default() };
    Engine::open(dir, config).unwrap()
}

/// Keys are `prefix ++ name`; histories use the name only.
struct Space {
    prefix: Vec<u8>,
    keys: usize,
}

impl Space {
    fn name(&self, i: usize) -> Vec<u8> {
        format!("k{i:02}").into_bytes()
    }
    fn full(&self, name: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), name].concat()
    }
}

fn writer_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// One transaction being run and recorded.
struct Running {
    txn: Txn,
    rec: history::Txn,
    wrote: bool,
}

enum Step {
    Continue,
    Aborted,
}

static READ_ONLY_COMMITS: AtomicU64 = AtomicU64::new(1);

impl Running {
    fn begin(engine: &Engine, isolation: Isolation) -> Running {
        let txn = engine.begin(TxnOptions { isolation, read_only: false, ..TxnOptions::default() }).unwrap();
        let rec = history::Txn::aborted(txn.id(), txn.read_ts() * SCALE);
        Running { txn, rec, wrote: false }
    }

    /// One random operation on one of `tables`; history keys are the
    /// table's index then the key name.
    fn op(&mut self, tables: &[Table], space: &Space, rng: &mut StdRng) -> Step {
        let pick = rng.gen_range(0..100);
        let ti = rng.gen_range(0..tables.len());
        let t = &tables[ti];
        let tag = |name: &[u8]| [&[b'0' + ti as u8][..], name].concat();
        let name = space.name(rng.gen_range(0..space.keys));
        let r: Result<(), StorageError> = (|| {
            if pick < 35 {
                let v = self.txn.get(t, &space.full(&name))?;
                self.rec = self.rec.clone().read(&tag(&name), v.map(|v| writer_of(&v)));
            } else if pick < 50 {
                let a = rng.gen_range(0..space.keys);
                let b = rng.gen_range(a..=space.keys);
                let (lo, hi) = (space.name(a), space.name(b));
                let mut c = self.txn.cursor(t)?;
                c.set_bounds(Bound::Included(space.full(&lo)), Bound::Excluded(space.full(&hi)));
                let mut seen = Vec::new();
                let mut e = c.first()?;
                while let Some((k, v)) = e {
                    seen.push((tag(&k[space.prefix.len()..]), writer_of(&v)));
                    e = c.next()?;
                }
                drop(c);
                let observed: Vec<(&[u8], u64)> = seen.iter().map(|(k, w)| (k.as_slice(), *w)).collect();
                self.rec = self.rec.clone().scan(&tag(&lo)[..]..&tag(&hi)[..], &observed);
            } else if pick < 88 {
                let mut value = self.txn.id().to_le_bytes().to_vec();
                value.extend_from_slice(&[7; 24]);
                self.txn.put(t, &space.full(&name), &value)?;
                self.rec = self.rec.clone().put(&tag(&name));
                self.wrote = true;
            } else {
                self.txn.delete(t, &space.full(&name))?;
                self.rec = self.rec.clone().delete(&tag(&name));
                self.wrote = true;
            }
            Ok(())
        })();
        match r {
            Ok(()) => Step::Continue,
            Err(e) if e.is_retryable() => Step::Aborted,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    /// Commit (or roll back) and return the record.
    fn finish(self, commit: bool) -> history::Txn {
        let Running { txn, mut rec, wrote } = self;
        let read_ts = txn.read_ts();
        if !commit {
            txn.rollback();
            return rec;
        }
        match txn.commit() {
            Ok(ts) => {
                let commit = if wrote {
                    ts * SCALE
                } else {
                    read_ts * SCALE + READ_ONLY_COMMITS.fetch_add(1, Ordering::Relaxed)
                };
                rec.outcome = history::Outcome::Committed(history::Timestamp(commit));
                rec
            }
            Err(e) if e.is_retryable() => rec,
            Err(e) => panic!("unexpected commit error: {e}"),
        }
    }
}

/// Run `txns` transactions, up to `width` open at once, interleaved one
/// operation at a time by a seeded scheduler on this thread.
fn interleaved(engine: &Engine, t: &Table, space: &Space, isolation: Isolation, seed: u64) -> History {
    let mut rng = StdRng::seed_from_u64(seed);
    let txns = rng.gen_range(3..8);
    let width = rng.gen_range(2..5);
    let mut open: Vec<Option<(Running, usize)>> = (0..width).map(|_| None).collect();
    let (mut started, mut done) = (0, Vec::new());
    while done.len() < txns {
        let slot = rng.gen_range(0..width);
        match open[slot].take() {
            None if started < txns => {
                started += 1;
                open[slot] = Some((Running::begin(engine, isolation), rng.gen_range(1..6)));
            }
            None => {}
            Some((run, 0)) => {
                let commit = rng.gen_range(0..10) != 0;
                done.push(run.finish(commit));
            }
            Some((mut run, left)) => match run.op(std::slice::from_ref(t), space, &mut rng) {
                Step::Continue => open[slot] = Some((run, left - 1)),
                Step::Aborted => done.push(run.finish(false)),
            },
        }
    }
    History::new(done)
}

fn workloads() -> u64 {
    std::env::var("ARBORDB_TXN_WORKLOADS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500)
}

struct Tally {
    committed: usize,
    aborted: usize,
    cycles: usize,
}

fn run_many(isolation: Isolation) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    let mut tally = Tally { committed: 0, aborted: 0, cycles: 0 };
    for w in 0..workloads() {
        let space = Space { prefix: format!("w{w:06}/").into_bytes(), keys: 2 + (w as usize % 5) };
        let h = interleaved(&engine, &t, &space, isolation, w);
        if let Err(v) = history::check_snapshot_isolation(&h) {
            panic!("workload {w} ({isolation:?}) breaks snapshot isolation: {v:?}\n{h:#?}");
        }
        let c = h.txns.iter().filter(|t| t.commit().is_some()).count();
        tally.committed += c;
        tally.aborted += h.txns.len() - c;
        if let Err(cycle) = history::check_serializable(&h) {
            if isolation == Isolation::Serializable {
                panic!("workload {w}: serializable history has a cycle {:?}\n{h:#?}", cycle);
            }
            tally.cycles += 1;
        }
    }
    engine.close().unwrap();
    tally
}

#[test]
fn snapshot_isolation_histories_are_si_and_show_anomalies() {
    let tally = run_many(Isolation::Snapshot);
    eprintln!(
        "SI: {} workloads, {} committed, {} aborted, {} non-serializable",
        workloads(),
        tally.committed,
        tally.aborted,
        tally.cycles
    );
    assert!(tally.committed > 0 && tally.aborted > 0);
    assert!(tally.cycles > 0, "plain SI never produced an anomaly: the workload or the checker is too weak");
}

#[test]
fn serializable_histories_have_acyclic_dependency_graphs() {
    let tally = run_many(Isolation::Serializable);
    eprintln!(
        "serializable: {} workloads, {} committed, {} aborted, 0 non-serializable",
        workloads(),
        tally.committed,
        tally.aborted
    );
    assert!(tally.committed > 0 && tally.aborted > 0);
}

/// Real threads: 4 threads run random transactions over one shared key
/// space in two tables (so commits to different tables race); the whole
/// history is checked at the end. `ARBORDB_TXN_THREADED` sets the
/// transactions per thread (default 400).
fn threaded(isolation: Isolation) -> History {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let t = [
        engine.create_table("t", TableConfig::default()).unwrap(),
        engine.create_table("u", TableConfig::default()).unwrap(),
    ];
    let per_thread: usize = std::env::var("ARBORDB_TXN_THREADED").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let history = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|i| {
            let (engine, t, history) = (engine.clone(), t.clone(), history.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(1000 + i);
                let space = Space { prefix: b"shared/".to_vec(), keys: 12 };
                for _ in 0..per_thread {
                    let mut run = Running::begin(&engine, isolation);
                    let mut aborted = false;
                    for _ in 0..rng.gen_range(1..6) {
                        if let Step::Aborted = run.op(&t, &space, &mut rng) {
                            aborted = true;
                            break;
                        }
                    }
                    let rec = run.finish(!aborted && rng.gen_range(0..10) != 0);
                    history.lock().unwrap().push(rec);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let txns = std::mem::take(&mut *history.lock().unwrap());
    engine.close().unwrap();
    History::new(txns)
}

#[test]
fn threaded_snapshot_isolation() {
    let h = threaded(Isolation::Snapshot);
    history::check_snapshot_isolation(&h).unwrap_or_else(|v| panic!("{v:?}"));
    let committed: BTreeMap<_, _> = h.txns.iter().filter_map(|t| t.commit().map(|c| (c, t.id))).collect();
    assert!(committed.len() > 100, "only {} committed", committed.len());
}

#[test]
fn threaded_serializable() {
    let h = threaded(Isolation::Serializable);
    history::check_snapshot_isolation(&h).unwrap_or_else(|v| panic!("{v:?}"));
    if let Err(cycle) = history::check_serializable(&h) {
        panic!("serializable run has a cycle: {cycle:?}");
    }
    let committed = h.txns.iter().filter(|t| t.commit().is_some()).count();
    assert!(committed > 100, "only {committed} committed");
}
