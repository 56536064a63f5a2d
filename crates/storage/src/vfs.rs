//! All file access of the engine goes through the [`Vfs`] trait so that tests
//! can swap in a backend that fails, tears or forgets writes.
//!
//! Invariants:
//! 1. The engine never touches `std::fs` outside this file.
//! 2. `sync` makes every earlier `write_at` of that file durable; `sync_dir`
//!    makes earlier creates, renames and removes in that directory durable.
//! 3. A file opened for direct I/O ([`DirectVfs`]) reads and writes the same
//!    bytes as a buffered one: every transfer is widened to whole aligned
//!    units through an aligned buffer, so callers need not align anything.

use crate::error::{Result, StorageError};
use crate::limits::direct_io_align_bytes;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// An open file.
#[allow(clippy::len_without_is_empty)]
pub trait VfsFile: Send + Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    fn sync(&self) -> Result<()>;
    fn len(&self) -> Result<u64>;
    fn set_len(&self, len: u64) -> Result<()>;
    fn path(&self) -> &Path;
    /// Give `[offset, offset + len)` back to the device, keeping the file's
    /// length; reads of it return zeros. `false` where the file system
    /// cannot (the bytes then stay as they are).
    fn punch_hole(&self, offset: u64, len: u64) -> Result<bool> {
        let _ = (offset, len);
        Ok(false)
    }
}

/// A file system.
pub trait Vfs: Send + Sync {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>>;
    /// Open a data file (a block file of pages): as [`Vfs::open`], except
    /// where the file system reads and writes pages directly (`DirectVfs`).
    fn open_data(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        self.open(path, create)
    }
    fn exists(&self, path: &Path) -> bool;
    /// The length of the file at `path`, without opening it for writing.
    fn file_len(&self, path: &Path) -> Result<u64> {
        self.open(path, false)?.len()
    }
    fn remove(&self, path: &Path) -> Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// File names (not paths) in `dir`, any order.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Take an exclusive lock on the directory for this process; the guard
    /// releases it when dropped.
    fn lock_dir(&self, dir: &Path) -> Result<Box<dyn Send + Sync>>;
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |source| StorageError::Io { op, path: path.to_path_buf(), source }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsVfs;

struct OsFile {
    file: File,
    path: PathBuf,
}

impl VfsFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset).map_err(io_err("read", &self.path))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(buf, offset).map_err(io_err("write", &self.path))
    }
    fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(io_err("fsync", &self.path))
    }
    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(io_err("stat", &self.path))?.len())
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(io_err("truncate", &self.path))
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn punch_hole(&self, offset: u64, len: u64) -> Result<bool> {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Ok(false);
        };
        // SAFETY: `fallocate` on a descriptor this struct owns, over a range
        // of the file; it touches no memory of ours.
        let r = unsafe {
            libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off, n)
        };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(false),
            _ => Err(io_err("punch hole", &self.path)(e)),
        }
    }
}

struct DirLock {
    _file: File,
}

impl OsFile {
    /// Open `path` for reading and writing with extra `open(2)` flags.
    fn open(path: &Path, create: bool, flags: i32) -> std::io::Result<OsFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let file =
            OpenOptions::new().read(true).write(true).create(create).truncate(false).custom_flags(flags).open(path)?;
        Ok(OsFile { file, path: path.to_path_buf() })
    }
}

impl Vfs for OsVfs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(OsFile::open(path, create, 0).map_err(io_err("open", path))?))
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        std::fs::metadata(path).map(|m| m.len()).map_err(io_err("metadata", path))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(io_err("remove", path))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(io_err("rename", from))
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io_err("readdir", dir))? {
            let entry = entry.map_err(io_err("readdir", dir))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(io_err("mkdir", dir))
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("fsync dir", dir))
    }
    fn lock_dir(&self, dir: &Path) -> Result<Box<dyn Send + Sync>> {
        use std::os::unix::io::AsRawFd;
        let path = dir.join("arbordb.lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open", &path))?;
        // SAFETY: flock on a valid descriptor we own; no memory is touched.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(StorageError::Locked { path: dir.to_path_buf() });
        }
        Ok(Box::new(DirLock { _file: file }))
    }
}

/// The real file system, with data files opened for direct I/O
/// (`O_DIRECT`): their pages bypass the operating system's page cache, so
/// the engine's cache is the only one and a miss in it reads the device
/// (`--direct-io`). The journal and the root file stay buffered: small
/// appends, made durable by fsync either way.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectVfs;

