//! The B+tree of one table: lookups, inserts with splits, deletes with merges,
//! cursors, and writing dirty pages at a checkpoint.
//!
//! Concurrency: readers clone the root `Arc` (a brief read lock) and then
//! walk an immutable version without locks; the single writer of a table
//! holds the root's write lock while it applies changes in memory and copies
//! any node a reader or a checkpoint still holds (see `page.rs`). No data-file
//! I/O happens under the write lock except loading a missing page, and the
//! writer pre-loads the pages it will touch before taking it.
//!
//! Invariants:
//! 1. Every write dirties the whole path from the root to the changed leaf.
//! 2. Sibling nodes of one parent are merged when one falls under a quarter
//!    of its page size and both fit in one page; an empty leaf never stays
//!    (it always fits into a sibling). A root with one child is replaced by it.

use crate::block::{BlockAddr, BlockFile, BlockKind};
use crate::cache::CacheMeter;
use crate::compress::Compressor;
use crate::error::{Result, StorageError};
use crate::limits::{pack_batch_leaves, read_ahead_bytes, tree_depth_max};
use crate::page::{
    decode_node, encode_internal, encode_leaf, internal_entry_cost, leaf_entry_cost, Body, Child, Internal, Key, Keys,
    Leaf, Node, NodeRef, PackedView, Run, Value, PAGE_HEADER_BYTES,
};
use crate::runs::MergeCursor;
use crate::stats::{bump, Counters, TableIo};
use bytes::Bytes;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock, Weak};

/// How a table stores its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TableFormat {
    /// One copy-on-write B+tree.
    #[default]
    BTree,
    /// A memtable and frozen runs, each a B+tree, under one root: a write
    /// reads no page (`runs.rs`).
    WriteOptimized,
}

impl TableFormat {
    pub fn to_u8(self) -> u8 {
        match self {
            TableFormat::BTree => 0,
            TableFormat::WriteOptimized => 1,
        }
    }

    pub fn from_u8(v: u8) -> Option<TableFormat> {
        match v {
            0 => Some(TableFormat::BTree),
            1 => Some(TableFormat::WriteOptimized),
            _ => None,
        }
    }
}

/// Page geometry and format of one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeGeometry {
    pub leaf_page_max: usize,
    pub internal_page_max: usize,
    /// Values of at least this many bytes go to their own overflow block.
    pub overflow_min: usize,
    /// How leaf images are stored on disk.
    pub compressor: Compressor,
    pub format: TableFormat,
    /// A write-optimized table's memtable is frozen past this many bytes.
    pub memtable_max: usize,
}

pub struct Tree {
    pub bf: Arc<BlockFile>,
    pub geometry: TreeGeometry,
    pub(crate) root: RwLock<Arc<Node>>,
    pub(crate) counters: Arc<Counters>,
    pub meter: Arc<CacheMeter>,
    /// Bytes written to this tree's file, by block kind.
    pub io: TableIo,
    /// A write-optimized table's runs replaced by a merge, with the epoch
    /// whose end frees their blocks (`runs.rs` invariant 5).
    pub(crate) retired: Mutex<Vec<crate::runs::Retired>>,
    /// The runs merges of this table read now (two merges never share one).
    pub(crate) merging: crate::runs::InFlight,
    /// Writes to a write-optimized table, as the idle merge watches them.
    pub(crate) quiet: crate::runs::Quiet,
}

/// What one eviction pass over a tree did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Evicted {
    /// Leaves dropped from memory...
    pub pages: u64,
    /// ...of which were reconciled (written) first.
    pub dirty: u64,
    pub bytes: usize,
    /// Leaves looked at.
    pub visited: u64,
}

/// Bytes of a live tree's pages in memory: clean (with a disk image) and
/// dirty, and of those the internal pages'.
#[derive(Debug, Default, Clone, Copy)]
pub struct LiveBytes {
    pub clean: usize,
    pub dirty: usize,
    pub internal: usize,
}

