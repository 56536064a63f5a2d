//! In-memory pages of the B+tree and their disk images.
//!
//! A tree in memory is a persistent (copy-on-write) structure of `Arc<Node>`:
//! readers and checkpoints hold a root and see an immutable version; the
//! writer changes nodes in place when it holds the only reference and copies
//! them otherwise (path copying).
//!
//! Invariants:
//! 1. A node whose `disk` slot holds an address has exactly that content on
//!    disk, and so do all of its descendants (any change dirties the path).
//! 2. Every in-memory version of the tree that references a block shares
//!    one `Child` slot for it. Eviction may empty a slot only while the
//!    slot is in the live tree, only of a clean leaf, and only under the
//!    table's writer lock; the writer takes a slot out of the live tree only
//!    with its node loaded, and such a slot is never emptied again. So a
//!    block is only ever freed after its content is in memory for every
//!    version that could still read it.
//! 4. Every node in memory is charged to the cache meter for its estimated
//!    size ([`Node::mem_bytes`]) from creation to drop; a node the live tree
//!    no longer holds (still held by a snapshot) also counts as pinned.
//! 3. Keys are decoded once, when a page is read, and shared (`Bytes`)
//!    from then on: building an image never decodes a key.
//! 5. A leaf read from disk is packed ([`Leaf::packed`]): its keys and
//!    inline values are slices of one buffer, each key followed by its
//!    value. A checkpoint packs the leaves it wrote that are still in the
//!    live tree, unchanged (`Tree::pack_written`).
//!
//! Leaf image payload: `[type u8 = 1][flags u8][entries u32][0u16]` then per
//! entry `[prefix varint][suffix_len varint][suffix][vtype u8]` followed by
//! `[len varint][bytes]` (inline, vtype 0) or `[addr 16][len u32]` (overflow,
//! vtype 1). `prefix` is the bytes shared with the previous key.
//! Internal image payload: `[type u8 = 2][flags u8][entries u32][0u16]` then
//! per child `[key_len varint][key][addr 16]`; the first key is empty
//! (the lower bound comes from the parent).
//! Manifest payload (a write-optimized table's root, `runs.rs`):
//! `[type u8 = 3][flags u8][live runs u32][0u16][retired runs u32]` then
//! per run, live ones newest first then retired ones, `[addr 16]` of the
//! run's root page and `[bytes u64]` of its leaf images.

use crate::block::{BlockAddr, BlockKind};
use crate::cache::CacheMeter;
use crate::codec::{put_varint, varint_len, Reader};
use crate::entries::{Entries, FixedChunks};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Keys and values are `Bytes`: a packed leaf (invariant 5) keeps them in
/// one buffer instead of an allocation per key and per value.
pub type Key = Bytes;

/// Which block (if any) holds a node's or value's current content.
#[derive(Debug, Default)]
pub struct DiskSlot {
    state: Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    addr: Option<BlockAddr>,
    retired: bool,
}

impl DiskSlot {
    pub fn with_addr(addr: BlockAddr) -> DiskSlot {
        DiskSlot { state: Mutex::new(SlotState { addr: Some(addr), retired: false }) }
    }

    pub fn addr(&self) -> Option<BlockAddr> {
        self.state.lock().unwrap().addr
    }

    /// A checkpoint wrote this content at `addr`. If the live tree already
    /// dropped the content, the block is referenced only by that checkpoint
    /// and is freed at once (it stays on discard until a newer one is durable).
    pub fn attach(&self, addr: BlockAddr, free: &dyn Fn(BlockAddr)) {
        let mut st = self.state.lock().unwrap();
        assert!(st.addr.is_none(), "content written twice");
        if st.retired {
            free(addr);
        } else {
            st.addr = Some(addr);
        }
    }

    /// The live tree no longer references this content. Its block is freed
    /// (to discard) but the address stays readable: a checkpoint snapshot
    /// taken earlier may still name it.
    pub fn retire(&self, free: &dyn Fn(BlockAddr)) {
        let mut st = self.state.lock().unwrap();
        assert!(!st.retired, "content retired twice");
        st.retired = true;
        if let Some(a) = st.addr {
            free(a);
        }
    }

    /// The content is about to change in place (only the live tree holds it).
    pub fn dirty(&self, free: &dyn Fn(BlockAddr)) {
        let mut st = self.state.lock().unwrap();
        debug_assert!(!st.retired);
        if let Some(a) = st.addr.take() {
            free(a);
        }
    }
}

/// A value stored out of line in its own overflow block.
#[derive(Debug)]
pub struct BigValue {
    pub len: u32,
    pub data: OnceLock<Bytes>,
    pub disk: DiskSlot,
}

#[derive(Clone, Debug)]
pub enum Value {
    Inline(Bytes),
    Big(Arc<BigValue>),
}

impl Value {
    pub fn new(bytes: &[u8], overflow_min_bytes: usize) -> Value {
        if bytes.len() >= overflow_min_bytes {
            let data = OnceLock::new();
            let _ = data.set(Bytes::copy_from_slice(bytes));
            Value::Big(Arc::new(BigValue { len: bytes.len() as u32, data, disk: DiskSlot::default() }))
        } else {
            Value::Inline(Bytes::copy_from_slice(bytes))
        }
    }

    /// Bytes this value adds to a leaf image.
    pub fn image_cost(&self) -> usize {
        match self {
            Value::Inline(b) => 1 + varint_len(b.len() as u64) + b.len(),
            Value::Big(_) => 1 + BlockAddr::ENCODED_BYTES + 4,
        }
    }

    pub fn retire(&self, free: &dyn Fn(BlockAddr)) {
        if let Value::Big(b) = self {
            b.disk.retire(free);
        }
    }
}

pub const PAGE_HEADER_BYTES: usize = 8;
const PAGE_TYPE_LEAF: u8 = 1;
const PAGE_TYPE_INTERNAL: u8 = 2;
const PAGE_TYPE_MANIFEST: u8 = 3;

pub fn leaf_entry_cost(key: &[u8], value: &Value) -> usize {
    2 * varint_len(key.len() as u64) + key.len() + value.image_cost()
}

