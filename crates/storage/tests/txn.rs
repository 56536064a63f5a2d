//! Transactions: snapshot reads, own writes, first updater wins, rollback,
//! commit timestamps, durability across reopen, serializable anomalies.

use std::collections::BTreeMap;
use std::ops::Bound;
use storage::{Config, Engine, Isolation, StorageError, SyncMode, Table, TableConfig, TxnOptions};

fn open(dir: &std::path::Path) -> Engine {
    let config = Config { sync_mode: SyncMode::Fsync, checkpoint_interval: None, ..Config::default() };
    Engine::open(dir, config).unwrap()
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn setup() -> (tempfile::TempDir, Engine, Table) {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    (dir, engine, t)
}

fn si() -> TxnOptions {
    TxnOptions::default()
}

fn ser() -> TxnOptions {
    TxnOptions::serializable()
}

fn get(txn: &storage::Txn, t: &Table, k: &str) -> Option<String> {
    txn.get(t, k.as_bytes()).unwrap().map(|v| String::from_utf8(v.to_vec()).unwrap())
}

#[test]
fn a_snapshot_sees_exactly_what_committed_before_it_plus_its_own_writes() {
    let (_d, engine, t) = setup();
    engine.put(&t, b"a", b"1").unwrap();
    let reader = engine.begin(si()).unwrap();
    let writer = engine.begin(si()).unwrap();
    writer.put(&t, b"a", b"2").unwrap();
    writer.put(&t, b"b", b"new").unwrap();
    // Uncommitted writes are invisible to others, visible to the writer.
    assert_eq!(get(&reader, &t, "a").as_deref(), Some("1"));
    assert_eq!(get(&writer, &t, "a").as_deref(), Some("2"));
    assert_eq!(engine.get(&t, b"b").unwrap(), None);
    let ts = writer.commit().unwrap();
    // Committed after the reader's snapshot: still invisible to it.
    assert_eq!(get(&reader, &t, "a").as_deref(), Some("1"));
    assert_eq!(get(&reader, &t, "b"), None);
    assert!(ts > reader.read_ts());
    let later = engine.begin(si()).unwrap();
    assert_eq!(later.read_ts(), ts);
    assert_eq!(get(&later, &t, "a").as_deref(), Some("2"));
    assert_eq!(get(&later, &t, "b").as_deref(), Some("new"));
}

#[test]
fn first_updater_wins_at_once() {
    let (_d, engine, t) = setup();
    engine.put(&t, b"k", b"0").unwrap();
    let t1 = engine.begin(si()).unwrap();
    let t2 = engine.begin(si()).unwrap();
    t1.put(&t, b"k", b"1").unwrap();
    // Uncommitted by another transaction: conflict now, not at commit.
    match t2.put(&t, b"k", b"2") {
        Err(StorageError::WriteConflict { holder, key, .. }) => {
            assert_eq!(holder, t1.id());
            assert_eq!(key, b"k");
        }
        other => panic!("expected WriteConflict, got {other:?}"),
    }
    // The failed write changed nothing; t2 can still do other work.
    t2.put(&t, b"other", b"x").unwrap();
    t1.commit().unwrap();
    // Committed after t2's snapshot: still a conflict.
    assert!(matches!(t2.delete(&t, b"k"), Err(StorageError::WriteConflict { .. })));
    t2.commit().unwrap();
    assert_eq!(&*engine.get(&t, b"k").unwrap().unwrap(), b"1");
    assert_eq!(&*engine.get(&t, b"other").unwrap().unwrap(), b"x");
    // A plain batch meets an open transaction's claim too.
    let t3 = engine.begin(si()).unwrap();
    t3.put(&t, b"k", b"3").unwrap();
    assert!(matches!(engine.put(&t, b"k", b"4"), Err(StorageError::WriteConflict { .. })));
    t3.rollback();
    engine.put(&t, b"k", b"4").unwrap();
    let s = engine.stats();
    assert_eq!(s.write_conflicts, 3);
}

#[test]
fn rollback_and_drop_leave_no_trace() {
    let (dir, engine, t) = setup();
    let txn = engine.begin(si()).unwrap();
    txn.put(&t, b"a", b"1").unwrap();
    txn.rollback();
    {
        let txn = engine.begin(si()).unwrap();
        txn.put(&t, b"b", b"1").unwrap();
    } // dropped: rolled back
    assert_eq!(engine.get(&t, b"a").unwrap(), None);
    assert_eq!(engine.get(&t, b"b").unwrap(), None);
    // The keys are free again.
    let txn = engine.begin(si()).unwrap();
    txn.put(&t, b"a", b"2").unwrap();
    txn.put(&t, b"b", b"2").unwrap();
    txn.commit().unwrap();
    let open_txn = engine.begin(si()).unwrap();
    open_txn.put(&t, b"c", b"uncommitted").unwrap();
    // As if the process died with it open: a copy of the directory now.
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    drop(open_txn);
    drop(engine);
    let engine = open(copy.path());
    let t = engine.table("t").unwrap();
    assert_eq!(&*engine.get(&t, b"a").unwrap().unwrap(), b"2");
    assert_eq!(engine.get(&t, b"c").unwrap(), None);
    assert_eq!(engine.stats().txn_rolled_back, 0);
}

#[test]
fn commit_timestamps_increase_and_survive_reopen() {
    let (dir, engine, t) = setup();
    let mut last = 0;
    for i in 0..20u32 {
        let txn = engine.begin(si()).unwrap();
        txn.put(&t, &i.to_be_bytes(), b"v").unwrap();
        let ts = txn.commit().unwrap();
        assert!(ts > last);
        last = ts;
    }
    engine.close().unwrap();
    let engine = open(dir.path());
    let txn = engine.begin(si()).unwrap();
    assert!(txn.read_ts() >= last, "snapshot {} after reopen is behind commit {last}", txn.read_ts());
    drop(txn);
    let t = engine.table("t").unwrap();
    let txn = engine.begin(si()).unwrap();
    txn.put(&t, b"x", b"v").unwrap();
    assert!(txn.commit().unwrap() > last);
}

#[test]
fn a_multi_table_commit_is_atomic_to_readers() {
    let (_d, engine, a) = setup();
    let b = engine.create_table("b", TableConfig::default()).unwrap();
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let checked = std::sync::Arc::new(AtomicUsize::new(0));
    let reader = {
        let (engine, a, b, stop, checked) = (engine.clone(), a.clone(), b.clone(), stop.clone(), checked.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let txn = engine.begin(si()).unwrap();
                let x = txn.get(&a, b"n").unwrap();
                let y = txn.get(&b, b"n").unwrap();
                assert_eq!(x, y, "a reader saw one table of a two-table commit");
                checked.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Commit until the reader has checked often enough while commits ran,
    // however the threads are scheduled.
    let mut i = 0u32;
    // (A reader that failed stops the loop: its panic comes out of `join`.)
    while (i < 300 || checked.load(Ordering::Relaxed) < 50) && !reader.is_finished() {
        let txn = engine.begin(si()).unwrap();
        txn.put(&a, b"n", &i.to_be_bytes()).unwrap();
        txn.put(&b, b"n", &i.to_be_bytes()).unwrap();
        txn.commit().unwrap();
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}

#[test]
fn read_only_transactions_refuse_writes() {
    let (_d, engine, t) = setup();
    let txn = engine.begin(TxnOptions { read_only: true, ..si() }).unwrap();
    assert!(matches!(txn.put(&t, b"a", b"1"), Err(StorageError::ReadOnlyTransaction { .. })));
}

/// Cursor in a transaction = snapshot merged with own writes, both directions, with bounds.
#[test]
fn transaction_cursors_merge_own_writes() {
    let (_d, engine, t) = setup();
    let mut model = BTreeMap::new();
    for i in (0..200u32).step_by(2) {
        let k = format!("k{i:03}");
        engine.put(&t, k.as_bytes(), b"base").unwrap();
        model.insert(k, "base".to_string());
    }
    let txn = engine.begin(si()).unwrap();
    for i in (0..200u32).step_by(3) {
        let k = format!("k{i:03}");
        if i % 2 == 0 && i % 4 == 0 {
            txn.delete(&t, k.as_bytes()).unwrap();
            model.remove(&k);
        } else {
            txn.put(&t, k.as_bytes(), b"own").unwrap();
            model.insert(k, "own".to_string());
        }
    }
    // A concurrent commit the snapshot must not show.
    engine.put(&t, b"k001x", b"later").unwrap();
    let collect = |c: &mut storage::TxnCursor, back: bool, start: Option<&str>| {
        let mut out = Vec::new();
        let mut e = match (start, back) {
            (Some(s), _) => c.seek(s.as_bytes()).unwrap(),
            (None, false) => c.first().unwrap(),
            (None, true) => c.last().unwrap(),
        };
        while let Some((k, v)) = e {
            out.push((String::from_utf8(k.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()));
            e = if back { c.prev().unwrap() } else { c.next().unwrap() };
        }
        out
    };
    let mut c = txn.cursor(&t).unwrap();
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(collect(&mut c, false, None), all);
    let mut rev = all.clone();
    rev.reverse();
    assert_eq!(collect(&mut c, true, None), rev);
    // Bounds, seek, and turning around mid-scan.
    c.set_bounds(Bound::Included(b"k050".to_vec()), Bound::Excluded(b"k120".to_vec()));
    let want: Vec<_> =
        model.range("k050".to_string().."k120".to_string()).map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(collect(&mut c, false, None), want);
    let from_seek: Vec<_> = want.iter().filter(|(k, _)| k.as_str() >= "k077").cloned().collect();
    assert_eq!(collect(&mut c, false, Some("k077")), from_seek);
    let first = c.seek(b"k080").unwrap().unwrap();
    let second = c.next().unwrap().unwrap();
    assert_eq!(c.prev().unwrap().unwrap(), first);
    assert_eq!(c.next().unwrap().unwrap(), second);
}

/// Write skew (two doctors on call): SI lets both commit; serializable does not.
fn write_skew(isolation: Isolation) -> (Result<u64, StorageError>, Result<u64, StorageError>) {
    let (_d, engine, t) = setup();
    engine.put(&t, b"alice", b"on").unwrap();
    engine.put(&t, b"bob", b"on").unwrap();
    let opts = TxnOptions { isolation, read_only: false, ..TxnOptions::default() };
    let t1 = engine.begin(opts).unwrap();
    let t2 = engine.begin(opts).unwrap();
    for txn in [&t1, &t2] {
        assert_eq!(get(txn, &t, "alice").as_deref(), Some("on"));
        assert_eq!(get(txn, &t, "bob").as_deref(), Some("on"));
    }
    t1.put(&t, b"alice", b"off").unwrap();
    let w2 = t2.put(&t, b"bob", b"off");
    let r1 = t1.commit();
    let r2 = w2.and_then(|_| t2.commit());
    (r1, r2)
}

#[test]
fn write_skew_commits_under_si_and_fails_under_serializable() {
    let (r1, r2) = write_skew(Isolation::Snapshot);
    assert!(r1.is_ok() && r2.is_ok(), "SI allows write skew");
    let (r1, r2) = write_skew(Isolation::Serializable);
    assert!(r1.is_ok());
    match r2 {
        Err(StorageError::SerializationFailure { detail, .. }) => {
            assert!(detail.contains("\"alice\"") || detail.contains("\"bob\""), "{detail}");
        }
        other => panic!("expected a serialization failure, got {other:?}"),
    }
}

/// Fekete, O'Neil, O'Neil (2004): the read-only transaction anomaly. Batch
/// processing T2 bumps the receipt batch, T3 reads the batch and the total,
/// T1 adds a receipt to the old batch. Under SI the read-only T3 sees a
/// state no serial order produces.
fn read_only_anomaly(isolation: Isolation) -> Vec<Result<(), StorageError>> {
    let (_d, engine, t) = setup();
    engine.put(&t, b"batch", b"1").unwrap();
    engine.put(&t, b"receipts1", b"0").unwrap();
    let opts = TxnOptions { isolation, read_only: false, ..TxnOptions::default() };
    let t1 = engine.begin(opts).unwrap(); // new receipt
    let t2 = engine.begin(opts).unwrap(); // close the batch
    let mut results = Vec::new();
    // T1 reads the current batch (1); T2 reads it and bumps it.
    let b1 = get(&t1, &t, "batch").unwrap();
    assert_eq!(b1, "1");
    get(&t2, &t, "batch").unwrap();
    t2.put(&t, b"batch", b"2").unwrap();
    results.push(t2.commit().map(|_| ()));
    // T3 (read-only) sees batch 2 closed and reads the total of batch 1.
    let t3 = engine.begin(TxnOptions { isolation, read_only: true, ..TxnOptions::default() }).unwrap();
    let r3 = (|| {
        assert_eq!(get(&t3, &t, "batch").as_deref(), Some("2"));
        t3.get(&t, b"receipts1")?;
        Ok(())
    })();
    results.push(r3.and_then(|_| t3.commit().map(|_| ())));
    // T1 adds its receipt to batch 1 after T3 reported it.
    let r1 = t1.get(&t, b"receipts1").and_then(|_| t1.put(&t, b"receipts1", b"100"));
    results.push(r1.and_then(|_| t1.commit().map(|_| ())));
    results
}

#[test]
fn read_only_anomaly_happens_under_si_and_not_under_serializable() {
    let si = read_only_anomaly(Isolation::Snapshot);
    assert!(si.iter().all(|r| r.is_ok()), "{si:?}");
    let ser = read_only_anomaly(Isolation::Serializable);
    let failures = ser.iter().filter(|r| matches!(r, Err(StorageError::SerializationFailure { .. }))).count();
    assert_eq!(failures, 1, "{ser:?}");
}

#[test]
fn a_phantom_in_a_scanned_range_is_a_conflict() {
    let (_d, engine, t) = setup();
    phantom(&engine, &t);
}

/// The same through a write-optimized table (`runs.rs`), its entry in a
/// frozen run below the memtable: SSI's marks are by key and range, as
/// for a B+tree.
#[test]
fn a_phantom_through_a_write_optimized_table_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let config = TableConfig { format: storage::TableFormat::WriteOptimized, ..TableConfig::default() };
    let t = engine.create_table("t", config).unwrap();
    engine.put(&t, b"shift/0/zoe", b"x").unwrap();
    engine.freeze_memtable(&t).unwrap();
    phantom(&engine, &t);
}

fn phantom(engine: &Engine, t: &Table) {
    let t = t.clone();
    engine.put(&t, b"shift/1/alice", b"x").unwrap();
    let t1 = engine.begin(ser()).unwrap();
    let t2 = engine.begin(ser()).unwrap();
    // Each counts the shifts of day 1, then adds one of its own if there are fewer than 2.
    for (txn, me) in [(&t1, "bob"), (&t2, "carol")] {
        let mut c = txn.cursor(&t).unwrap();
        c.set_bounds(Bound::Included(b"shift/1/".to_vec()), Bound::Excluded(b"shift/10".to_vec()));
        let mut n = 0;
        let mut e = c.first().unwrap();
        while e.is_some() {
            n += 1;
            e = c.next().unwrap();
        }
        assert_eq!(n, 1);
        drop(c);
        txn.put(&t, format!("shift/1/{me}").as_bytes(), b"x").unwrap();
    }
    assert!(t1.commit().is_ok());
    assert!(matches!(t2.commit(), Err(StorageError::SerializationFailure { .. })));
    assert_eq!(engine.stats().serialization_failures, 1);
}

#[test]
fn serializable_disjoint_work_commits() {
    let (_d, engine, t) = setup();
    for i in 0..50u32 {
        let a = engine.begin(ser()).unwrap();
        let b = engine.begin(ser()).unwrap();
        let (ka, kb) = (format!("a{i}"), format!("b{i}"));
        a.get(&t, ka.as_bytes()).unwrap();
        b.get(&t, kb.as_bytes()).unwrap();
        a.put(&t, ka.as_bytes(), b"1").unwrap();
        b.put(&t, kb.as_bytes(), b"1").unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
    }
    assert_eq!(engine.stats().serialization_failures, 0);
}

/// Past 1,024 key marks in a table, a transaction's reads there become one
/// whole-table mark: a write anywhere in the table then conflicts with it.
/// Here that turns a harmless single edge into a cycle (a false positive
/// the bound on marks costs, as in PostgreSQL's lock promotion).
#[test]
fn many_key_marks_coarsen_to_a_whole_table_mark() {
    let (_d, engine, t) = setup();
    let t1 = engine.begin(ser()).unwrap();
    let t2 = engine.begin(ser()).unwrap();
    for i in 0..1100u32 {
        t1.get(&t, format!("k{i:05}").as_bytes()).unwrap();
    }
    get(&t2, &t, "y");
    t2.put(&t, b"unread", b"1").unwrap(); // t1 -> t2 only through the whole-table mark
    t1.put(&t, b"y", b"1").unwrap(); // t2 -> t1
    t2.commit().unwrap();
    match t1.commit() {
        Err(StorageError::SerializationFailure { detail, .. }) => {
            assert!(detail.contains("whole table"), "{detail}")
        }
        other => panic!("expected a serialization failure, got {other:?}"),
    }
    // Below the bound, the same shape commits.
    let t1 = engine.begin(ser()).unwrap();
    let t2 = engine.begin(ser()).unwrap();
    for i in 0..100u32 {
        t1.get(&t, format!("k{i:05}").as_bytes()).unwrap();
    }
    get(&t2, &t, "y2");
    t2.put(&t, b"unread2", b"1").unwrap();
    t1.put(&t, b"y2", b"1").unwrap();
    t2.commit().unwrap();
    t1.commit().unwrap();
}

/// SIREAD marks outlive their transaction only while a concurrent one can
/// need them: after many serializable transactions, the marks and graph
/// nodes held stay bounded, not one per read.
#[test]
fn ssi_marks_and_nodes_are_collected() {
    let (_d, engine, t) = setup();
    for i in 0..20_000u32 {
        let a = engine.begin(ser()).unwrap();
        let b = engine.begin(ser()).unwrap();
        a.get(&t, format!("r{i}").as_bytes()).unwrap();
        b.get(&t, format!("w{i}").as_bytes()).unwrap();
        a.put(&t, format!("w{i}").as_bytes(), b"1").unwrap(); // b -> a
        a.commit().unwrap();
        b.commit().unwrap();
    }
    let s = engine.stats();
    assert!(s.ssi_read_marks < 12_000, "read marks pile up: {s:?}");
    assert!(s.ssi_tracked_txns < 100, "graph nodes pile up: {s:?}");
    assert!(s.key_versions < 20_000, "key versions pile up: {s:?}");
}

/// Old versions live exactly as long as a snapshot can see them: pinned
/// bytes go back to zero when the snapshot ends, and the per-key commit
/// records are collected once no snapshot predates them.
#[test]
fn versions_no_snapshot_can_see_are_collected() {
    let (_d, engine, t) = setup();
    for i in 0..2000u32 {
        engine.put(&t, &i.to_be_bytes(), b"v0").unwrap();
    }
    let old = engine.begin(si()).unwrap();
    for i in 0..6000u32 {
        engine.put(&t, &(i % 2000).to_be_bytes(), format!("v{i}").as_bytes()).unwrap();
    }
    let s = engine.stats();
    assert!(s.cache_pinned_bytes > 0, "the old snapshot pins nothing: {s:?}");
    assert!(s.key_versions >= 2000, "commits after the old snapshot were forgotten: {s:?}");
    assert_eq!(get(&old, &t, "\0\0\0\u{1}").as_deref(), Some("v0"));
    drop(old);
    assert_eq!(engine.stats().cache_pinned_bytes, 0);
    for i in 0..5000u32 {
        engine.put(&t, &(10_000 + i).to_be_bytes(), b"x").unwrap();
    }
    let s = engine.stats();
    assert!(s.key_versions < 5000, "no collection ran: {s:?}");
}

/// The counters a server will publish move as they should.
#[test]
fn statistics_count_transactions_and_bytes_by_file_kind() {
    let (_d, engine, t) = setup();
    let a = engine.begin(si()).unwrap();
    a.put(&t, b"a", b"1").unwrap();
    a.commit().unwrap();
    let b = engine.begin(si()).unwrap();
    b.put(&t, b"b", b"1").unwrap();
    b.rollback();
    engine.checkpoint().unwrap();
    let s = engine.stats();
    assert_eq!((s.txn_committed, s.txn_rolled_back), (1, 1));
    assert!(s.data_bytes_written > 0 && s.metadata_bytes_written > 0);
    assert!(s.extent_list_bytes_written > 0 && s.root_file_bytes_written > 0);
    assert!(s.journal_bytes_written > 0 && s.journal_syncs > 0);
    assert!(s.checkpoints >= 1 && s.checkpoint_total_duration_us > 0);
    assert!(s.cache_bytes > 0 && s.cache_capacity_bytes > s.cache_bytes);
    assert!(s.cache_clean_bytes + s.cache_dirty_bytes > 0);

    // Per table and per page kind: a second table with a big value, and
    // every block written is counted once, in its file and by its kind.
    let u = engine.create_table("u", storage::TableConfig::default()).unwrap();
    engine.put(&u, b"big", &vec![7u8; 64 * 1024]).unwrap();
    engine.checkpoint().unwrap();
    let s = engine.stats();
    let io = engine.table_io();
    let of = |name: &str| io.iter().find(|e| e.name == name).expect("every table is listed").clone();
    let (t_io, u_io) = (of(t.name()), of("u"));
    assert_eq!(u_io.file, storage::engine::table_file_name(u.id()));
    assert!(t_io.io.leaf_bytes > 0 && t_io.io.extent_list_bytes > 0 && t_io.io.overflow_bytes == 0, "{t_io:?}");
    assert!(u_io.io.overflow_bytes >= 64 * 1024 && u_io.io.leaf_bytes > 0, "{u_io:?}");
    let meta = engine.metadata_io();
    assert_eq!(s.metadata_bytes_written, meta.total_bytes() - meta.extent_list_bytes);
    let tables: u64 = io.iter().map(|e| e.io.total_bytes()).sum();
    assert_eq!(s.data_bytes_written, tables - io.iter().map(|e| e.io.extent_list_bytes).sum::<u64>());
    let by_page = s.leaf_block_bytes_written
        + s.internal_block_bytes_written
        + s.overflow_block_bytes_written
        + s.extent_list_bytes_written;
    assert_eq!(by_page, tables + meta.total_bytes());
}
