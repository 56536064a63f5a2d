//! Child process of the cache-size test: loads a data set ten times the
//! cache, runs random reads and updates, random inserts, checkpoints, reopens and checks
//! every key, then prints its memory figures on one line:
//! `rss_baseline_kib N rss_peak_kib N meter_peak_bytes N data_bytes N evicted N`.
//! Run alone, so the peak resident set is the engine's.
//!
//! Usage: cache_rss DIR CACHE_BYTES KEYS

use rand::{Rng, SeedableRng};
use storage::{Config, Engine, SyncMode, TableConfig, WriteBatch};

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn value(i: u64, v: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(100);
    while out.len() < 100 {
        out.extend_from_slice(&(i ^ ((v as u64) << 40)).to_le_bytes());
    }
    out.truncate(100);
    out
}

/// A random key, after every loaded one.
fn extra_key(x: u64) -> Vec<u8> {
    let mut k = vec![0xFF];
    k.extend_from_slice(&x.to_be_bytes());
    k
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let cache: usize = args[2].parse().unwrap();
    let keys: u64 = args[3].parse().unwrap();
    let config =
        Config { sync_mode: SyncMode::Off, cache_size_bytes: cache, checkpoint_interval: None, ..Config::default() };
    let baseline = status_kib("VmRSS:");
    let engine = Engine::open(&dir, config.clone()).unwrap();
    // Stored uncompressed: the data on disk is then the data the cache holds.
    let stored = TableConfig { compressor: storage::Compressor::None, ..TableConfig::default() };
    let t = engine.create_table("t", stored).unwrap();
    let mut versions = vec![0u16; keys as usize];
    let mut b = WriteBatch::new();
    for i in 0..keys {
        b.put(&t, &i.to_be_bytes(), &value(i, 0)).unwrap();
        if b.len() == 1000 {
            engine.write(&b).unwrap();
            b.clear();
        }
    }
    engine.write(&b).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    for _ in 0..2000 {
        let mut b = WriteBatch::new();
        for _ in 0..20 {
            let i = rng.gen_range(0..keys);
            versions[i as usize] += 1;
            b.put(&t, &i.to_be_bytes(), &value(i, versions[i as usize])).unwrap();
        }
        engine.write(&b).unwrap();
        for _ in 0..20 {
            let i = rng.gen_range(0..keys);
            let got = engine.get(&t, &i.to_be_bytes()).unwrap().expect("present");
            assert_eq!(&*got, value(i, versions[i as usize]).as_slice(), "key {i}");
        }
    }
    // Random inserts past the loaded keys (first byte 0xFF): leaves read
    // back from disk split, and their separators must not keep the read
    // pages' buffers alive in the parents.
    let mut extra = std::collections::BTreeSet::new();
    while extra.len() < keys as usize / 8 {
        let mut b = WriteBatch::new();
        for _ in 0..50 {
            let x: u64 = rng.gen();
            extra.insert(x);
            b.put(&t, &extra_key(x), &value(x, 0)).unwrap();
        }
        engine.write(&b).unwrap();
    }
    engine.checkpoint().unwrap();
    let evicted = engine.stats().pages_evicted;
    let mut meter_peak = engine.cache().peak();
    engine.close().unwrap();
    let engine = Engine::open(&dir, config).unwrap();
    let t = engine.table("t").unwrap();
    let mut c = engine.cursor(&t).unwrap();
    let mut n = 0u64;
    let mut extras = extra.iter();
    while let Some((k, v)) = c.next().unwrap() {
        if k[0] == 0xFF {
            let x = *extras.next().expect("no more random keys were inserted");
            assert_eq!(&k[..], extra_key(x).as_slice());
            assert_eq!(&*v, value(x, 0).as_slice(), "random key {x} after reopen");
            continue;
        }
        let i = u64::from_be_bytes(k[..8].try_into().unwrap());
        assert_eq!(i, n);
        assert_eq!(&*v, value(i, versions[i as usize]).as_slice(), "key {i} after reopen");
        n += 1;
    }
    assert_eq!(n, keys);
    assert!(extras.next().is_none(), "random keys missing after reopen");
    meter_peak = meter_peak.max(engine.cache().peak());
    engine.close().unwrap();
    let data: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".adb"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    println!(
        "rss_baseline_kib {baseline} rss_peak_kib {} meter_peak_bytes {meter_peak} data_bytes {data} evicted {evicted}",
        status_kib("VmHWM:")
    );
}
