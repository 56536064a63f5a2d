//! The entries of a leaf, in chunks shared between tree versions.
//!
//! Every commit copies the leaves it changes (the published version still
//! holds them), and a 32 KiB leaf holds hundreds of entries. Copying an
//! `Entries` copies its chunk pointers; changing an entry copies only the
//! chunk that holds it (`Arc::make_mut`). Chunks hold up to `2 * CHUNK`
//! entries and split beyond; an emptied chunk goes.

use crate::page::{Key, Value};
use std::cmp::Ordering;
use std::sync::Arc;

pub type Entry = (Key, Value);

const CHUNK: usize = 32;

#[derive(Clone, Debug)]
pub struct Entries {
    chunks: Vec<Arc<Vec<Entry>>>,
    /// `starts[c]` is the index of chunk `c`'s first entry; the last
    /// element is the length.
    starts: Vec<usize>,
    /// Every chunk but the last holds exactly `CHUNK` entries (as after a
    /// page is read): index lookups are a division.
    uniform: bool,
}

impl Default for Entries {
    fn default() -> Self {
        Entries { chunks: Vec::new(), starts: vec![0], uniform: true }
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

    fn reindex(&mut self) {
        self.starts.clear();
        let mut at = 0;
        self.starts.push(0);
        for c in &self.chunks {
            at += c.len();
            self.starts.push(at);
        }
        let n = self.chunks.len();
        self.uniform = n == 0 || self.chunks[..n - 1].iter().all(|c| c.len() == CHUNK);
    }

    /// Chunk holding index `i` (`i < len`), and the offset in it.
    fn locate(&self, i: usize) -> (usize, usize) {
        if self.uniform {
            // The last chunk may hold more than `CHUNK`.
            let c = (i / CHUNK).min(self.chunks.len() - 1);
            return (c, i - c * CHUNK);
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

    /// The entry at `i`, for changing (copies its chunk if shared).
    pub fn get_mut(&mut self, i: usize) -> &mut Entry {
        let (c, o) = self.locate(i);
        &mut Arc::make_mut(&mut self.chunks[c])[o]
    }

    pub fn binary_search_by(&self, mut f: impl FnMut(&Entry) -> Ordering) -> Result<usize, usize> {
        let c = self.chunks.partition_point(|ch| f(ch.last().expect("chunks are never empty")) == Ordering::Less);
        if c == self.chunks.len() {
            return Err(self.len());
        }
        match self.chunks[c].binary_search_by(f) {
            Ok(o) => Ok(self.starts[c] + o),
            Err(o) => Err(self.starts[c] + o),
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
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        chunk.insert(o, e);
        if chunk.len() > 2 * CHUNK {
            let right = chunk.split_off(chunk.len() / 2);
            self.chunks.insert(c + 1, Arc::new(right));
        }
        self.reindex();
    }

    pub fn push(&mut self, e: Entry) {
        self.insert(self.len(), e);
    }

    pub fn remove(&mut self, i: usize) -> Entry {
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

impl std::ops::Index<usize> for Entries {
    type Output = Entry;
    fn index(&self, i: usize) -> &Entry {
        self.get(i).unwrap_or_else(|| panic!("entry {i} of {}", self.len()))
    }
}

impl FromIterator<Entry> for Entries {
    fn from_iter<I: IntoIterator<Item = Entry>>(iter: I) -> Entries {
        let mut chunks = Vec::new();
        let mut cur = Vec::with_capacity(CHUNK);
        for e in iter {
            cur.push(e);
            if cur.len() == CHUNK {
                chunks.push(Arc::new(std::mem::replace(&mut cur, Vec::with_capacity(CHUNK))));
            }
        }
        if !cur.is_empty() {
            chunks.push(Arc::new(cur));
        }
        let mut e = Entries { chunks, starts: Vec::new(), uniform: true };
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
        let mut e: Entries = (0..CHUNK as u16).map(entry).collect();
        for k in CHUNK as u16..200 {
            e.push(entry(k));
            for i in 0..=k as usize {
                assert_eq!(&e[i].0[..], &(i as u16).to_be_bytes()[..], "index {i} after {k} pushes");
            }
        }
        let mut f: Entries = (0..(3 * CHUNK) as u16).map(entry).collect();
        f.push(entry(1000));
        f.insert(5, entry(999));
        assert_eq!(f.len(), 3 * CHUNK + 2);
        assert_eq!(&f[3 * CHUNK + 1].0[..], &1000u16.to_be_bytes()[..]);
    }

    proptest! {
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
