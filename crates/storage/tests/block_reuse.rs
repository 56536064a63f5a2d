//! Readers of older versions against writers that free and reuse blocks at
//! once (blocks allocated since the last checkpoint), under eviction.
//!
//! The race this guards: a reader takes an evicted leaf's address from a
//! slot shared with the live tree; before it reads the block, a writer
//! loads the same leaf through that slot, replaces it and frees the block,
//! and another page reuses it. Found by a 1 M-record YCSB load ("checksum
//! mismatch ... parent expects"); the reader must answer from the slot.

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::{Config, Engine, SyncMode, TableConfig, WriteBatch};

const KEYS: u32 = 40_000;

fn key(k: u32) -> [u8; 4] {
    k.to_be_bytes()
}

#[test]
fn readers_never_see_a_reused_block() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        sync_mode: SyncMode::Off,
        checkpoint_interval: None,
        checkpoint_journal_bytes: u64::MAX,
        cache_size_bytes: 2 << 20,
        ..Config::default()
    };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    let mut batch = WriteBatch::new();
    for k in 0..KEYS {
        batch.put(&t, &key(k), &[k as u8; 200]).unwrap();
        if batch.len() == 1000 {
            engine.write(&batch).unwrap();
            batch.clear();
        }
    }
    engine.write(&batch).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for id in 0..4u64 {
        let (engine, t, stop) = (engine.clone(), t.clone(), stop.clone());
        threads.push(std::thread::spawn(move || -> Result<u64, String> {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(id);
            let mut ops = 0;
            while !stop.load(Ordering::Relaxed) {
                let k = rng.gen_range(0..KEYS);
                if id % 2 == 0 {
                    engine.put(&t, &key(k), &[rng.gen(); 200]).map_err(|e| format!("write {k}: {e}"))?;
                } else {
                    let got = engine.get(&t, &key(k)).map_err(|e| format!("read {k}: {e}"))?;
                    if got.map(|v| v.len()) != Some(200) {
                        return Err(format!("read {k}: wrong or missing value"));
                    }
                }
                ops += 1;
            }
            Ok(ops)
        }));
    }
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let ops: Vec<u64> = threads.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    assert!(ops.iter().all(|&n| n > 0), "{ops:?}");
    let stats = engine.stats();
    assert!(stats.pages_evicted > 0, "the cache is small enough to evict");
    eprintln!("ops per thread {ops:?}, reads that raced a block reuse: {}", stats.reads_raced_block_reuse);
}
