//! Transactions: snapshot isolation, first updater wins, and opt-in
//! serializable isolation (see `ssi.rs`).
//!
//! How it fits the copy-on-write trees:
//! - Committed data lives in the trees. A commit applies its writes to its
//!   tables' trees under their writer locks, then, under the publish lock,
//!   appends its journal record (whose sequence number is its commit
//!   timestamp) and publishes a new [`RootSet`]: every table's root at that
//!   timestamp. Publication is in timestamp order and atomic across tables.
//! - A snapshot is one `Arc<RootSet>`: `begin` clones it, reads walk those
//!   roots without locks. Readers never block writers and writers never
//!   block readers. A version lives as long as a snapshot holds its root;
//!   dropping the last holder frees it (this is the garbage collection of
//!   versions in the trees).
//! - Uncommitted writes stay in the transaction's write set until commit.
//!   So that conflicts show at once (first updater wins), a write first
//!   *claims* its key in the table's [`KeyVersions`]: an intent naming the
//!   writer, and the timestamps of recent commits to the key. A claim fails
//!   with `WriteConflict` when another transaction's intent is there, or a
//!   commit newer than the claimant's snapshot. Entries whose commits every
//!   open snapshot sees are garbage-collected.

use crate::btree::{Cursor, Entry, RootSource};
use crate::engine::{Engine, Table, WriteBatch};
use crate::error::{Result, StorageError};
use crate::page::{Key, Node};
use crate::ssi::{Failure, Horizon, SsiFlags, SsiState, TableRef};
use crate::stats::bump;
use arc_swap::ArcSwap;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

const ACTIVE: u64 = 0;
const ABORTED: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Snapshot isolation: reads see one snapshot, first updater wins.
    #[default]
    Snapshot,
    /// Serializable snapshot isolation: SI plus rw-conflict tracking; a
    /// commit that could break serializability fails instead.
    Serializable,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct TxnOptions {
    pub isolation: Isolation,
    /// Writes fail; a serializable read-only transaction that starts while
    /// no serializable writer is active needs no tracking at all.
    pub read_only: bool,
    /// Acknowledge the commit once its journal record is written, before
    /// the fsync (MongoDB's `writeConcern: {j: false}`); a crash may lose
    /// it. Only matters with `SyncMode::Fsync`.
    pub skip_journal_sync: bool,
}

impl TxnOptions {
    pub fn serializable() -> TxnOptions {
        TxnOptions { isolation: Isolation::Serializable, ..TxnOptions::default() }
    }
}

/// The part of a transaction other transactions can see.
#[derive(Debug)]
pub(crate) struct TxnShared {
    /// Also its begin position in the event order SSI compares commits with.
    pub id: u64,
    pub read_ts: u64,
    /// `ACTIVE`, `ABORTED`, or the commit timestamp.
    state: AtomicU64,
    /// Set when the cache rolls the transaction back: (pinned, limit) bytes.
    cache_doomed: OnceLock<(usize, usize)>,
    pub ssi: SsiFlags,
}

enum State {
    Active,
    Committed(u64),
    Aborted,
}

impl TxnShared {
    fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            ACTIVE => State::Active,
            ABORTED => State::Aborted,
            ts => State::Committed(ts),
        }
    }

    /// The commit timestamp, set (before publication) once it commits.
    pub fn commit_ts(&self) -> Option<u64> {
        match self.state() {
            State::Committed(ts) => Some(ts),
            _ => None,
        }
    }

    #[cfg(test)]
    pub fn for_test(id: u64, read_ts: u64, read_only: bool) -> Arc<TxnShared> {
        Arc::new(TxnShared {
            id,
            read_ts,
            state: AtomicU64::new(ACTIVE),
            cache_doomed: OnceLock::new(),
            ssi: SsiFlags::tracked(read_only),
        })
    }

    #[cfg(test)]
    pub fn set_committed_for_test(&self, ts: u64) {
        self.state.store(ts, Ordering::Release);
    }
}

/// Every table's root as of one commit timestamp.
pub(crate) struct RootSet {
    pub ts: u64,
    pub roots: HashMap<u32, Arc<Node>>,
}

#[derive(Default)]
struct KeyVersion {
    intent: Option<Arc<TxnShared>>,
    /// (commit timestamp, writer), oldest first; only commits some open
    /// snapshot may not see.
    commits: Vec<(u64, Arc<TxnShared>)>,
    /// Serializable transactions that read the key (SIREAD key marks),
    /// with their ids inline so the duplicate check follows no pointer.
    readers: Vec<(u64, Arc<TxnShared>)>,
}

