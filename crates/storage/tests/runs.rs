//! Write-optimized tables (`runs.rs`): writes that read no page, snapshots
//! across freezes, tombstones over older runs, cursors that turn, and the
//! run list through checkpoints and reopens.

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;
use storage::{Config, Engine, SyncMode, Table, TableConfig, TableFormat, TxnOptions, WriteBatch};

const MIB: usize = 1024 * 1024;

fn config(cache: usize) -> Config {
    Config { sync_mode: SyncMode::Off, checkpoint_interval: None, cache_size_bytes: cache, ..Config::default() }
}

fn table(format: TableFormat) -> TableConfig {
    TableConfig { format, leaf_page_max_bytes: 4096, ..TableConfig::default() }
}

/// An index-like key: 60 bytes, spread at random over the key space.
fn key(rng: &mut impl Rng) -> Vec<u8> {
    let mut k = format!("{:016x}", rng.gen::<u64>()).into_bytes();
    k.resize(60, b'u');
    k
}

/// Leaf pages read while inserting `n` random keys in batches of 25
/// through a 2 MiB cache, after `n` keys already loaded.
fn leaf_reads_inserting(format: TableFormat, n: usize) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    // Merges read runs, by design; here only the writes are counted.
    let engine = Engine::open(dir.path(), quiet(2 * MIB)).unwrap();
    let t = engine.create_table("t", table(format)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut insert = |engine: &Engine| {
        for _ in 0..n / 25 {
            let mut b = WriteBatch::new();
            for _ in 0..25 {
                b.put(&t, &key(&mut rng), b"").unwrap();
            }
            engine.write(&b).unwrap();
        }
    };
    insert(&engine);
    let before = engine.stats();
    insert(&engine);
    let after = engine.stats();
    assert!(after.pages_evicted > before.pages_evicted, "the index never outgrew the cache");
    (after.leaf_pages_read - before.leaf_pages_read, after.memtables_frozen)
}

/// The point of the format: with the index several times the cache, a
/// B+tree reads a leaf for most inserts; a write-optimized table reads none.
#[test]
fn inserts_into_a_write_optimized_table_read_no_page() {
    let n = 40_000;
    let (btree_reads, _) = leaf_reads_inserting(TableFormat::BTree, n);
    let (runs_reads, frozen) = leaf_reads_inserting(TableFormat::WriteOptimized, n);
    assert!(btree_reads > n as u64 / 4, "the B+tree read only {btree_reads} leaves for {n} inserts");
    assert_eq!(runs_reads, 0, "inserts into a write-optimized table read leaves");
    assert!(frozen > 4, "the memtable was frozen {frozen} times");
}

fn put(engine: &Engine, t: &Table, k: &str, v: &str) {
    engine.put(t, k.as_bytes(), v.as_bytes()).unwrap();
}

