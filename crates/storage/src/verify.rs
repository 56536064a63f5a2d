//! Offline consistency check of a data directory: every block checksum, key
//! order inside pages, parent/child key ranges, uniform leaf depth, that the
//! extent lists neither overlap nor leak, and the journal's records. A
//! write-optimized table's manifest is walked run by run: each run is a
//! B+tree checked as above, its values tagged, the oldest without
//! tombstones (`runs.rs` invariants 1 and 4).
//!
//! Reads only; never modifies the directory. Reports problems as text so
//! the `arbordb verify` tool can name them.

use crate::block::{read_block_at, BlockAddr, BlockKind, ExtentList};
use crate::engine::{decode_journal_payload, table_file_name, RootRecord, TableMeta, JOURNAL_DIR, METADATA_FILE};
use crate::error::Result;
use crate::journal;
use crate::limits::{block_alloc_unit_bytes, tree_depth_max};
use crate::page::{decode_cells, decode_manifest, Cell, CellValue};
use crate::runs::untag;
use crate::vfs::{Vfs, VfsFile};
use std::path::Path;
use std::sync::Arc;

/// Progress of a verification, reported as it goes.
#[derive(Debug, Clone)]
pub struct Progress<'a> {
    pub file: &'a str,
    pub pages_checked: u64,
    pub bytes_checked: u64,
    pub file_bytes: u64,
}

#[derive(Debug, Default)]
pub struct VerifyReport {
    pub tables: u64,
    pub pages: u64,
    pub overflow_blocks: u64,
    pub entries: u64,
    pub bytes_checked: u64,
    pub journal_records: u64,
    /// Things that are wrong. Empty means the directory is consistent.
    pub problems: Vec<String>,
    /// Things worth knowing that are not wrong (e.g. a torn journal tail).
    pub notes: Vec<String>,
}

struct FileCheck<'a> {
    file: Arc<dyn VfsFile>,
    name: String,
    file_bytes: u64,
    refs: Vec<(u64, u64, String)>,
    report: &'a mut VerifyReport,
    progress: &'a mut dyn FnMut(Progress),
    pages: u64,
    bytes: u64,
    leaf_depth: Option<usize>,
    /// Walking a run: values are tagged; `true` in the oldest run.
    run: Option<bool>,
}