impl KeyVersion {
    /// Turn an intent whose owner finished into what it means; returns
    /// whether a commit was recorded.
    fn settle(&mut self) -> bool {
        if let Some(w) = &self.intent {
            match w.state() {
                State::Active => {}
                State::Committed(ts) => {
                    let w = self.intent.take().expect("checked above");
                    // Commits to one key come in timestamp order: the next
                    // writer claims only after this one settled.
                    if self.commits.last().is_none_or(|(t, c)| (*t, c.id) != (ts, w.id)) {
                        self.commits.push((ts, w));
                        return true;
                    }
                }
                State::Aborted => self.intent = None,
            }
        }
        false
    }

    /// Writers of versions `me` cannot see.
    fn unseen(&self, me: &TxnShared, out: &mut Vec<Arc<TxnShared>>) {
        if let Some(w) = &self.intent {
            match w.state() {
                State::Active => out.push(w.clone()),
                State::Committed(ts) if ts > me.read_ts => out.push(w.clone()),
                _ => {}
            }
        }
        out.extend(self.commits.iter().rev().take_while(|(ts, _)| *ts > me.read_ts).map(|(_, w)| w.clone()));
    }

    /// Drop marks of readers no writer can be concurrent with any more;
    /// returns how many went.
    fn prune_readers(&mut self, h: Horizon) -> usize {
        let before = self.readers.len();
        self.readers.retain(|(_, r)| !r.ssi_stale(h));
        before - self.readers.len()
    }

    fn is_empty(&self) -> bool {
        self.intent.is_none() && self.commits.is_empty() && self.readers.is_empty()
    }
}

/// Per table: recent writers and SSI readers of each key (see the module
/// comment and `ssi.rs`).
#[derive(Default)]
pub(crate) struct KeyVersions {
    map: BTreeMap<Vec<u8>, KeyVersion>,
    /// Commits and marks recorded since the last collection: hot keys
    /// gather them without adding entries, and these count towards the
    /// next one too.
    recorded: usize,
    gc_at: usize,
}

impl KeyVersions {
    /// First updater wins: claim `key` for `me`, or name who holds it.
    fn claim(&mut self, key: &[u8], me: &Arc<TxnShared>) -> std::result::Result<(), u64> {
        let e = self.map.entry(key.to_vec()).or_default();
        if e.intent.as_ref().is_some_and(|w| w.id == me.id) {
            return Ok(());
        }
        self.recorded += usize::from(e.settle());
        if let Some(w) = &e.intent {
            return Err(w.id);
        }
        if let Some((ts, w)) = e.commits.last() {
            if *ts > me.read_ts {
                return Err(w.id);
            }
        }
        e.intent = Some(me.clone());
        Ok(())
    }

