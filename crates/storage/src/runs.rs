//! Write-optimized tables: copy-on-write B+tree runs under one root, in
//! the manner of a log-structured merge tree (chosen over a Bε-tree in
//! docs/decisions.md, "The write-optimized index format").
//!
//! Such a table's root is a run list ([`Body::Runs`]), newest first.
//! `runs[0]` is the memtable: an ordinary in-memory B+tree that takes every
//! write. Past its budget (`TreeGeometry::memtable_max`) it is frozen: a
//! fresh memtable goes in front, and the old one becomes the newest frozen
//! run. Frozen runs' leaves are written and evicted like any B+tree's; the
//! checkpoint writes each run's dirty pages, then a manifest block that
//! lists the runs, as the table's root (`page.rs` has its format).
//!
//! Versions cost nothing new: a snapshot holds a run list as it holds any
//! root, and the writer copies the list (and the memtable's path) when a
//! snapshot still holds them. So a snapshot keeps exactly the runs it saw.
//!
//! Invariants:
//! 1. A run's values are tagged: `[RUN_PUT]` then the value, or
//!    `[RUN_DELETE]` alone (a tombstone), always in the leaf (no overflow
//!    blocks). For a key, the newest run that holds it decides.
//! 2. Only the memtable changes; a frozen run is never changed again, only
//!    replaced whole by a merge of it and its neighbours.
//! 3. A write reads no page: eviction never walks the memtable (run 0), so
//!    its pages are in memory, and a write touches only the memtable.
//! 4. The oldest run holds no tombstone: while the memtable is the only
//!    run, a delete removes the key instead of writing one, a merge that
//!    includes the oldest run drops tombstones, one that leaves the
//!    memtable alone purges its tombstones, and one of the oldest runs
//!    that comes out empty under newer runs leaves an empty run in their
//!    place (so none of those becomes the oldest).
//! 5. A merge writes its run as unnamed blocks (`block::Extents::unnamed`:
//!    a checkpoint taken meanwhile lists them as free) and installs it
//!    under the commit gate and the table's writer lock, starting a new
//!    epoch. The runs it replaced keep their blocks until every version of
//!    the older epochs is gone: old versions of the run list, cursors, and
//!    the old memtables that share pages with a frozen run all hold one.
//!    Until then every manifest names them as retired; retiring and
//!    freeing happen under the commit gate, so a checkpoint's snapshot
//!    sees both or neither. Eviction may drop their clean leaves (their
//!    blocks outlive every reader).

use crate::block::{BlockAddr, BlockBatch, BlockKind};
use crate::btree::{Entry, Evicted, Found, RootSource, Tree, TreeCursor, Written};
use crate::cache::CacheMeter;
use crate::compress::Compressor;
use crate::entries::Entries;
use crate::error::{Result, StorageError};
use crate::limits::{
    run_merge_ratio, run_write_batch_bytes, runs_frozen_max, runs_idle_merge_ms, runs_idle_merge_ratio, runs_max,
    runs_retired_max, short_merge_memtables,
};
use crate::page::{
    encode_internal, encode_leaf, encode_manifest, internal_entry_cost, leaf_entry_cost, leaf_entry_mem, Body, Child,
    Epoch, Internal, Key, Keys, Leaf, Manifest, Node, Run, Runs, Value, PAGE_HEADER_BYTES,
};
use crate::stats::bump;
use bytes::Bytes;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// Tag of a run's value that puts it (invariant 1)...
pub const RUN_PUT: u8 = 0;
/// ...and of a tombstone.
pub const RUN_DELETE: u8 = 1;

/// What a run's tagged value says: the value, or `None` for a tombstone.
pub fn untag(tagged: &[u8]) -> std::result::Result<Option<&[u8]>, String> {
    match tagged.split_first() {
        Some((&RUN_PUT, value)) => Ok(Some(value)),
        Some((&RUN_DELETE, [])) => Ok(None),
        _ => Err(format!("a run's value with a bad tag: {:02x?}", &tagged[..tagged.len().min(4)])),
    }
}

/// Runs a merge replaced, freed once `epoch` is gone (invariant 5).
pub(crate) struct Retired {
    epoch: Weak<Epoch>,
    runs: Vec<Run>,
}

/// Whether a write-optimized table is quiet: the writes it took, and the
/// count the background merger saw last with when it saw it change.
#[derive(Default)]
pub(crate) struct Quiet {
    writes: AtomicU64,
    seen: Mutex<Option<(u64, Instant)>>,
}

impl Quiet {
    /// Count the quiet time again from the next look.
    pub(crate) fn restart(&self) {
        *self.seen.lock().unwrap() = None;
    }

    /// Whether no write came since the last call for `quiet`; the first
    /// call, and every call after a write, starts the count again.
    fn for_at_least(&self, quiet: Duration) -> bool {
        let writes = self.writes.load(Ordering::Relaxed);
        let mut seen = self.seen.lock().unwrap();
        match *seen {
            Some((w, since)) if w == writes => since.elapsed() >= quiet,
            _ => {
                *seen = Some((writes, Instant::now()));
                false
            }
        }
    }
}

/// The root of a new write-optimized table: an empty memtable.
pub(crate) fn empty_runs() -> Arc<Node> {
    let memtable = Run { root: Child::in_memory(Arc::new(Node::empty_leaf())), bytes: 0 };
    Arc::new(Node::new(Body::Runs(Runs { runs: vec![memtable], memtable_bytes: 0, epoch: Arc::default() })))
}

/// Charge a root just made or read to the cache; a run list's runs in memory too.
pub(crate) fn charge_tree_top(root: &Arc<Node>, meter: &Arc<CacheMeter>) {
    root.recharge(meter);
    if let Body::Runs(runs) = &root.body {
        for run in &runs.runs {
            if let Some(n) = run.root.loaded() {
                n.recharge(meter);
            }
        }
    }
}

/// An eviction hand inside a run list: the run's index, then a key in it.
fn hand_at(run: usize, key: &[u8]) -> Vec<u8> {
    let mut hand = (run as u32).to_be_bytes().to_vec();
    hand.extend_from_slice(key);
    hand
}

