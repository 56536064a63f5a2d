//! Every resource limit of the storage engine, in one place, units last.
//!
//! Compile-time assertions at the bottom keep the relations between limits true.

/// Allocation unit of every data file: block offsets and sizes are multiples of it.
pub const block_alloc_unit_bytes: u64 = 4096;
/// Alignment of memory, offsets and lengths in direct I/O (`O_DIRECT`):
/// the largest logical block size of the devices we run on.
pub const direct_io_align_bytes: usize = 4096;
/// Size of the header at the start of every block.
pub const block_header_bytes: usize = 16;
/// Largest block the block manager will read or write (an overflow value of
/// 16 MiB plus its header, rounded up, fits).
pub const block_size_max_bytes: u64 = 32 * 1024 * 1024;

/// Default leaf page size: an in-memory leaf splits when its image would exceed it.
pub const leaf_page_default_bytes: u32 = 32 * 1024;
/// Default internal page size.
pub const internal_page_default_bytes: u32 = 4 * 1024;
/// Smallest page size a table may configure.
pub const page_min_bytes: u32 = 512;
/// Largest page size a table may configure.
pub const page_max_bytes: u32 = 4 * 1024 * 1024;

/// Largest key accepted by a put.
pub const key_size_max_bytes: usize = 8 * 1024;
/// Largest value accepted by a put (a 16 MiB document plus slack for headers).
pub const value_size_max_bytes: usize = 16 * 1024 * 1024 + 64 * 1024;

/// Default journal file size before rotation.
pub const journal_file_default_bytes: u64 = 100 * 1024 * 1024;
/// Largest journal record (one committed batch). A batch bigger than this is refused.
pub const journal_record_max_bytes: u64 = 256 * 1024 * 1024;
/// Background flush interval of the `Background` sync mode.
pub const journal_background_flush_ms: u64 = 100;

/// Default checkpoint period.
pub const checkpoint_interval_default_secs: u64 = 60;
/// Default journal volume that triggers a checkpoint.
pub const checkpoint_journal_default_bytes: u64 = 2 * 1024 * 1024 * 1024;

/// Longest table name.
pub const table_name_max_bytes: usize = 1024;
/// Deepest tree the engine will descend before calling it corrupt.
pub const tree_depth_max: usize = 64;

/// Default of `Config::punch_every_blocks`: free blocks are released to
/// the device each time checkpoints have freed this many (the WiredTiger
/// study's TRIM interval).
pub const punch_every_default_blocks: u64 = 20_000;

/// Leaves a checkpoint packs in memory per hold of a table's writer lock.
pub const pack_batch_leaves: usize = 32;

/// Default of `Config::memtable_max_bytes`: a write-optimized table's
/// memtable is frozen into a run once it holds about this much memory...
pub const memtable_default_bytes: usize = 64 * 1024 * 1024;
/// ...or this share of the cache, whichever is less (a memtable is never
/// evicted: a write to it must not read).
pub const memtable_cache_share_percent: usize = 12;
/// The memtable budget a server may be given (`--memtable-kib`).
pub const memtable_config_min_kib: usize = 16;
pub const memtable_config_max_kib: usize = 1 << 22;
/// A write-optimized table keeps at most this many runs (memtable
/// included); a read probes each. Past it the memtable grows instead.
pub const runs_max: usize = 1024;
/// A merge takes the newest frozen runs while their bytes together are at
/// least the next older run's divided by this (runs grow two to four
/// times in size going older, so a table of N bytes in runs of the
/// memtable's M has about log2(N/M) of them)...
pub const run_merge_ratio: u64 = 2;
/// ...and the two newest whatever their sizes once there are more frozen
/// runs than this.
pub const runs_frozen_max: usize = 12;
/// Runs merges replaced that may wait for old readers before merges pause
/// (each waits until no version from before its merge survives; a
/// manifest names them all).
pub const runs_retired_max: usize = 256;
/// A commit to a write-optimized table with more frozen runs than this
/// waits for the background merger (a write stall, as LSM engines have),
/// so reads probe a bounded number of runs...
pub const runs_frozen_stall: usize = 16;
/// ...for at most this long per commit.
pub const merge_stall_max_ms: u64 = 2000;
/// A merge writes its run's leaves in batches of about this many bytes,
/// one write each (a write costs a device round trip, whatever its size).
pub const run_write_batch_bytes: usize = 1 << 20;
/// A cursor walking a whole run reads the next pages that lie side by
/// side on disk, up to this many bytes, with one read.
pub const read_ahead_bytes: u64 = 256 << 10;
/// A merge of at most this many memtable budgets (or an eighth of the
/// table, if more) is short: a thread of its own takes such merges while
/// a long one runs.
pub const short_merge_memtables: u64 = 8;
/// How often the background merger looks for runs to merge.
pub const run_merge_tick_ms: u64 = 50;
/// A write-optimized table that has taken no write for this long has its
/// frozen runs merged into one, so reads probe one run (an idle merge)...
pub const runs_idle_merge_ms: u64 = 1000;
/// ...if the runs newer than the oldest hold at least its bytes over this
/// (an idle merge then rewrites at most this many times their bytes more).
pub const runs_idle_merge_ratio: u64 = 16;

/// Default cache size (pages and the versions snapshots pin).
pub const cache_default_bytes: usize = 512 * 1024 * 1024;
/// Smallest cache size accepted (tiny caches let tests evict constantly).
pub const cache_min_bytes: usize = 64 * 1024;
/// Eviction starts when the cache is this full...
pub const eviction_target_percent: usize = 80;
/// ...and application threads help evict past this.
pub const eviction_trigger_percent: usize = 95;
/// After a pass that left the cache over the trigger, application threads
/// help evict again only once it has grown by the capacity over this.
pub const eviction_backoff_divisor: usize = 32;
/// How often the background evictor looks at the cache.
pub const eviction_tick_ms: u64 = 10;
/// Default share of the cache that old versions pinned by snapshots may
/// hold before the oldest transaction is rolled back.
pub const cache_pinned_default_percent: usize = 50;

/// SIREAD marks (keys and ranges) one transaction keeps in one table before
/// they are coarsened into a single whole-table mark.
pub const ssi_marks_per_table_max: usize = 1024;
/// SIREAD marks kept in all; past this the largest holder is coarsened.
pub const ssi_marks_max: usize = 200_000;
/// SSI forgets finished transactions every this many finishes.
pub const ssi_cleanup_every: u64 = 32;
/// Key-version entries a table keeps before a garbage-collection pass.
pub const key_versions_gc_min: usize = 4096;

const _: () = assert!(block_header_bytes as u64 <= block_alloc_unit_bytes);
const _: () = assert!(block_alloc_unit_bytes.is_multiple_of(direct_io_align_bytes as u64));
const _: () = assert!((value_size_max_bytes as u64) < block_size_max_bytes);
const _: () = assert!(key_size_max_bytes < page_max_bytes as usize);
const _: () = assert!(internal_page_default_bytes >= page_min_bytes);
const _: () = assert!(leaf_page_default_bytes <= page_max_bytes);
const _: () = assert!((value_size_max_bytes as u64) < journal_record_max_bytes);
