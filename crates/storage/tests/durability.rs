//! Journal corruption versus a torn tail, space reuse under a steady
//! overwrite load, and the rule that checkpoints never decode keys.

use std::path::{Path, PathBuf};
use storage::{Config, Engine, OsVfs, SyncMode, TableConfig, WriteBatch};

fn no_checkpoints() -> Config {
    Config { checkpoint_interval: None, checkpoint_journal_bytes: u64::MAX, ..Config::default() }
}

fn journal_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("journal")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// 100 commits left only in the journal (no checkpoint after them).
fn journal_only_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), no_checkpoints()).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    for i in 0u32..100 {
        engine.put(&t, &i.to_be_bytes(), &[i as u8; 50]).unwrap();
    }
    drop(t);
    drop(engine); // no close: no checkpoint
    dir
}

fn count_rows(dir: &Path) -> storage::Result<usize> {
    let engine = Engine::open(dir, no_checkpoints())?;
    let t = engine.table("t")?;
    let mut c = engine.cursor(&t)?;
    let mut n = 0;
    while c.next()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Bytes up to the last non-zero one: the records, without the zeros the
/// journal writes ahead of them.
fn used_len(file: &Path) -> u64 {
    let bytes = std::fs::read(file).unwrap();
    bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p as u64 + 1)
}

#[test]
fn zeros_written_ahead_end_replay_cleanly() {
    let dir = journal_only_db();
    let last = journal_files(dir.path()).pop().unwrap();
    let (len, used) = (std::fs::metadata(&last).unwrap().len(), used_len(&last));
    assert!(len > used, "the journal writes zeros ahead of its records ({len} bytes, {used} used)");
    let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(!report.notes.iter().any(|n| n.contains("torn")), "{:?}", report.notes);
    // Each open starts a new file; the old ones keep their zeros and are
    // no longer last, which must not read as corruption.
    for _ in 0..3 {
        assert_eq!(count_rows(dir.path()).unwrap(), 100);
    }
    assert!(journal_files(dir.path()).len() >= 2);
}

#[test]
fn torn_journal_tail_ends_replay_cleanly() {
    let dir = journal_only_db();
    let last = journal_files(dir.path()).pop().unwrap();
    let len = used_len(&last);
    // Cut the last record short, then add zeros as a crashed append would.
    let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.set_len(len - 10).unwrap();
    f.set_len(len + 4000).unwrap();
    drop(f);
    let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.notes.iter().any(|n| n.contains("torn")), "{:?}", report.notes);
    assert_eq!(count_rows(dir.path()).unwrap(), 99);
}

#[test]
fn corrupt_journal_record_followed_by_valid_ones_is_corruption() {
    let dir = journal_only_db();
    let files = journal_files(dir.path());
    let file = files.iter().max_by_key(|p| std::fs::metadata(p).unwrap().len()).unwrap();
    let mut bytes = std::fs::read(file).unwrap();
    let mid = used_len(file) as usize / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(file, &bytes).unwrap();
    let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.iter().any(|p| p.contains("journal")), "{:?}", report.problems);
    let err = count_rows(dir.path()).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains("committed records follow"), "{err}");
}

