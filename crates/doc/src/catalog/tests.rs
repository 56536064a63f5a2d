//! Tests of the catalog and collections over a real engine.

use super::record_store::INSERT_CHUNK_DOCS;
use super::*;

fn engine(dir: &std::path::Path) -> Engine {
    Engine::open(dir, storage::Config::default()).unwrap()
}

/// A catalog over a new engine (the directory lives as long as the
/// first value).
fn fresh_catalog() -> (tempfile::TempDir, Engine, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    (dir, e, cat)
}

/// A stand-in collation for the catalog's tests: case-insensitive,
/// its keys of the format named.
struct Folded(&'static str);

impl KeyCollation for Folded {
    fn key_of(&self, id: &Bson) -> Bson {
        match id {
            Bson::String(s) => Bson::String(s.to_lowercase()),
            other => other.clone(),
        }
    }
    fn full_spec(&self) -> Document {
        doc! { "locale": "folded" }
    }
    fn key_format(&self) -> &'static str {
        self.0
    }
}

fn folded(spec: &Document) -> Option<Arc<dyn KeyCollation>> {
    (spec.get_str("locale") == Ok("folded")).then(|| Arc::new(Folded("lowercase")) as Arc<dyn KeyCollation>)
}

fn folded_otherwise(spec: &Document) -> Option<Arc<dyn KeyCollation>> {
    (spec.get_str("locale") == Ok("folded")).then(|| Arc::new(Folded("lowercase-2")) as Arc<dyn KeyCollation>)
}

