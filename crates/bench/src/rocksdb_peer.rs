//! [`BenchEngine`] for RocksDB through the `rocksdb` crate (C++, an LSM
//! tree): the third W6 peer, built only with the `rocksdb` cargo feature
//! (its C++ build takes far longer than the test script allows).
//!
//! Every write goes through a `WriteBatch` with `sync = true` (the WAL is
//! fsynced before the write returns), the same durability as the other
//! engines. Built without compression libraries, so blocks are stored
//! uncompressed; the block cache is the size ArborDB's cache has in the
//! same run (`--cache-mib`, else ArborDB's default 512 MiB). Reads lend
//! values (`get_pinned`, a raw iterator) as the other peers do.

use crate::engine::BenchEngine;
use crate::engine::OpenOptions;
use crate::BenchResult;
use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteOptions, DB};
use std::path::Path;

pub struct RocksEngine {
    db: DB,
    sync: WriteOptions,
}

/// The block cache when `--cache-mib` is not given: ArborDB's default.
const DEFAULT_BLOCK_CACHE_BYTES: usize = 512 * 1024 * 1024;

impl RocksEngine {
    pub fn open(dir: &Path, opts: &OpenOptions) -> BenchResult<RocksEngine> {
        let mut options = Options::default();
        options.create_if_missing(true);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(opts.cache_bytes.unwrap_or(DEFAULT_BLOCK_CACHE_BYTES)));
        options.set_block_based_table_factory(&table);
        let db = DB::open(&options, dir)?;
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        Ok(RocksEngine { db, sync })
    }
}

impl BenchEngine for RocksEngine {
    fn write_batch(&self, puts: &[(&[u8], &[u8])]) -> BenchResult<()> {
        let mut batch = WriteBatch::default();
        for (k, v) in puts {
            batch.put(k, v);
        }
        self.db.write_opt(batch, &self.sync)?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        out.clear();
        match self.db.get_pinned(key)? {
            Some(v) => {
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, start: &[u8], entries_max: u64, visit: &mut dyn FnMut(&[u8], &[u8])) -> BenchResult<u64> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut visited = 0;
        while visited < entries_max {
            let (Some(k), Some(v)) = (it.key(), it.value()) else { break };
            visit(k, v);
            visited += 1;
            it.next();
        }
        it.status()?;
        Ok(visited)
    }

    fn settle(&self) -> BenchResult<()> {
        // The data is durable in the WAL; a flush moves the memtable into
        // an SST file, as ArborDB's checkpoint moves its journal into pages.
        self.db.flush()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        drop(self.db);
        Ok(())
    }
}