fn scan(engine: &Engine, t: &Table) -> Vec<(String, String)> {
    let mut c = engine.cursor(t).unwrap();
    std::iter::from_fn(|| c.next().unwrap())
        .map(|(k, v)| (String::from_utf8(k.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A snapshot keeps exactly the runs it saw: later puts, tombstones over
/// older runs and freezes do not show through, by get or by cursor.
#[test]
fn a_snapshot_sees_its_version_across_freezes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), config(4 * MIB)).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    put(&engine, &t, "a", "1");
    put(&engine, &t, "b", "1");
    engine.delete(&t, b"b").unwrap(); // the only run: removed, no tombstone
    put(&engine, &t, "c", "1");
    assert!(engine.freeze_memtable(&t).unwrap());
    assert!(!engine.freeze_memtable(&t).unwrap(), "an empty memtable was frozen");
    put(&engine, &t, "a", "2");
    let snap = engine.begin(TxnOptions::default()).unwrap();
    engine.delete(&t, b"c").unwrap(); // a tombstone over the frozen run
    put(&engine, &t, "d", "3");
    assert!(engine.freeze_memtable(&t).unwrap());
    put(&engine, &t, "a", "3");
    assert_eq!(scan(&engine, &t), pairs(&[("a", "3"), ("d", "3")]));
    assert_eq!(engine.get(&t, b"c").unwrap(), None);
    assert_eq!(snap.get(&t, b"a").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(snap.get(&t, b"c").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(snap.get(&t, b"d").unwrap(), None);
    let mut c = snap.cursor(&t).unwrap();
    let seen: Vec<_> = std::iter::from_fn(|| c.next().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert_eq!(seen, vec![(b"a".to_vec(), b"2".to_vec()), (b"c".to_vec(), b"1".to_vec())]);
    drop(c);
    drop(snap);
    // Through a checkpoint and a reopen, and once more through recovery.
    engine.checkpoint().unwrap();
    engine.delete(&t, b"d").unwrap();
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), config(4 * MIB)).unwrap();
    let t = engine.table("t").unwrap();
    assert_eq!(scan(&engine, &t), pairs(&[("a", "3")]));
    let report = storage::verify::verify_dir(&storage::OsVfs, dir.path(), &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "verify: {:?}", report.problems);
}

/// Random walks of `next` and `prev` with seeks, over runs with
/// overlapping keys and tombstones, against a `BTreeMap`.
#[test]
fn a_merged_cursor_turns_like_a_btree_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), config(4 * MIB)).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for round in 0..6 {
        for _ in 0..300 {
            let k = format!("k{:04}", rng.gen_range(0..500)).into_bytes();
            if rng.gen_bool(0.3) {
                engine.delete(&t, &k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("v{round}").into_bytes();
                engine.put(&t, &k, &v).unwrap();
                model.insert(k, v);
            }
        }
        engine.freeze_memtable(&t).unwrap();
    }
    let bound = |rng: &mut rand::rngs::StdRng| {
        let k = format!("k{:04}", rng.gen_range(0..500)).into_bytes();
        match rng.gen_range(0..3) {
            0 => Bound::Included(k),
            1 => Bound::Excluded(k),
            _ => Bound::Unbounded,
        }
    };
    for _ in 0..300 {
        let (lo, hi) = (bound(&mut rng), bound(&mut rng));
        let mut c = engine.cursor(&t).unwrap();
        c.set_bounds(lo.clone(), hi.clone());
        let keys: Vec<&Vec<u8>> = model
            .iter()
            .filter(|(k, _)| std::ops::RangeBounds::contains(&(lo.clone(), hi.clone()), *k))
            .map(|(k, _)| k)
            .collect();
        // Position in `keys` of the entry the cursor stands on; a walk may
        // start with a seek (or an exact seek) instead of an end.
        let mut at: Option<usize> = None;
        if rng.gen_bool(0.5) {
            let probe = format!("k{:04}", rng.gen_range(0..500)).into_bytes();
            let first = keys.partition_point(|k| **k < probe);
            if rng.gen_bool(0.3) {
                let got = c.seek_exact(&probe).unwrap();
                let want = keys.get(first).filter(|k| ***k == probe).map(|k| model[*k].clone());
                assert_eq!(got.map(|v| v.to_vec()), want, "seek_exact");
                continue;
            }
            let got = c.seek(&probe).unwrap();
            assert_eq!(got.map(|(k, _)| k.to_vec()), keys.get(first).map(|k| k.to_vec()), "seek");
            if first == keys.len() {
                assert!(c.next().unwrap().is_none(), "a seek past the end started over");
                continue;
            }
            at = Some(first);
        }
        for _ in 0..40 {
            let back = rng.gen_bool(0.5);
            let got = if back { c.prev().unwrap() } else { c.next().unwrap() };
            let want = match (at, back) {
                (None, false) => 0,
                (None, true) => keys.len().wrapping_sub(1),
                (Some(i), false) => i + 1,
                (Some(i), true) => i.wrapping_sub(1),
            };
            match keys.get(want) {
                Some(k) => {
                    let (gk, gv) = got.expect("the cursor ended early");
                    assert_eq!(&gk[..], &k[..]);
                    assert_eq!(&gv[..], &model[*k][..]);
                    at = Some(want);
                }
                None => {
                    assert!(got.is_none(), "the cursor went past its bounds");
                    break;
                }
            }
        }
    }
    engine.close().unwrap();
}

