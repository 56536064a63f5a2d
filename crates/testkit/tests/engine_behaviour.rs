//! Engine behaviours that need a controllable file system or timing: readers
//! never wait for a journal fsync, the journal sync modes, timed
//! checkpoints, allocation policies, and deletes that shrink the tree.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::{AllocPolicy, Config, Engine, OsVfs, SyncMode, TableConfig, WriteBatch};
use testkit::{FaultVfs, MemVfs};

fn quiet(sync_mode: SyncMode) -> Config {
    Config { sync_mode, checkpoint_interval: None, ..Config::default() }
}

#[test]
fn readers_do_not_wait_for_a_journal_fsync() {
    let fault = FaultVfs::new(Arc::new(MemVfs::new()), u64::MAX);
    let engine = Engine::open_with_vfs(Arc::new(fault.clone()), Path::new("/db"), quiet(SyncMode::Fsync)).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    engine.put(&t, b"a", b"1").unwrap();
    fault.pause_syncs();
    let writer = {
        let (engine, t) = (engine.clone(), t.clone());
        std::thread::spawn(move || engine.put(&t, b"b", b"2").unwrap())
    };
    // The writer is now parked inside its fsync. Reads and scans go on.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!writer.is_finished(), "the commit returned before its fsync");
    let started = Instant::now();
    for _ in 0..100 {
        assert_eq!(engine.get(&t, b"a").unwrap().as_deref(), Some(&b"1"[..]));
        let mut c = engine.cursor(&t).unwrap();
        assert!(c.next().unwrap().is_some());
    }
    assert!(!writer.is_finished());
    fault.resume_syncs();
    writer.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(engine.get(&t, b"b").unwrap().as_deref(), Some(&b"2"[..]));
    engine.close().unwrap();
}

/// Fsync mode: a commit waits for its fsync. Background and off modes: a
/// commit never waits for one, even while an fsync hangs; background mode
/// fsyncs within a tick, off mode never does.
#[test]
fn sync_modes_decide_who_waits_for_fsync() {
    for mode in [SyncMode::Fsync, SyncMode::Background, SyncMode::Off] {
        let mem = MemVfs::new();
        let fault = FaultVfs::new(Arc::new(mem.clone()), u64::MAX);
        let dir = Path::new("/db");
        let engine = Engine::open_with_vfs(Arc::new(fault.clone()), dir, quiet(mode)).unwrap();
        let t = engine.create_table("t", TableConfig::default()).unwrap();
        engine.put(&t, b"first", b"v").unwrap();
        // Let a background flush start and hang inside its fsync.
        fault.pause_syncs();
        std::thread::sleep(Duration::from_millis(250));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let writer = {
            let (engine, t) = (engine.clone(), t.clone());
            std::thread::spawn(move || {
                for i in 0u32..20 {
                    engine.put(&t, &i.to_be_bytes(), b"v").unwrap();
                }
                done_tx.send(()).unwrap();
            })
        };
        let finished = done_rx.recv_timeout(Duration::from_secs(5)).is_ok();
        match mode {
            SyncMode::Fsync => assert!(!finished, "fsync mode: commits returned while fsync hung"),
            _ => assert!(finished, "{mode:?}: commits waited for a hung fsync"),
        }
        let before = engine.stats().journal_syncs;
        fault.resume_syncs();
        writer.join().unwrap();
        std::thread::sleep(Duration::from_millis(350));
        let syncs = engine.stats().journal_syncs - before;
        match mode {
            SyncMode::Fsync => assert!((1..=21).contains(&syncs), "{syncs}"),
            SyncMode::Background => assert!(syncs >= 1, "the background flush never ran"),
            SyncMode::Off => assert_eq!(syncs, 0, "off mode fsynced the journal"),
        }
        engine.close().unwrap();
        let engine = Engine::open_with_vfs(Arc::new(mem.crash(1, false)), dir, quiet(mode)).unwrap();
        let t = engine.table("t").unwrap();
        assert_eq!(engine.get(&t, &19u32.to_be_bytes()).unwrap().as_deref(), Some(&b"v"[..]), "{mode:?}");
        engine.close().unwrap();
    }
}