/// Where a lookup found its key: through a packed leaf's view or an entry.
pub(crate) enum Found<'a> {
    Packed(&'a PackedView, usize),
    Entry(&'a Value),
}

/// Leaves a checkpoint wrote, each with the slot that held it (weakly:
/// noting them keeps neither in memory).
pub type Written = Vec<(Weak<Child>, Weak<Node>)>;

impl Tree {
    pub fn new_empty(
        bf: Arc<BlockFile>,
        geometry: TreeGeometry,
        counters: Arc<Counters>,
        meter: Arc<CacheMeter>,
    ) -> Tree {
        let root = match geometry.format {
            TableFormat::BTree => Arc::new(Node::empty_leaf()),
            TableFormat::WriteOptimized => crate::runs::empty_runs(),
        };
        crate::runs::charge_tree_top(&root, &meter);
        Tree {
            bf,
            geometry,
            root: RwLock::new(root),
            counters,
            meter,
            io: TableIo::default(),
            retired: Mutex::default(),
            merging: Default::default(),
            quiet: Default::default(),
        }
    }

    /// Open the tree whose root page is at `root`.
    pub fn open(
        bf: Arc<BlockFile>,
        geometry: TreeGeometry,
        counters: Arc<Counters>,
        meter: Arc<CacheMeter>,
        root: BlockAddr,
    ) -> Result<Tree> {
        let tree = Tree::new_empty(bf, geometry, counters, meter);
        let node = tree.read_node(root, true)?;
        if (tree.geometry.format == TableFormat::WriteOptimized) != matches!(node.body, Body::Runs(_)) {
            let detail = format!("a {:?} table whose root is not of its format", tree.geometry.format);
            return Err(StorageError::corruption(tree.bf.path(), root.offset, detail));
        }
        *tree.root.write().unwrap() = node;
        Ok(tree)
    }

    /// The current version of the tree: immutable, safe to walk without locks.
    pub fn snapshot(&self) -> Arc<Node> {
        self.root.read().unwrap().clone()
    }

    pub(crate) fn free(&self) -> impl Fn(BlockAddr) + '_ {
        move |a| self.bf.free(a)
    }

    /// Read the page at `addr`; a manifest only as a `root`.
    fn read_node(&self, addr: BlockAddr, root: bool) -> Result<Arc<Node>> {
        let (kind, payload) = self.bf.read_block(addr)?;
        if kind == BlockKind::Manifest && root && self.geometry.format == TableFormat::WriteOptimized {
            {
                let (mut node, retired) = crate::page::decode_runs(&payload, addr)
                    .map_err(|detail| StorageError::corruption(self.bf.path(), addr.offset, detail))?;
                if !retired.is_empty() {
                    // No reader of those runs survived the restart: free
                    // them, and the manifest naming them (the next
                    // checkpoint writes a new one).
                    node.disk = crate::page::DiskSlot::default();
                    self.bf.free(addr);
                    for run in retired {
                        self.free_retired_run(&Child::on_disk(run))?;
                    }
                }
                let node = Arc::new(node);
                crate::runs::charge_tree_top(&node, &self.meter);
                return Ok(node);
            }
        }
        self.node_from_block(kind, payload, addr)
    }

    /// A B+tree page from its block's checked payload.
    fn node_from_block(&self, kind: BlockKind, payload: Vec<u8>, addr: BlockAddr) -> Result<Arc<Node>> {
        if !matches!(kind, BlockKind::Leaf | BlockKind::Internal) {
            return Err(StorageError::corruption(
                self.bf.path(),
                addr.offset,
                format!("expected a page, found a {kind:?} block"),
            ));
        }
        match kind {
            BlockKind::Leaf => bump(&self.counters.leaf_pages_read, 1),
            _ => bump(&self.counters.internal_pages_read, 1),
        }
        let node = decode_node(kind, &Bytes::from(payload), addr, &self.counters.keys_decoded)
            .map_err(|detail| StorageError::corruption(self.bf.path(), addr.offset, detail))?;
        let node = Arc::new(node);
        node.recharge(&self.meter);
        self.meter.help_if_over();
        Ok(node)
    }

    /// Read the children of `int` from `from` on that are not in memory and
    /// lie side by side on disk, at most `limits::read_ahead_bytes`, with
    /// one read, and put them in their slots: a cursor walking a run in
    /// order then reads in large pieces. Best effort: a child that fails
    /// its check stays out, for `load_child` to read and report.
    pub(crate) fn read_ahead(&self, int: &Internal, from: usize) {
        let on_disk = |c: &Child| if c.loaded().is_some() { None } else { c.addr().filter(BlockAddr::is_plausible) };
        let Some(first) = on_disk(&int.children[from]) else { return };
        let mut span = vec![(from, first)];
        for (j, child) in int.children.iter().enumerate().skip(from + 1) {
            match on_disk(child) {
                Some(a) if a.offset == span[span.len() - 1].1.end() && a.end() - first.offset <= read_ahead_bytes => {
                    span.push((j, a));
                }
                _ => break,
            }
        }
        if span.len() < 2 {
            return;
        }
        let mut buf = vec![0u8; (span[span.len() - 1].1.end() - first.offset) as usize];
        if self.bf.file().read_at(&mut buf, first.offset).is_err() {
            return;
        }
        for (j, a) in span {
            let at = (a.offset - first.offset) as usize;
            let Ok((kind, payload)) = crate::block::open_block(self.bf.path(), a, &buf[at..at + a.size as usize])
            else {
                continue;
            };
            if let Ok(node) = self.node_from_block(kind, payload, a) {
                bump(&self.counters.read_ahead_pages, 1);
                int.children[j].install(node);
            }
        }
    }

    /// The node behind a child slot, reading it when it is not in memory.
    pub fn load_child<'a>(&self, child: &'a Child) -> Result<NodeRef<'a>> {
        if let Some(node) = child.loaded() {
            return Ok(node);
        }
        let addr = child.addr().expect("a child slot without a node has an address");
        match self.read_node(addr, false) {
            Ok(node) => Ok(child.install(node)),
            // A reader of an older version can lose a race with the writer:
            // between reading the slot's address and reading the block, the
            // writer loaded the leaf through this same (shared) slot,
            // replaced it in the live tree and freed its block, which was
            // then reused. The slot holds the leaf from then on (writers
            // load through the slot before they free its block), so the
            // failed read is answered from memory; an error with the slot
            // still empty is real.
            Err(e) => match child.loaded() {
                Some(node) => {
                    bump(&self.counters.reads_raced_block_reuse, 1);
                    Ok(node)
                }
                None => Err(e),
            },
        }
    }

    /// A run list met below a table's root: the file is corrupt.
    pub(crate) fn misplaced_runs(&self) -> StorageError {
        StorageError::corruption(self.bf.path(), 0, "a run list where a B+tree page belongs")
    }

    /// A new or changed node: bring its cache charge up to date.
    pub(crate) fn charge(&self, node: &Arc<Node>) {
        node.recharge(&self.meter);
    }

    /// The live tree lets go of `node`: free its block (see `DiskSlot::retire`)
    /// and count it as pinned while anyone still holds it.
    fn retire_node(&self, node: &Node) {
        node.disk.retire(&self.free());
        node.mark_retired();
    }

    /// The bytes of a value, lent (an overflow value is read on first use
    /// and kept with the value).
    pub fn value_ref<'v>(&self, value: &'v Value) -> Result<&'v [u8]> {
        match value {
            Value::Inline(b) => Ok(b),
            Value::Big(big) => {
                self.value_bytes(value)?;
                Ok(big.data.get().expect("value_bytes keeps what it read"))
            }
        }
    }

    /// The bytes of a value, reading an overflow block on first use.
    pub fn value_bytes(&self, value: &Value) -> Result<Bytes> {
        match value {
            Value::Inline(b) => Ok(b.clone()),
            Value::Big(big) => {
                if let Some(d) = big.data.get() {
                    return Ok(d.clone());
                }
                let addr = big.disk.addr().expect("an unloaded overflow value has an address");
                let (kind, payload) = match self.bf.read_block(addr) {
                    Ok(block) => block,
                    // As in `load_child`: the writer that freed the block
                    // loaded the value first (`retire_value`).
                    Err(e) => match big.data.get() {
                        Some(d) => {
                            bump(&self.counters.reads_raced_block_reuse, 1);
                            return Ok(d.clone());
                        }
                        None => return Err(e),
                    },
                };
                if kind != BlockKind::Overflow || payload.len() != big.len as usize {
                    return Err(StorageError::corruption(
                        self.bf.path(),
                        addr.offset,
                        format!("expected an overflow block of {} bytes, found {kind:?} of {}", big.len, payload.len()),
                    ));
                }
                bump(&self.counters.overflow_blocks_read, 1);
                let _ = big.data.set(Bytes::from(payload));
                Ok(big.data.get().unwrap().clone())
            }
        }
    }

    /// Descend from `root` to the leaf holding `key`, through the internal
    /// nodes' shared search indexes.
    fn leaf_for<'a>(&self, root: &'a Arc<Node>, key: &[u8]) -> Result<NodeRef<'a>> {
        let mut node = NodeRef::Borrowed(root);
        for _ in 0..tree_depth_max {
            let next = match &node.body {
                Body::Runs(_) => return Err(self.misplaced_runs()),
                Body::Leaf(_) => {
                    node.accessed.store(true, Ordering::Relaxed);
                    return Ok(node);
                }
                Body::Internal(int) => {
                    let i = int.keys.child_for(key);
                    match node {
                        // Internal nodes never leave their slots: borrow through them.
                        NodeRef::Borrowed(n) => {
                            let Body::Internal(int) = &n.body else { unreachable!() };
                            self.load_child(&int.children[i])?
                        }
                        NodeRef::Owned(_) => unreachable!("only leaves are owned, and leaves have no children"),
                    }
                }
            };
            node = next;
        }
        Err(StorageError::corruption(self.bf.path(), 0, "tree deeper than the depth limit"))
    }

    /// Look `key` up in a given version of the tree.
    pub fn get_in(&self, root: &Arc<Node>, key: &[u8]) -> Result<Option<Bytes>> {
        if let Body::Runs(runs) = &root.body {
            return self.runs_get(runs, key, Bytes::copy_from_slice);
        }
        self.find_in(root, key, |found| match found {
            Found::Packed(view, i) => Ok(view.value(i)),
            Found::Entry(v) => self.value_bytes(v),
        })
    }

    /// Look `key` up and lend its value to `f`, without taking a reference
    /// on the page's buffer.
    pub fn get_in_with<R>(&self, root: &Arc<Node>, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        if let Body::Runs(runs) = &root.body {
            return self.runs_get(runs, key, f);
        }
        self.find_in(root, key, |found| match found {
            Found::Packed(view, i) => Ok(f(view.value_slice(i))),
            Found::Entry(Value::Inline(b)) => Ok(f(b)),
            Found::Entry(big) => Ok(f(&self.value_bytes(big)?)),
        })
    }

    pub(crate) fn find_in<R>(
        &self,
        root: &Arc<Node>,
        key: &[u8],
        f: impl FnOnce(Found<'_>) -> Result<R>,
    ) -> Result<Option<R>> {
        let leaf = self.leaf_for(root, key)?;
        let Body::Leaf(l) = &leaf.body else { unreachable!() };
        let i = leaf.search(key);
        if let Some(view) = leaf.packed_view() {
            return if i < view.len() && view.key(i) == key { f(Found::Packed(view, i)).map(Some) } else { Ok(None) };
        }
        match l.entries.get(i) {
            Some((k, v)) if **k == *key => f(Found::Entry(v)).map(Some),
            _ => Ok(None),
        }
    }

    /// Load the pages a write of `key` will touch, before the write lock,
    /// through `root`: a recent version (the published one, so loading
    /// shares no lock with the writer applying a commit). Versions share
    /// their unchanged pages, the live tree's included.
    /// Also loads an overflow value the write will replace (see `retire_value`).
    /// Returns the leaf's identity and charged bytes, so a caller can
    /// estimate what a batch will hold in memory.
    pub fn prefetch(&self, root: &Arc<Node>, key: &[u8]) -> Result<(usize, usize)> {
        if let Body::Runs(runs) = &root.body {
            // Only the memtable changes, and its pages are in memory.
            let memtable = self.load_child(&runs.runs[0].root)?.clone();
            return self.prefetch(&memtable, key);
        }
        let leaf = self.leaf_for(root, key)?;
        let Body::Leaf(l) = &leaf.body else { unreachable!() };
        l.check_bigs();
        if l.may_hold_big {
            if let Ok(i) = l.entries.search(key) {
                self.value_bytes(&l.entries[i].1)?;
            }
        }
        Ok((Arc::as_ptr(&leaf) as usize, leaf.charge.bytes()))
    }

    /// The live tree drops `value`. Older versions share the same value
    /// object; its bytes must be in memory before its overflow block is
    /// freed, or a reader of an older version could read a reused block
    /// (page invariant 2, for values).
    fn retire_value(&self, value: &Value) -> Result<()> {
        if let Value::Big(_) = value {
            self.value_bytes(value)?;
        }
        value.retire(&self.free());
        Ok(())
    }

    /// Apply puts (`Some`) and deletes (`None`) in order, as one writer.
    pub fn apply<'k>(&self, ops: impl Iterator<Item = (&'k [u8], Option<&'k [u8]>)>) -> Result<()> {
        let mut root = self.root.write().unwrap();
        if matches!(root.body, Body::Runs(_)) {
            return self.apply_runs(&mut root, ops);
        }
        for (key, value) in ops {
            match value {
                Some(v) => self.put_root(&mut root, key, Value::new(v, self.geometry.overflow_min))?,
                None => self.delete_root(&mut root, key)?,
            }
        }
        Ok(())
    }

    /// Put `key` in the tree at `root`, which grows a level when its root splits.
    pub(crate) fn put_root(&self, root: &mut Arc<Node>, key: &[u8], value: Value) -> Result<()> {
        if let Some((sep, right)) = self.put_rec(root, key, value)? {
            let left = std::mem::replace(root, Arc::new(Node::empty_leaf()));
            let bytes = PAGE_HEADER_BYTES + internal_entry_cost(&[]) + internal_entry_cost(&sep);
            let keys = Keys::shared(vec![Bytes::new(), sep]);
            let children = [Child::in_memory(left), Child::in_memory(right)].into_iter().collect();
            *root = Arc::new(Node::new(Body::Internal(Internal { keys, children, bytes })));
            self.charge(root);
        }
        Ok(())
    }

    /// Delete `key` from the tree at `root`, which loses levels left with one child.
    pub(crate) fn delete_root(&self, root: &mut Arc<Node>, key: &[u8]) -> Result<()> {
        if self.contains_in(root, key)? {
            self.delete_rec(root, key)?;
            self.collapse_root(root)?;
        }
        Ok(())
    }

    fn contains_in(&self, root: &Arc<Node>, key: &[u8]) -> Result<bool> {
        let leaf = self.leaf_for(root, key)?;
        let Body::Leaf(l) = &leaf.body else { unreachable!() };
        Ok(l.entries.search(key).is_ok())
    }

    /// Get a node for changing: in place if only the live tree holds it,
    /// else as a fresh copy (the original is retired from the live tree).
    pub(crate) fn make_mut<'a>(&self, arc: &'a mut Arc<Node>) -> &'a mut Node {
        let free = self.free();
        if Arc::get_mut(arc).is_none() {
            let copy = Arc::new(Node::clone(arc));
            self.charge(&copy);
            self.retire_node(arc);
            *arc = copy;
        }
        let node = Arc::get_mut(arc).unwrap();
        node.disk.dirty(&free);
        node.search.take();
        if let Body::Leaf(l) = &mut node.body {
            l.arena = None;
        }
        node
    }

    /// The `i`th child of `node`, loaded and ready for `make_mut`: a slot
    /// shared with another tree version is replaced by a private one.
    fn child_mut<'a>(&self, node: &'a mut Internal, i: usize) -> Result<&'a mut Arc<Node>> {
        let loaded: Arc<Node> = Arc::clone(&*self.load_child(&node.children[i])?);
        // `get_mut` copies the slot's chunk if another version shares it,
        // so a slot shared either way fails `Arc::get_mut`.
        let slot = node.children.get_mut(i);
        if Arc::get_mut(slot).is_none() {
            // The shared slot leaves the live tree loaded (page invariant 2).
            *slot = Child::in_memory(loaded);
        } else {
            drop(loaded);
        }
        Ok(Arc::get_mut(slot).unwrap().node_mut().expect("the child was just loaded"))
    }

    fn put_rec(&self, arc: &mut Arc<Node>, key: &[u8], value: Value) -> Result<Option<(Key, Arc<Node>)>> {
        let split = self.put_rec_inner(arc, key, value);
        self.charge(arc);
        if let Ok(Some((_, right))) = &split {
            self.charge(right);
        }
        split
    }

    fn put_rec_inner(&self, arc: &mut Arc<Node>, key: &[u8], value: Value) -> Result<Option<(Key, Arc<Node>)>> {
        let geometry = self.geometry;
        let node = self.make_mut(arc);
        match &mut node.body {
            Body::Runs(_) => Err(self.misplaced_runs()),
            Body::Leaf(leaf) => {
                let cost = leaf_entry_cost(key, &value);
                leaf.may_hold_big |= matches!(value, Value::Big(_));
                match leaf.entries.search(key) {
                    Ok(i) => {
                        let old = std::mem::replace(leaf.entries.value_mut(i), value);
                        leaf.bytes = leaf.bytes + cost - leaf_entry_cost(key, &old);
                        self.retire_value(&old)?;
                    }
                    Err(i) => {
                        leaf.entries.insert(i, (Bytes::copy_from_slice(key), value));
                        leaf.bytes += cost;
                    }
                }
                if leaf.bytes > geometry.leaf_page_max && leaf.entries.len() >= 2 {
                    return Ok(Some(split_leaf(leaf)));
                }
                Ok(None)
            }
            Body::Internal(int) => {
                let i = int.keys.child_for(key);
                let child = self.child_mut(int, i)?;
                if let Some((sep, right)) = self.put_rec(child, key, value)? {
                    int.bytes += internal_entry_cost(&sep);
                    int.edit_keys(|keys| keys.insert(i + 1, sep));
                    int.children.insert(i + 1, Child::in_memory(right));
                    if int.bytes > geometry.internal_page_max && int.children.len() >= 4 {
                        return Ok(Some(split_internal(int)));
                    }
                }
                Ok(None)
            }
        }
    }

    fn delete_rec(&self, arc: &mut Arc<Node>, key: &[u8]) -> Result<()> {
        let r = self.delete_rec_inner(arc, key);
        self.charge(arc);
        r
    }

    fn delete_rec_inner(&self, arc: &mut Arc<Node>, key: &[u8]) -> Result<()> {
        let node = self.make_mut(arc);
        match &mut node.body {
            Body::Runs(_) => Err(self.misplaced_runs()),
            Body::Leaf(leaf) => {
                if let Ok(i) = leaf.entries.search(key) {
                    let (k, v) = leaf.entries.remove(i);
                    leaf.bytes -= leaf_entry_cost(&k, &v);
                    self.retire_value(&v)?;
                }
                Ok(())
            }
            Body::Internal(int) => {
                let i = int.keys.child_for(key);
                let child = self.child_mut(int, i)?;
                self.delete_rec(child, key)?;
                self.rebalance(int, i)
            }
        }
    }

    fn page_max(&self, node: &Node) -> usize {
        match node.body {
            Body::Leaf(_) => self.geometry.leaf_page_max,
            Body::Internal(_) | Body::Runs(_) => self.geometry.internal_page_max,
        }
    }

    /// Merge child `i` of `int` with a sibling if it is underfull and they fit.
    fn rebalance(&self, int: &mut Internal, i: usize) -> Result<()> {
        let child = self.load_child(&int.children[i])?;
        let max = self.page_max(&child);
        if child.entries() > 0 && child.bytes() >= max / 4 {
            return Ok(());
        }
        if int.children.len() < 2 {
            return Ok(());
        }
        if child.entries() == 0 {
            // An empty leaf goes, whatever its siblings hold. Its range
            // joins a neighbour's: removing child 0 makes child 1 the first,
            // whose lower bound is then the parent's.
            let gone = int.children.remove(i);
            let sep = int.edit_keys(|keys| {
                let sep = keys.remove(if i == 0 { 1 } else { i });
                if i == 0 {
                    keys[0] = Bytes::new();
                }
                sep
            });
            int.bytes -= internal_entry_cost(&sep);
            let node = gone.loaded().expect("loaded above: the writer lock keeps eviction away");
            self.retire_node(&node);
            return Ok(());
        }
        let (l, r) = if i + 1 < int.children.len() { (i, i + 1) } else { (i - 1, i) };
        let right = self.load_child(&int.children[r])?.clone();
        let left_bytes = self.load_child(&int.children[l])?.bytes();
        // Merged internal nodes take the separator as a key; leaves do not.
        let sep_cost = if matches!(right.body, Body::Internal(_)) { internal_entry_cost(&int.keys[r]) } else { 0 };
        if left_bytes + right.bytes() - PAGE_HEADER_BYTES + sep_cost > max {
            return Ok(());
        }
        let sep = int.edit_keys(|keys| keys.remove(r));
        int.bytes -= internal_entry_cost(&sep);
        int.children.remove(r);
        let left = self.make_mut(self.child_mut(int, l)?);
        match (&mut left.body, &right.body) {
            (Body::Leaf(ll), Body::Leaf(rl)) => {
                ll.entries.append_shared(&rl.entries);
                ll.bytes += rl.bytes - PAGE_HEADER_BYTES;
                ll.may_hold_big |= rl.may_hold_big;
            }
            (Body::Internal(li), Body::Internal(ri)) => {
                li.bytes += ri.bytes - PAGE_HEADER_BYTES - internal_entry_cost(&[]) + internal_entry_cost(&sep);
                li.edit_keys(|keys| {
                    keys.push(sep);
                    keys.extend(ri.keys[1..].iter().cloned());
                });
                li.children.append_shared(&ri.children);
            }
            _ => return Err(StorageError::corruption(self.bf.path(), 0, "siblings at different depths")),
        }
        let left: &Node = left;
        left.recharge(&self.meter);
        self.retire_node(&right);
        Ok(())
    }

    fn collapse_root(&self, root: &mut Arc<Node>) -> Result<()> {
        loop {
            let only = match &root.body {
                Body::Internal(int) if int.children.len() == 1 => self.load_child(&int.children[0])?.clone(),
                _ => return Ok(()),
            };
            let old = std::mem::replace(root, only);
            self.retire_node(&old);
        }
    }

    /// Bytes of the live tree's pages in memory: (clean, dirty).
    pub fn live_bytes(&self) -> LiveBytes {
        fn walk(node: &Node, acc: &mut LiveBytes) {
            if node.disk.addr().is_some() {
                acc.clean += node.charge.bytes();
            } else {
                acc.dirty += node.charge.bytes();
            }
            let children: Vec<&Arc<Child>> = match &node.body {
                Body::Leaf(_) => return,
                Body::Internal(int) => int.children.iter().collect(),
                Body::Runs(runs) => runs.runs.iter().map(|r| &r.root).collect(),
            };
            acc.internal += node.charge.bytes();
            for c in children {
                if let Some(n) = c.loaded() {
                    walk(&n, acc);
                }
            }
        }
        let mut acc = LiveBytes::default();
        walk(&self.snapshot(), &mut acc);
        acc
    }

    /// Evict leaves of the live tree until about `budget` bytes are gone,
    /// clock style: walking from `hand` (a key; empty = the start), a leaf
    /// read since the hand last passed gets a second chance; a clean one
    /// leaves its slot; a dirty one is reconciled first (its image written
    /// copy-on-write, reusing its decoded keys) when `dirty` allows. The
    /// caller holds the table's writer lock (page invariant 2). On return
    /// `hand` is where to resume (empty after a full turn). Internal pages
    /// are never evicted.
    pub fn evict(&self, budget: usize, dirty: bool, hand: &mut Vec<u8>) -> Result<Evicted> {
        let root = self.snapshot();
        let mut done = Evicted::default();
        let finished = match &root.body {
            Body::Runs(runs) => {
                let finished = self.evict_runs(runs, budget, dirty, hand, &mut done)?;
                self.evict_retired(budget, &mut done)?;
                finished
            }
            _ => self.evict_in(&root, budget, dirty, hand, true, &mut done)?,
        };
        if finished {
            hand.clear();
        }
        Ok(done)
    }

    /// `true` when the walk covered the whole subtree.
    pub(crate) fn evict_in(
        &self,
        node: &Arc<Node>,
        budget: usize,
        dirty: bool,
        hand: &mut Vec<u8>,
        from_hand: bool,
        done: &mut Evicted,
    ) -> Result<bool> {
        let Body::Internal(int) = &node.body else { return Ok(true) };
        let start = if from_hand { int.keys.child_for(hand) } else { 0 };
        for i in start..int.children.len() {
            if done.bytes >= budget {
                *hand = int.keys[i].to_vec();
                return Ok(false);
            }
            let child = &int.children[i];
            let Some(n) = child.loaded() else { continue };
            match &n.body {
                Body::Internal(_) => {
                    if !self.evict_in(&n, budget, dirty, hand, from_hand && i == start, done)? {
                        return Ok(false);
                    }
                }
                Body::Leaf(_) => self.evict_leaf(child, &n, dirty, done)?,
                Body::Runs(_) => unreachable!("a run list is only ever a root"),
            }
        }
        Ok(true)
    }

    /// Eviction's clock hand passes the leaf `n` in slot `child` of the live tree.
    pub(crate) fn evict_leaf(&self, child: &Child, n: &Arc<Node>, dirty: bool, done: &mut Evicted) -> Result<()> {
        done.visited += 1;
        bump(&self.counters.eviction_leaves_visited, 1);
        if n.accessed.swap(false, Ordering::Relaxed) {
            bump(&self.counters.eviction_leaves_spared, 1);
            return Ok(());
        }
        let addr = match n.disk.addr() {
            Some(a) => a,
            None if dirty => {
                let a = self.write_dirty(n)?;
                done.dirty += 1;
                bump(&self.counters.pages_evicted_dirty, 1);
                a
            }
            None => {
                bump(&self.counters.eviction_leaves_dirty_kept, 1);
                return Ok(());
            }
        };
        let bytes = n.charge.bytes();
        if child.evict(n, addr) {
            done.bytes += bytes;
            done.pages += 1;
            bump(&self.counters.pages_evicted, 1);
        } else {
            bump(&self.counters.eviction_leaves_raced, 1);
        }
        Ok(())
    }

    /// Write every dirty page of `root` (a snapshot) copy-on-write; returns
    /// the address of the root page.
    pub fn write_dirty(&self, node: &Arc<Node>) -> Result<BlockAddr> {
        self.write_dirty_in(node, &mut None)
    }

    /// `write_dirty`, noting every leaf it wrote with the slot holding it
    /// (for [`Tree::pack_written`]).
    /// A write-optimized table's root is its manifest, which also names
    /// `retired` (the runs merges replaced, as of the same snapshot).
    pub fn write_dirty_noting(&self, node: &Arc<Node>, retired: &[Run], written: &mut Written) -> Result<BlockAddr> {
        match &node.body {
            Body::Runs(runs) => self.write_manifest(node, runs, retired, &mut Some(written)),
            _ => self.write_dirty_in(node, &mut Some(written)),
        }
    }

    /// Pack the leaves a checkpoint wrote (page invariant 5) where the live
    /// tree still holds them unchanged: the copies are made outside the
    /// table's writer lock (`lock` takes it), the swaps under it, a batch
    /// of leaves at a time. Leaves are noted weakly: one evicted or dropped
    /// since is skipped, never kept in memory for this.
    pub fn pack_written<G>(&self, written: Written, lock: impl Fn() -> G) {
        let mut written = written.into_iter();
        loop {
            let batch: Vec<(Arc<Child>, Arc<Node>, Node)> = written
                .by_ref()
                .take(pack_batch_leaves)
                .filter_map(|(slot, old)| {
                    let (Some(slot), Some(old)) = (slot.upgrade(), old.upgrade()) else {
                        bump(&self.counters.leaves_pack_raced, 1);
                        return None;
                    };
                    let Body::Leaf(l) = &old.body else { unreachable!("only leaves are noted") };
                    let new = Node::new(Body::Leaf(l.packed()));
                    new.index_packed_leaf();
                    Some((slot, old, new))
                })
                .collect();
            if batch.is_empty() && written.len() == 0 {
                return;
            }
            let _writer = lock();
            let live = self.snapshot();
            for (slot, old, mut new) in batch {
                // Clean (the writer dirties a leaf it changes in place) and
                // its slot in the live tree, both under the lock held here.
                let Some(addr) = old.disk.addr() else {
                    bump(&self.counters.leaves_pack_raced, 1);
                    continue;
                };
                let Body::Leaf(l) = &old.body else { unreachable!() };
                let Some((first, _)) = l.entries.get(0) else { continue };
                if !self.slot_is_live(&live, first, &slot) {
                    bump(&self.counters.leaves_pack_raced, 1);
                    continue;
                }
                new.disk = crate::page::DiskSlot::with_addr(addr);
                new.accessed.store(old.accessed.load(Ordering::Relaxed), Ordering::Relaxed);
                let new = Arc::new(new);
                if slot.replace_leaf(&old, new.clone()) {
                    self.charge(&new);
                    // Snapshots that still hold the unpacked copy pin it.
                    old.mark_retired();
                    bump(&self.counters.leaves_packed, 1);
                } else {
                    bump(&self.counters.leaves_pack_raced, 1);
                }
            }
        }
    }

    /// Whether `slot` is the slot of the live tree (`live`, read under the
    /// writer lock) whose leaf holds `key`.
    fn slot_is_live(&self, live: &Arc<Node>, key: &[u8], slot: &Arc<Child>) -> bool {
        if let Body::Runs(runs) = &live.body {
            // Runs share no pages: the slot is live in at most one of them.
            return runs.runs.iter().any(|run| run.root.loaded().is_some_and(|n| self.slot_is_live(&n, key, slot)));
        }
        let mut node: Arc<Node> = live.clone();
        for _ in 0..tree_depth_max {
            let Body::Internal(int) = &node.body else { return false };
            let child = &int.children[int.keys.child_for(key)];
            if Arc::ptr_eq(child, slot) {
                return true;
            }
            // Internal nodes stay loaded; an unloaded child is a leaf.
            let next = match child.loaded() {
                Some(n) if matches!(n.body, Body::Internal(_)) => Arc::clone(&n),
                _ => return false,
            };
            node = next;
        }
        false
    }

    pub(crate) fn write_dirty_in(&self, node: &Arc<Node>, written: &mut Option<&mut Written>) -> Result<BlockAddr> {
        if let Some(addr) = node.disk.addr() {
            return Ok(addr);
        }
        let free = self.free();
        let (kind, image) = match &node.body {
            Body::Leaf(leaf) => {
                let mut overflow = Vec::new();
                for (_, value) in &leaf.entries {
                    if let Value::Big(big) = value {
                        let addr = match big.disk.addr() {
                            Some(a) => a,
                            None => {
                                let data = big.data.get().expect("a value without a block is in memory");
                                let a = self.bf.write_block(BlockKind::Overflow, data)?;
                                bump(&self.counters.overflow_blocks_written, 1);
                                bump(&self.counters.overflow_block_bytes_written, a.size as u64);
                                bump(&self.io.overflow, a.size as u64);
                                bump(&self.counters.data_bytes_written, a.size as u64);
                                big.disk.attach(a, &free);
                                a
                            }
                        };
                        overflow.push(addr);
                    }
                }
                let mut next_big = 0;
                let addrs: Vec<Option<BlockAddr>> = leaf
                    .entries
                    .iter()
                    .map(|(_, v)| match v {
                        Value::Big(_) => {
                            next_big += 1;
                            Some(overflow[next_big - 1])
                        }
                        Value::Inline(_) => None,
                    })
                    .collect();
                bump(&self.counters.leaf_pages_written, 1);
                (BlockKind::Leaf, encode_leaf(leaf, &|i| addrs[i].unwrap()))
            }
            Body::Internal(int) => {
                let mut addrs = Vec::with_capacity(int.children.len());
                for child in &int.children {
                    addrs.push(match child.loaded() {
                        Some(n) => {
                            let dirty_leaf = n.disk.addr().is_none() && matches!(n.body, Body::Leaf(_));
                            let addr = self.write_dirty_in(&n, written)?;
                            if let (true, Some(w)) = (dirty_leaf, written.as_deref_mut()) {
                                w.push((Arc::downgrade(child), Arc::downgrade(&n)));
                            }
                            addr
                        }
                        None => child.addr().expect("an unloaded child has an address"),
                    });
                }
                bump(&self.counters.internal_pages_written, 1);
                (BlockKind::Internal, encode_internal(int, &|i| addrs[i]))
            }
            Body::Runs(_) => return Err(self.misplaced_runs()),
        };
        let compressor = if kind == BlockKind::Leaf { self.geometry.compressor } else { Compressor::None };
        let addr = self.bf.write_block_with(kind, compressor, &image)?;
        let size = addr.size as u64;
        bump(&self.counters.data_bytes_written, size);
        if kind == BlockKind::Leaf {
            bump(&self.counters.leaf_image_bytes, image.len() as u64);
            bump(&self.counters.leaf_block_bytes_written, size);
            bump(&self.io.leaf, size);
        } else {
            bump(&self.counters.internal_block_bytes_written, size);
            bump(&self.io.internal, size);
        }
        node.disk.attach(addr, &free);
        Ok(addr)
    }
}