#[test]
fn the_id_index_applies_the_collection_collation_and_keeps_it_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (ci, plain) = (Namespace::new("test", "ci").unwrap(), Namespace::new("test", "plain").unwrap());
    let spec = doc! { "collation": { "locale": "folded" } };
    {
        let e = engine(dir.path());
        let cat = Catalog::open_with(e.clone(), Hooks { collations: Some(folded), ..Hooks::default() }).unwrap();
        let c = cat.create(&ci, spec.clone()).unwrap();
        let p = cat.create(&plain, Document::new()).unwrap();
        c.insert(&e, &doc! { "_id": "Ann" }, (Ack::Journaled, &Default::default()), None).unwrap();
        p.insert(&e, &doc! { "_id": "Ann" }, (Ack::Journaled, &Default::default()), None).unwrap();
        p.insert(&e, &doc! { "_id": "ANN" }, (Ack::Journaled, &Default::default()), None).unwrap();
        match c.insert(&e, &doc! { "_id": "ANN" }, (Ack::Journaled, &Default::default()), None) {
            Err(e @ DocError::DuplicateKey { .. }) => {
                assert!(e.to_string().contains("collation: { locale: \"folded\" } dup key: { _id: \"0xann\" }"))
            }
            other => panic!("expected a duplicate key, got {other:?}"),
        }
        assert_eq!(c.find_by_id(&e, &Bson::from("aNN")).unwrap(), Some(doc! { "_id": "Ann" }));
        assert_eq!(p.find_by_id(&e, &Bson::from("aNN")).unwrap(), None);
        cat.rename(&ci, &Namespace::new("test", "ci2").unwrap(), false).unwrap();
    }
    let e = engine(dir.path());
    let ci2 = Namespace::new("test", "ci2").unwrap();
    let cat = Catalog::open_with(e.clone(), Hooks { collations: Some(folded), ..Hooks::default() }).unwrap();
    let c = cat.get(&ci2).unwrap();
    assert!(c.id_collation().is_some() && cat.get(&plain).unwrap().id_collation().is_none());
    assert!(matches!(
        c.insert(&e, &doc! { "_id": "aNn" }, (Ack::Journaled, &Default::default()), None),
        Err(DocError::DuplicateKey { .. })
    ));
    let (rid, d) = c.find_rid_by_id(&e, &Bson::from("ann")).unwrap().unwrap();
    assert!(c.delete(&e, rid, &d, (Ack::Journaled, &Default::default()), None).unwrap());
    c.insert(&e, &doc! { "_id": "aNn" }, (Ack::Journaled, &Default::default()), None).unwrap();
    drop(cat);
    // A catalog that cannot apply the collation, or makes keys of
    // another format, refuses to open.
    assert!(matches!(Catalog::open(e.clone()), Err(DocError::Corrupt(_))));
    match Catalog::open_with(e.clone(), Hooks { collations: Some(folded_otherwise), ..Hooks::default() }) {
        Err(DocError::Corrupt(why)) => assert!(why.contains("\"lowercase\""), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_collated_index_keys_strings_by_its_collation_and_keeps_it_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("test", "people").unwrap();
    let hooks = Hooks { collations: Some(folded), ..Hooks::default() };
    let collated =
        doc! { "v": 2, "key": { "a": 1 }, "name": "a_1", "unique": true, "collation": { "locale": "folded" } };
    {
        let e = engine(dir.path());
        let cat = Catalog::open_with(e.clone(), hooks).unwrap();
        let c = cat.create(&ns, Document::new()).unwrap();
        c.insert(&e, &doc! { "_id": 1, "a": "Ann" }, (Ack::Journaled, &Default::default()), None).unwrap();
        cat.build_index(&ns, spec(collated.clone()), &|_, _| {}).unwrap();
        match c.insert(&e, &doc! { "_id": 2, "a": "ANN" }, (Ack::Journaled, &Default::default()), None) {
            Err(e @ DocError::DuplicateIndexKey(_)) => {
                let msg = e.to_string();
                assert!(msg.contains("index: a_1 collation: { locale: \"folded\" } dup key: { a: \"0xann\" }"), "{msg}")
            }
            other => panic!("expected a duplicate key, got {other:?}"),
        }
        c.insert(&e, &doc! { "_id": 3, "a": ["Bob", "BOB", 7] }, (Ack::Journaled, &Default::default()), None).unwrap();
        let ix = c.indexes()[0].clone();
        let keys: Vec<Bson> = ix.entries(&e).unwrap().into_iter().map(|(v, _)| v[0].clone().unwrap()).collect();
        assert_eq!(keys, vec![Bson::Int32(7), Bson::from("ann"), Bson::from("bob")]);
        let check = c.check_index(&e, &ix).unwrap();
        assert!(check.missing.is_empty() && check.extra.is_empty() && check.keys == 3);
    }
    let e = engine(dir.path());
    let cat = Catalog::open_with(e.clone(), hooks).unwrap();
    assert!(cat.get(&ns).unwrap().indexes()[0].collation().is_some());
    drop(cat);
    match Catalog::open_with(e.clone(), Hooks { collations: Some(folded_otherwise), ..Hooks::default() }) {
        Err(DocError::Corrupt(why)) => assert!(why.contains("index a_1") && why.contains("\"lowercase\""), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn an_index_prepared_for_unique_refuses_new_duplicates_then_converts() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("test", "conv").unwrap();
    {
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        let c = cat.create(&ns, Document::new()).unwrap();
        for (id, a) in [(1, 1), (2, 1), (3, 2)] {
            c.insert(&e, &doc! { "_id": id, "a": a }, (Ack::Journaled, &Default::default()), None).unwrap();
        }
        cat.build_index(&ns, spec(doc! { "v": 2, "key": { "a": 1 }, "name": "a_1" }), &|_, _| {}).unwrap();
        cat.modify_index(&ns, "a_1", &doc! { "prepareUnique": true }).unwrap();
        let dup = c.insert(&e, &doc! { "_id": 4, "a": 2 }, (Ack::Journaled, &Default::default()), None);
        assert!(matches!(dup, Err(DocError::DuplicateIndexKey(_))), "{dup:?}");
        c.insert(&e, &doc! { "_id": 5, "a": 3 }, (Ack::Journaled, &Default::default()), None).unwrap();
        // Two writers of one new key: the second conflicts on the claim.
        let (t1, t2) =
            (e.begin(storage::TxnOptions::default()).unwrap(), e.begin(storage::TxnOptions::default()).unwrap());
        c.insert_in(&t1, &doc! { "_id": 6, "a": 9 }, &Tally::default()).unwrap();
        match c.insert_in(&t2, &doc! { "_id": 7, "a": 9 }, &Tally::default()) {
            Err(DocError::Storage(s)) => assert!(s.is_retryable(), "{s}"),
            other => panic!("expected a write conflict, got {other:?}"),
        }
        t1.commit().unwrap();
        t2.rollback();
        // The old duplicates stop the conversion, naming their records.
        match cat.convert_index(&ns, "a_1", true) {
            Err(Convert::Duplicates(groups)) => assert_eq!(groups, vec![vec![1, 2]]),
            other => panic!("expected duplicates, got {other:?}"),
        }
        let (rid, d) = c.find_rid_by_id(&e, &Bson::Int32(2)).unwrap().unwrap();
        c.delete(&e, rid, &d, (Ack::Journaled, &Default::default()), None).unwrap();
        cat.convert_index(&ns, "a_1", true).unwrap();
        let ix = c.indexes()[0].clone();
        assert!(ix.spec.unique && !ix.prepare_unique() && ix.shown().get_bool("unique") == Ok(true));
        assert_eq!(ix.entries(&e).unwrap().len(), 4);
        let check = c.check_index(&e, &ix).unwrap();
        assert!(check.missing.is_empty() && check.extra.is_empty());
    }
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let c = cat.get(&ns).unwrap();
    assert!(c.indexes()[0].spec.unique);
    assert!(matches!(
        c.insert(&e, &doc! { "_id": 8, "a": 3 }, (Ack::Journaled, &Default::default()), None),
        Err(DocError::DuplicateIndexKey(_))
    ));
    cat.convert_index(&ns, "a_1", false).unwrap();
    c.insert(&e, &doc! { "_id": 8, "a": 3 }, (Ack::Journaled, &Default::default()), None).unwrap();
    let ix = c.indexes()[0].clone();
    assert!(!ix.spec.unique && ix.entries(&e).unwrap().len() == 5);
    // The old tables are gone.
    let tables = e.table_names().into_iter().filter(|t| t.starts_with("i/") && !t.ends_with("_id_")).count();
    assert_eq!(tables, 1);
}

#[test]
fn a_clustered_collection_scans_in_id_order_and_expires_date_ids() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let ns = Namespace::new("test", "c").unwrap();
    let c = cat
        .create(&ns, doc! { "clusteredIndex": { "v": 2, "key": { "_id": 1 }, "name": "_id_", "unique": true } })
        .unwrap();
    assert!(c.is_clustered());
    let date = |ms: i64| Bson::DateTime(bson::DateTime::from_millis(ms));
    for id in [Bson::Int32(4), date(5_000), Bson::String("x".into()), Bson::Int32(2), date(-1), date(0), date(9_000)] {
        c.insert(&e, &doc! { "_id": id }, (Ack::Journaled, &Default::default()), None).unwrap();
    }
    let ids = |found: Vec<(ScanFrom, u64, crate::stored::Stored)>| -> Vec<Bson> {
        found.into_iter().map(|(_, _, d)| d.document().unwrap().get("_id").unwrap().clone()).collect()
    };
    let all =
        vec![Bson::Int32(2), Bson::Int32(4), Bson::String("x".into()), date(-1), date(0), date(5_000), date(9_000)];
    assert_eq!(ids(c.natural(&e, &ScanFrom::Start, false, 0).unwrap()), all);
    // Resuming after a position, in chunks, both ways.
    let first = c.natural(&e, &ScanFrom::Start, false, 3).unwrap();
    let resume = first[2].0.clone();
    assert_eq!(ids(c.natural(&e, &resume, false, 0).unwrap()), all[3..].to_vec());
    let mut back = all[..2].to_vec();
    back.reverse();
    assert_eq!(ids(c.natural(&e, &resume, true, 0).unwrap()), back);
    // Expiry takes dates from 1970 to the cutoff, both included.
    let expired: Vec<Bson> =
        c.expired(&e, 5_000, 10).unwrap().into_iter().map(|(_, d)| d.get("_id").unwrap().clone()).collect();
    assert_eq!(expired, vec![date(0), date(5_000)]);
    assert!(c.expired(&e, -10, 10).unwrap().is_empty());
    // An ordinary collection's natural order is insertion order.
    let plain = cat.get_or_create(&Namespace::new("test", "plain").unwrap()).unwrap();
    for id in [3, 1, 2] {
        plain.insert(&e, &doc! { "_id": id }, (Ack::Journaled, &Default::default()), None).unwrap();
    }
    assert_eq!(
        ids(plain.natural(&e, &ScanFrom::Start, false, 0).unwrap()),
        vec![Bson::Int32(3), Bson::Int32(1), Bson::Int32(2)]
    );
    e.close().unwrap();
}

#[test]
fn collections_survive_reopen_and_ids_are_unique() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("test", "people").unwrap();
    {
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        let c = cat.get_or_create(&ns).unwrap();
        let stored =
            c.insert(&e, &doc! { "name": "ann", "_id": 1 }, (Ack::Journaled, &Default::default()), None).unwrap();
        assert_eq!(stored.keys().next().map(String::as_str), Some("_id"), "_id moves first");
        c.insert(&e, &doc! { "name": "bob" }, (Ack::Journaled, &Default::default()), None).unwrap();
        match c.insert(&e, &doc! { "_id": 1.0, "name": "dup" }, (Ack::Journaled, &Default::default()), None) {
            Err(DocError::DuplicateKey { key, .. }) => assert_eq!(*key, Bson::Double(1.0)),
            other => panic!("expected a duplicate key, got {other:?}"),
        }
        assert!(matches!(cat.create(&ns, Document::new()), Err(DocError::NamespaceExists(_))));
        e.close().unwrap();
    }
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let c = cat.get(&ns).expect("the collection is still there");
    let all = c.scan(&e, 0, 0).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(c.find_by_id(&e, &Bson::Int64(1)).unwrap().unwrap().get_str("name").unwrap(), "ann");
    c.insert(&e, &doc! { "_id": 3 }, (Ack::Journaled, &Default::default()), None).unwrap();
    assert!(c.scan(&e, 0, 0).unwrap().windows(2).all(|w| w[0].0 < w[1].0), "record ids grow");
    assert_eq!(cat.databases(), vec!["test".to_string()]);
    assert!(cat.drop(&ns).unwrap());
    assert!(cat.get(&ns).is_none() && !e.table_names().iter().any(|t| t.starts_with("c/")));
}

/// Renaming over an existing collection replaces it in one catalog
/// transaction; its tables go, and the result survives a reopen.
#[test]
fn rename_over_a_target_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (Namespace::new("test", "tmp").unwrap(), Namespace::new("test", "real").unwrap());
    {
        let e = engine(dir.path());
        let cat = Catalog::open(e.clone()).unwrap();
        cat.get_or_create(&to)
            .unwrap()
            .insert(&e, &doc! { "_id": "old" }, (Ack::Journaled, &Default::default()), None)
            .unwrap();
        cat.get_or_create(&from)
            .unwrap()
            .insert(&e, &doc! { "_id": "new" }, (Ack::Journaled, &Default::default()), None)
            .unwrap();
        let old_tables = e.table_names().len();
        assert!(matches!(cat.rename(&from, &to, false), Err(DocError::NamespaceExists(_))));
        assert!(matches!(cat.rename(&to, &to, true), Err(DocError::NamespaceExists(_))));
        cat.rename(&from, &to, true).unwrap();
        assert_eq!(e.table_names().len(), old_tables - 2, "the replaced target's tables are dropped");
        assert!(cat.get(&from).is_none());
        e.close().unwrap();
    }
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let c = cat.get(&to).unwrap();
    assert_eq!(c.scan(&e, 0, 0).unwrap().into_iter().map(|(_, d)| d).collect::<Vec<_>>(), vec![doc! { "_id": "new" }]);
}

