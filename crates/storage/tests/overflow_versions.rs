//! Regression (found in review): a reader's version holds an overflow value that was never loaded;
//! the writer deletes (or overwrites) that key, which retires the overflow
//! block straight to `discard` without loading its bytes. After one
//! checkpoint the block is `avail`, the next checkpoint reuses it, and the
//! reader of the old version reads a foreign block.

use storage::{Config, Engine, SyncMode, TableConfig};

fn quiet() -> Config {
    Config {
        sync_mode: SyncMode::Off,
        checkpoint_interval: None,
        checkpoint_journal_bytes: u64::MAX,
        ..Config::default()
    }
}

fn tc() -> TableConfig {
    TableConfig { overflow_min_bytes: 64, ..TableConfig::default() }
}

/// A cursor holds the version where `a` has a never-loaded 5000-byte
/// overflow value; `drop_a` removes that value from the live tree; two
/// checkpoints and new overflow writes then reuse free space. The cursor
/// must still read `a`'s old bytes.
fn check(drop_a: impl Fn(&Engine, &storage::Table)) {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path(), quiet()).unwrap();
        let t = engine.create_table("t", tc()).unwrap();
        engine.put(&t, b"a", &[0xAA; 5000]).unwrap();
        engine.put(&t, b"b", b"small").unwrap();
        engine.close().unwrap();
    }
    let engine = Engine::open(dir.path(), quiet()).unwrap();
    let t = engine.table("t").unwrap();
    let mut c = engine.cursor(&t).unwrap();
    // Position on "b": the cursor now holds the leaf, whose "a" value is not loaded.
    let (k, _) = c.seek(b"b").unwrap().unwrap();
    assert_eq!(&*k, b"b");

    drop_a(&engine, &t);
    engine.checkpoint().unwrap(); // a's block: discard -> pending -> avail
    for i in 0..8u8 {
        engine.put(&t, &[b'c', i], &[0xCC; 5000]).unwrap();
    }
    engine.checkpoint().unwrap(); // new overflow blocks reuse avail space

    match c.prev() {
        Ok(Some((k, v))) => {
            assert_eq!(&*k, b"a");
            assert_eq!(&*v, &[0xAA; 5000][..]);
        }
        other => panic!("cursor over its own version: expected (a, 0xAA*5000), got {other:?}"),
    }
}

#[test]
fn cursor_reads_overflow_value_of_its_version_after_delete_and_two_checkpoints() {
    check(|e, t| {
        e.delete(t, b"a").unwrap();
    });
}

#[test]
fn cursor_reads_overflow_value_of_its_version_after_overwrite_and_two_checkpoints() {
    check(|e, t| {
        e.put(t, b"a", b"now small").unwrap();
    });
}
