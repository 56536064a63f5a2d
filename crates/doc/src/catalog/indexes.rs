//! A collection's secondary indexes in the catalog: their entries (in the
//! collection's catalog entry, beside `_id_`), building one on existing
//! documents while writes go on, dropping one, and keeping them in step
//! with every document write (invariant 1 of `index`).
//!
//! A build (`Catalog::build_index`):
//! 1. records the index as not ready in the catalog and adds it to the
//!    collection's index list, under that list's write lock: writers hold
//!    its read lock from before their transaction begins until it ends, so
//!    once the index is listed every write that has not yet committed
//!    maintains it;
//! 2. reads the documents in chunks, each chunk's keys written in one
//!    transaction with its reads: a concurrent write of the same document
//!    writes one of the same index keys (the old document's or the new
//!    one's), so one of the two conflicts and begins again (first updater
//!    wins) and no stale entry survives;
//! 3. marks it ready in the catalog, then in memory.
//!
//! A crash before step 3 leaves an index the catalog names as not ready:
//! `Catalog::open` drops it (the build was never acknowledged).

use super::*;
use crate::index::keys::DocKeys;
use crate::index::{Index, IndexSpec};
use std::collections::BTreeSet;
use storage::{TableConfig, Txn, TxnOptions};

/// Index entries hold these fields besides the spec `listIndexes` shows.
const INTERNAL_FIELDS: [&str; 6] =
    ["table", "ready", "multikey", "multikeyPaths", "keyFormat", "wildcardMultikeyPaths"];

/// Documents indexed per build transaction.
const BUILD_CHUNK_DOCS: usize = 256;

/// A secondary index as its catalog entry records it.
pub(crate) struct IndexEntry {
    pub(crate) spec: IndexSpec,
    pub(crate) table: String,
    pub(crate) ready: bool,
    pub(crate) multikey: Vec<BTreeSet<usize>>,
    /// A wildcard index's paths where arrays were met.
    pub(crate) wildcard_multikey: BTreeSet<String>,
    /// The format of its collation keys, if it has a collation.
    pub(crate) key_format: Option<String>,
}

