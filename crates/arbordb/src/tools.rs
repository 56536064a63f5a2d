//! `arbordb verify` and `arbordb dump`: look inside a data directory.
//! Verify checks everything the engine relies on, without changing the
//! directory; then (unless `--storage-only`) it opens the directory as
//! `arbordb serve` would (recovering the journal, which the directory lock
//! allows only while no server runs on it) and checks every index against
//! its collection's documents, as the `validate` command does. It exits
//! non-zero naming each problem. Dump prints tables, pages and journal
//! records the way `wt dump` and a binary page decoder do.

use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use storage::block::{check_block, BlockAddr, BlockKind};
use storage::engine::{decode_journal_payload, table_file_name, JournalOp, RootRecord, TableMeta, METADATA_FILE};
use storage::page::{decode_cells, Cell, CellValue};
use storage::vfs::{OsVfs, Vfs, VfsFile};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The data directory.
    #[arg(long, default_value = "data")]
    pub dbpath: PathBuf,
    /// Check the storage files only (do not open the directory to check
    /// the indexes against the documents).
    #[arg(long)]
    pub storage_only: bool,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// The data directory.
    #[arg(long, default_value = "data")]
    pub dbpath: PathBuf,
    /// Dump every page of this table (`_metadata` for the metadata table).
    #[arg(long)]
    pub table: Option<String>,
    /// Decode only the block at this byte offset (of --table's file).
    #[arg(long)]
    pub page: Option<u64>,
    /// Print the journal's records.
    #[arg(long)]
    pub journal: bool,
    /// Bytes of each key and value to show (0 = all).
    #[arg(long, default_value_t = 64)]
    pub width: usize,
    /// With --table: decode the document layer's keys and values (record
    /// ids, documents and catalog entries as Extended JSON, `_id` index
    /// entries as key bytes and record id), as bsondump would.
    #[arg(long, requires = "table")]
    pub bson: bool,
}

/// How `--bson` reads a table's cells, by the table's name (see
/// `doc::catalog`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Raw bytes.
    Raw,
    /// `_catalog`: namespace -> BSON entry.
    Catalog,
    /// `c/...`: record id -> BSON document.
    Records,
    /// `i/...`: KeyString -> record id.
    Index,
}

impl Layout {
    fn of(table: &str, bson: bool) -> Layout {
        match table {
            _ if !bson => Layout::Raw,
            "_catalog" => Layout::Catalog,
            t if t.starts_with("c/") => Layout::Records,
            t if t.starts_with("i/") => Layout::Index,
            _ => Layout::Raw,
        }
    }
}

/// A document as one line of relaxed Extended JSON, or why it is not one.
fn ext_json(bytes: &[u8]) -> String {
    match doc::bson_bytes::decode(bytes) {
        Ok(d) => bson::Bson::Document(d).into_relaxed_extjson().to_string(),
        Err(e) => format!("<not BSON: {e}>"),
    }
}

fn record_id(bytes: &[u8]) -> String {
    match <[u8; 8]>::try_from(bytes) {
        Ok(b) => format!("recordId {}", u64::from_be_bytes(b)),
        Err(_) => format!("<not a record id: {} bytes>", bytes.len()),
    }
}

fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

