//! Sequences in chunks shared between tree versions.
//!
//! Every commit copies the nodes on the paths it changes (the published
//! version still holds them), and a node holds tens to hundreds of items,
//! each a reference count to bump when copied. Copying a chunked sequence
//! copies its chunk pointers; changing an item copies only the chunk that
//! holds it (`Arc::make_mut`).
//! - [`Entries`] (a leaf's entries): chunks of at most `2 * LEAF_CHUNK`
//!   items (`LEAF_CHUNK` when built from a page) that split beyond and go
//!   when emptied (removals and leaf splits may leave short ones); inserts,
//!   the common change to a leaf, shift items within one chunk. The head of each chunk's last
//!   key sits beside the chunk pointers, so a search picks its chunk
//!   without leaving the leaf.
//! - [`FixedChunks`] (an internal node's child slots): every chunk but the
//!   last holds exactly `CHUNK` items, so an item is found by a division
//!   and one load more than a plain slice (readers descend through internal
//!   nodes on every lookup); a structural change, which comes only with a
//!   child's split or merge, rebuilds the chunks from the first it touches.

use crate::page::{Key, Value};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::sync::Arc;

pub type Entry = (Key, Value);

/// Items per leaf chunk as built from a page; a chunk holds at most
/// `2 * LEAF_CHUNK`.
const LEAF_CHUNK: usize = 8;
/// Items per chunk of child slots.
const CHUNK: usize = 32;

/// Bytes of a key kept beside its chunk's pointer ([`Head`]).
const HEAD_BYTES: usize = 16;

/// The first `HEAD_BYTES` of a key, kept in the leaf beside each chunk's
/// pointer: a search picks its chunk by comparing heads, one array in the
/// cache, instead of following three pointers per probe (chunk, entries,
/// key bytes). Keys of at most `HEAD_BYTES` (record keys, the benchmarks'
/// keys) are decided by their heads alone.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Head {
    bytes: [u8; HEAD_BYTES],
    /// Bytes held: `min(key.len(), HEAD_BYTES)`.
    len: u8,
    /// The key is no longer than `HEAD_BYTES`: `bytes[..len]` is all of it.
    whole: bool,
}

impl Head {
    fn of(key: &[u8]) -> Head {
        let n = key.len().min(HEAD_BYTES);
        let mut bytes = [0u8; HEAD_BYTES];
        bytes[..n].copy_from_slice(&key[..n]);
        Head { bytes, len: n as u8, whole: key.len() <= HEAD_BYTES }
    }

    /// The order of this head's key against `probe`, when the head decides it.
    fn cmp(&self, probe: &[u8]) -> Option<Ordering> {
        let n = self.len as usize;
        let m = n.min(probe.len());
        match self.bytes[..m].cmp(&probe[..m]) {
            Ordering::Equal if self.whole => Some(n.cmp(&probe.len())),
            // The probe ends within the head: the longer key sorts after it.
            Ordering::Equal if probe.len() < n => Some(Ordering::Greater),
            Ordering::Equal => None,
            o => Some(o),
        }
    }
}

/// The entries of a leaf, in chunks of at most `2 * LEAF_CHUNK`.
///
/// Invariants (checked by `check` in debug builds):
/// 1. No chunk is empty.
/// 2. `starts[c]` is the index of chunk `c`'s first entry; the last element
///    of `starts` is the length.
/// 3. `lasts[c]` is the head of chunk `c`'s last key.
/// 4. `uniform` says every chunk but the last holds exactly `LEAF_CHUNK`
///    entries (as after a page is read): index lookups are a division.
/// 5. Keys are changed only by insert and remove ([`Entries::value_mut`]
///    lends a value, never a key), so the heads stay true.
#[derive(Clone, Debug)]
pub struct Entries {
    chunks: Vec<Arc<Vec<Entry>>>,
    starts: Vec<usize>,
    lasts: Vec<Head>,
    uniform: bool,
}

