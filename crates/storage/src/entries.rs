//! Sequences in chunks shared between tree versions.
//!
//! Every commit copies the nodes on the paths it changes (the published
//! version still holds them), and a node holds tens to hundreds of items,
//! each a reference count to bump when copied. Copying a chunked sequence
//! copies its chunk pointers; changing an item copies only the chunk that
//! holds it (`Arc::make_mut`).
//! - [`Chunked`] (a leaf's entries): chunks of `LEAF_CHUNK` to `2 * LEAF_CHUNK`
//!   items that split beyond and go when emptied; inserts, the common change
//!   to a leaf, shift items within one chunk.
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

/// Items per leaf chunk: a chunk holds `LEAF_CHUNK` to `2 * LEAF_CHUNK`.
const LEAF_CHUNK: usize = 16;
/// Items per chunk of child slots.
const CHUNK: usize = 32;

/// The entries of a leaf.
pub type Entries = Chunked<Entry>;

#[derive(Clone, Debug)]
pub struct Chunked<T> {
    chunks: Vec<Arc<Vec<T>>>,
    /// `starts[c]` is the index of chunk `c`'s first entry; the last
    /// element is the length.
    starts: Vec<usize>,
    /// Every chunk but the last holds exactly `LEAF_CHUNK` entries (as after a
    /// page is read): index lookups are a division.
    uniform: bool,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new(), starts: vec![0], uniform: true }
    }
}

impl<T: Clone> Chunked<T> {
    pub fn new() -> Chunked<T> {
        Chunked::default()
    }

    pub fn len(&self) -> usize {
        *self.starts.last().unwrap()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn reindex(&mut self) {
        self.starts.clear();
        let mut at = 0;
        self.starts.push(0);
        for c in &self.chunks {
            at += c.len();
            self.starts.push(at);
        }
        let n = self.chunks.len();
        self.uniform = n == 0 || self.chunks[..n - 1].iter().all(|c| c.len() == LEAF_CHUNK);
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

    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len() {
            return None;
        }
        let (c, o) = self.locate(i);
        Some(&self.chunks[c][o])
    }

    /// The item at `i`, for changing (copies its chunk if shared).
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        let (c, o) = self.locate(i);
        &mut Arc::make_mut(&mut self.chunks[c])[o]
    }

    pub fn binary_search_by(&self, mut f: impl FnMut(&T) -> Ordering) -> Result<usize, usize> {
        let c = self.chunks.partition_point(|ch| f(ch.last().expect("chunks are never empty")) == Ordering::Less);
        if c == self.chunks.len() {
            return Err(self.len());
        }
        match self.chunks[c].binary_search_by(f) {
            Ok(o) => Ok(self.starts[c] + o),
            Err(o) => Err(self.starts[c] + o),
        }
    }

    pub fn insert(&mut self, i: usize, e: T) {
        assert!(i <= self.len(), "insert at {i} past the end {}", self.len());
        if self.chunks.is_empty() {
            self.chunks.push(Arc::new(vec![e]));
            self.reindex();
            return;
        }
        // Appending goes to the last chunk; otherwise the chunk holding `i`.
        let (c, o) =
            if i == self.len() { (self.chunks.len() - 1, self.chunks.last().unwrap().len()) } else { self.locate(i) };
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        chunk.insert(o, e);
        if chunk.len() > 2 * LEAF_CHUNK {
            let right = chunk.split_off(chunk.len() / 2);
            self.chunks.insert(c + 1, Arc::new(right));
        }
        self.reindex();
    }

    pub fn push(&mut self, e: T) {
        self.insert(self.len(), e);
    }

    pub fn remove(&mut self, i: usize) -> T {
        let (c, o) = self.locate(i);
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        let e = chunk.remove(o);
        if chunk.is_empty() {
            self.chunks.remove(c);
        }
        self.reindex();
        e
    }

    /// Split at `at`: `self` keeps `[0, at)`, the rest is returned.
    pub fn split_off(&mut self, at: usize) -> Chunked<T> {
        let mut right = Chunked::new();
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

    /// Append `other`'s items, sharing its chunks.
    pub fn append_shared(&mut self, other: &Chunked<T>) {
        self.chunks.extend(other.chunks.iter().cloned());
        self.reindex();
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T: Clone> std::ops::Index<usize> for Chunked<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).unwrap_or_else(|| panic!("item {i} of {}", self.len()))
    }
}

impl<T: Clone> FromIterator<T> for Chunked<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Chunked<T> {
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
        let mut e = Chunked { chunks, starts: Vec::new(), uniform: true };
        e.reindex();
        e
    }
}

impl<'a, T: Clone> IntoIterator for &'a Chunked<T> {
    type Item = &'a T;
    type IntoIter = Box<dyn Iterator<Item = &'a T> + 'a>;
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
                prop_assert_eq!(e.binary_search_by(|(x, _)| x.cmp(&probe)), model.binary_search(&k));
            }
            let got: Vec<u16> = e.iter().map(|(k, _)| u16::from_be_bytes([k[0], k[1]])).collect();
            prop_assert_eq!(&got, &model);
            for (i, m) in model.iter().enumerate() {
                prop_assert_eq!(&e[i].0[..], &m.to_be_bytes()[..]);
            }
        }
    }
}