pub fn verify(args: VerifyArgs) -> Result<bool, String> {
    if !args.dbpath.join(storage::engine::ROOT_FILE).exists() {
        return Err(format!(
            "{} is not an ArborDB data directory (no {})",
            args.dbpath.display(),
            storage::engine::ROOT_FILE
        ));
    }
    let started = Instant::now();
    let mut last = Instant::now();
    let mut progress = |p: storage::verify::Progress| {
        if last.elapsed() >= Duration::from_millis(500) || p.bytes_checked >= p.file_bytes {
            let pct = if p.file_bytes > 0 { 100.0 * p.bytes_checked as f64 / p.file_bytes as f64 } else { 100.0 };
            eprintln!(
                "verify: {} {} pages, {} of {} ({pct:.0}%)",
                p.file,
                p.pages_checked,
                fmt_bytes(p.bytes_checked),
                fmt_bytes(p.file_bytes)
            );
            last = Instant::now();
        }
    };
    let report = storage::verify::verify_dir(&OsVfs, &args.dbpath, &mut progress).map_err(|e| e.to_string())?;
    for note in &report.notes {
        println!("note: {note}");
    }
    for problem in &report.problems {
        println!("PROBLEM: {problem}");
    }
    println!(
        "verify: {} tables, {} pages, {} overflow blocks, {} entries, {} checked, {} journal records after the checkpoint, {:.2}s: {}",
        report.tables,
        report.pages,
        report.overflow_blocks,
        report.entries,
        fmt_bytes(report.bytes_checked),
        report.journal_records,
        started.elapsed().as_secs_f64(),
        if report.problems.is_empty() { "OK".to_string() } else { format!("{} PROBLEMS", report.problems.len()) }
    );
    if !report.problems.is_empty() || args.storage_only {
        return Ok(report.problems.is_empty());
    }
    let problems = verify_indexes(&args.dbpath)?;
    for problem in &problems {
        println!("PROBLEM: {problem}");
    }
    Ok(problems.is_empty())
}

/// Every index of every collection against its documents (each
/// document's keys present, no entry no document gives): the problems.
fn verify_indexes(dbpath: &Path) -> Result<Vec<String>, String> {
    // No background merges: verify reads the files, it does not rewrite them.
    let config =
        storage::Config { checkpoint_interval: None, merge_runs_in_background: false, ..storage::Config::default() };
    let engine = storage::Engine::open(dbpath, config).map_err(|e| format!("open {}: {e}", dbpath.display()))?;
    let catalog = doc::catalog::Catalog::open_with(engine.clone(), query::hooks::hooks()).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    let (mut indexes, mut keys) = (0u64, 0u64);
    let started = Instant::now();
    for db in catalog.databases() {
        for coll in catalog.list(&db).into_iter().filter(|c| c.view_on().is_none()) {
            let mut checks = vec![("_id_".to_string(), coll.check_id_index(&engine))];
            for ix in coll.indexes().into_iter().filter(|ix| ix.is_ready()) {
                checks.push((ix.spec.name.clone(), coll.check_index(&engine, &ix)));
            }
            for (name, check) in checks {
                let check = check.map_err(|e| format!("{}: index {name}: {e}", coll.ns))?;
                indexes += 1;
                keys += check.keys;
                eprintln!("verify: {} index {name}: {} keys", coll.ns, check.keys);
                if let Some((values, rid)) = check.missing.first() {
                    problems.push(format!(
                        "{} index {name}: {} keys missing (the first {values:?} of recordId {rid})",
                        coll.ns,
                        check.missing.len()
                    ));
                }
                if let Some((values, rid)) = check.extra.first() {
                    problems.push(format!(
                        "{} index {name}: {} entries no document gives (the first {values:?} of recordId {rid})",
                        coll.ns,
                        check.extra.len()
                    ));
                }
            }
        }
    }
    println!(
        "verify: {indexes} indexes, {keys} keys against their documents, {:.2}s: {}",
        started.elapsed().as_secs_f64(),
        if problems.is_empty() { "OK".to_string() } else { format!("{} PROBLEMS", problems.len()) }
    );
    Ok(problems)
}

/// Hex and printable forms of `b`, cut to `width` bytes.
fn show(b: &[u8], width: usize) -> String {
    let cut = if width == 0 { b.len() } else { b.len().min(width) };
    let hex: String = b[..cut].iter().map(|c| format!("{c:02x}")).collect();
    let text: String = b[..cut].iter().map(|&c| if (0x20..0x7f).contains(&c) { c as char } else { '.' }).collect();
    let more = if cut < b.len() { format!(" ... ({} bytes)", b.len()) } else { String::new() };
    format!("{hex} \"{text}\"{more}")
}