/// Which frozen runs to merge, `runs[1..=last]`, if any, of those newer
/// than `runs[free]` (the newest run a merge in flight reads, or
/// `runs.len()`): the newest while together they are at least the next
/// older one's size over the ratio; the two newest once there are too many.
fn merge_due(runs: &[Run], free: usize) -> Option<usize> {
    let frozen = free.saturating_sub(1);
    if frozen < 2 {
        return None;
    }
    let mut acc = runs[1].bytes;
    let mut last = 1;
    while last < frozen && acc.saturating_mul(run_merge_ratio) >= runs[last + 1].bytes {
        acc += runs[last + 1].bytes;
        last += 1;
    }
    match last {
        1 if runs.len() - 1 > runs_frozen_max => Some(2),
        1 => None,
        _ => Some(last),
    }
}

/// Which merges a merger takes. A long merge (of the table's oldest,
/// biggest runs) must not hold up the short ones that keep the number of
/// runs down meanwhile, or writers stall behind it
/// (`limits::runs_frozen_stall`): each lane has a thread of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The merge due, whatever its size (explicit calls).
    Any,
    /// Merges of at most [`short_merge_max`] bytes; when the merge due is
    /// longer and there are too many runs, the newest runs that fit.
    Short,
    /// Merges longer than that.
    Long,
}

/// The most bytes a short merge takes: eight memtable budgets, or an
/// eighth of the table, whichever is more (so short merges keep pace with
/// the long ones, which grow with the table).
fn short_merge_max(runs: &[Run], memtable_max: usize) -> u64 {
    let table: u64 = runs.iter().map(|r| r.bytes).sum();
    (memtable_max as u64).saturating_mul(short_merge_memtables).max(table / 8)
}

/// The merge `lane` takes among `runs[1..free]` (see [`merge_due`]).
fn pick_merge(runs: &[Run], free: usize, lane: Lane, short_max: u64) -> Option<usize> {
    let bytes = |last: usize| runs[1..=last].iter().map(|r| r.bytes).sum::<u64>();
    let due = merge_due(runs, free);
    match lane {
        Lane::Any => due,
        Lane::Long => due.filter(|&last| bytes(last) > short_max),
        Lane::Short => match due {
            Some(last) if bytes(last) <= short_max => Some(last),
            _ if runs.len() - 1 > runs_frozen_max => {
                let mut last = 1;
                while last + 1 < free && bytes(last + 1) <= short_max {
                    last += 1;
                }
                (last >= 2).then_some(last)
            }
            _ => None,
        },
    }
}

/// The frozen runs merges in flight read, by their root slots, so that two
/// merges never take the same run.
#[derive(Default)]
pub(crate) struct InFlight {
    runs: Mutex<Vec<Arc<Child>>>,
    done: Condvar,
}

impl InFlight {
    /// How many runs merges are reading.
    pub(crate) fn len(&self) -> usize {
        self.runs.lock().unwrap().len()
    }
}

/// Which runs [`Tree::take_merge`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// The merge due in a lane.
    Due(Lane),
    /// Every frozen run, if no merge is in flight.
    Idle,
    /// Every frozen run, once the merges in flight are done.
    All,
}

/// Frozen runs a merge took; given back to other merges when dropped.
pub(crate) struct Taken<'t> {
    tree: &'t Tree,
    pub inputs: Vec<Run>,
    /// They include the oldest run.
    pub bottom: bool,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.tree.merging.runs.lock().unwrap();
        in_flight.retain(|r| !self.inputs.iter().any(|i| Arc::ptr_eq(&i.root, r)));
        self.tree.merging.done.notify_all();
    }
}

impl Tree {
    fn corrupt(&self, detail: String) -> StorageError {
        StorageError::corruption(self.bf.path(), 0, detail)
    }

    /// Look `key` up run by run, newest first, and lend its value to `f`.
    pub(crate) fn runs_get<R>(&self, runs: &Runs, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let mut f = Some(f);
        for run in &runs.runs {
            let root = self.load_child(&run.root)?;
            let decided = self.find_in(&root, key, |found| {
                let tagged = match found {
                    Found::Packed(view, i) => view.value_slice(i),
                    Found::Entry(v) => self.value_ref(v)?,
                };
                let value = untag(tagged).map_err(|e| self.corrupt(e))?;
                Ok(value.map(|v| f.take().expect("the first run that holds the key decides")(v)))
            })?;
            if let Some(answer) = decided {
                return Ok(answer);
            }
        }
        Ok(None)
    }

