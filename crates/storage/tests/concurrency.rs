//! Many threads reading and writing the same and different tables at once.
//! Writers keep an invariant inside each batch (a per-writer count key equals
//! the number of that writer's rows); readers scanning one version of a
//! table must always find it true, and the final contents must match a
//! model of what every writer committed.

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use storage::{Config, Engine, SyncMode, TableConfig, WriteBatch};

const WRITERS: usize = 4;
const READERS: usize = 3;
const BATCHES: usize = 300;

fn small() -> TableConfig {
    TableConfig { leaf_page_max_bytes: 2048, internal_page_max_bytes: 1024, ..TableConfig::default() }
}

/// Returns each writer's final rows and its batch count: `BATCHES`, or more
/// while no background checkpoint has run yet (a fast disk can take them
/// all before the checkpoint thread's first look), for at most 30 s.
fn writer(engine: Engine, w: usize, seed: u64) -> (BTreeMap<Vec<u8>, Vec<u8>>, usize) {
    let shared = engine.table("shared").unwrap();
    let own = engine.table(&format!("own{w}")).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed + w as u64);
    let mut rows: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let started = std::time::Instant::now();
    let mut n = 0;
    while n < BATCHES || (engine.stats().checkpoints == 0 && started.elapsed().as_secs() < 30) {
        let mut b = WriteBatch::new();
        for _ in 0..rng.gen_range(1..20) {
            let key = format!("b/{w}/{:05}", rng.gen_range(0..2000)).into_bytes();
            if rng.gen_bool(0.3) {
                b.delete(&shared, &key).unwrap();
                rows.remove(&key);
            } else {
                let v = vec![n as u8; rng.gen_range(1..200)];
                b.put(&shared, &key, &v).unwrap();
                rows.insert(key, v);
            }
        }
        b.put(&shared, format!("a/{w}").as_bytes(), &(rows.len() as u64).to_le_bytes()).unwrap();
        b.put(&own, &(n as u64).to_be_bytes(), b"x").unwrap();
        engine.write(&b).unwrap();
        n += 1;
    }
    (rows, n)
}

fn reader(engine: Engine, stop: Arc<AtomicBool>) -> usize {
    let shared = engine.table("shared").unwrap();
    let mut scans = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut counts = [None; WRITERS];
        let mut seen = [0u64; WRITERS];
        let mut c = engine.cursor(&shared).unwrap();
        while let Some((k, v)) = c.next().unwrap() {
            let k = std::str::from_utf8(&k).unwrap().to_string();
            let w: usize = k.split('/').nth(1).unwrap().parse().unwrap();
            if k.starts_with("a/") {
                counts[w] = Some(u64::from_le_bytes(v[..8].try_into().unwrap()));
            } else {
                seen[w] += 1;
            }
        }
        for w in 0..WRITERS {
            assert_eq!(counts[w].unwrap_or(0), seen[w], "writer {w}: a scan saw a half-applied batch");
        }
        scans += 1;
    }
    scans
}

#[test]
fn readers_and_writers_on_shared_and_private_tables() {
    let seed: u64 = rand::random();
    eprintln!("seed {seed}");
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        sync_mode: SyncMode::Fsync,
        checkpoint_interval: None,
        checkpoint_journal_bytes: 256 * 1024,
        ..Config::default()
    };
    let engine = Engine::open(dir.path(), config.clone()).unwrap();
    engine.create_table("shared", small()).unwrap();
    for w in 0..WRITERS {
        engine.create_table(&format!("own{w}"), small()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(WRITERS + READERS));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (e, s, b) = (engine.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                b.wait();
                reader(e, s)
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (e, b) = (engine.clone(), start.clone());
            std::thread::spawn(move || {
                b.wait();
                writer(e, w, seed)
            })
        })
        .collect();
    let rows: Vec<_> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let scans: usize = readers.into_iter().map(|h| h.join().unwrap()).sum();
    eprintln!(
        "{scans} consistent scans during the writes; {} journal syncs for {} commits",
        engine.stats().journal_syncs,
        engine.stats().commits
    );
    let stats = engine.stats();
    // Group commit: concurrent committers share fsyncs.
    assert!(stats.journal_syncs < stats.commits, "{} syncs for {} commits", stats.journal_syncs, stats.commits);
    assert!(engine.stats().checkpoints > 0, "checkpoints should have run during the writes");
    engine.close().unwrap();

    let engine = Engine::open(dir.path(), config).unwrap();
    let shared = engine.table("shared").unwrap();
    for (w, (mine, batches)) in rows.iter().enumerate() {
        for (k, v) in mine {
            assert_eq!(engine.get(&shared, k).unwrap().as_deref(), Some(&v[..]));
        }
        let own = engine.table(&format!("own{w}")).unwrap();
        let mut c = engine.cursor(&own).unwrap();
        let mut n = 0;
        while c.next().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, *batches);
    }
    let total: usize = rows.iter().map(|(r, _)| r.len()).sum::<usize>() + WRITERS;
    let mut c = engine.cursor(&shared).unwrap();
    let mut n = 0;
    while c.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, total);
    engine.close().unwrap();
    let report = storage::verify::verify_dir(&storage::OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
