//! Engine statistics: atomic counters bumped where things happen, read as a
//! plain snapshot by [`crate::Engine::stats`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Live counters.
        #[derive(Debug, Default)]
        pub struct Counters { $(pub $name: AtomicU64,)* }

        /// A point-in-time copy of [`Counters`].
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct Stats { $(pub $name: u64,)* }

        impl Counters {
            pub fn snapshot(&self) -> Stats {
                Stats { $($name: self.$name.load(Relaxed),)* }
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
    data_bytes_written,
    commits,
    txn_committed,
    txn_rolled_back,
    write_conflicts,
    serialization_failures,
    journal_records,
    journal_bytes_written,
    journal_syncs,
    checkpoints,
    pages_evicted,
    pages_evicted_dirty,
    eviction_passes,
    eviction_app_thread_passes,
    txn_cache_aborts,
    cache_capacity_bytes,
    cache_bytes,
    cache_peak_bytes,
    cache_pinned_bytes,
    cache_dirty_bytes,
    cache_clean_bytes,
    checkpoint_last_duration_us,
    checkpoint_total_duration_us,
);

pub fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}
