//! The db_bench workloads: key and value generation, and running one phase
//! on N threads against a [`BenchEngine`] with a progress line on stderr.
//!
//! Keys are 16 bytes: the key index in 16 decimal digits, zero padded, so
//! byte order is numeric order (as db_bench does). Values are 100 bytes cut
//! from a seeded random buffer at an offset that depends on the key and the
//! phase, so they are neither zero nor all alike.
//!
//! Thread shares: fills give each thread a disjoint slice of the keys
//! (fillseq in key order, fillrandom in the order of one shuffled
//! permutation); overwrite and the random reads pick keys at random from
//! `0..keys_in_db`; readseq gives each thread a contiguous key slice.

use crate::engine::BenchEngine;
use crate::engine::EngineKind;
use crate::BenchError;
use crate::BenchResult;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

pub const KEY_BYTES: usize = 16;
pub const VALUE_BYTES: usize = 100;
/// Entries a seekrandom op reads: the one the seek lands on plus 10 `next`s.
pub const SEEK_ENTRIES: u64 = 11;
const VALUE_POOL_BYTES: usize = 1 << 20;
/// How often a long phase prints its percentage.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    FillSeq,
    FillRandom,
    Overwrite,
    ReadRandom,
    ReadSeq,
    SeekRandom,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::FillSeq => "fillseq",
            Workload::FillRandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::ReadRandom => "readrandom",
            Workload::ReadSeq => "readseq",
            Workload::SeekRandom => "seekrandom",
        }
    }

    pub fn is_write(self) -> bool {
        matches!(self, Workload::FillSeq | Workload::FillRandom | Workload::Overwrite)
    }

    /// A distinct salt per workload so overwrite writes new values.
    fn salt(self) -> u64 {
        self as u64 + 1
    }
}

/// One phase: what to run and how much.
#[derive(Clone, Debug)]
pub struct PhaseSpec {
    pub engine: EngineKind,
    pub workload: Workload,
    pub threads: usize,
    /// Puts per durable commit (write phases only).
    pub batch: usize,
    /// Ops of the phase over all threads (readseq: entries read).
    pub ops: u64,
    /// The database holds exactly the keys `0..keys_in_db` (after the fill).
    pub keys_in_db: u64,
    /// Entries a seekrandom op reads.
    pub seek_entries: u64,
    pub seed: u64,
}

/// What a phase did.
#[derive(Clone, Debug)]
pub struct PhaseOutcome {
    pub ops: u64,
    pub elapsed: Duration,
    /// Durable commits (write phases).
    pub commits: u64,
    /// Entries read (read phases); checked against what the database holds.
    pub entries_read: u64,
}

/// The key of index `i`: 16 zero-padded decimal digits.
pub fn key_of(mut i: u64) -> [u8; KEY_BYTES] {
    assert!(i < 10u64.pow(KEY_BYTES as u32));
    let mut key = [b'0'; KEY_BYTES];
    for b in key.iter_mut().rev() {
        *b = b'0' + (i % 10) as u8;
        i /= 10;
    }
    key
}

/// Seeded random bytes that values are cut from.
pub struct ValueSource {
    pool: Vec<u8>,
}

impl ValueSource {
    pub fn new(seed: u64) -> ValueSource {
        let mut pool = vec![0u8; VALUE_POOL_BYTES];
        SmallRng::seed_from_u64(seed ^ 0x5eed_0f7a_1e00).fill_bytes(&mut pool);
        ValueSource { pool }
    }

