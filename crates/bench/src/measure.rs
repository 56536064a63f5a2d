//! Measurements around a phase and facts about the machine: the process I/O
//! counters of `/proc/self/io`, the size of a data directory, the file
//! system under it, kernel, CPUs, git commit, timestamps.
//!
//! `write_bytes` counts bytes this process caused to be sent to storage
//! (charged when a page is dirtied, so a page rewritten after each fsync
//! counts each time); `wchar` counts bytes passed to write calls. Both are
//! process-wide, which is right only because phases run one at a time.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Copy, Clone, Debug, Default)]
pub struct IoCounters {
    pub write_bytes: u64,
    pub wchar: u64,
}

impl IoCounters {
    /// `None` where `/proc/self/io` is missing (not Linux, or no task I/O accounting).
    pub fn read() -> Option<IoCounters> {
        let text = std::fs::read_to_string("/proc/self/io").ok()?;
        let field =
            |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")?.trim().parse().ok());
        Some(IoCounters { write_bytes: field("write_bytes")?, wchar: field("wchar")? })
    }
}

/// Bytes written between two readings.
#[derive(Copy, Clone, Debug, Default)]
pub struct IoDelta {
    pub write_bytes: u64,
    pub wchar: u64,
}

impl IoDelta {
    pub fn between(before: Option<IoCounters>, after: Option<IoCounters>) -> Option<IoDelta> {
        let (b, a) = (before?, after?);
        Some(IoDelta {
            write_bytes: a.write_bytes.saturating_sub(b.write_bytes),
            wchar: a.wchar.saturating_sub(b.wchar),
        })
    }
}

/// Apparent and allocated size of everything under a data directory.
#[derive(Copy, Clone, Debug, Default)]
pub struct DirSize {
    pub bytes: u64,
    pub allocated_bytes: u64,
    /// Apparent bytes under ArborDB's `journal/` subdirectory (0 for the
    /// peers): the active journal file keeps records a checkpoint already
    /// covers until it rotates, so this part is not live data.
    pub journal_bytes: u64,
}

pub fn dir_size(dir: &Path) -> std::io::Result<DirSize> {
    let mut total = path_size(dir)?;
    let journal = dir.join(storage::engine::JOURNAL_DIR);
    if journal.is_dir() {
        total.journal_bytes = path_size(&journal)?.bytes;
    }
    Ok(total)
}

/// Apparent and allocated bytes of one file, or of every file under a
/// directory (a file removed meanwhile, such as a journal file a
/// checkpoint retired, is passed over).
pub fn path_size(path: &Path) -> std::io::Result<DirSize> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        return Ok(DirSize { bytes: meta.len(), allocated_bytes: meta.blocks() * 512, journal_bytes: 0 });
    }
    let mut total = DirSize::default();
    for entry in std::fs::read_dir(path)? {
        match path_size(&entry?.path()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
            Ok(sub) => {
                total.bytes += sub.bytes;
                total.allocated_bytes += sub.allocated_bytes;
            }
        }
    }
    Ok(total)
}