/// The secondary indexes a catalog entry names.
pub(crate) fn index_entries(entry: &Document) -> Result<Vec<IndexEntry>, DocError> {
    let mut out = Vec::new();
    let Ok(indexes) = entry.get_array("indexes") else { return Ok(out) };
    for ix in indexes.iter().filter_map(Bson::as_document) {
        if ix.get_str("name") == Ok("_id_") {
            continue;
        }
        let mut shown = ix.clone();
        for f in INTERNAL_FIELDS {
            shown.remove(f);
        }
        let spec = IndexSpec::from_shown(shown)?;
        let table =
            ix.get_str("table").map_err(|_| DocError::Corrupt(format!("index {} names no table", spec.name)))?;
        let paths = ix.get_document("multikeyPaths").ok();
        let multikey = match spec.wildcard {
            Some(_) => vec![BTreeSet::new(); spec.fields.len()],
            None => spec
                .key
                .keys()
                .map(|field| {
                    let at = paths.and_then(|p| p.get_array(field).ok());
                    at.map(|a| a.iter().filter_map(|n| n.as_i32()).map(|n| n as usize).collect()).unwrap_or_default()
                })
                .collect(),
        };
        let wildcard_multikey = ix
            .get_array("wildcardMultikeyPaths")
            .map(|a| a.iter().filter_map(|p| p.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let key_format =
            spec.shown.contains_key("collation").then(|| ix.get_str("keyFormat").unwrap_or("").to_string());
        let ready = ix.get_bool("ready").unwrap_or(true);
        out.push(IndexEntry { spec, table: table.to_string(), ready, multikey, wildcard_multikey, key_format });
    }
    Ok(out)
}

/// A catalog entry without the indexes it names as not ready.
pub(crate) fn without_unready(mut entry: Document) -> Document {
    if let Ok(indexes) = entry.get_array_mut("indexes") {
        indexes.retain(|ix| ix.as_document().is_none_or(|d| d.get_bool("ready").unwrap_or(true)));
    }
    entry
}

/// The catalog entry of index `ix` in `table`, ready or not.
pub(crate) fn index_entry_doc(ix: &Index, table: &str, ready: bool) -> Document {
    let mut d = ix.spec.shown.clone();
    d.insert("table", table);
    d.insert("ready", ready);
    if let Some(c) = ix.collation() {
        d.insert("keyFormat", c.key_format());
    }
    set_multikey(&mut d, &ix.spec, &ix.multikey_paths(), &ix.wildcard_multikey_paths());
    d
}

/// Put `replacement` in place of index `name`'s entry in a catalog entry.
pub(crate) fn replace_index(entry: &mut Document, name: &str, replacement: Document) -> Result<(), DocError> {
    edit_index(entry, name, |d| *d = replacement)
}

/// Record `multikey` (and a wildcard index's array paths) in an index's
/// catalog entry.
fn set_multikey(d: &mut Document, spec: &IndexSpec, multikey: &[BTreeSet<usize>], wildcard: &BTreeSet<String>) {
    d.insert("multikey", multikey.iter().any(|p| !p.is_empty()) || !wildcard.is_empty());
    if spec.wildcard.is_some() {
        d.insert("wildcardMultikeyPaths", wildcard.iter().map(|p| Bson::String(p.clone())).collect::<Vec<_>>());
        return;
    }
    let mut paths = Document::new();
    for (field, at) in spec.key.keys().zip(multikey) {
        paths.insert(field.clone(), at.iter().map(|&n| Bson::Int32(n as i32)).collect::<Vec<_>>());
    }
    d.insert("multikeyPaths", paths);
}

/// Apply `change` to the entry of index `name` in a catalog entry.
fn edit_index(entry: &mut Document, name: &str, change: impl FnOnce(&mut Document)) -> Result<(), DocError> {
    let indexes = entry.get_array_mut("indexes").map_err(|_| DocError::Corrupt("an entry without indexes".into()))?;
    let ix = indexes
        .iter_mut()
        .filter_map(Bson::as_document_mut)
        .find(|ix| ix.get_str("name") == Ok(name))
        .ok_or_else(|| DocError::IndexNotFound(name.to_string()))?;
    change(ix);
    Ok(())
}

impl Collection {
    /// Bytes on disk of each ready secondary index, by name.
    pub fn index_sizes(&self, engine: &Engine) -> Vec<(String, u64)> {
        let ready = self.indexes.read().iter().filter(|ix| ix.is_ready()).cloned().collect::<Vec<_>>();
        ready.iter().map(|ix| (ix.spec.name.clone(), engine.table_file_bytes(ix.table()).unwrap_or(0))).collect()
    }

    /// The secondary indexes, ready or being built.
    pub fn indexes(&self) -> Vec<Arc<Index>> {
        self.indexes.read().clone()
    }

    /// Whether an index (ready or being built) is write-optimized: a
    /// write may then wait for its merges (the storage engine's write stall).
    pub fn has_write_optimized_index(&self) -> bool {
        self.indexes.read().iter().any(|ix| ix.spec.format == storage::TableFormat::WriteOptimized)
    }

    /// Run `f` with the index list held as writers hold it (no index is
    /// added or dropped meanwhile): a multi-document transaction's commit
    /// checks that the list is the one its writes maintained.
    ///
    /// Taken recursively, ahead of a waiting index build: a write that
    /// holds the list may be waiting on this transaction's commit.
    pub fn with_indexes_held<R>(&self, f: impl FnOnce(&[Arc<Index>]) -> R) -> R {
        f(&self.indexes.read_recursive())
    }

    /// In `txn`: the index entries of a new document `doc` at `rid`.
    /// Returns how many keys it inserted.
    pub(crate) fn index_insert(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        rid: u64,
        doc: &Document,
    ) -> Result<u64, DocError> {
        let mut inserted = 0;
        for ix in ixs {
            let keys = ix.doc_keys(doc)?;
            self.note_multikey(txn, ix, &keys)?;
            ix.insert_keys(txn, rid, &keys, &self.ns.to_string())?;
            inserted += keys.keys.len() as u64;
        }
        Ok(inserted)
    }

    /// In `txn`: remove the index entries of `doc` at `rid`.
    /// Returns how many keys it removed.
    pub(crate) fn index_delete(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        rid: u64,
        doc: &Document,
    ) -> Result<u64, DocError> {
        let mut deleted = 0;
        for ix in ixs {
            let keys = ix.doc_keys(doc).unwrap_or_default();
            ix.delete_keys(txn, rid, &keys)?;
            deleted += keys.keys.len() as u64;
        }
        Ok(deleted)
    }

    /// In `txn`: `old` at `rid` became `new`; only keys that changed are
    /// touched. Returns how many keys it inserted and removed.
    pub(crate) fn index_replace(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        rid: u64,
        old: &Document,
        new: &Document,
    ) -> Result<(u64, u64), DocError> {
        let (mut inserted, mut deleted) = (0, 0);
        for ix in ixs {
            let mut before = ix.doc_keys(old).unwrap_or_default();
            let mut after = ix.doc_keys(new)?;
            self.note_multikey(txn, ix, &after)?;
            // Kept: the same key with the same values to the byte (a
            // covered read returns the values as stored).
            let kept: Vec<Vec<u8>> = before
                .keys
                .iter()
                .filter(|(k, v)| after.keys.get(*k).is_some_and(|w| crate::index::same_values(v, w)))
                .map(|(k, _)| k.clone())
                .collect();
            for k in &kept {
                before.keys.remove(k);
                after.keys.remove(k);
            }
            ix.delete_keys(txn, rid, &before)?;
            ix.insert_keys(txn, rid, &after, &self.ns.to_string())?;
            deleted += before.keys.len() as u64;
            inserted += after.keys.len() as u64;
        }
        Ok((inserted, deleted))
    }

    /// `keys` met arrays: raise the index's multikey paths in memory
    /// before the write commits, and in the catalog in its transaction
    /// unless the catalog already records them (invariant 3 of `index`).
    fn note_multikey(&self, txn: &Txn, ix: &Index, keys: &DocKeys) -> Result<(), DocError> {
        if !keys.is_multikey() {
            return Ok(());
        }
        ix.raise_multikey(&keys.multikey);
        ix.raise_wildcard(&keys.wildcard_arrays);
        if ix.recorded_covers(&keys.multikey, &keys.wildcard_arrays) {
            return Ok(());
        }
        let key = self.ns.to_string();
        // Renamed or dropped since this writer looked the collection up:
        // the write fails (its paths could not be recorded where the
        // collection now is).
        let Some(bytes) = txn.get(&self.meta, key.as_bytes())? else {
            return Err(DocError::NamespaceNotFound(key));
        };
        let mut entry = decode(&bytes)?;
        // The index dropped since: nothing to record.
        let Some(stored) = index_entries(&entry)?.into_iter().find(|e| e.spec.name == ix.spec.name) else {
            return Ok(());
        };
        let merged: Vec<BTreeSet<usize>> = stored.multikey.iter().zip(&keys.multikey).map(|(s, k)| s | k).collect();
        let merged_paths: BTreeSet<String> = &stored.wildcard_multikey | &keys.wildcard_arrays;
        if merged == stored.multikey && merged_paths == stored.wildcard_multikey {
            // Committed by an earlier write: later writes need not look.
            ix.raise_recorded(&merged, &merged_paths);
            return Ok(());
        }
        edit_index(&mut entry, &ix.spec.name, |d| set_multikey(d, &ix.spec, &merged, &merged_paths))?;
        txn.put(&self.meta, key.as_bytes(), &encode(&entry)?)?;
        Ok(())
    }
}

/// What `validate` finds in one index: entries the documents give that
/// it lacks, and entries it holds that no document gives, as
/// `(key values, record id)`.
#[derive(Debug, Default, PartialEq)]
pub struct IndexCheck {
    pub missing: Vec<(crate::index::keys::KeyValues, u64)>,
    pub extra: Vec<(crate::index::keys::KeyValues, u64)>,
    /// Entries the index holds.
    pub keys: u64,
}

impl Collection {
    /// Compare the index `ix` with the keys of every document, in one
    /// snapshot.
    pub fn check_index(&self, engine: &Engine, ix: &Index) -> Result<IndexCheck, DocError> {
        let txn = engine.begin(TxnOptions::default())?;
        let mut expected = std::collections::BTreeMap::new();
        let mut c = txn.cursor(&self.records)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            let rid = record_id(&k)?;
            for (key, values) in ix.doc_keys(&decode(&v)?)?.keys {
                expected.insert(ix.storage_key(&key, rid), (rid, values));
            }
            e = c.next()?;
        }
        drop(c);
        let mut check = IndexCheck::default();
        let mut c = txn.cursor(&ix.table)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            check.keys += 1;
            let (rid, values) = ix.decode_entry(&k, &v)?;
            match expected.remove(&k[..]) {
                Some((want, _)) if want == rid => {}
                Some((want, wanted)) => {
                    check.missing.push((wanted, want));
                    check.extra.push((values, rid));
                }
                None => check.extra.push((values, rid)),
            }
            e = c.next()?;
        }
        check.missing.extend(expected.into_values().map(|(rid, values)| (values, rid)));
        Ok(check)
    }

    /// Compare the `_id` index with the documents' `_id`s, in one
    /// snapshot; keys are shown as `[_id]`.
    pub fn check_id_index(&self, engine: &Engine) -> Result<IndexCheck, DocError> {
        let txn = engine.begin(TxnOptions::default())?;
        let mut expected = std::collections::BTreeMap::new();
        let mut c = txn.cursor(&self.records)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            let id = decode(&v)?.get("_id").cloned().unwrap_or(Bson::Null);
            expected.insert(self.id_key(&id), (record_id(&k)?, id));
            e = c.next()?;
        }
        drop(c);
        let mut check = IndexCheck::default();
        let mut c = txn.cursor(&self.id_index)?;
        let mut e = c.first()?;
        while let Some((k, v)) = e {
            check.keys += 1;
            let rid = record_id(&v)?;
            match expected.remove(&k[..]) {
                Some((want, _)) if want == rid => {}
                Some((want, id)) => {
                    check.missing.push((vec![Some(id)], want));
                    check.extra.push((Vec::new(), rid));
                }
                None => check.extra.push((Vec::new(), rid)),
            }
            e = c.next()?;
        }
        check.missing.extend(expected.into_values().map(|(rid, id)| (vec![Some(id)], rid)));
        Ok(check)
    }
}

