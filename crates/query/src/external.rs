//! External merge sorting, for blocking work that outgrows its memory
//! limit with `allowDiskUse`: a find's sort, an aggregation's `$sort`, and
//! `$group`'s partial groups. The caller sorts its buffer and writes it out
//! as a run; once gathering ends, the runs are merged as they are read.
//!
//! Runs live in anonymous files under a directory the caller names
//! (unlinked when created), so they vanish when the runs are dropped or
//! the process dies. The only I/O the query crate does.

use bson::Document;
use std::cmp::Ordering;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// What can be written to a run and read back.
pub trait Spill: Sized {
    fn write_to(&self, w: &mut dyn Write) -> io::Result<()>;
    /// The next item, `None` at the run's end.
    fn read_from(r: &mut dyn Read) -> io::Result<Option<Self>>;
}

/// Reads one document (its length first); `None` at a clean end of input.
pub fn read_document(r: &mut dyn Read) -> io::Result<Option<Document>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = usize::try_from(i32::from_le_bytes(len))
        .ok()
        .filter(|&n| n >= 5)
        .ok_or_else(|| io::Error::other("bad document length"))?;
    let mut bytes = vec![0u8; n];
    bytes[..4].copy_from_slice(&len);
    r.read_exact(&mut bytes[4..])?;
    doc::bson_bytes::decode(&bytes).map(Some).map_err(io::Error::other)
}

impl Spill for Document {
    fn write_to(&self, w: &mut dyn Write) -> io::Result<()> {
        w.write_all(&doc::bson_bytes::encode(self).map_err(io::Error::other)?)
    }

    fn read_from(r: &mut dyn Read) -> io::Result<Option<Document>> {
        read_document(r)
    }
}

/// The order runs are sorted and merged in.
pub type Compare<T> = Arc<dyn Fn(&T, &T) -> Ordering + Send + Sync>;

/// Folds an item into an equal earlier one (`$group`'s partial groups of
/// one key).
pub type Combine<T> = Arc<dyn Fn(&mut T, T) + Send + Sync>;

/// One sorted run being read.
enum Run<T> {
    File(BufReader<File>),
    Memory(std::vec::IntoIter<T>),
}

impl<T: Spill> Run<T> {
    fn next(&mut self) -> io::Result<Option<T>> {
        match self {
            Run::Memory(items) => Ok(items.next()),
            Run::File(r) => T::read_from(r),
        }
    }
}

/// Runs merged at once: when the newest `FAN_IN` runs are all of one
/// level (each merged from as many runs of the level below), they become
/// one run of the next level. A run is so rewritten once per level, and a
/// sort holds at most `FAN_IN - 1` runs per level (few files, few
/// comparisons per item), however many it spills.
pub const FAN_IN: usize = 16;

/// Items gathered in sorted runs; merged in order once gathering ends.
pub struct Runs<T> {
    dir: PathBuf,
    compare: Compare<T>,
    runs: Vec<Run<T>>,
    /// Each run's level: 0 for a spilled buffer, n + 1 for a merge of
    /// runs of level n.
    levels: Vec<u32>,
    /// Each run's next item (`None`: the run is done).
    heads: Vec<Option<T>>,
    /// With a `combine`, equal items are folded together in every merge.
    combine: Option<Combine<T>>,
    /// The item `pop_combined` read past the last one it returned.
    pending: Option<T>,
    /// Runs written to disk so far (merges included).
    pub spills: u64,
    /// Bytes written to disk so far.
    pub bytes: u64,
}