impl Vfs for DirectVfs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        OsVfs.open(path, create)
    }
    fn open_data(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        let os = OsFile::open(path, create, libc::O_DIRECT).map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => StorageError::InvalidConfig(format!(
                "direct I/O: the file system holding {} does not support O_DIRECT",
                path.display()
            )),
            _ => io_err("open", path)(e),
        })?;
        Ok(Arc::new(DirectFile { os, widening: RwLock::new(()) }))
    }
    fn exists(&self, path: &Path) -> bool {
        OsVfs.exists(path)
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        OsVfs.file_len(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        OsVfs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        OsVfs.rename(from, to)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        OsVfs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        OsVfs.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        OsVfs.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> Result<Box<dyn Send + Sync>> {
        OsVfs.lock_dir(dir)
    }
}

/// A buffer whose start is aligned for direct I/O (a `Vec` has no such
/// promise, so it holds one unit more and starts where the alignment does).
struct Aligned {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Aligned {
        let bytes = vec![0u8; len + direct_io_align_bytes];
        let start = bytes.as_ptr().align_offset(direct_io_align_bytes);
        assert!(start < direct_io_align_bytes, "a byte pointer can always be aligned");
        Aligned { bytes, start, len }
    }
    fn get(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// The aligned units covering `len` bytes at `offset`: `(start, end)`.
fn widen(offset: u64, len: usize) -> (u64, u64) {
    let unit = direct_io_align_bytes as u64;
    (offset / unit * unit, (offset + len as u64).div_ceil(unit) * unit)
}

/// A file opened with `O_DIRECT` (invariant 3). The engine's block files
/// transfer whole 4 KiB units already, so only their copies through
/// [`Aligned`] cost anything. A widened write (an unaligned one, which the
/// engine never makes) reads the units it patches and writes them back
/// with every other write and length change held off (`widening`
/// exclusive; they take it shared); a crash between its write and the
/// length fix may leave the file up to one unit longer.
struct DirectFile {
    os: OsFile,
    widening: RwLock<()>,
}

impl DirectFile {
    /// Read aligned `buf` at aligned `offset` up to the end of the file;
    /// returns the bytes read (past the end, `buf` keeps its zeros).
    fn read_units(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match self.os.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                // A read that ends inside a unit has met the end of the file.
                Ok(n) if !n.is_multiple_of(direct_io_align_bytes) => return Ok(done + n),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("read", &self.os.path)(e)),
            }
        }
        Ok(done)
    }
}

impl VfsFile for DirectFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let (start, end) = widen(offset, buf.len());
        let mut units = Aligned::zeroed((end - start) as usize);
        let skip = (offset - start) as usize;
        if self.read_units(units.get_mut(), start)? < skip + buf.len() {
            let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "failed to fill whole buffer");
            return Err(io_err("read", &self.os.path)(eof));
        }
        buf.copy_from_slice(&units.get()[skip..skip + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        if buf.is_empty() {
            return Ok(());
        }
        let (start, end) = widen(offset, buf.len());
        let mut units = Aligned::zeroed((end - start) as usize);
        let skip = (offset - start) as usize;
        if start == offset && end == offset + buf.len() as u64 {
            let _shared = self.widening.read().unwrap_or_else(|e| e.into_inner());
            units.get_mut().copy_from_slice(buf);
            return self.os.file.write_all_at(units.get(), start).map_err(io_err("write", &self.os.path));
        }
        let _alone = self.widening.write().unwrap_or_else(|e| e.into_inner());
        let len = self.len()?;
        self.read_units(units.get_mut(), start)?;
        units.get_mut()[skip..skip + buf.len()].copy_from_slice(buf);
        self.os.file.write_all_at(units.get(), start).map_err(io_err("write", &self.os.path))?;
        // A widened write leaves the file as long as the bytes asked for.
        let want = len.max(offset + buf.len() as u64);
        if end > want {
            self.os.set_len(want)?;
        }
        Ok(())
    }
    fn sync(&self) -> Result<()> {
        self.os.sync()
    }
    fn len(&self) -> Result<u64> {
        self.os.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        let _shared = self.widening.read().unwrap_or_else(|e| e.into_inner());
        self.os.set_len(len)
    }
    fn path(&self) -> &Path {
        self.os.path()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> Result<bool> {
        let _shared = self.widening.read().unwrap_or_else(|e| e.into_inner());
        self.os.punch_hole(offset, len)
    }
}

/// A view of another file system that reads through and ignores every
/// change: for tools that must not modify what they inspect.
pub struct ReadOnlyVfs<'a> {
    inner: &'a dyn Vfs,
}

impl<'a> ReadOnlyVfs<'a> {
    pub fn new(inner: &'a dyn Vfs) -> Self {
        ReadOnlyVfs { inner }
    }
}

struct ReadOnlyFile(Arc<dyn VfsFile>);

