//! External sorting: a blocking sort that outgrows its memory limit
//! (`internalQueryMaxBlockingSortMemoryUsageBytes`) writes its buffer out
//! as a sorted run and starts again; the cursor then merges the runs as
//! it is read. Runs live in anonymous files under `<dbpath>/_tmp`
//! (unlinked when created), so they vanish when the cursor is dropped or
//! the process dies.
//!
//! A run is a sequence of hits: record id (u64 LE), matched array position
//! (i64 LE, -1 for none), the document's BSON.

use crate::error::CommandError;
use crate::read::Hit;
use bson::Document;
use query::Sort;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

fn spill_error(e: impl std::fmt::Display) -> CommandError {
    CommandError::internal_error(format!("a sort could not spill to disk: {e}"))
}

/// One sorted run being read.
enum Run {
    File(BufReader<File>),
    Memory(std::vec::IntoIter<Hit>),
}

impl Run {
    fn next(&mut self) -> Result<Option<Hit>, CommandError> {
        match self {
            Run::Memory(hits) => Ok(hits.next()),
            Run::File(r) => read_hit(r).map_err(spill_error),
        }
    }
}

fn read_hit(r: &mut impl Read) -> io::Result<Option<Hit>> {
    let mut head = [0u8; 20];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let rid = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let pos = i64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    let len = i32::from_le_bytes(head[16..].try_into().expect("4 bytes"));
    let len = usize::try_from(len).ok().filter(|&l| l >= 5).ok_or_else(|| io::Error::other("bad document length"))?;
    let mut bytes = vec![0u8; len];
    bytes[..4].copy_from_slice(&head[16..]);
    r.read_exact(&mut bytes[4..])?;
    let doc = Document::from_reader(&bytes[..]).map_err(io::Error::other)?;
    Ok(Some(Hit { rid, doc, pos: usize::try_from(pos).ok() }))
}

/// A new anonymous file under `dir` to write a run to.
fn new_run(dir: &Path) -> io::Result<BufWriter<File>> {
    std::fs::create_dir_all(dir)?;
    Ok(BufWriter::new(tempfile::tempfile_in(dir)?))
}

fn write_hit(w: &mut impl Write, hit: &Hit) -> io::Result<()> {
    w.write_all(&hit.rid.to_le_bytes())?;
    w.write_all(&hit.pos.map_or(-1, |p| p as i64).to_le_bytes())?;
    hit.doc.to_writer(w).map_err(io::Error::other)
}

/// The written run, ready to be read from its start.
fn finish_run(w: BufWriter<File>) -> io::Result<BufReader<File>> {
    let mut file = w.into_inner().map_err(|e| e.into_error())?;
    file.rewind()?;
    Ok(BufReader::new(file))
}

/// Runs kept apart at most; past this they are merged into one, so a
/// sort holds few files and merges in few comparisons per document.
const RUNS_MAX: usize = 32;

/// A blocking sort's hits, gathered in runs; merged in sort order once
/// gathering ends.
pub(crate) struct Spilled {
    sort: Sort,
    runs: Vec<Run>,
    /// Each run's next hit (`None`: the run is done).
    heads: Vec<Option<Hit>>,
}

impl Spilled {
    pub fn new(sort: Sort) -> Spilled {
        Spilled { sort, runs: Vec::new(), heads: Vec::new() }
    }

    /// Sort `hits` and write them out as a run (keeping the first `keep`).
    pub fn spill(&mut self, dir: &Path, hits: &mut Vec<Hit>, keep: Option<usize>) -> Result<(), CommandError> {
        hits.sort_by(|a, b| self.sort.compare(&a.doc, &b.doc));
        if let Some(k) = keep {
            hits.truncate(k);
        }
        let mut w = new_run(dir).map_err(spill_error)?;
        for hit in hits.iter() {
            write_hit(&mut w, hit).map_err(spill_error)?;
        }
        hits.clear();
        self.runs.push(Run::File(finish_run(w).map_err(spill_error)?));
        if self.runs.len() >= RUNS_MAX {
            self.merge_runs(dir, keep)?;
        }
        Ok(())
    }

