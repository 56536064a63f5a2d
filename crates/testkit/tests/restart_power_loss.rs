//! Regression (found in review): the process dies (kill -9) with journal records written but not
//! yet fsynced (SyncMode::Off/Background, or Fsync's in-flight record). On
//! restart, replay reads those records from the page cache and
//! `Journal::open` immediately creates and syncs a *new* journal file —
//! without syncing the previous one (journal invariant 2). If power is lost
//! before the restart's own checkpoint has finished and removed the old file,
//! the old file is now a non-last file with a missing/torn tail, and replay
//! refuses the directory as corrupt.

use std::path::Path;
use std::sync::{Arc, Mutex};
use storage::{Config, Engine, SyncMode, TableConfig};
use testkit::{FaultVfs, MemVfs};

fn config() -> Config {
    Config {
        sync_mode: SyncMode::Off,
        checkpoint_interval: None,
        checkpoint_journal_bytes: u64::MAX,
        ..Config::default()
    }
}

/// A directory as a kill -9 leaves it: 20 commits written, not fsynced.
fn killed_image() -> MemVfs {
    let mem = MemVfs::new();
    let engine = Engine::open_with_vfs(Arc::new(mem.clone()), Path::new("/db"), config()).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    engine.checkpoint().unwrap();
    for i in 0u32..20 {
        engine.put(&t, &i.to_be_bytes(), b"v").unwrap();
    }
    std::mem::forget(t);
    std::mem::forget(engine); // kill -9: no drop, no sync
    mem
}

#[test]
fn power_loss_during_restart_recovery_leaves_an_openable_directory() {
    let dir = Path::new("/db");
    let mut failures = Vec::new();
    for fail_at in 1..80u64 {
        let mem = killed_image();
        let fault = FaultVfs::new(Arc::new(mem.clone()), fail_at);
        let image: Arc<Mutex<Option<MemVfs>>> = Arc::default();
        {
            let (slot, mem) = (image.clone(), mem.clone());
            fault.on_trip(move || *slot.lock().unwrap() = Some(mem.crash(fail_at, false)));
        }
        let restarted = Engine::open_with_vfs(Arc::new(fault.clone()), dir, config());
        if !fault.tripped() {
            // The whole restart (replay, checkpoint, old journal removed) fit in fail_at - 1 I/Os.
            fault.disarm();
            restarted.unwrap().close().unwrap();
            eprintln!("restart completes in {} I/Os", fail_at - 1);
            break;
        }
        drop(restarted);
        let image = image.lock().unwrap().take().unwrap();
        if let Err(e) = Engine::open_with_vfs(Arc::new(image), dir, config()) {
            failures.push(format!("power loss at I/O {fail_at} of the restart: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} unopenable images, e.g. {:#?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}
