//! A collection: its record store (record id -> BSON) and `_id` index,
//! composed; reads by record id, by `_id`, and in natural order.

use super::*;
use crate::index::Index;
use crate::stored::Stored;
use bson::{oid::ObjectId, Bson, Document};
use indexes::IndexEntry;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use storage::{Bytes, Engine, Read, Table, TxnOptions};

/// One collection: its record store and `_id` index.
pub struct Collection {
    pub ns: Namespace,
    pub options: Document,
    pub(crate) records: Table,
    pub(crate) id_index: Table,
    /// The `_id` index's collation (the collection's default one, from
    /// its catalog entry); `None`: binary keys.
    pub(crate) id_collation: Option<Arc<dyn KeyCollation>>,
    /// `_id` keys of any length, a long one stored cut with a digest
    /// (`keystring::storable`); collections made before this was possible
    /// keep whole keys (and refuse one past the engine's key limit).
    pub(crate) long_ids: bool,
    /// Shared with the collection's renamed self, so that writers still
    /// holding this one allocate from the same sequence.
    pub(crate) next_record: Arc<AtomicU64>,
    /// Set for a capped collection (shared across a rename, as above).
    pub capped: Option<Arc<Capped>>,
    /// The secondary indexes, shared across renames and `collMod`s.
    /// Writers hold the read lock from before their transaction begins
    /// until it ends; adding or removing an index takes the write lock
    /// (`catalog/indexes.rs`).
    pub(crate) indexes: Arc<RwLock<Vec<Arc<Index>>>>,
    /// The catalog's table, where a write records new multikey paths.
    pub(crate) meta: Table,
    /// The `_id` index read as a secondary one (`Index::over_id_table`).
    pub(crate) id_view: Arc<Index>,
}

/// Where a natural-order scan resumes (`Collection::natural`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ScanFrom {
    #[default]
    Start,
    /// After (or before, backwards) this record id: record-id order.
    Record(u64),
    /// After (or before) this `_id` index key: a clustered collection's
    /// `_id` order.
    Key(Vec<u8>),
}

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ack {
    /// Once its journal record is fsynced (the default; `j: true`).
    #[default]
    Journaled,
    /// Once its journal record is written, before the fsync (`j: false`).
    Written,
}

impl Ack {
    pub(crate) fn txn_options(self) -> TxnOptions {
        TxnOptions { skip_journal_sync: self == Ack::Written, ..TxnOptions::default() }
    }
}

/// What a catalog entry says of a collection's record table and `_id`
/// index.
pub(crate) struct IdIndexEntry {
    pub(crate) records: String,
    pub(crate) id_index: String,
    pub(crate) id_collation: Option<Arc<dyn KeyCollation>>,
    pub(crate) long_keys: bool,
}

impl Collection {
    pub(crate) fn load(
        engine: &Engine,
        ns: Namespace,
        options: Document,
        id: IdIndexEntry,
        indexes: Vec<IndexEntry>,
        hooks: &super::Hooks,
    ) -> Result<Collection, DocError> {
        let IdIndexEntry { records, id_index, id_collation, long_keys } = id;
        let records = engine.table(&records)?;
        let id_index = engine.table(&id_index)?;
        let mut secondary = Vec::new();
        for ix in indexes {
            let table = engine.table(&ix.table)?;
            let state = (ix.ready, ix.multikey);
            let index = Index::new(ix.spec, table, state, hooks, ix.key_format.as_deref())?;
            index.raise_wildcard(&ix.wildcard_multikey);
            index.raise_recorded(&[], &ix.wildcard_multikey);
            secondary.push(Arc::new(index));
        }
        let next = match engine.cursor(&records)?.last()? {
            Some((k, _)) => record_id(&k)? + 1,
            None => 1,
        };
        let id_view = Arc::new(Index::over_id_table(id_index.clone(), id_collation.clone()));
        let mut c = Collection {
            ns,
            options,
            records,
            id_index,
            id_view,
            id_collation,
            long_ids: long_keys,
            next_record: Arc::new(AtomicU64::new(next)),
            capped: None,
            indexes: Arc::new(RwLock::new(secondary)),
            meta: engine.table(CATALOG)?,
        };
        if let Some((size, max)) = Capped::of(&c.options) {
            let used = c.count_and_size(engine)?;
            c.capped = Some(Arc::new(Capped { size, max, used: Mutex::new((used.1, used.0)) }));
        }
        Ok(c)
    }

