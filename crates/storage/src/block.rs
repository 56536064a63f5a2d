//! Block manager: checksummed blocks in one file, and the extent lists that
//! say which parts of the file are in use.
//!
//! Block layout (little-endian):
//! `[checksum u32][size u32][payload_len u32][kind u8][codec u8][0u8; 2][payload][zero padding]`
//! where `size` is the whole block, a multiple of the allocation unit, and
//! `checksum` is CRC32C over bytes `4..size`. A parent names a child by
//! [`BlockAddr`] (offset, size, checksum), so a stale, torn or misdirected
//! block fails the check on read. `codec` says how the payload is stored:
//! 0 as is, else compressed (`compress.rs`; leaf pages only).
//!
//! Invariants:
//! 1. A block referenced by the last durable checkpoint is never overwritten:
//!    freeing puts it on `discard`; `discard` moves to `pending` when the next
//!    checkpoint takes its snapshot, and `pending` becomes `avail` only once
//!    that checkpoint is durable.
//! 2. `alloc`, `avail`, `discard` and `pending` never overlap, and together with
//!    the file header block they cover `[0, file_size)`.
//! 4. A checkpoint's extent list is `alloc` plus `discard` at the time it is
//!    written: exactly the blocks that checkpoint references.
//! 3. Offset 0 holds the file header block; no address ever points at it.
//! 5. Only blocks in `avail` are punched (`punch_free`), under the extent
//!    lock: no durable checkpoint names them and no allocation is writing
//!    them. A reader of an older in-memory version that reads one finds
//!    zeros, which fail the checksum, as a reused block does (page
//!    invariant 2 answers it from memory).

use crate::compress::Compressor;
use crate::error::{Result, StorageError};
use crate::limits::{block_alloc_unit_bytes, block_header_bytes, block_size_max_bytes};
use crate::vfs::VfsFile;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where a block lives and what it must hash to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockAddr {
    pub offset: u64,
    pub size: u32,
    pub checksum: u32,
}

impl BlockAddr {
    pub const ENCODED_BYTES: usize = 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
    }

    pub fn decode(b: &[u8]) -> Option<BlockAddr> {
        if b.len() < Self::ENCODED_BYTES {
            return None;
        }
        Some(BlockAddr {
            offset: u64::from_le_bytes(b[0..8].try_into().ok()?),
            size: u32::from_le_bytes(b[8..12].try_into().ok()?),
            checksum: u32::from_le_bytes(b[12..16].try_into().ok()?),
        })
    }

    /// Whether a block could lie here: past the header block, on the
    /// allocation unit, of a size a block can have (and ending within
    /// the offsets a file can have).
    pub fn is_plausible(&self) -> bool {
        self.offset != 0
            && self.offset.is_multiple_of(block_alloc_unit_bytes)
            && (self.size as u64).is_multiple_of(block_alloc_unit_bytes)
            && self.size != 0
            && self.size as u64 <= block_size_max_bytes
            && self.offset.checked_add(self.size as u64).is_some()
    }

    pub fn end(&self) -> u64 {
        self.offset + self.size as u64
    }
}

/// What a block holds; stored in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    FileHeader = 1,
    Leaf = 2,
    Internal = 3,
    Overflow = 4,
    ExtentList = 5,
    /// A write-optimized table's list of runs (see `runs.rs`).
    Manifest = 6,
}

impl BlockKind {
    pub fn from_u8(v: u8) -> Option<BlockKind> {
        Some(match v {
            1 => BlockKind::FileHeader,
            2 => BlockKind::Leaf,
            3 => BlockKind::Internal,
            4 => BlockKind::Overflow,
            5 => BlockKind::ExtentList,
            6 => BlockKind::Manifest,
            _ => return None,
        })
    }
}

/// How free space is chosen for a new block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AllocPolicy {
    /// The smallest free extent that fits (less fragmentation).
    #[default]
    BestFit,
    /// The free extent at the lowest offset that fits (keeps the file's tail free to truncate).
    FirstFit,
    /// Always at the end of the file, never into holes: for bulk loads that
    /// want sequential writes. The file only shrinks when its tail is free.
    Append,
}

impl AllocPolicy {
    pub fn to_u8(self) -> u8 {
        match self {
            AllocPolicy::BestFit => 0,
            AllocPolicy::FirstFit => 1,
            AllocPolicy::Append => 2,
        }
    }
    pub fn from_u8(v: u8) -> Option<AllocPolicy> {
        Some(match v {
            0 => AllocPolicy::BestFit,
            1 => AllocPolicy::FirstFit,
            2 => AllocPolicy::Append,
            _ => return None,
        })
    }
}