pub fn internal_entry_cost(key: &[u8]) -> usize {
    varint_len(key.len() as u64) + key.len() + BlockAddr::ENCODED_BYTES
}

#[derive(Debug, Default, Clone)]
pub struct Leaf {
    pub entries: Entries,
    /// Upper bound of the image size (prefix compression only shrinks it).
    pub bytes: usize,
    /// The buffer a packed leaf's entries are slices of (invariant 5);
    /// dropped when the writer changes the leaf.
    pub arena: Option<Bytes>,
    /// The leaf may hold an overflow value (`Value::Big`); when false it
    /// holds none, and a commit's prefetch need not search it
    /// (`Tree::prefetch`). Set when one is decoded or written, kept through
    /// splits and merges, cleared only by a fresh read of the page.
    pub may_hold_big: bool,
}

impl Leaf {
    /// The same entries with every key and inline value copied, in order,
    /// into one buffer (each key followed by its value). A leaf changed in
    /// memory holds an allocation per key and per value, scattered over the
    /// heap in the order they were written; a packed one is read with one
    /// cache miss per entry and scanned in address order (invariant 5).
    pub fn packed(&self) -> Leaf {
        let e = &self.entries;
        let (entries, arena) = pack(e.len(), |i| (&e[i].0[..], &e[i].1));
        Leaf { entries, bytes: self.bytes, arena: Some(arena), may_hold_big: self.may_hold_big }
    }

    /// `may_hold_big` is true, or the leaf holds no overflow value (checked
    /// in debug builds).
    pub fn check_bigs(&self) {
        if cfg!(debug_assertions) && !self.may_hold_big {
            assert!(
                self.entries.iter().all(|e| !matches!(e.1, Value::Big(_))),
                "an overflow value in a leaf marked without"
            );
        }
    }
}

/// Entries whose keys and inline values are slices of one buffer, each key
/// followed by its value: `cell(i)` for `i` in `0..n`. Values stored out of
/// line stay as they are.
fn pack<'a>(n: usize, cell: impl Fn(usize) -> (&'a [u8], &'a Value)) -> (Entries, Bytes) {
    let inline_len = |v: &Value| match v {
        Value::Inline(b) => b.len(),
        Value::Big(_) => 0,
    };
    let size: usize = (0..n).map(&cell).map(|(k, v)| k.len() + inline_len(v)).sum();
    let mut arena: Vec<u8> = Vec::with_capacity(size);
    for (k, v) in (0..n).map(&cell) {
        arena.extend_from_slice(k);
        if let Value::Inline(b) = v {
            arena.extend_from_slice(b);
        }
    }
    debug_assert_eq!(arena.len(), size);
    let arena = Bytes::from(arena);
    let mut at = 0;
    let entries = (0..n)
        .map(|i| {
            let (k, v) = cell(i);
            let key = arena.slice(at..at + k.len());
            at += k.len();
            let value = match v {
                Value::Inline(b) => {
                    at += b.len();
                    Value::Inline(arena.slice(at - b.len()..at))
                }
                big => big.clone(),
            };
            (key, value)
        })
        .collect();
    (entries, arena)
}

/// A child reference of an internal node: the block it was read from (if
/// any) and the node once loaded. Shared between tree versions (invariant 2).
#[derive(Debug, Default)]
pub struct Child {
    /// An internal child, once loaded: kept (internal pages stay in memory).
    inner: OnceLock<Arc<Node>>,
    /// The block, and a loaded leaf child, which eviction may drop.
    slot: RwLock<LeafSlot>,
}

#[derive(Debug, Default)]
struct LeafSlot {
    addr: Option<BlockAddr>,
    leaf: Option<Arc<Node>>,
}

/// A node reached through a child slot: borrowed for internal nodes (they
/// never leave their slot), owned for leaves (eviction may empty the slot).
pub enum NodeRef<'a> {
    Borrowed(&'a Arc<Node>),
    Owned(Arc<Node>),
}

impl std::ops::Deref for NodeRef<'_> {
    type Target = Arc<Node>;
    fn deref(&self) -> &Arc<Node> {
        match self {
            NodeRef::Borrowed(n) => n,
            NodeRef::Owned(n) => n,
        }
    }
}

impl Child {
    pub fn on_disk(addr: BlockAddr) -> Arc<Child> {
        Arc::new(Child { inner: OnceLock::new(), slot: RwLock::new(LeafSlot { addr: Some(addr), leaf: None }) })
    }

    pub fn in_memory(node: Arc<Node>) -> Arc<Child> {
        let child = Child::default();
        child.install(node);
        Arc::new(child)
    }

    /// The block to read when the child is not in memory.
    pub fn addr(&self) -> Option<BlockAddr> {
        self.slot.read().unwrap().addr
    }

    pub fn loaded(&self) -> Option<NodeRef<'_>> {
        if let Some(n) = self.inner.get() {
            return Some(NodeRef::Borrowed(n));
        }
        self.slot.read().unwrap().leaf.clone().map(NodeRef::Owned)
    }

    /// Put a freshly read (or created) node in the slot; if another reader
    /// got there first, theirs wins.
    pub fn install(&self, node: Arc<Node>) -> NodeRef<'_> {
        match node.body {
            Body::Internal(_) | Body::Runs(_) => {
                let _ = self.inner.set(node);
                NodeRef::Borrowed(self.inner.get().unwrap())
            }
            Body::Leaf(_) => {
                let mut slot = self.slot.write().unwrap();
                NodeRef::Owned(slot.leaf.get_or_insert(node).clone())
            }
        }
    }

    /// The loaded node, for the writer of a slot only it holds.
    pub fn node_mut(&mut self) -> Option<&mut Arc<Node>> {
        match self.inner.get_mut() {
            Some(n) => Some(n),
            None => self.slot.get_mut().unwrap().leaf.as_mut(),
        }
    }

    /// Put `with` (the same content, packed) in the place of the leaf
    /// `expect`. The caller holds the table's writer lock and has checked
    /// that `expect` is clean and in the live tree; `with` takes over its
    /// block (page invariant 2 holds: the slot's content does not change).
    pub fn replace_leaf(&self, expect: &Arc<Node>, with: Arc<Node>) -> bool {
        let mut slot = self.slot.write().unwrap();
        match &slot.leaf {
            Some(n) if Arc::ptr_eq(n, expect) => {
                slot.leaf = Some(with);
                true
            }
            _ => false,
        }
    }

    /// Drop the leaf `expect` from the slot, which from now on reads it
    /// from `addr` (its clean image). The caller holds the table's writer
    /// lock and has checked the slot is in the live tree (invariant 2).
    pub fn evict(&self, expect: &Arc<Node>, addr: BlockAddr) -> bool {
        let mut slot = self.slot.write().unwrap();
        match &slot.leaf {
            Some(n) if Arc::ptr_eq(n, expect) => {
                slot.leaf = None;
                slot.addr = Some(addr);
                true
            }
            _ => false,
        }
    }
}