impl FileCheck<'_> {
    fn problem(&mut self, at: u64, what: String) {
        self.report.problems.push(format!("{} offset {at}: {what}", self.name));
    }

    fn read(&mut self, addr: BlockAddr, what: &str) -> Option<(BlockKind, Vec<u8>)> {
        self.refs.push((addr.offset, addr.size as u64, what.to_string()));
        self.bytes += addr.size as u64;
        match read_block_at(&*self.file, addr) {
            Ok(r) => Some(r),
            Err(e) => {
                self.problem(addr.offset, format!("{what}: {e}"));
                None
            }
        }
    }

    /// Walk the subtree at `addr`; every key must lie in `[lo, hi)`.
    fn walk(&mut self, addr: BlockAddr, lo: &[u8], hi: Option<&[u8]>, depth: usize) -> u64 {
        if depth > tree_depth_max {
            self.problem(addr.offset, "tree deeper than the depth limit".into());
            return 0;
        }
        let Some((kind, payload)) = self.read(addr, "page") else {
            return 0;
        };
        if kind == BlockKind::Manifest && depth == 0 && self.run.is_none() {
            return self.walk_runs(addr, &payload);
        }
        self.pages += 1;
        self.report.pages += 1;
        if self.pages.is_multiple_of(1024) {
            (self.progress)(Progress {
                file: &self.name,
                pages_checked: self.pages,
                bytes_checked: self.bytes,
                file_bytes: self.file_bytes,
            });
        }
        let cells = match decode_cells(kind, &payload) {
            Ok(c) => c,
            Err(e) => {
                self.problem(addr.offset, format!("malformed {kind:?} page: {e}"));
                return 0;
            }
        };
        let in_range = |k: &[u8]| k >= lo && hi.is_none_or(|h| k < h);
        let mut entries = 0;
        match kind {
            BlockKind::Leaf => {
                match self.leaf_depth {
                    None => self.leaf_depth = Some(depth),
                    Some(d) if d != depth => self.problem(addr.offset, format!("leaf at depth {depth}, others at {d}")),
                    _ => {}
                }
                let mut prev: Option<Vec<u8>> = None;
                for cell in cells {
                    let Cell::Leaf { key, value, .. } = cell else {
                        continue;
                    };
                    if prev.as_ref().is_some_and(|p| *p >= key) {
                        self.problem(addr.offset, format!("leaf keys out of order at {}", printable(&key)));
                    }
                    if !in_range(&key) {
                        self.problem(
                            addr.offset,
                            format!("key {} outside the range its parent gives", printable(&key)),
                        );
                    }
                    match value {
                        CellValue::Inline(v) => self.check_tag(addr, &key, &v),
                        CellValue::Overflow { addr: oa, len } => {
                            self.report.overflow_blocks += 1;
                            if let Some((k, data)) = self.read(oa, "overflow block") {
                                if k != BlockKind::Overflow || data.len() != len as usize {
                                    self.problem(
                                        oa.offset,
                                        format!(
                                            "expected an overflow block of {len} bytes, found {k:?} of {}",
                                            data.len()
                                        ),
                                    );
                                }
                                self.check_tag(addr, &key, &data);
                            }
                        }
                    }
                    entries += 1;
                    prev = Some(key);
                }
            }
            _ => {
                let children: Vec<(Vec<u8>, BlockAddr)> = cells
                    .into_iter()
                    .filter_map(|c| if let Cell::Internal { key, child } = c { Some((key, child)) } else { None })
                    .collect();
                for (i, (key, _)) in children.iter().enumerate().skip(1) {
                    if !in_range(key) {
                        self.problem(addr.offset, format!("separator {} outside the page's range", printable(key)));
                    }
                    if key <= &children[i - 1].0 && i > 1 {
                        self.problem(addr.offset, format!("separators out of order at {}", printable(key)));
                    }
                }
                for i in 0..children.len() {
                    let child_lo: Vec<u8> = if i == 0 { lo.to_vec() } else { children[i].0.clone() };
                    let child_hi: Option<Vec<u8>> = children.get(i + 1).map(|c| c.0.clone()).or(hi.map(|h| h.to_vec()));
                    entries += self.walk(children[i].1, &child_lo, child_hi.as_deref(), depth + 1);
                }
            }
        }
        entries
    }

    /// A write-optimized table: each run of the manifest at `addr` is a tree.
    fn walk_runs(&mut self, addr: BlockAddr, payload: &[u8]) -> u64 {
        let m = match decode_manifest(payload) {
            Ok(m) => m,
            Err(e) => {
                self.problem(addr.offset, format!("malformed manifest: {e}"));
                return 0;
            }
        };
        let mut entries = 0;
        for (i, (run, _)) in m.live.iter().enumerate() {
            self.leaf_depth = None;
            self.run = Some(i + 1 == m.live.len());
            entries += self.walk(*run, &[], None, 0);
        }
        // Runs merges replaced: still allocated, their entries not the table's.
        for (run, _) in &m.retired {
            self.leaf_depth = None;
            self.run = Some(false);
            self.walk(*run, &[], None, 0);
        }
        self.run = None;
        entries
    }

    /// In a run, a value's tag (`runs.rs` invariants 1 and 4).
    fn check_tag(&mut self, at: BlockAddr, key: &[u8], value: &[u8]) {
        let Some(oldest) = self.run else { return };
        match untag(value) {
            Err(e) => self.problem(at.offset, format!("key {}: {e}", printable(key))),
            Ok(None) if oldest => {
                self.problem(at.offset, format!("a tombstone for {} in the oldest run", printable(key)))
            }
            Ok(_) => {}
        }
    }

    /// Compare the blocks reached with the file's alloc list.
    fn check_extents(&mut self, alloc: &ExtentList) {
        let mut refs = std::mem::take(&mut self.refs);
        refs.sort();
        let mut covered = ExtentList::default();
        let mut prev_end = block_alloc_unit_bytes;
        let mut prev_what = String::from("file header");
        for (off, len, what) in &refs {
            if *off < prev_end {
                self.problem(*off, format!("{what} overlaps {prev_what} (ends at {prev_end})"));
            } else {
                covered.insert(*off, *len);
            }
            if !alloc.contains(*off, *len) {
                self.problem(*off, format!("{what} of {len} bytes is not in the allocated extent list"));
            }
            prev_end = prev_end.max(off + len);
            prev_what.clone_from(what);
        }
        for (off, len) in alloc.iter() {
            let mut at = off;
            while at < off + len {
                let leaked_to = covered.iter().find(|(o, l)| *o <= at && at < o + l).map(|(o, l)| o + l);
                match leaked_to {
                    Some(end) => at = end,
                    None => {
                        let next = covered.iter().map(|(o, _)| o).find(|o| *o > at).unwrap_or(off + len).min(off + len);
                        self.problem(at, format!("leak: {} allocated bytes that nothing references", next - at));
                        at = next;
                    }
                }
            }
            if off + len > self.file_bytes {
                self.problem(
                    off,
                    format!("allocated extent ends at {} past the file end {}", off + len, self.file_bytes),
                );
            }
        }
    }
}

fn printable(b: &[u8]) -> String {
    b.iter()
        .map(|&c| if c.is_ascii_graphic() || c == b' ' { (c as char).to_string() } else { format!("\\x{c:02x}") })
        .collect()
}

