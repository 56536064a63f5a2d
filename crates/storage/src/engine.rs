//! The engine: tables, atomic write batches, journal, checkpoints, recovery.
//!
//! Data directory:
//! - `arbordb.root`: the root file, replaced atomically at each checkpoint;
//!   names the metadata table's root page and extent list, the checkpoint's
//!   journal position, and the next table id.
//! - `metadata.adb`: the metadata table (a B+tree): table name -> id, config,
//!   root page and extent list of that table in the checkpoint.
//! - `tNNNNNNNNNN.adb`: one file per table.
//! - `journal/`: journal files.
//!
//! Invariants:
//! 1. A checkpoint holds exactly the effects of journal records below its
//!    `ckpt_seq`: commits append and apply under the commit gate (read), the
//!    checkpoint takes its snapshot under the gate (write).
//! 2. Per table, journal order is apply order: a batch holds its tables'
//!    writer locks (taken in id order) while it appends and applies.
//! 3. Every data file is synced before the root file that names its blocks
//!    is renamed into place; the directory is synced after.
//! 4. After a failed write, fsync or checkpoint the engine is poisoned: it
//!    refuses writes and checkpoints until reopened, and says why.

use crate::block::{AllocPolicy, BlockAddr, BlockFile, ExtentList};
use crate::btree::{Cursor, TableFormat, Tree, TreeGeometry};
use crate::cache::CacheMeter;
use crate::codec::Reader;
use crate::compress::Compressor;
use crate::error::{Result, StorageError};
use crate::journal::{self, Journal, SyncMode};
use crate::limits::*;
use crate::runs::{Lane, Take};
use crate::stats::{bump, Counters, Stats, TableIoStats};
use crate::txn::{self, CommitRequest, KeyVersions, RootSet, TxnManager};
use crate::vfs::{DirectVfs, OsVfs, Vfs};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

pub const ROOT_FILE: &str = "arbordb.root";
pub const METADATA_FILE: &str = "metadata.adb";
pub const JOURNAL_DIR: &str = "journal";
const ROOT_MAGIC: &[u8; 8] = b"ARBROOT1";
/// 2: blocks may be compressed (a codec byte in the block header). A
/// version-1 directory is read as it is (its blocks are all stored plain)
/// and written as version 2 by its next checkpoint.
const ROOT_FORMAT_VERSION: u32 = 2;
const ROOT_FORMAT_VERSIONS_READ: [u32; 2] = [1, 2];
const ROOT_BYTES: usize = 68;

pub fn table_file_name(id: u32) -> String {
    format!("t{id:010}.adb")
}

/// One table's file and what has been written to it ([`Engine::table_io`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableIoEntry {
    pub name: String,
    pub file: String,
    pub io: TableIoStats,
}

/// Engine-wide options.
#[derive(Clone, Debug)]
pub struct Config {
    pub sync_mode: SyncMode,
    pub journal_file_max_bytes: u64,
    /// Checkpoint after this long; `None` turns the timer off.
    pub checkpoint_interval: Option<Duration>,
    /// Checkpoint after this much journal.
    pub checkpoint_journal_bytes: u64,
    /// Memory for pages, including old versions snapshots pin. Eviction
    /// keeps the estimate (see `page::Node::mem_bytes`) under this.
    pub cache_size_bytes: usize,
    /// Share of the cache (percent) old versions pinned by snapshots may
    /// take before the oldest transaction is rolled back.
    pub cache_pinned_max_percent: usize,
    /// Free blocks of a data file are released to the device (holes
    /// punched) each time checkpoints have freed this many; 0: never.
    pub punch_every_blocks: u64,
    /// The leaf compressor of tables made from
    /// [`Engine::default_table_config`] (the server's collections and
    /// indexes); tables keep the one they were created with.
    pub table_compressor: Compressor,
    /// Read and write data files with direct I/O (`O_DIRECT`), bypassing
    /// the operating system's page cache ([`crate::DirectVfs`]). For
    /// [`Engine::open`]; `open_with_vfs` uses the file system it is given.
    pub direct_io: bool,
    /// A write-optimized table's memtable is frozen into a run past this
    /// many bytes of memory (or past `limits::memtable_cache_share_percent`
    /// of the cache, whichever is less).
    pub memtable_max_bytes: usize,
    /// A background thread merges write-optimized tables' runs
    /// ([`Engine::merge_runs`]); off, only explicit calls do.
    pub merge_runs_in_background: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sync_mode: SyncMode::Fsync,
            journal_file_max_bytes: journal_file_default_bytes,
            checkpoint_interval: Some(Duration::from_secs(checkpoint_interval_default_secs)),
            checkpoint_journal_bytes: checkpoint_journal_default_bytes,
            cache_size_bytes: cache_default_bytes,
            cache_pinned_max_percent: cache_pinned_default_percent,
            punch_every_blocks: punch_every_default_blocks,
            table_compressor: Compressor::default(),
            direct_io: false,
            memtable_max_bytes: memtable_default_bytes,
            merge_runs_in_background: true,
        }
    }
}

/// Per-table options, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableConfig {
    pub leaf_page_max_bytes: u32,
    pub internal_page_max_bytes: u32,
    /// Values of at least this size get their own overflow block.
    pub overflow_min_bytes: u32,
    pub alloc_policy: AllocPolicy,
    /// How leaf pages are stored on disk (default snappy).
    pub compressor: Compressor,
    /// B+tree (default) or write-optimized (`runs.rs`).
    pub format: TableFormat,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            leaf_page_max_bytes: leaf_page_default_bytes,
            internal_page_max_bytes: internal_page_default_bytes,
            overflow_min_bytes: leaf_page_default_bytes / 4,
            alloc_policy: AllocPolicy::BestFit,
            compressor: Compressor::default(),
            format: TableFormat::BTree,
        }
    }
}

impl TableConfig {
    const ENCODED_BYTES: usize = 16;

    fn validate(&self) -> Result<()> {
        let page_ok = |v: u32| (page_min_bytes..=page_max_bytes).contains(&v);
        if !page_ok(self.leaf_page_max_bytes) || !page_ok(self.internal_page_max_bytes) {
            return Err(StorageError::InvalidConfig(format!(
                "page sizes must be between {page_min_bytes} and {page_max_bytes} bytes"
            )));
        }
        // A value just under the overflow size may make one leaf image larger
        // than the page size; that is allowed (the page holds fewer entries).
        if !(64..=page_max_bytes).contains(&self.overflow_min_bytes) {
            return Err(StorageError::InvalidConfig(format!(
                "overflow_min_bytes must be between 64 and {page_max_bytes}"
            )));
        }
        Ok(())
    }

    /// The table's geometry; `memtable_max` bytes for a write-optimized one.
    fn geometry(&self, memtable_max: usize) -> TreeGeometry {
        TreeGeometry {
            leaf_page_max: self.leaf_page_max_bytes as usize,
            internal_page_max: self.internal_page_max_bytes as usize,
            overflow_min: self.overflow_min_bytes as usize,
            compressor: self.compressor,
            format: self.format,
            memtable_max,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.leaf_page_max_bytes.to_le_bytes());
        out.extend_from_slice(&self.internal_page_max_bytes.to_le_bytes());
        out.extend_from_slice(&self.overflow_min_bytes.to_le_bytes());
        out.extend_from_slice(&[self.alloc_policy.to_u8(), self.compressor.to_u8(), self.format.to_u8(), 0]);
    }

    fn decode(r: &mut Reader) -> Option<TableConfig> {
        let (leaf_page_max_bytes, internal_page_max_bytes, overflow_min_bytes) = (r.u32()?, r.u32()?, r.u32()?);
        // A table made before compression has 0 here: none; one made
        // before write-optimized tables, 0 for the format: a B+tree.
        let policy = r.bytes(4)?;
        let cfg = TableConfig {
            leaf_page_max_bytes,
            internal_page_max_bytes,
            overflow_min_bytes,
            alloc_policy: AllocPolicy::from_u8(policy[0])?,
            compressor: Compressor::from_u8(policy[1])?,
            format: TableFormat::from_u8(policy[2])?,
        };
        cfg.validate().ok()?;
        Some(cfg)
    }
}

/// Where a table's checkpoint lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableCheckpoint {
    pub root: BlockAddr,
    pub extents: BlockAddr,
}

/// A metadata-table entry.
#[derive(Clone, Copy, Debug)]
pub struct TableMeta {
    pub id: u32,
    pub config: TableConfig,
    pub checkpoint: TableCheckpoint,
}

impl TableMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + TableConfig::ENCODED_BYTES + 32);
        out.extend_from_slice(&self.id.to_le_bytes());
        self.config.encode(&mut out);
        self.checkpoint.root.encode(&mut out);
        self.checkpoint.extents.encode(&mut out);
        out
    }

    pub fn decode(b: &[u8]) -> Option<TableMeta> {
        let mut r = Reader::new(b);
        let id = r.u32()?;
        let config = TableConfig::decode(&mut r)?;
        let root = BlockAddr::decode(r.bytes(16)?)?;
        let extents = BlockAddr::decode(r.bytes(16)?)?;
        (r.remaining() == 0).then_some(TableMeta { id, config, checkpoint: TableCheckpoint { root, extents } })
    }
}