/// `insert_many` against inserting one by one: the same documents end
/// up stored, with the same per-document errors, across chunks.
#[test]
fn insert_many_commits_in_chunks_with_per_document_results() {
    let (_dir, e, cat) = fresh_catalog();
    let c = cat.get_or_create(&Namespace::new("test", "many").unwrap()).unwrap();
    c.insert(&e, &doc! { "_id": 5 }, (Ack::Journaled, &Default::default()), None).unwrap();
    let n = INSERT_CHUNK_DOCS * 2 + 50;
    let mut docs: Vec<Document> = (0..n as i64).map(|i| doc! { "_id": i + 10, "v": i }).collect();
    docs[7] = doc! { "_id": 5 }; // exists already
    docs[300] = doc! { "_id": 12 }; // repeats docs[2], across a chunk boundary
    docs[301] = doc! { "_id": 13, "v": 1 }; // repeats docs[3]
                                            // A document no transaction can take: nested past the stored limit.
    let mut deep = doc! { "x": 1 };
    for _ in 0..crate::limits::stored_depth_max {
        deep = doc! { "d": deep };
    }
    docs[400] = doc! { "_id": 9000, "deep": deep };
    docs[401] = doc! { "_id": "10".parse::<bson::Decimal128>().unwrap() }; // equals docs[0]'s 10
    let refs: Vec<&Document> = docs.iter().collect();
    let results = c.insert_many(&e, &refs, false, (Ack::Journaled, &Default::default()), None);
    let deep_doc = docs[400].clone();
    assert_eq!(results.len(), n);
    let failed: Vec<usize> = (0..n).filter(|&i| results[i].is_err()).collect();
    assert_eq!(failed, vec![7, 300, 301, 400, 401]);
    assert!(matches!(results[7], Err(DocError::DuplicateKey { .. })));
    assert!(matches!(results[300], Err(DocError::DuplicateKey { .. })));
    assert!(matches!(results[400], Err(DocError::TooDeep { .. })));
    assert!(matches!(results[401], Err(DocError::DuplicateKey { .. })));
    let stored = c.scan(&e, 0, 0).unwrap();
    assert_eq!(stored.len(), 1 + n - failed.len());
    assert_eq!(c.find_by_id(&e, &Bson::Int64(13)).unwrap().unwrap().get_i64("v").unwrap(), 3, "the first one wins");
    assert!(c.find_by_id(&e, &Bson::Int64(n as i64 + 9)).unwrap().is_some(), "the last chunk is there");

    // Ordered: stops at the first failure, everything before it stored.
    let c2 = cat.get_or_create(&Namespace::new("test", "ordered").unwrap()).unwrap();
    let mut docs: Vec<Document> = (0..n as i64).map(|i| doc! { "_id": i }).collect();
    docs[270] = doc! { "_id": 1 };
    let refs: Vec<&Document> = docs.iter().collect();
    let results = c2.insert_many(&e, &refs, true, (Ack::Journaled, &Default::default()), None);
    assert_eq!(results.len(), 271);
    assert!(results[..270].iter().all(Result::is_ok) && results[270].is_err());
    assert_eq!(c2.scan(&e, 0, 0).unwrap().len(), 270);
    // An ordered insert that stops at a refused document in its first
    // chunk (and a long `_id` is no reason to refuse one).
    let c3 = cat.get_or_create(&Namespace::new("test", "refused").unwrap()).unwrap();
    let docs = [doc! { "_id": "k".repeat(9000) }, deep_doc, doc! { "_id": 3 }];
    let refs: Vec<&Document> = docs.iter().collect();
    let results = c3.insert_many(&e, &refs, true, (Ack::Journaled, &Default::default()), None);
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok() && results[1].is_err());
    assert_eq!(c3.scan(&e, 0, 0).unwrap().len(), 1);
}