/// A table's format is kept in the catalog: it survives a reopen, and a
/// B+tree table stays one.
#[test]
fn the_format_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), config(4 * MIB)).unwrap();
    engine.create_table("w", table(TableFormat::WriteOptimized)).unwrap();
    engine.create_table("b", table(TableFormat::BTree)).unwrap();
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), config(4 * MIB)).unwrap();
    assert_eq!(engine.table("w").unwrap().config().format, TableFormat::WriteOptimized);
    assert_eq!(engine.table("b").unwrap().config().format, TableFormat::BTree);
    assert!(!engine.freeze_memtable(&engine.table("b").unwrap()).unwrap());
}

fn quiet(cache: usize) -> Config {
    Config { merge_runs_in_background: false, ..config(cache) }
}

fn verify(dir: &std::path::Path) -> storage::verify::VerifyReport {
    let report = storage::verify::verify_dir(&storage::OsVfs, dir, &mut |_| {}).unwrap();
    assert!(report.problems.is_empty(), "verify: {:?}", report.problems);
    report
}

/// Merges keep the contents; a merge that takes the oldest run drops its
/// tombstones; a snapshot from before a merge reads the replaced runs,
/// from disk, until it ends, and only then are their blocks freed; the
/// checkpoints between name every block they leave allocated.
#[test]
fn merges_keep_contents_and_free_replaced_runs_after_their_readers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), quiet(MIB)).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut write_round = |engine: &Engine, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, round: u32| {
        let mut b = WriteBatch::new();
        for _ in 0..400 {
            let k = format!("k{:05}", rng.gen_range(0..3000)).into_bytes();
            if rng.gen_bool(0.25) {
                b.delete(&t, &k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("value {round} {}", "x".repeat(rng.gen_range(0..60))).into_bytes();
                b.put(&t, &k, &v).unwrap();
                model.insert(k, v);
            }
        }
        engine.write(&b).unwrap();
        engine.freeze_memtable(&t).unwrap();
    };
    for round in 0..3 {
        write_round(&engine, &mut model, round);
    }
    let contents = |engine: &Engine| -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut c = engine.cursor(&t).unwrap();
        std::iter::from_fn(|| c.next().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    };
    let snap = engine.begin(TxnOptions::default()).unwrap();
    let before = model.clone();
    let mut merged = 0;
    for round in 3..12 {
        write_round(&engine, &mut model, round);
        while engine.merge_runs(&t).unwrap() {
            merged += 1;
        }
        assert!(contents(&engine) == model, "contents differ after merges in round {round}");
        let runs = engine.table_runs(&t).unwrap();
        assert!(runs.len() <= 4, "round {round}: runs of {runs:?} bytes left after merging");
        if round % 3 == 0 {
            engine.checkpoint().unwrap();
            verify(dir.path());
        }
    }
    assert!(merged >= 3, "only {merged} merges");
    let stats = engine.stats();
    assert_eq!(stats.runs_merged, merged);
    assert_eq!(stats.runs_reaped, 0, "runs freed while a snapshot from before could read them");
    // Push the snapshot's pages out of memory, then read them back from disk.
    engine.checkpoint().unwrap();
    engine.evict(usize::MAX).unwrap();
    let reads = engine.stats().leaf_pages_read;
    let mut c = snap.cursor(&t).unwrap();
    let seen: BTreeMap<Vec<u8>, Vec<u8>> =
        std::iter::from_fn(|| c.next().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert!(seen == before, "the snapshot's contents changed under merges");
    assert!(engine.stats().leaf_pages_read > reads + 10, "the replaced runs were not read from disk");
    drop(c);
    drop(snap);
    // A commit publishes a version of the new epoch; the next merge call reaps.
    write_round(&engine, &mut model, 12);
    engine.merge_runs(&t).unwrap();
    assert!(engine.stats().runs_reaped > 0, "replaced runs were never freed");
    engine.checkpoint().unwrap();
    let with_tombstones = verify(dir.path()).entries;
    // Merge everything into one run: tombstones and older versions go.
    // Published at once: with no commit since, nothing reads the replaced
    // runs, so the compaction frees them itself.
    let reaped = engine.stats().runs_reaped;
    assert!(engine.compact_runs(&t).unwrap());
    assert!(engine.stats().runs_reaped > reaped, "a compaction's replaced runs wait for a commit");
    assert_eq!(engine.table_runs(&t).unwrap().len(), 2, "a memtable and one run");
    assert!(!engine.compact_runs(&t).unwrap(), "one run was compacted again");
    write_round(&engine, &mut model, 13);
    engine.merge_runs(&t).unwrap(); // reaps
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    let report = verify(dir.path());
    assert!(report.entries < with_tombstones, "{} entries before, {} after", with_tombstones, report.entries);
    let engine = Engine::open(dir.path(), quiet(MIB)).unwrap();
    let t = engine.table("t").unwrap();
    let mut c = engine.cursor(&t).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> =
        std::iter::from_fn(|| c.next().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert!(got == model, "contents differ after a reopen");
}

/// Readers, writers and the background merger at once: every commit seen
/// whole, the final contents exact, the directory consistent.
#[test]
fn background_merges_under_concurrent_readers_and_writers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config { memtable_max_bytes: 32 * 1024, ..config(MIB) };
    let engine = Engine::open(dir.path(), cfg.clone()).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    // Each batch writes the same value to all 10 keys of one group: a
    // reader must never see a group half-written.
    let groups = 200u32;
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (engine, t) = (engine.clone(), t.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                for n in 0..1500u32 {
                    let g = rng.gen_range(0..groups);
                    let mut b = WriteBatch::new();
                    for i in 0..10 {
                        b.put(&t, format!("g{g:04}/{i}").as_bytes(), format!("{w}-{n}").as_bytes()).unwrap();
                    }
                    match engine.write(&b) {
                        Ok(_) | Err(storage::StorageError::WriteConflict { .. }) => {}
                        Err(e) => panic!("write: {e}"),
                    }
                }
            })
        })
        .collect();
    let reader = {
        let (engine, t) = (engine.clone(), t.clone());
        std::thread::spawn(move || {
            for _ in 0..60 {
                let snap = engine.begin(TxnOptions::default()).unwrap();
                let mut c = snap.cursor(&t).unwrap();
                let mut groups: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
                while let Some((k, v)) = c.next().unwrap() {
                    let k = String::from_utf8(k.to_vec()).unwrap();
                    groups.entry(k[..5].to_string()).or_default().push(v.to_vec());
                }
                for (g, vs) in groups {
                    assert_eq!(vs.len(), 10, "group {g} half there");
                    assert!(vs.iter().all(|v| *v == vs[0]), "group {g} half written");
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    let stats = engine.stats();
    assert!(
        stats.runs_merged > 0 && stats.memtables_frozen > 4,
        "frozen {}, merged {}",
        stats.memtables_frozen,
        stats.runs_merged
    );
    engine.close().unwrap();
    verify(dir.path());
}

/// A merge of the oldest runs that cancels out entirely leaves the
/// memtable as the only run: its tombstones go too (the oldest run holds
/// none), and a put and delete of one key past the budget freezes no
/// empty run.
#[test]
fn the_oldest_run_never_holds_a_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Config { memtable_max_bytes: 1, ..quiet(MIB) }).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    let mut b = WriteBatch::new();
    b.put(&t, b"gone", b"x").unwrap();
    b.delete(&t, b"gone").unwrap();
    engine.write(&b).unwrap();
    assert_eq!(engine.table_runs(&t).unwrap().len(), 1, "an empty memtable was frozen");
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), quiet(MIB)).unwrap();
    let t = engine.table("t").unwrap();
    engine.put(&t, b"a", b"x").unwrap();
    engine.freeze_memtable(&t).unwrap(); // [memtable, {a}]
    engine.delete(&t, b"a").unwrap();
    engine.freeze_memtable(&t).unwrap(); // [memtable, {a: tombstone}, {a}]
    assert_eq!(engine.table_runs(&t).unwrap().len(), 3);
    // A tombstone in the memtable, of a key no run holds.
    let mut b = WriteBatch::new();
    b.delete(&t, b"zzz").unwrap();
    engine.write(&b).unwrap();
    while engine.merge_runs(&t).unwrap() {}
    assert_eq!(engine.table_runs(&t).unwrap().len(), 1, "the runs did not cancel out");
    engine.checkpoint().unwrap();
    verify(dir.path());
    engine.put(&t, b"b", b"y").unwrap();
    engine.close().unwrap();
    verify(dir.path());
    let engine = Engine::open(dir.path(), quiet(MIB)).unwrap();
    let t = engine.table("t").unwrap();
    assert_eq!(scan(&engine, &t), pairs(&[("b", "y")]));
}