fn split_leaf(leaf: &mut Leaf) -> (Key, Arc<Node>) {
    let half = leaf.bytes / 2;
    let mut acc = PAGE_HEADER_BYTES;
    let mut m = 0;
    while m < leaf.entries.len() - 1 {
        acc += leaf_entry_cost(&leaf.entries[m].0, &leaf.entries[m].1);
        m += 1;
        if acc >= half {
            break;
        }
    }
    let right_entries = leaf.entries.split_off(m.max(1));
    let right_bytes: usize = right_entries.iter().map(|(k, v)| leaf_entry_cost(k, v)).sum();
    leaf.bytes -= right_bytes;
    // A copy: the key may be a slice of a page's buffer (`page::pack`),
    // which the parent would otherwise keep alive long after the leaf
    // goes, uncounted by the cache.
    let sep = Bytes::copy_from_slice(&right_entries[0].0);
    let right = Leaf {
        entries: right_entries,
        bytes: PAGE_HEADER_BYTES + right_bytes,
        arena: None,
        may_hold_big: leaf.may_hold_big,
    };
    (sep, Arc::new(Node::new(Body::Leaf(right))))
}

fn split_internal(int: &mut Internal) -> (Key, Arc<Node>) {
    let half = int.bytes / 2;
    let mut acc = PAGE_HEADER_BYTES;
    let mut m = 0;
    while m < int.children.len() - 2 {
        let key: &[u8] = if m == 0 { &[] } else { &int.keys[m] };
        acc += internal_entry_cost(key);
        m += 1;
        if acc >= half && m >= 2 {
            break;
        }
    }
    let mut keys = int.edit_keys(|keys| keys.split_off(m));
    let children = int.children.split_off(m);
    let sep = std::mem::replace(&mut keys[0], Bytes::new());
    let cost = |keys: &[Key]| {
        PAGE_HEADER_BYTES + internal_entry_cost(&[]) + keys[1..].iter().map(|k| internal_entry_cost(k)).sum::<usize>()
    };
    int.bytes = cost(&int.keys);
    let bytes = cost(&keys);
    (sep, Arc::new(Node::new(Body::Internal(Internal { keys: Keys::shared(keys), children, bytes }))))
}