/// With a cache too small for a whole chunk's write set, the chunks
/// shrink: every document still goes in.
#[test]
fn insert_many_fits_its_chunks_to_a_small_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = storage::Config { cache_size_bytes: 1024 * 1024, ..storage::Config::default() };
    let e = Engine::open(dir.path(), config).unwrap();
    let cat = Catalog::open(e.clone()).unwrap();
    let c = cat.get_or_create(&Namespace::new("test", "small").unwrap()).unwrap();
    let pad = "x".repeat(900);
    // Scattered _ids: every document of a chunk lands on another leaf.
    let docs: Vec<Document> = (0..3000u64)
        .map(|i| doc! { "_id": (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1) as i64, "pad": &pad })
        .collect();
    let refs: Vec<&Document> = docs.iter().collect();
    let refused_before = e.stats().txn_rolled_back;
    for batch in refs.chunks(1000) {
        let results = c.insert_many(&e, batch, true, (Ack::Written, &Default::default()), None);
        assert_eq!(results.len(), batch.len());
        assert!(results.iter().all(Result::is_ok), "{:?}", results.iter().find(|r| r.is_err()));
    }
    assert_eq!(c.scan(&e, 0, 0).unwrap().len(), docs.len());
    // A command halves its chunks until one fits and keeps that size,
    // trying twice as many again only after several commits (ChunkSize):
    // a few refusals per command (8 here), not several for every chunk
    // (2,840 when each chunk started from the full size).
    let refused = e.stats().txn_rolled_back - refused_before;
    eprintln!("{refused} chunks refused");
    assert!(refused <= 3 * 12, "{refused} chunks refused");
}

