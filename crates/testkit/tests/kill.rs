//! Crash test with a real process: a child commits with fsync on commit and
//! is SIGKILLed at a random moment, many times over. After each kill the
//! data directory must verify, and reopening must show every acknowledged
//! batch, nothing half-applied, and nothing but a prefix of the workload.
//!
//! `ARBORDB_CRASH_CYCLES` sets the number of cycles (default 100; the
//! direct I/O run takes a quarter of them).

use rand::{Rng, SeedableRng};
use std::process::Command;
use std::time::Duration;
use storage::{Config, Engine, OsVfs};
use testkit::crash;
use testkit::workload::{self, Model};

fn cycles() -> usize {
    std::env::var("ARBORDB_CRASH_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}

#[test]
fn kill_9_loses_no_acknowledged_commit() {
    kill_loop(cycles(), &[]);
}

/// The same with the writer's data files read and written by direct I/O.
#[test]
fn kill_9_with_direct_io_loses_no_acknowledged_commit() {
    kill_loop(cycles().div_ceil(4), &["direct-io"]);
}

/// The same on a write-optimized table (its runs and manifests).
#[test]
fn kill_9_on_a_write_optimized_table_loses_no_acknowledged_commit() {
    kill_loop(cycles().div_ceil(4), &["write-optimized"]);
}

/// `flags`: the writer's (`crash_writer`).
fn kill_loop(cycles: usize, flags: &[&str]) {
    let direct_io = flags.contains(&"direct-io");
    let seed: u64 = std::env::var("ARBORDB_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!(
        "kill -9 test ({flags:?}): {cycles} cycles, seed {seed} (ARBORDB_CRASH_SEED={seed} replays the kill timings)"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let mut model_batches = 0u64;
    let mut max_acked: Option<u64> = None;
    for cycle in 0..cycles {
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash_writer"));
        child.arg(dir.path()).arg(seed.to_string()).args(flags);
        let run = Duration::from_millis(rng.gen_range(5..120));
        let acks = crash::run_then_kill(child, run, &format!("cycle {cycle} (seed {seed})"));
        if let Some(a) = acks.iter().map(|n| n.parse::<u64>().unwrap()).max() {
            max_acked = Some(max_acked.map_or(a, |m| m.max(a)));
        }

        if crash::killed_before_first_root(dir.path()) {
            assert!(max_acked.is_none(), "cycle {cycle} (seed {seed}): the root file is gone after commits");
            continue;
        }
        let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
        assert!(report.problems.is_empty(), "cycle {cycle} (seed {seed}): verify after kill: {:?}", report.problems);

        let engine = Engine::open(dir.path(), Config { direct_io, ..Config::default() }).unwrap();
        let Ok(table) = engine.table("crash") else {
            assert!(max_acked.is_none(), "cycle {cycle}: table lost after acknowledged commits");
            engine.close().unwrap();
            continue;
        };
        let present = workload::batches_in(&engine, &table).unwrap();
        if let Some(a) = max_acked {
            assert!(
                present > a,
                "cycle {cycle} (seed {seed}): batch {a} was acknowledged but only {present} batches survived"
            );
        }
        assert!(present >= model_batches, "cycle {cycle}: batches went backwards");
        while model_batches < present {
            workload::apply_to_model(&mut model, seed, model_batches);
            model_batches += 1;
        }
        let got = workload::contents(&engine, &table).unwrap();
        if let Some(diff) = workload::first_difference(&got, &model) {
            panic!("cycle {cycle} (seed {seed}): after {present} batches: {diff}");
        }
        engine.close().unwrap();
    }
    assert!(max_acked.is_some_and(|a| a > 0), "the writer never got a commit acknowledged");
    eprintln!("kill -9 test: {model_batches} batches committed across {cycles} kills");
}
