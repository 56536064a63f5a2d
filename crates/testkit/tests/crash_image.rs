//! Crash images and injected I/O failures, in the style of redb's crash
//! test and SQLite's fault injection: the engine runs on an in-memory file
//! system whose Nth I/O fails. At that instant we keep
//! - the crash image: only what was synced, plus a random torn subset of the
//!   unsynced writes (as if power was cut), and
//! - the live image: everything written before the failure (as if the
//!   process saw the error and was restarted).
//!
//! Both must verify, reopen, and hold exactly the acknowledged batches (plus
//! at most the one in flight), nothing half-applied.
//!
//! `ARBORDB_FAULT_POINTS` sets how many failure points are tried (default 400).

use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::{Arc, Mutex};
use storage::{Config, Engine, SyncMode, TableConfig, TableFormat, Vfs};
use testkit::workload::{self, Model};
use testkit::{FaultVfs, MemVfs};

const BATCHES_MAX: u64 = 300;

/// Pages evicted over all runs: the crash images are taken with eviction at work.
static EVICTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Memtables frozen and runs merged over all runs: write-optimized tables'
/// images hold several runs, some written by merges.
static FROZEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static MERGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn config() -> Config {
    config_with(SyncMode::Fsync)
}

fn config_with(sync_mode: SyncMode) -> Config {
    Config {
        sync_mode,
        checkpoint_interval: None,
        checkpoint_journal_bytes: 64 * 1024,
        journal_file_max_bytes: 48 * 1024,
        // Smaller than the data, so eviction writes and drops pages throughout.
        cache_size_bytes: 256 * 1024,
        cache_pinned_max_percent: 100,
        // Punch often, so crashes land around punched blocks.
        punch_every_blocks: 4,
        table_compressor: storage::Compressor::default(),
        // The images come from an in-memory file system.
        direct_io: false,
        // Write-optimized tables freeze a run every few dozen batches...
        memtable_max_bytes: 24 * 1024,
        // ...and merge them where the workload says (so each run's I/Os
        // come in the same order).
        merge_runs_in_background: false,
    }
}

fn table_config(format: TableFormat) -> TableConfig {
    TableConfig {
        leaf_page_max_bytes: 2048,
        internal_page_max_bytes: 1024,
        overflow_min_bytes: 1024,
        format,
        ..TableConfig::default()
    }
}

/// Run the workload until the injected failure; returns batches acknowledged.
fn run_until_failure(vfs: Arc<dyn Vfs>, dir: &Path, seed: u64, mode: SyncMode, format: TableFormat) -> u64 {
    let Ok(engine) = Engine::open_with_vfs(vfs, dir, config_with(mode)) else {
        return 0;
    };
    let table = match engine.table("t").or_else(|_| engine.create_table("t", table_config(format))) {
        Ok(t) => t,
        Err(_) => return 0,
    };
    let mut acked = 0;
    for n in 0..BATCHES_MAX {
        if workload::commit(&engine, &table, seed, n).is_err() {
            // Reported, and nothing after it may succeed.
            assert!(workload::commit(&engine, &table, seed, n + 1).is_err(), "a commit succeeded after an I/O failure");
            break;
        }
        acked = n + 1;
        if n % 25 == 24 && engine.checkpoint().is_err() {
            break;
        }
        if format == TableFormat::WriteOptimized && n % 10 == 9 && engine.merge_runs(&table).is_err() {
            break;
        }
    }
    EVICTED.fetch_add(engine.stats().pages_evicted, std::sync::atomic::Ordering::Relaxed);
    FROZEN.fetch_add(engine.stats().memtables_frozen, std::sync::atomic::Ordering::Relaxed);
    MERGED.fetch_add(engine.stats().runs_merged, std::sync::atomic::Ordering::Relaxed);
    acked
}