/// A document whose index entries alone need more of the cache than a
/// transaction may take fails alone (TransactionTooLarge); an unordered
/// insert goes on with the documents after it, an ordered one stops.
#[test]
fn a_document_too_large_for_a_small_cache_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = storage::Config { cache_size_bytes: 4 * 1024 * 1024, ..storage::Config::default() };
    let e = Engine::open(dir.path(), config).unwrap();
    let cat = Catalog::open(e.clone()).unwrap();
    let ns = Namespace::new("test", "wide").unwrap();
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let pending = cat.create_in(&txn, &ns, Document::new()).unwrap();
    cat.add_index_in(&txn, pending.collection().unwrap(), spec(doc! { "v": 2, "key": { "a": 1 }, "name": "a_1" }))
        .unwrap();
    let ts = txn.commit().unwrap();
    let c = cat.publish(pending, ts).unwrap();
    let fill: Vec<Document> = (0..20_000i64).map(|i| doc! { "_id": i, "a": i * 10 }).collect();
    for batch in fill.chunks(2000) {
        let refs: Vec<&Document> = batch.iter().collect();
        let results = c.insert_many(&e, &refs, true, (Ack::Written, &Default::default()), None);
        assert!(results.iter().all(Result::is_ok), "{:?}", results.iter().find(|r| r.is_err()));
    }
    // One entry in every leaf of the index.
    let wide = doc! { "_id": -1, "a": (0..2000i64).map(|i| i * 100 + 5).collect::<Vec<_>>() };
    let small = doc! { "_id": -2, "a": 7 };
    let results = c.insert_many(&e, &[&wide, &small], false, (Ack::Written, &Default::default()), None);
    assert_eq!(results.len(), 2);
    assert!(matches!(results[0], Err(DocError::Storage(StorageError::TransactionTooLarge { .. }))), "{results:?}");
    assert!(results[1].is_ok(), "{results:?}");
    let results = c.insert_many(&e, &[&wide, &doc! { "_id": -3 }], true, (Ack::Written, &Default::default()), None);
    assert_eq!(results.len(), 1, "an ordered insert stops at the document: {results:?}");
    assert_eq!(c.scan(&e, 0, 0).unwrap().len(), 20_001);
}

/// Two inserts of the same `_id`s at once: each `_id` is stored once,
/// and every document is either inserted or a duplicate.
#[test]
fn concurrent_insert_many_of_the_same_ids_store_each_once() {
    let (_dir, e, cat) = fresh_catalog();
    let c = cat.get_or_create(&Namespace::new("test", "race").unwrap()).unwrap();
    let docs: Vec<Document> = (0..2000i64).map(|i| doc! { "_id": i }).collect();
    let start = std::sync::Barrier::new(3);
    let inserted: usize = std::thread::scope(|s| {
        let runs: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let refs: Vec<&Document> = docs.iter().collect();
                    start.wait();
                    let results = c.insert_many(&e, &refs, false, (Ack::Written, &Default::default()), None);
                    assert_eq!(results.len(), docs.len());
                    for r in &results {
                        assert!(matches!(r, Ok(()) | Err(DocError::DuplicateKey { .. })), "{r:?}");
                    }
                    results.iter().filter(|r| r.is_ok()).count()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).sum()
    });
    assert_eq!(inserted, docs.len());
    assert_eq!(c.scan(&e, 0, 0).unwrap().len(), docs.len());
}

#[test]
fn names_are_checked() {
    assert!(Namespace::new("", "c").is_err());
    assert!(Namespace::new("a.b", "c").is_err());
    assert!(Namespace::new("a", "").is_err());
    assert!(Namespace::new("a", "c$d").is_err());
    assert!(Namespace::new("a", "b.c").is_ok());
}

/// The write primitives take the caller's transaction: writes to two
/// collections commit together or roll back together, and a conflicting
/// check (a taken `_id`, a changed document) is seen inside it.
#[test]
fn writes_in_the_callers_transaction_commit_or_roll_back_together() {
    let (_dir, e, cat) = fresh_catalog();
    let a = cat.create(&Namespace::new("t", "a").unwrap(), Document::new()).unwrap();
    let b = cat.create(&Namespace::new("t", "b").unwrap(), Document::new()).unwrap();
    let old = a.insert(&e, &doc! { "_id": 1, "v": 1 }, (Ack::Journaled, &Default::default()), None).unwrap();
    let (rid, _) = a.find_rid_by_id(&e, &Bson::Int32(1)).unwrap().unwrap();

    // Rolled back: nothing of it is seen.
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    b.insert_in(&txn, &doc! { "_id": 7 }, &Tally::default()).unwrap();
    assert!(a.replace_in(&txn, rid, (&old, &doc! { "_id": 1, "v": 2 }), &Tally::default()).unwrap());
    assert!(matches!(b.insert_in(&txn, &doc! { "_id": 7 }, &Tally::default()), Err(DocError::DuplicateKey { .. })));
    txn.rollback();
    assert_eq!(b.find_by_id(&e, &Bson::Int32(7)).unwrap(), None);
    assert_eq!(a.find_by_id(&e, &Bson::Int32(1)).unwrap(), Some(old.clone()));

    // Committed: all of it is seen, at once.
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let stored = b.insert_in(&txn, &doc! { "x": 1, "_id": 8 }, &Tally::default()).unwrap();
    assert_eq!(stored, doc! { "_id": 8, "x": 1 }, "_id goes first");
    assert!(a.replace_in(&txn, rid, (&old, &doc! { "_id": 1, "v": 2 }), &Tally::default()).unwrap());
    assert!(
        !a.replace_in(&txn, rid, (&old, &doc! { "_id": 1, "v": 3 }), &Tally::default()).unwrap(),
        "no longer the old document"
    );
    assert_eq!(
        a.delete_in(&txn, rid, &old, &Tally::default()).unwrap(),
        None,
        "compare-and-delete sees the replacement"
    );
    txn.commit().unwrap();
    assert_eq!(b.find_by_id(&e, &Bson::Int32(8)).unwrap(), Some(doc! { "_id": 8, "x": 1 }));
    assert_eq!(a.find_by_id(&e, &Bson::Int32(1)).unwrap(), Some(doc! { "_id": 1, "v": 2 }));
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    assert!(a.delete_in(&txn, rid, &doc! { "_id": 1, "v": 2 }, &Tally::default()).unwrap().is_some());
    txn.commit().unwrap();
    assert_eq!(a.find_by_id(&e, &Bson::Int32(1)).unwrap(), None);
}

