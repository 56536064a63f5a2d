//! A deterministic workload of write batches and its reference model, shared
//! by the crash and fault tests: batch `n` of seed `s` is always the same, so
//! the expected contents after any number of batches can be recomputed.
//!
//! Every batch also sets the key `last` to its own number plus one, so a
//! recovered table says how many batches it holds.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use storage::{Engine, Table, WriteBatch};

pub const LAST_KEY: &[u8] = b"last";
pub const KEY_SPACE: u64 = 3000;

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The ops of batch `n`: `(key, Some(value))` puts, `(key, None)` deletes.
pub fn batch_ops(seed: u64, n: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n);
    let count = rng.gen_range(1..12);
    let mut ops = Vec::with_capacity(count + 1);
    for _ in 0..count {
        let k = format!("k/{:06}", rng.gen_range(0..KEY_SPACE)).into_bytes();
        if rng.gen_bool(0.2) {
            ops.push((k, None));
        } else {
            // Mostly small values, sometimes one that needs an overflow block.
            let len = if rng.gen_bool(0.02) { rng.gen_range(9000..40000) } else { rng.gen_range(0..300) };
            let mut v = vec![(n % 251) as u8; len];
            v.extend_from_slice(&n.to_le_bytes());
            ops.push((k, Some(v)));
        }
    }
    ops.push((LAST_KEY.to_vec(), Some((n + 1).to_le_bytes().to_vec())));
    ops
}

/// Apply batch `n` to the model.
pub fn apply_to_model(model: &mut Model, seed: u64, n: u64) {
    for (k, v) in batch_ops(seed, n) {
        match v {
            Some(v) => {
                model.insert(k, v);
            }
            None => {
                model.remove(&k);
            }
        }
    }
}

/// Commit batch `n` to the engine.
pub fn commit(engine: &Engine, table: &Table, seed: u64, n: u64) -> storage::Result<u64> {
    let mut batch = WriteBatch::new();
    for (k, v) in batch_ops(seed, n) {
        match v {
            Some(v) => batch.put(table, &k, &v)?,
            None => batch.delete(table, &k)?,
        }
    }
    engine.write(&batch)
}

/// How many batches the table holds, by its `last` key.
pub fn batches_in(engine: &Engine, table: &Table) -> storage::Result<u64> {
    Ok(engine.get(table, LAST_KEY)?.map(|v| u64::from_le_bytes(v[..8].try_into().unwrap())).unwrap_or(0))
}

/// The table's whole contents, read through the cursor's lending moves.
pub fn contents(engine: &Engine, table: &Table) -> storage::Result<Model> {
    let mut out = Model::new();
    let mut c = engine.cursor(table)?;
    while c.advance()? {
        let (k, v) = c.entry()?.expect("a cursor that moved onto an entry lends it");
        out.insert(k.to_vec(), v.to_vec());
    }
    Ok(out)
}

/// Describe the first difference between two models, for assertion messages.
pub fn first_difference(got: &Model, want: &Model) -> Option<String> {
    for (k, v) in want {
        match got.get(k) {
            None => return Some(format!("missing key {}", String::from_utf8_lossy(k))),
            Some(g) if g != v => return Some(format!("key {} has a different value", String::from_utf8_lossy(k))),
            _ => {}
        }
    }
    got.keys().find(|k| !want.contains_key(*k)).map(|k| format!("unexpected key {}", String::from_utf8_lossy(k)))
}
