//! Dropping the last handle of an engine, without `close`, ends it before
//! the drop returns: its background threads have stopped and its directory
//! lock is released, so the directory opens again at once. (A background
//! job that held the engine a moment longer made the next open fail on
//! the lock, seen as a rare failure of the model test.)

use std::time::Duration;
use storage::{Config, Engine, TableConfig};

#[test]
fn the_directory_reopens_as_soon_as_the_last_handle_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints due all the time keep the background thread busy.
    let busy = Config {
        checkpoint_interval: Some(Duration::from_millis(1)),
        checkpoint_journal_bytes: 1,
        ..Config::default()
    };
    let engine = Engine::open(dir.path(), busy.clone()).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    drop(t);
    drop(engine);
    for round in 0u32..40 {
        let engine = Engine::open(dir.path(), busy.clone()).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let t = engine.table("t").unwrap();
        for i in 0u32..200 {
            engine.put(&t, &(round * 1000 + i).to_be_bytes(), &[7; 300]).unwrap();
        }
        // Let a background checkpoint start, then drop mid-way.
        std::thread::sleep(Duration::from_millis(u64::from(round * 3)));
        let clone = engine.clone();
        drop(t);
        drop(engine);
        assert!(clone.get(&clone.table("t").unwrap(), &(round * 1000).to_be_bytes()).unwrap().is_some());
        drop(clone);
    }
    let engine = Engine::open(dir.path(), Config::default()).unwrap();
    let t = engine.table("t").unwrap();
    let mut c = engine.cursor(&t).unwrap();
    let mut n = 0;
    while c.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 40 * 200);
    engine.close().unwrap();
}