/// `durable`: acknowledged batches must survive (Fsync); otherwise any prefix may.
fn check_image(image: &MemVfs, dir: &Path, seed: u64, acked: u64, durable: bool, what: &str) {
    if image.exists(&dir.join(storage::engine::ROOT_FILE)) {
        let report = storage::verify::verify_dir(image, dir, &mut |_| {}).unwrap();
        assert!(report.problems.is_empty(), "{what}: verify: {:?}", report.problems);
    } else {
        // The crash came before the directory was first initialized.
        assert!(!durable || acked == 0, "{what}: no root file after acknowledged commits");
    }
    let engine =
        Engine::open_with_vfs(Arc::new(image.clone()), dir, config()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let present = match engine.table("t") {
        Ok(table) => {
            let present = workload::batches_in(&engine, &table).unwrap();
            let mut model = Model::new();
            for n in 0..present {
                workload::apply_to_model(&mut model, seed, n);
            }
            let got = workload::contents(&engine, &table).unwrap();
            if let Some(diff) = workload::first_difference(&got, &model) {
                panic!("{what}: after {present} batches: {diff}");
            }
            present
        }
        Err(_) => 0,
    };
    assert!(!durable || present >= acked, "{what}: {acked} batches acknowledged, {present} survived");
    assert!(present <= acked + 1, "{what}: {present} batches present but only {acked} acknowledged and one in flight");
    engine.close().unwrap();
    let report = storage::verify::verify_dir(image, dir, &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "{what}: verify after reopen: {:?}", report.problems);
}

#[test]
fn every_failure_point_leaves_a_recoverable_image() {
    let points: u64 = std::env::var("ARBORDB_FAULT_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    failure_points(points, SyncMode::Fsync, TableFormat::BTree);
}

/// The same on a write-optimized table: its runs, manifests, frozen
/// memtables and tombstones through the same failures.
#[test]
fn every_failure_point_of_a_write_optimized_table_leaves_a_recoverable_image() {
    let points: u64 = std::env::var("ARBORDB_FAULT_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    failure_points(points / 2, SyncMode::Fsync, TableFormat::WriteOptimized);
}

/// Without fsync at commit nothing is promised about which batches survive,
/// but every image must open, verify, and hold a prefix of the batches.
#[test]
fn unsynced_modes_recover_a_prefix_at_every_failure_point() {
    let points: u64 = std::env::var("ARBORDB_FAULT_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    failure_points(points / 4, SyncMode::Background, TableFormat::BTree);
    failure_points(points / 4, SyncMode::Off, TableFormat::BTree);
}

fn failure_points(points: u64, mode: SyncMode, format: TableFormat) {
    let durable = mode == SyncMode::Fsync;
    let seed: u64 = std::env::var("ARBORDB_FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!(
        "fault injection ({format:?}): {points} failure points out of a run's I/Os, seed {seed} (ARBORDB_FAULT_SEED={seed} replays)"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = Path::new("/db");
    let dry = FaultVfs::new(Arc::new(MemVfs::new()), u64::MAX);
    assert_eq!(run_until_failure(Arc::new(dry.clone()), dir, seed, mode, format), BATCHES_MAX);
    let total = dry.ops();
    let mut tripped = 0;
    for i in 0..points {
        // Dense over the first I/Os (open, first commits), then spread out.
        let fail_at = if i < points.min(400) * 3 / 8 { i + 1 } else { rng.gen_range(150..total + 50) };
        let mem = MemVfs::new();
        let fault = FaultVfs::new(Arc::new(mem.clone()), fail_at);
        let crash_image: Arc<Mutex<Option<MemVfs>>> = Arc::default();
        {
            let (slot, mem, s) = (crash_image.clone(), mem.clone(), seed ^ i);
            fault.on_trip(move || *slot.lock().unwrap() = Some(mem.crash(s, true)));
        }
        let acked = run_until_failure(Arc::new(fault.clone()), dir, seed, mode, format);
        let what = format!("{mode:?}: failure at I/O {fail_at} (seed {seed})");
        if !fault.tripped() {
            assert_eq!(acked, BATCHES_MAX);
            continue;
        }
        tripped += 1;
        let image = crash_image.lock().unwrap().take().unwrap();
        check_image(&image, dir, seed, acked, durable, &format!("{what}, crash image"));
        check_image(&mem, dir, seed, acked, durable, &format!("{what}, live image"));
    }
    let evicted = EVICTED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("fault injection: {tripped} of {points} runs failed mid-workload and recovered; {evicted} pages evicted");
    assert!(evicted > 0, "the cache never evicted: the crash images do not cover eviction");
    let frozen = FROZEN.load(std::sync::atomic::Ordering::Relaxed);
    let merged = MERGED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(format == TableFormat::BTree || frozen > points, "only {frozen} memtables frozen in {points} runs");
    assert!(format == TableFormat::BTree || merged > points, "only {merged} merges in {points} runs");
    assert!(tripped > points / 2, "only {tripped} of {points} runs hit their failure point");
}

#[test]
fn a_flipped_bit_is_corruption_never_data() {
    let dir = Path::new("/db");
    let mem = MemVfs::new();
    let seed = 7;
    {
        let engine = Engine::open_with_vfs(Arc::new(mem.clone()), dir, config()).unwrap();
        let table = engine.create_table("t", table_config(TableFormat::BTree)).unwrap();
        for n in 0..200 {
            workload::commit(&engine, &table, seed, n).unwrap();
        }
        engine.close().unwrap();
    }
    let table_file = dir.join(storage::engine::table_file_name(1));
    let len = mem.file_len(&table_file).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut detected = 0;
    for _ in 0..40 {
        let image = mem.crash(0, false);
        // Any byte after the file header block.
        let off = rng.gen_range(4096..len);
        image.flip_bit(&table_file, off, rng.gen_range(0..8));
        let report = storage::verify::verify_dir(&image, dir, &mut |_| {}).unwrap();
        // The byte may sit in a free extent; then nothing reads it.
        let engine = match Engine::open_with_vfs(Arc::new(image.clone()), dir, config()) {
            Ok(e) => e,
            Err(e) => {
                assert!(e.is_corruption(), "flip at {off}: open failed with {e}");
                assert!(!report.problems.is_empty(), "flip at {off}: open saw corruption but verify did not");
                detected += 1;
                continue;
            }
        };
        let table = engine.table("t").unwrap();
        let mut model = Model::new();
        for n in 0..200 {
            workload::apply_to_model(&mut model, seed, n);
        }
        match workload::contents(&engine, &table) {
            Ok(got) => {
                assert!(workload::first_difference(&got, &model).is_none(), "flip at {off}: wrong data served");
                assert!(
                    report.problems.is_empty() || report.problems.iter().all(|p| p.contains("leak")),
                    "flip at {off}: verify {:?} but reads were fine",
                    report.problems
                );
            }
            Err(e) => {
                assert!(e.is_corruption(), "flip at {off}: {e}");
                assert!(!report.problems.is_empty(), "flip at {off}: a read saw corruption but verify did not");
                detected += 1;
            }
        }
        drop(table);
        drop(engine);
    }
    eprintln!("bit flips: {detected} of 40 detected as corruption, the rest hit free space or went unread and served correct data");
    assert!(detected > 10, "only {detected} of 40 flips were detected");
}