/// Where a cursor takes the tree version it walks: the engine hands out
/// published versions, transactions their snapshot's version.
pub type RootSource = Arc<dyn Fn() -> Arc<Node> + Send + Sync>;

/// A position-keeping reader over one version of a table: a B+tree's
/// cursor, or the merge of a write-optimized table's runs (`runs.rs`).
///
/// `seek` takes the newest version of the tree; `next` and `prev` stay on
/// the version the cursor holds, so a scan sees one consistent state.
pub struct Cursor(Walk);

enum Walk {
    Tree(TreeCursor),
    Runs(Box<MergeCursor>),
}

/// The same call on whichever cursor walks the table.
macro_rules! each {
    ($walk:expr, $c:ident => $e:expr) => {
        match $walk {
            Walk::Tree($c) => $e,
            Walk::Runs($c) => $e,
        }
    };
}

// `next`/`prev` are fallible moves (they read pages), not `Iterator`s.
#[allow(clippy::should_implement_trait)]
impl Cursor {
    pub fn new(tree: Arc<Tree>) -> Cursor {
        Cursor::with_roots(tree, None)
    }

    /// A cursor whose seeks take their version from `roots`.
    pub fn with_roots(tree: Arc<Tree>, roots: Option<RootSource>) -> Cursor {
        Cursor(match tree.geometry.format {
            TableFormat::BTree => Walk::Tree(TreeCursor::with_roots(tree, roots)),
            TableFormat::WriteOptimized => Walk::Runs(Box::new(MergeCursor::new(tree, roots))),
        })
    }