    /// Serializable readers of `key` concurrent with `me`, its writer.
    fn concurrent_readers(&self, key: &[u8], me: &TxnShared) -> Vec<Arc<TxnShared>> {
        match self.map.get(key) {
            Some(e) => e
                .readers
                .iter()
                .filter(|(id, r)| *id != me.id && r.ssi_concurrent_with(me))
                .map(|(_, r)| r.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// A serializable read of `key` by `me`: leave its mark (if `mark`;
    /// `marks` counts marks held by all tables) and return the writers of
    /// versions it cannot see. Mark first, look second, in one lock hold.
    fn read(
        &mut self,
        key: &[u8],
        me: &Arc<TxnShared>,
        mark: bool,
        h: Horizon,
        marks: &AtomicUsize,
    ) -> (bool, Vec<Arc<TxnShared>>) {
        let mut out = Vec::new();
        let mut marked = false;
        if mark {
            let e = match self.map.get_mut(key) {
                Some(e) => e,
                None => self.map.entry(key.to_vec()).or_default(),
            };
            // A transaction re-reading a key usually does so soon after.
            if !e.readers.iter().rev().take(8).any(|(id, _)| *id == me.id) {
                if e.readers.len() >= 8 && e.readers.len().is_power_of_two() {
                    marks.fetch_sub(e.prune_readers(h), Ordering::Relaxed);
                }
                e.readers.push((me.id, me.clone()));
                marks.fetch_add(1, Ordering::Relaxed);
                self.recorded += 1;
                marked = true;
            }
            e.unseen(me, &mut out);
            if self.grown() {
                self.gc(h, marks);
            }
        } else if let Some(e) = self.map.get(key) {
            e.unseen(me, &mut out);
        }
        (marked, out)
    }

    fn release(&mut self, key: &[u8], me: u64) {
        if let Some(e) = self.map.get_mut(key) {
            if e.intent.as_ref().is_some_and(|w| w.id == me) {
                e.intent = None;
                if e.is_empty() {
                    self.map.remove(key);
                }
            }
        }
    }

    fn stamp(&mut self, key: &[u8]) {
        if let Some(e) = self.map.get_mut(key) {
            self.recorded += usize::from(e.settle());
        }
    }

    fn unseen_in(&self, range: &(Bound<Vec<u8>>, Bound<Vec<u8>>), me: &TxnShared) -> Vec<(Arc<TxnShared>, Vec<u8>)> {
        let mut out = Vec::new();
        let bounds = (range.0.as_ref().map(|k| k.as_slice()), range.1.as_ref().map(|k| k.as_slice()));
        if bound_order_ok(&bounds) {
            for (k, e) in self.map.range::<[u8], _>(bounds) {
                let mut ws = Vec::new();
                e.unseen(me, &mut ws);
                out.extend(ws.into_iter().map(|w| (w, k.clone())));
            }
        }
        out
    }

    /// Forget commits every open snapshot sees and marks no writer can
    /// need (see [`TxnShared::ssi_stale`]).
    fn gc(&mut self, h: Horizon, marks: &AtomicUsize) {
        let mut pruned = 0;
        self.map.retain(|_, e| {
            e.settle();
            e.commits.retain(|(ts, _)| *ts > h.read_ts);
            pruned += e.prune_readers(h);
            !e.is_empty()
        });
        marks.fetch_sub(pruned, Ordering::Relaxed);
        self.recorded = 0;
        self.gc_at = (self.map.len() * 2).max(crate::limits::key_versions_gc_min);
    }

    /// Due for a collection?
    fn grown(&self) -> bool {
        self.map.len() + self.recorded > self.gc_at.max(crate::limits::key_versions_gc_min)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// `BTreeMap::range` panics on an empty or inverted range; such a range holds nothing.
fn bound_order_ok(b: &(Bound<&[u8]>, Bound<&[u8]>)) -> bool {
    match (b.0, b.1) {
        (Bound::Included(l), Bound::Included(h)) => l <= h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => l < h,
        _ => true,
    }
}

#[derive(Default)]
struct ActiveSet {
    /// Active transactions: id -> snapshot timestamp and handle.
    by_id: BTreeMap<u64, (u64, Weak<TxnShared>)>,
    /// Snapshot timestamp -> how many active transactions hold it.
    read_ts: BTreeMap<u64, usize>,
    /// Serializable read-write transactions now active.
    serializable_writers: usize,
}

/// Publication, the set of active transactions, and SSI state.
pub(crate) struct TxnManager {
    /// Swapped whole by `publish`; a reader loads it without a lock or a
    /// reference count on a line every reader writes.
    published: ArcSwap<RootSet>,
    /// Held while a commit appends its record and publishes, so timestamps
    /// and publication share one order.
    pub publish: Mutex<()>,
    active: Mutex<ActiveSet>,
    /// The active set's horizon, refreshed whenever a transaction ends.
    horizon_read_ts: AtomicU64,
    horizon_begin: AtomicU64,
    /// Begin ids and SSI commit positions come from one counter.
    events: AtomicU64,
    pub ssi: Mutex<SsiState>,
    /// SSI key marks held in all tables' key versions.
    pub read_marks: AtomicUsize,
    /// Serializable transactions finished, to pace SSI cleanup.
    finishes: AtomicU64,
}

impl TxnManager {
    pub fn new(roots: RootSet) -> TxnManager {
        TxnManager {
            published: ArcSwap::from_pointee(roots),
            publish: Mutex::new(()),
            active: Mutex::default(),
            horizon_read_ts: AtomicU64::new(0),
            horizon_begin: AtomicU64::new(0),
            events: AtomicU64::new(0),
            ssi: Mutex::default(),
            read_marks: AtomicUsize::new(0),
            finishes: AtomicU64::new(0),
        }
    }

    pub fn published(&self) -> Arc<RootSet> {
        self.published.load_full()
    }

    /// The commit timestamp of the newest published version.
    pub fn published_ts(&self) -> u64 {
        self.published.load().ts
    }

    /// The newest published root of one table (cheaper than the whole set:
    /// one reference count, not the set's shared one).
    pub fn published_root(&self, table: u32) -> Option<Arc<Node>> {
        self.published.load().roots.get(&table).cloned()
    }

    /// Lend the newest published root of one table to `f`, taking no
    /// reference count (a point read's way in).
    pub fn with_published_root<R>(&self, table: u32, f: impl FnOnce(&Arc<Node>) -> R) -> Option<R> {
        self.published.load().roots.get(&table).map(f)
    }

    /// Publish the roots of `changed` tables (`None`: dropped) at `ts`.
    /// The caller holds `publish`.
    pub fn publish(&self, ts: u64, changed: impl IntoIterator<Item = (u32, Option<Arc<Node>>)>) {
        // One writer at a time (`publish` is held): load, then store.
        let mut roots = self.published.load().roots.clone();
        for (id, root) in changed {
            match root {
                Some(r) => roots.insert(id, r),
                None => roots.remove(&id),
            };
        }
        self.published.store(Arc::new(RootSet { ts, roots }));
    }

    pub fn next_event(&self) -> u64 {
        self.events.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Register a transaction on the newest snapshot. A serializable
    /// read-only transaction is tracked unless no serializable writer is
    /// active; deciding that under the lock that orders snapshots makes the
    /// safe-snapshot rule exact.
    fn begin(&self, opts: TxnOptions) -> (Arc<TxnShared>, Arc<RootSet>) {
        let mut active = self.active.lock().unwrap();
        let snapshot = self.published();
        let id = self.next_event();
        let ssi = match (opts.isolation, opts.read_only) {
            (Isolation::Snapshot, _) => SsiFlags::default(),
            (Isolation::Serializable, true) if active.serializable_writers == 0 => SsiFlags::default(),
            (Isolation::Serializable, read_only) => {
                active.serializable_writers += usize::from(!read_only);
                SsiFlags::tracked(read_only)
            }
        };
        let me = Arc::new(TxnShared {
            id,
            read_ts: snapshot.ts,
            state: AtomicU64::new(ACTIVE),
            cache_doomed: OnceLock::new(),
            ssi,
        });
        active.by_id.insert(id, (snapshot.ts, Arc::downgrade(&me)));
        *active.read_ts.entry(snapshot.ts).or_default() += 1;
        (me, snapshot)
    }

    fn end(&self, me: &TxnShared) {
        let mut active = self.active.lock().unwrap();
        if active.by_id.remove(&me.id).is_some() {
            let n = active.read_ts.get_mut(&me.read_ts).expect("active snapshot is counted");
            *n -= 1;
            if *n == 0 {
                active.read_ts.remove(&me.read_ts);
            }
            if me.ssi.tracked && !me.ssi.read_only {
                active.serializable_writers -= 1;
            }
            let (begin, read_ts) = self.oldest(&active);
            self.horizon_read_ts.store(read_ts, Ordering::Release);
            self.horizon_begin.store(begin, Ordering::Release);
        }
    }

    /// Begin id and snapshot of the oldest active transaction (or what the
    /// next one would get). Every open snapshot sees commits at or below
    /// that snapshot, and so will every snapshot taken later.
    fn oldest(&self, active: &ActiveSet) -> (u64, u64) {
        let begin = active.by_id.keys().next().copied().unwrap_or_else(|| self.events.load(Ordering::Acquire) + 1);
        let read_ts = active.read_ts.keys().next().copied().unwrap_or_else(|| self.published().ts);
        (begin, read_ts)
    }

    /// The horizon as of the last transaction end: at or below the true one.
    pub fn horizon(&self) -> Horizon {
        Horizon {
            read_ts: self.horizon_read_ts.load(Ordering::Acquire),
            begin: self.horizon_begin.load(Ordering::Acquire),
        }
    }

    /// Old versions pin more of the cache than allowed: roll back the
    /// oldest transaction (it fails at its next operation), unless it is
    /// already on its way out. Returns whether one was doomed.
    pub fn doom_oldest(&self, pinned: usize, limit: usize) -> bool {
        let active = self.active.lock().unwrap();
        let Some(me) = active.by_id.values().next().and_then(|(_, w)| w.upgrade()) else { return false };
        me.cache_doomed.set((pinned, limit)).is_ok()
    }
}

/// What the engine needs from a transaction to commit it.
pub(crate) struct CommitRequest<'a> {
    pub me: &'a Arc<TxnShared>,
    pub batch: &'a WriteBatch,
    /// Wait for the journal fsync (unless the engine never syncs).
    pub sync: bool,
}

/// Claim every key of `batch` for `me`; on a conflict release what was
/// claimed and fail. Used by plain batches, which claim at commit.
pub(crate) fn claim_batch(batch: &WriteBatch, me: &Arc<TxnShared>) -> Result<()> {
    let keys: Vec<(&Table, &[u8])> = batch.keys().collect();
    for (i, (t, key)) in keys.iter().enumerate() {
        let claimed = t.0.versions.lock().unwrap().claim(key, me);
        if let Err(holder) = claimed {
            for (t, key) in &keys[..i] {
                t.0.versions.lock().unwrap().release(key, me.id);
            }
            return Err(StorageError::WriteConflict { table: t.name().to_string(), key: key.to_vec(), holder });
        }
    }
    Ok(())
}

/// After publication: turn `me`'s intents into commits, collecting garbage
/// in tables whose key versions have grown.
pub(crate) fn stamp_batch(engine: &Engine, batch: &WriteBatch) {
    let txns = engine.txns();
    for (t, key) in batch.keys() {
        let mut v = t.0.versions.lock().unwrap();
        v.stamp(key);
        if v.grown() {
            v.gc(txns.horizon(), &txns.read_marks);
        }
    }
}

fn serialization_failure(engine: &Engine, me: &TxnShared, f: Failure) -> StorageError {
    bump(&engine.counters().serialization_failures, 1);
    StorageError::SerializationFailure { txn: me.id, other: f.other, detail: f.detail }
}

/// SSI prepare: fail, or take a commit position (see `SsiState::prepare`).
pub(crate) fn ssi_prepare(engine: &Engine, me: &TxnShared) -> Result<()> {
    let mut ssi = engine.txns().ssi.lock().unwrap();
    let event = engine.txns().next_event();
    ssi.prepare(me, event).map_err(|f| serialization_failure(engine, me, f))
}

pub(crate) fn begin_plain(engine: &Engine) -> Arc<TxnShared> {
    engine.txns().begin(TxnOptions::default()).0
}

pub(crate) fn finish(engine: &Engine, me: &TxnShared, committed_ts: Option<u64>) {
    if let Some(ts) = committed_ts {
        me.state.store(ts, Ordering::Release);
    } else if me.state.load(Ordering::Acquire) == ACTIVE {
        me.state.store(ABORTED, Ordering::Release);
    }
    engine.txns().end(me);
}

/// Set the commit timestamp; the caller holds the publish lock.
pub(crate) fn mark_committed(me: &TxnShared, ts: u64) {
    me.state.store(ts, Ordering::Release);
}

type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

#[derive(Default)]
struct Local {
    /// (table id, key) -> new value, `None` for a delete.
    writes: BTreeMap<(u32, Vec<u8>), Option<Vec<u8>>>,
    tables: HashMap<u32, Table>,
    /// Ranges cursors covered, not yet marked (serializable only).
    scanned: Vec<(Table, Range)>,
    /// Key marks left per table, and tables where a whole-table mark
    /// replaced them (serializable only).
    read_marks: HashMap<u32, usize>,
    coarse: std::collections::HashSet<u32>,
}

/// A transaction. Reads see its snapshot plus its own writes; `commit`
/// makes the writes visible at once; dropping it uncommitted rolls back.
///
/// After a `WriteConflict` the transaction stays usable (the failed write
/// did nothing); after a `SerializationFailure` every later operation
/// fails too and only a rollback is left.
pub struct Txn {
    engine: Engine,
    me: Arc<TxnShared>,
    snapshot: Arc<RootSet>,
    opts: TxnOptions,
    /// Serializable and not on a safe snapshot (see `ssi.rs`).
    tracked: bool,
    local: Mutex<Local>,
    finished: bool,
}

impl Engine {
    /// Begin a transaction on a snapshot of everything committed so far.
    pub fn begin(&self, opts: TxnOptions) -> Result<Txn> {
        self.check_open()?;
        let (me, snapshot) = self.txns().begin(opts);
        let tracked = me.ssi.tracked;
        Ok(Txn { engine: self.clone(), me, snapshot, opts, tracked, local: Mutex::default(), finished: false })
    }
}

impl Table {
    fn ssi_ref(&self) -> TableRef<'_> {
        TableRef { id: self.id(), name: self.name(), held: &self.0.scan_marks }
    }
}

impl Txn {
    pub fn id(&self) -> u64 {
        self.me.id
    }

    /// Whether the cache rolled the transaction back (its next operation
    /// fails with CachePressure).
    pub fn is_doomed(&self) -> bool {
        self.me.cache_doomed.get().is_some()
    }

    /// How many keys the transaction has written (its write set).
    pub fn write_count(&self) -> usize {
        self.local.lock().unwrap().writes.len()
    }

    /// The snapshot: every commit with a timestamp at or below it is visible.
    pub fn read_ts(&self) -> u64 {
        self.me.read_ts
    }

    pub fn options(&self) -> TxnOptions {
        self.opts
    }

    /// Fail if the cache rolled this transaction back, or SSI doomed it.
    fn check_cache(&self) -> Result<()> {
        if let Some(&(pinned, limit)) = self.me.cache_doomed.get() {
            return Err(StorageError::CachePressure { txn: self.me.id, pinned, limit });
        }
        match self.me.ssi.doomed() {
            Some(f) => Err(self.failure(f.clone())),
            None => Ok(()),
        }
    }

    fn failure(&self, f: Failure) -> StorageError {
        serialization_failure(&self.engine, &self.me, f)
    }

    fn root(&self, t: &Table) -> Option<Arc<Node>> {
        self.snapshot.roots.get(&t.id()).cloned()
    }

    /// Mark the ranges cursors covered since the last call.
    fn flush_scans(&self) -> Result<()> {
        if !self.tracked {
            return Ok(());
        }
        let scanned = std::mem::take(&mut self.local.lock().unwrap().scanned);
        for (t, range) in scanned {
            // Mark, then look for unseen versions (see `ssi.rs`).
            let ssi = &self.engine.txns().ssi;
            ssi.lock().unwrap().mark_range(&self.me, t.ssi_ref(), range.clone()).map_err(|f| self.failure(f))?;
            let writers = t.0.versions.lock().unwrap().unseen_in(&range, &self.me);
            if writers.iter().any(|(w, _)| self.edge_to(w)) {
                ssi.lock().unwrap().read_unseen(&self.me, t.name(), &writers).map_err(|f| self.failure(f))?;
            }
        }
        Ok(())
    }

    pub fn get(&self, t: &Table, key: &[u8]) -> Result<Option<Bytes>> {
        self.engine.check_table(t)?;
        self.check_cache()?;
        self.flush_scans()?;
        let coarse = {
            let local = self.local.lock().unwrap();
            if let Some(v) = local.writes.get(&(t.id(), key.to_vec())) {
                return Ok(v.as_deref().map(Bytes::copy_from_slice));
            }
            local.coarse.contains(&t.id())
        };
        let value = match self.root(t) {
            Some(root) => t.0.tree.get_in(&root, key)?,
            None => None,
        };
        if self.tracked {
            self.mark_key(t, key, !coarse)?;
        }
        Ok(value)
    }

    /// SSI for a read of `key`: leave a key mark (unless a whole-table mark
    /// covers the table) and look for versions the snapshot cannot see,
    /// in one hold of the table's key-versions lock.
    fn mark_key(&self, t: &Table, key: &[u8], mark: bool) -> Result<()> {
        let txns = self.engine.txns();
        let (marked, writers) =
            t.0.versions.lock().unwrap().read(key, &self.me, mark, txns.horizon(), &txns.read_marks);
        if marked {
            let mut local = self.local.lock().unwrap();
            let n = local.read_marks.entry(t.id()).or_default();
            *n += 1;
            if *n > crate::limits::ssi_marks_per_table_max
                || txns.read_marks.load(Ordering::Relaxed) > crate::limits::ssi_marks_max
            {
                // Too many: one whole-table mark covers this table from now on.
                local.coarse.insert(t.id());
                drop(local);
                txns.ssi.lock().unwrap().mark_table(&self.me, t.ssi_ref()).map_err(|f| self.failure(f))?;
            }
        }
        if writers.iter().any(|w| self.edge_to(w)) {
            let writers: Vec<_> = writers.into_iter().map(|w| (w, key.to_vec())).collect();
            txns.ssi.lock().unwrap().read_unseen(&self.me, t.name(), &writers).map_err(|f| self.failure(f))?;
        }
        Ok(())
    }

    /// Would reading past `writer`'s version give an rw edge? (Only
    /// serializable writers other than this transaction count.)
    fn edge_to(&self, writer: &TxnShared) -> bool {
        writer.ssi.tracked && writer.id != self.me.id
    }

    pub fn put(&self, t: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(t, key, Some(value))
    }

    pub fn delete(&self, t: &Table, key: &[u8]) -> Result<()> {
        self.write(t, key, None)
    }

    fn write(&self, t: &Table, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.engine.check_table(t)?;
        self.check_cache()?;
        if self.opts.read_only {
            return Err(StorageError::ReadOnlyTransaction { txn: self.me.id });
        }
        WriteBatch::check_sizes(key, value)?;
        self.flush_scans()?;
        let mut local = self.local.lock().unwrap();
        let slot = (t.id(), key.to_vec());
        if !local.writes.contains_key(&slot) {
            let conflict = |holder| {
                bump(&self.engine.counters().write_conflicts, 1);
                StorageError::WriteConflict { table: t.name().to_string(), key: key.to_vec(), holder }
            };
            if self.tracked {
                // Claim, then look for marks (see `ssi.rs`).
                let readers = {
                    let mut v = t.0.versions.lock().unwrap();
                    v.claim(key, &self.me).map_err(conflict)?;
                    v.concurrent_readers(key, &self.me)
                };
                // Claimed: the key is in the write set even if SSI fails, so rollback releases it.
                local.writes.insert(slot.clone(), None);
                local.tables.entry(t.id()).or_insert_with(|| t.clone());
                if !readers.is_empty() || t.0.scan_marks.load(Ordering::SeqCst) > 0 {
                    let mut ssi = self.engine.txns().ssi.lock().unwrap();
                    ssi.on_write(&self.me, t.ssi_ref(), key, &readers).map_err(|f| self.failure(f))?;
                }
            } else {
                t.0.versions.lock().unwrap().claim(key, &self.me).map_err(conflict)?;
            }
            local.tables.entry(t.id()).or_insert_with(|| t.clone());
        }
        local.writes.insert(slot, value.map(<[u8]>::to_vec));
        Ok(())
    }

    /// A cursor over `t` as this transaction sees it.
    pub fn cursor(&self, t: &Table) -> Result<TxnCursor<'_>> {
        self.engine.check_table(t)?;
        let root = self.root(t).unwrap_or_else(|| Arc::new(Node::empty_leaf()));
        let source: RootSource = Arc::new(move || root.clone());
        Ok(TxnCursor {
            txn: self,
            table: t.clone(),
            tree: Cursor::with_roots(t.0.tree.clone(), Some(source)),
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            pos: None,
            front: None,
            covered: None,
        })
    }

    /// Make every write visible at once, durable as the journal mode says.
    /// Returns the commit timestamp (the snapshot's for a transaction
    /// that wrote nothing).
    pub fn commit(mut self) -> Result<u64> {
        let r = self.commit_inner();
        if r.is_err() {
            self.rollback_inner();
        }
        r
    }

    fn commit_inner(&mut self) -> Result<u64> {
        self.check_cache()?;
        self.flush_scans()?;
        // The write set stays where rollback finds it if the commit fails.
        let mut batch = WriteBatch::new();
        {
            let local = self.local.lock().unwrap();
            for ((id, key), value) in &local.writes {
                let t = &local.tables[id];
                match value {
                    Some(v) => batch.put(t, key, v)?,
                    None => batch.delete(t, key)?,
                }
            }
        }
        if batch.is_empty() {
            if self.tracked {
                ssi_prepare(&self.engine, &self.me)?;
                self.me.ssi.committed_read_only();
            }
            self.finished = true;
            finish(&self.engine, &self.me, None);
            self.after_finish();
            bump(&self.engine.counters().txn_committed, 1);
            return Ok(self.me.read_ts);
        }
        let ts = self.engine.commit_batch(CommitRequest {
            me: &self.me,
            batch: &batch,
            sync: !self.opts.skip_journal_sync,
        })?;
        self.finished = true;
        self.after_finish();
        bump(&self.engine.counters().txn_committed, 1);
        Ok(ts)
    }

    /// Undo nothing (nothing was applied): release the claims, forget the
    /// SSI state.
    pub fn rollback(mut self) {
        self.rollback_inner();
    }

    fn rollback_inner(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let local = std::mem::take(&mut *self.local.lock().unwrap());
        finish(&self.engine, &self.me, None);
        for (id, key) in local.writes.keys() {
            local.tables[id].0.versions.lock().unwrap().release(key, self.me.id);
        }
        if self.tracked && self.me.ssi.abort() {
            self.engine.txns().ssi.lock().unwrap().aborted(self.me.id);
        }
        self.after_finish();
        bump(&self.engine.counters().txn_rolled_back, 1);
    }

    fn after_finish(&self) {
        // SSI cleanup walks every tracked transaction: now and then only.
        if self.tracked
            && (self.engine.txns().finishes.fetch_add(1, Ordering::Relaxed) + 1)
                .is_multiple_of(crate::limits::ssi_cleanup_every)
        {
            let h = self.engine.txns().horizon();
            self.engine.txns().ssi.lock().unwrap().cleanup(h);
        }
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        self.rollback_inner();
    }
}

impl std::fmt::Debug for Txn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Txn({}, snapshot {}, {:?})", self.me.id, self.me.read_ts, self.opts.isolation)
    }
}

/// A cursor inside a transaction: the snapshot's tree merged with the
/// transaction's own writes (which win; a delete hides the key). Under
/// serializable isolation the ranges it covers become SIREAD marks.
pub struct TxnCursor<'t> {
    txn: &'t Txn,
    table: Table,
    tree: Cursor,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Key of the last entry returned.
    pos: Option<Key>,
    /// The tree's next entry in direction `.0` (`true`: backwards).
    front: Option<(bool, Option<Entry>)>,
    /// Range covered since the last seek or change of direction.
    covered: Option<Range>,
}

