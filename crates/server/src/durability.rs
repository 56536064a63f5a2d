//! Acknowledging durable writes without blocking a network thread.
//!
//! A small write command (a few statements) runs on its connection's task:
//! its statements commit without waiting for the journal fsync, and the
//! task then awaits [`Durability::wait`]. One thread (`arbordb-sync`) runs
//! the group-commit fsyncs: each covers every commit appended before it
//! began, so the writes that arrive during one fsync share the next.
//! Large write commands still run on the blocking pool and wait there.
//!
//! A lone writer: when the write is the only command running and no fsync
//! is in flight, its task runs the fsync itself instead of handing it to
//! the sync thread and being woken back, as a PostgreSQL backend flushes
//! its own commit. That saves two thread wake-ups and their CPU on every
//! write of a single busy client, however many idle connections it pools.
//! The network thread is blocked for one fsync only when nothing else is
//! running, and only one fsync runs at a time, so the runtime's other
//! workers take any request that arrives meanwhile; a runtime with one
//! worker (a one-CPU host) has no other, and never takes this path. With
//! company, the sync thread groups the fsyncs as above.
//!
//! Gathering: a write command registers as a [`Writer`] while its
//! statements run. When an fsync is wanted while other writers are still
//! running, the sync thread waits for them to append (at most
//! [`GATHER_MAX`]), so that one fsync covers them too: fewer fsyncs for
//! the same acknowledged writes, and no wait at all for a lone writer.
//! (PostgreSQL's `commit_delay` with `commit_siblings` does the same
//! with a fixed delay; we know exactly who is still running.)
//!
//! Invariants:
//! 1. `wait` returns `Ok` only once every journal record appended before
//!    it was called is durable (as the engine's sync mode asks).
//! 2. One fsync at a time (`Wanted::busy`, sync thread or lone writer); a
//!    failed one fails every waiter (the engine is poisoned and refuses
//!    further writes).

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::Engine;
use tokio::sync::watch;

#[derive(Clone, Debug, Default)]
struct Synced {
    /// Every record below this is durable.
    below: u64,
    failed: Option<String>,
}

impl Synced {
    /// A wait for every record below `target`, answered: `Err` only when
    /// they are not all durable and the fsyncs have failed.
    fn outcome(&self, target: u64) -> Result<(), String> {
        match &self.failed {
            Some(why) if self.below < target => Err(why.clone()),
            _ => Ok(()),
        }
    }
}

#[derive(Default)]
struct Wanted {
    /// Waiters need every record below this durable.
    below: u64,
    stop: bool,
    /// An fsync is running (on the sync thread or a lone writer's task).
    busy: bool,
}

/// The longest the sync thread holds an fsync back for running writers.
pub const GATHER_MAX: Duration = Duration::from_micros(200);

pub struct Durability {
    engine: Engine,
    wanted: Mutex<Wanted>,
    wake: Condvar,
    synced: watch::Sender<Synced>,
    /// Write commands whose statements are running (see [`Writer`]).
    writers: AtomicUsize,
    /// The sync thread is holding an fsync back for running writers.
    gathering: AtomicBool,
    gather_max: Duration,
    /// Commands running on connections' tasks (see [`Running`]).
    running: AtomicUsize,
    /// The sync thread, joined by `stop`.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A command running on a connection's task, from its start until its
/// reply is ready (fsync included): a write that finds itself the only
/// one runs its fsync there.
pub struct Running<'a>(&'a Durability);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A write command running on a connection's task, from its first
/// statement until it has committed (drop it before awaiting
/// [`Durability::wait`]: the sync thread may be holding an fsync for it).
pub struct Writer<'a>(&'a Durability);

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        let d = self.0;
        // The last writer to finish releases a gathering fsync, even when
        // it committed nothing (so it never calls `wait`). Under the lock:
        // the sync thread checks `writers` and sleeps holding it.
        if d.writers.fetch_sub(1, Ordering::AcqRel) == 1 && d.gathering.load(Ordering::Acquire) {
            let _held = d.wanted.lock();
            d.wake.notify_one();
        }
    }
}