#[test]
fn checkpoints_run_on_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { checkpoint_interval: Some(Duration::from_millis(200)), ..Config::default() };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    engine.put(&t, b"k", b"v").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.stats().checkpoints == 0 {
        assert!(Instant::now() < deadline, "no timed checkpoint within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    engine.close().unwrap();
}

#[test]
fn every_allocation_policy_reuses_space_and_verifies() {
    for policy in [AllocPolicy::BestFit, AllocPolicy::FirstFit, AllocPolicy::Append] {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), quiet(SyncMode::Off)).unwrap();
        let cfg = TableConfig { alloc_policy: policy, leaf_page_max_bytes: 4096, ..TableConfig::default() };
        let t = engine.create_table("t", cfg).unwrap();
        let mut sizes = Vec::new();
        for round in 0..6u8 {
            let mut b = WriteBatch::new();
            for i in 0u32..5000 {
                b.put(&t, &i.to_be_bytes(), &[round; 64]).unwrap();
            }
            engine.write(&b).unwrap();
            engine.checkpoint().unwrap();
            sizes.push(std::fs::metadata(dir.path().join(storage::engine::table_file_name(1))).unwrap().len());
        }
        let live = 5000 * (4 + 64) as u64;
        if policy == AllocPolicy::Append {
            // Append never fills holes: every block goes at the end of the file.
            assert!(sizes.windows(2).all(|w| w[1] > w[0]), "{policy:?}: {sizes:?}");
        } else {
            // Space freed by one checkpoint is reused after the next.
            assert!(*sizes.iter().max().unwrap() < 6 * live, "{policy:?}: {sizes:?}");
            assert!(sizes[5] <= sizes[2] * 2, "{policy:?} grows: {sizes:?}");
        }
        engine.close().unwrap();
        let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
        assert!(report.problems.is_empty(), "{policy:?}: {:?}", report.problems);
        let engine = Engine::open(dir.path(), quiet(SyncMode::Off)).unwrap();
        let t = engine.table("t").unwrap();
        assert_eq!(engine.get(&t, &4999u32.to_be_bytes()).unwrap().as_deref(), Some(&[5u8; 64][..]));
        engine.close().unwrap();
    }
}

#[test]
fn deleting_everything_leaves_a_small_tree() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), quiet(SyncMode::Off)).unwrap();
    let cfg = TableConfig { leaf_page_max_bytes: 2048, internal_page_max_bytes: 1024, ..TableConfig::default() };
    let t = engine.create_table("t", cfg).unwrap();
    let mut b = WriteBatch::new();
    for i in 0u32..30_000 {
        b.put(&t, &i.to_be_bytes(), &[1u8; 40]).unwrap();
    }
    engine.write(&b).unwrap();
    engine.checkpoint().unwrap();
    let full = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    // Delete 95% in a scattered order, then check the pages were merged away.
    let mut b = WriteBatch::new();
    for i in (0u32..30_000).filter(|i| i % 20 != 0) {
        b.delete(&t, &i.wrapping_mul(7919).rem_euclid(30_000).to_be_bytes()).unwrap();
    }
    engine.write(&b).unwrap();
    engine.checkpoint().unwrap();
    let sparse = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    let mut c = engine.cursor(&t).unwrap();
    let mut left = Vec::new();
    while let Some((k, _)) = c.next().unwrap() {
        left.push(k.to_vec());
    }
    let mut b = WriteBatch::new();
    for k in &left {
        b.delete(&t, k).unwrap();
    }
    engine.write(&b).unwrap();
    engine.close().unwrap();
    let empty = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    eprintln!("pages: full {}, 5% left {}, empty {}", full.pages, sparse.pages, empty.pages);
    assert!(sparse.pages * 5 < full.pages, "{} pages for 5% of the data (full: {})", sparse.pages, full.pages);
    // The table's tree is one empty root leaf; plus the metadata table's pages.
    assert!(empty.pages <= 1 + full.tables + 2, "{} pages for an empty table", empty.pages);
    assert!(empty.problems.is_empty(), "{:?}", empty.problems);
}