struct DumpCtx<'a> {
    out: &'a mut dyn Write,
    width: usize,
    layout: Layout,
    /// Inside a write-optimized table's run: values carry a put or
    /// tombstone tag (`storage::runs`).
    in_run: bool,
}

fn read_block(file: &dyn VfsFile, addr: BlockAddr) -> Result<(BlockKind, Vec<u8>), String> {
    storage::block::read_block_at(file, addr).map_err(|e| e.to_string())
}

fn dump_page(
    ctx: &mut DumpCtx,
    file: &dyn VfsFile,
    addr: BlockAddr,
    depth: usize,
    recurse: bool,
) -> Result<(), String> {
    let w = ctx.width;
    let (kind, payload) = match read_block(file, addr) {
        Ok(r) => r,
        Err(e) => {
            writeln!(ctx.out, "{:indent$}block at offset {}: ERROR {e}", "", addr.offset, indent = depth * 2)
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
    };
    let ind = "  ".repeat(depth);
    if kind == BlockKind::Manifest {
        return dump_manifest(ctx, file, addr, &payload, depth);
    }
    let cells = decode_cells(kind, &payload).map_err(|e| format!("page at offset {}: {e}", addr.offset))?;
    writeln!(
        ctx.out,
        "{ind}page offset={} size={} checksum={:#010x} type={kind:?} entries={} payload={} bytes",
        addr.offset,
        addr.size,
        addr.checksum,
        cells.len(),
        payload.len()
    )
    .map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        let line = match cell {
            Cell::Leaf { prefix, key, value } if ctx.layout != Layout::Raw => {
                let mut bytes = match value {
                    CellValue::Inline(v) => v.clone(),
                    CellValue::Overflow { addr, .. } => read_block(file, *addr)?.1,
                };
                if ctx.in_run {
                    match storage::runs::untag(&bytes) {
                        Ok(Some(v)) => bytes = v.to_vec(),
                        Ok(None) => {
                            let k = if ctx.layout == Layout::Index { show(key, 0) } else { show(key, w) };
                            writeln!(ctx.out, "{ind}  [{i}] key prefix={prefix} {k}\n{ind}      tombstone")
                                .map_err(|e| e.to_string())?;
                            continue;
                        }
                        Err(e) => return Err(format!("page at offset {}: {e}", addr.offset)),
                    }
                }
                let json = |b: &[u8]| {
                    let j = ext_json(b);
                    // --width bytes of raw output are about 16 characters of JSON.
                    match j.char_indices().nth(16 * w) {
                        Some((cut, _)) if w > 0 => format!("{} ... ({} bytes)", &j[..cut], b.len()),
                        _ => j,
                    }
                };
                let (k, v) = match ctx.layout {
                    Layout::Catalog => (format!("{:?}", String::from_utf8_lossy(key)), json(&bytes)),
                    Layout::Records => (record_id(key), json(&bytes)),
                    _ => (format!("KeyString {}", show(key, 0)), record_id(&bytes)),
                };
                format!("{ind}  [{i}] key prefix={prefix} {k}\n{ind}      {v}")
            }
            Cell::Leaf { prefix, key, value } => {
                let v = match value {
                    CellValue::Inline(v) => format!("value inline {} bytes {}", v.len(), show(v, w)),
                    CellValue::Overflow { addr, len } => format!(
                        "value overflow {len} bytes at offset={} size={} checksum={:#010x}",
                        addr.offset, addr.size, addr.checksum
                    ),
                };
                format!("{ind}  [{i}] key prefix={prefix} {}\n{ind}      {v}", show(key, w))
            }
            Cell::Internal { key, child } => {
                children.push(*child);
                format!(
                    "{ind}  [{i}] key {} -> child offset={} size={} checksum={:#010x}",
                    show(key, w),
                    child.offset,
                    child.size,
                    child.checksum
                )
            }
        };
        writeln!(ctx.out, "{line}").map_err(|e| e.to_string())?;
    }
    if recurse {
        for child in children {
            dump_page(ctx, file, child, depth + 1, true)?;
        }
    }
    Ok(())
}