    /// Merge every run into one (its first `keep` hits, if limited).
    fn merge_runs(&mut self, dir: &Path, keep: Option<usize>) -> Result<(), CommandError> {
        self.heads = self.runs.iter_mut().map(Run::next).collect::<Result<_, _>>()?;
        let mut w = new_run(dir).map_err(spill_error)?;
        let mut written = 0;
        while keep.is_none_or(|k| written < k) {
            let Some(hit) = self.next()? else { break };
            write_hit(&mut w, &hit).map_err(spill_error)?;
            written += 1;
        }
        self.heads.clear();
        self.runs = vec![Run::File(finish_run(w).map_err(spill_error)?)];
        Ok(())
    }

    /// End gathering with the hits still in memory (any order) as the last
    /// run, and skip the first `skip` hits of the merge.
    pub fn finish(&mut self, mut rest: Vec<Hit>, skip: usize) -> Result<(), CommandError> {
        rest.sort_by(|a, b| self.sort.compare(&a.doc, &b.doc));
        self.runs.push(Run::Memory(rest.into_iter()));
        self.heads = self.runs.iter_mut().map(Run::next).collect::<Result<_, _>>()?;
        for _ in 0..skip {
            if self.next()?.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// The next hit in sort order; among equal keys, the earlier run's
    /// (runs are in scan order).
    pub fn next(&mut self) -> Result<Option<Hit>, CommandError> {
        let mut best: Option<usize> = None;
        for (i, head) in self.heads.iter().enumerate() {
            let Some(h) = head else { continue };
            let better = match best {
                None => true,
                Some(b) => {
                    let current = self.heads[b].as_ref().expect("best has a head");
                    self.sort.compare(&h.doc, &current.doc).is_lt()
                }
            };
            if better {
                best = Some(i);
            }
        }
        let Some(b) = best else { return Ok(None) };
        let next = self.runs[b].next()?;
        Ok(std::mem::replace(&mut self.heads[b], next))
    }

    /// Whether every hit was returned.
    pub fn is_done(&self) -> bool {
        self.heads.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn many_runs_are_merged_as_they_come() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spilled::new(Sort::parse(&doc! { "k": -1 }).unwrap());
        let mut want = Vec::new();
        for run in 0..(RUNS_MAX * 2 + 3) as i32 {
            let mut hits: Vec<Hit> = (0..5)
                .map(|i| Hit { rid: (run * 5 + i) as u64, doc: doc! { "k": (run * 7 + i * 13) % 50 }, pos: None })
                .collect();
            want.extend(hits.iter().map(|h| h.doc.get_i32("k").unwrap()));
            s.spill(dir.path(), &mut hits, None).unwrap();
            assert!(s.runs.len() < RUNS_MAX);
        }
        s.finish(Vec::new(), 0).unwrap();
        want.sort_by(|a, b| b.cmp(a));
        let mut got = Vec::new();
        while let Some(h) = s.next().unwrap() {
            got.push(h.doc.get_i32("k").unwrap());
        }
        assert_eq!(got, want);
    }

    #[test]
    fn runs_merge_in_sort_order_with_skip() {
        let dir = tempfile::tempdir().unwrap();
        let sort = Sort::parse(&doc! { "k": 1 }).unwrap();
        let mut s = Spilled::new(sort);
        let hit = |rid: u64, k: i32| Hit { rid, doc: doc! { "k": k, "pad": "x".repeat(k as usize % 7) }, pos: None };
        let mut all: Vec<(i32, u64)> = Vec::new();
        let mut rid = 0;
        for run in 0..4 {
            let mut hits: Vec<Hit> = (0..50)
                .map(|i| {
                    rid += 1;
                    let k = (i * 37 + run * 11) % 60;
                    all.push((k, rid));
                    hit(rid, k)
                })
                .collect();
            s.spill(dir.path(), &mut hits, None).unwrap();
            assert!(hits.is_empty());
        }
        let rest: Vec<Hit> = (0..10)
            .map(|i| {
                rid += 1;
                all.push((i * 5, rid));
                Hit { pos: Some(3), ..hit(rid, i * 5) }
            })
            .collect();
        s.finish(rest, 7).unwrap();
        all.sort(); // by key, then record id: scan order among equals
        let mut got = Vec::new();
        while let Some(h) = s.next().unwrap() {
            got.push((h.doc.get_i32("k").unwrap(), h.rid));
        }
        assert!(s.is_done());
        assert_eq!(got, all[7..].to_vec());
        // Spill files are anonymous: nothing is left in the directory.
        assert_eq!(s.runs.len(), 5);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