impl Catalog {
    /// Build the index `spec` on `ns` (see the module's steps), reporting
    /// `(documents done, documents in all)` to `progress` as it goes. A
    /// duplicate key in a unique index or parallel arrays fail it, with
    /// nothing left behind.
    pub fn build_index(&self, ns: &Namespace, spec: IndexSpec, progress: &dyn Fn(u64, u64)) -> Result<(), DocError> {
        let (coll, ix) = self.begin_build(ns, spec)?;
        let built = self.fill_index(&coll, &ix, progress).and_then(|_| {
            self.edit_entry(ns, |entry| {
                edit_index(entry, &ix.spec.name, |d| {
                    d.insert("ready", true);
                })
            })
        });
        match built {
            Ok(()) => {
                // Every fill commit and the ready entry are published.
                ix.set_ready(self.engine.published_ts());
                Ok(())
            }
            Err(e) => {
                // Nothing of it stays: not the entry, the listing or the table.
                let _ = self.drop_index(ns, &ix.spec.name);
                Err(e)
            }
        }
    }

    /// In `txn`: add the index `spec`, ready, to `coll`, a collection
    /// created in `txn` and not yet published, so no other writer reaches
    /// it. The collection must be empty as `txn` sees it (there is nothing
    /// to fill, as mongod requires inside a transaction). The table is
    /// made at once; the collection's `Pending` drops it if `txn` rolls
    /// back, and an open drops it after a crash (no committed entry names
    /// it).
    pub fn add_index_in(&self, txn: &Txn, coll: &Collection, spec: IndexSpec) -> Result<(), DocError> {
        let key = coll.ns.to_string();
        if txn.cursor(&coll.records)?.first()?.is_some() {
            return Err(DocError::IndexOnNonEmptyInTransaction(key));
        }
        if coll.indexes.read().iter().any(|ix| ix.spec.name == spec.name) {
            return Err(DocError::IndexExists(spec.name));
        }
        let mut entry = match txn.get(&self.meta, key.as_bytes())? {
            Some(bytes) => decode(&bytes)?,
            None => return Err(DocError::NamespaceNotFound(key)),
        };
        let table = format!("i/{}/ix", self.next_ident.fetch_add(1, Ordering::Relaxed));
        let config = TableConfig { format: spec.format, ..index_table_config(&self.engine) };
        let handle = self.engine.create_table(&table, config)?;
        let no_arrays = vec![BTreeSet::new(); spec.fields.len()];
        let added = Index::new(spec, handle, (false, no_arrays), &self.hooks, None).and_then(|ix| {
            ix.set_ready(0);
            let indexes =
                entry.get_array_mut("indexes").map_err(|_| DocError::Corrupt("an entry without indexes".into()))?;
            indexes.push(Bson::Document(index_entry_doc(&ix, &table, true)));
            txn.put(&self.meta, key.as_bytes(), &encode(&entry)?)?;
            Ok(ix)
        });
        match added {
            Ok(ix) => {
                coll.indexes.write().push(Arc::new(ix));
                Ok(())
            }
            Err(e) => {
                let _ = self.engine.drop_table(&table);
                Err(e)
            }
        }
    }