    /// The value written for key `i` by a phase with `salt`.
    fn value(&self, i: u64, salt: u64) -> &[u8] {
        let mixed = (i ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        let at = (mixed >> 20) as usize % (self.pool.len() - VALUE_BYTES);
        &self.pool[at..at + VALUE_BYTES]
    }
}

/// The ops of `total` that thread `t` of `threads` owns.
fn share(total: u64, threads: usize, t: usize) -> std::ops::Range<u64> {
    let (n, t) = (threads as u64, t as u64);
    (total * t / n)..(total * (t + 1) / n)
}

/// Counts finished ops across threads for the progress line.
struct Progress {
    done: AtomicU64,
}

/// Run one phase on `spec.threads` threads and time it.
pub fn run_phase(db: &dyn BenchEngine, spec: &PhaseSpec, values: &ValueSource) -> BenchResult<PhaseOutcome> {
    let permutation = (spec.workload == Workload::FillRandom).then(|| {
        let mut p: Vec<u64> = (0..spec.keys_in_db).collect();
        p.shuffle(&mut SmallRng::seed_from_u64(spec.seed));
        p
    });
    let progress = Progress { done: AtomicU64::new(0) };
    let start_line = Barrier::new(spec.threads + 1);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (progress, start_line, permutation) = (&progress, &start_line, permutation.as_deref());
                s.spawn(move || {
                    start_line.wait();
                    let began = Instant::now();
                    let tally = Worker { db, spec, values, progress, thread: t }.run(permutation);
                    (tally, began, Instant::now())
                })
            })
            .collect();
        start_line.wait();
        watch_progress(spec, &progress, Instant::now(), || handles.iter().all(|h| h.is_finished()));
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    // The phase runs from the first thread's start to the last one's end,
    // taken by the threads themselves: the watcher only polls.
    let mut total = ThreadTally::default();
    let (mut began, mut ended) = (None::<Instant>, None::<Instant>);
    for r in results {
        let (tally, b, e) = r.map_err(|_| BenchError::from("a benchmark thread panicked"))?;
        let tally = tally?;
        total.commits += tally.commits;
        total.entries_read += tally.entries_read;
        began = Some(began.map_or(b, |x| x.min(b)));
        ended = Some(ended.map_or(e, |x| x.max(e)));
    }
    let elapsed = ended.expect("at least one thread") - began.expect("at least one thread");
    Ok(PhaseOutcome { ops: spec.ops, elapsed, commits: total.commits, entries_read: total.entries_read })
}

/// Wait for the workers, printing a percentage every few seconds.
fn watch_progress(spec: &PhaseSpec, progress: &Progress, started: Instant, finished: impl Fn() -> bool) {
    let mut last_print = started;
    while !finished() {
        std::thread::sleep(Duration::from_millis(20));
        if last_print.elapsed() >= PROGRESS_EVERY {
            last_print = Instant::now();
            let done = progress.done.load(Ordering::Relaxed);
            eprintln!(
                "  ... {} {} t{}: {:.0}% ({done}/{}) after {:.0} s",
                spec.engine.name(),
                spec.workload.name(),
                spec.threads,
                100.0 * done as f64 / spec.ops.max(1) as f64,
                spec.ops,
                started.elapsed().as_secs_f64()
            );
        }
    }
}

#[derive(Default)]
struct ThreadTally {
    commits: u64,
    entries_read: u64,
}

struct Worker<'a> {
    db: &'a dyn BenchEngine,
    spec: &'a PhaseSpec,
    values: &'a ValueSource,
    progress: &'a Progress,
    thread: usize,
}