    /// Limit every later move to keys within the bounds; resets the position.
    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        each!(&mut self.0, c => c.set_bounds(lower, upper))
    }

    /// Forget the position: the next `next` starts at `first`, `prev` at `last`.
    pub fn reset(&mut self) {
        each!(&mut self.0, c => c.reset())
    }

    /// The entry the cursor stands on, lent: no reference is taken on the
    /// page's buffer (an overflow value is read on first use).
    pub fn entry(&self) -> Result<Option<(&[u8], &[u8])>> {
        each!(&self.0, c => c.entry())
    }

    /// Position on the first entry with key >= `key` (within bounds) and return it.
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        each!(&mut self.0, c => c.seek(key))
    }

    /// `seek` without copying the entry out: whether the cursor stands on
    /// one, which `entry` then lends.
    pub fn seek_to(&mut self, key: &[u8]) -> Result<bool> {
        each!(&mut self.0, c => c.seek_to(key))
    }

    /// Position on `key` exactly; returns its value or `None` (and leaves the cursor unpositioned).
    pub fn seek_exact(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        each!(&mut self.0, c => c.seek_exact(key))
    }

    /// Position on the first entry within bounds and return it.
    pub fn first(&mut self) -> Result<Option<Entry>> {
        each!(&mut self.0, c => c.first())
    }

    /// Position on the last entry within bounds and return it.
    pub fn last(&mut self) -> Result<Option<Entry>> {
        each!(&mut self.0, c => c.last())
    }

    /// Move to the next entry and return it; an unpositioned cursor starts at `first`.
    pub fn next(&mut self) -> Result<Option<Entry>> {
        each!(&mut self.0, c => c.next())
    }

    /// `next` without copying the entry out: whether the cursor stands on
    /// one, which `entry` then lends.
    pub fn advance(&mut self) -> Result<bool> {
        each!(&mut self.0, c => c.advance())
    }

    /// Move to the previous entry and return it; an unpositioned cursor starts at `last`.
    pub fn prev(&mut self) -> Result<Option<Entry>> {
        each!(&mut self.0, c => c.prev())
    }
}