    /// `Tree::apply` on a run list: every write goes to the memtable,
    /// tagged (invariants 1 and 3); past its budget the memtable is frozen.
    pub(crate) fn apply_runs<'k>(
        &self,
        root: &mut Arc<Node>,
        ops: impl Iterator<Item = (&'k [u8], Option<&'k [u8]>)>,
    ) -> Result<()> {
        self.quiet.writes.fetch_add(1, Ordering::Relaxed);
        let node = self.make_mut(root);
        let Body::Runs(runs) = &mut node.body else { unreachable!("apply_runs on a run list") };
        let only_run = runs.runs.len() == 1;
        // The memtable leaves its slot while it changes: a snapshot that
        // still holds it keeps it, and the writer then changes a copy.
        let mut memtable: Arc<Node> = self.load_child(&runs.runs[0].root)?.clone();
        runs.runs[0].root = Arc::new(Child::default());
        let mut grew = Grew::default();
        let applied = self.apply_memtable(&mut memtable, only_run, ops, &mut grew);
        runs.runs[0].root = Child::in_memory(memtable);
        runs.runs[0].bytes += grew.image;
        runs.memtable_bytes += grew.mem;
        if runs.memtable_bytes > self.geometry.memtable_max {
            self.freeze(runs)?;
        }
        self.charge(root);
        applied
    }

    fn apply_memtable<'k>(
        &self,
        memtable: &mut Arc<Node>,
        only_run: bool,
        ops: impl Iterator<Item = (&'k [u8], Option<&'k [u8]>)>,
        grew: &mut Grew,
    ) -> Result<()> {
        let mut tagged = Vec::new();
        for (key, value) in ops {
            let value = match value {
                // Invariant 4.
                None if only_run => {
                    self.delete_root(memtable, key)?;
                    continue;
                }
                None => Value::Inline(Bytes::from_static(&[RUN_DELETE])),
                Some(v) => {
                    tagged.clear();
                    tagged.push(RUN_PUT);
                    tagged.extend_from_slice(v);
                    Value::Inline(Bytes::copy_from_slice(&tagged))
                }
            };
            grew.mem += leaf_entry_mem(key, &value);
            grew.image += leaf_entry_cost(key, &value) as u64;
            self.put_root(memtable, key, value)?;
        }
        Ok(())
    }

    /// Put a fresh memtable in front: the old one is the newest frozen
    /// run. `false`: it was empty (its budget spent on entries written and
    /// removed again), or merges are behind and it grows instead.
    fn freeze(&self, runs: &mut Runs) -> Result<bool> {
        runs.memtable_bytes = 0;
        if runs.runs.len() >= runs_max || self.load_child(&runs.runs[0].root)?.entries() == 0 {
            return Ok(false);
        }
        let memtable = Arc::new(Node::empty_leaf());
        self.charge(&memtable);
        runs.runs.insert(0, Run { root: Child::in_memory(memtable), bytes: 0 });
        bump(&self.counters.memtables_frozen, 1);
        Ok(true)
    }

    /// Freeze the memtable now, if it holds anything; `false` for a
    /// B+tree. The caller holds the table's writer lock. The contents do
    /// not change, so the published version stays valid.
    pub fn freeze_memtable(&self) -> Result<bool> {
        let mut root = self.root.write().unwrap();
        let Body::Runs(runs) = &root.body else { return Ok(false) };
        if self.load_child(&runs.runs[0].root)?.entries() == 0 {
            return Ok(false);
        }
        let node = self.make_mut(&mut root);
        let Body::Runs(runs) = &mut node.body else { unreachable!() };
        let frozen = self.freeze(runs)?;
        self.charge(&root);
        Ok(frozen)
    }

    /// The run roots of a version of the table, newest first, and its
    /// epoch; `None` for a B+tree.
    fn runs_of(&self, root: &Arc<Node>) -> Result<Option<VersionRuns>> {
        let Body::Runs(runs) = &root.body else { return Ok(None) };
        let roots = runs.runs.iter().map(|r| Ok(self.load_child(&r.root)?.clone())).collect::<Result<_>>()?;
        Ok(Some(VersionRuns { roots, epoch: runs.epoch.clone() }))
    }

    /// `Tree::evict` over a run list: the frozen runs in turn, each from
    /// its own hand; never the memtable (invariant 3). `hand` names the
    /// run (`hand_at`); `true` when the walk covered every run.
    pub(crate) fn evict_runs(
        &self,
        runs: &Runs,
        budget: usize,
        dirty: bool,
        hand: &mut Vec<u8>,
        done: &mut Evicted,
    ) -> Result<bool> {
        let (start, key) = match hand.split_first_chunk::<4>() {
            Some((run, key)) => (u32::from_be_bytes(*run) as usize, key.to_vec()),
            None => (1, Vec::new()),
        };
        for i in start.max(1)..runs.runs.len() {
            if done.bytes >= budget {
                *hand = hand_at(i, &[]);
                return Ok(false);
            }
            let child = &runs.runs[i].root;
            let Some(n) = child.loaded() else { continue };
            match &n.body {
                Body::Leaf(_) => self.evict_leaf(child, &n, dirty, done)?,
                Body::Internal(_) => {
                    let from_hand = i == start;
                    let mut run_hand = if from_hand { key.clone() } else { Vec::new() };
                    if !self.evict_in(&n, budget, dirty, &mut run_hand, from_hand, done)? {
                        *hand = hand_at(i, &run_hand);
                        return Ok(false);
                    }
                }
                Body::Runs(_) => return Err(self.misplaced_runs()),
            }
        }
        Ok(true)
    }

    /// Write every run's dirty pages; returns the manifest that lists the
    /// runs (an empty memtable left out: reading a manifest starts a new
    /// one) and `retired`, the runs merges replaced as of the checkpoint's
    /// snapshot, whose blocks are still allocated.
    fn write_runs(&self, runs: &Runs, retired: &[Run], written: &mut Option<&mut Written>) -> Result<Vec<u8>> {
        let mut m = Manifest::default();
        for (i, run) in runs.runs.iter().enumerate() {
            let empty = |n: &Node| matches!(n.body, Body::Leaf(_)) && n.entries() == 0 && n.disk.addr().is_none();
            if i == 0 && run.root.loaded().is_some_and(|n| empty(&n)) {
                continue; // an empty memtable never written (an empty frozen run keeps its place)
            }
            m.live.push((self.run_root(run, written)?, run.bytes));
        }
        for run in retired {
            m.retired.push((self.run_root(run, &mut None)?, run.bytes));
        }
        Ok(encode_manifest(&m))
    }

    /// Where a run's root lies on disk, its dirty pages written first.
    fn run_root(&self, run: &Run, written: &mut Option<&mut Written>) -> Result<BlockAddr> {
        match run.root.loaded() {
            Some(n) => self.write_dirty_in(&n, written),
            None => Ok(run.root.addr().expect("a run not in memory has an address")),
        }
    }

    /// Write a run list's manifest (and every run's dirty pages) unless
    /// its block is written already.
    pub(crate) fn write_manifest(
        &self,
        node: &Node,
        runs: &Runs,
        retired: &[Run],
        written: &mut Option<&mut Written>,
    ) -> Result<BlockAddr> {
        if let Some(addr) = node.disk.addr() {
            return Ok(addr);
        }
        let image = self.write_runs(runs, retired, written)?;
        let addr = self.bf.write_block(BlockKind::Manifest, &image)?;
        bump(&self.counters.data_bytes_written, addr.size as u64);
        bump(&self.counters.internal_block_bytes_written, addr.size as u64);
        bump(&self.io.internal, addr.size as u64);
        node.disk.attach(addr, &self.free());
        Ok(addr)
    }

    /// The runs merges replaced that are not freed yet (for a checkpoint's snapshot).
    pub fn retired_runs(&self) -> Vec<Run> {
        self.retired.lock().unwrap().iter().flat_map(|r| r.runs.iter().cloned()).collect()
    }

    /// Take the frozen runs a merge reads now, as `take` says, if any
    /// (never a run another merge in flight reads).
    pub(crate) fn take_merge(&self, take: Take) -> Option<Taken<'_>> {
        let mut in_flight = self.merging.runs.lock().unwrap();
        if take == Take::All {
            while !in_flight.is_empty() {
                in_flight = self.merging.done.wait(in_flight).unwrap();
            }
        }
        let root = self.snapshot();
        let Body::Runs(runs) = &root.body else { return None };
        if self.merges_paused() {
            return None;
        }
        let runs = &runs.runs;
        let free = runs.iter().position(|r| in_flight.iter().any(|f| Arc::ptr_eq(f, &r.root))).unwrap_or(runs.len());
        let last = match take {
            Take::Idle | Take::All => Some(runs.len() - 1).filter(|&l| l >= 2 && free == runs.len())?,
            Take::Due(lane) => pick_merge(runs, free, lane, short_merge_max(runs, self.geometry.memtable_max))?,
        };
        let inputs = runs[1..=last].to_vec();
        in_flight.extend(inputs.iter().map(|r| r.root.clone()));
        Some(Taken { tree: self, inputs, bottom: last + 1 == runs.len() })
    }

    /// An idle merge is due: the table took no write for
    /// `limits::runs_idle_merge_ms` (as the merger's calls saw), no merge
    /// is due by size, and it has two or more frozen runs, those newer
    /// than the oldest worth rewriting it for (`runs_idle_merge_ratio`).
    pub(crate) fn idle_merge_due(&self) -> bool {
        if !self.quiet.for_at_least(Duration::from_millis(runs_idle_merge_ms)) {
            return false;
        }
        let root = self.snapshot();
        let Body::Runs(runs) = &root.body else { return false };
        if runs.runs.len() < 3 || merge_due(&runs.runs, runs.runs.len()).is_some() {
            return false;
        }
        let (oldest, newer) = runs.runs[1..].split_last().expect("two frozen runs");
        let newer: u64 = newer.iter().map(|r| r.bytes).sum();
        newer.saturating_mul(runs_idle_merge_ratio) >= oldest.bytes
    }

    /// Readers of old versions hold too many replaced runs: merges wait
    /// for them (and writers do not wait for merges).
    /// Frozen runs in the live run list (0 for a B+tree).
    pub(crate) fn runs_frozen(&self) -> usize {
        match &self.snapshot().body {
            Body::Runs(runs) => runs.runs.len() - 1,
            _ => 0,
        }
    }

    pub(crate) fn merges_paused(&self) -> bool {
        self.retired.lock().unwrap().iter().map(|r| r.runs.len()).sum::<usize>() >= runs_retired_max
    }

    /// Merge `inputs` (adjacent frozen runs, newest first) into one run of
    /// unnamed blocks; `bottom`: they include the oldest run, so tombstones
    /// go (invariant 4). Reads the runs without any lock. `None` if
    /// `cancel` said so (asked now and then); nothing is left written.
    pub(crate) fn build_merged(
        self: &Arc<Tree>,
        inputs: &[Run],
        bottom: bool,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Option<Built>> {
        let mut merge = Merge::default();
        for run in inputs {
            let root: Arc<Node> = self.load_child(&run.root)?.clone();
            merge.runs.push(TreeCursor::with_roots(self.clone(), Some(Arc::new(move || root.clone()))).reading_ahead());
        }
        merge.fill(false, TreeCursor::first_to)?;
        let mut out = RunBuilder::new(self);
        let built = match self.merge_into(&mut merge, &mut out, bottom, cancel) {
            Ok(true) => out.finish().map(Some),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        };
        if !matches!(built, Ok(Some(_))) {
            out.abandon();
        }
        built
    }

    /// `Ok(false)`: cancelled.
    fn merge_into(
        &self,
        merge: &mut Merge,
        out: &mut RunBuilder,
        bottom: bool,
        cancel: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let mut n = 0u32;
        while merge.pick()? {
            n = n.wrapping_add(1);
            if n.is_multiple_of(4096) && cancel() {
                return Ok(false);
            }
            let (_, tagged) = merge.entry()?.expect("a pick stands on an entry");
            if !bottom || untag(tagged).map_err(|e| self.corrupt(e))?.is_some() {
                let (key, tagged) = merge.current()?.expect("a pick stands on an entry");
                out.push(key, tagged)?;
            }
        }
        Ok(true)
    }

    /// Put a merge's run in place of its inputs in the live run list; the
    /// caller holds the commit gate and the table's writer lock, and
    /// publishes the result. Starts a new epoch and retires the inputs
    /// (invariant 5).
    pub(crate) fn install_merged(&self, inputs: &[Run], built: Built) -> Result<()> {
        let mut root = self.root.write().unwrap();
        let node = self.make_mut(&mut root);
        let Body::Runs(runs) = &mut node.body else { unreachable!("a merge of a run list") };
        let at = runs.runs.iter().position(|r| Arc::ptr_eq(&r.root, &inputs[0].root));
        let at = at.expect("a merge's inputs stay in the live run list: only merges remove runs");
        for (k, input) in inputs.iter().enumerate() {
            assert!(Arc::ptr_eq(&runs.runs[at + k].root, &input.root), "a merge's inputs are adjacent");
        }
        let merged = match built.root {
            Some((addr, bytes)) => Some(Run { root: Child::on_disk(addr), bytes }),
            // Every entry went, and newer frozen runs stay: an empty run
            // keeps the bottom place, so that none of them (which may hold
            // tombstones: merged meanwhile, or frozen) becomes the oldest
            // (invariant 4). The next merge of the oldest drops it.
            None if at > 1 && at + inputs.len() == runs.runs.len() => {
                let empty = Arc::new(Node::empty_leaf());
                self.charge(&empty);
                Some(Run { root: Child::in_memory(empty), bytes: 0 })
            }
            None => None,
        };
        let removed: Vec<Run> = runs.runs.splice(at..at + inputs.len(), merged).collect();
        if runs.runs.len() == 1 {
            // Every entry went: the memtable is now the oldest run (invariant 4).
            self.purge_tombstones(&mut runs.runs[0])?;
        }
        let old = std::mem::take(&mut runs.epoch);
        old.newer.set(runs.epoch.clone()).expect("an epoch is ended once");
        self.retired.lock().unwrap().push(Retired { epoch: Arc::downgrade(&old), runs: removed });
        drop(old);
        self.charge(&root);
        self.bf.name_from_next_checkpoint(&built.blocks);
        bump(&self.counters.runs_merged, 1);
        Ok(())
    }

    /// Remove the tombstones of a memtable that became the only run (its
    /// pages are in memory: invariant 3).
    fn purge_tombstones(&self, memtable: &mut Run) -> Result<()> {
        let mut dead = Vec::new();
        self.tombstones_in(&**self.load_child(&memtable.root)?, &mut dead)?;
        if dead.is_empty() {
            return Ok(());
        }
        let mut node: Arc<Node> = self.load_child(&memtable.root)?.clone();
        memtable.root = Arc::new(Child::default());
        let purged = dead.iter().try_for_each(|k| self.delete_root(&mut node, k));
        memtable.root = Child::in_memory(node);
        purged
    }

    fn tombstones_in(&self, node: &Node, out: &mut Vec<Key>) -> Result<()> {
        match &node.body {
            Body::Leaf(l) => {
                for (k, v) in l.entries.iter() {
                    if untag(self.value_ref(v)?).map_err(|e| self.corrupt(e))?.is_none() {
                        out.push(k.clone());
                    }
                }
                Ok(())
            }
            Body::Internal(int) => {
                int.children.iter().try_for_each(|c| self.tombstones_in(&**self.load_child(c)?, out))
            }
            Body::Runs(_) => Err(self.misplaced_runs()),
        }
    }

    /// Free the blocks of retired runs no version can read any more. The
    /// caller holds the commit gate and the table's writer lock.
    pub(crate) fn reap_retired(&self) -> Result<()> {
        let ready: Vec<Retired> = {
            let mut retired = self.retired.lock().unwrap();
            let (ready, waiting) = std::mem::take(&mut *retired).into_iter().partition(|r| r.epoch.strong_count() == 0);
            *retired = waiting;
            ready
        };
        if ready.is_empty() {
            return Ok(());
        }
        // The manifest names retired runs: the next checkpoint writes one without these.
        let mut root = self.root.write().unwrap();
        self.make_mut(&mut root);
        self.charge(&root);
        drop(root);
        for r in ready {
            for run in &r.runs {
                self.free_retired_run(&run.root)?;
            }
        }
        Ok(())
    }

    /// Free every block of a run no version can read.
    pub(crate) fn free_retired_run(&self, slot: &Child) -> Result<()> {
        let depth = self.leaf_depth(slot)?;
        self.free_run(slot, depth)?;
        bump(&self.counters.runs_reaped, 1);
        Ok(())
    }

    /// Levels below a run's root slot to its leaves (loading its leftmost path).
    fn leaf_depth(&self, slot: &Child) -> Result<usize> {
        let mut node: Arc<Node> = self.load_child(slot)?.clone();
        for depth in 0..crate::limits::tree_depth_max {
            let next = match &node.body {
                Body::Leaf(_) => return Ok(depth),
                Body::Internal(int) => self.load_child(&int.children[0])?.clone(),
                Body::Runs(_) => return Err(self.misplaced_runs()),
            };
            node = next;
        }
        Err(self.corrupt("a run deeper than the depth limit".into()))
    }

    /// Free every block of the retired run under `slot`; leaves not in
    /// memory are freed by address, unread. A block that is not allocated
    /// (a corrupt manifest read at open) is corruption.
    fn free_run(&self, slot: &Child, depth: usize) -> Result<()> {
        let unallocated = std::cell::Cell::new(None);
        let free = |a: BlockAddr| {
            if !self.bf.free_checked(a) {
                unallocated.set(Some(a));
            }
        };
        if depth == 0 {
            match slot.loaded() {
                Some(n) => n.disk.retire(&free),
                None => free(slot.addr().expect("a leaf not in memory has an address")),
            }
        } else {
            let node = self.load_child(slot)?;
            let Body::Internal(int) = &node.body else {
                return Err(self.corrupt("a run's leaves at different depths".into()));
            };
            for c in &int.children {
                self.free_run(c, depth - 1)?;
            }
            node.disk.retire(&free);
        }
        match unallocated.get() {
            Some(a) => Err(StorageError::corruption(self.bf.path(), a.offset, "a retired run names a free block")),
            None => Ok(()),
        }
    }

    /// Eviction over retired runs: clean leaves only (invariant 5).
    pub(crate) fn evict_retired(&self, budget: usize, done: &mut Evicted) -> Result<()> {
        let retired = self.retired.lock().unwrap();
        for run in retired.iter().flat_map(|r| &r.runs) {
            if done.bytes >= budget {
                break;
            }
            let Some(n) = run.root.loaded() else { continue };
            match &n.body {
                Body::Leaf(_) => self.evict_leaf(&run.root, &n, false, done)?,
                Body::Internal(_) => {
                    self.evict_in(&n, budget, false, &mut Vec::new(), false, done)?;
                }
                Body::Runs(_) => return Err(self.misplaced_runs()),
            }
        }
        Ok(())
    }
}