    /// For a view: the collection or view it reads, and its pipeline.
    pub fn view_on(&self) -> Option<(&str, &[Bson])> {
        let on = self.options.get_str("viewOn").ok()?;
        Some((on, self.options.get_array("pipeline").map_or(&[][..], |p| &p[..])))
    }

    /// The document at record id `rid`, if any.
    pub fn get(&self, r: &dyn Read, rid: u64) -> Result<Option<Document>, DocError> {
        r.get(&self.records, &rid.to_be_bytes())?.map(|b| decode(&b)).transpose()
    }

    /// The record at `rid` as stored, if any, decoded only when used.
    pub fn get_stored(&self, r: &dyn Read, rid: u64) -> Result<Option<Stored>, DocError> {
        Ok(r.get(&self.records, &rid.to_be_bytes())?.map(Stored::read))
    }

    /// The document with this `_id` and its record id, if any.
    pub fn find_rid_by_id(&self, r: &dyn Read, id: &Bson) -> Result<Option<(u64, Document)>, DocError> {
        match self.find_raw_by_id(r, id)? {
            Some((rid, bytes)) => Ok(Some((rid, decode(&bytes)?))),
            None => Ok(None),
        }
    }

    /// The stored BSON bytes of the document with this `_id` and its record
    /// id, if any: a point read that never builds a `Document`.
    pub fn find_raw_by_id(&self, r: &dyn Read, id: &Bson) -> Result<Option<(u64, Bytes)>, DocError> {
        let key = self.id_key(id);
        let Some(rid) = r.get(&self.id_index, &key)? else { return Ok(None) };
        let rid = record_id(&rid)?;
        match r.get(&self.records, &rid.to_be_bytes())? {
            Some(bytes) => Ok(Some((rid, bytes))),
            None => Err(DocError::Corrupt(format!("_id index names a missing record in {}", self.ns))),
        }
    }

    /// The document with this `_id`, if any.
    pub fn find_by_id(&self, r: &dyn Read, id: &Bson) -> Result<Option<Document>, DocError> {
        Ok(self.find_rid_by_id(r, id)?.map(|(_, d)| d))
    }

    /// The name of the record store's table: the same across `collMod`s
    /// (which replace the `Collection`), new for a re-created collection.
    pub fn records_table(&self) -> &str {
        self.records.name()
    }

    /// Whether the collection is clustered by `_id` (`clusteredIndex`):
    /// its natural order is `_id` order (the `_id` index's).
    pub fn is_clustered(&self) -> bool {
        self.options.contains_key("clusteredIndex")
    }

    /// The `_id` index as reads plan and scan a secondary index (a
    /// clustered collection's is its records' order: none).
    pub fn id_index_view(&self) -> Option<&Arc<Index>> {
        (!self.is_clustered()).then_some(&self.id_view)
    }

    /// Up to `max` documents (0: all) in natural order after `from` (before
    /// it, backwards, when `reverse`), each with the position to resume
    /// after it and its record id. Natural order is record-id (insertion)
    /// order, or `_id` order for a clustered collection, read through the
    /// `_id` index; a record deleted between its index entry and its read
    /// is skipped, as a delete just before the scan would be.
    pub fn natural(
        &self,
        r: &dyn Read,
        from: &ScanFrom,
        reverse: bool,
        max: usize,
    ) -> Result<Vec<(ScanFrom, u64, Stored)>, DocError> {
        if !self.is_clustered() {
            let rid = match from {
                ScanFrom::Record(rid) => *rid,
                _ => 0,
            };
            let found = match reverse {
                true => self.stored_back(r, rid, max)?,
                false => self.stored_after(r, rid, max)?,
            };
            return Ok(found.into_iter().map(|(rid, d)| (ScanFrom::Record(rid), rid, d)).collect());
        }
        use std::ops::Bound::{Excluded, Unbounded};
        let mut c = r.cursor(&self.id_index)?;
        if let ScanFrom::Key(k) = from {
            match reverse {
                false => c.set_bounds(Excluded(k.clone()), Unbounded),
                true => c.set_bounds(Unbounded, Excluded(k.clone())),
            }
        }
        let mut out = Vec::new();
        let mut e = if reverse { c.last()? } else { c.first()? };
        while let Some((k, v)) = e {
            let rid = record_id(&v)?;
            if let Some(bytes) = r.get(&self.records, &rid.to_be_bytes())? {
                out.push((ScanFrom::Key(k.to_vec()), rid, Stored::read(bytes)));
                if max != 0 && out.len() >= max {
                    break;
                }
            }
            e = if reverse { c.prev()? } else { c.next()? };
        }
        Ok(out)
    }