/// A cursor over one B+tree.
pub(crate) struct TreeCursor {
    tree: Arc<Tree>,
    /// `None`: the tree's newest version.
    roots: Option<RootSource>,
    /// Path from the root: each internal node with the index of the child taken.
    path: Vec<(Arc<Node>, usize)>,
    leaf: Option<(Arc<Node>, usize)>,
    /// Ran off an end: `next`/`prev` return `None` until a seek, first or last.
    exhausted: bool,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Moving forward, read the next pages that lie side by side on disk
    /// with one read (`Tree::read_ahead`): for a walk of a whole run.
    read_ahead: bool,
}

pub type Entry = (Key, Bytes);

// `next`/`prev` are fallible moves (they read pages), not `Iterator`s.
#[allow(clippy::should_implement_trait)]
impl TreeCursor {
    /// A cursor whose seeks take their version from `roots`.
    pub fn with_roots(tree: Arc<Tree>, roots: Option<RootSource>) -> TreeCursor {
        TreeCursor {
            tree,
            roots,
            path: Vec::new(),
            leaf: None,
            exhausted: false,
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            read_ahead: false,
        }
    }

    /// This cursor reads ahead as it moves forward (see `read_ahead`).
    pub(crate) fn reading_ahead(mut self) -> TreeCursor {
        self.read_ahead = true;
        self
    }

