//! [`BenchEngine`] for ArborDB's own storage engine (`storage` crate).
//!
//! Opened with `SyncMode::Fsync`, so `Engine::write` returns once the
//! journal record of the batch is fsynced. All data goes into one table
//! with the default `TableConfig` but for its format (B+tree or
//! write-optimized). `settle` merges a write-optimized table's runs into
//! one, then writes a checkpoint, which moves the journaled changes into
//! the table file and trims the journal.

use crate::engine::BenchEngine;
use crate::engine::OpenOptions;
use crate::BenchResult;
use std::path::Path;
use storage::{Config, Engine, SyncMode, Table, TableConfig, TableFormat, WriteBatch};

const TABLE_NAME: &str = "bench";

pub struct ArborEngine {
    engine: Engine,
    table: Table,
}

impl ArborEngine {
    pub fn open(dir: &Path, opts: &OpenOptions, format: TableFormat) -> BenchResult<ArborEngine> {
        let config = Config {
            sync_mode: SyncMode::Fsync,
            checkpoint_interval: opts.arbordb_checkpoint_interval,
            cache_size_bytes: opts.cache_bytes.unwrap_or(Config::default().cache_size_bytes),
            direct_io: opts.arbordb_direct_io,
            ..Config::default()
        };
        let engine = Engine::open(dir, config)?;
        let table = match engine.table(TABLE_NAME) {
            Ok(t) => t,
            Err(_) => engine.create_table(
                TABLE_NAME,
                TableConfig { compressor: opts.arbordb_compressor, format, ..TableConfig::default() },
            )?,
        };
        Ok(ArborEngine { engine, table })
    }
}

impl BenchEngine for ArborEngine {
    fn write_batch(&self, puts: &[(&[u8], &[u8])]) -> BenchResult<()> {
        let mut batch = WriteBatch::new();
        for (k, v) in puts {
            batch.put(&self.table, k, v)?;
        }
        self.engine.write(&batch)?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        out.clear();
        Ok(self.engine.get_with(&self.table, key, |v| out.extend_from_slice(v))?.is_some())
    }

    fn scan(&self, start: &[u8], entries_max: u64, visit: &mut dyn FnMut(&[u8], &[u8])) -> BenchResult<u64> {
        if entries_max == 0 {
            return Ok(0);
        }
        let mut cursor = self.engine.cursor(&self.table)?;
        let mut on = cursor.seek_to(start)?;
        let mut visited = 0;
        // Stop at the first miss: a cursor that ran off the end starts
        // over at the first key on the next `advance()`. Entries are lent,
        // as LMDB's and redb's are.
        while on {
            let (k, v) = cursor.entry()?.expect("the cursor stands on an entry");
            visit(k, v);
            visited += 1;
            if visited == entries_max {
                break;
            }
            on = cursor.advance()?;
        }
        Ok(visited)
    }

    fn settle(&self) -> BenchResult<()> {
        // Write-optimized: every run, the memtable included, merged into
        // one (the idle merge of a quiet table leaves the memtable and may
        // leave a small run beside a big one); a B+tree has no runs.
        self.engine.compact_runs(&self.table)?;
        self.engine.checkpoint()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> BenchResult<()> {
        let ArborEngine { engine, table } = *self;
        drop(table);
        engine.close()?;
        Ok(())
    }
}