/// A snapshot held across many merges: the runs they replace wait for it,
/// merges pause once too many wait, every manifest still decodes, and a
/// reopen frees them.
#[test]
fn a_long_snapshot_pauses_merges_and_a_reopen_frees_what_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), quiet(MIB)).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    engine.put(&t, b"k00000", b"v").unwrap();
    let snap = engine.begin(TxnOptions::default()).unwrap();
    let mut merged = 0;
    for i in 1..600u32 {
        engine.put(&t, format!("k{i:05}").as_bytes(), b"v").unwrap();
        engine.freeze_memtable(&t).unwrap();
        merged += u32::from(engine.merge_runs(&t).unwrap());
        if i % 100 == 0 {
            engine.checkpoint().unwrap();
        }
    }
    assert!(merged > 50, "{merged} merges");
    assert!(engine.table_runs(&t).unwrap().len() > 20, "merges did not pause for the snapshot");
    assert_eq!(snap.get(&t, b"k00001").unwrap(), None);
    assert_eq!(engine.stats().runs_reaped, 0);
    engine.checkpoint().unwrap();
    verify(dir.path());
    drop(snap);
    engine.put(&t, b"last", b"v").unwrap();
    assert!(engine.merge_runs(&t).unwrap(), "merges did not resume");
    assert!(engine.stats().runs_reaped > 100);
    drop(engine);
    // Without a clean close: the last checkpoint's manifest names runs
    // merges retired; the reopen frees them.
    verify(dir.path());
    let engine = Engine::open(dir.path(), quiet(MIB)).unwrap();
    let t = engine.table("t").unwrap();
    assert_eq!(scan(&engine, &t).len(), 601);
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    verify(dir.path());
}