impl Default for Entries {
    fn default() -> Self {
        Entries { chunks: Vec::new(), starts: vec![0], lasts: Vec::new(), uniform: true }
    }
}

impl Entries {
    pub fn new() -> Entries {
        Entries::default()
    }

    pub fn len(&self) -> usize {
        *self.starts.last().unwrap()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rebuild `starts`, `lasts` and `uniform` from the chunks (after a
    /// split, a merge or a build: each reads every chunk).
    fn reindex(&mut self) {
        self.starts.clear();
        let mut at = 0;
        self.starts.push(0);
        for c in &self.chunks {
            at += c.len();
            self.starts.push(at);
        }
        self.lasts = self.chunks.iter().map(|c| Head::of(&c.last().expect("chunks are never empty").0)).collect();
        self.set_uniform();
    }

    /// Invariant 4, from `starts` (no chunk is read).
    fn set_uniform(&mut self) {
        let n = self.chunks.len();
        self.uniform = n == 0 || self.starts[..n].windows(2).all(|w| w[1] - w[0] == LEAF_CHUNK);
    }

    fn check(&self) {
        if cfg!(debug_assertions) {
            let mut copy = self.clone();
            copy.reindex();
            assert!(self.chunks.iter().all(|c| !c.is_empty()), "an empty chunk");
            assert_eq!(self.starts, copy.starts, "starts");
            assert_eq!(self.lasts, copy.lasts, "heads of the chunks' last keys");
            assert_eq!(self.uniform, copy.uniform, "uniform");
        }
    }

    /// Chunk holding index `i` (`i < len`), and the offset in it.
    fn locate(&self, i: usize) -> (usize, usize) {
        if self.uniform {
            // The last chunk may hold more than `LEAF_CHUNK`.
            let c = (i / LEAF_CHUNK).min(self.chunks.len() - 1);
            return (c, i - c * LEAF_CHUNK);
        }
        let c = self.starts.partition_point(|&s| s <= i) - 1;
        (c, i - self.starts[c])
    }

    pub fn get(&self, i: usize) -> Option<&Entry> {
        if i >= self.len() {
            return None;
        }
        let (c, o) = self.locate(i);
        Some(&self.chunks[c][o])
    }

    /// The value at `i`, for changing (copies its chunk if shared).
    pub fn value_mut(&mut self, i: usize) -> &mut Value {
        let (c, o) = self.locate(i);
        &mut Arc::make_mut(&mut self.chunks[c])[o].1
    }

    /// `Ok(i)` when the key at `i` is `key`, else `Err(i)` where it would go.
    pub fn search(&self, key: &[u8]) -> Result<usize, usize> {
        // The first chunk whose last key is >= `key`, by the heads.
        let last_before = |c: usize| match self.lasts[c].cmp(key) {
            Some(o) => o == Ordering::Less,
            None => *self.chunks[c].last().expect("chunks are never empty").0 < *key,
        };
        let (mut a, mut b) = (0, self.chunks.len());
        while a < b {
            let m = a + (b - a) / 2;
            if last_before(m) {
                a = m + 1;
            } else {
                b = m;
            }
        }
        if a == self.chunks.len() {
            return Err(self.len());
        }
        match self.chunks[a].binary_search_by(|(k, _)| (**k).cmp(key)) {
            Ok(o) => Ok(self.starts[a] + o),
            Err(o) => Err(self.starts[a] + o),
        }
    }

    pub fn insert(&mut self, i: usize, e: Entry) {
        assert!(i <= self.len(), "insert at {i} past the end {}", self.len());
        if self.chunks.is_empty() {
            self.chunks.push(Arc::new(vec![e]));
            self.reindex();
            return;
        }
        // Appending goes to the last chunk; otherwise the chunk holding `i`.
        let (c, o) =
            if i == self.len() { (self.chunks.len() - 1, self.chunks.last().unwrap().len()) } else { self.locate(i) };
        let chunk = chunk_for_insert(&mut self.chunks[c]);
        chunk.insert(o, e);
        shift_after(&mut self.starts, c, 1);
        if chunk.len() > 2 * LEAF_CHUNK {
            let right = chunk.split_off(chunk.len() / 2);
            let left_last = Head::of(&chunk.last().unwrap().0);
            self.starts.insert(c + 1, self.starts[c] + chunk.len());
            self.lasts[c] = Head::of(&right.last().unwrap().0);
            self.lasts.insert(c, left_last);
            self.chunks.insert(c + 1, Arc::new(right));
        } else if o + 1 == chunk.len() {
            self.lasts[c] = Head::of(&chunk[o].0);
        }
        self.set_uniform();
        self.check();
    }

    pub fn push(&mut self, e: Entry) {
        self.insert(self.len(), e);
    }

    pub fn remove(&mut self, i: usize) -> Entry {
        let (c, o) = self.locate(i);
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        let e = chunk.remove(o);
        shift_after(&mut self.starts, c, -1);
        if chunk.is_empty() {
            self.chunks.remove(c);
            self.starts.remove(c + 1);
            self.lasts.remove(c);
        } else if o == chunk.len() {
            self.lasts[c] = Head::of(&chunk[o - 1].0);
        }
        self.set_uniform();
        self.check();
        e
    }

    /// Split at `at`: `self` keeps `[0, at)`, the rest is returned.
    pub fn split_off(&mut self, at: usize) -> Entries {
        let mut right = Entries::new();
        if at >= self.len() {
            return right;
        }
        let (c, o) = self.locate(at);
        let mut tail = self.chunks.split_off(c);
        if o > 0 {
            let first = Arc::make_mut(&mut tail[0]);
            let rest = first.split_off(o);
            self.chunks.push(std::mem::replace(&mut tail[0], Arc::new(rest)));
        }
        right.chunks = tail;
        self.reindex();
        right.reindex();
        right
    }

    /// Append `other`'s entries, sharing its chunks.
    pub fn append_shared(&mut self, other: &Entries) {
        self.chunks.extend(other.chunks.iter().cloned());
        self.reindex();
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

/// Shift the starts of the chunks after `c` by `delta` entries.
fn shift_after(starts: &mut [usize], c: usize, delta: isize) {
    for s in &mut starts[c + 1..] {
        *s = s.checked_add_signed(delta).expect("starts stay in range");
    }
}

/// A chunk about to take one more entry: copied first if shared, with room
/// for the entry (a plain `Arc::make_mut` copies it at its exact length,
/// and the insert then grows it again).
fn chunk_for_insert(chunk: &mut Arc<Vec<Entry>>) -> &mut Vec<Entry> {
    if Arc::get_mut(chunk).is_none() {
        let mut copy = Vec::with_capacity(chunk.len() + 1);
        copy.extend(chunk.iter().cloned());
        *chunk = Arc::new(copy);
    }
    Arc::get_mut(chunk).expect("the chunk was just made unique")
}

impl std::ops::Index<usize> for Entries {
    type Output = Entry;
    fn index(&self, i: usize) -> &Entry {
        self.get(i).unwrap_or_else(|| panic!("entry {i} of {}", self.len()))
    }
}

impl FromIterator<Entry> for Entries {
    fn from_iter<I: IntoIterator<Item = Entry>>(iter: I) -> Entries {
        let mut chunks = Vec::new();
        let mut cur = Vec::with_capacity(LEAF_CHUNK);
        for e in iter {
            cur.push(e);
            if cur.len() == LEAF_CHUNK {
                chunks.push(Arc::new(std::mem::replace(&mut cur, Vec::with_capacity(LEAF_CHUNK))));
            }
        }
        if !cur.is_empty() {
            chunks.push(Arc::new(cur));
        }
        let mut e = Entries { chunks, starts: Vec::new(), lasts: Vec::new(), uniform: true };
        e.reindex();
        e
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = &'a Entry;
    type IntoIter = Box<dyn Iterator<Item = &'a Entry> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// Chunk pointers a [`FixedChunks`] keeps inline (in the node itself, so a
/// reader's descent loads no separate array): `CHUNK` times this many items.
const CHUNKS_INLINE: usize = 6;

/// See the module comment. Invariant: every chunk but the last holds
/// exactly `CHUNK` items, and no chunk is empty.
#[derive(Clone, Debug)]
pub struct FixedChunks<T> {
    chunks: SmallVec<[Arc<[T]>; CHUNKS_INLINE]>,
    len: usize,
}

impl<T> Default for FixedChunks<T> {
    fn default() -> Self {
        FixedChunks { chunks: SmallVec::new(), len: 0 }
    }
}

impl<T: Clone> FixedChunks<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| &self.chunks[i / CHUNK][i % CHUNK])
    }

    /// The item at `i`, for changing (copies its chunk if shared).
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        assert!(i < self.len, "item {i} of {}", self.len);
        &mut Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }

    /// Replace the items from chunk `c` on by `tail`, in chunks of `CHUNK`
    /// (the items are moved, not cloned).
    fn rebuild_from(&mut self, c: usize, tail: Vec<T>) {
        self.chunks.truncate(c);
        self.len = c * CHUNK + tail.len();
        let mut items = tail.into_iter();
        loop {
            let chunk: Vec<T> = items.by_ref().take(CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            self.chunks.push(Arc::from(chunk));
        }
        debug_assert!(self.chunks.iter().rev().skip(1).all(|ch| ch.len() == CHUNK));
    }

    /// The items from chunk `c` on, cloned.
    fn tail_from(&self, c: usize) -> Vec<T> {
        self.chunks[c..].iter().flat_map(|ch| ch.iter().cloned()).collect()
    }

    pub fn insert(&mut self, i: usize, item: T) {
        assert!(i <= self.len, "insert at {i} past the end {}", self.len);
        let c = (i / CHUNK).min(self.chunks.len());
        let mut tail = self.tail_from(c);
        tail.insert(i - c * CHUNK, item);
        self.rebuild_from(c, tail);
    }

    pub fn remove(&mut self, i: usize) -> T {
        assert!(i < self.len, "remove {i} of {}", self.len);
        let c = i / CHUNK;
        let mut tail = self.tail_from(c);
        let item = tail.remove(i - c * CHUNK);
        self.rebuild_from(c, tail);
        item
    }

    /// Split at `at`: `self` keeps `[0, at)`, the rest is returned.
    pub fn split_off(&mut self, at: usize) -> FixedChunks<T> {
        assert!(at <= self.len, "split at {at} past the end {}", self.len);
        let c = at / CHUNK;
        let mut mine = if c < self.chunks.len() { self.tail_from(c) } else { Vec::new() };
        let theirs = mine.split_off(at - c * CHUNK);
        self.rebuild_from(c, mine);
        theirs.into_iter().collect()
    }

    /// Append `other`'s items, sharing its chunks when `self` ends on a
    /// chunk boundary.
    pub fn append_shared(&mut self, other: &FixedChunks<T>) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.extend(other.chunks.iter().cloned());
            self.len += other.len;
        } else {
            let c = self.chunks.len() - 1;
            let mut tail = self.tail_from(c);
            tail.extend(other.iter().cloned());
            self.rebuild_from(c, tail);
        }
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Chunks `self` shares with `other` (the same allocation).
    #[cfg(test)]
    pub(crate) fn chunks_shared_with(&self, other: &FixedChunks<T>) -> usize {
        self.chunks.iter().filter(|c| other.chunks.iter().any(|o| Arc::ptr_eq(c, o))).count()
    }

    #[cfg(test)]
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

impl<T: Clone> std::ops::Index<usize> for FixedChunks<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).unwrap_or_else(|| panic!("item {i} of {}", self.len))
    }
}