/// The file system type of the mount holding `path` (longest mount prefix).
pub fn fs_type(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, mount, fs) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(mount).then(|| (mount.len(), fs.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
}

pub fn kernel() -> String {
    std::fs::read_to_string("/proc/version")
        .map(|s| s.trim().to_string())
        .or_else(|_| command_output("uname", &["-a"]).ok_or(()))
        .unwrap_or_else(|_| "unknown".to_string())
}

pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn memory_total_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 =
        text.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// `git rev-parse HEAD`, with `-dirty` when the work tree has changes.
pub fn git_commit() -> Option<String> {
    let head = command_output("git", &["rev-parse", "HEAD"])?;
    let dirty =
        command_output("git", &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// UTC now as (year, month, day, hour, minute, second).
fn utc_now() -> (i64, u32, u32, u64, u64, u64) {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem / 60 % 60, rem % 60)
}

/// `20250101T120000Z`, for file names.
pub fn utc_timestamp_compact() -> String {
    let (y, mo, d, h, mi, s) = utc_now();
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// `2025-01-01T12:00:00Z`.
pub fn utc_timestamp_iso() -> String {
    let (y, mo, d, h, mi, s) = utc_now();
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// This process's resident set size (VmRSS), if /proc says.
pub fn rss_bytes() -> Option<u64> {
    status_bytes("self", "VmRSS")
}

/// Peak resident set size (VmHWM) of process `pid` ("self" or a number).
pub fn peak_rss_bytes(pid: &str) -> Option<u64> {
    status_bytes(pid, "VmHWM")
}

/// A size field (in kB) of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU time (user + system) this process has used so far, from
/// /proc/self/stat (in USER_HZ ticks, 100 per second on Linux).
pub fn cpu_seconds() -> Option<f64> {
    process_cpu_seconds("self")
}

/// CPU time (user + system, all threads) process `pid` ("self" or a
/// number) has used so far.
pub fn process_cpu_seconds(pid: &str) -> Option<f64> {
    Some(stat_ticks(pid, 11..13)? as f64 / 100.0)
}

/// The sum of `/proc/<pid>/stat` fields `range`, counted from the state
/// field (0): 11 utime, 12 stime, 13 cutime, 14 cstime, in USER_HZ ticks.
fn stat_ticks(pid: &str, range: std::ops::Range<usize>) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    range.map(|i| f.get(i)?.parse::<u64>().ok()).sum()
}

/// CPU time used so far by every live process whose command name is
/// `comm` (e.g. all of PostgreSQL's backends and helpers).
pub fn command_cpu_seconds(comm: &str) -> f64 {
    command_pids(comm).iter().filter_map(|pid| process_cpu_seconds(pid)).sum()
}

/// CPU time of process `root` and its live children, each with the CPU of
/// the children it has reaped (a PostgreSQL postmaster, its helpers, and
/// the backends that exited when their clients left). Exact only while no
/// child is exiting: a child reaped between the readings is missed.
pub fn tree_cpu_seconds(root: &str) -> Option<f64> {
    let own = stat_ticks(root, 11..15)?;
    let children: u64 = children_of(root).iter().filter_map(|pid| stat_ticks(pid, 11..15)).sum();
    Some((own + children) as f64 / 100.0)
}

/// Live processes whose parent is `parent`.
pub fn children_of(parent: &str) -> Vec<String> {
    let parent_of = |pid: &str| -> Option<String> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(s[s.rfind(')')? + 2..].split_whitespace().nth(1)?.to_string())
    };
    all_pids().into_iter().filter(|pid| parent_of(pid).as_deref() == Some(parent)).collect()
}

/// Live processes whose command name is `comm`.
fn command_pids(comm: &str) -> Vec<String> {
    all_pids()
        .into_iter()
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm))
        .collect()
}

fn all_pids() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}

/// The machine's CPU time so far from /proc/stat, in ticks: (all, stolen by
/// the hypervisor). Steal shows how much a VM's neighbours took.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = s.lines().next()?.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    Some((f.iter().take(8).sum(), *f.get(7)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_rss_outlasts_memory_given_back() {
        let before = rss_bytes().unwrap();
        let size = 64 << 20;
        // Mapped, touched (so resident) and unmapped: given back for sure,
        // whatever the allocator keeps.
        // SAFETY: a fresh private anonymous mapping, written within its
        // length and unmapped once, with nothing else pointing into it.
        unsafe {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let p = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
            assert_ne!(p, libc::MAP_FAILED);
            std::ptr::write_bytes(p.cast::<u8>(), 1, size);
            assert_eq!(libc::munmap(p, size), 0);
        }
        let after = rss_bytes().unwrap();
        let peak = peak_rss_bytes("self").unwrap();
        // Half the mapping's size of slack: the kernel's RSS counters lag by
        // some pages per thread.
        let half = size as u64 / 2;
        assert!(peak >= before + half, "peak {peak} after {before} + {size}");
        assert!(after < before + half, "the mapping was given back: {after}");
    }
}
