//! How a write outside any multi-document transaction waits when it meets
//! a conflict (another transaction's claim on its key, or a commit newer
//! than its snapshot): it begins again on a fresh snapshot, after
//! mongod's backoff (attempts 1–4 at once, then 1 ms up to the 9th, 5 ms
//! up to the 99th, 10 ms up to the 199th, then 100 ms each), so that a
//! write waiting on a long transaction costs almost no CPU; bounded by the
//! operation's deadline (`maxTimeMS`).

use super::DocError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::StorageError;

/// One operation's conflict waits: its deadline, how it sleeps (a
/// server's network thread hands its other connections off first), and
/// how many conflicts it met (its profiler entry's `writeConflicts`).
#[derive(Debug)]
pub struct ConflictWait {
    pub deadline: Option<Instant>,
    pub sleep: fn(Duration),
    /// Set when the operation is killed (`killOp`): the wait ends.
    pub killed: Option<Arc<AtomicBool>>,
    conflicts: AtomicU64,
    /// What the operation's reads and writes did (`tally.rs`).
    pub tally: Arc<super::Tally>,
}

impl Default for ConflictWait {
    fn default() -> ConflictWait {
        ConflictWait::until(None, std::thread::sleep)
    }
}

/// The pause before attempt `attempt + 1`, after `attempt` conflicts.
pub fn backoff(attempt: u64) -> Option<Duration> {
    match attempt {
        0..=4 => None,
        5..=9 => Some(Duration::from_millis(1)),
        10..=99 => Some(Duration::from_millis(5)),
        100..=199 => Some(Duration::from_millis(10)),
        _ => Some(Duration::from_millis(100)),
    }
}

impl ConflictWait {
    /// Waits until `deadline`, if any, sleeping with `sleep`.
    pub fn until(deadline: Option<Instant>, sleep: fn(Duration)) -> ConflictWait {
        ConflictWait { deadline, sleep, killed: None, conflicts: AtomicU64::new(0), tally: Arc::default() }
    }

    /// The conflicts met so far.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// Wait before trying again after the retryable error `e`; fails with
    /// [`DocError::TimeLimit`] once the deadline has passed (or would, by
    /// the end of the pause).
    pub fn pause(&self, e: &StorageError) -> Result<(), DocError> {
        let pause = match e {
            StorageError::CachePressure { .. } => Some(Duration::from_millis(1)),
            _ => backoff(self.conflicts.fetch_add(1, Ordering::Relaxed) + 1),
        };
        if self.killed.as_ref().is_some_and(|k| k.load(Ordering::Relaxed)) {
            return Err(DocError::Interrupted);
        }
        if let Some(deadline) = self.deadline {
            if Instant::now() + pause.unwrap_or_default() >= deadline {
                return Err(DocError::TimeLimit);
            }
        }
        match pause {
            Some(p) => (self.sleep)(p),
            None => std::thread::yield_now(),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_is_mongods_schedule() {
        let ms = |n| backoff(n).map(|d| d.as_millis());
        assert_eq!((ms(1), ms(4)), (None, None));
        assert_eq!((ms(5), ms(9)), (Some(1), Some(1)));
        assert_eq!((ms(10), ms(99)), (Some(5), Some(5)));
        assert_eq!((ms(100), ms(199)), (Some(10), Some(10)));
        assert_eq!((ms(200), ms(5000)), (Some(100), Some(100)));
    }

    #[test]
    fn a_past_deadline_ends_the_wait_and_conflicts_are_counted() {
        let conflict = StorageError::WriteConflict { table: "t".into(), key: vec![], holder: 1 };
        let w = ConflictWait::until(Some(Instant::now() + Duration::from_millis(30)), std::thread::sleep);
        let mut tries = 0;
        while w.pause(&conflict).is_ok() {
            tries += 1;
            assert!(tries < 100, "the deadline ends the wait");
        }
        assert_eq!(w.conflicts(), tries + 1);
        assert!(tries >= 4, "the first attempts do not sleep: {tries}");
    }
}