impl Worker<'_> {
    fn run(&self, permutation: Option<&[u64]>) -> BenchResult<ThreadTally> {
        let mine = share(self.spec.ops, self.spec.threads, self.thread);
        let mut rng =
            SmallRng::seed_from_u64(self.spec.seed ^ ((self.thread as u64 + 1) << 32) ^ self.spec.workload.salt());
        let n = self.spec.keys_in_db;
        match self.spec.workload {
            Workload::FillSeq => self.write(mine),
            Workload::FillRandom => {
                let p = permutation.expect("fillrandom has a permutation");
                self.write(mine.map(|j| p[j as usize]))
            }
            Workload::Overwrite => self.write(mine.map(|_| rng.gen_range(0..n))),
            Workload::ReadRandom => self.read_random(mine.end - mine.start, &mut rng),
            Workload::ReadSeq => self.read_seq(mine),
            Workload::SeekRandom => self.seek_random(mine.end - mine.start, &mut rng),
        }
    }

    fn write(&self, keys: impl Iterator<Item = u64>) -> BenchResult<ThreadTally> {
        let salt = self.spec.workload.salt();
        let mut tally = ThreadTally::default();
        let mut batch: Vec<([u8; KEY_BYTES], u64)> = Vec::with_capacity(self.spec.batch);
        let mut keys = keys.peekable();
        while keys.peek().is_some() {
            batch.clear();
            batch.extend(keys.by_ref().take(self.spec.batch).map(|i| (key_of(i), i)));
            let puts: Vec<(&[u8], &[u8])> = batch.iter().map(|(k, i)| (&k[..], self.values.value(*i, salt))).collect();
            self.db.write_batch(&puts)?;
            tally.commits += 1;
            self.progress.done.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        Ok(tally)
    }

    fn read_random(&self, ops: u64, rng: &mut SmallRng) -> BenchResult<ThreadTally> {
        let mut value = Vec::with_capacity(VALUE_BYTES);
        for op in 0..ops {
            let i = rng.gen_range(0..self.spec.keys_in_db);
            if !self.db.get(&key_of(i), &mut value)? {
                return Err(format!("readrandom: key {i} is missing").into());
            }
            if value.len() != VALUE_BYTES {
                return Err(format!("readrandom: key {i} has a {}-byte value", value.len()).into());
            }
            self.count_progress(op);
        }
        Ok(ThreadTally { commits: 0, entries_read: ops })
    }

    /// Scan the thread's key slice; the database holds exactly `0..n`, so
    /// entry j of the scan must be key `start + j`.
    fn read_seq(&self, mine: std::ops::Range<u64>) -> BenchResult<ThreadTally> {
        let mut value = Vec::with_capacity(VALUE_BYTES);
        let mut expect = mine.start;
        let mut wrong: Option<String> = None;
        let entries = self.db.scan(&key_of(mine.start), mine.end - mine.start, &mut |k, v| {
            value.clear();
            value.extend_from_slice(v);
            if wrong.is_none() && (k != key_of(expect) || v.len() != VALUE_BYTES) {
                wrong = Some(format!(
                    "readseq: entry {} is key {:?} with a {}-byte value, expected key {expect}",
                    expect - mine.start,
                    String::from_utf8_lossy(k),
                    v.len()
                ));
            }
            self.count_progress(expect);
            expect += 1;
        })?;
        if let Some(w) = wrong {
            return Err(w.into());
        }
        if entries != mine.end - mine.start {
            return Err(format!(
                "readseq: scanned {entries} entries from key {}, expected {}",
                mine.start,
                mine.end - mine.start
            )
            .into());
        }
        Ok(ThreadTally { commits: 0, entries_read: entries })
    }

    fn seek_random(&self, ops: u64, rng: &mut SmallRng) -> BenchResult<ThreadTally> {
        let n = self.spec.keys_in_db;
        let mut value = Vec::with_capacity(VALUE_BYTES);
        let mut entries_read = 0;
        for op in 0..ops {
            let i = rng.gen_range(0..n);
            let mut first: Option<Vec<u8>> = None;
            let entries = self.db.scan(&key_of(i), self.spec.seek_entries, &mut |k, v| {
                if first.is_none() {
                    first = Some(k.to_vec());
                }
                value.clear();
                value.extend_from_slice(v);
            })?;
            let expected = self.spec.seek_entries.min(n - i);
            if entries != expected || first.as_deref() != Some(&key_of(i)[..]) {
                return Err(format!(
                    "seekrandom: seek to key {i} read {entries} entries starting at {:?}, \
                     expected {expected} starting at key {i}",
                    first.map(|f| String::from_utf8_lossy(&f).into_owned())
                )
                .into());
            }
            entries_read += entries;
            self.count_progress(op);
        }
        Ok(ThreadTally { commits: 0, entries_read })
    }

    fn count_progress(&self, op: u64) {
        if op % 1024 == 1023 {
            self.progress.done.fetch_add(1024, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically() {
        assert_eq!(&key_of(42), b"0000000000000042");
        assert!(key_of(9) < key_of(10));
        assert!(key_of(999_999) < key_of(1_000_000));
    }

    #[test]
    fn shares_cover_all_ops_once() {
        for threads in 1..5 {
            let mut next = 0;
            for t in 0..threads {
                let r = share(1001, threads, t);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, 1001);
        }
    }

    #[test]
    fn values_differ_by_key_and_phase() {
        let v = ValueSource::new(1);
        assert_eq!(v.value(7, 1).len(), VALUE_BYTES);
        assert_ne!(v.value(7, 1), v.value(8, 1));
        assert_ne!(v.value(7, 1), v.value(7, 2));
        assert!(v.value(7, 1).iter().any(|&b| b != 0));
    }
}
