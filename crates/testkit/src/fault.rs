//! A file system wrapper that fails on purpose: once its countdown of I/O
//! operations reaches zero, that operation and every later one fails (the
//! way a dying disk does), and an optional hook runs at that instant (tests
//! use it to take a crash image at exactly that point). It can also hold
//! every fsync until released, to show what does and does not wait for one.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use storage::error::{Result, StorageError};
use storage::vfs::{Vfs, VfsFile};

type Hook = Box<dyn FnOnce() + Send>;

struct Shared {
    /// While set, `sync` calls block (to show who waits for an fsync).
    syncs_paused: Mutex<bool>,
    syncs_resumed: std::sync::Condvar,
    ops: AtomicU64,
    countdown: AtomicU64,
    armed: AtomicBool,
    tripped: AtomicBool,
    hook: Mutex<Option<Hook>>,
}

impl Shared {
    fn tick(&self, op: &'static str, path: &Path) -> Result<()> {
        if !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.ops.fetch_add(1, Ordering::SeqCst);
        if self.tripped.load(Ordering::SeqCst) || self.countdown.fetch_sub(1, Ordering::SeqCst) <= 1 {
            // The flag flips under the hook's lock and the hook runs before
            // it is released, so `tripped()` (which takes the lock) never
            // sees a trip whose hook has not finished. (Regression: a
            // background thread tripped, and the test read the crash image
            // its hook had not written yet.)
            let mut hook = self.hook.lock().unwrap();
            if !self.tripped.swap(true, Ordering::SeqCst) {
                if let Some(hook) = hook.take() {
                    hook();
                }
            }
            return Err(StorageError::Io {
                op,
                path: path.to_path_buf(),
                source: std::io::Error::other("injected I/O failure"),
            });
        }
        Ok(())
    }
}

/// See the module docs.
#[derive(Clone)]
pub struct FaultVfs {
    inner: Arc<dyn Vfs>,
    shared: Arc<Shared>,
}

impl FaultVfs {
    /// Fail the `n`th I/O operation (1-based) and all after it.
    pub fn new(inner: Arc<dyn Vfs>, n: u64) -> FaultVfs {
        FaultVfs {
            inner,
            shared: Arc::new(Shared {
                syncs_paused: Mutex::new(false),
                syncs_resumed: std::sync::Condvar::new(),
                ops: AtomicU64::new(0),
                countdown: AtomicU64::new(n),
                armed: AtomicBool::new(true),
                tripped: AtomicBool::new(false),
                hook: Mutex::new(None),
            }),
        }
    }

    /// Run `hook` at the moment the first failure happens.
    pub fn on_trip(&self, hook: impl FnOnce() + Send + 'static) {
        *self.shared.hook.lock().unwrap() = Some(Box::new(hook));
    }

    /// I/O operations seen while armed.
    pub fn ops(&self) -> u64 {
        self.shared.ops.load(Ordering::SeqCst)
    }

    /// Has the failure happened (and its hook finished)?
    pub fn tripped(&self) -> bool {
        let _hook_done = self.shared.hook.lock().unwrap();
        self.shared.tripped.load(Ordering::SeqCst)
    }

    /// Make every `sync` (file fsync) block until `resume_syncs`.
    pub fn pause_syncs(&self) {
        *self.shared.syncs_paused.lock().unwrap() = true;
    }

    pub fn resume_syncs(&self) {
        *self.shared.syncs_paused.lock().unwrap() = false;
        self.shared.syncs_resumed.notify_all();
    }

    /// Stop failing.
    pub fn disarm(&self) {
        self.shared.armed.store(false, Ordering::SeqCst);
    }
}

struct FaultFile {
    inner: Arc<dyn VfsFile>,
    shared: Arc<Shared>,
}

impl VfsFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.shared.tick("read", self.inner.path())?;
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.shared.tick("write", self.inner.path())?;
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> Result<()> {
        let mut paused = self.shared.syncs_paused.lock().unwrap();
        while *paused {
            paused = self.shared.syncs_resumed.wait(paused).unwrap();
        }
        drop(paused);
        self.shared.tick("fsync", self.inner.path())?;
        self.inner.sync()
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.shared.tick("truncate", self.inner.path())?;
        self.inner.set_len(len)
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> Result<bool> {
        self.shared.tick("punch hole", self.inner.path())?;
        self.inner.punch_hole(offset, len)
    }
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        self.shared.tick("open", path)?;
        Ok(Arc::new(FaultFile { inner: self.inner.open(path, create)?, shared: self.shared.clone() }))
    }
    fn open_data(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        self.shared.tick("open", path)?;
        Ok(Arc::new(FaultFile { inner: self.inner.open_data(path, create)?, shared: self.shared.clone() }))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    /// A read of metadata, as `exists`: no fault point of its own.
    fn file_len(&self, path: &Path) -> Result<u64> {
        self.inner.file_len(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.shared.tick("remove", path)?;
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.shared.tick("rename", from)?;
        self.inner.rename(from, to)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.shared.tick("readdir", dir)?;
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.shared.tick("fsync dir", dir)?;
        self.inner.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> Result<Box<dyn Send + Sync>> {
        self.inner.lock_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemVfs;
    use std::sync::atomic::AtomicBool;

    /// Regression: `tripped()` turned true while another thread was still
    /// running the trip hook, so a test read a crash image not yet taken.
    #[test]
    fn tripped_waits_for_the_hook_of_another_thread() {
        for _ in 0..20 {
            let fault = FaultVfs::new(Arc::new(MemVfs::new()), 1);
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            fault.on_trip(move || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                d.store(true, Ordering::SeqCst);
            });
            let f = fault.clone();
            let t = std::thread::spawn(move || f.remove(Path::new("/x")));
            while !fault.tripped() {
                std::hint::spin_loop();
            }
            assert!(done.load(Ordering::SeqCst), "tripped() before the hook finished");
            assert!(t.join().unwrap().is_err());
        }
    }
}