/// A write-optimized table's manifest: its runs, newest first, each a tree.
fn dump_manifest(
    ctx: &mut DumpCtx,
    file: &dyn VfsFile,
    addr: BlockAddr,
    payload: &[u8],
    depth: usize,
) -> Result<(), String> {
    let m = storage::page::decode_manifest(payload).map_err(|e| format!("manifest at offset {}: {e}", addr.offset))?;
    let ind = "  ".repeat(depth);
    writeln!(
        ctx.out,
        "{ind}manifest offset={} size={} checksum={:#010x} runs={} (newest first) retired={}",
        addr.offset,
        addr.size,
        addr.checksum,
        m.live.len(),
        m.retired.len()
    )
    .map_err(|e| e.to_string())?;
    let was = std::mem::replace(&mut ctx.in_run, true);
    for (i, (run, bytes)) in m.live.iter().enumerate() {
        writeln!(ctx.out, "{ind}  run {i} ({bytes} bytes of entries):").map_err(|e| e.to_string())?;
        dump_page(ctx, file, *run, depth + 2, true)?;
    }
    for (i, (run, bytes)) in m.retired.iter().enumerate() {
        writeln!(ctx.out, "{ind}  retired run {i} ({bytes} bytes of entries, replaced by a merge):")
            .map_err(|e| e.to_string())?;
        dump_page(ctx, file, *run, depth + 2, true)?;
    }
    ctx.in_run = was;
    Ok(())
}