    /// Step 1: the index recorded as not ready, listed, its table made.
    fn begin_build(&self, ns: &Namespace, spec: IndexSpec) -> Result<(Arc<Collection>, Arc<Index>), DocError> {
        let _serial = self.ddl.lock();
        let coll = self.get(ns).ok_or_else(|| DocError::NamespaceNotFound(ns.to_string()))?;
        if coll.indexes.read().iter().any(|ix| ix.spec.name == spec.name) {
            return Err(DocError::IndexExists(spec.name));
        }
        let table = format!("i/{}/ix", self.next_ident.fetch_add(1, Ordering::Relaxed));
        let config = TableConfig { format: spec.format, ..index_table_config(&self.engine) };
        let handle = self.engine.create_table(&table, config)?;
        let no_arrays = vec![BTreeSet::new(); spec.fields.len()];
        let ix = match Index::new(spec, handle, (false, no_arrays), &self.hooks, None) {
            Ok(ix) => Arc::new(ix),
            Err(e) => {
                let _ = self.engine.drop_table(&table);
                return Err(e);
            }
        };
        let recorded = self.edit_entry_locked(ns, |entry| {
            let indexes =
                entry.get_array_mut("indexes").map_err(|_| DocError::Corrupt("an entry without indexes".into()))?;
            indexes.push(Bson::Document(index_entry_doc(&ix, &table, false)));
            Ok(())
        });
        if let Err(e) = recorded {
            let _ = self.engine.drop_table(&table);
            return Err(e);
        }
        // Waits for writes that began without it (they hold the read lock).
        coll.indexes.write().push(ix.clone());
        Ok((coll, ix))
    }

