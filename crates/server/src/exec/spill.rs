//! External sorting for `find`: a blocking sort that outgrows its memory
//! limit (`internalQueryMaxBlockingSortMemoryUsageBytes`) writes its buffer
//! out as a sorted run and starts again; the cursor then merges the runs
//! as it is read (`query::external`). Runs live in anonymous files under
//! `<dbpath>/_tmp`.
//!
//! A hit in a run: record id (u64 LE), matched array position (i64 LE, -1
//! for none), the document's BSON.

use crate::error::CommandError;
use crate::exec::scan::Hit;
use doc::stored::Stored;
use query::external::{read_document, Runs, Spill};
use query::Sort;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

fn spill_error(e: impl std::fmt::Display) -> CommandError {
    CommandError::internal_error(format!("a sort could not spill to disk: {e}"))
}

impl Spill for Hit {
    fn write_to(&self, w: &mut dyn Write) -> io::Result<()> {
        w.write_all(&self.rid.to_le_bytes())?;
        w.write_all(&self.pos.map_or(-1, |p| p as i64).to_le_bytes())?;
        self.sorted().write_to(w)
    }

    fn read_from(r: &mut dyn Read) -> io::Result<Option<Hit>> {
        let mut head = [0u8; 16];
        match r.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let rid = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let pos = i64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
        let doc = read_document(r)?.ok_or_else(|| io::Error::other("a run ends inside a hit"))?;
        Ok(Some(Hit { rid, doc: Stored::owned(doc), pos: usize::try_from(pos).ok() }))
    }
}

/// A find's sorted hits, gathered in runs; merged in sort order once
/// gathering ends.
pub(crate) struct Spilled {
    runs: Runs<Hit>,
}

impl Spilled {
    pub fn new(dir: &Path, sort: Sort) -> Spilled {
        let compare = Arc::new(move |a: &Hit, b: &Hit| sort.compare(a.sorted(), b.sorted()));
        Spilled { runs: Runs::new(dir.to_path_buf(), compare) }
    }

    /// Sort `hits` and write them out as a run (keeping the first `keep`).
    pub fn spill(&mut self, hits: &mut Vec<Hit>, keep: Option<usize>) -> Result<(), CommandError> {
        self.runs.spill(hits, keep).map_err(spill_error)
    }

    /// End gathering with the hits still in memory (any order) as the last
    /// run, and skip the first `skip` hits of the merge.
    pub fn finish(&mut self, rest: Vec<Hit>, skip: usize) -> Result<(), CommandError> {
        self.runs.finish(rest).map_err(spill_error)?;
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
        self.runs.pop().map_err(spill_error)
    }

    /// Whether every hit was returned.
    pub fn is_done(&self) -> bool {
        self.runs.is_done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn runs_merge_in_sort_order_with_skip() {
        let dir = tempfile::tempdir().unwrap();
        let sort = Sort::parse(&doc! { "k": 1 }).unwrap();
        let mut s = Spilled::new(dir.path(), sort);
        let hit =
            |rid: u64, k: i32| Hit { rid, doc: doc! { "k": k, "pad": "x".repeat(k as usize % 7) }.into(), pos: None };
        let mut all: Vec<(i32, u64, Option<usize>)> = Vec::new();
        let mut rid = 0;
        for run in 0..4 {
            let mut hits: Vec<Hit> = (0..50)
                .map(|i| {
                    rid += 1;
                    let k = (i * 37 + run * 11) % 60;
                    all.push((k, rid, (k % 3 == 0).then_some(k as usize)));
                    Hit { pos: (k % 3 == 0).then_some(k as usize), ..hit(rid, k) }
                })
                .collect();
            s.spill(&mut hits, None).unwrap();
            assert!(hits.is_empty());
        }
        let rest: Vec<Hit> = (0..10)
            .map(|i| {
                rid += 1;
                all.push((i * 5, rid, Some(3)));
                Hit { pos: Some(3), ..hit(rid, i * 5) }
            })
            .collect();
        s.finish(rest, 7).unwrap();
        all.sort(); // by key, then record id: scan order among equals
        let mut got = Vec::new();
        while let Some(h) = s.next().unwrap() {
            got.push((h.sorted().get_i32("k").unwrap(), h.rid, h.pos));
        }
        assert!(s.is_done());
        assert_eq!(got, all[7..].to_vec());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
