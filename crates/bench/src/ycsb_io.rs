//! What a YCSB run writes and keeps on disk (W2's I/O pattern): bytes
//! written by file kind and by page kind, from each server's own counters
//! (ArborDB's `serverStatus.arbordb.io`, PostgreSQL's `pg_stat_wal` and
//! `pg_stat_io`), and file sizes on disk, sampled over time.

use crate::measure::{path_size, DirSize};
use crate::BenchResult;
use mongodb::bson::Document;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// One reading of a server's storage: counters by name (`file.collection`,
/// `page.leaf`, `blocks_punched`, ...) and file sizes by kind.
#[derive(Clone, Debug, Default)]
pub(crate) struct IoReading {
    pub counters: BTreeMap<String, u64>,
    pub disk: BTreeMap<String, DirSize>,
}

impl IoReading {
    /// From ArborDB's `serverStatus` reply; file sizes are read from its
    /// data directory, by the kinds the reply lists the files under.
    pub fn arbordb(status: &Document, dbpath: &Path) -> BenchResult<IoReading> {
        let ours = status.get_document("arbordb")?;
        let io = ours.get_document("io")?;
        let mut r = IoReading::default();
        for (section, prefix) in [("bytesWrittenByFileKind", "file"), ("bytesWrittenByPageKind", "page")] {
            for (kind, v) in io.get_document(section)? {
                r.counters.insert(format!("{prefix}.{kind}"), as_u64(v));
            }
        }
        for name in ["blocks_punched", "checkpoints", "leaf_image_bytes"] {
            r.counters.insert(name.to_string(), as_u64(ours.get(name).unwrap_or(&mongodb::bson::Bson::Null)));
        }
        for (kind, files) in io.get_document("files")? {
            let mut total = DirSize::default();
            for f in files.as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
                // A table dropped since the reply is simply gone.
                if let Ok(s) = path_size(&dbpath.join(f)) {
                    total.bytes += s.bytes;
                    total.allocated_bytes += s.allocated_bytes;
                }
            }
            r.disk.insert(kind.clone(), total);
        }
        Ok(r)
    }

    /// Bytes written per operation between `before` and `self`, by counter.
    pub fn per_op_since(&self, before: &IoReading, ops: u64) -> Value {
        let mut out = Map::new();
        for (name, after) in &self.counters {
            let delta = after.saturating_sub(before.counters.get(name).copied().unwrap_or(0));
            if name.starts_with("file.") || name.starts_with("page.") {
                out.insert(format!("{name}_bytes_per_op"), json!(delta as f64 / ops.max(1) as f64));
            } else {
                out.insert(name.clone(), json!(delta));
            }
        }
        Value::Object(out)
    }

    /// File sizes by kind: apparent and allocated bytes.
    pub fn disk_json(&self) -> Value {
        let kinds = self
            .disk
            .iter()
            .map(|(k, s)| (k.clone(), json!({ "bytes": s.bytes, "allocated_bytes": s.allocated_bytes })));
        Value::Object(kinds.collect())
    }

    /// Allocated bytes of every kind together.
    pub fn allocated_bytes(&self) -> u64 {
        self.disk.values().map(|s| s.allocated_bytes).sum()
    }
}

/// A BSON number as a `u64` (0 for anything else).
pub(crate) fn as_u64(v: &mongodb::bson::Bson) -> u64 {
    match v {
        mongodb::bson::Bson::Int64(n) => *n as u64,
        mongodb::bson::Bson::Int32(n) => *n as u64,
        mongodb::bson::Bson::Double(d) => *d as u64,
        _ => 0,
    }
}

/// PostgreSQL's reading: WAL bytes (its insert position), bytes its
/// backends, checkpointer and background writer wrote to relations
/// (`pg_stat_io` from PostgreSQL 16, `pg_stat_bgwriter`'s buffer counts
/// before), and the sizes of `table`, its indexes and the WAL directory
/// (apparent; PostgreSQL does not punch holes).
pub(crate) async fn postgres(client: &tokio_postgres::Client, table: &str) -> BenchResult<IoReading> {
    let mut r = IoReading::default();
    // The WAL insert position is exact at once (pg_stat_wal is flushed
    // by backends about once a second).
    let row = client.query_one("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint", &[]).await?;
    r.counters.insert("file.wal".into(), row.get::<_, i64>(0) as u64);
    let io = client
        .query_opt("SELECT coalesce(sum(writes * op_bytes), 0)::bigint FROM pg_stat_io WHERE object = 'relation'", &[])
        .await;
    let io = match io {
        Ok(row) => Ok(row),
        Err(_) => {
            let sql = "SELECT ((buffers_checkpoint + buffers_clean + buffers_backend) \
                       * current_setting('block_size')::bigint)::bigint FROM pg_stat_bgwriter";
            client.query_opt(sql, &[]).await
        }
    };
    if let Ok(Some(row)) = io {
        r.counters.insert("file.relations".into(), row.get::<_, i64>(0) as u64);
    }
    let sql = "SELECT pg_table_size($1::text::regclass)::bigint, pg_indexes_size($1::text::regclass)::bigint, \
               (SELECT coalesce(sum(size), 0) FROM pg_ls_waldir())::bigint";
    let sizes = client.query_one(sql, &[&table]).await?;
    for (i, kind) in ["table", "index", "wal"].into_iter().enumerate() {
        let bytes = sizes.get::<_, i64>(i) as u64;
        r.disk.insert(kind.into(), DirSize { bytes, allocated_bytes: bytes, journal_bytes: 0 });
    }
    Ok(r)
}