    /// Step 2: every document's keys, a chunk per transaction.
    fn fill_index(&self, coll: &Collection, ix: &Index, progress: &dyn Fn(u64, u64)) -> Result<(), DocError> {
        let total = coll.count_and_size(&self.engine)?.0;
        let (mut after, mut done) = (0u64, 0u64);
        let mut chunk_docs = BUILD_CHUNK_DOCS;
        progress(0, total);
        loop {
            let txn = self.engine.begin(TxnOptions::default())?;
            let chunk = (|| {
                let mut c = txn.cursor(&coll.records)?;
                let mut e = c.seek(&(after + 1).to_be_bytes())?;
                let mut last = None;
                let mut n = 0;
                while let Some((k, v)) = e {
                    let rid = record_id(&k)?;
                    let doc = decode(&v)?;
                    let keys = ix.doc_keys(&doc)?;
                    coll.note_multikey(&txn, ix, &keys)?;
                    ix.insert_keys(&txn, rid, &keys, &coll.ns.to_string())?;
                    last = Some(rid);
                    n += 1;
                    if n == chunk_docs {
                        break;
                    }
                    e = c.next()?;
                }
                Ok::<_, DocError>((last, n))
            })();
            let (last, n) = match chunk.and_then(|got| txn.commit().map(|_| got).map_err(DocError::from)) {
                Ok(got) => got,
                Err(DocError::Storage(e)) if e.is_retryable() => {
                    // Rolled back to free the cache: fewer documents a
                    // chunk, so the build's transaction ends sooner.
                    if matches!(e, StorageError::CachePressure { .. }) {
                        chunk_docs = (chunk_docs / 2).max(1);
                    }
                    e.pause_before_retry();
                    continue;
                }
                Err(e) => return Err(e),
            };
            done += n as u64;
            progress(done, total.max(done));
            match last {
                Some(rid) => after = rid,
                None => return Ok(()),
            }
        }
    }