/// With the background merger behind, a writer waits (a write stall)
/// rather than let frozen runs, which every read probes, pile up.
#[test]
fn writers_wait_for_merges_past_the_stall_limit() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Config { memtable_max_bytes: 4096, ..config(MIB) }).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut most = 0;
    for _ in 0..400 {
        let mut b = WriteBatch::new();
        for _ in 0..50 {
            b.put(&t, &key(&mut rng), b"").unwrap();
        }
        engine.write(&b).unwrap();
        most = most.max(engine.table_runs(&t).unwrap().len());
    }
    let stats = engine.stats();
    assert!(stats.memtables_frozen > 100, "frozen {}", stats.memtables_frozen);
    // The limit, the memtable, and the run the last commit froze; more
    // only when a commit's wait ran out (2 s) on a loaded machine.
    assert!(most <= 3 * storage::limits::runs_frozen_stall, "{most} runs");
    engine.close().unwrap();
    verify(dir.path());
}

/// A merge writes its run's leaves side by side, in large writes, and a
/// later merge reads them back ahead, several pages per read, from disk;
/// the contents stay exact and the directory consistent.
#[test]
fn a_merge_reads_a_merged_run_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), quiet(4 * MIB)).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut model = BTreeMap::new();
    let mut round = |engine: &Engine, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        let mut b = WriteBatch::new();
        for _ in 0..3000 {
            let (k, v) = (key(&mut rng), format!("v{}", rng.gen::<u32>()).into_bytes());
            b.put(&t, &k, &v).unwrap();
            model.insert(k, v);
        }
        engine.write(&b).unwrap();
        engine.freeze_memtable(&t).unwrap();
    };
    round(&engine, &mut model);
    round(&engine, &mut model);
    assert!(engine.compact_runs(&t).unwrap());
    engine.checkpoint().unwrap();
    engine.evict(usize::MAX).unwrap();
    let before = engine.stats();
    round(&engine, &mut model);
    assert!(engine.compact_runs(&t).unwrap());
    let after = engine.stats();
    let ahead = after.read_ahead_pages - before.read_ahead_pages;
    let leaves = after.leaf_pages_read - before.leaf_pages_read;
    // 6,000 entries of about 75 bytes in 4 KiB leaves: over 100 leaves.
    assert!(leaves > 100, "only {leaves} leaves read back");
    assert!(ahead * 10 >= leaves * 9, "{ahead} of {leaves} leaves read ahead");
    let mut c = engine.cursor(&t).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> =
        std::iter::from_fn(|| c.next().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert!(got == model, "contents differ after merges that read ahead");
    drop(c);
    engine.checkpoint().unwrap();
    engine.close().unwrap();
    verify(dir.path());
}