/// Copying an internal node (every commit copies the ones on its paths)
/// bumps one count for its keys, which change only when a child splits or
/// merges (with their search index), and one per chunk of its child slots.
#[derive(Debug, Clone)]
pub struct Internal {
    /// `keys[i]` is the lowest key of `children[i]`; `keys[0]` is empty.
    pub keys: Arc<Keys>,
    pub children: FixedChunks<Arc<Child>>,
    pub bytes: usize,
}

impl Internal {
    /// Change the keys: a fresh copy (with no search index yet), as other
    /// versions share them.
    pub fn edit_keys<R>(&mut self, f: impl FnOnce(&mut Vec<Key>) -> R) -> R {
        let mut keys = self.keys.to_vec();
        let r = f(&mut keys);
        self.keys = Keys::shared(keys);
        r
    }
}

/// An internal node's keys and their search index, shared by every version
/// of the node until a child splits or merges: a commit's copy of the node
/// keeps the index, so writers search through it as readers do.
#[derive(Debug)]
pub struct Keys {
    keys: Box<[Key]>,
    index: OnceLock<SearchIndex>,
}

impl Keys {
    pub fn shared(keys: Vec<Key>) -> Arc<Keys> {
        Arc::new(Keys { keys: keys.into(), index: OnceLock::new() })
    }

    /// Index of the child whose range holds `key`.
    pub fn child_for(&self, key: &[u8]) -> usize {
        let rest = &self.keys[1..];
        let index = self.index.get_or_init(|| SearchIndex::build(rest.len(), |i| &rest[i]));
        let i = index.search(|i| &rest[i], key, true);
        debug_assert_eq!(i, rest.partition_point(|k| &**k <= key));
        i
    }

    fn index_bytes(&self) -> usize {
        self.index.get().map_or(0, SearchIndex::mem_bytes)
    }
}

impl std::ops::Deref for Keys {
    type Target = [Key];
    fn deref(&self) -> &[Key] {
        &self.keys
    }
}

/// A write-optimized table's root (see `runs.rs`): its runs, newest first.
/// `runs[0]` is the memtable.
#[derive(Debug, Clone)]
pub struct Runs {
    pub runs: Vec<Run>,
    /// Memory charged for the memtable's writes since it was started (an
    /// estimate, [`leaf_entry_mem`]): past the budget it is frozen.
    pub memtable_bytes: usize,
    /// Every version of the run list since the last merge was installed
    /// holds this epoch (`runs.rs` invariant 5).
    pub epoch: Arc<Epoch>,
}

/// One run: the slot of its root page and the bytes of its leaf images
/// (estimated from the entries' costs while it is the memtable).
#[derive(Debug, Clone)]
pub struct Run {
    pub root: Arc<Child>,
    pub bytes: u64,
}

/// A span of run-list versions. An epoch keeps the next one alive, so an
/// epoch lives while any version of it or of an older one does.
#[derive(Debug, Default)]
pub struct Epoch {
    pub newer: OnceLock<Arc<Epoch>>,
}

#[derive(Debug, Clone)]
pub enum Body {
    Leaf(Leaf),
    Internal(Internal),
    Runs(Runs),
}

#[derive(Debug)]
pub struct Node {
    pub body: Body,
    pub disk: DiskSlot,
    /// A leaf's: built on the first read searches of an unchanging leaf;
    /// reset whenever the writer changes it. (An internal node's index is
    /// its keys', [`Keys`].)
    pub search: OnceLock<SearchIndex>,
    /// Set by readers, cleared by eviction's clock hand (second chance).
    pub accessed: AtomicBool,
    /// Read searches so far; the search index is built after a few.
    searches: AtomicU32,
    pub charge: Charge,
}

/// What a node is charged to the cache meter (invariant 4).
#[derive(Debug, Default)]
pub struct Charge {
    meter: OnceLock<Arc<CacheMeter>>,
    bytes: AtomicUsize,
    /// No longer in the live tree: counted as pinned too.
    retired: AtomicBool,
}

impl Charge {
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(m) = self.charge.meter.get() {
            let b = self.charge.bytes.load(Ordering::Relaxed);
            m.release(b, self.charge.retired.load(Ordering::Relaxed));
        }
    }
}

impl Clone for Node {
    /// A copy is new content: it has no block yet.
    fn clone(&self) -> Node {
        Node::new(self.body.clone())
    }
}

/// Binary search over keys held behind pointers costs a cache miss per
/// probe. This index keeps, for each key, the 8 bytes that follow the
/// prefix shared by the node's first and last key, as a big-endian `u64`,
/// in one array: probes touch that array and the key bytes only to break
/// ties.
#[derive(Debug)]
pub struct SearchIndex {
    prefix: Box<[u8]>,
    hints: Box<[u64]>,
    /// Every `HINT_BLOCK`th hint: a search reads this short array, then one
    /// cache line of `hints`, where a binary search over all of `hints`
    /// touches a line per probe.
    top: Box<[u64]>,
    /// A packed leaf's entries as offsets into its buffer.
    packed: Option<PackedView>,
}