/// The runs of one version, and the epoch that keeps their blocks.
struct VersionRuns {
    roots: Vec<Arc<Node>>,
    epoch: Arc<Epoch>,
}

/// What a write added to the memtable: charged memory and image bytes.
#[derive(Default)]
struct Grew {
    mem: usize,
    image: u64,
}

/// A merge's output: its root page and leaf bytes (`None` when every
/// entry was a tombstone that went), and every block it wrote.
pub(crate) struct Built {
    root: Option<(BlockAddr, u64)>,
    blocks: Vec<BlockAddr>,
}

/// Builds a run bottom up from entries in key order, writing pages as
/// unnamed blocks as they fill: leaves in batches of about
/// `limits::run_write_batch_bytes` (one write each, side by side on disk,
/// so a later merge reads them ahead), internal pages one by one. Memory
/// stays at a batch plus one page a level.
struct RunBuilder<'t> {
    tree: &'t Tree,
    leaf: Entries,
    leaf_bytes: usize,
    /// Per level above the leaves: children not yet under a parent (lowest
    /// key, block) and their cost in an internal page.
    levels: Vec<(Vec<(Key, BlockAddr)>, usize)>,
    /// Leaves built but not yet written (one write per batch), and their
    /// lowest keys.
    batch: BlockBatch,
    batched: Vec<Key>,
    blocks: Vec<BlockAddr>,
    bytes: u64,
}