fn in_bounds(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    crate::ssi::covers_bounds(lower, upper, key)
}

// `next`/`prev` are fallible moves, not `Iterator`s.
#[allow(clippy::should_implement_trait)]
impl TxnCursor<'_> {
    /// Limit every later move to keys within the bounds; resets the position.
    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        self.tree.set_bounds(lower.clone(), upper.clone());
        self.lower = lower;
        self.upper = upper;
        self.reset();
    }

    /// Forget the position: `next` starts at the first key, `prev` at the last.
    pub fn reset(&mut self) {
        self.flush();
        self.pos = None;
        self.front = None;
    }

    fn flush(&mut self) {
        if let Some(range) = self.covered.take() {
            if self.txn.tracked {
                self.txn.local.lock().unwrap().scanned.push((self.table.clone(), range));
            }
        }
    }

    /// Position on the first visible key >= `key` and return it.
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<(Key, Bytes)>> {
        self.reset();
        self.step(false, Bound::Included(key.to_vec()))
    }

    pub fn first(&mut self) -> Result<Option<(Key, Bytes)>> {
        self.reset();
        self.step(false, Bound::Unbounded)
    }

    pub fn last(&mut self) -> Result<Option<(Key, Bytes)>> {
        self.reset();
        self.step(true, Bound::Unbounded)
    }

    pub fn next(&mut self) -> Result<Option<(Key, Bytes)>> {
        let from = self.from(false);
        self.step(false, from)
    }

    pub fn prev(&mut self) -> Result<Option<(Key, Bytes)>> {
        let from = self.from(true);
        self.step(true, from)
    }

    fn from(&mut self, back: bool) -> Bound<Vec<u8>> {
        if self.front.as_ref().is_some_and(|(b, _)| *b != back) {
            self.flush();
            self.front = None;
        }
        match &self.pos {
            Some(k) => Bound::Excluded(k.to_vec()),
            None => Bound::Unbounded,
        }
    }

    /// The tree's first entry strictly beyond (or at, for `Included`) `from`.
    fn tree_entry(&mut self, back: bool, from: &Bound<Vec<u8>>) -> Result<Option<Entry>> {
        if let Some((b, e)) = &self.front {
            if *b == back {
                return Ok(e.clone());
            }
        }
        let e = match (from, back) {
            (Bound::Unbounded, false) => self.tree.first()?,
            (Bound::Unbounded, true) => self.tree.last()?,
            (Bound::Included(k), false) => self.tree.seek(k)?,
            (Bound::Excluded(k), false) => match self.tree.seek(k)? {
                Some(e) if *e.0 == **k => self.tree.next()?,
                other => other,
            },
            (Bound::Included(k) | Bound::Excluded(k), true) => {
                let inclusive = matches!(from, Bound::Included(_));
                match self.tree.seek(k)? {
                    Some(e) if inclusive && *e.0 == **k => Some(e),
                    Some(_) => self.tree.prev()?,
                    None => self.tree.last()?,
                }
            }
        };
        Ok(e)
    }

    /// The transaction's own first write to this table beyond `from`.
    fn own_entry(&self, back: bool, from: &Bound<Vec<u8>>) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let id = self.table.id();
        let local = self.txn.local.lock().unwrap();
        let lo = match (back, from) {
            (false, Bound::Included(k)) => Bound::Included((id, k.clone())),
            (false, Bound::Excluded(k)) => Bound::Excluded((id, k.clone())),
            _ => Bound::Included((id, Vec::new())),
        };
        let hi = match (back, from) {
            (true, Bound::Included(k)) => Bound::Included((id, k.clone())),
            (true, Bound::Excluded(k)) => Bound::Excluded((id, k.clone())),
            _ => Bound::Excluded((id + 1, Vec::new())),
        };
        let mut range =
            local.writes.range((lo, hi)).filter(|((t, k), _)| *t == id && in_bounds(&self.lower, &self.upper, k));
        let found = if back { range.next_back() } else { range.next() };
        found.map(|((_, k), v)| (k.clone(), v.clone()))
    }

    fn step(&mut self, back: bool, mut from: Bound<Vec<u8>>) -> Result<Option<(Key, Bytes)>> {
        self.txn.engine.check_table(&self.table)?;
        self.txn.check_cache()?;
        let start = from.clone();
        let found = loop {
            let tree = self.tree_entry(back, &from)?;
            let own = self.own_entry(back, &from);
            let take_own = match (&tree, &own) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some((tk, _)), Some((ok, _))) => {
                    if back {
                        ok.as_slice() >= &**tk
                    } else {
                        ok.as_slice() <= &**tk
                    }
                }
            };
            if !take_own {
                let next = if tree.is_some() {
                    if back {
                        self.tree.prev()?
                    } else {
                        self.tree.next()?
                    }
                } else {
                    None
                };
                self.front = Some((back, next));
                break tree;
            }
            let (key, value) = own.unwrap();
            // The tree entry with the same key is shadowed: step past it.
            if tree.as_ref().is_some_and(|(tk, _)| **tk == *key) {
                let next = if back { self.tree.prev()? } else { self.tree.next()? };
                self.front = Some((back, next));
            } else {
                self.front = Some((back, tree));
            }
            match value {
                Some(v) => break Some((Key::from(key), Bytes::from(v))),
                None => from = Bound::Excluded(key),
            }
        };
        self.cover(back, start, found.as_ref().map(|(k, _)| k.to_vec()));
        self.pos = found.as_ref().map(|(k, _)| k.clone());
        if found.is_none() {
            self.front = None;
        }
        Ok(found)
    }

    /// Record that the keys from `start` to `end` (or to the bound) were read.
    fn cover(&mut self, back: bool, start: Bound<Vec<u8>>, end: Option<Vec<u8>>) {
        if !self.txn.tracked {
            return;
        }
        let (edge, limit) = if back { (&self.upper, &self.lower) } else { (&self.lower, &self.upper) };
        let start = match start {
            Bound::Unbounded => edge.clone(),
            b => b,
        };
        let end = match end {
            Some(k) => Bound::Included(k),
            None => limit.clone(),
        };
        let (lo, hi) = if back { (end, start) } else { (start, end) };
        self.covered = Some(match self.covered.take() {
            None => (lo, hi),
            Some((l, h)) => {
                if back {
                    (lo, h)
                } else {
                    (l, hi)
                }
            }
        });
    }
}

impl Drop for TxnCursor<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}
