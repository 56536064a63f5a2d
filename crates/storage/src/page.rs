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
//!
//! Leaf image payload: `[type u8 = 1][flags u8][entries u32][0u16]` then per
//! entry `[prefix varint][suffix_len varint][suffix][vtype u8]` followed by
//! `[len varint][bytes]` (inline, vtype 0) or `[addr 16][len u32]` (overflow,
//! vtype 1). `prefix` is the bytes shared with the previous key.
//! Internal image payload: `[type u8 = 2][flags u8][entries u32][0u16]` then
//! per child `[key_len varint][key][addr 16]`; the first key is empty
//! (the lower bound comes from the parent).

use crate::block::{BlockAddr, BlockKind};
use crate::cache::CacheMeter;
use crate::codec::{put_varint, varint_len, Reader};
use crate::entries::Entries;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// Keys and values are `Bytes`: a page read from disk keeps its image as
/// one buffer that its values are slices of, and its decoded keys in one
/// more buffer, instead of an allocation per key and per value.
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
            Body::Internal(_) => {
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

#[derive(Debug, Default, Clone)]
pub struct Internal {
    /// `keys[i]` is the lowest key of `children[i]`; `keys[0]` is empty.
    pub keys: Vec<Key>,
    pub children: Vec<Arc<Child>>,
    pub bytes: usize,
}

#[derive(Debug, Clone)]
pub enum Body {
    Leaf(Leaf),
    Internal(Internal),
}

#[derive(Debug)]
pub struct Node {
    pub body: Body,
    pub disk: DiskSlot,
    /// Built on the first read search of an unchanging node; reset whenever
    /// the writer changes the node.
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
}

fn hint_of(key: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    let tail = key.get(at..).unwrap_or(&[]);
    let n = tail.len().min(8);
    b[..n].copy_from_slice(&tail[..n]);
    u64::from_be_bytes(b)
}

impl SearchIndex {
    /// Index `n` sorted keys given by `key(i)`.
    pub fn build<'a>(n: usize, key: impl Fn(usize) -> &'a [u8]) -> SearchIndex {
        if n == 0 {
            return SearchIndex { prefix: Box::new([]), hints: Box::new([]) };
        }
        let (first, last) = (key(0), key(n - 1));
        let p = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        SearchIndex { prefix: first[..p].into(), hints: (0..n).map(|i| hint_of(key(i), p)).collect() }
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
        let lo = self.hints.partition_point(|&x| x < h);
        let hi = lo + self.hints[lo..].partition_point(|&x| x == h);
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
        let index = self.search.get().map_or(0, |_| 8 * self.entries());
        NODE_OVERHEAD
            + index
            + match &self.body {
                // A leaf read from disk holds its image (its values are
                // slices of it) and its keys again in one buffer; a changed
                // leaf may still hold the old image: count the bytes twice.
                Body::Leaf(l) => 2 * l.bytes + LEAF_ENTRY_OVERHEAD * l.entries.len(),
                Body::Internal(i) => i.bytes + CHILD_OVERHEAD * i.children.len(),
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
        Node::new(Body::Leaf(Leaf { entries: Entries::new(), bytes: PAGE_HEADER_BYTES }))
    }

    /// Leaf: index of the first entry with key >= `key`.
    /// Internal: index of the child whose range holds `key`.
    /// For read paths on nodes that no longer change (see `search`).
    pub fn search(&self, key: &[u8]) -> usize {
        // A node copied by a commit is often replaced by the next one before
        // it is read much: build the index only once a node has been
        // searched a few times.
        let indexed =
            self.search.get().is_some() || self.searches.fetch_add(1, Ordering::Relaxed) >= SEARCHES_BEFORE_INDEX;
        if !indexed {
            return match &self.body {
                Body::Leaf(l) => l.entries.binary_search_by(|(k, _)| (**k).cmp(key)).unwrap_or_else(|i| i),
                Body::Internal(int) => int.keys[1..].partition_point(|k| &**k <= key),
            };
        }
        match &self.body {
            Body::Leaf(l) => {
                let index = self.search.get_or_init(|| SearchIndex::build(l.entries.len(), |i| &l.entries[i].0));
                index.search(|i| &l.entries[i].0, key, false)
            }
            Body::Internal(int) => {
                let keys = &int.keys[1..];
                let index = self.search.get_or_init(|| SearchIndex::build(keys.len(), |i| &keys[i]));
                index.search(|i| &keys[i], key, true)
            }
        }
    }

    pub fn bytes(&self) -> usize {
        match &self.body {
            Body::Leaf(l) => l.bytes,
            Body::Internal(i) => i.bytes,
        }
    }
    pub fn entries(&self) -> usize {
        match &self.body {
            Body::Leaf(l) => l.entries.len(),
            Body::Internal(i) => i.children.len(),
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
            // Keys go to one buffer (`arena`), values stay slices of the image.
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
            arena.shrink_to_fit();
            let arena = Bytes::from(arena);
            let entries = cells.into_iter().map(|(start, end, v)| (arena.slice(start..end), v)).collect();
            let leaf = Leaf { entries, bytes };
            keys_decoded.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            Body::Leaf(leaf)
        }
        _ => {
            let mut node = Internal {
                keys: Vec::with_capacity(count),
                children: Vec::with_capacity(count),
                bytes: PAGE_HEADER_BYTES,
            };
            let n = visit_cells(kind, payload, &mut |i, cell| {
                let CellRef::Internal { key, child } = cell else { unreachable!() };
                if i == 0 && !key.is_empty() {
                    return Err("first key of an internal page is not empty".into());
                }
                if i > 0 && **node.keys.last().unwrap() >= *key {
                    return Err("keys out of order in internal page".into());
                }
                node.bytes += internal_entry_cost(key);
                node.keys.push(payload.slice_ref(key));
                node.children.push(Child::on_disk(child));
                Ok(())
            })?;
            keys_decoded.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            if node.children.is_empty() {
                return Err("internal page without children".into());
            }
            Body::Internal(node)
        }
    };
    let mut node = Node::new(body);
    node.disk = DiskSlot::with_addr(addr);
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn leaf_image_roundtrip_with_prefix_compression() {
        let mut leaf = Leaf { entries: Entries::new(), bytes: PAGE_HEADER_BYTES };
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