/// Round a byte count up to whole allocation units.
pub fn round_to_unit(n: u64) -> u64 {
    n.div_ceil(block_alloc_unit_bytes) * block_alloc_unit_bytes
}

/// Build the on-disk bytes of a block; returns the bytes and the checksum.
pub fn build_block(kind: BlockKind, payload: &[u8]) -> (Vec<u8>, u32) {
    build_block_coded(kind, Compressor::None, payload)
}

/// `build_block` of a payload stored by `codec` (already compressed).
fn build_block_coded(kind: BlockKind, codec: Compressor, payload: &[u8]) -> (Vec<u8>, u32) {
    let size = round_to_unit((block_header_bytes + payload.len()) as u64) as usize;
    let mut buf = vec![0u8; size];
    buf[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    buf[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    buf[12] = kind as u8;
    buf[13] = codec.to_u8();
    buf[block_header_bytes..block_header_bytes + payload.len()].copy_from_slice(payload);
    let checksum = crc32c::crc32c(&buf[4..]);
    buf[0..4].copy_from_slice(&checksum.to_le_bytes());
    (buf, checksum)
}

/// `build_block` of `payload` compressed by `compressor` where that makes
/// it smaller; refused past the largest block.
fn build_stored(kind: BlockKind, compressor: Compressor, payload: &[u8]) -> Result<(Vec<u8>, u32)> {
    let (buf, checksum) = match compressor.compress(payload) {
        Some(stored) => build_block_coded(kind, compressor, &stored),
        None => build_block(kind, payload),
    };
    if buf.len() as u64 > block_size_max_bytes {
        return Err(StorageError::InvalidConfig(format!("block of {} bytes is too large", buf.len())));
    }
    Ok((buf, checksum))
}

/// Blocks built in memory to be written side by side with one write
/// ([`BlockFile::write_batch_unnamed`]): fewer, larger writes for a merge.
#[derive(Default)]
pub struct BlockBatch {
    bytes: Vec<u8>,
    /// Each block's offset in `bytes`, size and checksum.
    blocks: Vec<(u64, u32, u32)>,
}

impl BlockBatch {
    /// Build a block of `payload` (as `write_block_with` would) at the end.
    pub fn push(&mut self, kind: BlockKind, compressor: Compressor, payload: &[u8]) -> Result<()> {
        let (buf, checksum) = build_stored(kind, compressor, payload)?;
        self.blocks.push((self.bytes.len() as u64, buf.len() as u32, checksum));
        self.bytes.extend_from_slice(&buf);
        Ok(())
    }

    /// Bytes the batch would write.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// Check a block's bytes against its address; returns kind and payload
/// range (the payload as stored: see `block_codec`).
pub fn check_block(path: &Path, addr: BlockAddr, buf: &[u8]) -> Result<(BlockKind, std::ops::Range<usize>)> {
    let bad = |detail: String| StorageError::corruption(path, addr.offset, detail);
    if buf.len() < block_header_bytes {
        return Err(bad(format!("block of {} bytes is shorter than its header", buf.len())));
    }
    let stored = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    let size = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if size != addr.size || size as usize != buf.len() {
        return Err(bad(format!("block size {size} does not match the expected {}", addr.size)));
    }
    let actual = crc32c::crc32c(&buf[4..]);
    if actual != stored || stored != addr.checksum {
        return Err(bad(format!(
            "checksum mismatch: computed {actual:#010x}, block header {stored:#010x}, parent expects {:#010x}",
            addr.checksum
        )));
    }
    let payload_len = u32::from_le_bytes(buf[8..12].try_into().unwrap()) as usize;
    if block_header_bytes + payload_len > buf.len() {
        return Err(bad(format!("payload length {payload_len} exceeds block size {size}")));
    }
    let kind = BlockKind::from_u8(buf[12]).ok_or_else(|| bad(format!("unknown block kind {}", buf[12])))?;
    Ok((kind, block_header_bytes..block_header_bytes + payload_len))
}

/// Read and check the block at `addr` of `file`; returns its kind and payload.
pub fn read_block_at(file: &dyn VfsFile, addr: BlockAddr) -> Result<(BlockKind, Vec<u8>)> {
    let path = file.path();
    if !addr.is_plausible() {
        return Err(StorageError::corruption(path, addr.offset, format!("invalid block address {addr:?}")));
    }
    let mut buf = vec![0u8; addr.size as usize];
    file.read_at(&mut buf, addr.offset).map_err(|e| match e {
        StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            StorageError::corruption(path, addr.offset, "block lies past the end of the file")
        }
        other => other,
    })?;
    open_block_owned(path, addr, buf)
}

/// Check the bytes read for the block at `addr`; returns its kind and payload.
pub fn open_block(path: &Path, addr: BlockAddr, buf: &[u8]) -> Result<(BlockKind, Vec<u8>)> {
    let (kind, range) = check_block(path, addr, buf)?;
    let codec = block_codec(path, addr, buf)?;
    if codec != Compressor::None {
        return Ok((kind, codec.decompress(&buf[range], path, addr.offset)?));
    }
    Ok((kind, buf[range].to_vec()))
}

/// `open_block` of a buffer it may keep.
fn open_block_owned(path: &Path, addr: BlockAddr, mut buf: Vec<u8>) -> Result<(BlockKind, Vec<u8>)> {
    let (kind, range) = check_block(path, addr, &buf)?;
    let codec = block_codec(path, addr, &buf)?;
    if codec != Compressor::None {
        return Ok((kind, codec.decompress(&buf[range], path, addr.offset)?));
    }
    buf.truncate(range.end);
    buf.drain(..range.start);
    Ok((kind, buf))
}

/// How a checked block's payload is stored.
pub fn block_codec(path: &Path, addr: BlockAddr, buf: &[u8]) -> Result<Compressor> {
    Compressor::from_u8(buf[13])
        .ok_or_else(|| StorageError::corruption(path, addr.offset, format!("unknown block codec {}", buf[13])))
}

/// A set of disjoint, coalesced byte ranges `offset -> length`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentList {
    by_offset: BTreeMap<u64, u64>,
    /// (length, offset), kept only when `sized` is set (the avail list).
    by_size: BTreeSet<(u64, u64)>,
    sized: bool,
}

impl ExtentList {
    pub fn new_sized() -> Self {
        ExtentList { sized: true, ..Default::default() }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_offset.iter().map(|(&o, &l)| (o, l))
    }

    pub fn len(&self) -> usize {
        self.by_offset.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }

    fn raw_insert(&mut self, off: u64, len: u64) {
        self.by_offset.insert(off, len);
        if self.sized {
            self.by_size.insert((len, off));
        }
    }

    fn raw_remove(&mut self, off: u64) -> u64 {
        let len = self.by_offset.remove(&off).expect("extent present");
        if self.sized {
            self.by_size.remove(&(len, off));
        }
        len
    }

    /// Add `[off, off+len)`, merging with neighbours. Panics on overlap: an
    /// overlap means the engine's bookkeeping is broken (invariant 2).
    pub fn insert(&mut self, mut off: u64, mut len: u64) {
        assert!(len > 0);
        if let Some((&p_off, &p_len)) = self.by_offset.range(..=off).next_back() {
            assert!(p_off + p_len <= off, "extent [{off}, +{len}) overlaps [{p_off}, +{p_len})");
            if p_off + p_len == off {
                self.raw_remove(p_off);
                off = p_off;
                len += p_len;
            }
        }
        if let Some((&n_off, &n_len)) = self.by_offset.range(off + 1..).next() {
            assert!(off + len <= n_off, "extent [{off}, +{len}) overlaps [{n_off}, +{n_len})");
            if off + len == n_off {
                self.raw_remove(n_off);
                len += n_len;
            }
        }
        self.raw_insert(off, len);
    }

    /// Remove `[off, off+len)`, which must lie inside one extent.
    pub fn remove(&mut self, off: u64, len: u64) -> bool {
        let Some((&e_off, &e_len)) = self.by_offset.range(..=off).next_back() else {
            return false;
        };
        if e_off + e_len < off + len {
            return false;
        }
        self.raw_remove(e_off);
        if e_off < off {
            self.raw_insert(e_off, off - e_off);
        }
        if off + len < e_off + e_len {
            self.raw_insert(off + len, e_off + e_len - off - len);
        }
        true
    }

    pub fn contains(&self, off: u64, len: u64) -> bool {
        match self.by_offset.range(..=off).next_back() {
            Some((&e_off, &e_len)) => e_off + e_len >= off + len,
            None => false,
        }
    }

    fn take_best_fit(&mut self, len: u64) -> Option<u64> {
        let &(e_len, e_off) = self.by_size.range((len, 0)..).next()?;
        let _ = e_len;
        self.remove(e_off, len);
        Some(e_off)
    }

    fn take_first_fit(&mut self, len: u64) -> Option<u64> {
        let (e_off, _) = self.by_offset.iter().find(|(_, &l)| l >= len).map(|(&o, &l)| (o, l))?;
        self.remove(e_off, len);
        Some(e_off)
    }

    fn last(&self) -> Option<(u64, u64)> {
        self.by_offset.iter().next_back().map(|(&o, &l)| (o, l))
    }

    fn drain_into(&mut self, other: &mut ExtentList) {
        for (off, len) in std::mem::take(&mut self.by_offset) {
            other.insert(off, len);
        }
        self.by_size.clear();
    }

    /// Serialize as `[count u32]([offset u64][len u64])*`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.by_offset.len() as u32).to_le_bytes());
        for (off, len) in self.iter() {
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
    }

    pub fn decode(b: &[u8]) -> Option<ExtentList> {
        let n = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
        let mut list = ExtentList::default();
        let mut prev_end = 0u64;
        for i in 0..n {
            let at = 4 + i * 16;
            let off = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
            let len = u64::from_le_bytes(b.get(at + 8..at + 16)?.try_into().ok()?);
            if len == 0 || off < prev_end {
                return None;
            }
            prev_end = off.checked_add(len)?;
            list.raw_insert(off, len);
        }
        Some(list)
    }
}

/// The extent lists of one file.
#[derive(Debug)]
pub struct Extents {
    pub alloc: ExtentList,
    pub avail: ExtentList,
    pub discard: ExtentList,
    pub pending: ExtentList,
    /// Allocated while no checkpoint was in progress, since the last one
    /// began: no checkpoint names these, so freeing one makes it available
    /// at once (pages eviction writes and the writer soon replaces).
    pub fresh: ExtentList,
    /// Allocated but not part of any tree a checkpoint could snapshot yet:
    /// a merge's output before it is installed (`runs.rs`), and after it is
    /// installed until the next checkpoint's snapshot. A checkpoint lists
    /// them as free, so a crash drops them; freeing one makes it available
    /// at once.
    pub unnamed: ExtentList,
    /// Unnamed blocks now in the live tree: named from the next snapshot on.
    pub named_next: ExtentList,
    /// Between `checkpoint_begin` and `checkpoint_durable`/`_abandoned`.
    pub in_checkpoint: bool,
    pub file_size: u64,
    /// Bytes checkpoints made available since free blocks were last punched.
    pub freed_since_punch_bytes: u64,
}

/// One data file: its blocks and their extent lists.
pub struct BlockFile {
    file: Arc<dyn VfsFile>,
    path: PathBuf,
    policy: AllocPolicy,
    extents: Mutex<Extents>,
    /// The file system refused to punch a hole: never ask again.
    punch_unsupported: AtomicBool,
}

const FILE_MAGIC: &[u8; 8] = b"ARBORDB1";

impl BlockFile {
    /// Start a new, empty file: truncate and write the header block.
    pub fn create(file: Arc<dyn VfsFile>, policy: AllocPolicy) -> Result<BlockFile> {
        file.set_len(0)?;
        let (buf, _) = build_block(BlockKind::FileHeader, FILE_MAGIC);
        file.write_at(&buf, 0)?;
        let bf = BlockFile::with_extents(file, policy, ExtentList::default(), buf.len() as u64);
        Ok(bf)
    }

    /// Open a file whose live blocks (besides the header) are `alloc`, as
    /// recorded by the last checkpoint. Everything else is free; the tail
    /// past the last live block is truncated.
    pub fn open(file: Arc<dyn VfsFile>, policy: AllocPolicy, alloc: ExtentList) -> Result<BlockFile> {
        let header = block_alloc_unit_bytes;
        let end = alloc.last().map(|(o, l)| o + l).unwrap_or(header).max(header);
        if let Some((first, _)) = alloc.iter().next() {
            if first < header {
                return Err(StorageError::corruption(file.path(), first, "extent list claims the file header block"));
            }
        }
        let len = file.len()?;
        if len < end {
            return Err(StorageError::corruption(
                file.path(),
                len,
                format!("file is {len} bytes but the checkpoint uses blocks up to {end}"),
            ));
        }
        let mut hdr = vec![0u8; header as usize];
        file.read_at(&mut hdr, 0)?;
        let hdr_addr =
            BlockAddr { offset: 0, size: header as u32, checksum: u32::from_le_bytes(hdr[0..4].try_into().unwrap()) };
        let (kind, range) = check_block(file.path(), hdr_addr, &hdr)?;
        if kind != BlockKind::FileHeader || &hdr[range] != FILE_MAGIC {
            return Err(StorageError::corruption(file.path(), 0, "not an ArborDB data file"));
        }
        if len > end {
            file.set_len(end)?;
        }
        Ok(BlockFile::with_extents(file, policy, alloc, end))
    }

    fn with_extents(file: Arc<dyn VfsFile>, policy: AllocPolicy, alloc: ExtentList, file_size: u64) -> BlockFile {
        let header = block_alloc_unit_bytes;
        let mut avail = ExtentList::new_sized();
        let mut cursor = header;
        for (off, len) in alloc.iter() {
            assert!(off >= cursor, "alloc list overlaps the header or itself");
            if off > cursor {
                avail.insert(cursor, off - cursor);
            }
            cursor = off + len;
        }
        if file_size > cursor {
            avail.insert(cursor, file_size - cursor);
        }
        let path = file.path().to_path_buf();
        BlockFile {
            file,
            path,
            policy,
            extents: Mutex::new(Extents {
                alloc,
                avail,
                discard: ExtentList::default(),
                pending: ExtentList::default(),
                fresh: ExtentList::default(),
                unnamed: ExtentList::default(),
                named_next: ExtentList::default(),
                in_checkpoint: false,
                file_size,
                freed_since_punch_bytes: 0,
            }),
            punch_unsupported: AtomicBool::new(false),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &Arc<dyn VfsFile> {
        &self.file
    }

    pub fn extents(&self) -> MutexGuard<'_, Extents> {
        self.extents.lock().unwrap()
    }

    fn allocate(&self, size: u64, unnamed: bool) -> u64 {
        let mut ext = self.extents();
        let found = match self.policy {
            AllocPolicy::BestFit => ext.avail.take_best_fit(size),
            AllocPolicy::FirstFit => ext.avail.take_first_fit(size),
            AllocPolicy::Append => None,
        };
        let off = match found {
            Some(off) => off,
            None => {
                // Extend the file; a free extent at the tail is used first.
                let mut off = ext.file_size;
                if let Some((l_off, l_len)) = ext.avail.last() {
                    if l_off + l_len == ext.file_size && self.policy != AllocPolicy::Append {
                        ext.avail.remove(l_off, l_len);
                        off = l_off;
                    }
                }
                ext.file_size = off + size;
                off
            }
        };
        ext.alloc.insert(off, size);
        if unnamed {
            ext.unnamed.insert(off, size);
        } else if !ext.in_checkpoint {
            ext.fresh.insert(off, size);
        }
        off
    }

    /// Write a new block holding `payload`; returns its address.
    pub fn write_block(&self, kind: BlockKind, payload: &[u8]) -> Result<BlockAddr> {
        self.write_block_with(kind, Compressor::None, payload)
    }

    /// Write a new block holding `payload`, compressed by `compressor`
    /// where that makes it smaller; returns its address.
    pub fn write_block_with(&self, kind: BlockKind, compressor: Compressor, payload: &[u8]) -> Result<BlockAddr> {
        self.write_block_as(kind, compressor, payload, false)
    }

    /// `write_block_with` for a block no checkpoint names until
    /// [`BlockFile::name_from_next_checkpoint`] (see `Extents::unnamed`).
    pub fn write_block_unnamed(&self, kind: BlockKind, compressor: Compressor, payload: &[u8]) -> Result<BlockAddr> {
        self.write_block_as(kind, compressor, payload, true)
    }

    fn write_block_as(
        &self,
        kind: BlockKind,
        compressor: Compressor,
        payload: &[u8],
        unnamed: bool,
    ) -> Result<BlockAddr> {
        let (buf, checksum) = build_stored(kind, compressor, payload)?;
        let offset = self.allocate(buf.len() as u64, unnamed);
        self.file.write_at(&buf, offset)?;
        Ok(BlockAddr { offset, size: buf.len() as u32, checksum })
    }

    /// Write a batch's blocks side by side with one write, as unnamed
    /// blocks (see `write_block_unnamed`); returns their addresses in the
    /// order they were pushed, and empties the batch. One allocation
    /// covers them all; each is freed on its own later (extents split).
    pub fn write_batch_unnamed(&self, batch: &mut BlockBatch) -> Result<Vec<BlockAddr>> {
        if batch.bytes.is_empty() {
            return Ok(Vec::new());
        }
        let offset = self.allocate(batch.bytes.len() as u64, true);
        let written = self.file.write_at(&batch.bytes, offset);
        let addrs = batch
            .blocks
            .drain(..)
            .map(|(at, size, checksum)| BlockAddr { offset: offset + at, size, checksum })
            .collect::<Vec<_>>();
        batch.bytes.clear();
        if let Err(e) = written {
            for &a in &addrs {
                self.free(a);
            }
            return Err(e);
        }
        Ok(addrs)
    }

    /// Read and check the block at `addr`; returns its kind and payload.
    pub fn read_block(&self, addr: BlockAddr) -> Result<(BlockKind, Vec<u8>)> {
        read_block_at(&*self.file, addr)
    }

    /// The live tree stopped referencing `addr`. It stays unavailable until a
    /// checkpoint that no longer references it is durable (invariant 1),
    /// unless no checkpoint can name it (`Extents::fresh`): then at once.
    pub fn free(&self, addr: BlockAddr) {
        let mut ext = self.extents();
        let removed = ext.alloc.remove(addr.offset, addr.size as u64);
        assert!(removed, "{}: freeing block {addr:?} that is not allocated", self.path.display());
        let (off, len) = (addr.offset, addr.size as u64);
        if ext.unnamed.remove(off, len) {
            // No checkpoint names it, not even one being written now (it
            // lists unnamed blocks as free).
            ext.named_next.remove(off, len);
            ext.avail.insert(off, len);
        } else if !ext.in_checkpoint && ext.fresh.remove(off, len) {
            ext.avail.insert(off, len);
        } else {
            ext.discard.insert(off, len);
        }
    }

    /// Unnamed blocks that are now in the live tree: the next checkpoint's
    /// snapshot names them (the caller holds the commit gate, so no
    /// snapshot is between the tree change and this call).
    pub fn name_from_next_checkpoint(&self, blocks: &[BlockAddr]) {
        let mut ext = self.extents();
        for a in blocks {
            assert!(ext.unnamed.contains(a.offset, a.size as u64), "naming block {a:?} that is not unnamed");
            ext.named_next.insert(a.offset, a.size as u64);
        }
    }

    /// `free`, for an address read from disk: `false` (and nothing freed)
    /// when the block is not allocated (a corrupt manifest).
    pub fn free_checked(&self, addr: BlockAddr) -> bool {
        if !self.extents().alloc.contains(addr.offset, addr.size as u64) {
            return false;
        }
        self.free(addr);
        true
    }

    /// At the snapshot of a checkpoint: blocks freed so far are not part of
    /// it; unnamed blocks installed so far are.
    pub fn checkpoint_begin(&self) {
        let mut ext = self.extents();
        assert!(ext.pending.is_empty() && !ext.in_checkpoint, "a checkpoint is already in progress");
        let Extents { discard, pending, unnamed, named_next, .. } = &mut *ext;
        for (off, len) in std::mem::take(named_next).iter() {
            let removed = unnamed.remove(off, len);
            assert!(removed, "a named block left the unnamed list");
        }
        discard.drain_into(pending);
        ext.fresh = ExtentList::default();
        ext.in_checkpoint = true;
    }

    /// Blocks a checkpoint references: the allocated ones plus those freed
    /// since its snapshot (the live tree dropped them after the snapshot
    /// was taken, so the checkpoint still names them).
    fn checkpoint_extents(ext: &Extents) -> ExtentList {
        let mut list = ext.alloc.clone();
        for (off, len) in ext.unnamed.iter() {
            let removed = list.remove(off, len);
            assert!(removed, "an unnamed block that is not allocated");
        }
        for (off, len) in ext.discard.iter() {
            list.insert(off, len);
        }
        list
    }

    /// Write the checkpoint's extent list as its last block. The block
    /// lists itself.
    pub fn write_extent_list(&self) -> Result<BlockAddr> {
        let count = Self::checkpoint_extents(&self.extents()).len();
        // Allocating the list's own block can add at most one extent.
        let reserve = round_to_unit((block_header_bytes + 4 + (count + 2) * 16) as u64);
        let offset = self.allocate(reserve, false);
        let mut payload = Vec::with_capacity(reserve as usize);
        Self::checkpoint_extents(&self.extents()).encode(&mut payload);
        let (mut buf, _) = build_block(BlockKind::ExtentList, &payload);
        assert!(buf.len() as u64 <= reserve, "extent list outgrew its reservation");
        buf.resize(reserve as usize, 0);
        let checksum = crc32c::crc32c(&buf[4..]);
        buf[4..8].copy_from_slice(&(reserve as u32).to_le_bytes());
        buf[0..4].copy_from_slice(&checksum.to_le_bytes());
        self.file.write_at(&buf, offset)?;
        Ok(BlockAddr { offset, size: reserve as u32, checksum })
    }

    /// The checkpoint is durable: what it no longer references is free.
    /// Free blocks are punched every `punch_every_blocks` freed blocks (0:
    /// never); returns the blocks given back to the device.
    pub fn checkpoint_durable(&self, punch_every_blocks: u64) -> Result<u64> {
        let mut ext = self.extents();
        let Extents { pending, avail, .. } = &mut *ext;
        let freed: u64 = pending.iter().map(|(_, len)| len).sum();
        pending.drain_into(avail);
        ext.in_checkpoint = false;
        ext.freed_since_punch_bytes += freed;
        // Give back a free tail to the file system, under the lock: an
        // allocation at the new end must not be written before the cut.
        if let Some((off, len)) = ext.avail.last() {
            if off + len == ext.file_size {
                ext.avail.remove(off, len);
                ext.file_size = off;
                self.file.set_len(off)?;
            }
        }
        Ok(self.punch_free(&mut ext, punch_every_blocks))
    }

    /// Release the free blocks to the device once `punch_every_blocks` have
    /// been freed since the last time (invariant 5), holding the extent
    /// lock so no block is allocated in a range while it is punched.
    /// Ranges already punched are punched again: the file system makes that
    /// cheap, and tracking them would mean clipping on every allocation.
    /// Punching only gives space back: a failure is logged and the blocks
    /// stay as they are (the checkpoint it follows is already durable).
    fn punch_free(&self, ext: &mut Extents, every: u64) -> u64 {
        let due = every > 0 && ext.freed_since_punch_bytes >= every.saturating_mul(block_alloc_unit_bytes);
        if !due || self.punch_unsupported.load(Ordering::Relaxed) {
            return 0;
        }
        ext.freed_since_punch_bytes = 0;
        let mut punched = 0;
        for (off, len) in ext.avail.iter() {
            match self.file.punch_hole(off, len) {
                Ok(true) => punched += len / block_alloc_unit_bytes,
                Ok(false) => {
                    // The file system cannot: stop asking.
                    self.punch_unsupported.store(true, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    tracing::warn!(file = %self.path.display(), error = %e, "punching free blocks failed; they stay allocated on the device");
                    break;
                }
            }
        }
        punched
    }

    /// The checkpoint failed: what it would have released stays reserved.
    pub fn checkpoint_abandoned(&self) {
        let mut ext = self.extents();
        let Extents { pending, discard, .. } = &mut *ext;
        pending.drain_into(discard);
        ext.in_checkpoint = false;
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extent_insert_coalesces_and_remove_splits() {
        let mut l = ExtentList::new_sized();
        l.insert(4096, 4096);
        l.insert(12288, 4096);
        l.insert(8192, 4096);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![(4096, 12288)]);
        assert!(l.remove(8192, 4096));
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![(4096, 4096), (12288, 4096)]);
        assert!(!l.remove(8192, 4096));
        assert_eq!(l.by_size.len(), 2);
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn extent_overlap_is_a_bug() {
        let mut l = ExtentList::default();
        l.insert(0, 8192);
        l.insert(4096, 4096);
    }

    #[test]
    fn best_fit_takes_smallest_sufficient_extent() {
        let mut l = ExtentList::new_sized();
        l.insert(4096, 16384);
        l.insert(65536, 8192);
        assert_eq!(l.take_best_fit(8192), Some(65536));
        assert_eq!(l.take_first_fit(4096), Some(4096));
        assert_eq!(l.take_best_fit(1 << 20), None);
    }

    #[test]
    fn compressed_leaf_blocks_read_back_and_bad_ones_are_corruption() {
        use crate::vfs::{OsVfs, Vfs};
        let dir = tempfile::tempdir().unwrap();
        let file = OsVfs.open(&dir.path().join("t.arb"), true).unwrap();
        let bf = BlockFile::create(file.clone(), AllocPolicy::BestFit).unwrap();
        let page: Vec<u8> = (0..3000u32).flat_map(|i| format!("user{:08}", i / 2).into_bytes()).collect();
        for c in [Compressor::None, Compressor::Snappy, Compressor::Zstd] {
            let addr = bf.write_block_with(BlockKind::Leaf, c, &page).unwrap();
            if c != Compressor::None {
                assert!((addr.size as usize) < page.len() / 2, "{}: block of {} bytes", c.name(), addr.size);
            }
            assert_eq!(bf.read_block(addr).unwrap(), (BlockKind::Leaf, page.clone()));
        }
        // A compressed block whose bytes pass the checksum but do not
        // decompress (a writer's bug, not a torn write): corruption, not
        // a panic and not garbage served.
        for (codec, stored) in [
            (Compressor::Snappy, [&8000u32.to_le_bytes()[..], &[0xff; 64][..]].concat()),
            (Compressor::Zstd, [&8000u32.to_le_bytes()[..], &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3][..]].concat()),
            (Compressor::Snappy, vec![1, 2]),
        ] {
            let (buf, checksum) = build_block_coded(BlockKind::Leaf, codec, &stored);
            let offset = bf.allocate(buf.len() as u64, false);
            file.write_at(&buf, offset).unwrap();
            let addr = BlockAddr { offset, size: buf.len() as u32, checksum };
            let err = bf.read_block(addr).unwrap_err();
            assert!(err.is_corruption(), "{}: {err}", codec.name());
        }
        // An unknown codec byte is corruption too.
        let (mut buf, _) = build_block(BlockKind::Leaf, b"hello");
        buf[13] = 9;
        let checksum = crc32c::crc32c(&buf[4..]);
        buf[0..4].copy_from_slice(&checksum.to_le_bytes());
        let offset = bf.allocate(buf.len() as u64, false);
        file.write_at(&buf, offset).unwrap();
        let err = bf.read_block(BlockAddr { offset, size: buf.len() as u32, checksum }).unwrap_err();
        assert!(err.is_corruption(), "{err}");
    }

    /// A merge's blocks: free in every checkpoint's list until a snapshot
    /// after they were installed; freed before that, available at once.
    #[test]
    fn unnamed_blocks_are_named_from_the_snapshot_after_they_are_installed() {
        use crate::vfs::{OsVfs, Vfs};
        let dir = tempfile::tempdir().unwrap();
        let file = OsVfs.open(&dir.path().join("t.arb"), true).unwrap();
        let bf = BlockFile::create(file, AllocPolicy::BestFit).unwrap();
        let listed = |bf: &BlockFile, a: BlockAddr| BlockFile::checkpoint_extents(&bf.extents()).contains(a.offset, 1);
        let named = bf.write_block(BlockKind::Leaf, b"named").unwrap();
        let merged = bf.write_block_unnamed(BlockKind::Leaf, Compressor::None, b"merged").unwrap();
        let dropped = bf.write_block_unnamed(BlockKind::Leaf, Compressor::None, b"dropped").unwrap();
        assert!(listed(&bf, named) && !listed(&bf, merged) && !listed(&bf, dropped));
        // A checkpoint in progress when the merge is installed does not name it...
        bf.checkpoint_begin();
        bf.name_from_next_checkpoint(&[merged]);
        assert!(!listed(&bf, merged));
        bf.checkpoint_durable(0).unwrap();
        // ...the next one does.
        bf.checkpoint_begin();
        assert!(listed(&bf, merged));
        bf.checkpoint_durable(0).unwrap();
        // An abandoned merge's block is free at once, even during a checkpoint.
        bf.checkpoint_begin();
        bf.free(dropped);
        assert!(bf.extents().avail.contains(dropped.offset, dropped.size as u64));
        bf.checkpoint_durable(0).unwrap();
    }

    #[test]
    fn a_batch_is_written_side_by_side_and_its_blocks_freed_one_by_one() {
        use crate::vfs::{OsVfs, Vfs};
        let dir = tempfile::tempdir().unwrap();
        let file = OsVfs.open(&dir.path().join("t.arb"), true).unwrap();
        let bf = BlockFile::create(file, AllocPolicy::BestFit).unwrap();
        let mut batch = BlockBatch::default();
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 3000 + 2000 * i as usize]).collect();
        for p in &payloads {
            batch.push(BlockKind::Leaf, Compressor::None, p).unwrap();
        }
        let addrs = bf.write_batch_unnamed(&mut batch).unwrap();
        assert_eq!(batch.bytes(), 0, "a written batch is empty");
        assert_eq!(addrs.len(), 5);
        for (w, a) in addrs.windows(2).map(|w| (w[0], w[1])).enumerate() {
            assert_eq!(a.0.end(), a.1.offset, "block {w} and the next lie side by side");
        }
        for (a, p) in addrs.iter().zip(&payloads) {
            assert_eq!(bf.read_block(*a).unwrap(), (BlockKind::Leaf, p.clone()));
        }
        let listed = |a: BlockAddr| BlockFile::checkpoint_extents(&bf.extents()).contains(a.offset, 1);
        assert!(addrs.iter().all(|&a| !listed(a)), "a batch's blocks are unnamed");
        bf.name_from_next_checkpoint(&addrs[..2]);
        bf.free(addrs[3]);
        bf.free(addrs[4]);
        bf.checkpoint_begin();
        assert!(listed(addrs[0]) && listed(addrs[1]) && !listed(addrs[2]));
        assert!(bf.extents().avail.contains(addrs[3].offset, addrs[4].end() - addrs[3].offset));
        bf.checkpoint_durable(0).unwrap();
        assert!(bf.write_batch_unnamed(&mut batch).unwrap().is_empty());
    }

    #[test]
    fn block_roundtrip_and_corruption() {
        let (mut buf, ck) = build_block(BlockKind::Leaf, b"hello");
        let addr = BlockAddr { offset: 4096, size: buf.len() as u32, checksum: ck };
        let p = Path::new("t");
        let (kind, r) = check_block(p, addr, &buf).unwrap();
        assert_eq!(kind, BlockKind::Leaf);
        assert_eq!(&buf[r], b"hello");
        buf[100] ^= 1;
        assert!(check_block(p, addr, &buf).unwrap_err().is_corruption());
    }

    #[test]
    fn extent_list_codec() {
        let mut l = ExtentList::default();
        l.insert(4096, 4096);
        l.insert(16384, 8192);
        let mut b = Vec::new();
        l.encode(&mut b);
        assert_eq!(ExtentList::decode(&b).unwrap(), l);
        assert!(ExtentList::decode(&b[..10]).is_none());
    }
}
