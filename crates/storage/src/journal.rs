//! The journal: one checksummed record per committed batch, group commit,
//! rotation, and replay after a crash.
//!
//! File `journal/NNNNNNNNNN.jnl`: a 24-byte header
//! `[magic "ARBJRNL1"][first_seq u64][crc32c u32 of the first 16 bytes][0u32]`
//! then records `[len u32][crc32c u32][seq u64][durable_before u64][payload; len]`,
//! the CRC over everything after itself. `durable_before` says that every
//! record below it was fsynced before this one was appended.
//!
//! Invariants:
//! 1. Record sequence numbers are contiguous across files; a file's header
//!    names the sequence number of its first record.
//! 2. A file is synced before the next one is created, so only the last
//!    file can end in a torn record.
//! 3. Replay stops cleanly at a torn tail and fails loudly on corruption. A
//!    bad record is corruption when it sits in a file that is not the last
//!    (invariant 2) or when a valid record after it proves it had been
//!    fsynced (its `durable_before` is above the bad record's number);
//!    otherwise it and what follows were never synced: a torn tail, which
//!    unsynced writes reaching the disk out of order can also produce.
//! 4. Once a write or fsync fails the journal refuses everything after it.
//! 5. A file may end in zeros written ahead of its records; where no valid
//!    record starts, replay takes a tail that is all zeros as the clean end
//!    of that file (no record reached it). Anything else there is judged by
//!    invariant 3.

use crate::codec::Reader;
use crate::error::{Result, StorageError};
use crate::limits::journal_record_max_bytes;
use crate::stats::{bump, Counters};
use crate::vfs::{Vfs, VfsFile};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

const MAGIC: &[u8; 8] = b"ARBJRNL1";
pub const FILE_HEADER_BYTES: u64 = 24;
pub const RECORD_HEADER_BYTES: usize = 24;
/// Zeros written ahead of the last record (capped at the file size limit).
/// An fsync that only overwrites them is one data write; one that grows the
/// file also writes its inode (on ext4 about 30% slower, measured).
const PREALLOCATE_BYTES: u64 = 1 << 20;

/// When a commit is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// A commit returns after its record is fsynced (shared by group commit).
    #[default]
    Fsync,
    /// Records are written at commit and fsynced every 100 ms.
    Background,
    /// Records are written at commit and fsynced only at checkpoints and close.
    Off,
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "fsync" => Ok(SyncMode::Fsync),
            "background" => Ok(SyncMode::Background),
            "off" => Ok(SyncMode::Off),
            other => Err(format!("unknown journal sync mode {other:?} (fsync, background, off)")),
        }
    }
}

fn file_name(no: u64) -> String {
    format!("{no:010}.jnl")
}

fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_suffix(".jnl")?.parse().ok()
}

fn file_header(first_seq: u64) -> [u8; FILE_HEADER_BYTES as usize] {
    let mut h = [0u8; FILE_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&first_seq.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

fn parse_file_header(h: &[u8]) -> Option<u64> {
    if h.len() < FILE_HEADER_BYTES as usize || &h[0..8] != MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(h[16..20].try_into().ok()?);
    if crc != crc32c::crc32c(&h[0..16]) {
        return None;
    }
    Some(u64::from_le_bytes(h[8..16].try_into().ok()?))
}

/// Append the bytes of one record to `out`.
pub fn encode_record(out: &mut Vec<u8>, seq: u64, durable_before: u64, payload: &[u8]) {
    debug_assert!(durable_before <= seq);
    let mut crc = crc32c::crc32c(&seq.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &durable_before.to_le_bytes());
    crc = crc32c::crc32c_append(crc, payload);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&durable_before.to_le_bytes());
    out.extend_from_slice(payload);
}

/// A record as read back.
pub struct Record<'a> {
    pub seq: u64,
    pub durable_before: u64,
    pub payload: &'a [u8],
}

/// Parse the record at `pos` if it is valid and its number is at least
/// `seq_min`. The cheap header checks come before the CRC, so scanning a
/// damaged file offset by offset stays fast.
pub fn parse_record(buf: &[u8], pos: usize, seq_min: u64) -> Option<Record<'_>> {
    let mut r = Reader::new(buf.get(pos..)?);
    let len = r.u32()? as usize;
    let crc = r.u32()?;
    let seq = r.u64()?;
    let durable_before = r.u64()?;
    if len as u64 > journal_record_max_bytes || seq < seq_min || durable_before > seq {
        return None;
    }
    let payload = r.bytes(len)?;
    let mut actual = crc32c::crc32c(&seq.to_le_bytes());
    actual = crc32c::crc32c_append(actual, &durable_before.to_le_bytes());
    actual = crc32c::crc32c_append(actual, payload);
    (actual == crc).then_some(Record { seq, durable_before, payload })
}

