//! `collMod`'s conversions of an index to unique and back
//! (`Catalog::convert_index`).
//!
//! A unique index and a non-unique one lay their entries out differently
//! (the `index` module), so a conversion rewrites the index:
//! 1. under the collection's index-list write lock, which waits for the
//!    writes in flight and holds back new ones until the end (a write
//!    never maintains an index in the layout it is leaving);
//! 2. (to unique) finds the keys more than one record holds: any, and
//!    nothing changes;
//! 3. copies every entry into a new table in the other layout, a chunk
//!    per transaction;
//! 4. in one catalog transaction, points the index's entry at the new
//!    table with the new spec; then swaps the index in memory and drops
//!    the old table.
//!
//! A crash before step 4 commits leaves the new table named by no entry
//! (`Catalog::open` drops it) and the index as it was; after, the old
//! table is the leftover.

use super::*;
use crate::index::keys::key_string;
use crate::index::{Index, IndexSpec};
use storage::TxnOptions;

/// Entries copied per transaction, at most.
const COPY_CHUNK_ENTRIES: usize = 1024;

/// Bytes of entries copied per transaction, at most (long keys make
/// large entries).
const COPY_CHUNK_BYTES: usize = 1024 * 1024;

/// Why a conversion to unique did not happen.
#[derive(Debug)]
pub enum Convert {
    /// The record ids of each key several records hold.
    Duplicates(Vec<Vec<u64>>),
    Failed(DocError),
}

impl From<DocError> for Convert {
    fn from(e: DocError) -> Convert {
        Convert::Failed(e)
    }
}

impl From<storage::StorageError> for Convert {
    fn from(e: storage::StorageError) -> Convert {
        Convert::Failed(e.into())
    }
}

impl Catalog {
    /// Make the ready index `name` of `ns` unique (`unique`), if no two
    /// records share a key, or non-unique; `prepareUnique` goes either way.
    pub fn convert_index(&self, ns: &Namespace, name: &str, unique: bool) -> Result<(), Convert> {
        let _serial = self.ddl.lock();
        let coll = self.get(ns).ok_or_else(|| DocError::NamespaceNotFound(ns.to_string()))?;
        let mut listed = coll.indexes.write();
        let at = listed
            .iter()
            .position(|ix| ix.spec.name == name && ix.is_ready())
            .ok_or_else(|| DocError::IndexNotFound(name.to_string()))?;
        let old = listed[at].clone();
        if old.spec.unique == unique {
            return Ok(());
        }
        let duplicates = old.duplicates(&self.engine)?;
        if !duplicates.is_empty() {
            return Err(Convert::Duplicates(duplicates));
        }
        let mut shown = old.shown();
        match unique {
            true => {
                shown.remove("prepareUnique");
                shown.insert("unique", true)
            }
            false => shown.remove("unique"),
        };
        let table = format!("i/{}/ix", self.next_ident.fetch_add(1, Ordering::Relaxed));
        let handle = self.engine.create_table(&table, index_table_config(&self.engine))?;
        let converted = (|| {
            let spec = IndexSpec::from_shown(shown)?;
            let new = Index::new(spec, handle, (true, old.multikey_paths()), &self.hooks, None)?;
            self.copy_entries(&old, &new)?;
            let entry = indexes::index_entry_doc(&new, &table, true);
            self.edit_entry_locked(ns, |e| indexes::replace_index(e, name, entry.clone()))?;
            Ok::<_, DocError>(new)
        })();
        match converted {
            Ok(new) => {
                // Its entries were copied in commits of their own.
                new.set_ready(self.engine.published_ts());
                listed[at] = Arc::new(new);
                drop(listed);
                self.drop_tables(&[old.table_name().to_string()]);
                Ok(())
            }
            Err(e) => {
                self.drop_tables(&[table]);
                Err(e.into())
            }
        }
    }

    /// Every entry of `old` into `new` (another layout of the same keys).
    fn copy_entries(&self, old: &Index, new: &Index) -> Result<(), DocError> {
        let mut c = self.engine.cursor(old.table())?;
        let mut e = c.first()?;
        while e.is_some() {
            let txn = self.engine.begin(TxnOptions::default())?;
            let mut bytes = 0;
            for _ in 0..COPY_CHUNK_ENTRIES {
                let Some((k, v)) = e else { break };
                if bytes >= COPY_CHUNK_BYTES {
                    e = Some((k, v));
                    break;
                }
                let (rid, values) = old.decode_entry(&k, &v)?;
                let key = key_string(&values, &new.spec.fields);
                let (stored, value) = (new.storage_key(&key, rid), new.storage_value(rid, &values)?);
                bytes += stored.len() + value.len();
                txn.put(new.table(), &stored, &value)?;
                e = c.next()?;
            }
            txn.commit()?;
        }
        Ok(())
    }
}
