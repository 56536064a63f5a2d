//! All file access of the engine goes through the [`Vfs`] trait so that tests
//! can swap in a backend that fails, tears or forgets writes.
//!
//! Invariants:
//! 1. The engine never touches `std::fs` outside this file.
//! 2. `sync` makes every earlier `write_at` of that file durable; `sync_dir`
//!    makes earlier creates, renames and removes in that directory durable.

use crate::error::{Result, StorageError};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

impl Vfs for OsVfs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map_err(io_err("open", path))?;
        Ok(Arc::new(OsFile { file, path: path.to_path_buf() }))
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