struct JournalFile {
    no: u64,
    first_seq: u64,
}

struct State {
    /// Records appended but not yet written.
    buf: Vec<u8>,
    next_seq: u64,
    /// Every record below this is written to the file.
    written_seq: u64,
    /// Every record below this is durable.
    synced_seq: u64,
    /// An fsync is in flight that will make every record below this durable.
    syncing_to: Option<u64>,
    flushing: bool,
    file: Arc<dyn VfsFile>,
    file_len: u64,
    /// Bytes of the current file that exist on disk (records, then zeros
    /// written ahead), at least `file_len`.
    file_alloc: u64,
    files: VecDeque<JournalFile>,
    failed: Option<String>,
    bytes_total: u64,
}

pub struct Journal {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    file_max_bytes: u64,
    state: Mutex<State>,
    flushed: Condvar,
    counters: Arc<Counters>,
}

/// What replay found.
#[derive(Debug, Default)]
pub struct ReplaySummary {
    pub records_replayed: u64,
    pub next_seq: u64,
    /// Set when a torn tail was cut off: (file, offset).
    pub torn_tail: Option<(PathBuf, u64)>,
}

/// Read every record with `seq >= from_seq` in order and hand it to `apply`.
/// Files wholly before `from_seq` are not read (they are removed). Cuts a
/// torn tail off the last file; corruption is an error (invariant 3).
pub fn replay(
    vfs: &dyn Vfs,
    dir: &Path,
    from_seq: u64,
    apply: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<ReplaySummary> {
    let mut nos: Vec<u64> =
        if vfs.exists(dir) { vfs.list(dir)?.iter().filter_map(|n| parse_file_name(n)).collect() } else { Vec::new() };
    nos.sort_unstable();
    // Headers first: the replay starts at the last file that begins at or
    // before the checkpoint; the ones before it are garbage.
    let mut firsts = Vec::with_capacity(nos.len());
    for no in &nos {
        let file = vfs.open(&dir.join(file_name(*no)), false)?;
        let mut h = vec![0u8; (FILE_HEADER_BYTES.min(file.len()?)) as usize];
        file.read_at(&mut h, 0)?;
        firsts.push(parse_file_header(&h));
    }
    if let Some(start) = firsts.iter().rposition(|f| f.is_some_and(|s| s <= from_seq)) {
        for no in nos.drain(..start) {
            vfs.remove(&dir.join(file_name(no)))?;
        }
        if start > 0 {
            vfs.sync_dir(dir)?;
        }
    }
    let mut summary = ReplaySummary { next_seq: from_seq, ..Default::default() };
    let mut expected: Option<u64> = None;
    let count = nos.len();
    for (idx, no) in nos.iter().enumerate() {
        let path = dir.join(file_name(*no));
        let is_last = idx + 1 == count;
        let file = vfs.open(&path, false)?;
        let len = file.len()?;
        let mut buf = vec![0u8; len as usize];
        file.read_at(&mut buf, 0)?;
        let Some(first_seq) = parse_file_header(&buf) else {
            let any_record = (0..buf.len()).any(|p| parse_record(&buf, p, 0).is_some());
            if is_last && !any_record {
                // Created, but its header never became durable before the crash.
                vfs.remove(&path)?;
                break;
            }
            return Err(StorageError::corruption(&path, 0, "bad journal file header"));
        };
        match expected {
            None if first_seq > from_seq => {
                return Err(StorageError::corruption(
                    &path,
                    0,
                    format!("journal starts at record {first_seq}, records from {from_seq} are missing"),
                ));
            }
            Some(e) if e != first_seq => {
                return Err(StorageError::corruption(
                    &path,
                    0,
                    format!("journal file starts at record {first_seq}, expected {e}"),
                ));
            }
            _ => {}
        }
        let mut seq = first_seq;
        let mut pos = FILE_HEADER_BYTES as usize;
        while pos < buf.len() {
            match parse_record(&buf, pos, seq) {
                Some(rec) if rec.seq == seq => {
                    if seq >= from_seq {
                        apply(seq, rec.payload)?;
                        summary.records_replayed += 1;
                    }
                    seq += 1;
                    pos += RECORD_HEADER_BYTES + rec.payload.len();
                }
                // Preallocated space no record reached: the clean end.
                _ if buf[pos..].iter().all(|&b| b == 0) => break,
                _ => {
                    let synced_later = (pos + 1..buf.len())
                        .any(|p| parse_record(&buf, p, seq + 1).is_some_and(|r| r.durable_before > seq));
                    if !is_last || synced_later {
                        return Err(StorageError::corruption(
                            &path,
                            pos as u64,
                            format!("journal record {seq} is corrupt and committed records follow it"),
                        ));
                    }
                    file.set_len(pos as u64)?;
                    file.sync()?;
                    summary.torn_tail = Some((path.clone(), pos as u64));
                    break;
                }
            }
        }
        expected = Some(seq);
    }
    summary.next_seq = expected.unwrap_or(from_seq).max(from_seq);
    Ok(summary)
}

impl Journal {
    /// Open for appending after replay: starts a new file whose first record is `next_seq`.
    pub fn open(
        vfs: Arc<dyn Vfs>,
        dir: PathBuf,
        next_seq: u64,
        file_max_bytes: u64,
        counters: Arc<Counters>,
    ) -> Result<Journal> {
        vfs.create_dir_all(&dir)?;
        if let Some(parent) = dir.parent() {
            vfs.sync_dir(parent)?;
        }
        let mut files = VecDeque::new();
        let mut existing: Vec<u64> = vfs.list(&dir)?.iter().filter_map(|n| parse_file_name(n)).collect();
        existing.sort_unstable();
        for no in &existing {
            let f = vfs.open(&dir.join(file_name(*no)), false)?;
            let mut h = [0u8; FILE_HEADER_BYTES as usize];
            f.read_at(&mut h, 0)?;
            let first_seq = parse_file_header(&h)
                .ok_or_else(|| StorageError::corruption(f.path(), 0, "bad journal file header"))?;
            files.push_back(JournalFile { no: *no, first_seq });
            if Some(no) == existing.last() {
                // Replay may have read records that only the page cache held:
                // make them durable before a newer file exists (invariant 2).
                f.sync()?;
            }
        }
        let no = existing.last().map_or(1, |n| n + 1);
        let file = Self::create_file(&*vfs, &dir, no, next_seq)?;
        files.push_back(JournalFile { no, first_seq: next_seq });
        Ok(Journal {
            vfs,
            dir,
            file_max_bytes,
            state: Mutex::new(State {
                buf: Vec::new(),
                next_seq,
                written_seq: next_seq,
                synced_seq: next_seq,
                syncing_to: None,
                flushing: false,
                file,
                file_len: FILE_HEADER_BYTES,
                file_alloc: FILE_HEADER_BYTES,
                files,
                failed: None,
                bytes_total: 0,
            }),
            flushed: Condvar::new(),
            counters,
        })
    }

    fn create_file(vfs: &dyn Vfs, dir: &Path, no: u64, first_seq: u64) -> Result<Arc<dyn VfsFile>> {
        let path = dir.join(file_name(no));
        let file = vfs.open(&path, true)?;
        file.set_len(0)?;
        file.write_at(&file_header(first_seq), 0)?;
        file.sync()?;
        vfs.sync_dir(dir)?;
        Ok(file)
    }

    /// Add a record to the in-memory tail; returns its sequence number.
    /// The caller orders appends the way it applies them.
    pub fn append(&self, payload: &[u8]) -> Result<u64> {
        if payload.len() as u64 > journal_record_max_bytes {
            return Err(StorageError::InvalidConfig(format!(
                "a batch of {} bytes exceeds the journal record limit",
                payload.len()
            )));
        }
        let mut st = self.state.lock().unwrap();
        if let Some(why) = &st.failed {
            return Err(StorageError::Poisoned { reason: why.clone() });
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let durable_before = st.synced_seq;
        encode_record(&mut st.buf, seq, durable_before, payload);
        Ok(seq)
    }

    /// Sequence number the next record will get.
    pub fn next_seq(&self) -> u64 {
        self.state.lock().unwrap().next_seq
    }

    /// Bytes appended since the journal was opened.
    pub fn bytes_total(&self) -> u64 {
        self.state.lock().unwrap().bytes_total
    }

    /// Return once record `seq` is written (and synced when `sync`). One
    /// waiter at a time writes everything buffered; the others share its write.
    pub fn wait(&self, seq: u64, sync: bool) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        assert!(seq < st.next_seq, "waiting for record {seq} that was never appended");
        loop {
            if let Some(why) = &st.failed {
                return Err(StorageError::Poisoned { reason: why.clone() });
            }
            let done = if sync { st.synced_seq } else { st.written_seq };
            if done > seq {
                return Ok(());
            }
            // A write waits for the writer only; an fsync also waits for the
            // fsync in flight, so that followers gather behind it (group commit).
            if st.flushing || (sync && st.syncing_to.is_some()) {
                st = self.flushed.wait(st).unwrap();
                continue;
            }
            st = self.lead(st, sync, false)?;
        }
    }

    /// Write (and sync when `sync`) everything buffered, as the one flushing
    /// thread; with `rotate_after`, then start a new file whose first record
    /// is the next one appended. The caller checked that nobody is flushing.
    fn lead<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        sync: bool,
        rotate_after: bool,
    ) -> Result<MutexGuard<'a, State>> {
        assert!(!st.flushing);
        st.flushing = true;
        let buf = std::mem::take(&mut st.buf);
        let end_seq = st.next_seq;
        let first_seq = st.written_seq;
        let rotate_before = st.file_len > FILE_HEADER_BYTES && st.file_len + buf.len() as u64 > self.file_max_bytes;
        let (mut file, mut offset, mut alloc) = (st.file.clone(), st.file_len, st.file_alloc);
        let mut next_no = st.files.back().map_or(1, |f| f.no + 1);
        drop(st);
        let mut new_files = Vec::new();
        let result = (|| -> Result<()> {
            if rotate_before && !buf.is_empty() {
                file.sync()?;
                file = Self::create_file(&*self.vfs, &self.dir, next_no, first_seq)?;
                new_files.push((next_no, first_seq, file.clone()));
                next_no += 1;
                (offset, alloc) = (FILE_HEADER_BYTES, FILE_HEADER_BYTES);
            }
            if !buf.is_empty() {
                file.write_at(&buf, offset)?;
                let end = offset + buf.len() as u64;
                if end > alloc {
                    // Write zeros ahead, so that most fsyncs overwrite
                    // existing bytes and need not write the file's size.
                    let ahead = PREALLOCATE_BYTES.min(self.file_max_bytes);
                    file.write_at(&vec![0u8; ahead as usize], end)?;
                    alloc = end + ahead;
                }
            }
            if rotate_after {
                file.sync()?;
                let f = Self::create_file(&*self.vfs, &self.dir, next_no, end_seq)?;
                new_files.push((next_no, end_seq, f));
            }
            Ok(())
        })();
        let mut st = self.state.lock().unwrap();
        st.flushing = false;
        self.flushed.notify_all();
        if let Err(e) = result {
            st.failed = Some(format!("journal write failed: {e}"));
            return Err(e);
        }
        st.file_len = offset + buf.len() as u64;
        st.file_alloc = alloc;
        for (no, first_seq, f) in new_files {
            st.file = f;
            st.file_len = if first_seq == end_seq { FILE_HEADER_BYTES } else { FILE_HEADER_BYTES + buf.len() as u64 };
            st.file_alloc = if first_seq == end_seq { FILE_HEADER_BYTES } else { alloc };
            st.files.push_back(JournalFile { no, first_seq });
        }
        st.bytes_total += buf.len() as u64;
        st.written_seq = end_seq;
        if rotate_after {
            st.synced_seq = end_seq;
            bump(&self.counters.journal_syncs, 1);
        }
        bump(&self.counters.journal_bytes_written, buf.len() as u64);
        bump(&self.counters.journal_records, end_seq - first_seq);
        if sync && !rotate_after {
            // The fsync runs without `flushing`: commits that only need
            // their record written (background and off modes) go on.
            assert!(st.syncing_to.is_none(), "one fsync at a time");
            st.syncing_to = Some(end_seq);
            drop(st);
            let synced = file.sync();
            st = self.state.lock().unwrap();
            st.syncing_to = None;
            self.flushed.notify_all();
            if let Err(e) = synced {
                st.failed = Some(format!("journal fsync failed: {e}"));
                return Err(e);
            }
            st.synced_seq = st.synced_seq.max(end_seq);
            bump(&self.counters.journal_syncs, 1);
        }
        Ok(st)
    }

    /// Flush everything appended, then continue in a new file, so that the
    /// files before it hold only records below the next sequence number. A
    /// checkpoint calls this at its snapshot, so that once it is durable
    /// every older journal file can go.
    pub fn rotate(&self) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        while st.flushing {
            st = self.flushed.wait(st).unwrap();
        }
        if let Some(why) = &st.failed {
            return Err(StorageError::Poisoned { reason: why.clone() });
        }
        if st.buf.is_empty() && st.file_len == FILE_HEADER_BYTES {
            return Ok(());
        }
        self.lead(st, true, true).map(|_| ())
    }

    /// Write and sync everything appended so far.
    pub fn sync_all(&self) -> Result<()> {
        let next = self.next_seq();
        if next == 0 {
            return Ok(());
        }
        let st = self.state.lock().unwrap();
        if st.synced_seq >= next {
            return Ok(());
        }
        drop(st);
        self.wait(next - 1, true)
    }

    /// Remove files all of whose records are below `seq` (covered by a checkpoint).
    pub fn remove_before(&self, seq: u64) -> Result<()> {
        let mut doomed = Vec::new();
        {
            let mut st = self.state.lock().unwrap();
            while st.files.len() >= 2 && st.files[1].first_seq <= seq {
                doomed.push(st.files.pop_front().unwrap().no);
            }
        }
        for no in &doomed {
            self.vfs.remove(&self.dir.join(file_name(*no)))?;
        }
        if !doomed.is_empty() {
            self.vfs.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    pub fn file_count(&self) -> usize {
        self.state.lock().unwrap().files.len()
    }
}