impl Durability {
    /// Start the sync thread for `engine`.
    pub fn start(engine: Engine) -> std::io::Result<Arc<Durability>> {
        Durability::start_gathering(engine, GATHER_MAX)
    }

    /// Start the sync thread, holding an fsync back for running writers at
    /// most `gather_max`.
    fn start_gathering(engine: Engine, gather_max: Duration) -> std::io::Result<Arc<Durability>> {
        let below = engine.last_journal_seq().map_or(0, |s| s + 1);
        let (synced, _) = watch::channel(Synced { below, failed: None });
        let d = Arc::new(Durability {
            engine,
            wanted: Mutex::new(Wanted::default()),
            wake: Condvar::new(),
            synced,
            writers: AtomicUsize::new(0),
            gathering: AtomicBool::new(false),
            gather_max,
            running: AtomicUsize::new(0),
            thread: Mutex::new(None),
        });
        let worker = d.clone();
        let thread = std::thread::Builder::new().name("arbordb-sync".into()).spawn(move || worker.run())?;
        *d.thread.lock() = Some(thread);
        Ok(d)
    }

    /// Register a write command that is about to run its statements.
    pub fn writer(&self) -> Writer<'_> {
        self.writers.fetch_add(1, Ordering::AcqRel);
        Writer(self)
    }

    /// Register a command about to run on a connection's task; hold it
    /// until the reply is ready.
    pub fn running(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::AcqRel);
        Running(self)
    }

    /// Wait until every commit made so far is durable. The caller holds
    /// its [`Running`] (so that a lone writer is recognised as alone).
    pub async fn wait(&self) -> Result<(), String> {
        let Some(last) = self.engine.last_journal_seq() else { return Ok(()) };
        let target = last + 1;
        let mut rx = self.synced.subscribe();
        if rx.borrow().below >= target {
            return Ok(());
        }
        {
            let mut w = self.wanted.lock();
            let alone = self.running.load(Ordering::Acquire) <= 1
                && self.writers.load(Ordering::Acquire) == 0
                && other_workers();
            if alone && !w.busy && !w.stop {
                w.busy = true;
                drop(w);
                // Hand the fsync role back even if this panics, and wake
                // the sync thread for whoever asked meanwhile.
                struct Release<'a>(&'a Durability);
                impl Drop for Release<'_> {
                    fn drop(&mut self) {
                        self.0.release_fsync_role();
                    }
                }
                let release = Release(self);
                self.sync_now();
                drop(release);
                return Synced::outcome(&self.synced.borrow(), target);
            }
            if w.below < target {
                w.below = target;
                self.wake.notify_one();
            }
        }
        let synced = rx.wait_for(|s| s.below >= target || s.failed.is_some()).await.map_err(|e| e.to_string())?;
        Synced::outcome(&synced, target)
    }

    /// Stop the sync thread (at shutdown, before the engine closes) and
    /// wait for it: an fsync in flight, and the last one for whoever still
    /// waits, finish before the engine closes.
    /// A lone writer's fsync is done: the role goes back, and the sync
    /// thread is woken for whoever asked meanwhile.
    fn release_fsync_role(&self) {
        let mut w = self.wanted.lock();
        w.busy = false;
        if w.below > self.synced.borrow().below || w.stop {
            self.wake.notify_one();
        }
    }

    pub fn stop(&self) {
        self.wanted.lock().stop = true;
        self.wake.notify_all();
        let thread = self.thread.lock().take();
        if let Some(thread) = thread.filter(|t| t.thread().id() != std::thread::current().id()) {
            let _ = thread.join();
        }
    }

    fn run(&self) {
        loop {
            let stop = {
                let mut w = self.wanted.lock();
                while w.busy || (!w.stop && w.below <= self.synced.borrow().below) {
                    self.wake.wait(&mut w);
                }
                w.busy = true;
                // Gather: writers still running will append soon; each
                // one's `wait` wakes us, and we stop holding back once
                // none runs or the time is up.
                let deadline = Instant::now() + self.gather_max;
                self.gathering.store(true, Ordering::Release);
                while !w.stop && self.writers.load(Ordering::Acquire) > 0 {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    self.wake.wait_for(&mut w, deadline - now);
                }
                self.gathering.store(false, Ordering::Release);
                w.stop
            };
            self.sync_now();
            self.wanted.lock().busy = false;
            // Stopped (after a last fsync for whoever still waits), or
            // poisoned: every later wait fails at once.
            if stop || self.synced.borrow().failed.is_some() {
                return;
            }
        }
    }

    /// Run one fsync and publish what it covered (the caller set `busy`).
    fn sync_now(&self) {
        // Read before the fsync: it covers at least this much.
        let covered = self.engine.last_journal_seq().map_or(0, |s| s + 1);
        let result = self.engine.sync_journal();
        self.synced.send_modify(|s| match result {
            Ok(()) => s.below = s.below.max(covered),
            Err(e) => s.failed = Some(format!("the journal could not be made durable: {e}")),
        });
    }
}