/// DDL takes the caller's transaction too: a collection created and
/// written in one transaction appears with its document on commit, and
/// after a rollback nothing of it remains (not its tables either); a
/// rolled-back drop or rename leaves the collection as it was; two
/// creates of one name conflict.
#[test]
fn ddl_in_the_callers_transaction_publishes_on_commit_only() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let ns = Namespace::new("t", "made").unwrap();
    let tables_before = e.table_names().len();

    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let pending = cat.create_in(&txn, &ns, Document::new()).unwrap();
    assert!(cat.get(&ns).is_none(), "not visible before commit");
    txn.rollback();
    cat.abandon(pending);
    assert!(cat.get(&ns).is_none());
    assert_eq!(e.table_names().len(), tables_before, "an abandoned create drops its tables");

    // Created and written in one transaction; a racing create of the
    // same name conflicts (and leaves no tables behind).
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let pending = cat.create_in(&txn, &ns, Document::new()).unwrap();
    let racing = e.begin(storage::TxnOptions::default()).unwrap();
    match cat.create_in(&racing, &ns, Document::new()) {
        Err(DocError::Storage(err)) => assert!(err.is_retryable(), "{err}"),
        other => panic!("a racing create of the same name: {:?}", other.map(|_| ())),
    }
    drop(racing);
    pending.collection().unwrap().insert_in(&txn, &doc! { "_id": 1 }, &Tally::default()).unwrap();
    let ts = txn.commit().unwrap();
    let coll = cat.publish(pending, ts).unwrap();
    assert_eq!(coll.find_by_id(&e, &Bson::Int32(1)).unwrap(), Some(doc! { "_id": 1 }));
    assert_eq!(e.table_names().len(), tables_before + 2);

    // A rolled-back drop and rename change nothing.
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let undone = cat.drop_in(&txn, &ns).unwrap().unwrap();
    txn.rollback();
    cat.abandon(undone);
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let undone = cat.rename_in(&txn, &ns, &Namespace::new("t", "other").unwrap(), false).unwrap();
    txn.rollback();
    cat.abandon(undone);
    assert!(cat.get(&Namespace::new("t", "other").unwrap()).is_none());
    assert_eq!(cat.get(&ns).unwrap().find_by_id(&e, &Bson::Int32(1)).unwrap(), Some(doc! { "_id": 1 }));

    // Committed, the drop frees its tables, and a reopen agrees.
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let dropped = cat.drop_in(&txn, &ns).unwrap().unwrap();
    let ts = txn.commit().unwrap();
    assert!(cat.publish(dropped, ts).is_none());
    assert!(cat.get(&ns).is_none());
    assert_eq!(e.table_names().len(), tables_before);
    drop(cat);
    let cat = Catalog::open(e.clone()).unwrap();
    assert!(cat.get(&ns).is_none());
}

/// An index added in the transaction that creates its collection: gone
/// with the tables after a rollback; after a commit, kept up by the
/// transaction's own later writes, multikey recorded, and still there,
/// ready, after a reopen. A collection with a document refuses it.
#[test]
fn an_index_added_in_the_creating_transaction_commits_or_vanishes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let ns = Namespace::new("t", "made").unwrap();
    let tables_before = e.table_names().len();
    let ix_spec = || spec(doc! { "v": 2, "key": { "a": 1 }, "name": "a_1" });

    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let pending = cat.create_in(&txn, &ns, Document::new()).unwrap();
    cat.add_index_in(&txn, pending.collection().unwrap(), ix_spec()).unwrap();
    assert_eq!(e.table_names().len(), tables_before + 3);
    txn.rollback();
    cat.abandon(pending);
    assert_eq!(e.table_names().len(), tables_before, "an abandoned create drops its index tables too");

    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    let pending = cat.create_in(&txn, &ns, Document::new()).unwrap();
    let coll = pending.collection().unwrap().clone();
    cat.add_index_in(&txn, &coll, ix_spec()).unwrap();
    assert!(matches!(cat.add_index_in(&txn, &coll, ix_spec()), Err(DocError::IndexExists(_))));
    coll.insert_in(&txn, &doc! { "_id": 1, "a": [3, 4] }, &Tally::default()).unwrap();
    let other = spec(doc! { "v": 2, "key": { "b": 1 }, "name": "b_1" });
    match cat.add_index_in(&txn, &coll, other) {
        Err(e @ DocError::IndexOnNonEmptyInTransaction(_)) => assert_eq!(
            e.to_string(),
            "Cannot create new indexes on non-empty collection t.made in a multi-document transaction."
        ),
        other => panic!("an index on a written collection: {:?}", other.map(|_| ())),
    }
    let ts = txn.commit().unwrap();
    let coll = cat.publish(pending, ts).unwrap();
    let want = vec![(vec![Bson::Int32(3)], Bson::Int32(1)), (vec![Bson::Int32(4)], Bson::Int32(1))];
    assert_eq!(index_of(&e, &coll, "a_1"), want);
    drop((coll, cat));
    let cat = Catalog::open(e.clone()).unwrap();
    let coll = cat.get(&ns).unwrap();
    let ix = coll.indexes().into_iter().find(|ix| ix.spec.name == "a_1").unwrap();
    assert!(ix.is_ready() && ix.is_multikey(), "recorded ready and multikey");
    assert_eq!(index_of(&e, &coll, "a_1"), want);
    assert_eq!(e.table_names().len(), tables_before + 3);
}