/// The entries of a packed leaf (invariant 5) without its chunks: entry
/// `i` is `arena[start(i)..ends[i].0]` (key), then `..ends[i].1` (value),
/// where `start(i)` is the previous entry's value end. Two dependent loads
/// (offsets, then the bytes) instead of four (chunk list, chunk, entry,
/// bytes). Only for leaves whose values are all inline.
#[derive(Debug)]
pub struct PackedView {
    arena: Bytes,
    ends: Box<[(u32, u32)]>,
}

impl PackedView {
    /// The view of `leaf`, if its entries are still the consecutive slices
    /// of its arena that packing made them (checked entry by entry, so a
    /// leaf changed after packing never gets a view of stale bytes).
    fn of(leaf: &Leaf) -> Option<PackedView> {
        let arena = leaf.arena.as_ref()?;
        if arena.len() > u32::MAX as usize {
            return None;
        }
        let base = arena.as_ptr() as usize;
        // An empty slice need not point into the arena.
        let at_offset = |b: &[u8], at: usize| b.is_empty() || b.as_ptr() as usize == base + at;
        let mut at = 0;
        let mut ends = Vec::with_capacity(leaf.entries.len());
        for (k, v) in leaf.entries.iter() {
            let Value::Inline(v) = v else { return None };
            if !at_offset(k, at) || !at_offset(v, at + k.len()) {
                return None;
            }
            let key_end = at + k.len();
            at = key_end + v.len();
            ends.push((key_end as u32, at as u32));
        }
        (at == arena.len()).then(|| PackedView { arena: arena.clone(), ends: ends.into() })
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1].1 as usize
        }
    }

    pub fn key(&self, i: usize) -> &[u8] {
        &self.arena[self.start(i)..self.ends[i].0 as usize]
    }

    pub fn key_bytes(&self, i: usize) -> Bytes {
        self.arena.slice(self.start(i)..self.ends[i].0 as usize)
    }

    pub fn value(&self, i: usize) -> Bytes {
        self.arena.slice(self.ends[i].0 as usize..self.ends[i].1 as usize)
    }

    pub fn value_slice(&self, i: usize) -> &[u8] {
        &self.arena[self.ends[i].0 as usize..self.ends[i].1 as usize]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

fn hint_of(key: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    let tail = key.get(at..).unwrap_or(&[]);
    let n = tail.len().min(8);
    b[..n].copy_from_slice(&tail[..n]);
    u64::from_be_bytes(b)
}

/// Length of the run of `h` that starts `hints` (sorted), found by
/// galloping from the start: usually zero or one probe, in the cache line
/// the search just read, where a binary search over the whole rest would
/// touch lines far away.
fn equal_run(hints: &[u64], h: u64) -> usize {
    let mut step = 1;
    let mut known = 0; // hints[..known] all equal h
    while known < hints.len() && hints[known] == h {
        let next = (known + step).min(hints.len());
        if hints[next - 1] != h {
            return known + hints[known..next].partition_point(|&x| x == h);
        }
        known = next;
        step *= 2;
    }
    known
}

impl SearchIndex {
    /// Index `n` sorted keys given by `key(i)`.
    pub fn build<'a>(n: usize, key: impl Fn(usize) -> &'a [u8]) -> SearchIndex {
        if n == 0 {
            return SearchIndex { prefix: Box::new([]), hints: Box::new([]), top: Box::new([]), packed: None };
        }
        let (first, last) = (key(0), key(n - 1));
        let p = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        let hints: Box<[u64]> = (0..n).map(|i| hint_of(key(i), p)).collect();
        let top = hints.iter().step_by(HINT_BLOCK).copied().collect();
        SearchIndex { prefix: first[..p].into(), hints, top, packed: None }
    }

    /// Index of the first hint `>= h`.
    fn lower_bound(&self, h: u64) -> usize {
        // top[j - 1] = hints[(j - 1) * B] < h <= top[j] = hints[j * B].
        let j = self.top.partition_point(|&x| x < h);
        if j == 0 {
            return 0;
        }
        let start = (j - 1) * HINT_BLOCK + 1;
        let end = (j * HINT_BLOCK).min(self.hints.len());
        start + self.hints[start..end].partition_point(|&x| x < h)
    }

    fn mem_bytes(&self) -> usize {
        8 * (self.hints.len() + self.top.len()) + self.packed.as_ref().map_or(0, |v| 8 * v.len())
    }

    /// Index a leaf's keys, with its packed view if it is packed.
    fn of_leaf(leaf: &Leaf) -> SearchIndex {
        let e = &leaf.entries;
        let mut index = SearchIndex::build(e.len(), |i| &e[i].0);
        index.packed = PackedView::of(leaf);
        index
    }

    /// Index of the first key `>= probe` (or `> probe` when `strict`).
    pub fn search<'a>(&self, key: impl Fn(usize) -> &'a [u8], probe: &[u8], strict: bool) -> usize {
        let n = self.hints.len();
        let p = self.prefix.len();
        if !probe.starts_with(&self.prefix) {
            // Every key starts with the prefix: the probe sorts before or after all.
            return if probe < &self.prefix[..] { 0 } else { n };
        }
        let h = hint_of(probe, p);
        let lo = self.lower_bound(h);
        debug_assert_eq!(lo, self.hints.partition_point(|&x| x < h));
        let hi = lo + equal_run(&self.hints[lo..], h);
        // Equal hints: settle by the keys themselves (usually zero or one probe).
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let m = a + (b - a) / 2;
            let before = if strict { key(m) <= probe } else { key(m) < probe };
            if before {
                a = m + 1;
            } else {
                b = m;
            }
        }
        a
    }
}

/// Estimated heap bytes per leaf entry beyond its image bytes (the entry's
/// slot, the key and value allocations' headers) and per child slot.
const LEAF_ENTRY_OVERHEAD: usize = 80;
const CHILD_OVERHEAD: usize = 160;
const NODE_OVERHEAD: usize = 256;
/// Hints per block of a search index's second level (one cache line).
const HINT_BLOCK: usize = 8;
/// Read searches a node answers by plain binary search before it gets an index.
const SEARCHES_BEFORE_INDEX: u32 = 4;

