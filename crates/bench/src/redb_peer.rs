//! [`BenchEngine`] for redb (v4), the peer written in Rust.
//!
//! One file `redb.db` in the data directory and one table of byte-string
//! keys and values. Every write transaction sets `Durability::Immediate`
//! (redb's default, set explicitly so the benchmark does not depend on it),
//! so `commit` returns once the data is fsynced. Reads open one read
//! transaction per op, like a point read through the public API would.

use crate::engine::BenchEngine;
use crate::engine::OpenOptions;
use crate::BenchResult;
use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use std::path::Path;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

pub struct RedbEngine {
    db: Database,
}

impl RedbEngine {
    pub fn open(dir: &Path, opts: &OpenOptions) -> BenchResult<RedbEngine> {
        let mut builder = redb::Builder::new();
        if let Some(bytes) = opts.cache_bytes {
            builder.set_cache_size(bytes);
        }
        let db = builder.create(dir.join("redb.db"))?;
        // Create the table up front so reads never see it missing.
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(RedbEngine { db })
    }
}

impl BenchEngine for RedbEngine {
    fn write_batch(&self, puts: &[(&[u8], &[u8])]) -> BenchResult<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        {
            let mut table = txn.open_table(TABLE)?;
            for (k, v) in puts {
                table.insert(*k, *v)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        out.clear();
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        match table.get(key)? {
            Some(v) => {
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, start: &[u8], entries_max: u64, visit: &mut dyn FnMut(&[u8], &[u8])) -> BenchResult<u64> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        let mut visited = 0;
        for entry in table.range::<&[u8]>(start..)? {
            if visited == entries_max {
                break;
            }
            let (k, v) = entry?;
            visit(k.value(), v.value());
            visited += 1;
        }
        Ok(visited)
    }

    fn settle(&self) -> BenchResult<()> {
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        drop(self.db);
        Ok(())
    }
}
