//! [`BenchEngine`] for LMDB through heed 0.23, the peer written in C.
//!
//! The environment is opened with a large map (8 GiB by default, address
//! space only) and heed's default flags: no `NO_SYNC`, `NO_META_SYNC` or
//! `WRITE_MAP`, so every commit is fsynced. The unnamed database holds the
//! data. Reads open one read transaction per op.

use crate::engine::BenchEngine;
use crate::engine::OpenOptions;
use crate::BenchResult;
use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions};
use std::ops::Bound;
use std::path::Path;

pub struct LmdbEngine {
    env: Env,
    db: Database<'static, Bytes, Bytes>,
}

impl LmdbEngine {
    pub fn open(dir: &Path, opts: &OpenOptions) -> BenchResult<LmdbEngine> {
        // SAFETY: heed requires that the same environment file is not opened
        // twice in one process and is not modified by others while mapped;
        // each phase gets its own fresh directory and nothing else touches it.
        let env = unsafe { EnvOpenOptions::new().map_size(opts.lmdb_map_size_bytes).max_dbs(1).open(dir)? };
        let txn = env.write_txn()?;
        let db = env
            .create_databases_and_commit(txn, |opener, txn| -> Result<_, heed::Error> {
                Ok(CommitOrAbort::<_, ()>::Commit(opener.create_database::<Bytes, Bytes>(txn, None)?))
            })?
            .unwrap_commit();
        Ok(LmdbEngine { env, db })
    }
}

impl BenchEngine for LmdbEngine {
    fn write_batch(&self, puts: &[(&[u8], &[u8])]) -> BenchResult<()> {
        let mut txn = self.env.write_txn()?;
        for (k, v) in puts {
            self.db.put(&mut txn, k, v)?;
        }
        txn.commit()?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        out.clear();
        let txn = self.env.read_txn()?;
        match self.db.get(&txn, key)? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&self, start: &[u8], entries_max: u64, visit: &mut dyn FnMut(&[u8], &[u8])) -> BenchResult<u64> {
        let txn = self.env.read_txn()?;
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(start), Bound::Unbounded);
        let mut visited = 0;
        for entry in self.db.range(&txn, &range)? {
            if visited == entries_max {
                break;
            }
            let (k, v) = entry?;
            visit(k, v);
            visited += 1;
        }
        Ok(visited)
    }

    fn settle(&self) -> BenchResult<()> {
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        let LmdbEngine { env, db: _ } = *self;
        env.prepare_for_closing().wait();
        Ok(())
    }
}