/// Counts what passes through to a run file.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<T: Spill> Runs<T> {
    pub fn new(dir: PathBuf, compare: Compare<T>) -> Runs<T> {
        Runs {
            dir,
            compare,
            runs: Vec::new(),
            levels: Vec::new(),
            heads: Vec::new(),
            combine: None,
            pending: None,
            spills: 0,
            bytes: 0,
        }
    }

    /// Fold equal items together (the later into the earlier) whenever
    /// runs merge, and in `pop_combined`.
    pub fn with_combine(mut self, combine: Combine<T>) -> Runs<T> {
        self.combine = Some(combine);
        self
    }

    /// Write `items` to a new run file (in their order), the newest run,
    /// of `level`.
    fn write_run(&mut self, items: impl Iterator<Item = io::Result<T>>, level: u32) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut w = Counting { inner: BufWriter::new(tempfile::tempfile_in(&self.dir)?), bytes: 0 };
        for item in items {
            item?.write_to(&mut w)?;
        }
        self.bytes += w.bytes;
        self.spills += 1;
        let mut file = w.inner.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        self.runs.push(Run::File(BufReader::new(file)));
        self.levels.push(level);
        Ok(())
    }

    /// Sort `items` (stably) and write them out as a run, keeping the
    /// first `keep`; `items` is left empty.
    pub fn spill(&mut self, items: &mut Vec<T>, keep: Option<usize>) -> io::Result<()> {
        let compare = self.compare.clone();
        items.sort_by(|a, b| compare(a, b));
        if let Some(k) = keep {
            items.truncate(k);
        }
        self.write_run(items.drain(..).map(Ok), 0)?;
        // Merge the newest runs while they make a full level.
        while self.runs.len() >= FAN_IN {
            let start = self.runs.len() - FAN_IN;
            let level = self.levels[start];
            if self.levels[start..].iter().any(|&l| l != level) {
                break;
            }
            self.merge_newest(start, keep, level + 1)?;
        }
        Ok(())
    }

    /// Merge the runs from `start` on into one run of `level` (its first
    /// `keep` items, if limited). They are the newest, so runs stay in
    /// arrival order and the merge stays stable.
    fn merge_newest(&mut self, start: usize, keep: Option<usize>, level: u32) -> io::Result<()> {
        let mut runs = self.runs.split_off(start);
        self.levels.truncate(start);
        let mut merged = Runs::new(self.dir.clone(), self.compare.clone());
        merged.combine = self.combine.clone();
        merged.heads = runs.iter_mut().map(Run::next).collect::<io::Result<_>>()?;
        merged.runs = runs;
        let limit = keep.unwrap_or(usize::MAX);
        let items = std::iter::from_fn(|| merged.pop_combined().transpose()).take(limit);
        self.write_run(items, level)
    }

    /// End gathering with the items still in memory (any order) as the
    /// last run.
    pub fn finish(&mut self, mut rest: Vec<T>) -> io::Result<()> {
        let compare = self.compare.clone();
        rest.sort_by(|a, b| compare(a, b));
        self.runs.push(Run::Memory(rest.into_iter()));
        self.levels.push(0);
        self.heads = self.runs.iter_mut().map(Run::next).collect::<io::Result<_>>()?;
        Ok(())
    }

    /// The next item in order; among equals, the earlier run's (runs are
    /// written in arrival order, so the merge is stable).
    pub fn pop(&mut self) -> io::Result<Option<T>> {
        let mut best: Option<usize> = None;
        for (i, head) in self.heads.iter().enumerate() {
            let Some(h) = head else { continue };
            let better = match best {
                None => true,
                Some(b) => (self.compare)(h, self.heads[b].as_ref().expect("best has a head")).is_lt(),
            };
            if better {
                best = Some(i);
            }
        }
        let Some(b) = best else { return Ok(None) };
        let next = self.runs[b].next()?;
        Ok(std::mem::replace(&mut self.heads[b], next))
    }

    /// The next item in order, with the equal items after it folded into
    /// it in arrival order (just `pop` without a `combine`).
    pub fn pop_combined(&mut self) -> io::Result<Option<T>> {
        let Some(combine) = self.combine.clone() else { return self.pop() };
        let mut first = match self.pending.take() {
            Some(item) => item,
            None => match self.pop()? {
                Some(item) => item,
                None => return Ok(None),
            },
        };
        loop {
            match self.pop()? {
                Some(next) if (self.compare)(&first, &next).is_eq() => combine(&mut first, next),
                next => {
                    self.pending = next;
                    return Ok(Some(first));
                }
            }
        }
    }

    /// Whether every item was returned.
    pub fn is_done(&self) -> bool {
        self.pending.is_none() && self.heads.iter().all(Option::is_none)
    }

    /// Runs held now (files and the in-memory rest).
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn by_k() -> Compare<Document> {
        Arc::new(|a: &Document, b: &Document| a.get_i32("k").unwrap().cmp(&b.get_i32("k").unwrap()))
    }

    #[test]
    fn many_runs_are_merged_as_they_come_and_ties_keep_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Runs::new(dir.path().to_path_buf(), by_k());
        let mut want = Vec::new();
        let mut seq = 0;
        for run in 0..(FAN_IN * FAN_IN + 3) as i32 {
            let mut items: Vec<Document> = (0..5)
                .map(|i| {
                    seq += 1;
                    doc! { "k": (run * 7 + i * 13) % 50, "seq": seq }
                })
                .collect();
            want.extend(items.iter().map(|d| (d.get_i32("k").unwrap(), d.get_i32("seq").unwrap())));
            runs.spill(&mut items, None).unwrap();
            assert!(items.is_empty());
            assert!(runs.run_count() < 2 * FAN_IN, "{} runs", runs.run_count());
        }
        let rest = vec![doc! { "k": 3, "seq": 10_000 }, doc! { "k": 1, "seq": 10_001 }];
        want.extend([(3, 10_000), (1, 10_001)]);
        runs.finish(rest).unwrap();
        want.sort(); // by key, then arrival
        let mut got = Vec::new();
        while let Some(d) = runs.pop().unwrap() {
            got.push((d.get_i32("k").unwrap(), d.get_i32("seq").unwrap()));
        }
        assert!(runs.is_done());
        assert_eq!(got, want);
        // 259 spills, 16 merges of level 1 and one of level 2.
        assert_eq!(runs.spills, (FAN_IN * FAN_IN + 3 + FAN_IN + 1) as u64);
        assert!(runs.bytes > 0);
        // Run files are anonymous: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_kept_prefix_bounds_each_run_and_each_merge() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Runs::new(dir.path().to_path_buf(), by_k());
        for run in 0..(2 * FAN_IN + 1) as i32 {
            let mut items: Vec<Document> = (0..20).map(|i| doc! { "k": 1000 - run * 20 - i }).collect();
            runs.spill(&mut items, Some(3)).unwrap();
        }
        runs.finish(Vec::new()).unwrap();
        let got: Vec<i32> = std::iter::from_fn(|| runs.pop().unwrap()).map(|d| d.get_i32("k").unwrap()).collect();
        // The smallest three overall lead; two merged runs and the last
        // spilled one kept three each.
        assert_eq!(&got[..3], &[1000 - 32 * 20 - 19, 1000 - 32 * 20 - 18, 1000 - 32 * 20 - 17]);
        assert_eq!(got.len(), 3 * 3);
    }

    #[test]
    fn combining_runs_fold_equal_items_in_every_merge() {
        let dir = tempfile::tempdir().unwrap();
        // Items {k, n, seq}: equal keys add their counts and keep the
        // first arrival's seq.
        let combine: Combine<Document> = Arc::new(|a: &mut Document, b: Document| {
            let n = a.get_i32("n").unwrap() + b.get_i32("n").unwrap();
            a.insert("n", n);
        });
        let mut runs = Runs::new(dir.path().to_path_buf(), by_k()).with_combine(combine);
        let mut seq = 0;
        for _ in 0..(FAN_IN * 2) {
            let mut items: Vec<Document> = (0..10)
                .map(|k| {
                    seq += 1;
                    doc! { "k": k, "n": 1, "seq": seq }
                })
                .collect();
            runs.spill(&mut items, None).unwrap();
        }
        let before = runs.bytes;
        runs.finish(vec![doc! { "k": 3, "n": 5, "seq": 0 }]).unwrap();
        let got: Vec<(i32, i32, i32)> = std::iter::from_fn(|| runs.pop_combined().unwrap())
            .map(|d| (d.get_i32("k").unwrap(), d.get_i32("n").unwrap(), d.get_i32("seq").unwrap()))
            .collect();
        let want: Vec<(i32, i32, i32)> = (0..10).map(|k| (k, if k == 3 { 37 } else { 32 }, k + 1)).collect();
        assert_eq!(got, want);
        assert!(runs.is_done());
        // 32 spills of 10 items, and two level-1 merges of 10 folded items
        // each (not 160): every item is the same size.
        let item = doc::bson_bytes::encoded_len(&doc! { "k": 0, "n": 1, "seq": 1 }) as u64;
        assert_eq!(before, (32 * 10 + 2 * 10) * item);
    }

    #[test]
    fn a_truncated_run_is_an_error_not_a_panic() {
        let mut bytes = Vec::new();
        doc! { "k": 1 }.write_to(&mut bytes).unwrap();
        bytes.truncate(bytes.len() - 2);
        assert!(read_document(&mut &bytes[..]).is_err());
        assert!(read_document(&mut &[][..]).unwrap().is_none());
        assert!(read_document(&mut &[1u8, 0, 0, 0][..]).is_err(), "a length below 5");
    }
}