impl<'t> RunBuilder<'t> {
    fn new(tree: &'t Tree) -> RunBuilder<'t> {
        RunBuilder {
            tree,
            leaf: Entries::new(),
            leaf_bytes: 0,
            levels: Vec::new(),
            batch: BlockBatch::default(),
            batched: Vec::new(),
            blocks: Vec::new(),
            bytes: 0,
        }
    }

    fn push(&mut self, key: Key, tagged: Bytes) -> Result<()> {
        let value = Value::Inline(tagged);
        let cost = leaf_entry_cost(&key, &value);
        if !self.leaf.is_empty() && PAGE_HEADER_BYTES + self.leaf_bytes + cost > self.tree.geometry.leaf_page_max {
            self.flush_leaf()?;
        }
        self.leaf_bytes += cost;
        self.bytes += cost as u64;
        self.leaf.push((key, value));
        Ok(())
    }

    /// Write an internal page.
    fn write(&mut self, kind: BlockKind, image: &[u8]) -> Result<BlockAddr> {
        let addr = self.tree.bf.write_block_unnamed(kind, Compressor::None, image)?;
        self.written(kind, addr);
        Ok(addr)
    }

    /// Write the batched leaves with one write; their parent level takes them.
    fn write_batch(&mut self) -> Result<()> {
        let addrs = self.tree.bf.write_batch_unnamed(&mut self.batch)?;
        let keys = std::mem::take(&mut self.batched);
        assert_eq!(keys.len(), addrs.len(), "a batch's leaves and their keys pair up");
        // Every block is recorded before a parent is written, so an
        // abandoned merge frees them all.
        for &addr in &addrs {
            self.written(BlockKind::Leaf, addr);
        }
        for (key, addr) in keys.into_iter().zip(addrs) {
            self.add_child(0, key, addr)?;
        }
        Ok(())
    }

    fn written(&mut self, kind: BlockKind, addr: BlockAddr) {
        let tree = self.tree;
        self.blocks.push(addr);
        let size = addr.size as u64;
        bump(&tree.counters.data_bytes_written, size);
        if kind == BlockKind::Leaf {
            bump(&tree.counters.leaf_pages_written, 1);
            bump(&tree.counters.leaf_block_bytes_written, size);
            bump(&tree.io.leaf, size);
        } else {
            bump(&tree.counters.internal_pages_written, 1);
            bump(&tree.counters.internal_block_bytes_written, size);
            bump(&tree.io.internal, size);
        }
    }

    fn flush_leaf(&mut self) -> Result<()> {
        let entries = std::mem::take(&mut self.leaf);
        // A copy: the merge's keys are slices of its input pages' buffers,
        // which a pending parent would keep alive uncounted by the cache.
        let first = Bytes::copy_from_slice(&entries.get(0).expect("a leaf is flushed with entries").0);
        let leaf = Leaf { entries, bytes: PAGE_HEADER_BYTES + self.leaf_bytes, arena: None, may_hold_big: false };
        self.leaf_bytes = 0;
        let image = encode_leaf(&leaf, &|_| unreachable!("runs keep their values in the leaf"));
        self.batch.push(BlockKind::Leaf, self.tree.geometry.compressor, &image)?;
        self.batched.push(first);
        if self.batch.bytes() >= run_write_batch_bytes {
            self.write_batch()?;
        }
        Ok(())
    }

    /// A page of level `level` (0: leaves) is written: its parent level takes it.
    fn add_child(&mut self, level: usize, key: Key, addr: BlockAddr) -> Result<()> {
        if self.levels.len() == level {
            self.levels.push((Vec::new(), PAGE_HEADER_BYTES));
        }
        let cost = internal_entry_cost(&key);
        let (pending, bytes) = &self.levels[level];
        if pending.len() >= 2 && bytes + cost > self.tree.geometry.internal_page_max {
            self.flush_level(level)?;
        }
        let (pending, bytes) = &mut self.levels[level];
        pending.push((key, addr));
        *bytes += cost;
        Ok(())
    }

    /// Write the pending children of `level` as one internal page.
    fn flush_level(&mut self, level: usize) -> Result<()> {
        let (pending, _) = std::mem::replace(&mut self.levels[level], (Vec::new(), PAGE_HEADER_BYTES));
        let first = pending[0].0.clone();
        let keys: Vec<Key> =
            pending.iter().enumerate().map(|(i, (k, _))| if i == 0 { Bytes::new() } else { k.clone() }).collect();
        let bytes = PAGE_HEADER_BYTES + keys.iter().map(|k| internal_entry_cost(k)).sum::<usize>();
        let children = pending.iter().map(|(_, a)| Child::on_disk(*a)).collect();
        let int = Internal { keys: Keys::shared(keys), children, bytes };
        let image = encode_internal(&int, &|i| pending[i].1);
        let addr = self.write(BlockKind::Internal, &image)?;
        self.add_child(level + 1, first, addr)
    }

    /// Write what is left, level by level, up to one root.
    fn finish(&mut self) -> Result<Built> {
        if !self.leaf.is_empty() {
            self.flush_leaf()?;
        }
        self.write_batch()?;
        let mut level = 0;
        let root = loop {
            let Some((pending, _)) = self.levels.get(level) else { break None };
            if pending.len() == 1 && level + 1 == self.levels.len() {
                break Some((pending[0].1, self.bytes));
            }
            self.flush_level(level)?;
            level += 1;
        };
        Ok(Built { root, blocks: std::mem::take(&mut self.blocks) })
    }

    /// A merge that failed: its blocks are free again (no version has them).
    fn abandon(&mut self) {
        for a in self.blocks.drain(..) {
            self.tree.bf.free(a);
        }
    }
}

/// The merge of several runs' cursors (newest first): the nearest key any
/// of them holds, in the newest run's version (tagged). It lends the entry
/// from the run that holds it: that run, and every older one on the same
/// key, stay on it until the next `pick` moves them past it.
#[derive(Default)]
struct Merge {
    runs: Vec<TreeCursor>,
    /// Whether each run stands on an entry the merge has not passed, in
    /// the direction `back` (or on the one picked).
    on: Vec<bool>,
    /// The run whose entry the merge stands on.
    picked: Option<usize>,
    back: bool,
}

impl Merge {
    /// Position every run with `f`, in direction `back`.
    fn fill(&mut self, back: bool, mut f: impl FnMut(&mut TreeCursor) -> Result<bool>) -> Result<()> {
        self.back = back;
        self.picked = None;
        self.on = self.runs.iter_mut().map(&mut f).collect::<Result<_>>()?;
        Ok(())
    }