    /// `collMod` of an index: set (or with a null value remove) the
    /// `hidden` and `expireAfterSeconds` in `changes`, in the catalog and
    /// then in memory; returns each option's value before (absent: was
    /// not set).
    pub fn modify_index(&self, ns: &Namespace, name: &str, changes: &Document) -> Result<Document, DocError> {
        let _serial = self.ddl.lock();
        let coll = self.get(ns).ok_or_else(|| DocError::NamespaceNotFound(ns.to_string()))?;
        let ix = coll
            .indexes
            .read()
            .iter()
            .find(|ix| ix.spec.name == name && ix.is_ready())
            .cloned()
            .ok_or_else(|| DocError::IndexNotFound(name.to_string()))?;
        // Writers in flight did not check for duplicates: a change of
        // `prepareUnique` waits for them (and holds back new ones).
        let _writers = changes.contains_key("prepareUnique").then(|| coll.indexes.write());
        self.edit_entry_locked(ns, |entry| {
            edit_index(entry, name, |d| {
                for (k, v) in changes {
                    match v {
                        Bson::Null => d.remove(k),
                        v => d.insert(k.clone(), v.clone()),
                    };
                }
            })
        })?;
        let mut before = Document::new();
        for (k, v) in changes {
            let value = (!matches!(v, Bson::Null)).then(|| v.clone());
            if let Some(old) = ix.set_option(k, value) {
                before.insert(k.clone(), old);
            }
        }
        Ok(before)
    }

    /// Drop the secondary index `name` of `ns`: its entry first (so a
    /// crash never leaves a listed index that missed writes), then the
    /// listing (waiting for writes that use it), then its table.
    pub fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), DocError> {
        let _serial = self.ddl.lock();
        let coll = self.get(ns).ok_or_else(|| DocError::NamespaceNotFound(ns.to_string()))?;
        let table = coll
            .indexes
            .read()
            .iter()
            .find(|ix| ix.spec.name == name)
            .map(|ix| ix.table_name().to_string())
            .ok_or_else(|| DocError::IndexNotFound(name.to_string()))?;
        self.edit_entry_locked(ns, |entry| {
            let indexes =
                entry.get_array_mut("indexes").map_err(|_| DocError::Corrupt("an entry without indexes".into()))?;
            indexes.retain(|ix| ix.as_document().and_then(|d| d.get_str("name").ok()) != Some(name));
            Ok(())
        })?;
        coll.indexes.write().retain(|ix| ix.spec.name != name);
        self.drop_tables(&[table]);
        Ok(())
    }

    /// Rewrite the catalog entry of `ns` by `change`, in a transaction of
    /// its own (serialized with other DDL).
    fn edit_entry(
        &self,
        ns: &Namespace,
        change: impl FnMut(&mut Document) -> Result<(), DocError>,
    ) -> Result<(), DocError> {
        let _serial = self.ddl.lock();
        self.edit_entry_locked(ns, change)
    }

    /// `edit_entry` with the DDL lock held.
    pub(crate) fn edit_entry_locked(
        &self,
        ns: &Namespace,
        mut change: impl FnMut(&mut Document) -> Result<(), DocError>,
    ) -> Result<(), DocError> {
        let key = ns.to_string();
        loop {
            let txn = self.engine.begin(TxnOptions::default())?;
            let attempt = (|| {
                let bytes =
                    txn.get(&self.meta, key.as_bytes())?.ok_or_else(|| DocError::NamespaceNotFound(key.clone()))?;
                let mut entry = decode(&bytes)?;
                change(&mut entry)?;
                txn.put(&self.meta, key.as_bytes(), &encode(&entry)?)?;
                Ok::<_, DocError>(())
            })()
            .and_then(|_| txn.commit().map(|_| ()).map_err(DocError::from));
            match attempt {
                Err(DocError::Storage(e)) if e.is_retryable() => e.pause_before_retry(),
                other => return other,
            }
        }
    }
}