impl Node {
    pub fn new(body: Body) -> Node {
        Node {
            body,
            disk: DiskSlot::default(),
            search: OnceLock::new(),
            accessed: AtomicBool::new(true),
            searches: AtomicU32::new(0),
            charge: Charge::default(),
        }
    }

    /// Estimated memory of the node (its search index included).
    pub fn mem_bytes(&self) -> usize {
        let index = self.search.get().map_or(0, |i| i.mem_bytes());
        NODE_OVERHEAD
            + index
            + match &self.body {
                // A packed leaf holds its keys and values once, in its
                // arena; a changed leaf may hold both a packed buffer and its
                // own allocations: count its bytes twice.
                Body::Leaf(l) => {
                    let copies = if l.arena.is_some() { 1 } else { 2 };
                    copies * l.bytes + LEAF_ENTRY_OVERHEAD * l.entries.len()
                }
                Body::Internal(i) => i.bytes + CHILD_OVERHEAD * i.children.len() + i.keys.index_bytes(),
                Body::Runs(r) => (CHILD_OVERHEAD + 16) * r.runs.len(),
            }
    }

    /// Charge the node's present size to `meter` (the first time) or bring
    /// its charge up to date.
    pub fn recharge(&self, meter: &Arc<CacheMeter>) {
        let meter = self.charge.meter.get_or_init(|| meter.clone());
        let now = self.mem_bytes();
        let was = self.charge.bytes.swap(now, Ordering::Relaxed);
        meter.adjust(was, now, self.charge.retired.load(Ordering::Relaxed));
    }

    /// The live tree let go of this node; whoever still holds it pins it.
    pub fn mark_retired(&self) {
        if !self.charge.retired.swap(true, Ordering::Relaxed) {
            if let Some(m) = self.charge.meter.get() {
                m.pin(self.charge.bytes.load(Ordering::Relaxed));
            }
        }
    }

    pub fn is_retired(&self) -> bool {
        self.charge.retired.load(Ordering::Relaxed)
    }

    pub fn empty_leaf() -> Node {
        Node::new(Body::Leaf(Leaf {
            entries: Entries::new(),
            bytes: PAGE_HEADER_BYTES,
            arena: None,
            may_hold_big: false,
        }))
    }

    /// Leaf: index of the first entry with key >= `key`.
    /// Internal: index of the child whose range holds `key` (through the
    /// keys' shared index, [`Keys::child_for`]).
    /// For read paths on nodes that no longer change (see `search`).
    pub fn search(&self, key: &[u8]) -> usize {
        let l = match &self.body {
            Body::Leaf(l) => l,
            Body::Internal(int) => return int.keys.child_for(key),
            Body::Runs(_) => unreachable!("a run list is probed run by run, not searched"),
        };
        // A leaf copied by a commit is often replaced by the next one before
        // it is read much: build its index only once it has been searched a
        // few times.
        let indexed =
            self.search.get().is_some() || self.searches.fetch_add(1, Ordering::Relaxed) >= SEARCHES_BEFORE_INDEX;
        if !indexed {
            return l.entries.search(key).unwrap_or_else(|i| i);
        }
        let index = self.search.get_or_init(|| SearchIndex::of_leaf(l));
        match &index.packed {
            Some(view) => index.search(|i| view.key(i), key, false),
            None => index.search(|i| &l.entries[i].0, key, false),
        }
    }

    /// Build a packed leaf's search index now, not on its first reads: it
    /// does not change until the writer copies it.
    pub fn index_packed_leaf(&self) {
        if let Body::Leaf(l) = &self.body {
            if l.arena.is_some() {
                let _ = self.search.set(SearchIndex::of_leaf(l));
            }
        }
    }

    /// A leaf's packed view, once its search index is built.
    pub fn packed_view(&self) -> Option<&PackedView> {
        self.search.get()?.packed.as_ref()
    }

    pub fn bytes(&self) -> usize {
        match &self.body {
            Body::Leaf(l) => l.bytes,
            Body::Internal(i) => i.bytes,
            Body::Runs(r) => manifest_bytes(r.runs.len()),
        }
    }
    pub fn entries(&self) -> usize {
        match &self.body {
            Body::Leaf(l) => l.entries.len(),
            Body::Internal(i) => i.children.len(),
            Body::Runs(r) => r.runs.len(),
        }
    }
}

