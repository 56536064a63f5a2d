//! The `verify` and `dump` tools against real data directories: a clean
//! directory verifies, a flipped byte in a page makes verify exit non-zero
//! and name the file and offset, and dump shows tables, pages and cells.

use std::path::Path;
use std::process::{Command, Output};
use storage::{Config, Engine, TableConfig, WriteBatch};

fn arbordb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbordb")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn make_db(dir: &Path) {
    let engine = Engine::open(dir, Config::default()).unwrap();
    let t = engine.create_table("things", TableConfig { leaf_page_max_bytes: 4096, ..TableConfig::default() }).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..2000u32 {
        b.put(&t, format!("thing-{i:05}").as_bytes(), format!("value of thing {i}").as_bytes()).unwrap();
    }
    b.put(&t, b"zz-big", &vec![b'x'; 50_000]).unwrap();
    engine.write(&b).unwrap();
    engine.close().unwrap();
}

#[test]
fn verify_passes_on_a_clean_directory() {
    let dir = tempfile::tempdir().unwrap();
    make_db(dir.path());
    let o = arbordb(&["verify", "--dbpath", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("OK"), "{}", text(&o));
}

#[test]
fn verify_names_a_corrupt_page_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    make_db(dir.path());
    let file = dir.path().join(storage::engine::table_file_name(1));
    let mut bytes = std::fs::read(&file).unwrap();
    // Offset 4096 is the first block after the file header: a live page.
    bytes[4096 + 100] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let o = arbordb(&["verify", "--dbpath", dir.path().to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("t0000000001.adb offset 4096"), "{out}");
    assert!(out.contains("checksum mismatch"), "{out}");
}

#[test]
fn verify_refuses_a_directory_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let o = arbordb(&["verify", "--dbpath", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("not an ArborDB data directory"), "{}", text(&o));
}

#[test]
fn dump_lists_tables_pages_and_cells() {
    let dir = tempfile::tempdir().unwrap();
    make_db(dir.path());
    let d = dir.path().to_str().unwrap();
    let o = arbordb(&["dump", "--dbpath", d]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("table \"things\" id=1"), "{}", text(&o));

    let o = arbordb(&["dump", "--dbpath", d, "--table", "things"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("type=Internal"), "{out}");
    assert!(out.contains("type=Leaf"), "{out}");
    // A key in hex and printable form, and the overflow value.
    assert!(out.contains("7468696e672d3030303030 \"thing-00000\""), "{out}");
    assert!(out.contains("value overflow 50000 bytes"), "{out}");

    // One page by offset: the root's first child.
    let child = out.lines().find(|l| l.contains("-> child offset=")).unwrap();
    let offset = child.split("child offset=").nth(1).unwrap().split(' ').next().unwrap();
    let o = arbordb(&["dump", "--dbpath", d, "--table", "things", "--page", offset]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).starts_with(&format!("page offset={offset} ")), "{}", text(&o));
}

#[test]
fn dump_shows_journal_records_after_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { checkpoint_interval: None, ..Config::default() };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("j", TableConfig::default()).unwrap();
    engine.put(&t, b"hello", b"world").unwrap();
    drop(t);
    drop(engine);
    let o = arbordb(&["dump", "--dbpath", dir.path().to_str().unwrap(), "--journal"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("create table=1 name=\"j\""), "{out}");
    assert!(out.contains("put table=1 key=68656c6c6f \"hello\""), "{out}");
}

#[test]
fn dump_bson_decodes_documents_catalog_entries_and_id_entries() {
    use bson::doc;
    use doc::catalog::{Ack, Catalog, Namespace};
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Config::default()).unwrap();
    let catalog = Catalog::open(engine).unwrap();
    let coll = catalog.create(&Namespace::new("shop", "items").unwrap(), doc! {}).unwrap();
    coll.insert(
        catalog.engine(),
        &doc! { "_id": 7, "name": "lamp", "tags": ["a", "b"] },
        (Ack::Journaled, &Default::default()),
        None,
    )
    .unwrap();
    coll.insert(
        catalog.engine(),
        &doc! { "_id": 8, "big": "y".repeat(20_000) },
        (Ack::Journaled, &Default::default()),
        None,
    )
    .unwrap();
    catalog.engine().checkpoint().unwrap();
    drop(coll);
    drop(catalog);
    let d = dir.path().to_str().unwrap();
    let o = arbordb(&["dump", "--dbpath", d, "--table", "_catalog", "--bson"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains(r#""shop.items""#) && out.contains(r#""records":"c/1""#), "{out}");
    let o = arbordb(&["dump", "--dbpath", d, "--table", "c/1", "--bson", "--width", "0"]);
    let out = text(&o);
    assert!(out.contains("recordId 1") && out.contains(r#"{"_id":7,"name":"lamp","tags":["a","b"]}"#), "{out}");
    assert!(
        out.contains(&format!(r#"{{"_id":8,"big":"{}"}}"#, "y".repeat(20_000))),
        "an overflow value is decoded too"
    );
    let o = arbordb(&["dump", "--dbpath", d, "--table", "i/1/_id_", "--bson"]);
    let out = text(&o);
    assert!(out.contains("KeyString") && out.contains("recordId 2"), "{out}");
    let o = arbordb(&["dump", "--dbpath", d, "--bson"]);
    assert!(!o.status.success(), "--bson needs --table");
}

/// A collection with a secondary index, made through the catalog (as the
/// server makes them).
fn make_indexed_db(dir: &Path) -> String {
    let engine = Engine::open(dir, Config::default()).unwrap();
    let catalog = doc::catalog::Catalog::open_with(engine.clone(), query::hooks::hooks()).unwrap();
    let ns = doc::catalog::Namespace::new("shop", "orders").unwrap();
    let c = catalog.create(&ns, bson::Document::new()).unwrap();
    for i in 0..500 {
        c.insert(
            &engine,
            &bson::doc! { "_id": i, "cust": i % 7, "tags": [i, i + 1] },
            (doc::catalog::Ack::Journaled, &Default::default()),
            None,
        )
        .unwrap();
    }
    let spec = bson::doc! { "v": 2, "key": { "cust": 1, "tags": 1 }, "name": "cust_1_tags_1" };
    catalog.build_index(&ns, doc::index::IndexSpec::from_shown(spec).unwrap(), &|_, _| {}).unwrap();
    let table = c.indexes()[0].table_name().to_string();
    drop((c, catalog));
    engine.close().unwrap();
    table
}

#[test]
fn verify_checks_every_index_against_its_documents() {
    let dir = tempfile::tempdir().unwrap();
    let table = make_indexed_db(dir.path());
    let o = arbordb(&["verify", "--dbpath", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("verify: 2 indexes, 1500 keys against their documents"), "{}", text(&o));
    assert!(text(&o).contains("shop.orders index cust_1_tags_1: 1000 keys"), "{}", text(&o));
    // One entry lost: verify names the index and exits non-zero.
    {
        let engine = Engine::open(dir.path(), Config::default()).unwrap();
        let t = engine.table(&table).unwrap();
        let (first, _) = engine.cursor(&t).unwrap().first().unwrap().unwrap();
        let mut b = WriteBatch::new();
        b.delete(&t, &first).unwrap();
        engine.write(&b).unwrap();
        engine.close().unwrap();
    }
    let o = arbordb(&["verify", "--dbpath", dir.path().to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("PROBLEM: shop.orders index cust_1_tags_1: 1 keys missing"), "{out}");
    // The storage alone is sound.
    let o = arbordb(&["verify", "--storage-only", "--dbpath", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A write-optimized table: verify walks its runs; dump shows the
/// manifest and each run, newest first.
#[test]
fn verify_and_dump_walk_a_write_optimized_table() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path(), Config::default()).unwrap();
        let cfg = TableConfig { format: storage::TableFormat::WriteOptimized, ..TableConfig::default() };
        let t = engine.create_table("runs", cfg).unwrap();
        engine.put(&t, b"apple", b"old").unwrap();
        engine.put(&t, b"pear", b"kept").unwrap();
        engine.freeze_memtable(&t).unwrap();
        engine.put(&t, b"apple", b"new").unwrap();
        engine.delete(&t, b"pear").unwrap();
        engine.close().unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let o = arbordb(&["verify", "--dbpath", d, "--storage-only"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = arbordb(&["dump", "--dbpath", d]);
    assert!(text(&o).contains("format=WriteOptimized"), "{}", text(&o));
    let o = arbordb(&["dump", "--dbpath", d, "--table", "runs", "--width", "0"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("runs=2 (newest first) retired=0"), "{out}");
    let (newer, older) = out.split_once("run 1 (").expect("two runs");
    // Values are shown raw, with their tag byte: 00 puts, 01 is a tombstone.
    assert!(newer.contains("\"apple\"") && newer.contains("006e6577 \".new\""), "{out}");
    assert!(newer.contains("\"pear\"") && newer.contains("value inline 1 bytes 01"), "{out}");
    assert!(older.contains("006f6c64 \".old\"") && older.contains("006b657074 \".kept\""), "{out}");
}
