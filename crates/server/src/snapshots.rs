//! The snapshot history the server keeps for reads at `readConcern`
//! `{level: "snapshot", atClusterTime}` outside transactions.
//!
//! A read at level snapshot without `atClusterTime` reads the newest
//! snapshot and, once it succeeds, keeps it (an open read-only storage
//! transaction) under its timestamp, which the reply gives back as
//! `atClusterTime`; a later read at that time reads the kept snapshot. So
//! the history kept is the snapshots such reads took, each for
//! `minSnapshotHistoryWindowInSeconds` (mongod's parameter and default,
//! 300) after it was taken, at most `limits::snapshots_kept_max` of them,
//! plus the newest. Any other time answers SnapshotTooOld (239).
//!
//! Invariants:
//! 1. A kept snapshot at `ts` is a read-only transaction whose read
//!    timestamp is `ts`: it sees exactly the commits at or below `ts`.
//! 2. A kept snapshot pins old versions in the cache like any open
//!    transaction. When the cache rolls it back (it is the oldest), it is
//!    forgotten at the next look, so the cache can go on to the next
//!    oldest; a cursor still reading it fails (CachePressure) instead of
//!    reading wrong data.

use crate::error::CommandError;
use crate::limits::snapshots_kept_max;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::{Engine, Txn, TxnOptions};

/// `minSnapshotHistoryWindowInSeconds`' default (mongod's).
pub const HISTORY_WINDOW_SECS_DEFAULT: u64 = 300;

pub struct Snapshots {
    kept: Mutex<BTreeMap<u64, Kept>>,
    /// `minSnapshotHistoryWindowInSeconds`.
    pub window_secs: AtomicU64,
}

struct Kept {
    txn: Arc<Txn>,
    taken: Instant,
}

impl Default for Snapshots {
    fn default() -> Snapshots {
        Snapshots { kept: Mutex::default(), window_secs: AtomicU64::new(HISTORY_WINDOW_SECS_DEFAULT) }
    }
}

impl Snapshots {
    /// The snapshot at `at` (an engine timestamp and the cluster time it
    /// stands for), or the newest one (`None`). A new one is kept only
    /// once its read succeeds ([`Snapshots::keep`]).
    pub fn read_at(&self, engine: &Engine, at: Option<(u64, bson::Timestamp)>) -> Result<Arc<Txn>, CommandError> {
        if let Some((ts, _)) = at {
            let mut kept = self.kept.lock();
            Self::forget_doomed(&mut kept);
            if let Some(k) = kept.get(&ts) {
                return Ok(k.txn.clone());
            }
        }
        let opts = TxnOptions { read_only: true, ..TxnOptions::default() };
        let txn = Arc::new(engine.begin(opts).map_err(doc::catalog::DocError::from)?);
        match at {
            Some((asked, t)) if asked != txn.read_ts() => Err(too_old(t)),
            _ => Ok(txn),
        }
    }

    /// Keep `txn`'s snapshot for reads at its time (the oldest goes when
    /// more than the limit are kept).
    pub fn keep(&self, txn: Arc<Txn>) {
        let ts = txn.read_ts();
        let mut kept = self.kept.lock();
        kept.entry(ts).or_insert_with(|| Kept { txn, taken: Instant::now() });
        debug_assert!(kept.get(&ts).is_some_and(|k| k.txn.read_ts() == ts), "invariant 1");
        while kept.len() > snapshots_kept_max {
            kept.pop_first();
        }
    }

    /// Forget the snapshots older than the window, and those the cache
    /// rolled back (their transactions end when the last cursor reading
    /// them closes).
    pub fn reap(&self) {
        let window = Duration::from_secs(self.window_secs.load(Ordering::Relaxed));
        let mut kept = self.kept.lock();
        kept.retain(|_, k| k.taken.elapsed() < window);
        Self::forget_doomed(&mut kept);
    }

    fn forget_doomed(kept: &mut BTreeMap<u64, Kept>) {
        kept.retain(|_, k| !k.txn.is_doomed());
    }
}

pub(crate) fn too_old(t: bson::Timestamp) -> CommandError {
    CommandError::with_code(
        239,
        format!(
            "Read timestamp Timestamp({}, {}) is older than the oldest available timestamp: the server keeps the \
             snapshots that reads at level snapshot took, for minSnapshotHistoryWindowInSeconds after they were taken",
            t.time, t.increment
        ),
    )
}