    /// The child `i` of `int`, read (ahead, when the cursor does) if need be.
    fn child(&self, int: &Internal, i: usize, back: bool) -> Result<Arc<Node>> {
        if self.read_ahead && !back {
            self.tree.read_ahead(int, i);
        }
        Ok(self.tree.load_child(&int.children[i])?.clone())
    }

    fn root(&self) -> Arc<Node> {
        match &self.roots {
            Some(f) => f(),
            None => self.tree.snapshot(),
        }
    }

    /// Limit every later move to keys within the bounds; resets the position.
    pub fn set_bounds(&mut self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) {
        self.lower = lower;
        self.upper = upper;
        self.reset();
    }

    /// Forget the position: the next `next` starts at `first`, `prev` at `last`.
    pub fn reset(&mut self) {
        self.path.clear();
        self.leaf = None;
        self.exhausted = false;
    }

    /// Record that a move found nothing; later moves find nothing too.
    fn end(&mut self, found: bool) -> bool {
        if !found {
            self.path.clear();
            self.leaf = None;
            self.exhausted = true;
        }
        found
    }

    /// The entry a move stopped on, copied out (`found` from the move).
    fn taken(&self, found: bool) -> Result<Option<Entry>> {
        if !found {
            return Ok(None);
        }
        let (leaf, i) = self.leaf.as_ref().expect("a move that found an entry stands on it");
        if let Some(view) = leaf.packed_view() {
            return Ok(Some((view.key_bytes(*i), view.value(*i))));
        }
        let Body::Leaf(l) = &leaf.body else { unreachable!() };
        let (k, v) = &l.entries[*i];
        Ok(Some((k.clone(), self.tree.value_bytes(v)?)))
    }

    /// The entry the cursor stands on, lent: no reference is taken on the
    /// page's buffer (an overflow value is read on first use).
    pub fn entry(&self) -> Result<Option<(&[u8], &[u8])>> {
        let Some((leaf, i)) = &self.leaf else {
            return Ok(None);
        };
        // A move that failed part way (an I/O error) may leave the
        // position past the leaf's last entry.
        let (k, v) = match leaf.packed_view() {
            Some(view) if *i < view.len() => (view.key(*i), view.value_slice(*i)),
            Some(_) => return Ok(None),
            None => {
                let Body::Leaf(l) = &leaf.body else { unreachable!() };
                let Some((k, v)) = l.entries.get(*i) else { return Ok(None) };
                (&k[..], self.tree.value_ref(v)?)
            }
        };
        Ok(self.in_bounds(k).then_some((k, v)))
    }

    fn in_bounds(&self, key: &[u8]) -> bool {
        let lower_ok = match &self.lower {
            Bound::Unbounded => true,
            Bound::Included(l) => key >= l.as_slice(),
            Bound::Excluded(l) => key > l.as_slice(),
        };
        let upper_ok = match &self.upper {
            Bound::Unbounded => true,
            Bound::Included(u) => key <= u.as_slice(),
            Bound::Excluded(u) => key < u.as_slice(),
        };
        lower_ok && upper_ok
    }

    /// The key at the cursor's position, if it names an entry.
    fn key_here(&self) -> Option<&[u8]> {
        let (leaf, i) = self.leaf.as_ref()?;
        match leaf.packed_view() {
            Some(view) => (*i < view.len()).then(|| view.key(*i)),
            None => {
                let Body::Leaf(l) = &leaf.body else { unreachable!() };
                l.entries.get(*i).map(|(k, _)| &k[..])
            }
        }
    }

    /// Whether the cursor stands on an entry within its bounds.
    fn on_entry(&self) -> bool {
        self.key_here().is_some_and(|k| self.in_bounds(k))
    }

    /// Descend from `node` always taking the first (`back == false`) or last child.
    fn descend_edge(&mut self, mut node: Arc<Node>, back: bool) -> Result<()> {
        loop {
            let next = match &node.body {
                Body::Runs(_) => return Err(self.tree.misplaced_runs()),
                Body::Leaf(l) => {
                    let len = l.entries.len();
                    let idx = if back { len.wrapping_sub(1) } else { 0 };
                    self.leaf = Some((node.clone(), idx));
                    return Ok(());
                }
                Body::Internal(int) => {
                    let idx = if back { int.children.len() - 1 } else { 0 };
                    let child = self.child(int, idx, back)?;
                    self.path.push((node.clone(), idx));
                    child
                }
            };
            if self.path.len() > tree_depth_max {
                return Err(StorageError::corruption(self.tree.bf.path(), 0, "tree deeper than the depth limit"));
            }
            node = next;
        }
    }

    /// Move to the neighbouring leaf; `false` at the end of the tree.
    fn step_leaf(&mut self, back: bool) -> Result<bool> {
        while let Some((node, idx)) = self.path.pop() {
            let Body::Internal(int) = &node.body else { unreachable!() };
            let next = if back { idx.checked_sub(1) } else { Some(idx + 1).filter(|&i| i < int.children.len()) };
            if let Some(n) = next {
                let child = self.child(int, n, back)?;
                self.path.push((node.clone(), n));
                self.descend_edge(child, back)?;
                return Ok(true);
            }
        }
        self.leaf = None;
        Ok(false)
    }

    /// Fix the position so it names an entry, moving over empty leaves.
    fn settle(&mut self, back: bool) -> Result<bool> {
        loop {
            let Some((leaf, i)) = &self.leaf else {
                return Ok(false);
            };
            let Body::Leaf(l) = &leaf.body else { unreachable!() };
            if *i < l.entries.len() {
                return Ok(true);
            }
            if !self.step_leaf(back)? {
                return Ok(false);
            }
        }
    }