fn data_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".adb"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn steady_overwrites_do_not_grow_files_without_bound() {
    const KEYS: u64 = 100_000;
    const ROUNDS: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        sync_mode: SyncMode::Off,
        checkpoint_interval: None,
        checkpoint_journal_bytes: 8 << 20,
        ..Config::default()
    };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    let live_bytes = KEYS * (16 + 100);
    let mut max_seen = 0;
    let mut batch = WriteBatch::new();
    for round in 0..ROUNDS {
        for k in 0..KEYS {
            // Spread over the key space so every leaf is rewritten each round.
            let key = format!("{:016}", (k * 7919) % KEYS);
            batch.put(&t, key.as_bytes(), &[(round as u8) ^ (k as u8); 100]).unwrap();
            if batch.len() == 1000 {
                engine.write(&batch).unwrap();
                batch.clear();
            }
        }
        let size = data_file_bytes(dir.path());
        max_seen = max_seen.max(size);
        eprintln!("round {round}: data files {size} bytes ({:.2}x live)", size as f64 / live_bytes as f64);
    }
    engine.checkpoint().unwrap();
    let final_size = data_file_bytes(dir.path());
    eprintln!(
        "max {max_seen} bytes, final {final_size} bytes, live {live_bytes} bytes, checkpoints {}",
        engine.stats().checkpoints
    );
    assert!(engine.stats().checkpoints >= ROUNDS / 2, "the journal volume should have triggered checkpoints");
    assert!(max_seen <= 3 * live_bytes, "data files reached {max_seen} bytes for {live_bytes} live bytes");
    let v = engine.get(&t, format!("{:016}", 5).as_bytes()).unwrap().unwrap();
    assert_eq!(v.len(), 100);
    engine.close().unwrap();
    let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn checkpoints_reuse_decoded_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TableConfig { leaf_page_max_bytes: 4096, ..TableConfig::default() };
    {
        let engine = Engine::open(dir.path(), no_checkpoints()).unwrap();
        let t = engine.create_table("t", cfg).unwrap();
        let mut b = WriteBatch::new();
        for i in 0u32..20_000 {
            b.put(&t, format!("key-{i:08}").as_bytes(), b"value").unwrap();
        }
        engine.write(&b).unwrap();
        engine.close().unwrap();
    }
    let engine = Engine::open(dir.path(), no_checkpoints()).unwrap();
    let t = engine.table("t").unwrap();
    // Read every page once: each key is decoded exactly once.
    let mut c = engine.cursor(&t).unwrap();
    let mut n = 0;
    while c.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 20_000);
    let decoded = engine.stats().keys_decoded;
    assert!(decoded >= 20_000, "{decoded}");
    // Dirty every leaf, then reconcile them all.
    let mut b = WriteBatch::new();
    for i in (0u32..20_000).step_by(50) {
        b.put(&t, format!("key-{i:08}").as_bytes(), b"changed").unwrap();
    }
    engine.write(&b).unwrap();
    let before = engine.stats();
    engine.checkpoint().unwrap();
    let after = engine.stats();
    assert!(
        after.leaf_pages_written - before.leaf_pages_written >= 100,
        "{} leaves written",
        after.leaf_pages_written - before.leaf_pages_written
    );
    assert_eq!(after.keys_decoded, before.keys_decoded, "a checkpoint decoded keys");
    engine.close().unwrap();
}

#[test]
fn large_values_up_to_16_mib_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), no_checkpoints()).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    let big: Vec<u8> = (0..16 * 1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
    engine.put(&t, b"big", &big).unwrap();
    engine.put(&t, b"mid", &big[..100_000]).unwrap();
    engine.checkpoint().unwrap();
    engine.put(&t, b"mid", &big[..50_000]).unwrap();
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), no_checkpoints()).unwrap();
    let t = engine.table("t").unwrap();
    assert_eq!(&*engine.get(&t, b"big").unwrap().unwrap(), &big[..]);
    assert_eq!(&*engine.get(&t, b"mid").unwrap().unwrap(), &big[..50_000]);
    let too_big = vec![0u8; storage::limits::value_size_max_bytes + 1];
    assert!(matches!(engine.put(&t, b"x", &too_big), Err(storage::StorageError::ValueTooLarge { .. })));
    assert!(matches!(engine.put(&t, &[0u8; 9000], b"v"), Err(storage::StorageError::KeyTooLarge { .. })));
    engine.close().unwrap();
    let report = storage::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.overflow_blocks >= 2);
}

#[test]
fn a_checkpoint_retires_every_older_journal_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { journal_file_max_bytes: 16 * 1024, ..no_checkpoints() };
    let engine = Engine::open(dir.path(), config.clone()).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    for i in 0u32..300 {
        engine.put(&t, &i.to_be_bytes(), &[7u8; 200]).unwrap();
    }
    assert!(journal_files(dir.path()).len() > 3, "the journal should have rotated");
    engine.checkpoint().unwrap();
    assert_eq!(journal_files(dir.path()).len(), 1);
    assert_eq!(engine.journal_file_count(), 1);
    engine.put(&t, b"after", b"checkpoint").unwrap();
    drop(t);
    drop(engine);
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.table("t").unwrap();
    assert_eq!(engine.get(&t, b"after").unwrap().as_deref(), Some(&b"checkpoint"[..]));
    assert_eq!(engine.get(&t, &299u32.to_be_bytes()).unwrap().as_deref(), Some(&[7u8; 200][..]));
    engine.close().unwrap();
}

#[test]
fn a_table_handle_only_works_with_its_own_engine() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ea = Engine::open(a.path(), no_checkpoints()).unwrap();
    let eb = Engine::open(b.path(), no_checkpoints()).unwrap();
    let ta = ea.create_table("t", TableConfig::default()).unwrap();
    eb.create_table("t", TableConfig::default()).unwrap();
    assert!(matches!(eb.put(&ta, b"k", b"v"), Err(storage::StorageError::TableNotFound(_))));
    assert!(matches!(eb.get(&ta, b"k"), Err(storage::StorageError::TableNotFound(_))));
    ea.drop_table("t").unwrap();
    assert!(matches!(ea.put(&ta, b"k", b"v"), Err(storage::StorageError::TableNotFound(_))));
    ea.close().unwrap();
    eb.close().unwrap();
}