    /// Up to `max` documents whose `_id` is a date from 1970-01-01 to
    /// `until_ms` (both included), in `_id` order, with their record ids:
    /// what a clustered collection's TTL (`expireAfterSeconds`) removes.
    /// Other `_id` types are never expired, as in mongod.
    pub fn expired(&self, engine: &Engine, until_ms: i64, max: usize) -> Result<Vec<(u64, Document)>, DocError> {
        use std::ops::Bound::Included;
        if until_ms < 0 {
            return Ok(Vec::new());
        }
        let lo = self.id_key(&Bson::DateTime(bson::DateTime::from_millis(0)));
        let hi = self.id_key(&Bson::DateTime(bson::DateTime::from_millis(until_ms)));
        let mut c = engine.cursor(&self.id_index)?;
        c.set_bounds(Included(lo), Included(hi));
        let mut out = Vec::new();
        let mut e = c.first()?;
        while let Some((_, v)) = e {
            let rid = record_id(&v)?;
            if let Some(bytes) = engine.get(&self.records, &rid.to_be_bytes())? {
                out.push((rid, decode(&bytes)?));
                if out.len() >= max {
                    break;
                }
            }
            e = c.next()?;
        }
        Ok(out)
    }

    /// Up to `max` documents with record ids above `after`, in record-id
    /// order, each with its record id; `max` = 0 means all.
    pub fn scan(&self, r: &dyn Read, after: u64, max: usize) -> Result<Vec<(u64, Document)>, DocError> {
        let found = self.stored_after(r, after, max)?;
        found.into_iter().map(|(rid, s)| Ok((rid, s.into_document()?))).collect()
    }

    /// `scan`'s records as stored.
    fn stored_after(&self, r: &dyn Read, after: u64, max: usize) -> Result<Vec<(u64, Stored)>, DocError> {
        let mut out = Vec::new();
        let mut c = r.cursor(&self.records)?;
        let mut e = c.seek(&(after + 1).to_be_bytes())?;
        while let Some((k, v)) = e {
            let rid = record_id(&k)?;
            out.push((rid, Stored::read(v)));
            if max != 0 && out.len() >= max {
                break;
            }
            e = c.next()?;
        }
        Ok(out)
    }

    /// Up to `max` records (0: all) with record ids below `before` (0:
    /// from the newest), newest first: a reverse natural-order scan.
    fn stored_back(&self, r: &dyn Read, before: u64, max: usize) -> Result<Vec<(u64, Stored)>, DocError> {
        let mut out = Vec::new();
        let mut c = r.cursor(&self.records)?;
        if before != 0 {
            c.set_bounds(std::ops::Bound::Unbounded, std::ops::Bound::Excluded(before.to_be_bytes().to_vec()));
        }
        let mut e = c.last()?;
        while let Some((k, v)) = e {
            out.push((record_id(&k)?, Stored::read(v)));
            if max != 0 && out.len() >= max {
                break;
            }
            e = c.prev()?;
        }
        Ok(out)
    }

    /// Bytes on disk of the record store and of the `_id` index (their
    /// table files).
    pub fn storage_sizes(&self, engine: &Engine) -> (u64, u64) {
        let size = |t: &Table| engine.table_file_bytes(t).unwrap_or(0);
        (size(&self.records), size(&self.id_index))
    }

    /// How the record store keeps its leaf pages on disk.
    pub fn block_compressor(&self) -> storage::Compressor {
        self.records.config().compressor
    }

    /// Documents and their total BSON bytes (for `collStats`/`dbStats`).
    pub fn count_and_size(&self, engine: &Engine) -> Result<(u64, u64), DocError> {
        let mut c = engine.cursor(&self.records)?;
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut e = c.first()?;
        while let Some((_, v)) = e {
            n += 1;
            bytes += v.len() as u64;
            e = c.next()?;
        }
        Ok((n, bytes))
    }
}

/// The document with its `_id` first (a new ObjectId if it has none), as
/// it is stored.
pub fn with_id_first(doc: &Document) -> Document {
    let mut out = Document::new();
    out.insert("_id", doc.get("_id").cloned().unwrap_or_else(|| Bson::ObjectId(ObjectId::new())));
    for (k, v) in doc {
        if k != "_id" {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}