fn spec(shown: Document) -> crate::index::IndexSpec {
    crate::index::IndexSpec::from_shown(shown).unwrap()
}

/// The entries of index `name`: (values, `_id` of the record).
/// A missing field shows as null, as the key holds it.
fn index_of(e: &Engine, c: &Collection, name: &str) -> Vec<(Vec<Bson>, Bson)> {
    let ix = c.indexes().into_iter().find(|ix| ix.spec.name == name).unwrap();
    ix.entries(e)
        .unwrap()
        .into_iter()
        .map(|(values, rid)| {
            let values = values.into_iter().map(|v| v.unwrap_or(Bson::Null)).collect();
            (values, c.get(e, rid).unwrap().unwrap().get("_id").unwrap().clone())
        })
        .collect()
}

/// A secondary index is built over existing documents and then kept in
/// step by inserts, replacements (only changed keys) and deletes; its
/// multikey paths are stored and survive a reopen.
#[test]
fn secondary_indexes_follow_every_write_and_keep_multikey_paths() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let cat = Catalog::open(e.clone()).unwrap();
    let ns = Namespace::new("t", "c").unwrap();
    let c = cat.create(&ns, Document::new()).unwrap();
    c.insert(&e, &doc! { "_id": 1, "a": 5 }, (Ack::Journaled, &Default::default()), None).unwrap();
    c.insert(&e, &doc! { "_id": 2 }, (Ack::Journaled, &Default::default()), None).unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let progress = |done, total| seen.lock().unwrap().push((done, total));
    cat.build_index(&ns, spec(doc! { "v": 2, "key": { "a": 1 }, "name": "a_1" }), &progress).unwrap();
    assert_eq!(seen.lock().unwrap().last(), Some(&(2, 2)));
    let i32s = |v: i32| Bson::Int32(v);
    assert_eq!(index_of(&e, &c, "a_1"), vec![(vec![Bson::Null], i32s(2)), (vec![i32s(5)], i32s(1))]);

    // Each write tallies the keys it wrote (`_id`'s too) once it commits.
    let w = ConflictWait::default();
    let keys = |w: &ConflictWait| (w.tally.counts().keys_inserted, w.tally.counts().keys_deleted);
    c.insert(&e, &doc! { "_id": 3, "a": [7, 5] }, (Ack::Journaled, &w), None).unwrap();
    assert_eq!(keys(&w), (3, 0));
    let (rid, old) = c.find_rid_by_id(&e, &i32s(3)).unwrap().unwrap();
    assert!(c.replace(&e, rid, &old, &doc! { "_id": 3, "a": [5, 8] }, (Ack::Journaled, &w), None).unwrap());
    assert_eq!(keys(&w), (4, 1), "only the keys that changed");
    assert!(!c.replace(&e, rid, &old, &doc! { "_id": 3, "a": 9 }, (Ack::Journaled, &w), None).unwrap());
    assert_eq!(keys(&w), (4, 1), "a replace that did not happen wrote nothing");
    let (rid, old) = c.find_rid_by_id(&e, &i32s(1)).unwrap().unwrap();
    assert!(c.delete(&e, rid, &old, (Ack::Journaled, &w), None).unwrap());
    assert_eq!(keys(&w), (4, 3));
    let results =
        c.insert_many(&e, &[&doc! { "_id": 4, "a": 1 }, &doc! { "_id": 3 }], false, (Ack::Journaled, &w), None);
    assert!(results[0].is_ok() && results[1].is_err());
    assert_eq!(keys(&w), (6, 3), "the duplicate wrote nothing");
    let (rid, old) = c.find_rid_by_id(&e, &i32s(4)).unwrap().unwrap();
    assert!(c.delete(&e, rid, &old, (Ack::Journaled, &w), None).unwrap());
    let want = vec![(vec![Bson::Null], i32s(2)), (vec![i32s(5)], i32s(3)), (vec![i32s(8)], i32s(3))];
    assert_eq!(index_of(&e, &c, "a_1"), want);
    let ix = &c.indexes()[0];
    assert!(ix.is_ready() && ix.is_multikey());

    drop((c, cat));
    let cat = Catalog::open(e.clone()).unwrap();
    let c = cat.get(&ns).unwrap();
    assert_eq!(index_of(&e, &c, "a_1"), want, "entries survive a reopen");
    assert_eq!(c.indexes()[0].multikey_paths(), vec![std::collections::BTreeSet::from([0])]);
}