impl<T: Clone> FromIterator<T> for FixedChunks<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> FixedChunks<T> {
        let mut f = FixedChunks::default();
        f.rebuild_from(0, iter.into_iter().collect());
        f
    }
}

impl<'a, T: Clone> IntoIterator for &'a FixedChunks<T> {
    type Item = &'a T;
    type IntoIter = Box<dyn Iterator<Item = &'a T> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    /// A run of `a`s around the heads' width, then up to 8 letters of two:
    /// many keys share their first `HEAD_BYTES` and differ after them, others
    /// end inside the head or are empty.
    fn key_near_head() -> impl Strategy<Value = Vec<u8>> {
        let tail = proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b')], 0..8);
        (0..=HEAD_BYTES + 4, tail).prop_map(|(run, tail)| [vec![b'a'; run], tail].concat())
    }

    fn entry(k: u16) -> Entry {
        (Bytes::copy_from_slice(&k.to_be_bytes()), Value::Inline(Bytes::new()))
    }

    #[test]
    fn appending_past_a_full_chunk_keeps_every_index() {
        let mut e: Entries = (0..LEAF_CHUNK as u16).map(entry).collect();
        for k in LEAF_CHUNK as u16..200 {
            e.push(entry(k));
            for i in 0..=k as usize {
                assert_eq!(&e[i].0[..], &(i as u16).to_be_bytes()[..], "index {i} after {k} pushes");
            }
        }
        let mut f: Entries = (0..(3 * LEAF_CHUNK) as u16).map(entry).collect();
        f.push(entry(1000));
        f.insert(5, entry(999));
        assert_eq!(f.len(), 3 * LEAF_CHUNK + 2);
        assert_eq!(&f[3 * LEAF_CHUNK + 1].0[..], &1000u16.to_be_bytes()[..]);
    }

