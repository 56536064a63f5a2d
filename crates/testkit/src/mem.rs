//! An in-memory file system that keeps, for every file, the live image (what
//! reads see) and the durable image (what survives a crash), in the style of
//! redb's crash-consistency backend.
//!
//! `crash()` returns a new file system holding only what was durable, plus —
//! when asked to tear — a random subset of the unsynced writes, each possibly
//! cut short at a 512-byte sector boundary. Directory entries (create,
//! rename, remove) become durable only at `sync_dir` of their directory.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use storage::error::{Result, StorageError};
use storage::vfs::{Vfs, VfsFile};

const SECTOR_BYTES: usize = 512;

#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct FileData {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

fn apply(buf: &mut Vec<u8>, p: &Pending) {
    match p {
        Pending::Write { offset, bytes } => {
            let end = *offset as usize + bytes.len();
            if buf.len() < end {
                buf.resize(end, 0);
            }
            buf[*offset as usize..end].copy_from_slice(bytes);
        }
        Pending::SetLen(len) => buf.resize(*len as usize, 0),
    }
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<u64, FileData>,
    live_names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    next_id: u64,
    io_count: u64,
}

/// See the module docs.
#[derive(Clone, Default)]
pub struct MemVfs {
    state: Arc<Mutex<State>>,
}

struct MemFile {
    state: Arc<Mutex<State>>,
    id: u64,
    path: PathBuf,
}

fn not_found(path: &Path) -> StorageError {
    StorageError::Io {
        op: "open",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
    }
}

impl VfsFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let st = self.state.lock().unwrap();
        let data = &st.files[&self.id].live;
        let end = offset as usize + buf.len();
        if end > data.len() {
            return Err(StorageError::Io {
                op: "read",
                path: self.path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past end of file"),
            });
        }
        buf.copy_from_slice(&data[offset as usize..end]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        st.io_count += 1;
        let f = st.files.get_mut(&self.id).unwrap();
        let p = Pending::Write { offset, bytes: buf.to_vec() };
        apply(&mut f.live, &p);
        f.pending.push(p);
        Ok(())
    }
    fn sync(&self) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let f = st.files.get_mut(&self.id).unwrap();
        for p in std::mem::take(&mut f.pending) {
            apply(&mut f.durable, &p);
        }
        debug_assert_eq!(f.durable, f.live);
        Ok(())
    }
    fn len(&self) -> Result<u64> {
        Ok(self.state.lock().unwrap().files[&self.id].live.len() as u64)
    }
    fn set_len(&self, len: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let f = st.files.get_mut(&self.id).unwrap();
        let p = Pending::SetLen(len);
        apply(&mut f.live, &p);
        f.pending.push(p);
        Ok(())
    }
    fn path(&self) -> &Path {
        &self.path
    }
    /// A hole reads as zeros; like a write, it is durable only after a sync.
    fn punch_hole(&self, offset: u64, len: u64) -> Result<bool> {
        let mut st = self.state.lock().unwrap();
        st.io_count += 1;
        let f = st.files.get_mut(&self.id).unwrap();
        let end = (offset + len).min(f.live.len() as u64);
        if end <= offset {
            return Ok(true);
        }
        let p = Pending::Write { offset, bytes: vec![0; (end - offset) as usize] };
        apply(&mut f.live, &p);
        f.pending.push(p);
        Ok(true)
    }
}

impl MemVfs {
    pub fn new() -> MemVfs {
        MemVfs::default()
    }

    /// The file system as a crash at this instant would leave it. With
    /// `tear`, unsynced writes are partly applied, chosen by `seed`.
    pub fn crash(&self, seed: u64, tear: bool) -> MemVfs {
        let st = self.state.lock().unwrap();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut files = HashMap::new();
        for (&id, f) in &st.files {
            let mut image = f.durable.clone();
            if tear {
                for p in &f.pending {
                    if !rng.gen_bool(0.5) {
                        continue;
                    }
                    match p {
                        Pending::Write { offset, bytes } if bytes.len() > SECTOR_BYTES && rng.gen_bool(0.5) => {
                            let sectors = bytes.len().div_ceil(SECTOR_BYTES);
                            let keep = rng.gen_range(1..sectors) * SECTOR_BYTES;
                            apply(&mut image, &Pending::Write { offset: *offset, bytes: bytes[..keep].to_vec() });
                        }
                        other => apply(&mut image, other),
                    }
                }
            }
            files.insert(id, FileData { live: image.clone(), durable: image, pending: Vec::new() });
        }
        let names = st.durable_names.clone();
        MemVfs {
            state: Arc::new(Mutex::new(State {
                files,
                live_names: names.clone(),
                durable_names: names,
                next_id: st.next_id,
                io_count: 0,
            })),
        }
    }

    /// Flip one bit of a file's live and durable image (for corruption tests).
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) {
        let mut st = self.state.lock().unwrap();
        let id = st.live_names[path];
        let f = st.files.get_mut(&id).unwrap();
        f.live[offset as usize] ^= 1 << bit;
        f.durable[offset as usize] ^= 1 << bit;
    }

    /// Live size of a file.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        let st = self.state.lock().unwrap();
        st.live_names.get(path).map(|id| st.files[id].live.len() as u64)
    }

    /// Every file path, live view.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.state.lock().unwrap().live_names.keys().cloned().collect()
    }

    /// Writes issued so far.
    pub fn io_count(&self) -> u64 {
        self.state.lock().unwrap().io_count
    }
}

impl Vfs for MemVfs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn VfsFile>> {
        let mut st = self.state.lock().unwrap();
        let id = match st.live_names.get(path) {
            Some(&id) => id,
            None if create => {
                let id = st.next_id;
                st.next_id += 1;
                st.files.insert(id, FileData::default());
                st.live_names.insert(path.to_path_buf(), id);
                id
            }
            None => return Err(not_found(path)),
        };
        Ok(Arc::new(MemFile { state: self.state.clone(), id, path: path.to_path_buf() }))
    }
    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock().unwrap();
        st.live_names.contains_key(path) || st.live_names.keys().any(|p| p.starts_with(path))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        st.live_names.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let id = st.live_names.remove(from).ok_or_else(|| not_found(from))?;
        st.live_names.insert(to.to_path_buf(), id);
        Ok(())
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let st = self.state.lock().unwrap();
        Ok(st
            .live_names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(String::from))
            .collect())
    }
    fn create_dir_all(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        st.durable_names.retain(|p, _| p.parent() != Some(dir));
        let live: Vec<(PathBuf, u64)> =
            st.live_names.iter().filter(|(p, _)| p.parent() == Some(dir)).map(|(p, &i)| (p.clone(), i)).collect();
        st.durable_names.extend(live);
        Ok(())
    }
    fn lock_dir(&self, _dir: &Path) -> Result<Box<dyn Send + Sync>> {
        Ok(Box::new(()))
    }
}