impl VfsFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, _: &[u8], _: u64) -> Result<()> {
        Ok(())
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> Result<u64> {
        self.0.len()
    }
    fn set_len(&self, _: u64) -> Result<()> {
        Ok(())
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Vfs for ReadOnlyVfs<'_> {
    fn open(&self, path: &Path, _create: bool) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(ReadOnlyFile(self.inner.open(path, false)?)))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        self.inner.file_len(path)
    }
    fn remove(&self, _: &Path) -> Result<()> {
        Ok(())
    }
    fn rename(&self, _: &Path, _: &Path) -> Result<()> {
        Ok(())
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, _: &Path) -> Result<()> {
        Ok(())
    }
    fn sync_dir(&self, _: &Path) -> Result<()> {
        Ok(())
    }
    fn lock_dir(&self, _: &Path) -> Result<Box<dyn Send + Sync>> {
        Ok(Box::new(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum FileOp {
        Write(u64, Vec<u8>),
        Read(u64, usize),
        SetLen(u64),
    }

    fn file_op() -> impl Strategy<Value = FileOp> {
        // Offsets and lengths around unit boundaries, aligned or not.
        let offset = prop_oneof![(0u64..6).prop_map(|u| u * 4096), 0u64..24_000];
        let len = prop_oneof![(1usize..4).prop_map(|u| u * 4096), 0usize..9000];
        prop_oneof![
            4 => (offset.clone(), len.clone(), any::<u8>())
                .prop_map(|(o, l, b)| FileOp::Write(o, (0..l).map(|i| b.wrapping_add(i as u8)).collect())),
            4 => (offset.clone(), len).prop_map(|(o, l)| FileOp::Read(o, l)),
            1 => offset.prop_map(FileOp::SetLen),
        ]
    }

    /// Run `ops` on a file of `vfs` and on a `Vec` model: every read and
    /// the final length and contents agree.
    fn check(vfs: &dyn Vfs, ops: &[FileOp]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.arb");
        let f = vfs.open_data(&path, true).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                FileOp::Write(o, data) => {
                    f.write_at(data, *o).unwrap();
                    // An empty write changes nothing, wherever it is.
                    let end = *o as usize + data.len();
                    if !data.is_empty() {
                        model.resize(model.len().max(end), 0);
                        model[*o as usize..end].copy_from_slice(data);
                    }
                }
                FileOp::Read(o, l) => {
                    let mut buf = vec![0xAAu8; *l];
                    let got = f.read_at(&mut buf, *o);
                    // An empty read succeeds, wherever it is.
                    let want = match l {
                        0 => Some(&[][..]),
                        _ => model.get(*o as usize..*o as usize + l),
                    };
                    match want {
                        Some(want) => {
                            got.unwrap_or_else(|e| panic!("{op:?}: {e}"));
                            assert_eq!(buf, want, "{op:?}");
                        }
                        None => assert!(got.is_err(), "{op:?} read past the end"),
                    }
                }
                FileOp::SetLen(n) => {
                    f.set_len(*n).unwrap();
                    model.resize(*n as usize, 0);
                }
            }
            assert_eq!(f.len().unwrap(), model.len() as u64, "length after {op:?}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), model);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Direct I/O reads and writes what a buffered file does, for any
        /// offsets and lengths (invariant 3).
        #[test]
        fn direct_files_read_and_write_as_buffered_ones(ops in prop::collection::vec(file_op(), 1..40)) {
            check(&OsVfs, &ops);
            check(&DirectVfs, &ops);
        }
    }

    /// The flags of this process's open descriptor of `path`.
    fn open_flags(path: &Path) -> u32 {
        for fd in std::fs::read_dir("/proc/self/fd").unwrap() {
            let fd = fd.unwrap();
            if std::fs::read_link(fd.path()).ok().as_deref() == Some(path) {
                let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.file_name().to_str().unwrap()));
                let flags =
                    info.unwrap().lines().find_map(|l| l.strip_prefix("flags:").map(str::trim).map(String::from));
                return u32::from_str_radix(&flags.unwrap(), 8).unwrap();
            }
        }
        panic!("{} is not open", path.display())
    }

    #[test]
    fn direct_vfs_opens_data_files_and_only_them_with_o_direct() {
        let dir = tempfile::tempdir().unwrap();
        let (data, other) = (dir.path().join("t.adb"), dir.path().join("j.jnl"));
        let direct = libc::O_DIRECT as u32;
        let d = DirectVfs.open_data(&data, true).unwrap();
        let j = DirectVfs.open(&other, true).unwrap();
        assert_ne!(open_flags(&data) & direct, 0, "a data file without O_DIRECT");
        assert_eq!(open_flags(&other) & direct, 0, "a journal-like file with O_DIRECT");
        drop((d, j));
        let buffered = OsVfs.open_data(&data, false).unwrap();
        assert_eq!(open_flags(&data) & direct, 0, "OsVfs opened a data file with O_DIRECT");
        drop(buffered);
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for len in [0, 1, 4095, 4096, 40_000] {
            let a = Aligned::zeroed(len);
            assert_eq!(a.get().len(), len);
            assert_eq!(a.get().as_ptr() as usize % direct_io_align_bytes, 0);
        }
        assert_eq!(widen(0, 0), (0, 0));
        assert_eq!(widen(4095, 2), (0, 8192));
        assert_eq!(widen(4096, 4096), (4096, 8192));
    }
}