    /// Position on the first entry with key >= `key` (within bounds) and return it.
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        let found = self.seek_to(key)?;
        self.taken(found)
    }

    /// `seek` without copying the entry out: whether the cursor stands on
    /// one, which `entry` then lends.
    pub fn seek_to(&mut self, key: &[u8]) -> Result<bool> {
        let found = self.seek_inner(key)?;
        Ok(self.end(found))
    }

    fn seek_inner(&mut self, key: &[u8]) -> Result<bool> {
        let below_lower = match &self.lower {
            Bound::Unbounded => false,
            Bound::Included(l) => key < l.as_slice(),
            Bound::Excluded(l) => key <= l.as_slice(),
        };
        if below_lower {
            return self.first_inner();
        }
        self.seek_in(self.root(), key)
    }

    /// `seek_inner` in the given version of the tree.
    fn seek_in(&mut self, root: Arc<Node>, key: &[u8]) -> Result<bool> {
        self.reset();
        let mut node = root;
        loop {
            let next = match &node.body {
                Body::Runs(_) => return Err(self.tree.misplaced_runs()),
                Body::Leaf(_) => {
                    let i = node.search(key);
                    self.leaf = Some((node.clone(), i));
                    break;
                }
                Body::Internal(int) => {
                    let idx = node.search(key);
                    let child = self.tree.load_child(&int.children[idx])?.clone();
                    self.path.push((node.clone(), idx));
                    child
                }
            };
            node = next;
        }
        Ok(self.settle(false)? && self.on_entry())
    }

    /// Position on `key` exactly; returns its value or `None` (and leaves the cursor unpositioned).
    pub fn seek_exact(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        if self.seek_inner(key)? && self.key_here() == Some(key) {
            return Ok(self.taken(true)?.map(|(_, v)| v));
        }
        self.reset();
        Ok(None)
    }

    /// Position on the first entry within bounds and return it.
    pub fn first(&mut self) -> Result<Option<Entry>> {
        let found = self.first_inner()?;
        let found = self.end(found);
        self.taken(found)
    }

    fn first_inner(&mut self) -> Result<bool> {
        match self.lower.clone() {
            Bound::Unbounded => {
                self.reset();
                self.descend_edge(self.root(), false)?;
                Ok(self.settle(false)? && self.on_entry())
            }
            Bound::Included(l) => self.seek_inner(&l),
            Bound::Excluded(l) => {
                self.seek_position(&l)?;
                if self.key_here() == Some(l.as_slice()) {
                    let Some((_, i)) = &mut self.leaf else { unreachable!() };
                    *i += 1;
                }
                Ok(self.settle(false)? && self.on_entry())
            }
        }
    }

    /// Position on the last entry within bounds and return it.
    pub fn last(&mut self) -> Result<Option<Entry>> {
        let found = self.last_inner()?;
        let found = self.end(found);
        self.taken(found)
    }

    fn last_inner(&mut self) -> Result<bool> {
        self.reset();
        match self.upper.clone() {
            Bound::Unbounded => {
                self.descend_edge(self.root(), true)?;
            }
            Bound::Included(u) | Bound::Excluded(u) => {
                // Position after the bound, then step back.
                self.seek_position(&u)?;
                let inclusive_hit = matches!(self.upper, Bound::Included(_)) && self.key_here() == Some(u.as_slice());
                if inclusive_hit {
                    return Ok(self.on_entry());
                }
                return self.prev_raw();
            }
        }
        Ok(self.settle_back()? && self.on_entry())
    }

    /// Like `seek` but without bound checks on the result.
    fn seek_position(&mut self, key: &[u8]) -> Result<()> {
        let (lower, upper) = (
            std::mem::replace(&mut self.lower, Bound::Unbounded),
            std::mem::replace(&mut self.upper, Bound::Unbounded),
        );
        // One version for the whole move: a second snapshot could hold
        // keys the first did not.
        let root = self.root();
        let r = self.seek_in(root.clone(), key);
        self.lower = lower;
        self.upper = upper;
        if self.leaf.is_none() {
            // Past the end: stand just after the last entry.
            self.descend_edge(root, true)?;
            if let Some((leaf, i)) = &mut self.leaf {
                *i = leaf.entries();
            }
        }
        r.map(|_| ())
    }

    fn settle_back(&mut self) -> Result<bool> {
        loop {
            let Some((leaf, i)) = &self.leaf else {
                return Ok(false);
            };
            if *i < leaf.entries() {
                return Ok(true);
            }
            if !self.step_leaf(true)? {
                return Ok(false);
            }
        }
    }

    /// Move to the next entry and return it; an unpositioned cursor starts at `first`.
    pub fn next(&mut self) -> Result<Option<Entry>> {
        let found = self.advance()?;
        self.taken(found)
    }

    /// `next` without copying the entry out: whether the cursor stands on
    /// one, which `entry` then lends.
    pub fn advance(&mut self) -> Result<bool> {
        if self.exhausted {
            return Ok(false);
        }
        let Some((_, i)) = &mut self.leaf else {
            let found = self.first_inner()?;
            return Ok(self.end(found));
        };
        *i += 1;
        let found = self.settle(false)? && self.on_entry();
        Ok(self.end(found))
    }

    /// Move to the previous entry and return it; an unpositioned cursor starts at `last`.
    pub fn prev(&mut self) -> Result<Option<Entry>> {
        if self.exhausted {
            return Ok(None);
        }
        let found = if self.leaf.is_none() { self.last_inner()? } else { self.prev_raw()? };
        let found = self.end(found);
        self.taken(found)
    }

    /// `prev` without copying the entry out (see `advance`).
    pub(crate) fn retreat(&mut self) -> Result<bool> {
        if self.exhausted {
            return Ok(false);
        }
        let found = if self.leaf.is_none() { self.last_inner()? } else { self.prev_raw()? };
        Ok(self.end(found))
    }

    /// `first` without copying the entry out.
    pub(crate) fn first_to(&mut self) -> Result<bool> {
        let found = self.first_inner()?;
        Ok(self.end(found))
    }

    /// `last` without copying the entry out.
    pub(crate) fn last_to(&mut self) -> Result<bool> {
        let found = self.last_inner()?;
        Ok(self.end(found))
    }

    /// The key the cursor stands on, lent; the caller knows it stands on
    /// an entry within bounds (a lending move said so).
    pub(crate) fn key(&self) -> Option<&[u8]> {
        self.key_here()
    }

    /// The entry the cursor stands on, copied out (sharing the page's
    /// buffer where it can); the caller knows it stands on one.
    pub(crate) fn current(&self) -> Result<Option<Entry>> {
        self.taken(self.leaf.is_some())
    }

    fn prev_raw(&mut self) -> Result<bool> {
        let Some((_, i)) = &mut self.leaf else {
            return Ok(false);
        };
        if *i == 0 {
            if !self.step_leaf(true)? {
                return Ok(false);
            }
        } else {
            *i -= 1;
        }
        Ok(self.settle_back()? && self.on_entry())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::Entries;

    /// A separator is a key of its own: a slice of the split leaf's packed
    /// buffer would keep that buffer alive in the parent, uncounted by the
    /// cache, long after the leaf is evicted.
    #[test]
    fn a_split_separator_keeps_no_page_buffer_alive() {
        let entries: Entries = (0..64u32)
            .map(|i| (Bytes::from(format!("key{i:04}")), Value::Inline(Bytes::from(vec![7u8; 100]))))
            .collect();
        let bytes = PAGE_HEADER_BYTES + entries.iter().map(|(k, v)| leaf_entry_cost(k, v)).sum::<usize>();
        let mut leaf = Leaf { entries, bytes, arena: None, may_hold_big: false }.packed();
        let arena = leaf.arena.clone().expect("a packed leaf has an arena");
        let (sep, right) = split_leaf(&mut leaf);
        let Body::Leaf(r) = &right.body else { unreachable!() };
        assert_eq!(sep, r.entries[0].0, "the separator is the right half's first key");
        let within =
            |p: *const u8| (arena.as_ptr() as usize..arena.as_ptr() as usize + arena.len()).contains(&(p as usize));
        assert!(within(r.entries[0].0.as_ptr()), "the right half's keys stay in the arena");
        assert!(!within(sep.as_ptr()), "the separator points into the leaf's buffer");
    }
}
