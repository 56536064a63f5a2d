//! Engine statistics: atomic counters bumped where things happen, read as a
//! plain snapshot by [`crate::Engine::stats`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Live counters.
        #[derive(Debug, Default)]
        pub struct Counters { $($(#[$doc])* pub $name: AtomicU64,)* }

        /// A point-in-time copy of [`Counters`].
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct Stats { $($(#[$doc])* pub $name: u64,)* }

        impl Counters {
            pub fn snapshot(&self) -> Stats {
                Stats { $($name: self.$name.load(Relaxed),)* }
            }
        }

        impl Stats {
            /// Every counter with its name, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }

    };
}

counters!(
    keys_decoded,
    leaf_pages_read,
    internal_pages_read,
    overflow_blocks_read,
    leaf_pages_written,
    internal_pages_written,
    overflow_blocks_written,
    /// Table files (pages and overflow blocks), the metadata table, extent
    /// lists and root files: bytes written per file kind (journal below).
    data_bytes_written,
    /// The metadata table's pages.
    metadata_bytes_written,
    /// Leaf images written, before compression, and the blocks that hold
    /// them (compressed where that made them smaller, rounded to 4 KiB).
    leaf_image_bytes,
    leaf_block_bytes_written,
    /// Blocks written per page kind, beside leaves (every file).
    internal_block_bytes_written,
    overflow_block_bytes_written,
    extent_list_bytes_written,
    root_file_bytes_written,
    /// Journaled commits (batches and transactions that wrote).
    commits,
    /// Transactions (`Txn`) committed, read-only ones included.
    txn_committed,
    txn_rolled_back,
    write_conflicts,
    serialization_failures,
    journal_records,
    journal_bytes_written,
    journal_syncs,
    /// Reads of an older version that found their block reused and took
    /// the page from memory instead (`Tree::load_child`).
    reads_raced_block_reuse,
    checkpoints,
    /// Free blocks released to the device by punching holes.
    blocks_punched,
    /// Leaves eviction dropped from memory...
    pages_evicted,
    /// ...of which it reconciled (wrote) first.
    pages_evicted_dirty,
    eviction_passes,
    /// Leaves eviction looked at...
    eviction_leaves_visited,
    /// ...spared because they were read since the hand last passed...
    eviction_leaves_spared,
    /// ...kept because they were dirty and could not be written then...
    eviction_leaves_dirty_kept,
    /// ...or because their slot changed under the walk.
    eviction_leaves_raced,
    /// Leaves a checkpoint wrote and then packed in memory (page invariant 5)...
    leaves_packed,
    /// ...and those it could not, changed or evicted meanwhile.
    leaves_pack_raced,
    /// Tables a pass skipped because their writer was busy.
    eviction_tables_busy,
    /// Eviction passes run by application threads past the trigger.
    eviction_app_thread_passes,
    /// Transactions rolled back because snapshots pinned too much.
    txn_cache_aborts,
    /// Write-optimized tables' memtables frozen into runs (`runs.rs`).
    memtables_frozen,
    /// Merges of runs installed, and the runs they replaced whose blocks
    /// were freed once no version could read them.
    runs_merged,
    runs_reaped,
    /// Of `runs_merged`, merges of every frozen run of a table that took
    /// no write for `limits::runs_idle_merge_ms`.
    runs_idle_merged,
    /// Microseconds commits waited for merges (`limits::runs_frozen_stall`).
    merge_stall_us,
    /// Pages read ahead, side by side in one read (`Tree::read_ahead`).
    read_ahead_pages,
    /// Gauges from here to `cache_clean_bytes`, filled in by `Engine::stats`:
    /// the configured cache size...
    cache_capacity_bytes,
    /// ...the estimated bytes of every page in memory...
    cache_bytes,
    /// ...the highest `cache_bytes` seen...
    cache_peak_bytes,
    /// ...the part only snapshots hold (old versions)...
    cache_pinned_bytes,
    /// ...and of the live trees' pages, the dirty and the clean bytes.
    cache_dirty_bytes,
    cache_clean_bytes,
    /// Of the live trees' pages, the internal ones (never evicted).
    cache_internal_bytes,
    /// Gauges too: keys with recent commits, claims or SSI key marks kept
    /// for conflict checks, serializable transactions in SSI's conflict
    /// graph, and SSI key marks held.
    key_versions,
    ssi_tracked_txns,
    ssi_read_marks,
    /// A gauge: frozen runs merges are reading now, over every table.
    runs_merging,
    checkpoint_last_duration_us,
    checkpoint_total_duration_us,
);

/// Bytes written to one table's file, by block kind (block sizes, as
/// allocated). The engine-wide counters above add every table's up.
#[derive(Debug, Default)]
pub struct TableIo {
    pub leaf: AtomicU64,
    pub internal: AtomicU64,
    pub overflow: AtomicU64,
    pub extent_list: AtomicU64,
}

/// A point-in-time copy of one table's [`TableIo`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableIoStats {
    pub leaf_bytes: u64,
    pub internal_bytes: u64,
    pub overflow_bytes: u64,
    pub extent_list_bytes: u64,
}

impl TableIoStats {
    pub fn total_bytes(&self) -> u64 {
        self.leaf_bytes + self.internal_bytes + self.overflow_bytes + self.extent_list_bytes
    }
}

impl TableIo {
    pub fn snapshot(&self) -> TableIoStats {
        TableIoStats {
            leaf_bytes: self.leaf.load(Relaxed),
            internal_bytes: self.internal.load(Relaxed),
            overflow_bytes: self.overflow.load(Relaxed),
            extent_list_bytes: self.extent_list.load(Relaxed),
        }
    }
}

pub fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}