/// A table that takes no write for a while has its frozen runs merged into
/// one by the background merger (an idle merge), but only when the runs
/// newer than the oldest are worth rewriting it for.
#[test]
fn an_idle_table_merges_its_runs_into_one_when_worth_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), config(4 * MIB)).unwrap();
    let t = engine.create_table("t", table(TableFormat::WriteOptimized)).unwrap();
    let mut model = BTreeMap::new();
    let mut load = |engine: &Engine, from: u32, n: u32| {
        let mut b = WriteBatch::new();
        for i in from..from + n {
            let (k, v) = (format!("k{i:07}").into_bytes(), format!("value {i} {}", "x".repeat(80)).into_bytes());
            b.put(&t, &k, &v).unwrap();
            model.insert(k, v);
        }
        engine.write(&b).unwrap();
        engine.freeze_memtable(&t).unwrap();
    };
    load(&engine, 0, 4000);
    engine.compact_runs(&t).unwrap();
    // A run of ten keys beside one of 4,000: not worth rewriting the big one.
    load(&engine, 10_000, 10);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(engine.table_runs(&t).unwrap().len(), 3, "a memtable and two runs");
    assert_eq!(engine.stats().runs_idle_merged, 0);
    // An eighth of the big run more: merged by size with the small one, not
    // with the big one; once the table is quiet, all into one.
    load(&engine, 20_000, 500);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while engine.stats().runs_idle_merged == 0 {
        assert!(std::time::Instant::now() < deadline, "no idle merge: runs {:?}", engine.table_runs(&t).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(engine.table_runs(&t).unwrap().len(), 2, "a memtable and one run");
    let mut c = engine.cursor(&t).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> =
        std::iter::from_fn(|| c.next().unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert!(got == model, "an idle merge changed the contents");
    drop(c);
    engine.checkpoint().unwrap();
    assert_eq!(engine.stats().runs_idle_merged, 1, "a second idle merge of one run");
    engine.close().unwrap();
    verify(dir.path());
}