/// The contents of the root file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RootRecord {
    pub generation: u64,
    pub ckpt_seq: u64,
    pub next_table_id: u32,
    pub metadata: TableCheckpoint,
}

impl RootRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ROOT_BYTES);
        out.extend_from_slice(ROOT_MAGIC);
        out.extend_from_slice(&ROOT_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.next_table_id.to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.ckpt_seq.to_le_bytes());
        self.metadata.root.encode(&mut out);
        self.metadata.extents.encode(&mut out);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(out.len(), ROOT_BYTES);
        out
    }

    pub fn decode(path: &Path, b: &[u8]) -> Result<RootRecord> {
        let bad = |d: &str| StorageError::corruption(path, 0, d.to_string());
        if b.len() != ROOT_BYTES || &b[0..8] != ROOT_MAGIC {
            return Err(bad("not an ArborDB root file"));
        }
        let crc = u32::from_le_bytes(b[ROOT_BYTES - 4..].try_into().unwrap());
        if crc != crc32c::crc32c(&b[..ROOT_BYTES - 4]) {
            return Err(bad("root file checksum mismatch"));
        }
        let mut r = Reader::new(&b[8..]);
        let version = r.u32().unwrap();
        if !ROOT_FORMAT_VERSIONS_READ.contains(&version) {
            return Err(bad(&format!("unsupported format version {version}")));
        }
        Ok(RootRecord {
            next_table_id: r.u32().unwrap(),
            generation: r.u64().unwrap(),
            ckpt_seq: r.u64().unwrap(),
            metadata: TableCheckpoint {
                root: BlockAddr::decode(r.bytes(16).unwrap()).unwrap(),
                extents: BlockAddr::decode(r.bytes(16).unwrap()).unwrap(),
            },
        })
    }

    pub fn read(vfs: &dyn Vfs, dir: &Path) -> Result<RootRecord> {
        let path = dir.join(ROOT_FILE);
        let f = vfs.open(&path, false)?;
        let len = f.len()?;
        if len != ROOT_BYTES as u64 {
            return Err(StorageError::corruption(&path, 0, format!("root file is {len} bytes, expected {ROOT_BYTES}")));
        }
        let mut b = vec![0u8; ROOT_BYTES];
        f.read_at(&mut b, 0)?;
        RootRecord::decode(&path, &b)
    }
}

pub(crate) struct TableState {
    /// The engine instance this table belongs to (handles are not portable).
    engine_id: u64,
    pub id: u32,
    pub name: String,
    pub config: TableConfig,
    pub tree: Arc<Tree>,
    /// Serializes the writers of this table (invariant 2).
    writer: Mutex<()>,
    /// Recent writers of each key, for first-updater-wins and SSI.
    pub(crate) versions: Mutex<KeyVersions>,
    /// SSI range and whole-table marks on this table (see `ssi.rs`).
    pub(crate) scan_marks: Arc<std::sync::atomic::AtomicUsize>,
    /// A checkpoint took this table in its snapshot and has not written
    /// its extent list yet: eviction must not write pages meanwhile (a
    /// block the checkpoint does not reference would leak in it).
    checkpointing: AtomicBool,
    dropped: AtomicBool,
    /// The table's last checkpoint, if it has one.
    last_checkpoint: Mutex<Option<TableCheckpoint>>,
}

/// A handle on a table. Cheap to clone; fails with `TableNotFound` once the
/// table is dropped.
#[derive(Clone)]
pub struct Table(pub(crate) Arc<TableState>);

impl Table {
    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn id(&self) -> u32 {
        self.0.id
    }
    pub fn config(&self) -> TableConfig {
        self.0.config
    }
    fn check(&self, engine_id: u64) -> Result<()> {
        if self.0.dropped.load(Ordering::Acquire) || self.0.engine_id != engine_id {
            return Err(StorageError::TableNotFound(self.0.name.clone()));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({:?}, id {})", self.0.name, self.0.id)
    }
}

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_CREATE: u8 = 3;
const OP_DROP: u8 = 4;

/// An atomic group of puts and deletes over one or more tables: after a
/// crash either all of it is there or none.
#[derive(Default)]
pub struct WriteBatch {
    /// The journal payload, built as ops are added (ops after the count).
    payload: Vec<u8>,
    ops: Vec<(Table, usize)>,
}

impl WriteBatch {
    pub fn new() -> Self {
        WriteBatch::default()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn check_key(key: &[u8]) -> Result<()> {
        if key.len() > key_size_max_bytes {
            return Err(StorageError::KeyTooLarge { len: key.len(), max: key_size_max_bytes });
        }
        Ok(())
    }

    /// The size limits a put (`Some`) or delete of `key` must keep.
    pub(crate) fn check_sizes(key: &[u8], value: Option<&[u8]>) -> Result<()> {
        Self::check_key(key)?;
        match value {
            Some(v) if v.len() > value_size_max_bytes => {
                Err(StorageError::ValueTooLarge { len: v.len(), max: value_size_max_bytes })
            }
            _ => Ok(()),
        }
    }

    /// Each op's table and key, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = (&Table, &[u8])> {
        self.ops.iter().map(|(t, at)| match decode_op(&mut Reader::new(&self.payload[*at..])) {
            Some(JournalOp::Put { key, .. } | JournalOp::Delete { key, .. }) => (t, key),
            _ => unreachable!("batches hold only well-formed puts and deletes"),
        })
    }

    pub fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        Self::check_sizes(key, Some(value))?;
        self.ops.push((table.clone(), self.payload.len()));
        self.payload.push(OP_PUT);
        self.payload.extend_from_slice(&table.id().to_le_bytes());
        self.payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.payload.extend_from_slice(key);
        self.payload.extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.payload.extend_from_slice(value);
        Ok(())
    }

    pub fn delete(&mut self, table: &Table, key: &[u8]) -> Result<()> {
        Self::check_key(key)?;
        self.ops.push((table.clone(), self.payload.len()));
        self.payload.push(OP_DELETE);
        self.payload.extend_from_slice(&table.id().to_le_bytes());
        self.payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.payload.extend_from_slice(key);
        Ok(())
    }

    pub fn clear(&mut self) {
        self.payload.clear();
        self.ops.clear();
    }
}

/// One decoded journal operation.
#[derive(Debug, PartialEq, Eq)]
pub enum JournalOp<'a> {
    Put { table: u32, key: &'a [u8], value: &'a [u8] },
    Delete { table: u32, key: &'a [u8] },
    CreateTable { table: u32, name: &'a str, config: TableConfig },
    DropTable { table: u32 },
}

/// Decode the op at the reader's position.
fn decode_op<'a>(r: &mut Reader<'a>) -> Option<JournalOp<'a>> {
    let kind = r.u8()?;
    let table = r.u32()?;
    Some(match kind {
        OP_PUT => {
            let klen = r.u32()? as usize;
            let key = r.bytes(klen)?;
            let vlen = r.u32()? as usize;
            JournalOp::Put { table, key, value: r.bytes(vlen)? }
        }
        OP_DELETE => {
            let klen = r.u32()? as usize;
            JournalOp::Delete { table, key: r.bytes(klen)? }
        }
        OP_CREATE => {
            let nlen = r.u16()? as usize;
            let name = std::str::from_utf8(r.bytes(nlen)?).ok()?;
            JournalOp::CreateTable { table, name, config: TableConfig::decode(r)? }
        }
        OP_DROP => JournalOp::DropTable { table },
        _ => return None,
    })
}

/// Decode a whole journal payload (for replay and the dump tool).
pub fn decode_journal_payload(payload: &[u8]) -> Option<Vec<JournalOp<'_>>> {
    let mut r = Reader::new(payload);
    let mut ops = Vec::new();
    while r.remaining() > 0 {
        ops.push(decode_op(&mut r)?);
    }
    Some(ops)
}

/// What creating a table's tree needs.
#[derive(Clone, Copy)]
struct TableEnv<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    counters: &'a Arc<Counters>,
    meter: &'a Arc<CacheMeter>,
    memtable_max: usize,
}

struct Catalog {
    engine_id: u64,
    by_name: BTreeMap<String, Table>,
    by_id: HashMap<u32, Table>,
    next_table_id: u32,
    /// Dropped tables whose files wait for a checkpoint that no longer names them.
    dropped_files: Vec<PathBuf>,
}

/// Where eviction's clock hand stands: the next table, and a key per table.
#[derive(Default)]
struct EvictionState {
    next_table: usize,
    hands: HashMap<u32, Vec<u8>>,
}

struct CheckpointState {
    generation: u64,
    meta_extents: BlockAddr,
    ckpt_seq: u64,
    journal_bytes_at: u64,
    at: Instant,
}

/// A table as a checkpoint's snapshot took it.
struct Snap {
    table: Table,
    root: Arc<crate::page::Node>,
    /// Unchanged since the last checkpoint: nothing to write.
    clean: bool,
    /// A write-optimized table's runs merges replaced, not yet freed.
    retired: Vec<crate::page::Run>,
}

