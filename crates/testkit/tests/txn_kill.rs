//! Crash test with concurrent transactions: a child runs bank transfers on
//! four threads (SI and serializable, two account tables and a ledger) and
//! is SIGKILLed at a random moment, many times over. After each kill the
//! directory verifies, every acknowledged transfer is in the ledger, and
//! every balance matches the ledger exactly (no transfer half-applied).
//!
//! `ARBORDB_TXN_CRASH_CYCLES` sets the number of cycles (default 40).

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;
use storage::{Config, Engine, OsVfs};
use testkit::bank::{ledger_key, Bank};
use testkit::crash;

#[test]
fn kill_9_during_concurrent_transactions_loses_nothing_acknowledged() {
    let cycles: usize = std::env::var("ARBORDB_TXN_CRASH_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let seed: u64 = rand::random();
    eprintln!("transaction kill -9 test: {cycles} cycles, timing seed {seed}");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    // Highest acknowledged sequence number per thread, over all cycles.
    let mut acked: BTreeMap<u32, u64> = BTreeMap::new();
    let mut entries = 0;
    for cycle in 0..cycles {
        let mut child = Command::new(env!("CARGO_BIN_EXE_txn_crash_writer"));
        child.arg(dir.path());
        let run = Duration::from_millis(rng.gen_range(20..150));
        for ack in crash::run_then_kill(child, run, &format!("cycle {cycle}")) {
            let mut it = ack.split(' ').map(|x| x.parse::<u64>().unwrap());
            let (thread, seq) = (it.next().unwrap() as u32, it.next().unwrap());
            let a = acked.entry(thread).or_insert(seq);
            *a = (*a).max(seq);
        }
        if crash::killed_before_first_root(dir.path()) {
            assert!(acked.is_empty(), "cycle {cycle} (seed {seed}): the root file is gone after commits");
            continue;
        }
        let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
        assert!(report.problems.is_empty(), "cycle {cycle}: verify after kill: {:?}", report.problems);
        let engine = Engine::open(dir.path(), Config::default()).unwrap();
        let Ok(bank) = Bank::open(&engine) else { panic!("cycle {cycle}: cannot open the bank") };
        let ledger = bank.check(&engine).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        for (thread, seq) in &acked {
            for s in 0..=*seq {
                assert!(
                    ledger.contains_key(&ledger_key(*thread, s)),
                    "cycle {cycle}: acknowledged transfer {thread}/{s} is missing"
                );
            }
        }
        entries = ledger.len();
        engine.close().unwrap();
    }
    assert!(acked.values().sum::<u64>() > 0, "no transfer was ever acknowledged");
    eprintln!("transaction kill -9 test: {entries} transfers committed across {cycles} kills, all checked");
}