    fn head(&self, i: usize) -> Option<&[u8]> {
        if self.on[i] {
            self.runs[i].key()
        } else {
            None
        }
    }

    /// Move past the entry the merge stands on (every run on its key),
    /// then stand on the next key in direction `back`, as the newest run
    /// holding it has it: whether there is one (`entry` lends it).
    fn pick(&mut self) -> Result<bool> {
        if let Some(p) = self.picked.take() {
            self.pass(p)?;
        }
        let mut best: Option<(usize, &[u8])> = None;
        for i in 0..self.runs.len() {
            let Some(k) = self.head(i) else { continue };
            if best.is_none_or(|(_, b)| if self.back { k > b } else { k < b }) {
                best = Some((i, k));
            }
        }
        self.picked = best.map(|(i, _)| i);
        Ok(self.picked.is_some())
    }

    /// Move run `p` and every older run on its key past it (newer runs
    /// hold keys strictly beyond it: `pick` takes the newest).
    fn pass(&mut self, p: usize) -> Result<()> {
        let back = self.back;
        let step = |c: &mut TreeCursor| if back { c.retreat() } else { c.advance() };
        let (upto, older) = self.runs.split_at_mut(p + 1);
        let key = upto[p].key().expect("the picked run stands on an entry");
        for (run, on) in older.iter_mut().zip(&mut self.on[p + 1..]) {
            if *on && run.key() == Some(key) {
                *on = step(run)?;
            }
        }
        self.on[p] = step(&mut self.runs[p])?;
        Ok(())
    }