/// Whether the runtime this task runs on has workers besides this one,
/// which take other connections' requests while a lone writer's fsync
/// blocks this thread.
fn other_workers() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|h| h.metrics().num_workers() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::{Config, TableConfig, TxnOptions};

    /// An engine with table "t" and its sync thread (the directory lives
    /// as long as the first value).
    fn started() -> (tempfile::TempDir, Engine, storage::Table, Arc<Durability>) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), Config::default()).unwrap();
        let table = engine.create_table("t", TableConfig::default()).unwrap();
        let durability = Durability::start(engine.clone()).unwrap();
        (dir, engine, table, durability)
    }

    fn commit_unsynced(engine: &Engine, table: &storage::Table, key: u32) {
        let txn = engine.begin(TxnOptions { skip_journal_sync: true, ..TxnOptions::default() }).unwrap();
        txn.put(table, &key.to_be_bytes(), b"v").unwrap();
        txn.commit().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_covers_every_earlier_commit_and_groups_share_an_fsync() {
        let (_dir, engine, table, durability) = started();
        // Two commands running: no waiter is a lone writer.
        let _company = (durability.running(), durability.running());
        for key in 0..20 {
            commit_unsynced(&engine, &table, key);
        }
        let syncs = engine.stats().journal_syncs;
        durability.wait().await.unwrap();
        let after = engine.stats().journal_syncs;
        assert!(after > syncs, "the wait ran an fsync for the unsynced commits");
        assert!(after - syncs <= 2, "twenty commits shared one group fsync ({} ran)", after - syncs);
        durability.wait().await.unwrap();
        assert_eq!(engine.stats().journal_syncs, after, "nothing new: no fsync");
        // Many concurrent waiters over new commits: all return, few fsyncs.
        let mut waiters = Vec::new();
        for key in 20..60 {
            commit_unsynced(&engine, &table, key);
            let d = durability.clone();
            waiters.push(tokio::spawn(async move { d.wait().await }));
        }
        for w in waiters {
            w.await.unwrap().unwrap();
        }
        let last = engine.last_journal_seq().unwrap();
        assert!(durability.synced.borrow().below > last);
        durability.stop();
    }

    #[test]
    fn stop_returns_after_the_last_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), Config::default()).unwrap();
        let table = engine.create_table("t", TableConfig::default()).unwrap();
        let durability = Durability::start(engine.clone()).unwrap();
        for key in 0..50 {
            commit_unsynced(&engine, &table, key);
            let last = engine.last_journal_seq().unwrap();
            durability.wanted.lock().below = last + 1;
        }
        let last = engine.last_journal_seq().unwrap();
        durability.stop();
        // Joined: the thread is gone and its last fsync covered everything.
        assert!(durability.thread.lock().is_none());
        assert!(durability.synced.borrow().below > last);
        engine.close().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_fsync_waits_for_running_writers_and_covers_them() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), Config::default()).unwrap();
        let table = engine.create_table("t", TableConfig::default()).unwrap();
        // Long enough that only the writers can release the fsync.
        let durability = Durability::start_gathering(engine.clone(), Duration::from_secs(30)).unwrap();
        // Two commands running: no waiter is a lone writer.
        let _company = (durability.running(), durability.running());
        let began = Instant::now();
        let syncs = engine.stats().journal_syncs;
        // Writer a commits and waits while writer b is still running.
        let b = durability.writer();
        let a = durability.writer();
        commit_unsynced(&engine, &table, 1);
        drop(a);
        let d = durability.clone();
        let first = tokio::spawn(async move { d.wait().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!first.is_finished(), "the fsync is held for the running writer");
        commit_unsynced(&engine, &table, 2);
        drop(b);
        durability.wait().await.unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(engine.stats().journal_syncs - syncs, 1, "one fsync covered both writers");
        // A writer that commits nothing releases the fsync when it ends.
        let idle = durability.writer();
        commit_unsynced(&engine, &table, 3);
        let d = durability.clone();
        let waiting = tokio::spawn(async move { d.wait().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(idle);
        waiting.await.unwrap().unwrap();
        assert!(began.elapsed() < Duration::from_secs(10), "released by the writers, not the time limit");
        durability.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_writer_runs_its_own_fsync_and_company_goes_to_the_sync_thread() {
        let (_dir, engine, table, durability) = started();
        // Alone: the waiting task runs the fsync; the sync thread is never asked.
        let running = durability.running();
        commit_unsynced(&engine, &table, 1);
        let syncs = engine.stats().journal_syncs;
        durability.wait().await.unwrap();
        drop(running);
        assert_eq!(engine.stats().journal_syncs, syncs + 1, "one fsync ran");
        assert!(durability.synced.borrow().below > engine.last_journal_seq().unwrap(), "the commit is durable");
        assert_eq!(durability.wanted.lock().below, 0, "the sync thread was not asked");
        // Another command running: the wait hands the fsync to the sync thread.
        let (mine, other) = (durability.running(), durability.running());
        commit_unsynced(&engine, &table, 2);
        let target = engine.last_journal_seq().unwrap() + 1;
        durability.wait().await.unwrap();
        drop((mine, other));
        assert_eq!(durability.wanted.lock().below, target, "the sync thread was asked");
        assert!(durability.synced.borrow().below >= target);
        // The sync thread clears `busy` just after it publishes.
        let cleared = Instant::now();
        while durability.wanted.lock().busy {
            assert!(cleared.elapsed() < Duration::from_secs(5), "no fsync is left marked as running");
            std::thread::sleep(Duration::from_millis(1));
        }
        durability.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_fsync_fails_the_waiters() {
        for lone in [false, true] {
            let (_dir, engine, table, durability) = started();
            // With company the sync thread runs the fsync and publishes
            // the failure; alone, the waiter runs it itself.
            let company = (!lone).then(|| (durability.running(), durability.running()));
            commit_unsynced(&engine, &table, 1);
            engine.clone().close().unwrap();
            let err = durability.wait().await.unwrap_err();
            assert!(err.contains("could not be made durable"), "lone {lone}: {err}");
            drop(company);
            durability.stop();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_that_finds_a_lone_fsync_running_is_synced_after_it() {
        let (_dir, engine, table, durability) = started();
        // A lone writer's fsync is in flight (`busy`, taken as `wait` takes it).
        durability.wanted.lock().busy = true;
        commit_unsynced(&engine, &table, 1);
        let target = engine.last_journal_seq().unwrap() + 1;
        let d = durability.clone();
        let waiting = tokio::spawn(async move { d.wait().await });
        // The waiter asks the sync thread and waits: the fsync role is taken.
        let asked = Instant::now();
        while durability.wanted.lock().below < target {
            assert!(asked.elapsed() < Duration::from_secs(5), "the waiter asked for its fsync");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "nothing synced it while the role was taken");
        // The lone writer ends: the sync thread is woken for the waiter.
        durability.release_fsync_role();
        let synced = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        synced.expect("the sync thread took the fsync over").unwrap().unwrap();
        assert!(durability.synced.borrow().below >= target);
        durability.stop();
    }
}