    proptest! {
        /// Against a plain `Vec`: inserts, removes, changes, splits, appends
        /// (to a boundary and off one), with the chunk invariant checked
        /// after each, and a copy taken before every change unchanged by it.
        #[test]
        fn fixed_chunks_behave_like_a_vec(
            start in 0u32..150,
            ops in proptest::collection::vec((0u8..5, any::<u32>()), 1..300),
        ) {
            let mut model: Vec<u32> = (0..start).collect();
            let mut f: FixedChunks<u32> = model.iter().copied().collect();
            for (op, k) in ops {
                let (copy, copied) = (f.clone(), model.clone());
                match op {
                    0 => {
                        let at = k as usize % (model.len() + 1);
                        model.insert(at, k);
                        f.insert(at, k);
                    }
                    1 if !model.is_empty() => {
                        let at = k as usize % model.len();
                        prop_assert_eq!(f.remove(at), model.remove(at));
                    }
                    2 if !model.is_empty() => {
                        let at = k as usize % model.len();
                        model[at] = k;
                        *f.get_mut(at) = k;
                    }
                    3 => {
                        let at = k as usize % (model.len() + 1);
                        let tail = model.split_off(at);
                        let right = f.split_off(at);
                        prop_assert_eq!(right.iter().copied().collect::<Vec<_>>(), tail.clone());
                        // Append back, and something more, as a merge does.
                        let more: FixedChunks<u32> = (0..k % 70).collect();
                        f.append_shared(&right);
                        f.append_shared(&more);
                        model.extend(tail);
                        model.extend(0..k % 70);
                    }
                    _ => {
                        model.push(k);
                        f.insert(f.len(), k);
                    }
                }
                prop_assert_eq!(f.len(), model.len());
                prop_assert!(f.chunks.iter().rev().skip(1).all(|c| c.len() == CHUNK));
                prop_assert!(f.chunks.iter().all(|c| !c.is_empty()));
                for (i, m) in model.iter().enumerate() {
                    prop_assert_eq!(f[i], *m);
                }
                prop_assert_eq!(f.get(model.len()), None);
                prop_assert_eq!(copy.iter().copied().collect::<Vec<_>>(), copied);
            }
        }

        /// Searches against a sorted `Vec` of keys around the heads' width:
        /// empty keys, keys that end inside a head, keys longer than it that
        /// share it (decided by the keys themselves), built, then changed by
        /// inserts and removes at chunk ends and inside.
        #[test]
        fn searches_keys_longer_and_shorter_than_the_heads(
            start in proptest::collection::vec(key_near_head(), 0..120),
            ops in proptest::collection::vec((0u8..4, key_near_head(), any::<u16>()), 1..200),
        ) {
            let mut model: Vec<Vec<u8>> = start;
            model.sort();
            model.dedup();
            let as_entry = |k: &Vec<u8>| (Bytes::copy_from_slice(k), Value::Inline(Bytes::new()));
            let mut e: Entries = model.iter().map(as_entry).collect();
            for (op, key, at) in ops {
                match (op, model.binary_search(&key)) {
                    (0 | 1, Err(i)) => {
                        model.insert(i, key.clone());
                        e.insert(i, as_entry(&key));
                    }
                    (2, _) if !model.is_empty() => {
                        let i = at as usize % model.len();
                        model.remove(i);
                        e.remove(i);
                    }
                    _ => {}
                }
                prop_assert_eq!(e.search(&key), model.binary_search(&key));
                // Probes cut from a present key: a prefix of it, and it with a byte more.
                if let Some(k) = model.get(at as usize % model.len().max(1)) {
                    let cut = &k[..at as usize % (k.len() + 1)];
                    prop_assert_eq!(e.search(cut), model.binary_search(&cut.to_vec()));
                    let longer = [&k[..], &[0]].concat();
                    prop_assert_eq!(e.search(&longer), model.binary_search(&longer));
                }
            }
            prop_assert_eq!(e.len(), model.len());
            for (i, m) in model.iter().enumerate() {
                prop_assert_eq!(&e[i].0[..], &m[..]);
            }
        }

        /// Against a plain `Vec`: inserts, removes, splits, appends, searches.
        #[test]
        fn behaves_like_a_vec(
            start in 0u16..200,
            ops in proptest::collection::vec((0u8..6, any::<u16>()), 1..400),
        ) {
            // Start from a collected (uniform) run, as after a page read.
            let mut model: Vec<u16> = (0..start).map(|k| k * 10).collect();
            let mut e: Entries = model.iter().map(|&k| entry(k)).collect();
            for (op, k) in ops {
                match op {
                    0 | 1 => {
                        let at = model.binary_search(&k).unwrap_or_else(|x| x);
                        if model.get(at) != Some(&k) {
                            model.insert(at, k);
                            e.insert(at, entry(k));
                        }
                    }
                    2 if !model.is_empty() => {
                        let at = k as usize % model.len();
                        model.remove(at);
                        e.remove(at);
                    }
                    3 if !model.is_empty() => {
                        let at = k as usize % (model.len() + 1);
                        let tail = model.split_off(at);
                        let right = e.split_off(at);
                        prop_assert_eq!(right.len(), tail.len());
                        let clone = e.clone();
                        e.append_shared(&right);
                        model.extend(tail);
                        prop_assert_eq!(clone.len(), at);
                    }
                    4 | 5 => {
                        let k = model.last().map_or(0, |l| l.saturating_add(1 + k % 7));
                        if model.last() != Some(&k) {
                            model.push(k);
                            e.push(entry(k));
                        }
                    }
                    _ => {}
                }
                prop_assert_eq!(e.len(), model.len());
                let probe = Bytes::copy_from_slice(&k.to_be_bytes());
                prop_assert_eq!(e.search(&probe), model.binary_search(&k));
            }
            let got: Vec<u16> = e.iter().map(|(k, _)| u16::from_be_bytes([k[0], k[1]])).collect();
            prop_assert_eq!(&got, &model);
            for (i, m) in model.iter().enumerate() {
                prop_assert_eq!(&e[i].0[..], &m.to_be_bytes()[..]);
            }
        }
    }
}
