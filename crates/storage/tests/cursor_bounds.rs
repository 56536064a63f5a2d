//! Regression (found in review): `Cursor::seek` is documented as "position on the first entry with
//! key >= `key` (within bounds)", but a seek key that lies below (or on an
//! excluded) lower bound returns `None` and exhausts the cursor instead of
//! returning the first entry inside the bounds.

use std::ops::Bound;
use storage::{Config, Engine, SyncMode, TableConfig};

fn setup() -> (tempfile::TempDir, Engine, storage::Table) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { sync_mode: SyncMode::Off, checkpoint_interval: None, ..Config::default() };
    let engine = Engine::open(dir.path(), config).unwrap();
    let t = engine.create_table("t", TableConfig::default()).unwrap();
    for k in [b"a", b"b", b"c", b"d", b"e"] {
        engine.put(&t, k, b"v").unwrap();
    }
    (dir, engine, t)
}

#[test]
fn seek_below_included_lower_bound_lands_on_first_in_bounds() {
    let (_dir, engine, t) = setup();
    let mut c = engine.cursor(&t).unwrap();
    c.set_bounds(Bound::Included(b"b".to_vec()), Bound::Excluded(b"d".to_vec()));
    let got = c.seek(b"a").unwrap().map(|(k, _)| k.to_vec());
    assert_eq!(got, Some(b"b".to_vec()), "seek(a) with bounds [b, d)");
    assert_eq!(c.next().unwrap().map(|(k, _)| k.to_vec()), Some(b"c".to_vec()));
}

#[test]
fn seek_on_excluded_lower_bound_lands_on_next_key() {
    let (_dir, engine, t) = setup();
    let mut c = engine.cursor(&t).unwrap();
    c.set_bounds(Bound::Excluded(b"b".to_vec()), Bound::Unbounded);
    let got = c.seek(b"b").unwrap().map(|(k, _)| k.to_vec());
    assert_eq!(got, Some(b"c".to_vec()), "seek(b) with bounds (b, ..)");
}
