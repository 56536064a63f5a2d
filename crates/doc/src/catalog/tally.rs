//! What one operation did to indexes and documents, as mongod's profiler
//! entry and slow-query log line report it: index keys and documents
//! examined by its reads, index keys inserted and deleted by its writes.
//!
//! Invariant: a write's keys are counted once it commits (a write begun
//! again after a conflict counts its last attempt only), and a read's
//! keys and documents as it reads them.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Tally {
    pub keys_examined: AtomicU64,
    pub docs_examined: AtomicU64,
    pub keys_inserted: AtomicU64,
    pub keys_deleted: AtomicU64,
}

/// A tally's counts at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub keys_examined: u64,
    pub docs_examined: u64,
    pub keys_inserted: u64,
    pub keys_deleted: u64,
}

impl Tally {
    pub fn counts(&self) -> Counts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            keys_examined: get(&self.keys_examined),
            docs_examined: get(&self.docs_examined),
            keys_inserted: get(&self.keys_inserted),
            keys_deleted: get(&self.keys_deleted),
        }
    }

    /// Add `c` (what another counter saw, e.g. a cursor's since its last
    /// batch).
    pub fn add(&self, c: Counts) {
        let add = |to: &AtomicU64, n: u64| {
            if n != 0 {
                to.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.keys_examined, c.keys_examined);
        add(&self.docs_examined, c.docs_examined);
        add(&self.keys_inserted, c.keys_inserted);
        add(&self.keys_deleted, c.keys_deleted);
    }

    /// Keys written by one committed write.
    pub fn wrote(&self, (inserted, deleted): (u64, u64)) {
        self.add(Counts { keys_inserted: inserted, keys_deleted: deleted, ..Counts::default() })
    }

    /// Keys and documents one read examined.
    pub fn examined(&self, keys: u64, docs: u64) {
        self.add(Counts { keys_examined: keys, docs_examined: docs, ..Counts::default() })
    }
}

impl std::ops::Sub for Counts {
    type Output = Counts;

    /// What was counted between `rhs` and `self` (a later reading).
    fn sub(self, rhs: Counts) -> Counts {
        Counts {
            keys_examined: self.keys_examined.saturating_sub(rhs.keys_examined),
            docs_examined: self.docs_examined.saturating_sub(rhs.docs_examined),
            keys_inserted: self.keys_inserted.saturating_sub(rhs.keys_inserted),
            keys_deleted: self.keys_deleted.saturating_sub(rhs.keys_deleted),
        }
    }
}