/// Tells engine instances apart, so a table handle is only used with its own engine.
static ENGINE_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

struct Inner {
    id: u64,
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    config: Config,
    catalog: RwLock<Catalog>,
    /// Commits hold it shared; a checkpoint's snapshot holds it exclusive (invariant 1).
    gate: RwLock<()>,
    journal: Journal,
    /// Published versions, active transactions, SSI state.
    txns: Arc<TxnManager>,
    meta: Tree,
    checkpoint: Mutex<CheckpointState>,
    counters: Arc<Counters>,
    meter: Arc<CacheMeter>,
    eviction: Mutex<EvictionState>,
    /// Application threads help evict only above this many cache bytes: a
    /// pass that left the cache over the trigger (what stays is not
    /// evictable yet: internal pages, dirty pages a checkpoint holds)
    /// raises it, so that they do not each walk every table for nothing on
    /// every page read; the background thread keeps evicting.
    eviction_backoff: AtomicUsize,
    poisoned: Mutex<Option<String>>,
    closed: AtomicBool,
    stop: Arc<(Mutex<bool>, Condvar)>,
    _dir_lock: Box<dyn Send + Sync>,
}

/// The storage engine. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    background: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

fn meta_geometry() -> TreeGeometry {
    TableConfig::default().geometry(0)
}

/// The memtable budget of a write-optimized table (`Config::memtable_max_bytes`).
fn memtable_max(config: &Config) -> usize {
    config.memtable_max_bytes.min(config.cache_size_bytes / 100 * memtable_cache_share_percent)
}

