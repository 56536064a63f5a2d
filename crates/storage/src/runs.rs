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
//!    `[RUN_DELETE]` alone (a tombstone). For a key, the newest run that
//!    holds it decides.
//! 2. Only the memtable changes; a frozen run is never changed again.
//! 3. A write reads no page: eviction never walks the memtable (run 0), so
//!    its pages are in memory, and a write touches only the memtable.
//! 4. The oldest run holds no tombstone: while the memtable is the only
//!    run, a delete removes the key instead of writing one.

use crate::btree::{Entry, Evicted, Found, RootSource, Tree, TreeCursor, Written};
use crate::cache::CacheMeter;
use crate::error::{Result, StorageError};
use crate::limits::runs_max;
use crate::page::{encode_manifest, leaf_entry_mem, Body, Child, Node, Runs, Value};
use crate::stats::bump;
use bytes::Bytes;
use std::ops::Bound;
use std::sync::Arc;

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

/// The root of a new write-optimized table: an empty memtable.
pub(crate) fn empty_runs() -> Arc<Node> {
    let runs = [Child::in_memory(Arc::new(Node::empty_leaf()))].into_iter().collect();
    Arc::new(Node::new(Body::Runs(Runs { runs, memtable_bytes: 0 })))
}

/// Charge a root just made or read to the cache; a run list's runs in memory too.
pub(crate) fn charge_tree_top(root: &Arc<Node>, meter: &Arc<CacheMeter>) {
    root.recharge(meter);
    if let Body::Runs(runs) = &root.body {
        for run in &runs.runs {
            if let Some(n) = run.loaded() {
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

impl Tree {
    fn corrupt(&self, detail: String) -> StorageError {
        StorageError::corruption(self.bf.path(), 0, detail)
    }

    /// Look `key` up run by run, newest first, and lend its value to `f`.
    pub(crate) fn runs_get<R>(&self, runs: &Runs, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let mut f = Some(f);
        for run in &runs.runs {
            let root = self.load_child(run)?;
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
        let node = self.make_mut(root);
        let Body::Runs(runs) = &mut node.body else { unreachable!("apply_runs on a run list") };
        let only_run = runs.runs.len() == 1;
        // The memtable leaves its slot while it changes: a snapshot that
        // still holds it keeps it, and the writer then changes a copy.
        let slot = runs.runs.get_mut(0);
        let mut memtable: Arc<Node> = self.load_child(slot)?.clone();
        *slot = Arc::new(Child::default());
        let applied = self.apply_memtable(&mut memtable, only_run, ops, &mut runs.memtable_bytes);
        *runs.runs.get_mut(0) = Child::in_memory(memtable);
        if runs.memtable_bytes > self.geometry.memtable_max {
            self.freeze(runs);
        }
        self.charge(root);
        applied
    }

    fn apply_memtable<'k>(
        &self,
        memtable: &mut Arc<Node>,
        only_run: bool,
        ops: impl Iterator<Item = (&'k [u8], Option<&'k [u8]>)>,
        charged: &mut usize,
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
                    Value::new(&tagged, self.geometry.overflow_min)
                }
            };
            *charged += leaf_entry_mem(key, &value);
            self.put_root(memtable, key, value)?;
        }
        Ok(())
    }

    /// Put a fresh memtable in front: the old one is the newest frozen run.
    fn freeze(&self, runs: &mut Runs) {
        if runs.runs.len() >= runs_max {
            // Until runs are merged the memtable grows instead.
            return;
        }
        let memtable = Arc::new(Node::empty_leaf());
        self.charge(&memtable);
        runs.runs.insert(0, Child::in_memory(memtable));
        runs.memtable_bytes = 0;
        bump(&self.counters.memtables_frozen, 1);
    }

    /// Freeze the memtable now, if it holds anything; `false` for a
    /// B+tree. The caller holds the table's writer lock. The contents do
    /// not change, so the published version stays valid.
    pub fn freeze_memtable(&self) -> Result<bool> {
        let mut root = self.root.write().unwrap();
        let Body::Runs(runs) = &root.body else { return Ok(false) };
        if self.load_child(&runs.runs[0])?.entries() == 0 {
            return Ok(false);
        }
        let node = self.make_mut(&mut root);
        let Body::Runs(runs) = &mut node.body else { unreachable!() };
        self.freeze(runs);
        self.charge(&root);
        Ok(true)
    }

    /// The runs a version of the table holds, newest first (a B+tree's
    /// root is its only run).
    pub fn runs_of(&self, root: &Arc<Node>) -> Result<Vec<Arc<Node>>> {
        match &root.body {
            Body::Runs(runs) => runs.runs.iter().map(|run| Ok(self.load_child(run)?.clone())).collect(),
            _ => Ok(vec![root.clone()]),
        }
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
            let child = &runs.runs[i];
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
                Body::Runs(_) => return Err(self.corrupt("a run list inside a run list".into())),
            }
        }
        Ok(true)
    }

    /// Write every run's dirty pages; returns the manifest that lists the
    /// runs (an empty memtable left out: reading a manifest starts a new one).
    pub(crate) fn write_runs(&self, runs: &Runs, written: &mut Option<&mut Written>) -> Result<Vec<u8>> {
        let mut addrs = Vec::with_capacity(runs.runs.len());
        for run in &runs.runs {
            let addr = match run.loaded() {
                Some(n) if matches!(n.body, Body::Leaf(_)) && n.entries() == 0 => continue,
                Some(n) => self.write_dirty_in(&n, written)?,
                None => run.addr().expect("a run not in memory has an address"),
            };
            addrs.push(addr);
        }
        Ok(encode_manifest(&addrs))
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
    /// One cursor per run of the version the last seek took, newest first...
    runs: Vec<TreeCursor>,
    /// ...and the entry each stands on that the merge has not passed, in
    /// the direction `back`.
    heads: Vec<Option<Entry>>,
    back: bool,
    /// The merged entry the cursor stands on (untagged).
    here: Option<Entry>,
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
            runs: Vec::new(),
            heads: Vec::new(),
            back: false,
            here: None,
            exhausted: false,
        }
    }

    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        self.lower = lower;
        self.upper = upper;
        self.reset();
    }

    pub fn reset(&mut self) {
        self.runs.clear();
        self.heads.clear();
        self.here = None;
        self.exhausted = false;
    }

    pub fn entry(&self) -> Result<Option<(&[u8], &[u8])>> {
        Ok(self.here.as_ref().map(|(k, v)| (&k[..], &v[..])))
    }

    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        self.seek_to(key)?;
        Ok(self.here.clone())
    }

    pub fn seek_to(&mut self, key: &[u8]) -> Result<bool> {
        self.start()?;
        self.fill(false, |c| c.seek(key))
    }

    pub fn seek_exact(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        if self.seek_to(key)? {
            if let Some((k, v)) = &self.here {
                if **k == *key {
                    return Ok(Some(v.clone()));
                }
            }
        }
        self.reset();
        Ok(None)
    }

    pub fn first(&mut self) -> Result<Option<Entry>> {
        self.start()?;
        self.fill(false, TreeCursor::first)?;
        Ok(self.here.clone())
    }

    pub fn last(&mut self) -> Result<Option<Entry>> {
        self.start()?;
        self.fill(true, TreeCursor::last)?;
        Ok(self.here.clone())
    }

    pub fn next(&mut self) -> Result<Option<Entry>> {
        self.step(false)?;
        Ok(self.here.clone())
    }

    pub fn advance(&mut self) -> Result<bool> {
        self.step(false)
    }

    pub fn prev(&mut self) -> Result<Option<Entry>> {
        self.step(true)?;
        Ok(self.here.clone())
    }

    /// Take the newest version: a cursor on each of its runs.
    fn start(&mut self) -> Result<()> {
        self.reset();
        let root = match &self.roots {
            Some(f) => f(),
            None => self.tree.snapshot(),
        };
        for run in self.tree.runs_of(&root)? {
            if !matches!(root.body, Body::Runs(_)) {
                // A table not yet published stands in as an empty leaf.
                assert_eq!(run.entries(), 0, "a write-optimized table's version without a run list");
                continue;
            }
            let mut c = TreeCursor::with_roots(self.tree.clone(), Some(Arc::new(move || run.clone())));
            c.set_bounds(self.lower.clone(), self.upper.clone());
            self.runs.push(c);
        }
        Ok(())
    }

    /// Position every run with `f`, then stand on the first merged entry.
    fn fill(&mut self, back: bool, mut f: impl FnMut(&mut TreeCursor) -> Result<Option<Entry>>) -> Result<bool> {
        self.back = back;
        self.heads = self.runs.iter_mut().map(&mut f).collect::<Result<_>>()?;
        self.pick()
    }

    /// Move one merged entry in direction `back`; an unpositioned cursor
    /// starts at an end.
    fn step(&mut self, back: bool) -> Result<bool> {
        if self.exhausted {
            return Ok(false);
        }
        let Some((key, _)) = self.here.clone() else {
            self.start()?;
            return if back { self.fill(true, TreeCursor::last) } else { self.fill(false, TreeCursor::first) };
        };
        if back != self.back {
            // Turn: each run stands on its nearest key beyond `key` the other way.
            self.back = back;
            for (run, head) in self.runs.iter_mut().zip(&mut self.heads) {
                *head = turn(run, &key, back)?;
            }
        }
        self.pick()
    }

    /// Stand on the nearest key the heads hold, as the newest run holding
    /// it says; past tombstones. Every run on that key moves on.
    fn pick(&mut self) -> Result<bool> {
        loop {
            let mut best: Option<(usize, &Bytes)> = None;
            for (i, head) in self.heads.iter().enumerate() {
                let Some((k, _)) = head else { continue };
                let nearer = best.is_none_or(|(_, b)| if self.back { k > b } else { k < b });
                if nearer {
                    best = Some((i, k));
                }
            }
            let Some((b, _)) = best else {
                self.here = None;
                self.exhausted = true;
                return Ok(false);
            };
            let (key, tagged) = self.heads[b].clone().expect("the nearest head holds an entry");
            // Runs before `b` hold keys strictly beyond this one.
            for i in b..self.runs.len() {
                if self.heads[i].as_ref().is_some_and(|(k, _)| *k == key) {
                    self.heads[i] = if self.back { self.runs[i].prev()? } else { self.runs[i].next()? };
                }
            }
            match untag(&tagged).map_err(|e| self.tree.corrupt(e))? {
                Some(_) => {
                    self.here = Some((key, tagged.slice(1..)));
                    return Ok(true);
                }
                None => continue,
            }
        }
    }
}

/// Where a run's cursor stands after the merge turns at `key`: its nearest
/// entry beyond `key` in the new direction.
fn turn(run: &mut TreeCursor, key: &[u8], back: bool) -> Result<Option<Entry>> {
    let at = run.seek(key)?;
    if back {
        // `at` is the first entry at or after `key`; none means all are before.
        match at {
            Some(_) => run.prev(),
            None => run.last(),
        }
    } else {
        match at {
            Some((k, _)) if *k == *key => run.next(),
            other => Ok(other),
        }
    }
}