/// A unique index refuses a second record with a key, at build and on
/// insert; parallel arrays are refused; nothing of a refused write stays.
#[test]
fn unique_and_parallel_array_refusals_write_nothing() {
    let (_dir, e, cat) = fresh_catalog();
    let ns = Namespace::new("t", "u").unwrap();
    let c = cat.create(&ns, Document::new()).unwrap();
    c.insert(&e, &doc! { "_id": 1, "a": 1, "b": [1, 2] }, (Ack::Journaled, &Default::default()), None).unwrap();
    c.insert(&e, &doc! { "_id": 2, "a": 1 }, (Ack::Journaled, &Default::default()), None).unwrap();
    let unique = doc! { "v": 2, "key": { "a": 1 }, "name": "a_1", "unique": true };
    let err = cat.build_index(&ns, spec(unique.clone()), &|_, _| {}).unwrap_err();
    assert_eq!(err.to_string(), "E11000 duplicate key error collection: t.u index: a_1 dup key: { a: 1 }");
    assert!(c.indexes().is_empty(), "a failed build leaves nothing");
    let tables = e.table_names().len();

    let (rid, old) = c.find_rid_by_id(&e, &Bson::Int32(2)).unwrap().unwrap();
    assert!(c.delete(&e, rid, &old, (Ack::Journaled, &Default::default()), None).unwrap());
    cat.build_index(&ns, spec(unique), &|_, _| {}).unwrap();
    assert_eq!(e.table_names().len(), tables + 1);
    let dup = c.insert(&e, &doc! { "_id": 3, "a": 1 }, (Ack::Journaled, &Default::default()), None).unwrap_err();
    assert!(matches!(dup, DocError::DuplicateIndexKey(_)), "{dup}");
    assert_eq!(c.find_by_id(&e, &Bson::Int32(3)).unwrap(), None);

    let ab = doc! { "v": 2, "key": { "b": 1, "c": 1 }, "name": "b_1_c_1" };
    cat.build_index(&ns, spec(ab), &|_, _| {}).unwrap();
    let err = c
        .insert(&e, &doc! { "_id": 4, "a": 4, "b": [1], "c": [2] }, (Ack::Journaled, &Default::default()), None)
        .unwrap_err();
    assert_eq!(err.to_string(), "cannot index parallel arrays [c] [b]");
    assert_eq!(c.find_by_id(&e, &Bson::Int32(4)).unwrap(), None);
    assert_eq!(index_of(&e, &c, "a_1").len(), 1);
    cat.drop_index(&ns, "a_1").unwrap();
    assert_eq!(c.indexes().len(), 1);
    assert_eq!(e.table_names().len(), tables + 1);
}

/// An index built while writers insert, replace and delete holds exactly
/// the keys of the documents once they stop (no stale or missing entry).
#[test]
fn an_index_built_under_concurrent_writes_matches_the_documents() {
    let (_dir, e, cat) = fresh_catalog();
    let ns = Namespace::new("t", "busy").unwrap();
    let c = cat.create(&ns, Document::new()).unwrap();
    for i in 0..2000 {
        c.insert(&e, &doc! { "_id": i, "a": i % 50, "b": [i, i + 1] }, (Ack::Written, &Default::default()), None)
            .unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (c, e, stop) = (&c, &e, &stop);
            s.spawn(move || {
                let mut n = 0i32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    // Each writer owns the ids of its parity: two writers
                    // never race to insert the same missing `_id`.
                    let id = Bson::Int32((n * 7 % 1000) * 2 + t);
                    if let Some((rid, old)) = c.find_rid_by_id(e, &id).unwrap() {
                        let new = doc! { "_id": id.clone(), "a": n % 50, "b": [n, -n] };
                        if n % 5 == 0 {
                            c.delete(e, rid, &old, (Ack::Written, &Default::default()), None).unwrap();
                        } else {
                            c.replace(e, rid, &old, &new, (Ack::Written, &Default::default()), None).unwrap();
                        }
                    } else {
                        c.insert(e, &doc! { "_id": id, "a": 1, "b": [] }, (Ack::Written, &Default::default()), None)
                            .unwrap();
                    }
                }
            });
        }
        let s = doc! { "v": 2, "key": { "a": 1, "b": -1 }, "name": "a_1_b_-1" };
        cat.build_index(&ns, spec(s), &|_, _| {}).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let ix = c.indexes().remove(0);
    let check = c.check_index(&e, &ix).unwrap();
    assert_eq!((check.missing, check.extra), (Vec::new(), Vec::new()));
    assert_eq!(check.keys as usize, ix.entries(&e).unwrap().len());
    assert!(check.keys > 0);
    let ids = c.check_id_index(&e).unwrap();
    assert_eq!((ids.missing, ids.extra), (Vec::new(), Vec::new()));
    assert_eq!(ids.keys as usize, c.scan(&e, 0, 0).unwrap().len());
}

/// `check_index` finds an entry taken out of an index and one put in
/// that no document gives.
#[test]
fn check_index_reports_missing_and_extra_entries() {
    let (_dir, e, cat) = fresh_catalog();
    let ns = Namespace::new("t", "v").unwrap();
    let c = cat.create(&ns, Document::new()).unwrap();
    for i in 0..5 {
        c.insert(&e, &doc! { "_id": i, "a": i * 10 }, (Ack::Journaled, &Default::default()), None).unwrap();
    }
    cat.build_index(&ns, spec(doc! { "v": 2, "key": { "a": 1 }, "name": "a_1" }), &|_, _| {}).unwrap();
    let ix = c.indexes().remove(0);
    let (rid, _) = c.find_rid_by_id(&e, &Bson::Int32(2)).unwrap().unwrap();
    let fields = ix.spec.fields.clone();
    let key = |v: i32| crate::index::keys::key_string(&[Some(Bson::Int32(v))], &fields);
    let txn = e.begin(storage::TxnOptions::default()).unwrap();
    txn.delete(ix.table(), &ix.storage_key(&key(20), rid)).unwrap();
    txn.put(ix.table(), &ix.storage_key(&key(99), 77), b"\x05\x00\x00\x00\x00").unwrap();
    txn.commit().unwrap();
    let check = c.check_index(&e, &ix).unwrap();
    assert_eq!(check.missing, vec![(vec![Some(Bson::Int32(20))], rid)]);
    assert_eq!(check.extra, vec![(vec![None], 77)]);
    assert_eq!(check.keys, 5);
}