/// Encode a leaf image. Overflow values must already have addresses
/// (`overflow_addr` supplies them).
pub fn encode_leaf(leaf: &Leaf, overflow_addr: &dyn Fn(usize) -> BlockAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(leaf.bytes);
    out.push(PAGE_TYPE_LEAF);
    out.push(0);
    out.extend_from_slice(&(leaf.entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    let mut prev: &[u8] = &[];
    for (i, (key, value)) in leaf.entries.iter().enumerate() {
        let prefix = prev.iter().zip(key.iter()).take_while(|(a, b)| a == b).count();
        put_varint(&mut out, prefix as u64);
        put_varint(&mut out, (key.len() - prefix) as u64);
        out.extend_from_slice(&key[prefix..]);
        match value {
            Value::Inline(b) => {
                out.push(0);
                put_varint(&mut out, b.len() as u64);
                out.extend_from_slice(b);
            }
            Value::Big(big) => {
                out.push(1);
                overflow_addr(i).encode(&mut out);
                out.extend_from_slice(&big.len.to_le_bytes());
            }
        }
        prev = key;
    }
    debug_assert!(out.len() <= leaf.bytes);
    out
}

pub fn encode_internal(node: &Internal, child_addr: &dyn Fn(usize) -> BlockAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(node.bytes);
    out.push(PAGE_TYPE_INTERNAL);
    out.push(0);
    out.extend_from_slice(&(node.children.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for (i, key) in node.keys.iter().enumerate() {
        let key: &[u8] = if i == 0 { &[] } else { key };
        put_varint(&mut out, key.len() as u64);
        out.extend_from_slice(key);
        child_addr(i).encode(&mut out);
    }
    out
}

fn manifest_bytes(runs: usize) -> usize {
    PAGE_HEADER_BYTES + 4 + 24 * runs
}

/// A write-optimized table's manifest: its runs (root address, leaf
/// bytes), newest first, and the runs merges replaced that readers may
/// still hold (their blocks are freed when the table is next opened).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub live: Vec<(BlockAddr, u64)>,
    pub retired: Vec<(BlockAddr, u64)>,
}

/// Encode a manifest.
pub fn encode_manifest(m: &Manifest) -> Vec<u8> {
    let n = m.live.len() + m.retired.len();
    assert!(m.live.len() <= crate::limits::runs_max && m.retired.len() <= 2 * crate::limits::runs_retired_max);
    let mut out = Vec::with_capacity(manifest_bytes(n));
    out.push(PAGE_TYPE_MANIFEST);
    out.push(0);
    out.extend_from_slice(&(m.live.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(m.retired.len() as u32).to_le_bytes());
    for (a, bytes) in m.live.iter().chain(&m.retired) {
        a.encode(&mut out);
        out.extend_from_slice(&bytes.to_le_bytes());
    }
    out
}

/// Decode a manifest payload.
pub fn decode_manifest(payload: &[u8]) -> Result<Manifest, String> {
    let mut r = Reader::new(payload);
    let ptype = r.u8().ok_or("truncated manifest header")?;
    let _flags = r.u8().ok_or("truncated manifest header")?;
    let live = r.u32().ok_or("truncated manifest header")? as usize;
    let _ = r.u16().ok_or("truncated manifest header")?;
    let retired = r.u32().ok_or("truncated manifest header")? as usize;
    if ptype != PAGE_TYPE_MANIFEST {
        return Err(format!("page type {ptype} in a manifest block"));
    }
    let n = live + retired;
    if live > crate::limits::runs_max || retired > 2 * crate::limits::runs_retired_max || r.remaining() != 24 * n {
        return Err(format!("manifest claims {live} runs and {retired} retired in {} bytes", payload.len()));
    }
    let mut all = (0..n)
        .map(|i| {
            let addr = BlockAddr::decode(r.bytes(16).unwrap()).ok_or_else(|| format!("run {i}: bad address"))?;
            Ok((addr, r.u64().unwrap()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let retired = all.split_off(live);
    Ok(Manifest { live: all, retired })
}

/// A write-optimized table's root as read from its manifest at `addr`: the
/// runs on disk, below a fresh, empty memtable; and the retired runs.
pub fn decode_runs(payload: &[u8], addr: BlockAddr) -> Result<(Node, Vec<BlockAddr>), String> {
    let m = decode_manifest(payload)?;
    let memtable = Run { root: Child::in_memory(Arc::new(Node::empty_leaf())), bytes: 0 };
    let on_disk = m.live.into_iter().map(|(addr, bytes)| Run { root: Child::on_disk(addr), bytes });
    let runs = std::iter::once(memtable).chain(on_disk).collect();
    let mut node = Node::new(Body::Runs(Runs { runs, memtable_bytes: 0, epoch: Arc::default() }));
    node.disk = DiskSlot::with_addr(addr);
    Ok((node, m.retired.into_iter().map(|(a, _)| a).collect()))
}

/// Memory a leaf entry is charged, as [`Node::mem_bytes`] counts a changed leaf.
pub fn leaf_entry_mem(key: &[u8], value: &Value) -> usize {
    2 * leaf_entry_cost(key, value) + LEAF_ENTRY_OVERHEAD
}

/// One decoded cell, for the page dump tool.
#[derive(Debug)]
pub enum Cell {
    Leaf { prefix: usize, key: Vec<u8>, value: CellValue },
    Internal { key: Vec<u8>, child: BlockAddr },
}

#[derive(Debug)]
pub enum CellValue {
    Inline(Vec<u8>),
    Overflow { addr: BlockAddr, len: u32 },
}

/// One cell as the decoder sees it: borrowed from the payload, the key from
/// the decoder's buffer (prefix decompression builds it there).
pub enum CellRef<'a> {
    Leaf { prefix: usize, key: &'a [u8], value: CellValueRef<'a> },
    Internal { key: &'a [u8], child: BlockAddr },
}

pub enum CellValueRef<'a> {
    Inline(&'a [u8]),
    Overflow { addr: BlockAddr, len: u32 },
}

/// Decode a page payload, handing each cell to `visit`; `Err` says what is
/// malformed. Returns the number of cells.
pub fn visit_cells(
    kind: BlockKind,
    payload: &[u8],
    visit: &mut dyn FnMut(usize, CellRef) -> Result<(), String>,
) -> Result<usize, String> {
    let mut r = Reader::new(payload);
    let ptype = r.u8().ok_or("truncated page header")?;
    let _flags = r.u8().ok_or("truncated page header")?;
    let n = r.u32().ok_or("truncated page header")? as usize;
    let _ = r.u16().ok_or("truncated page header")?;
    let expect = match kind {
        BlockKind::Leaf => PAGE_TYPE_LEAF,
        BlockKind::Internal => PAGE_TYPE_INTERNAL,
        other => return Err(format!("{other:?} block is not a page")),
    };
    if ptype != expect {
        return Err(format!("page type {ptype} in a {kind:?} block"));
    }
    // Every cell takes at least 3 bytes: a huge count is corruption, not a reason to allocate.
    if n > r.remaining() / 3 + 1 {
        return Err(format!("page claims {n} entries in {} bytes", payload.len()));
    }
    let mut key: Vec<u8> = Vec::new();
    for i in 0..n {
        let at = r.pos();
        let bad = |what: &str| format!("cell {i} at payload offset {at}: {what}");
        if ptype == PAGE_TYPE_LEAF {
            let prefix = r.varint().ok_or_else(|| bad("truncated prefix"))? as usize;
            let slen = r.varint().ok_or_else(|| bad("truncated key length"))? as usize;
            if prefix > key.len() {
                return Err(bad("prefix longer than the previous key"));
            }
            let suffix = r.bytes(slen).ok_or_else(|| bad("truncated key"))?;
            key.truncate(prefix);
            key.extend_from_slice(suffix);
            let vtype = r.u8().ok_or_else(|| bad("truncated value type"))?;
            let value = match vtype {
                0 => {
                    let len = r.varint().ok_or_else(|| bad("truncated value length"))? as usize;
                    CellValueRef::Inline(r.bytes(len).ok_or_else(|| bad("truncated value"))?)
                }
                1 => {
                    let addr =
                        BlockAddr::decode(r.bytes(16).ok_or_else(|| bad("truncated overflow address"))?).unwrap();
                    let len = r.u32().ok_or_else(|| bad("truncated overflow length"))?;
                    CellValueRef::Overflow { addr, len }
                }
                t => return Err(bad(&format!("unknown value type {t}"))),
            };
            visit(i, CellRef::Leaf { prefix, key: &key, value })?;
        } else {
            let klen = r.varint().ok_or_else(|| bad("truncated key length"))? as usize;
            let k = r.bytes(klen).ok_or_else(|| bad("truncated key"))?;
            let child = BlockAddr::decode(r.bytes(16).ok_or_else(|| bad("truncated child address"))?).unwrap();
            visit(i, CellRef::Internal { key: k, child })?;
        }
    }
    if r.remaining() != 0 {
        return Err(format!("{} trailing bytes after {n} cells", r.remaining()));
    }
    Ok(n)
}

/// Decode a page payload into owned cells (for tools); `Err` says what is malformed.
pub fn decode_cells(kind: BlockKind, payload: &[u8]) -> Result<Vec<Cell>, String> {
    let mut cells = Vec::new();
    visit_cells(kind, payload, &mut |_, cell| {
        cells.push(match cell {
            CellRef::Leaf { prefix, key, value } => Cell::Leaf {
                prefix,
                key: key.to_vec(),
                value: match value {
                    CellValueRef::Inline(v) => CellValue::Inline(v.to_vec()),
                    CellValueRef::Overflow { addr, len } => CellValue::Overflow { addr, len },
                },
            },
            CellRef::Internal { key, child } => Cell::Internal { key: key.to_vec(), child },
        });
        Ok(())
    })?;
    Ok(cells)
}

/// Build an in-memory node from a page image read from `addr`.
/// `keys_decoded` counts keys materialized (invariant 3 is checked against it).
pub fn decode_node(
    kind: BlockKind,
    payload: &Bytes,
    addr: BlockAddr,
    keys_decoded: &std::sync::atomic::AtomicU64,
) -> Result<Node, String> {
    // The entry count from the header, capped by what the payload can hold.
    let count = payload.get(2..6).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let count = count.min(payload.len() / 3);
    let body = match kind {
        BlockKind::Leaf => {
            // Keys are decoded into `arena` first (the image shares prefixes).
            let mut arena: Vec<u8> = Vec::with_capacity(payload.len() / 2);
            let mut cells: Vec<(usize, usize, Value)> = Vec::with_capacity(count);
            let mut bytes = PAGE_HEADER_BYTES;
            let n = visit_cells(kind, payload, &mut |_, cell| {
                let CellRef::Leaf { key, value, .. } = cell else { unreachable!() };
                let value = match value {
                    CellValueRef::Inline(v) => Value::Inline(payload.slice_ref(v)),
                    CellValueRef::Overflow { addr, len } => {
                        Value::Big(Arc::new(BigValue { len, data: OnceLock::new(), disk: DiskSlot::with_addr(addr) }))
                    }
                };
                if let Some((start, end, _)) = cells.last() {
                    if arena[*start..*end] >= *key {
                        return Err("keys out of order in leaf".into());
                    }
                }
                bytes += leaf_entry_cost(key, &value);
                let start = arena.len();
                arena.extend_from_slice(key);
                cells.push((start, arena.len(), value));
                Ok(())
            })?;
            // Packed (invariant 5): the image goes once its values are copied.
            let (entries, arena) = pack(cells.len(), |i| (&arena[cells[i].0..cells[i].1], &cells[i].2));
            let may_hold_big = cells.iter().any(|c| matches!(c.2, Value::Big(_)));
            let leaf = Leaf { entries, bytes, arena: Some(arena), may_hold_big };
            keys_decoded.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            Body::Leaf(leaf)
        }
        _ => {
            let mut keys: Vec<Key> = Vec::with_capacity(count);
            let mut children = Vec::with_capacity(count);
            let mut bytes = PAGE_HEADER_BYTES;
            let n = visit_cells(kind, payload, &mut |i, cell| {
                let CellRef::Internal { key, child } = cell else { unreachable!() };
                if i == 0 && !key.is_empty() {
                    return Err("first key of an internal page is not empty".into());
                }
                if i > 0 && **keys.last().unwrap() >= *key {
                    return Err("keys out of order in internal page".into());
                }
                bytes += internal_entry_cost(key);
                keys.push(payload.slice_ref(key));
                children.push(Child::on_disk(child));
                Ok(())
            })?;
            keys_decoded.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            if children.is_empty() {
                return Err("internal page without children".into());
            }
            Body::Internal(Internal { keys: Keys::shared(keys), children: children.into_iter().collect(), bytes })
        }
    };
    let mut node = Node::new(body);
    node.disk = DiskSlot::with_addr(addr);
    node.index_packed_leaf();
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// A commit copies the internal nodes on its path and changes one child
    /// slot in each: the copy shares the keys and every chunk of child
    /// slots but the changed one with the version readers still hold.
    #[test]
    fn copying_an_internal_node_shares_all_but_the_changed_chunk() {
        let addr = |offset| BlockAddr { offset, size: 4096, checksum: 0 };
        let n = 200;
        let keys: Vec<Key> =
            (0..n).map(|i| if i == 0 { Bytes::new() } else { Bytes::from(format!("k{i:04}")) }).collect();
        let children = (0..n).map(|i| Child::on_disk(addr(4096 * (i as u64 + 1)))).collect();
        let old = Node::new(Body::Internal(Internal { keys: Keys::shared(keys), children, bytes: 0 }));
        let mut copy = old.clone();
        let (Body::Internal(o), Body::Internal(c)) = (&old.body, &mut copy.body) else { unreachable!() };
        assert!(Arc::ptr_eq(&o.keys, &c.keys));
        // The keys' search index, built through one version, serves both.
        assert_eq!(o.keys.child_for(b"k0100"), 100);
        assert!(c.keys.index.get().is_some(), "the copy shares the index built through the original");
        assert_eq!(c.keys.child_for(b"k0100x"), 100);
        assert_eq!(c.keys.child_for(b"k0099z"), 99);
        assert_eq!(c.children.chunks_shared_with(&o.children), o.children.chunk_count());
        *c.children.get_mut(77) = Child::on_disk(addr(1 << 30));
        assert!(o.children.chunk_count() > 2, "the test wants several chunks");
        assert_eq!(c.children.chunks_shared_with(&o.children), o.children.chunk_count() - 1);
        assert_eq!(o.children[77].addr(), Some(addr(4096 * 78)), "the old version is unchanged");
        assert_eq!(c.children[77].addr(), Some(addr(1 << 30)));
    }

    #[test]
    fn packed_view_only_while_entries_are_the_packed_slices() {
        let mut leaf = Leaf::default();
        for i in 0..100u8 {
            // Every fifth value is empty: its slice need not point into the arena.
            let v = Value::Inline(Bytes::from(vec![i; usize::from(i % 5)]));
            leaf.entries.push((Bytes::from(format!("k{i:03}")), v));
        }
        assert!(PackedView::of(&leaf).is_none(), "a leaf never packed has no view");
        let packed = leaf.packed();
        let view = PackedView::of(&packed).expect("a packed leaf has a view");
        assert_eq!(view.len(), 100);
        for (i, (k, v)) in leaf.entries.iter().enumerate() {
            let Value::Inline(v) = v else { unreachable!() };
            assert_eq!((view.key(i), view.value_slice(i)), (&k[..], &v[..]));
            assert_eq!((view.key_bytes(i), view.value(i)), (k.clone(), v.clone()));
        }
        let node = Node::new(Body::Leaf(packed.clone()));
        node.index_packed_leaf();
        assert!(node.packed_view().is_some());
        assert_eq!(node.search(b"k050"), 50);
        assert_eq!(node.search(b"k0505"), 51);
        // A changed entry is no longer a slice of the arena.
        let mut changed = packed.clone();
        *changed.entries.value_mut(50) = Value::Inline(Bytes::from_static(b"other"));
        assert!(PackedView::of(&changed).is_none());
        let mut removed = packed;
        removed.entries.remove(0);
        assert!(PackedView::of(&removed).is_none(), "an entry gone leaves a gap");
    }

    #[test]
    fn leaf_image_roundtrip_with_prefix_compression() {
        let mut leaf = Leaf { entries: Entries::new(), bytes: PAGE_HEADER_BYTES, arena: None, may_hold_big: false };
        for k in ["apple", "applesauce", "apply", "banana"] {
            let v = Value::new(k.as_bytes(), 1 << 20);
            leaf.bytes += leaf_entry_cost(k.as_bytes(), &v);
            leaf.entries.push((Bytes::copy_from_slice(k.as_bytes()), v));
        }
        let img = encode_leaf(&leaf, &|_| unreachable!());
        let cells = decode_cells(BlockKind::Leaf, &img).unwrap();
        match &cells[1] {
            Cell::Leaf { prefix, key, .. } => {
                assert_eq!(*prefix, 5);
                assert_eq!(key, b"applesauce");
            }
            _ => panic!(),
        }
        let addr = BlockAddr { offset: 4096, size: 4096, checksum: 0 };
        let n = AtomicU64::new(0);
        let node = decode_node(BlockKind::Leaf, &Bytes::from(img.clone()), addr, &n).unwrap();
        assert_eq!(n.into_inner(), 4);
        let Body::Leaf(l) = &node.body else { panic!() };
        assert_eq!(&*l.entries[3].0, b"banana");
        assert!(l.bytes <= leaf.bytes);
        // A leaf read from disk is packed and indexed (invariant 5).
        let view = node.packed_view().expect("a decoded leaf has a packed view");
        assert_eq!((view.key(1), view.value_slice(1)), (&b"applesauce"[..], &b"applesauce"[..]));
    }

    proptest::proptest! {
        #[test]
        fn search_index_agrees_with_binary_search(
            mut keys in proptest::collection::vec(proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::strategy::Just(b'a'), 0u8..4], 0..14), 0..60),
            probes in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..14), 1..20),
            prefix in proptest::collection::vec(0u8..3, 0..4),
        ) {
            for k in keys.iter_mut() {
                k.splice(0..0, prefix.iter().copied());
            }
            keys.sort();
            keys.dedup();
            let index = SearchIndex::build(keys.len(), |i| &keys[i]);
            for mut probe in probes.into_iter().chain(keys.iter().cloned()) {
                if probe.len() % 2 == 0 {
                    probe.splice(0..0, prefix.iter().copied());
                }
                let ge = keys.partition_point(|k| *k < probe);
                let gt = keys.partition_point(|k| *k <= probe);
                proptest::prop_assert_eq!(index.search(|i| &keys[i], &probe, false), ge);
                proptest::prop_assert_eq!(index.search(|i| &keys[i], &probe, true), gt);
            }
        }
    }

    #[test]
    fn garbage_pages_are_errors_not_panics() {
        let addr = BlockAddr { offset: 4096, size: 4096, checksum: 0 };
        let n = AtomicU64::new(0);
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 1) as u8).collect();
            let _ = decode_node(BlockKind::Leaf, &Bytes::from(junk.clone()), addr, &n);
            let _ = decode_node(BlockKind::Internal, &Bytes::from(junk.clone()), addr, &n);
        }
        let mut img = vec![PAGE_TYPE_LEAF, 0];
        img.extend_from_slice(&u32::MAX.to_le_bytes());
        img.extend_from_slice(&[0, 0]);
        assert!(decode_cells(BlockKind::Leaf, &img).is_err());
    }
}