    /// The entry the merge stands on (tagged), lent.
    fn entry(&self) -> Result<Option<(&[u8], &[u8])>> {
        match self.picked {
            Some(p) => self.runs[p].entry(),
            None => Ok(None),
        }
    }

    /// The entry the merge stands on (tagged), copied out.
    fn current(&self) -> Result<Option<Entry>> {
        match self.picked {
            Some(p) => self.runs[p].current(),
            None => Ok(None),
        }
    }

    /// Turn at `key`: each run stands on its nearest entry beyond `key` in
    /// direction `back`.
    fn turn(&mut self, key: &[u8], back: bool) -> Result<()> {
        self.back = back;
        self.picked = None;
        for (run, on) in self.runs.iter_mut().zip(&mut self.on) {
            let at = run.seek_to(key)?;
            *on = match (back, at) {
                // `at`: the first entry at or after `key`; none means all are before.
                (true, true) => run.retreat()?,
                (true, false) => run.last_to()?,
                (false, true) if run.key() == Some(key) => run.advance()?,
                (false, at) => at,
            };
        }
        Ok(())
    }
}

/// A cursor over a write-optimized table: a cursor per run, merged; the
/// newest run's entry wins and a tombstone hides its key (invariant 1).
/// Like a B+tree's cursor, a seek takes the newest version; moves stay on it.
pub(crate) struct MergeCursor {
    tree: Arc<Tree>,
    roots: Option<RootSource>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    merge: Merge,
    /// The version's epoch, held while the cursor holds its runs (invariant 5).
    epoch: Option<Arc<Epoch>>,
    /// The cursor stands on the merge's entry, which is not a tombstone.
    on: bool,
    /// Ran off an end: moves find nothing until a seek, first or last.
    exhausted: bool,
}

// `next`/`prev` are fallible moves, not `Iterator`s.
#[allow(clippy::should_implement_trait)]
impl MergeCursor {
    pub fn new(tree: Arc<Tree>, roots: Option<RootSource>) -> MergeCursor {
        MergeCursor {
            tree,
            roots,
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            merge: Merge::default(),
            epoch: None,
            on: false,
            exhausted: false,
        }
    }

    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        self.lower = lower;
        self.upper = upper;
        self.reset();
    }

    pub fn reset(&mut self) {
        self.merge = Merge::default();
        self.epoch = None;
        self.on = false;
        self.exhausted = false;
    }

    pub fn entry(&self) -> Result<Option<(&[u8], &[u8])>> {
        if !self.on {
            return Ok(None);
        }
        Ok(self.merge.entry()?.map(|(k, tagged)| (k, &tagged[1..])))
    }