/// Decode the block at `offset` on its own (no parent address to check against:
/// the header's own size and checksum are used).
fn dump_block_at(ctx: &mut DumpCtx, file: &dyn VfsFile, offset: u64) -> Result<(), String> {
    let mut hdr = [0u8; 16];
    file.read_at(&mut hdr, offset).map_err(|e| e.to_string())?;
    let checksum = u32::from_le_bytes(hdr[0..4].try_into().unwrap());
    let size = u32::from_le_bytes(hdr[4..8].try_into().unwrap());
    let addr = BlockAddr { offset, size, checksum };
    let mut buf = vec![0u8; size as usize];
    file.read_at(&mut buf, offset).map_err(|e| format!("block at {offset} claims {size} bytes: {e}"))?;
    let (kind, range) = check_block(file.path(), addr, &buf).map_err(|e| e.to_string())?;
    match kind {
        BlockKind::Leaf | BlockKind::Internal | BlockKind::Manifest => dump_page(ctx, file, addr, 0, false),
        other => {
            let payload = &buf[range];
            writeln!(
                ctx.out,
                "block offset={offset} size={size} checksum={checksum:#010x} type={other:?} payload={} bytes",
                payload.len()
            )
            .map_err(|e| e.to_string())?;
            if other == BlockKind::ExtentList {
                if let Some(list) = storage::block::ExtentList::decode(payload) {
                    for (o, l) in list.iter() {
                        writeln!(ctx.out, "  extent offset={o} length={l}").map_err(|e| e.to_string())?;
                    }
                }
            } else {
                writeln!(ctx.out, "  {}", show(payload, ctx.width)).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }
}

fn tables(vfs: &dyn Vfs, dir: &Path, root: &RootRecord) -> Result<Vec<(String, TableMeta)>, String> {
    let file = vfs.open(&dir.join(METADATA_FILE), false).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut stack = vec![root.metadata.root];
    while let Some(addr) = stack.pop() {
        let (kind, payload) = read_block(&*file, addr)?;
        for cell in decode_cells(kind, &payload)? {
            match cell {
                Cell::Internal { child, .. } => stack.push(child),
                Cell::Leaf { key, value: CellValue::Inline(v), .. } => {
                    let meta = TableMeta::decode(&v).ok_or("bad metadata entry")?;
                    out.push((String::from_utf8_lossy(&key).into_owned(), meta));
                }
                Cell::Leaf { .. } => return Err("metadata entry in an overflow block".into()),
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

pub fn dump(args: DumpArgs) -> Result<(), String> {
    let vfs = OsVfs;
    let dir = &args.dbpath;
    let root = RootRecord::read(&vfs, dir).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let layout = Layout::of(args.table.as_deref().unwrap_or(""), args.bson);
    let mut ctx = DumpCtx { out: &mut lock, width: args.width, layout, in_run: false };
    let tables = tables(&vfs, dir, &root)?;
    if let Some(name) = &args.table {
        let (file_name, meta_root) = if name == "_metadata" {
            (METADATA_FILE.to_string(), root.metadata.root)
        } else {
            let (_, m) = tables
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| format!("no table {name:?} in the last checkpoint"))?;
            (table_file_name(m.id), m.checkpoint.root)
        };
        let file = vfs.open(&dir.join(&file_name), false).map_err(|e| e.to_string())?;
        return match args.page {
            Some(offset) => dump_block_at(&mut ctx, &*file, offset),
            None => {
                writeln!(ctx.out, "table {name:?} file {file_name}").map_err(|e| e.to_string())?;
                dump_page(&mut ctx, &*file, meta_root, 0, true)
            }
        };
    }
    if args.page.is_some() {
        return Err("--page needs --table".into());
    }
    if args.journal {
        return dump_journal(&mut ctx, dir, root.ckpt_seq);
    }
    writeln!(
        ctx.out,
        "checkpoint generation {} covers journal records below {}; next table id {}\nmetadata {METADATA_FILE}: root offset={} extents offset={}",
        root.generation, root.ckpt_seq, root.next_table_id, root.metadata.root.offset, root.metadata.extents.offset
    )
    .map_err(|e| e.to_string())?;
    for (name, m) in &tables {
        let file = table_file_name(m.id);
        let size = std::fs::metadata(dir.join(&file)).map(|md| md.len()).unwrap_or(0);
        writeln!(
            ctx.out,
            "table {name:?} id={} file={file} size={} format={:?} leaf_page_max={} internal_page_max={} overflow_min={} alloc={:?} root offset={} extents offset={}",
            m.id,
            fmt_bytes(size),
            m.config.format,
            m.config.leaf_page_max_bytes,
            m.config.internal_page_max_bytes,
            m.config.overflow_min_bytes,
            m.config.alloc_policy,
            m.checkpoint.root.offset,
            m.checkpoint.extents.offset
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn dump_journal(ctx: &mut DumpCtx, dir: &Path, from_seq: u64) -> Result<(), String> {
    let ro = storage::vfs::ReadOnlyVfs::new(&OsVfs);
    let w = ctx.width;
    let mut lines = Vec::new();
    lines.push(format!("journal records from {from_seq} (the earlier ones are in the checkpoint):"));
    let summary =
        storage::journal::replay(&ro, &dir.join(storage::engine::JOURNAL_DIR), from_seq, &mut |seq, payload| {
            lines.push(format!("record {seq}: {} bytes", payload.len()));
            for op in decode_journal_payload(payload).unwrap_or_default() {
                lines.push(match op {
                    JournalOp::Put { table, key, value } => {
                        format!("  put table={table} key={} value={}", show(key, w), show(value, w))
                    }
                    JournalOp::Delete { table, key } => format!("  delete table={table} key={}", show(key, w)),
                    JournalOp::CreateTable { table, name, .. } => format!("  create table={table} name={name:?}"),
                    JournalOp::DropTable { table } => format!("  drop table={table}"),
                });
            }
            Ok(())
        });
    for l in lines {
        writeln!(ctx.out, "{l}").map_err(|e| e.to_string())?;
    }
    match summary {
        Ok(s) => {
            if let Some((p, off)) = s.torn_tail {
                writeln!(ctx.out, "torn tail in {} at offset {off}", p.display()).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}