/// Check one table file from its checkpoint; returns its entries.
fn verify_file(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    root: BlockAddr,
    extents: BlockAddr,
    report: &mut VerifyReport,
    progress: &mut dyn FnMut(Progress),
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let path = dir.join(name);
    let file = match vfs.open(&path, false) {
        Ok(f) => f,
        Err(e) => {
            report.problems.push(format!("{name}: cannot open: {e}"));
            return None;
        }
    };
    let file_bytes = file.len().unwrap_or(0);
    let mut fc = FileCheck {
        file,
        name: name.to_string(),
        file_bytes,
        refs: Vec::new(),
        report,
        progress,
        pages: 0,
        bytes: 0,
        leaf_depth: None,
        run: None,
    };
    let alloc = match fc.read(extents, "extent list") {
        Some((BlockKind::ExtentList, payload)) => match ExtentList::decode(&payload) {
            Some(l) => l,
            None => {
                fc.problem(extents.offset, "malformed extent list".into());
                return None;
            }
        },
        Some((k, _)) => {
            fc.problem(extents.offset, format!("expected an extent list, found {k:?}"));
            return None;
        }
        None => return None,
    };
    let entries = fc.walk(root, &[], None, 0);
    fc.report.entries += entries;
    fc.check_extents(&alloc);
    fc.report.bytes_checked += fc.bytes;
    (fc.progress)(Progress { file: name, pages_checked: fc.pages, bytes_checked: fc.bytes, file_bytes });
    // The metadata table's entries are needed by the caller.
    if name == METADATA_FILE {
        let mut out = Vec::new();
        collect_leaf_entries(&*fc.file, root, &mut out, 0);
        return Some(out);
    }
    Some(Vec::new())
}

fn collect_leaf_entries(file: &dyn VfsFile, addr: BlockAddr, out: &mut Vec<(Vec<u8>, Vec<u8>)>, depth: usize) {
    if depth > tree_depth_max {
        return;
    }
    let Ok((kind, payload)) = read_block_at(file, addr) else {
        return;
    };
    let Ok(cells) = decode_cells(kind, &payload) else {
        return;
    };
    for cell in cells {
        match cell {
            Cell::Leaf { key, value: CellValue::Inline(v), .. } => out.push((key, v)),
            Cell::Leaf { .. } => {}
            Cell::Internal { child, .. } => collect_leaf_entries(file, child, out, depth + 1),
        }
    }
}

/// Verify the data directory `dir`.
pub fn verify_dir(vfs: &dyn Vfs, dir: &Path, progress: &mut dyn FnMut(Progress)) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let root = match RootRecord::read(vfs, dir) {
        Ok(r) => r,
        Err(e) => {
            report.problems.push(format!("root file: {e}"));
            return Ok(report);
        }
    };
    let Some(meta_entries) =
        verify_file(vfs, dir, METADATA_FILE, root.metadata.root, root.metadata.extents, &mut report, progress)
    else {
        return Ok(report);
    };
    for (name, value) in meta_entries {
        let name = String::from_utf8_lossy(&name).into_owned();
        let Some(meta) = TableMeta::decode(&value) else {
            report.problems.push(format!("{METADATA_FILE}: bad entry for table {name:?}"));
            continue;
        };
        if meta.id >= root.next_table_id {
            report.problems.push(format!(
                "table {name:?} has id {} but the root file's next id is {}",
                meta.id, root.next_table_id
            ));
        }
        report.tables += 1;
        verify_file(
            vfs,
            dir,
            &table_file_name(meta.id),
            meta.checkpoint.root,
            meta.checkpoint.extents,
            &mut report,
            progress,
        );
    }
    verify_journal(vfs, dir, root.ckpt_seq, &mut report);
    Ok(report)
}

fn verify_journal(vfs: &dyn Vfs, dir: &Path, from_seq: u64, report: &mut VerifyReport) {
    let jdir = dir.join(JOURNAL_DIR);
    // Replay into nothing, on a read-only view: replay cuts torn tails, so
    // run it over a copy of the journal held in memory.
    let mem = crate::vfs::ReadOnlyVfs::new(vfs);
    let mut records = 0u64;
    let mut bad_payloads = Vec::new();
    match journal::replay(&mem, &jdir, from_seq, &mut |seq, payload| {
        records += 1;
        if decode_journal_payload(payload).is_none() {
            bad_payloads.push(seq);
        }
        Ok(())
    }) {
        Ok(summary) => {
            if let Some((path, off)) = summary.torn_tail {
                report.notes.push(format!(
                    "journal {} ends in a torn record at offset {off} (normal after a crash; recovery cuts it)",
                    path.display()
                ));
            }
        }
        Err(e) => report.problems.push(format!("journal: {e}")),
    }
    for seq in bad_payloads {
        report.problems.push(format!("journal record {seq} cannot be decoded"));
    }
    report.journal_records = records;
}