    /// The entry the cursor stands on, untagged, copied out.
    fn taken(&self) -> Result<Option<Entry>> {
        if !self.on {
            return Ok(None);
        }
        Ok(self.merge.current()?.map(|(k, tagged)| (k, tagged.slice(1..))))
    }

    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        self.seek_to(key)?;
        self.taken()
    }

    pub fn seek_to(&mut self, key: &[u8]) -> Result<bool> {
        self.start()?;
        self.merge.fill(false, |c| c.seek_to(key))?;
        self.settle()
    }

    pub fn seek_exact(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        if self.seek_to(key)? && self.entry()?.is_some_and(|(k, _)| k == key) {
            return Ok(self.taken()?.map(|(_, v)| v));
        }
        self.reset();
        Ok(None)
    }

    pub fn first(&mut self) -> Result<Option<Entry>> {
        self.start()?;
        self.merge.fill(false, TreeCursor::first_to)?;
        self.settle()?;
        self.taken()
    }

    pub fn last(&mut self) -> Result<Option<Entry>> {
        self.start()?;
        self.merge.fill(true, TreeCursor::last_to)?;
        self.settle()?;
        self.taken()
    }

    pub fn next(&mut self) -> Result<Option<Entry>> {
        self.step(false)?;
        self.taken()
    }

    pub fn advance(&mut self) -> Result<bool> {
        self.step(false)
    }

    pub fn prev(&mut self) -> Result<Option<Entry>> {
        self.step(true)?;
        self.taken()
    }

    /// Take the newest version: a cursor on each of its runs.
    fn start(&mut self) -> Result<()> {
        self.reset();
        let root = match &self.roots {
            Some(f) => f(),
            None => self.tree.snapshot(),
        };
        let Some(VersionRuns { roots, epoch }) = self.tree.runs_of(&root)? else {
            // A table not yet published stands in as an empty leaf.
            assert_eq!(root.entries(), 0, "a write-optimized table's version without a run list");
            return Ok(());
        };
        self.epoch = Some(epoch);
        for run in roots {
            let mut c = TreeCursor::with_roots(self.tree.clone(), Some(Arc::new(move || run.clone())));
            c.set_bounds(self.lower.clone(), self.upper.clone());
            self.merge.runs.push(c);
        }
        Ok(())
    }

    /// Move one merged entry in direction `back`; an unpositioned cursor
    /// starts at an end.
    fn step(&mut self, back: bool) -> Result<bool> {
        if self.exhausted {
            return Ok(false);
        }
        if !self.on {
            self.start()?;
            if back {
                self.merge.fill(true, TreeCursor::last_to)?;
            } else {
                self.merge.fill(false, TreeCursor::first_to)?;
            }
            return self.settle();
        }
        if back != self.merge.back {
            let key = self.merge.entry()?.expect("the cursor stands on the merge's entry").0.to_vec();
            // A turn that fails part way leaves the cursor unpositioned.
            self.on = false;
            self.merge.turn(&key, back)?;
        }
        self.settle()
    }

    /// Stand on the merge's next entry that is not a tombstone.
    fn settle(&mut self) -> Result<bool> {
        self.on = false;
        while self.merge.pick()? {
            let (_, tagged) = self.merge.entry()?.expect("a pick stands on an entry");
            if untag(tagged).map_err(|e| self.tree.corrupt(e))?.is_some() {
                self.on = true;
                return Ok(true);
            }
        }
        self.exhausted = true;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run list: the memtable, then frozen runs of these bytes, newest first.
    fn runs(bytes: &[u64]) -> Vec<Run> {
        bytes.iter().map(|&bytes| Run { root: Child::in_memory(Arc::new(Node::empty_leaf())), bytes }).collect()
    }

    /// Each lane takes its own merges: a short one the short lane, a long
    /// one the long lane, and never a run newer merges are reading.
    #[test]
    fn each_lane_takes_its_own_merges() {
        use Lane::*;
        let small = runs(&[0, 10, 10, 10, 1000, 1000]);
        assert_eq!(merge_due(&small, small.len()), Some(3));
        assert_eq!([Any, Short, Long].map(|l| pick_merge(&small, small.len(), l, 100)), [Some(3), Some(3), None]);
        let long = runs(&[0, 600, 1000, 1000]);
        assert_eq!([Any, Short, Long].map(|l| pick_merge(&long, long.len(), l, 100)), [Some(3), None, Some(3)]);
        // The two oldest in flight: only the newer ones are free.
        assert_eq!(pick_merge(&long, 2, Any, 100), None);
        let busy = runs(&[0, 300, 300, 500, 500]);
        assert_eq!(merge_due(&busy, busy.len()), Some(4));
        assert_eq!(merge_due(&busy, 3), Some(2), "a merge in flight reads runs 3 and 4");
    }

    /// With too many runs and only a long merge due, the short lane merges
    /// the newest runs that fit, so writers do not stall behind the long one.
    #[test]
    fn too_many_runs_give_the_short_lane_the_newest_that_fit() {
        let mut bytes = vec![0];
        bytes.extend([20; 13]);
        bytes.push(5000);
        let r = runs(&bytes);
        let free = r.len() - 1; // the oldest is in flight
        assert_eq!(merge_due(&r, free), Some(13));
        assert_eq!(pick_merge(&r, free, Lane::Long, 100), Some(13));
        assert_eq!(pick_merge(&r, free, Lane::Short, 100), Some(5), "20 bytes each, at most 100");
        assert_eq!(short_merge_max(&r, 10), 5260 / 8);
        assert_eq!(short_merge_max(&r, 1000), 8000);
    }

    /// The quiet time counts from the merger's first look, and again from
    /// the first look after a write.
    #[test]
    fn a_write_restarts_the_quiet_time() {
        let q = Quiet::default();
        assert!(!q.for_at_least(Duration::ZERO), "the first look starts the count");
        assert!(q.for_at_least(Duration::ZERO));
        assert!(!q.for_at_least(Duration::from_secs(3600)));
        q.writes.fetch_add(1, Ordering::Relaxed);
        assert!(!q.for_at_least(Duration::ZERO), "a write restarts the count");
        assert!(q.for_at_least(Duration::ZERO));
    }
}