impl Engine {
    /// Open (or create) the data directory `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Engine> {
        let vfs: Arc<dyn Vfs> = match config.direct_io {
            true => Arc::new(DirectVfs),
            false => Arc::new(OsVfs),
        };
        Engine::open_with_vfs(vfs, dir.as_ref(), config)
    }

    /// Open through a given file system (tests use failing or crashing ones).
    pub fn open_with_vfs(vfs: Arc<dyn Vfs>, dir: &Path, config: Config) -> Result<Engine> {
        if config.cache_size_bytes < cache_min_bytes {
            return Err(StorageError::InvalidConfig(format!(
                "cache_size_bytes {} is below the minimum of {cache_min_bytes}",
                config.cache_size_bytes
            )));
        }
        if !(1..=100).contains(&config.cache_pinned_max_percent) {
            return Err(StorageError::InvalidConfig(format!(
                "cache_pinned_max_percent {} is not within 1..=100",
                config.cache_pinned_max_percent
            )));
        }
        vfs.create_dir_all(dir)?;
        let dir_lock = vfs.lock_dir(dir)?;
        let counters = Arc::new(Counters::default());
        let meter = CacheMeter::new(config.cache_size_bytes);
        let engine_id = ENGINE_IDS.fetch_add(1, Ordering::Relaxed);
        let root_path = dir.join(ROOT_FILE);
        if !vfs.exists(&root_path) {
            Self::initialize(&*vfs, dir)?;
        }
        let root = RootRecord::read(&*vfs, dir)?;
        let meta_bf = Arc::new(Self::open_block_file(
            &*vfs,
            &dir.join(METADATA_FILE),
            AllocPolicy::BestFit,
            root.metadata.extents,
        )?);
        let meta = Tree::open(meta_bf, meta_geometry(), counters.clone(), meter.clone(), root.metadata.root)?;
        let mut catalog = Catalog {
            engine_id,
            by_name: BTreeMap::new(),
            by_id: HashMap::new(),
            next_table_id: root.next_table_id,
            dropped_files: Vec::new(),
        };
        let mut cursor = Cursor::new(Arc::new(Tree::open(
            meta.bf.clone(),
            meta_geometry(),
            counters.clone(),
            CacheMeter::unbounded(),
            root.metadata.root,
        )?));
        while let Some((name, value)) = cursor.next()? {
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| StorageError::corruption(dir.join(METADATA_FILE), 0, "table name is not UTF-8"))?;
            let m = TableMeta::decode(&value).ok_or_else(|| {
                StorageError::corruption(dir.join(METADATA_FILE), 0, format!("bad metadata entry for table {name:?}"))
            })?;
            let bf = Arc::new(Self::open_block_file(
                &*vfs,
                &dir.join(table_file_name(m.id)),
                m.config.alloc_policy,
                m.checkpoint.extents,
            )?);
            let geometry = m.config.geometry(memtable_max(&config));
            let tree = Tree::open(bf, geometry, counters.clone(), meter.clone(), m.checkpoint.root)?;
            let table = Table(Arc::new(TableState {
                engine_id,
                id: m.id,
                name: name.clone(),
                config: m.config,
                tree: Arc::new(tree),
                writer: Mutex::new(()),
                versions: Mutex::default(),
                scan_marks: Arc::default(),
                checkpointing: AtomicBool::new(false),
                dropped: AtomicBool::new(false),
                last_checkpoint: Mutex::new(Some(m.checkpoint)),
            }));
            catalog.by_id.insert(m.id, table.clone());
            catalog.by_name.insert(name, table);
        }
        let journal_dir = dir.join(JOURNAL_DIR);
        let summary = journal::replay(&*vfs, &journal_dir, root.ckpt_seq, &mut |seq, payload| {
            Self::replay_record(
                &TableEnv { vfs: &*vfs, dir, counters: &counters, meter: &meter, memtable_max: memtable_max(&config) },
                &mut catalog,
                seq,
                payload,
            )
        })?;
        if let Some((path, offset)) = &summary.torn_tail {
            tracing::warn!(path = %path.display(), offset, "journal ended in a torn record; replay stopped at the last complete one");
        }
        let journal =
            Journal::open(vfs.clone(), journal_dir, summary.next_seq, config.journal_file_max_bytes, counters.clone())?;
        let roots = catalog.by_id.iter().map(|(id, t)| (*id, t.0.tree.snapshot())).collect();
        let txns = Arc::new(TxnManager::new(RootSet { ts: summary.next_seq.saturating_sub(1), roots }));
        let inner = Arc::new(Inner {
            id: engine_id,
            vfs,
            dir: dir.to_path_buf(),
            config,
            catalog: RwLock::new(catalog),
            gate: RwLock::new(()),
            meta,
            checkpoint: Mutex::new(CheckpointState {
                generation: root.generation,
                meta_extents: root.metadata.extents,
                ckpt_seq: root.ckpt_seq,
                journal_bytes_at: 0,
                at: Instant::now(),
            }),
            journal,
            txns,
            counters,
            meter,
            eviction: Mutex::default(),
            eviction_backoff: AtomicUsize::new(0),
            poisoned: Mutex::new(None),
            closed: AtomicBool::new(false),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            _dir_lock: dir_lock,
        });
        let engine = Engine { inner, background: Arc::default() };
        let weak = Arc::downgrade(&engine.inner);
        engine.inner.meter.set_helper(Box::new(move || {
            if let Some(inner) = weak.upgrade() {
                Engine { inner, background: Arc::default() }.help_evict();
            }
        }));
        if summary.records_replayed > 0 {
            tracing::info!(records = summary.records_replayed, "replayed journal records after the last checkpoint");
            engine.checkpoint()?;
        }
        engine.remove_stray_files()?;
        engine.start_background();
        Ok(engine)
    }

    fn open_block_file(vfs: &dyn Vfs, path: &Path, policy: AllocPolicy, extents: BlockAddr) -> Result<BlockFile> {
        let file = vfs.open_data(path, false)?;
        let alloc = match crate::block::read_block_at(&*file, extents)? {
            (crate::block::BlockKind::ExtentList, payload) => ExtentList::decode(&payload)
                .ok_or_else(|| StorageError::corruption(path, extents.offset, "malformed extent list"))?,
            (kind, _) => {
                return Err(StorageError::corruption(
                    path,
                    extents.offset,
                    format!("expected an extent list, found {kind:?}"),
                ))
            }
        };
        if !alloc.contains(extents.offset, extents.size as u64) {
            return Err(StorageError::corruption(path, extents.offset, "extent list does not list its own block"));
        }
        BlockFile::open(file, policy, alloc)
    }

    /// A new data directory: empty metadata table and a first checkpoint.
    fn initialize(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        if vfs.exists(&dir.join(JOURNAL_DIR)) && !vfs.list(&dir.join(JOURNAL_DIR))?.is_empty() {
            return Err(StorageError::corruption(
                dir.join(ROOT_FILE),
                0,
                "journal files exist but the root file is missing",
            ));
        }
        let bf = Arc::new(BlockFile::create(vfs.open_data(&dir.join(METADATA_FILE), true)?, AllocPolicy::BestFit)?);
        let tree = Tree::new_empty(bf.clone(), meta_geometry(), Arc::new(Counters::default()), CacheMeter::unbounded());
        let root = tree.write_dirty(&tree.snapshot())?;
        let extents = bf.write_extent_list()?;
        bf.sync()?;
        let record =
            RootRecord { generation: 1, ckpt_seq: 0, next_table_id: 1, metadata: TableCheckpoint { root, extents } };
        Self::write_root_file(vfs, dir, &record)
    }

    fn write_root_file(vfs: &dyn Vfs, dir: &Path, record: &RootRecord) -> Result<()> {
        let tmp = dir.join(format!("{ROOT_FILE}.tmp"));
        let f = vfs.open(&tmp, true)?;
        f.set_len(0)?;
        f.write_at(&record.encode(), 0)?;
        f.sync()?;
        drop(f);
        // New table files must have durable names before a root can name them.
        vfs.sync_dir(dir)?;
        vfs.rename(&tmp, &dir.join(ROOT_FILE))?;
        vfs.sync_dir(dir)
    }

    fn replay_record(env: &TableEnv, catalog: &mut Catalog, seq: u64, payload: &[u8]) -> Result<()> {
        let dir = env.dir;
        let path = dir.join(JOURNAL_DIR);
        let ops = decode_journal_payload(payload).ok_or_else(|| {
            StorageError::corruption(
                &path,
                seq,
                format!("journal record {seq} has a valid checksum but cannot be decoded"),
            )
        })?;
        for op in ops {
            let table_of = |catalog: &Catalog, id: u32| {
                catalog.by_id.get(&id).cloned().ok_or_else(|| {
                    StorageError::corruption(&path, seq, format!("journal record {seq} names unknown table {id}"))
                })
            };
            match op {
                JournalOp::Put { table, key, value } => {
                    table_of(catalog, table)?.0.tree.apply(std::iter::once((key, Some(value))))?
                }
                JournalOp::Delete { table, key } => {
                    table_of(catalog, table)?.0.tree.apply(std::iter::once((key, None)))?
                }
                JournalOp::CreateTable { table, name, config } => {
                    let t = Self::new_table(env, catalog.engine_id, table, name, config)?;
                    catalog.next_table_id = catalog.next_table_id.max(table + 1);
                    catalog.by_id.insert(table, t.clone());
                    catalog.by_name.insert(name.to_string(), t);
                }
                JournalOp::DropTable { table } => {
                    let t = table_of(catalog, table)?;
                    Self::forget_table(catalog, &t);
                    catalog.dropped_files.push(dir.join(table_file_name(table)));
                }
            }
        }
        Ok(())
    }

    fn new_table(env: &TableEnv, engine_id: u64, id: u32, name: &str, config: TableConfig) -> Result<Table> {
        let TableEnv { vfs, dir, counters, meter, memtable_max } = *env;
        let bf =
            Arc::new(BlockFile::create(vfs.open_data(&dir.join(table_file_name(id)), true)?, config.alloc_policy)?);
        Ok(Table(Arc::new(TableState {
            engine_id,
            id,
            name: name.to_string(),
            config,
            tree: Arc::new(Tree::new_empty(bf, config.geometry(memtable_max), counters.clone(), meter.clone())),
            writer: Mutex::new(()),
            versions: Mutex::default(),
            scan_marks: Arc::default(),
            checkpointing: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            last_checkpoint: Mutex::new(None),
        })))
    }

    fn forget_table(catalog: &mut Catalog, t: &Table) {
        t.0.dropped.store(true, Ordering::Release);
        catalog.by_id.remove(&t.id());
        catalog.by_name.remove(t.name());
    }

    /// Delete table files that no table owns (left by a crash or a drop).
    fn remove_stray_files(&self) -> Result<()> {
        let catalog = self.inner.catalog.read().unwrap();
        let mut removed = false;
        for name in self.inner.vfs.list(&self.inner.dir)? {
            let owned = name == METADATA_FILE || catalog.by_id.keys().any(|&id| table_file_name(id) == name);
            if name.starts_with('t') && name.ends_with(".adb") && !owned {
                self.inner.vfs.remove(&self.inner.dir.join(&name))?;
                removed = true;
            }
        }
        if removed {
            self.inner.vfs.sync_dir(&self.inner.dir)?;
        }
        Ok(())
    }

    /// The checkpoint thread, and in `Background` sync mode a separate
    /// flusher so that a long checkpoint never delays the 100 ms fsync.
    fn start_background(&self) {
        let slow = Duration::from_millis(journal_background_flush_ms);
        let mut jobs: Vec<(&str, BackgroundJob, Duration)> = vec![
            ("arbordb-checkpoint", checkpoint_if_due, slow),
            ("arbordb-evict", Engine::evict_to_target, Duration::from_millis(eviction_tick_ms)),
        ];
        if self.inner.config.merge_runs_in_background {
            let tick = Duration::from_millis(run_merge_tick_ms);
            jobs.push(("arbordb-merge", merge_short_runs_due, tick));
            jobs.push(("arbordb-merge-long", merge_long_runs_due, tick));
        }
        if self.inner.config.sync_mode == SyncMode::Background {
            jobs.push(("arbordb-flush", flush_journal, slow));
        }
        let mut handles = self.background.lock().unwrap();
        for (name, job, tick) in jobs {
            let weak: Weak<Inner> = Arc::downgrade(&self.inner);
            let stop = self.inner.stop.clone();
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || background_loop(weak, stop, job, tick))
                .expect("spawn background thread");
            handles.push(handle);
        }
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Bytes of `table`'s file, read through the engine's `Vfs` (so a test
    /// backend sees it, like every other file access).
    pub fn table_file_bytes(&self, table: &Table) -> Result<u64> {
        let path = self.inner.dir.join(table_file_name(table.id()));
        self.inner.vfs.file_len(&path)
    }

    fn check_writable(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed);
        }
        if let Some(why) = &*self.inner.poisoned.lock().unwrap() {
            return Err(StorageError::Poisoned { reason: why.clone() });
        }
        Ok(())
    }

    /// The first reason is kept and logged as the poisoning; later ones
    /// (often the same failure seen again further up) are logged only.
    fn poison(&self, why: String) {
        let first = {
            let mut p = self.inner.poisoned.lock().unwrap();
            let first = p.is_none();
            if first {
                *p = Some(why.clone());
            }
            first
        };
        if first {
            tracing::error!(reason = %why, "storage engine poisoned");
        } else {
            tracing::warn!(reason = %why, "a failure in a poisoned storage engine");
        }
    }

    fn poison_merge(&self, e: &StorageError) {
        self.poison(format!("a merge of runs failed: {e}"));
    }

    /// Append a journal record and publish the tables it changed at its
    /// sequence number, as one step in the publish order (`committed` runs
    /// in between, for a transaction to take its commit timestamp).
    fn journal_and_publish(
        &self,
        payload: &[u8],
        committed: impl FnOnce(u64),
        changed: impl IntoIterator<Item = (u32, Option<Arc<crate::page::Node>>)>,
    ) -> Result<u64> {
        let _publish = self.inner.txns.publish.lock().unwrap();
        let seq = self.inner.journal.append(payload)?;
        committed(seq);
        self.inner.txns.publish(seq, changed);
        Ok(seq)
    }

    /// Bytes old versions may pin, and a write set may need, in the cache.
    fn pinned_limit(&self) -> usize {
        self.inner.meter.capacity() / 100 * self.inner.config.cache_pinned_max_percent
    }

    /// Wait for record `seq` as the sync mode asks (`want_sync: false`
    /// waits only for the write); a failure poisons.
    fn make_durable(&self, seq: u64, want_sync: bool) -> Result<()> {
        let sync = want_sync && self.inner.config.sync_mode == SyncMode::Fsync;
        self.inner.journal.wait(seq, sync).inspect_err(|e| self.poison(format!("journal: {e}")))
    }

    pub fn create_table(&self, name: &str, config: TableConfig) -> Result<Table> {
        self.check_writable()?;
        config.validate()?;
        if name.is_empty() || name.len() > table_name_max_bytes {
            return Err(StorageError::InvalidConfig(format!("table names are 1 to {table_name_max_bytes} bytes")));
        }
        let (table, seq) = {
            let _gate = self.inner.gate.read().unwrap();
            let mut catalog = self.inner.catalog.write().unwrap();
            if catalog.by_name.contains_key(name) {
                return Err(StorageError::TableExists(name.to_string()));
            }
            let id = catalog.next_table_id;
            let env = TableEnv {
                vfs: &*self.inner.vfs,
                dir: &self.inner.dir,
                counters: &self.inner.counters,
                meter: &self.inner.meter,
                memtable_max: memtable_max(&self.inner.config),
            };
            let table = Self::new_table(&env, catalog.engine_id, id, name, config)?;
            let mut payload = vec![OP_CREATE];
            payload.extend_from_slice(&id.to_le_bytes());
            payload.extend_from_slice(&(name.len() as u16).to_le_bytes());
            payload.extend_from_slice(name.as_bytes());
            config.encode(&mut payload);
            let seq = self.journal_and_publish(&payload, |_| {}, [(id, Some(table.0.tree.snapshot()))])?;
            catalog.next_table_id += 1;
            catalog.by_id.insert(id, table.clone());
            catalog.by_name.insert(name.to_string(), table.clone());
            (table, seq)
        };
        self.make_durable(seq, true)?;
        Ok(table)
    }

    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let seq = {
            let _gate = self.inner.gate.read().unwrap();
            let mut catalog = self.inner.catalog.write().unwrap();
            let table =
                catalog.by_name.get(name).cloned().ok_or_else(|| StorageError::TableNotFound(name.to_string()))?;
            let _writer = table.0.writer.lock().unwrap();
            let mut payload = vec![OP_DROP];
            payload.extend_from_slice(&table.id().to_le_bytes());
            let seq = self.journal_and_publish(&payload, |_| {}, [(table.id(), None)])?;
            Self::forget_table(&mut catalog, &table);
            catalog.dropped_files.push(self.inner.dir.join(table_file_name(table.id())));
            seq
        };
        self.make_durable(seq, true)
    }

    pub fn table(&self, name: &str) -> Result<Table> {
        self.inner
            .catalog
            .read()
            .unwrap()
            .by_name
            .get(name)
            .cloned()
            .ok_or_else(|| StorageError::TableNotFound(name.to_string()))
    }

    pub fn table_names(&self) -> Vec<String> {
        self.inner.catalog.read().unwrap().by_name.keys().cloned().collect()
    }

    /// `TableConfig::default()` with the configured
    /// [`Config::table_compressor`].
    pub fn default_table_config(&self) -> TableConfig {
        TableConfig { compressor: self.inner.config.table_compressor, ..TableConfig::default() }
    }

    /// Every table with its file's name (in the data directory) and the
    /// bytes written to that file since open, by block kind.
    pub fn table_io(&self) -> Vec<TableIoEntry> {
        let catalog = self.inner.catalog.read().unwrap();
        let entry = |t: &Table| TableIoEntry {
            name: t.name().to_string(),
            file: table_file_name(t.id()),
            io: t.0.tree.io.snapshot(),
        };
        catalog.by_name.values().map(entry).collect()
    }

    /// Bytes written to the metadata table's file (`METADATA_FILE`) since
    /// open, by block kind.
    pub fn metadata_io(&self) -> TableIoStats {
        self.inner.meta.io.snapshot()
    }

    /// Read the newest committed value of `key`.
    pub fn get(&self, table: &Table, key: &[u8]) -> Result<Option<Bytes>> {
        table.check(self.inner.id)?;
        let found = self.inner.txns.with_published_root(table.id(), |root| table.0.tree.get_in(root, key));
        found.unwrap_or_else(|| Err(StorageError::TableNotFound(table.name().to_string())))
    }

    /// Read the newest committed value of `key` and lend it to `f`.
    pub fn get_with<R>(&self, table: &Table, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        table.check(self.inner.id)?;
        let found = self.inner.txns.with_published_root(table.id(), |root| table.0.tree.get_in_with(root, key, f));
        found.unwrap_or_else(|| Err(StorageError::TableNotFound(table.name().to_string())))
    }

    /// A cursor outside any transaction: each seek, `first` and `last` takes
    /// the newest committed version; `next` and `prev` stay on it.
    pub fn cursor(&self, table: &Table) -> Result<Cursor> {
        table.check(self.inner.id)?;
        let (txns, id) = (self.inner.txns.clone(), table.id());
        let source: crate::btree::RootSource =
            Arc::new(move || txns.published_root(id).unwrap_or_else(|| Arc::new(crate::page::Node::empty_leaf())));
        Ok(Cursor::with_roots(table.0.tree.clone(), Some(source)))
    }

    pub(crate) fn txns(&self) -> &TxnManager {
        &self.inner.txns
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed);
        }
        Ok(())
    }

    pub(crate) fn check_table(&self, t: &Table) -> Result<()> {
        t.check(self.inner.id)
    }

    pub fn put(&self, table: &Table, key: &[u8], value: &[u8]) -> Result<u64> {
        let mut b = WriteBatch::new();
        b.put(table, key, value)?;
        self.write(&b)
    }

    pub fn delete(&self, table: &Table, key: &[u8]) -> Result<u64> {
        let mut b = WriteBatch::new();
        b.delete(table, key)?;
        self.write(&b)
    }

    /// Commit a batch atomically as its own transaction; returns its commit
    /// timestamp (journal sequence number). With `SyncMode::Fsync` the batch
    /// is durable when this returns. Fails with `WriteConflict`, changing
    /// nothing, when an open transaction has written one of its keys.
    pub fn write(&self, batch: &WriteBatch) -> Result<u64> {
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(self.inner.journal.next_seq().saturating_sub(1));
        }
        self.commit_batch_with(batch, true, |_| {
            // Under the writer locks nothing can commit to these tables
            // before us, so a snapshot taken now sees every earlier commit.
            let me = txn::begin_plain(self);
            match txn::claim_batch(batch, &me) {
                Ok(()) => Ok(me),
                Err(e) => {
                    txn::finish(self, &me, None);
                    bump(&self.inner.counters.write_conflicts, 1);
                    Err(e)
                }
            }
        })
    }

    /// Commit a transaction's write set (its keys already claimed).
    pub(crate) fn commit_batch(&self, req: CommitRequest) -> Result<u64> {
        self.check_writable()?;
        let me = req.me.clone();
        self.commit_batch_with(req.batch, req.sync, |engine| {
            if me.ssi.tracked {
                txn::ssi_prepare(engine, &me)?;
            }
            Ok(me.clone())
        })
    }

    /// The commit path: under the gate and the tables' writer locks, `start`
    /// yields the committing transaction; its writes are applied to the
    /// trees, then journaled and published at one timestamp, then its claims
    /// become commits. Waits for durability after the locks are gone.
    fn commit_batch_with(
        &self,
        batch: &WriteBatch,
        sync: bool,
        start: impl FnOnce(&Engine) -> Result<Arc<txn::TxnShared>>,
    ) -> Result<u64> {
        self.help_evict();
        self.wait_for_merges(batch);
        if batch.payload.len() as u64 > journal_record_max_bytes {
            return Err(StorageError::InvalidConfig(format!(
                "a transaction of {} bytes exceeds the journal record limit of {journal_record_max_bytes} bytes",
                batch.payload.len()
            )));
        }
        let ops: Vec<(&Table, JournalOp)> = batch
            .ops
            .iter()
            .map(|(t, at)| {
                (t, decode_op(&mut Reader::new(&batch.payload[*at..])).expect("batch payload is well-formed"))
            })
            .collect();
        // Load the pages the batch changes, and refuse a batch whose pages
        // (each held twice while a snapshot holds the old copy) would take
        // more than the pinned share of the cache: as soon as they do, so
        // a refused batch reads no more than that share.
        let mut leaves = std::collections::HashSet::new();
        let mut need = 0usize;
        let limit = self.pinned_limit();
        let published = self.inner.txns.published();
        for (t, op) in &ops {
            t.check(self.inner.id)?;
            if let JournalOp::Put { key, .. } | JournalOp::Delete { key, .. } = op {
                let root = match published.roots.get(&t.id()) {
                    Some(root) => root.clone(),
                    None => t.0.tree.snapshot(),
                };
                let (leaf, bytes) = t.0.tree.prefetch(&root, key)?;
                if leaves.insert(leaf) {
                    need += 2 * bytes;
                }
                if need > limit {
                    return Err(StorageError::TransactionTooLarge { bytes: need, limit });
                }
            }
        }
        let mut tables: Vec<&Table> = ops.iter().map(|(t, _)| *t).collect();
        tables.sort_by_key(|t| t.id());
        tables.dedup_by_key(|t| t.id());
        let (seq, me) = {
            let _gate = self.inner.gate.read().unwrap();
            let _writers: Vec<_> = tables.iter().map(|t| t.0.writer.lock().unwrap()).collect();
            for t in &tables {
                t.check(self.inner.id)?;
            }
            let me = start(self)?;
            if let Err(e) = self.apply_ops(&ops) {
                txn::finish(self, &me, None);
                self.poison(format!("a commit failed to apply: {e}"));
                return Err(e);
            }
            let published = self.journal_and_publish(
                &batch.payload,
                |seq| txn::mark_committed(&me, seq),
                tables.iter().map(|t| (t.id(), Some(t.0.tree.snapshot()))),
            );
            let seq = match published {
                Ok(seq) => seq,
                Err(e) => {
                    txn::finish(self, &me, None);
                    self.poison(format!("a commit failed to journal after it was applied: {e}"));
                    return Err(e);
                }
            };
            if me.ssi.tracked {
                // The event comes after publication (see `SsiState::dangerous`).
                me.ssi.committed(self.inner.txns.next_event());
            }
            txn::stamp_batch(self, batch);
            (seq, me)
        };
        txn::finish(self, &me, Some(seq));
        self.make_durable(seq, sync)?;
        bump(&self.inner.counters.commits, 1);
        Ok(seq)
    }

    /// Apply runs of consecutive ops on one table with one tree call each.
    fn apply_ops(&self, ops: &[(&Table, JournalOp)]) -> Result<()> {
        let mut start = 0;
        while start < ops.len() {
            let id = ops[start].0.id();
            let end = start + ops[start..].iter().take_while(|(t, _)| t.id() == id).count();
            ops[start].0 .0.tree.apply(ops[start..end].iter().map(|(_, op)| match op {
                JournalOp::Put { key, value, .. } => (*key, Some(*value)),
                JournalOp::Delete { key, .. } => (*key, None),
                _ => unreachable!("batches hold only puts and deletes"),
            }))?;
            start = end;
        }
        Ok(())
    }

    /// Freeze a write-optimized table's memtable into a run now (`runs.rs`);
    /// `false` when it is empty or the table is a B+tree.
    pub fn freeze_memtable(&self, table: &Table) -> Result<bool> {
        self.check_writable()?;
        table.check(self.inner.id)?;
        let _writer = table.0.writer.lock().unwrap();
        table.0.tree.freeze_memtable()
    }

    /// A write-optimized table's runs, newest first (the memtable first):
    /// each one's bytes of entries. A B+tree has none.
    pub fn table_runs(&self, table: &Table) -> Result<Vec<u64>> {
        table.check(self.inner.id)?;
        let root = table.0.tree.snapshot();
        Ok(match &root.body {
            crate::page::Body::Runs(runs) => runs.runs.iter().map(|r| r.bytes).collect(),
            _ => Vec::new(),
        })
    }

    /// Merge some of a write-optimized table's runs if a merge is due
    /// (`runs.rs`), and free runs earlier merges replaced once no version
    /// reads them; `true` when a merge was installed. A failure poisons
    /// the engine.
    pub fn merge_runs(&self, table: &Table) -> Result<bool> {
        self.merge_runs_in(table, Lane::Any)
    }

    /// [`Engine::merge_runs`], taking only the merges of `lane` (each
    /// background merger has one).
    fn merge_runs_in(&self, table: &Table, lane: Lane) -> Result<bool> {
        self.check_writable()?;
        table.check(self.inner.id)?;
        self.merge_taken(table, Take::Due(lane)).inspect_err(|e| self.poison_merge(e))
    }

    /// Merge every frozen run of a write-optimized table into one if an
    /// idle merge is due (`Tree::idle_merge_due`); `true` when one was
    /// installed. The background merger calls it. A failure to write the
    /// merged run leaves the table as it was (tried again after the next
    /// quiet time); one to install it poisons the engine.
    pub fn merge_idle_runs(&self, table: &Table) -> Result<bool> {
        self.check_writable()?;
        table.check(self.inner.id)?;
        let tree = &table.0.tree;
        if !tree.idle_merge_due() {
            return Ok(false);
        }
        let merged = self.merge_taken(table, Take::Idle).inspect_err(|_| tree.quiet.restart())?;
        bump(&self.inner.counters.runs_idle_merged, u64::from(merged));
        Ok(merged)
    }

    /// Merge all of a write-optimized table's runs into one (the memtable
    /// frozen first, merges in flight waited for), dropping tombstones;
    /// `false` if it had one already.
    pub fn compact_runs(&self, table: &Table) -> Result<bool> {
        self.freeze_memtable(table)?;
        self.merge_taken(table, Take::All).inspect_err(|e| self.poison_merge(e))
    }

    /// Merge the runs `take` takes, if any; `true` when the merged run was
    /// installed. Building it reads and writes without locks (its blocks
    /// unnamed until installed, freed if it fails or the engine stops);
    /// a failure to install it, or to free replaced runs, poisons the engine.
    fn merge_taken(&self, table: &Table, take: Take) -> Result<bool> {
        let tree = &table.0.tree;
        self.reap_runs(table).inspect_err(|e| self.poison_merge(e))?;
        let Some(taken) = tree.take_merge(take) else { return Ok(false) };
        self.merge_these(table, taken)
    }

    /// `merge_taken` once the runs are taken.
    fn merge_these(&self, table: &Table, taken: crate::runs::Taken<'_>) -> Result<bool> {
        let tree = &table.0.tree;
        let stop = &self.inner.stop.0;
        let Some(built) = tree.build_merged(&taken.inputs, taken.bottom, &|| *stop.lock().unwrap())? else {
            return Ok(false);
        };
        {
            let _gate = self.inner.gate.read().unwrap();
            let _writer = table.0.writer.lock().unwrap();
            if table.check(self.inner.id).is_err() {
                // Dropped meanwhile: its file goes, blocks and all.
                return Ok(false);
            }
            tree.install_merged(&taken.inputs, built).inspect_err(|e| self.poison_merge(e))?;
            // The same contents: readers take the new version at once, and
            // the old epoch ends with its last reader.
            let _publish = self.inner.txns.publish.lock().unwrap();
            let ts = self.inner.txns.published_ts();
            self.inner.txns.publish(ts, [(table.id(), Some(tree.snapshot()))]);
        }
        drop(taken);
        self.reap_runs(table).inspect_err(|e| self.poison_merge(e))?;
        Ok(true)
    }

    /// A write stall: while a write-optimized table of `batch` has more
    /// frozen runs than `limits::runs_frozen_stall`, wait (holding no
    /// lock) for the background merger, up to `limits::merge_stall_max_ms`.
    fn wait_for_merges(&self, batch: &WriteBatch) {
        if !self.inner.config.merge_runs_in_background {
            return;
        }
        let mut tables: Vec<&Table> =
            batch.ops.iter().map(|(t, _)| t).filter(|t| t.config().format == TableFormat::WriteOptimized).collect();
        if tables.is_empty() {
            return;
        }
        tables.sort_by_key(|t| t.id());
        tables.dedup_by_key(|t| t.id());
        // (Not while merges are paused for old readers: waiting would not help.)
        let behind = || tables.iter().any(|t| t.0.tree.runs_frozen() > runs_frozen_stall && !t.0.tree.merges_paused());
        let started = Instant::now();
        while behind() && started.elapsed() < Duration::from_millis(merge_stall_max_ms) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let waited = started.elapsed();
        if waited > Duration::from_micros(100) {
            bump(&self.inner.counters.merge_stall_us, waited.as_micros() as u64);
        }
    }

    /// Free a table's retired runs that no version reads (`runs.rs`
    /// invariant 5: under the gate, against checkpoint snapshots).
    fn reap_runs(&self, table: &Table) -> Result<()> {
        let _gate = self.inner.gate.read().unwrap();
        let _writer = table.0.writer.lock().unwrap();
        table.0.tree.reap_retired()
    }

    /// Write a checkpoint now: every table's dirty pages, copy-on-write,
    /// then the root file. Returns the checkpoint's journal position.
    pub fn checkpoint(&self) -> Result<u64> {
        self.check_writable()?;
        let started = Instant::now();
        let mut ck = self.inner.checkpoint.lock().unwrap();
        // Snapshot (invariant 1).
        let (snap, dropped_files, ckpt_seq, next_table_id) = {
            let _gate = self.inner.gate.write().unwrap();
            // Records below the snapshot end in the files before this one.
            self.inner.journal.rotate()?;
            let mut catalog = self.inner.catalog.write().unwrap();
            let mut snap = Vec::new();
            for t in catalog.by_name.values() {
                let root = t.0.tree.snapshot();
                let last = *t.0.last_checkpoint.lock().unwrap();
                let clean = matches!(last, Some(c) if root.disk.addr() == Some(c.root))
                    && t.0.tree.bf.extents().discard.is_empty();
                if !clean {
                    if let Some(c) = last {
                        t.0.tree.bf.free(c.extents);
                    }
                    t.0.tree.bf.checkpoint_begin();
                    t.0.checkpointing.store(true, Ordering::Release);
                }
                // Consistent with the root: merges install under the gate.
                let retired = if clean { Vec::new() } else { t.0.tree.retired_runs() };
                snap.push(Snap { table: t.clone(), root, clean, retired });
            }
            (snap, std::mem::take(&mut catalog.dropped_files), self.inner.journal.next_seq(), catalog.next_table_id)
        };
        let mut packable = Vec::new();
        let result = self.write_checkpoint(&mut ck, &snap, ckpt_seq, next_table_id, &mut packable);
        match result {
            Ok(()) => {
                // The snapshot goes before packing, so a slot only it held
                // is not packed.
                drop(snap);
                for path in &dropped_files {
                    if self.inner.vfs.exists(path) {
                        self.inner.vfs.remove(path)?;
                    }
                }
                self.inner.journal.remove_before(ckpt_seq)?;
                let us = started.elapsed().as_micros() as u64;
                self.inner.counters.checkpoint_last_duration_us.store(us, Ordering::Relaxed);
                bump(&self.inner.counters.checkpoint_total_duration_us, us);
                bump(&self.inner.counters.checkpoints, 1);
                ck.ckpt_seq = ckpt_seq;
                ck.journal_bytes_at = self.inner.journal.bytes_total();
                ck.at = Instant::now();
                drop(ck);
                for (t, leaves) in packable {
                    t.0.tree.pack_written(leaves, || t.0.writer.lock().unwrap());
                }
                Ok(ckpt_seq)
            }
            Err(e) => {
                for Snap { table: t, clean, .. } in &snap {
                    if !clean {
                        t.0.tree.bf.checkpoint_abandoned();
                        t.0.checkpointing.store(false, Ordering::Release);
                    }
                }
                self.inner.catalog.write().unwrap().dropped_files.extend(dropped_files);
                self.poison(format!("checkpoint failed: {e}"));
                Err(e)
            }
        }
    }

    fn write_checkpoint(
        &self,
        ck: &mut CheckpointState,
        snap: &[Snap],
        ckpt_seq: u64,
        next_table_id: u32,
        packable: &mut Vec<(Table, crate::btree::Written)>,
    ) -> Result<()> {
        let mut metas: Vec<(String, TableMeta)> = Vec::with_capacity(snap.len());
        let mut written = Vec::new();
        for Snap { table: t, root, clean, retired } in snap {
            let checkpoint = if *clean {
                t.0.last_checkpoint.lock().unwrap().expect("a clean table has a checkpoint")
            } else {
                let bf = &t.0.tree.bf;
                let mut leaves = Vec::new();
                let root = t.0.tree.write_dirty_noting(root, retired, &mut leaves)?;
                packable.push((t.clone(), leaves));
                let extents = bf.write_extent_list()?;
                bump(&self.inner.counters.extent_list_bytes_written, extents.size as u64);
                bump(&t.0.tree.io.extent_list, extents.size as u64);
                t.0.checkpointing.store(false, Ordering::Release);
                bf.sync()?;
                written.push((t.clone(), TableCheckpoint { root, extents }));
                TableCheckpoint { root, extents }
            };
            metas.push((t.name().to_string(), TableMeta { id: t.id(), config: t.config(), checkpoint }));
        }
        // The metadata table: rewrite what changed, drop what is gone.
        let meta = &self.inner.meta;
        let mut stale = Vec::new();
        let existing = self.meta_entries()?;
        for name in existing.keys() {
            if !metas.iter().any(|(n, _)| n == name) {
                stale.push(name.clone());
            }
        }
        let encoded: Vec<(String, Vec<u8>)> = metas.iter().map(|(n, m)| (n.clone(), m.encode())).collect();
        let changed: Vec<&(String, Vec<u8>)> = encoded.iter().filter(|(n, v)| existing.get(n) != Some(v)).collect();
        meta.apply(
            changed
                .iter()
                .map(|(n, v)| (n.as_bytes(), Some(v.as_slice())))
                .chain(stale.iter().map(|n| (n.as_bytes(), None))),
        )?;
        meta.bf.free(ck.meta_extents);
        meta.bf.checkpoint_begin();
        // Bytes of the metadata table count apart from table data (only
        // checkpoints, one at a time, write the metadata table).
        let before = meta.io.snapshot().total_bytes();
        let meta_root = meta.write_dirty(&meta.snapshot())?;
        let meta_bytes = meta.io.snapshot().total_bytes() - before;
        self.inner.counters.data_bytes_written.fetch_sub(meta_bytes, Ordering::Relaxed);
        bump(&self.inner.counters.metadata_bytes_written, meta_bytes);
        let meta_extents = meta.bf.write_extent_list()?;
        bump(&self.inner.counters.extent_list_bytes_written, meta_extents.size as u64);
        bump(&meta.io.extent_list, meta_extents.size as u64);
        meta.bf.sync()?;
        let record = RootRecord {
            generation: ck.generation + 1,
            ckpt_seq,
            next_table_id,
            metadata: TableCheckpoint { root: meta_root, extents: meta_extents },
        };
        bump(&self.inner.counters.root_file_bytes_written, ROOT_BYTES as u64);
        if let Err(e) = Self::write_root_file(&*self.inner.vfs, &self.inner.dir, &record) {
            meta.bf.checkpoint_abandoned();
            return Err(e);
        }
        ck.generation += 1;
        ck.meta_extents = meta_extents;
        // Durable: release what only the previous checkpoint referenced.
        let punch = self.inner.config.punch_every_blocks;
        bump(&self.inner.counters.blocks_punched, meta.bf.checkpoint_durable(punch)?);
        for (t, c) in written {
            *t.0.last_checkpoint.lock().unwrap() = Some(c);
            bump(&self.inner.counters.blocks_punched, t.0.tree.bf.checkpoint_durable(punch)?);
        }
        Ok(())
    }

    fn meta_entries(&self) -> Result<BTreeMap<String, Vec<u8>>> {
        let mut out = BTreeMap::new();
        let root = self.inner.meta.snapshot();
        let mut stack = vec![root];
        while let Some(node) = stack.pop() {
            match &node.body {
                crate::page::Body::Leaf(l) => {
                    for (k, v) in &l.entries {
                        out.insert(String::from_utf8_lossy(k).into_owned(), self.inner.meta.value_bytes(v)?.to_vec());
                    }
                }
                crate::page::Body::Internal(int) => {
                    for c in &int.children {
                        stack.push(self.inner.meta.load_child(c)?.clone());
                    }
                }
                crate::page::Body::Runs(_) => return Err(self.inner.meta.misplaced_runs()),
            }
        }
        Ok(out)
    }

    /// Whether a periodic checkpoint is due.
    fn checkpoint_due(&self) -> bool {
        let ck = self.inner.checkpoint.lock().unwrap();
        let by_time = self.inner.config.checkpoint_interval.is_some_and(|d| ck.at.elapsed() >= d);
        let by_volume =
            self.inner.journal.bytes_total() - ck.journal_bytes_at >= self.inner.config.checkpoint_journal_bytes;
        by_time || by_volume
    }

    /// Whether the engine was opened asking for direct I/O
    /// ([`Config::direct_io`]; `open_with_vfs` uses the file system given).
    pub fn direct_io(&self) -> bool {
        self.inner.config.direct_io
    }

    /// Counters, plus the cache gauges of this moment (clean and dirty
    /// bytes come from a walk over the pages in memory).
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        let m = &self.inner.meter;
        let (mut clean, mut dirty, mut internal, mut versions, mut merging) = (0u64, 0u64, 0u64, 0u64, 0u64);
        let tables: Vec<Table> = self.inner.catalog.read().unwrap().by_id.values().cloned().collect();
        for t in tables {
            let live = t.0.tree.live_bytes();
            clean += live.clean as u64;
            dirty += live.dirty as u64;
            internal += live.internal as u64;
            versions += t.0.versions.lock().unwrap().len() as u64;
            merging += t.0.tree.merging.len() as u64;
        }
        c.runs_merging.store(merging, Ordering::Relaxed);
        c.key_versions.store(versions, Ordering::Relaxed);
        c.ssi_tracked_txns.store(self.inner.txns.ssi.lock().unwrap().tracked() as u64, Ordering::Relaxed);
        c.ssi_read_marks.store(self.inner.txns.read_marks.load(Ordering::Relaxed) as u64, Ordering::Relaxed);
        c.cache_capacity_bytes.store(m.capacity() as u64, Ordering::Relaxed);
        c.cache_bytes.store(m.bytes() as u64, Ordering::Relaxed);
        c.cache_peak_bytes.store(m.peak() as u64, Ordering::Relaxed);
        c.cache_pinned_bytes.store(m.pinned() as u64, Ordering::Relaxed);
        c.cache_clean_bytes.store(clean, Ordering::Relaxed);
        c.cache_dirty_bytes.store(dirty, Ordering::Relaxed);
        c.cache_internal_bytes.store(internal, Ordering::Relaxed);
        c.snapshot()
    }

    /// The cache meter (bytes in memory, pinned, peak).
    pub fn cache(&self) -> &CacheMeter {
        &self.inner.meter
    }

    /// One eviction pass: tables in turn, each from its clock hand, until
    /// about `budget` bytes are gone or every table was visited once.
    /// Tables whose writer is busy are skipped; a table a checkpoint is
    /// writing gives up clean pages only. Returns the bytes evicted.
    pub fn evict(&self, budget: usize) -> Result<usize> {
        let mut st = self.inner.eviction.lock().unwrap();
        let tables: Vec<Table> = self.inner.catalog.read().unwrap().by_id.values().cloned().collect();
        let Ok(_gate) = self.inner.gate.try_read() else { return Ok(0) };
        let mut freed = 0;
        // Each table once per pass, from where the last pass stopped (the
        // start is fixed before the loop moves `next_table`: a start that
        // moved with it skipped tables, and a pass could then never reach
        // the largest one while the cache grew without bound).
        let first = st.next_table;
        for k in 0..tables.len() {
            if freed >= budget {
                break;
            }
            let at = (first + k) % tables.len();
            let t = &tables[at];
            let Ok(_writer) = t.0.writer.try_lock() else {
                bump(&self.inner.counters.eviction_tables_busy, 1);
                continue;
            };
            let dirty = !t.0.checkpointing.load(Ordering::Acquire) && self.poisoned().is_none();
            let hand = st.hands.entry(t.id()).or_default();
            let done = t.0.tree.evict(budget - freed, dirty, hand).inspect_err(|e| {
                self.poison(format!("eviction failed to write a page: {e}"));
            })?;
            freed += done.bytes;
            st.next_table = if !hand.is_empty() {
                // This table still has candidates: start here next time.
                at
            } else {
                (at + 1) % tables.len()
            };
        }
        bump(&self.inner.counters.eviction_passes, 1);
        Ok(freed)
    }

    /// Past the trigger (and the backoff), an application thread evicts
    /// before going on.
    pub(crate) fn help_evict(&self) {
        let m = &self.inner.meter;
        let bytes = m.bytes();
        if bytes > m.trigger() && bytes > self.inner.eviction_backoff.load(Ordering::Relaxed) {
            bump(&self.inner.counters.eviction_app_thread_passes, 1);
            let _ = self.evict(bytes - m.target());
            let after = m.bytes();
            let backoff = if after > m.trigger() { after + m.capacity() / eviction_backoff_divisor } else { 0 };
            self.inner.eviction_backoff.store(backoff, Ordering::Relaxed);
        }
    }

    /// Background eviction: bring the cache under the target, and roll back
    /// the oldest transaction if snapshots pin more than their share.
    fn evict_to_target(&self) {
        let m = &self.inner.meter;
        // Two passes short of their budget walked every table twice (a
        // leaf read since the first is spared once): the rest waits for
        // the next tick.
        let mut short = 0;
        for _ in 0..64 {
            let bytes = m.bytes();
            if bytes <= m.target() || short == 2 {
                break;
            }
            let budget = bytes - m.target() + m.capacity() / 20;
            match self.evict(budget) {
                Ok(0) | Err(_) => break,
                Ok(freed) => short += usize::from(freed < budget),
            }
        }
        if m.bytes() <= m.trigger() {
            // Under the trigger again: application threads help from the
            // trigger on, as before the pass that raised the backoff.
            self.inner.eviction_backoff.store(0, Ordering::Relaxed);
        }
        let limit = self.pinned_limit();
        if m.pinned() > limit && self.inner.txns.doom_oldest(m.pinned(), limit) {
            bump(&self.inner.counters.txn_cache_aborts, 1);
        }
    }

    /// The commit timestamp of the newest published version. Every commit
    /// publishes at a greater one (its journal sequence number), so a
    /// reader that finds it unchanged between two moments saw no commit
    /// in between: what it read then is one version.
    pub fn published_ts(&self) -> u64 {
        self.inner.txns.published_ts()
    }

    /// Sequence number of the last journal record appended (every commit
    /// so far is at or below it), if any.
    pub fn last_journal_seq(&self) -> Option<u64> {
        self.inner.journal.next_seq().checked_sub(1)
    }

    /// Make every commit so far durable (as the sync mode asks): one
    /// group-commit fsync for commits made with `skip_journal_sync`, as a
    /// command of many writes acknowledges them all at its end.
    pub fn sync_journal(&self) -> Result<()> {
        self.check_open()?;
        match self.inner.journal.next_seq().checked_sub(1) {
            Some(last) => self.make_durable(last, true),
            None => Ok(()),
        }
    }

    /// Number of journal files on disk.
    pub fn journal_file_count(&self) -> usize {
        self.inner.journal.file_count()
    }

    /// Why the engine refuses writes, if it does.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.poisoned.lock().unwrap().clone()
    }

    /// Stop background work, sync the journal and write a final checkpoint.
    /// A poisoned engine closes without a checkpoint (recovery replays the journal).
    pub fn close(self) -> Result<()> {
        self.stop_background();
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if self.poisoned().is_some() {
            return Ok(());
        }
        self.inner.journal.sync_all()?;
        self.inner.closed.store(false, Ordering::Release);
        let r = self.checkpoint();
        self.inner.closed.store(true, Ordering::Release);
        r.map(|_| ())
    }

    fn stop_background(&self) {
        {
            let (lock, cv) = &*self.inner.stop;
            *lock.lock().unwrap() = true;
            cv.notify_all();
        }
        for h in std::mem::take(&mut *self.background.lock().unwrap()) {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The last handle a caller holds (background jobs work through
        // handles with their own, empty, thread list): stop and join the
        // background threads first, so that no job keeps the engine, and
        // its directory lock, alive after this drop returns.
        let last_owner = Arc::strong_count(&self.background) == 1
            && self.background.lock().map(|threads| !threads.is_empty()).unwrap_or(false);
        if last_owner {
            self.stop_background();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Last handle gone without close(): keep what was committed (the
        // journal holds it) but skip the checkpoint.
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap() = true;
        cv.notify_all();
        let _ = self.journal.sync_all();
    }
}

type BackgroundJob = fn(&Engine);

/// Run `job` every tick until the engine stops or its last handle is gone.
fn background_loop(weak: Weak<Inner>, stop: Arc<(Mutex<bool>, Condvar)>, job: BackgroundJob, tick: Duration) {
    loop {
        {
            let (lock, cv) = &*stop;
            let stopped = lock.lock().unwrap();
            if *stopped {
                return;
            }
            let (stopped, _) = cv.wait_timeout(stopped, tick).unwrap();
            if *stopped {
                return;
            }
        }
        let Some(inner) = weak.upgrade() else { return };
        let engine = Engine { inner, background: Arc::default() };
        if engine.poisoned().is_some() || engine.inner.closed.load(Ordering::Acquire) {
            continue;
        }
        job(&engine);
    }
}

fn flush_journal(engine: &Engine) {
    if let Err(e) = engine.inner.journal.sync_all() {
        engine.poison(format!("background journal flush: {e}"));
    }
}

/// The short lane's merger: merge write-optimized tables' runs while short
/// merges are due, one merge per table in turn, so a busy table does not
/// starve another.
fn merge_short_runs_due(engine: &Engine) {
    merge_runs_due(engine, &|t| engine.merge_runs_in(t, Lane::Short));
}

/// The long lane's merger: long merges, then the idle merges that are due.
fn merge_long_runs_due(engine: &Engine) {
    merge_runs_due(engine, &|t| engine.merge_runs_in(t, Lane::Long));
    merge_runs_due(engine, &|t| engine.merge_idle_runs(t));
}

/// Run `merge` on every write-optimized table in turn while any merged.
fn merge_runs_due(engine: &Engine, merge: &dyn Fn(&Table) -> Result<bool>) {
    let tables: Vec<Table> = engine.inner.catalog.read().unwrap().by_id.values().cloned().collect();
    let tables: Vec<&Table> = tables.iter().filter(|t| t.config().format == TableFormat::WriteOptimized).collect();
    loop {
        let mut merged = false;
        for t in &tables {
            match merge(t) {
                Ok(m) => merged |= m,
                Err(e) => {
                    tracing::error!(error = %e, table = t.name(), "merging runs failed");
                    return;
                }
            }
        }
        if !merged {
            return;
        }
    }
}

fn checkpoint_if_due(engine: &Engine) {
    if engine.checkpoint_due() {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.checkpoint())) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "periodic checkpoint failed"),
            Err(_) => engine.poison("a periodic checkpoint panicked".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A merge of the oldest runs that comes out empty, while a newer run
    /// holding a tombstone was frozen above them, leaves an empty run as
    /// the oldest: the tombstone never sits in the oldest run (`runs.rs`
    /// invariant 4), and verify finds nothing wrong.
    #[test]
    fn an_empty_bottom_merge_leaves_an_empty_oldest_run_under_newer_ones() {
        let dir = tempfile::tempdir().unwrap();
        let config = || Config {
            merge_runs_in_background: false,
            sync_mode: SyncMode::Off,
            checkpoint_interval: None,
            ..Config::default()
        };
        let engine = Engine::open(dir.path(), config()).unwrap();
        let wo = TableConfig { format: TableFormat::WriteOptimized, ..TableConfig::default() };
        let t = engine.create_table("t", wo).unwrap();
        for i in 0..100u32 {
            engine.put(&t, &i.to_be_bytes(), b"v").unwrap();
        }
        engine.freeze_memtable(&t).unwrap();
        for i in 0..100u32 {
            engine.delete(&t, &i.to_be_bytes()).unwrap();
        }
        engine.freeze_memtable(&t).unwrap();
        let taken = t.0.tree.take_merge(Take::All).unwrap();
        assert!(taken.bottom && taken.inputs.len() == 2);
        // While the merge runs: a tombstone frozen into a run above it.
        engine.delete(&t, b"zz").unwrap();
        engine.freeze_memtable(&t).unwrap();
        assert!(engine.merge_these(&t, taken).unwrap());
        let runs = engine.table_runs(&t).unwrap();
        assert_eq!((runs.len(), runs[2]), (3, 0), "memtable, the tombstone's run, an empty run: {runs:?}");
        assert_eq!(engine.get(&t, b"zz").unwrap(), None);
        engine.close().unwrap();
        let verify = || {
            let report = crate::verify::verify_dir(&OsVfs, dir.path(), &mut |_| {}).unwrap();
            assert!(report.problems.is_empty(), "{:?}", report.problems);
        };
        verify();
        // The empty run comes back from the manifest, and the next merge of
        // the oldest runs takes it with the tombstone's.
        let engine = Engine::open(dir.path(), config()).unwrap();
        let t = engine.table("t").unwrap();
        assert_eq!(engine.table_runs(&t).unwrap()[1..], runs[1..]);
        assert!(engine.merge_runs(&t).unwrap());
        assert_eq!(engine.table_runs(&t).unwrap().len(), 1, "the memtable alone: the tombstone went");
        assert_eq!(engine.get(&t, b"zz").unwrap(), None);
        engine.close().unwrap();
        verify();
    }
}
