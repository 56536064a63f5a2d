//! A checkpoint packs the leaves it wrote (page invariant 5): readers of the
//! newest version, readers still on an older one, and the writer changing
//! packed leaves all keep seeing exactly what was committed.

use std::collections::BTreeMap;
use storage::{Config, Engine, SyncMode, TableConfig, WriteBatch};

fn key(i: u32) -> Vec<u8> {
    format!("user{i:08}").into_bytes()
}

fn value(i: u32, round: u8) -> Vec<u8> {
    let mut v = vec![round; 40 + (i % 60) as usize];
    v.extend_from_slice(&i.to_le_bytes());
    v
}

fn write(
    engine: &Engine,
    t: &storage::Table,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    keys: impl Iterator<Item = u32>,
    round: u8,
) {
    let mut batch = WriteBatch::new();
    for i in keys {
        batch.put(t, &key(i), &value(i, round)).unwrap();
        model.insert(key(i), value(i, round));
        // Small batches: a batch whose leaves (held twice) outgrow the
        // pinned share of the small cache below is refused as too large,
        // and a step of 6 keys spreads 100 puts over about 70 KiB of leaves.
        if batch.len() == 100 {
            engine.write(&batch).unwrap();
            batch = WriteBatch::new();
        }
    }
    engine.write(&batch).unwrap();
}

fn check(engine: &Engine, t: &storage::Table, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(engine.get(t, k).unwrap().as_deref(), Some(&v[..]));
        assert_eq!(engine.get_with(t, k, |got| got == &v[..]).unwrap(), Some(true));
    }
    assert_eq!(engine.get_with(t, b"user", |_| ()).unwrap(), None, "a key below every key");
    assert_eq!(engine.get(t, b"userz").unwrap(), None, "a key above every key");
    let mut c = engine.cursor(t).unwrap();
    let mut want = model.iter();
    while c.advance().unwrap() {
        let (k, v) = c.entry().unwrap().unwrap();
        let (wk, wv) = want.next().expect("the cursor lent more entries than were written");
        assert_eq!((k, v), (&wk[..], &wv[..]));
    }
    assert!(want.next().is_none(), "the cursor stopped early");
}

#[test]
fn checkpoint_packs_leaves_and_every_version_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { sync_mode: SyncMode::Off, checkpoint_interval: None, ..Config::default() };
    let engine = Engine::open(dir.path(), config.clone()).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    let mut model = BTreeMap::new();
    // Out of key order, so leaves hold allocations in write order.
    write(&engine, &t, &mut model, (0..20_000).map(|i| (i * 7919) % 20_000), 1);
    let before = engine.stats();
    assert_eq!(before.leaves_packed, 0);

    // A cursor on the version before the checkpoint reads that version
    // through slots it shares with the live tree, packed or not.
    let mut old = engine.cursor(&t).unwrap();
    let first = old.first().unwrap().unwrap();
    engine.checkpoint().unwrap();
    let after = engine.stats();
    assert!(after.leaves_packed > 10, "leaves packed: {}", after.leaves_packed);
    assert!(
        after.cache_bytes < before.cache_bytes,
        "a packed leaf is charged once: {} -> {} bytes",
        before.cache_bytes,
        after.cache_bytes
    );
    check(&engine, &t, &model);

    // Change packed leaves (every third key), then read both versions.
    let old_model = model.clone();
    write(&engine, &t, &mut model, (0..20_000).step_by(3), 2);
    check(&engine, &t, &model);
    let mut seen = vec![(first.0.to_vec(), first.1.to_vec())];
    while let Some((k, v)) = old.next().unwrap() {
        seen.push((k.to_vec(), v.to_vec()));
    }
    let old_entries: Vec<_> = old_model.into_iter().collect();
    assert!(seen == old_entries, "the older version changed under its cursor");

    // The changed leaves are packed by the next checkpoint, and survive a reopen.
    engine.checkpoint().unwrap();
    assert!(engine.stats().leaves_packed > after.leaves_packed);
    check(&engine, &t, &model);
    drop(t);
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.table("t").unwrap();
    check(&engine, &t, &model);
    engine.close().unwrap();
}

/// Packing while a writer changes the same leaves and eviction drops them
/// (a cache far smaller than the table): some packs lose the race and are
/// skipped, and every read still sees the committed values.
#[test]
fn packing_races_writers_and_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        sync_mode: SyncMode::Off,
        checkpoint_interval: None,
        cache_size_bytes: 2 * 1024 * 1024,
        ..Config::default()
    };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    let mut model = BTreeMap::new();
    write(&engine, &t, &mut model, 0..20_000, 0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (engine, t, stop) = (engine.clone(), t.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut model = BTreeMap::new();
            let mut round = 1u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                write(&engine, &t, &mut model, (0..20_000).step_by(usize::from(round % 5) + 2), round);
                round = round.wrapping_add(1);
            }
            model
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while engine.stats().leaves_pack_raced == 0 || engine.stats().leaves_packed == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint packed a leaf and lost a race: {:?}",
            engine.stats()
        );
        engine.checkpoint().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    model.extend(writer.join().unwrap());
    engine.checkpoint().unwrap();
    check(&engine, &t, &model);
    engine.close().unwrap();
}
