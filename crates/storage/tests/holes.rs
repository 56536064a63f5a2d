//! Free blocks go back to the device (holes punched) once checkpoints have
//! freed `Config::punch_every_blocks` of them, and nothing live is lost.

use std::os::unix::fs::MetadataExt;
use storage::{Config, Engine, SyncMode, TableConfig, Vfs, WriteBatch};

fn fill(engine: &Engine, t: &storage::Table, round: u8) {
    let mut batch = WriteBatch::new();
    for i in 0..20_000u32 {
        batch.put(t, format!("k{i:08}").as_bytes(), &[round; 200]).unwrap();
        if batch.len() == 1000 {
            engine.write(&batch).unwrap();
            batch = WriteBatch::new();
        }
    }
    engine.write(&batch).unwrap();
}

/// (file length, bytes the file system holds for it).
fn sizes(path: &std::path::Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap();
    (m.len(), m.blocks() * 512)
}

fn table_file(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "adb") && !p.ends_with("metadata.adb"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("a table file")
}

#[test]
fn freed_blocks_are_punched_in_batches_and_live_data_stays() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        Config { sync_mode: SyncMode::Off, checkpoint_interval: None, punch_every_blocks: 64, ..Config::default() };
    let engine = Engine::open(dir.path(), config.clone()).unwrap();
    // Incompressible values would do as well; none keeps block sizes plain.
    let t =
        engine.create_table("t", TableConfig { compressor: storage::Compressor::None, ..Default::default() }).unwrap();
    fill(&engine, &t, 1);
    engine.checkpoint().unwrap();
    assert_eq!(engine.stats().blocks_punched, 0, "nothing was freed yet");
    // Rewriting every key frees every leaf of the first checkpoint; the
    // checkpoint after the next makes them free, and they are punched.
    for round in 2..5 {
        fill(&engine, &t, round);
        engine.checkpoint().unwrap();
    }
    let punched = engine.stats().blocks_punched;
    let path = table_file(dir.path());
    let (len, held) = sizes(&path);
    eprintln!("table file: {len} bytes long, {held} held; {punched} blocks punched");
    // ext4, xfs, btrfs and tmpfs take holes; elsewhere punching turns itself off.
    let probe = dir.path().join("probe");
    std::fs::write(&probe, [1u8; 16384]).unwrap();
    let fs_punches = storage::OsVfs.open(&probe, false).unwrap().punch_hole(4096, 4096).unwrap();
    if fs_punches {
        assert!(punched >= 64, "blocks punched: {punched}");
        assert!(len - held >= 64 * 4096, "file of {len} bytes holds {held}");
    } else {
        assert_eq!(punched, 0, "a file system without holes counted punched blocks");
    }
    for i in (0..20_000u32).step_by(97) {
        assert_eq!(engine.get(&t, format!("k{i:08}").as_bytes()).unwrap().as_deref(), Some(&[4u8; 200][..]));
    }
    drop(t);
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.table("t").unwrap();
    let mut c = engine.cursor(&t).unwrap();
    let mut n = 0;
    while c.advance().unwrap() {
        assert_eq!(c.entry().unwrap().unwrap().1, &[4u8; 200][..]);
        n += 1;
    }
    assert_eq!(n, 20_000);
    engine.close().unwrap();
    let report = storage::verify::verify_dir(&storage::OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "verify: {:?}", report.problems);
}

#[test]
fn punching_off_leaves_free_blocks_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        Config { sync_mode: SyncMode::Off, checkpoint_interval: None, punch_every_blocks: 0, ..Config::default() };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    for round in 1..5 {
        fill(&engine, &t, round);
        engine.checkpoint().unwrap();
    }
    assert_eq!(engine.stats().blocks_punched, 0);
    engine.close().unwrap();
}
