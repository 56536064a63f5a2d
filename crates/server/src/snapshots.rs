//! The snapshot history the server keeps for reads at `readConcern`
//! `{level: "snapshot", atClusterTime}` outside transactions.
//!
//! A read at level snapshot without `atClusterTime` reads the newest
//! snapshot and keeps it (an open read-only storage transaction) under its
//! timestamp, which the reply gives back as `atClusterTime`; a later read
//! at that time reads the kept snapshot. So the history kept is the
//! snapshots such reads took, each for `minSnapshotHistoryWindowInSeconds`
//! (mongod's parameter and default, 300) after its last use, plus the
//! newest. Any other time answers SnapshotTooOld (239).
//!
//! Invariants:
//! 1. A kept snapshot at `ts` is a read-only transaction whose read
//!    timestamp is `ts`: it sees exactly the commits at or below `ts`.
//! 2. A kept snapshot pins old versions in the cache like any open
//!    transaction; the cache may roll it back under pressure, and a read
//!    through it then fails (CachePressure) instead of reading wrong data.

use crate::error::CommandError;
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
    last_used: Instant,
}

impl Default for Snapshots {
    fn default() -> Snapshots {
        Snapshots { kept: Mutex::default(), window_secs: AtomicU64::new(HISTORY_WINDOW_SECS_DEFAULT) }
    }
}

impl Snapshots {
    /// The snapshot at `at` (an engine timestamp), or the newest one
    /// (`None`), kept for later reads at its time.
    pub fn read_at(&self, engine: &Engine, at: Option<(u64, bson::Timestamp)>) -> Result<Arc<Txn>, CommandError> {
        if let Some((ts, _)) = at {
            if let Some(kept) = self.kept.lock().get_mut(&ts) {
                kept.last_used = Instant::now();
                return Ok(kept.txn.clone());
            }
        }
        let opts = TxnOptions { read_only: true, ..TxnOptions::default() };
        let txn = Arc::new(engine.begin(opts).map_err(doc::catalog::DocError::from)?);
        let ts = txn.read_ts();
        if let Some((_, asked)) = at.filter(|&(asked, _)| asked != ts) {
            return Err(too_old(asked));
        }
        let mut kept = self.kept.lock();
        let slot = kept.entry(ts).or_insert_with(|| Kept { txn: txn.clone(), last_used: Instant::now() });
        slot.last_used = Instant::now();
        debug_assert_eq!(slot.txn.read_ts(), ts, "invariant 1");
        Ok(slot.txn.clone())
    }

    /// Forget the snapshots unused for the window (their transactions end
    /// when the last cursor reading them closes).
    pub fn reap(&self) {
        let window = Duration::from_secs(self.window_secs.load(Ordering::Relaxed));
        self.kept.lock().retain(|_, k| k.last_used.elapsed() < window);
    }

    /// How many snapshots are kept (serverStatus).
    pub fn len(&self) -> usize {
        self.kept.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(crate) fn too_old(t: bson::Timestamp) -> CommandError {
    CommandError::with_code(
        239,
        format!(
            "Read timestamp Timestamp({}, {}) is older than the oldest available timestamp: the server keeps the \
             snapshots that reads at level snapshot took, for minSnapshotHistoryWindowInSeconds after their last use",
            t.time, t.increment
        ),
    )
}
