//! The cache meter: how many bytes of pages are in memory, and how many of
//! them only snapshots hold (pinned).
//!
//! Every node is charged its estimated size (`Node::mem_bytes`) while it
//! lives (page invariant 4). Eviction (`Tree::evict`, driven by the engine)
//! starts when the meter passes the target fill and application threads
//! help past the trigger. Pinned bytes can only be released by the
//! snapshots that hold them; past the configured share of the cache, the
//! oldest transaction is rolled back.

use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

type Helper = Box<dyn Fn() + Send + Sync>;

pub struct CacheMeter {
    capacity: usize,
    bytes: AtomicIsize,
    pinned: AtomicIsize,
    peak: AtomicU64,
    /// What a thread that loads a page past the trigger runs (the engine's
    /// eviction), so that readers help too, not only writers.
    helper: OnceLock<Helper>,
}

impl std::fmt::Debug for CacheMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheMeter({} of {} bytes, {} pinned)", self.bytes(), self.capacity, self.pinned())
    }
}

impl CacheMeter {
    pub fn new(capacity: usize) -> Arc<CacheMeter> {
        Arc::new(CacheMeter {
            capacity,
            bytes: AtomicIsize::new(0),
            pinned: AtomicIsize::new(0),
            peak: AtomicU64::new(0),
            helper: OnceLock::new(),
        })
    }

    /// For trees outside an engine's cache (tools, initialisation).
    pub fn unbounded() -> Arc<CacheMeter> {
        CacheMeter::new(usize::MAX / 2)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed).max(0) as usize
    }

    pub fn pinned(&self) -> usize {
        self.pinned.load(Relaxed).max(0) as usize
    }

    /// Highest `bytes` seen.
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed) as usize
    }

    /// Eviction starts above this.
    pub fn target(&self) -> usize {
        self.capacity / 100 * crate::limits::eviction_target_percent
    }

    /// Application threads help evict above this.
    pub fn trigger(&self) -> usize {
        self.capacity / 100 * crate::limits::eviction_trigger_percent
    }

    pub fn set_helper(&self, helper: Helper) {
        let _ = self.helper.set(helper);
    }

    /// Past the trigger: run the helper (evict) before going on.
    pub fn help_if_over(&self) {
        if self.bytes() > self.trigger() {
            if let Some(h) = self.helper.get() {
                h();
            }
        }
    }

    pub fn adjust(&self, was: usize, now: usize, retired: bool) {
        let delta = now as isize - was as isize;
        let total = self.bytes.fetch_add(delta, Relaxed) + delta;
        if retired {
            self.pinned.fetch_add(delta, Relaxed);
        }
        if total > 0 {
            self.peak.fetch_max(total as u64, Relaxed);
        }
    }

    pub fn release(&self, bytes: usize, retired: bool) {
        self.bytes.fetch_sub(bytes as isize, Relaxed);
        if retired {
            self.pinned.fetch_sub(bytes as isize, Relaxed);
        }
    }

    pub fn pin(&self, bytes: usize) {
        self.pinned.fetch_add(bytes as isize, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up() {
        let m = CacheMeter::new(1000);
        m.adjust(0, 300, false);
        m.adjust(300, 200, false);
        m.adjust(0, 100, false);
        m.pin(100);
        assert_eq!((m.bytes(), m.pinned(), m.peak()), (300, 100, 300));
        m.release(100, true);
        m.release(200, false);
        assert_eq!((m.bytes(), m.pinned()), (0, 0));
        assert_eq!((m.target(), m.trigger()), (800, 950));
    }
}
