//! Writes to a collection: a document and its `_id` index entry in one
//! transaction, inserts in chunks, compare-and-swap delete and replace.

use super::*;
use crate::index::Index;
use crate::sessions::Stamp;
use bson::Document;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use storage::{Engine, StorageError, Txn};

/// The most documents of one insert command committed together.
pub const INSERT_CHUNK_DOCS: usize = 256;

/// A chunk closes once its documents reach this many bytes.
pub const INSERT_CHUNK_BYTES: usize = 1024 * 1024;

/// Chunks that commit in a row before a command first tries chunks twice
/// as large again, after one was too large for the cache.
pub const INSERT_CHUNK_GROW_AFTER: usize = 8;

/// How many documents an insert command puts in one transaction: halved
/// when a chunk is too large for the cache (each refusal has read pages),
/// doubled back after [`INSERT_CHUNK_GROW_AFTER`] chunks commit in a row,
/// and after twice as many each time a grown chunk is refused again.
pub(crate) struct ChunkSize {
    max: usize,
    fits: usize,
    grow_after: usize,
    /// `max` was just doubled and nothing has committed at it yet.
    grown: bool,
}

impl ChunkSize {
    fn new() -> ChunkSize {
        ChunkSize { max: INSERT_CHUNK_DOCS, fits: 0, grow_after: INSERT_CHUNK_GROW_AFTER, grown: false }
    }

    /// A chunk of `tried` documents was too large.
    fn refused(&mut self, tried: usize) {
        if self.grown {
            self.grow_after *= 2;
        }
        self.max = (tried / 2).max(1);
        (self.fits, self.grown) = (0, false);
    }

    fn committed(&mut self) {
        self.fits += 1;
        self.grown = false;
        if self.fits >= self.grow_after && self.max < INSERT_CHUNK_DOCS {
            self.max = (self.max * 2).min(INSERT_CHUNK_DOCS);
            (self.fits, self.grown) = (0, true);
        }
    }
}

/// One inserted document's outcome.
pub type InsertResult = Result<(), DocError>;

impl Collection {
    /// Insert one document (an `_id` is added first if missing), in one
    /// transaction with its `_id` index entry (invariant 2). Returns the
    /// document as stored. `stamp` is written in the same transaction.
    pub fn insert(
        &self,
        engine: &Engine,
        doc: &Document,
        (ack, wait): (Ack, &ConflictWait),
        stamp: Option<&dyn Stamp>,
    ) -> Result<Document, DocError> {
        let doc = with_id_first(doc);
        let id = doc.get("_id").expect("with_id_first adds one").clone();
        let key = self.id_key(&id);
        let bytes = encode_record(&doc)?;
        let mut capped_used = self.capped_lock();
        if self.capped.as_ref().is_some_and(|c| bytes.len() as u64 > c.size) {
            return Err(DocError::ExceedsCappedSize);
        }
        let ixs = self.indexes.read();
        let done = retrying(engine, (ack, wait), stamp, |txn| {
            let keys = self.put_new(txn, &ixs, &doc, &id, &key, &bytes)?;
            let used = match (&self.capped, capped_used.as_deref()) {
                (Some(capped), Some(&(b, n))) => {
                    Some(self.trim_capped(txn, &ixs, capped, (b + bytes.len() as u64, n + 1))?)
                }
                _ => None,
            };
            Ok(Some((used, keys)))
        })?;
        if let Some((used, keys)) = done {
            wait.tally.wrote((keys, 0));
            if let (Some(now), Some(held)) = (used, capped_used.as_deref_mut()) {
                *held = now;
            }
        }
        Ok(doc)
    }

    /// Insert the documents of one insert command. Each succeeds or fails
    /// on its own (a duplicate `_id` fails that document alone), but they
    /// commit in chunks of up to [`INSERT_CHUNK_DOCS`] documents or
    /// [`INSERT_CHUNK_BYTES`] bytes, a transaction each: a leaf a chunk
    /// changes is copied once per chunk instead of once per document, and
    /// the chunk is one journal record. Returns a result per document
    /// tried, in order; with `ordered` they stop at the first failure.
    /// Each transaction writes `stamp` with the indexes (in `docs`) of the
    /// documents it inserts.
    pub fn insert_many(
        &self,
        engine: &Engine,
        docs: &[&Document],
        ordered: bool,
        (ack, wait): (Ack, &ConflictWait),
        stamp: Option<&dyn Stamp>,
    ) -> Vec<Result<(), DocError>> {
        let mut results = Vec::with_capacity(docs.len());
        if self.capped.is_some() {
            // One transaction per document, each trimming the oldest.
            for (i, doc) in docs.iter().enumerate() {
                let shifted = stamp.map(|inner| Shifted { inner, base: i });
                let result =
                    self.insert(engine, doc, (ack, wait), shifted.as_ref().map(|s| s as &dyn Stamp)).map(|_| ());
                let failed = result.is_err();
                results.push(result);
                if failed && ordered {
                    break;
                }
            }
            return results;
        }
        let mut size = ChunkSize::new();
        while results.len() < docs.len() {
            let rest = &docs[results.len()..];
            let shifted = stamp.map(|inner| Shifted { inner, base: results.len() });
            let stamp = shifted.as_ref().map(|s| s as &dyn Stamp);
            let (chunk, stopped) = match self.insert_chunk(engine, rest, ordered, (ack, wait), stamp, &mut size) {
                Ok(done) => done,
                Err(e) => (vec![Err(e)], true),
            };
            results.extend(chunk);
            if stopped {
                break;
            }
        }
        results
    }

    /// Insert a prefix of `docs` (at most `size.max` documents) in one
    /// transaction; returns the results for that prefix and whether an
    /// ordered insert stopped. A document the transaction cannot take (an
    /// error other than a duplicate `_id`) is tried alone, after the
    /// documents before it commit. A chunk too large for the cache is
    /// halved (and `size` told); a document too large alone fails alone.
    pub(crate) fn insert_chunk(
        &self,
        engine: &Engine,
        docs: &[&Document],
        ordered: bool,
        (ack, wait): (Ack, &ConflictWait),
        stamp: Option<&dyn Stamp>,
        size: &mut ChunkSize,
    ) -> Result<(Vec<Result<(), DocError>>, bool), DocError> {
        let mut limit = docs.len().min(size.max);
        let ixs = self.indexes.read();
        loop {
            if limit == 0 {
                // The first document failed inside the chunk: alone, it
                // reports its own error (or succeeds if it was a conflict).
                // `insert` takes the index list's read lock itself: a
                // second read on one thread would wait behind a waiting
                // writer (a build, a drop, a conversion) forever.
                drop(ixs);
                let result = self.insert(engine, docs[0], (ack, wait), stamp).map(|_| ());
                let stopped = ordered && result.is_err();
                return Ok((vec![result], stopped));
            }
            let txn = engine.begin(ack.txn_options())?;
            let (mut results, mut seen, mut bytes_total) = (Vec::new(), std::collections::HashSet::new(), 0);
            let mut keys = 0;
            let mut stopped = false;
            let mut failed_at = None;
            for (i, doc) in docs[..limit].iter().enumerate() {
                if bytes_total >= INSERT_CHUNK_BYTES {
                    break;
                }
                let doc = with_id_first(doc);
                let id = doc.get("_id").expect("with_id_first adds one");
                // A document fails alone on a duplicate `_id`; anything
                // else the engine refuses ends the chunk before it
                // (`failed_at`).
                let key = self.id_key(id);
                let duplicate = !seen.insert(key.clone())
                    || match txn.get(&self.id_index, &key) {
                        Ok(found) => found.is_some(),
                        Err(_) => {
                            failed_at = Some(i);
                            break;
                        }
                    };
                if !duplicate {
                    // A document that cannot be stored fails alone too.
                    let Ok(bytes) = encode_record(&doc) else {
                        failed_at = Some(i);
                        break;
                    };
                    bytes_total += bytes.len();
                    match self.put_record(&txn, &ixs, &doc, &key, &bytes) {
                        Ok(n) => keys += n,
                        Err(_) => {
                            failed_at = Some(i);
                            break;
                        }
                    }
                    results.push(Ok(()));
                    continue;
                }
                results.push(Err(self.duplicate(id.clone())));
                if ordered {
                    stopped = true;
                    break;
                }
            }
            if let Some(i) = failed_at {
                // A conflict with a concurrent insert, or a document the
                // engine refuses: commit what came before it, then meet it
                // alone.
                drop(txn);
                limit = i;
                continue;
            }
            let done: Vec<usize> = (0..results.len()).filter(|&i| results[i].is_ok()).collect();
            match commit_stamped(txn, stamp, &done) {
                Ok(_) => {
                    wait.tally.wrote((keys, 0));
                    size.committed();
                    return Ok((results, stopped));
                }
                Err(e) if e.is_retryable() => wait.pause(&e)?,
                // Too much for a small cache: fewer documents at a time,
                // down to one, which fails alone as a lone insert would.
                Err(StorageError::TransactionTooLarge { .. }) if results.len() > 1 => {
                    size.refused(results.len());
                    limit = size.max;
                }
                Err(e @ StorageError::TransactionTooLarge { .. }) => return Ok((vec![Err(e.into())], ordered)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Delete the document at record id `rid` if it is still `doc`'s
    /// version, with its `_id` index entry, in one transaction. Returns
    /// whether it deleted (false: someone else changed or removed it).
    pub fn delete(
        &self,
        engine: &Engine,
        rid: u64,
        doc: &Document,
        (ack, wait): (Ack, &ConflictWait),
        stamp: Option<&dyn Stamp>,
    ) -> Result<bool, DocError> {
        let mut capped_used = self.capped_lock();
        let ixs = self.indexes.read();
        let Some((freed, keys)) =
            retrying(engine, (ack, wait), stamp, |txn| self.delete_record_in(txn, &ixs, rid, doc))?
        else {
            return Ok(false);
        };
        wait.tally.wrote((0, keys));
        if let Some((bytes, count)) = capped_used.as_deref_mut() {
            *bytes = bytes.saturating_sub(freed);
            *count = count.saturating_sub(1);
        }
        Ok(true)
    }

    /// Whether [`Collection::replace_raw`] may apply: no index but `_id`
    /// (index keys need the documents) and no cap.
    pub fn takes_raw_replace(&self) -> bool {
        self.indexes.read().is_empty() && self.capped.is_none()
    }

    /// As [`Collection::replace`], with the documents as their bytes:
    /// `new` replaces the record at `rid` if it is still `old`. Only for a
    /// collection with no index but `_id` and no cap (`None` otherwise:
    /// index keys need the documents), and `new` must keep `old`'s `_id`.
    pub fn replace_raw(
        &self,
        engine: &Engine,
        rid: u64,
        (old, new): (&[u8], &[u8]),
        (ack, wait): (Ack, &ConflictWait),
        stamp: Option<&dyn Stamp>,
    ) -> Result<Option<bool>, DocError> {
        // Checked again under the lock an index build takes to add itself.
        let ixs = self.indexes.read();
        if !ixs.is_empty() || self.capped.is_some() {
            return Ok(None);
        }
        let replace = |txn: &Txn| Ok(self.replace_bytes_in(txn, rid, old, new)?.then_some(()));
        // No index keys change: nothing for the tally.
        Ok(Some(retrying(engine, (ack, wait), stamp, replace)?.is_some()))
    }

    /// Replace the document at record id `rid` by `new` if it is still
    /// `old` (byte for byte). Returns whether it replaced (false: someone
    /// else changed or removed it). `_id` must be unchanged, so the `_id`
    /// index entry stays.
    pub fn replace(
        &self,
        engine: &Engine,
        rid: u64,
        old: &Document,
        new: &Document,
        (ack, wait): (Ack, &ConflictWait),
        stamp: Option<&dyn Stamp>,
    ) -> Result<bool, DocError> {
        let expected = encode(old)?;
        let bytes = encode_replacement(new)?;
        let mut capped_used = self.capped_lock();
        let ixs = self.indexes.read();
        let replace = |txn: &Txn| match self.replace_bytes_in(txn, rid, &expected, &bytes)? {
            true => self.index_replace(txn, &ixs, rid, old, new).map(Some),
            false => Ok(None),
        };
        let Some(keys) = retrying(engine, (ack, wait), stamp, replace)? else { return Ok(false) };
        wait.tally.wrote(keys);
        // A capped collection may pass its size until the next insert
        // trims it, as MongoDB's does.
        if let Some((used, _)) = capped_used.as_deref_mut() {
            *used = (*used + bytes.len() as u64).saturating_sub(expected.len() as u64);
        }
        Ok(true)
    }

    /// In the caller's transaction `txn`: insert `doc` (an `_id` added
    /// first if missing) and its `_id` index entry; returns the document as
    /// stored. A write conflict or duplicate `_id` is the caller's to
    /// handle (retry, or fail the transaction). A capped collection refuses
    /// (`DocError::CappedInTransaction`). `tally` counts the keys written.
    pub fn insert_in(&self, txn: &Txn, doc: &Document, tally: &Tally) -> Result<Document, DocError> {
        self.not_capped()?;
        let doc = with_id_first(doc);
        let id = doc.get("_id").expect("with_id_first adds one");
        let key = self.id_key(id);
        let bytes = encode_record(&doc)?;
        let ixs = self.indexes.read();
        tally.wrote((self.put_new(txn, &ixs, &doc, id, &key, &bytes)?, 0));
        Ok(doc)
    }

    /// A capped collection's size accounting needs the writes it counts to
    /// commit in its own transactions (`insert`, `delete`, `replace`).
    fn not_capped(&self) -> Result<(), DocError> {
        match self.capped {
            Some(_) => Err(DocError::CappedInTransaction),
            None => Ok(()),
        }
    }

    /// In `txn`: a new record of `bytes` and its `_id` entry `key`,
    /// refused if the `_id` is taken (invariant: a document and its `_id`
    /// entry are written together). Returns the keys written.
    fn put_new(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        doc: &Document,
        id: &Bson,
        key: &[u8],
        bytes: &[u8],
    ) -> Result<u64, DocError> {
        if txn.get(&self.id_index, key)?.is_some() {
            return Err(self.duplicate(id.clone()));
        }
        self.put_record(txn, ixs, doc, key, bytes)
    }

    /// In `txn`: a new record of `bytes` (`doc` encoded) under a new
    /// record id, its `_id` entry `key` and its entries in the secondary
    /// indexes `ixs`: the one place a new document's entries are written.
    /// Returns how many (the `_id` entry and the secondary ones).
    fn put_record(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        doc: &Document,
        key: &[u8],
        bytes: &[u8],
    ) -> Result<u64, DocError> {
        let rid = self.next_record.fetch_add(1, Ordering::Relaxed);
        txn.put(&self.records, &rid.to_be_bytes(), bytes)?;
        txn.put(&self.id_index, key, &rid.to_be_bytes())?;
        Ok(1 + self.index_insert(txn, ixs, rid, doc)?)
    }

    /// In `txn`: delete the document at `rid` and its `_id` entry if it is
    /// still `doc` (byte for byte); returns the bytes freed, or `None` if
    /// someone else changed or removed it. `tally` counts the keys removed.
    pub fn delete_in(&self, txn: &Txn, rid: u64, doc: &Document, tally: &Tally) -> Result<Option<u64>, DocError> {
        self.not_capped()?;
        let deleted = self.delete_record_in(txn, &self.indexes.read(), rid, doc)?;
        Ok(deleted.map(|(freed, keys)| {
            tally.wrote((0, keys));
            freed
        }))
    }

    /// `delete_in` without the capped check (`delete` keeps the
    /// accounting); returns the bytes freed and the keys removed.
    fn delete_record_in(
        &self,
        txn: &Txn,
        ixs: &[Arc<Index>],
        rid: u64,
        doc: &Document,
    ) -> Result<Option<(u64, u64)>, DocError> {
        let key = self.id_key(doc.get("_id").ok_or_else(|| DocError::Corrupt("a document without _id".into()))?);
        let expected = encode(doc)?;
        match txn.get(&self.records, &rid.to_be_bytes())? {
            Some(bytes) if *bytes == *expected => {}
            _ => return Ok(None),
        }
        txn.delete(&self.records, &rid.to_be_bytes())?;
        txn.delete(&self.id_index, &key)?;
        let keys = 1 + self.index_delete(txn, ixs, rid, doc)?;
        Ok(Some((expected.len() as u64, keys)))
    }

    /// In `txn`: replace the document at `rid` by `new` if it is still
    /// `old` (byte for byte); `_id` must be unchanged, so its index entry
    /// stays. Returns whether it replaced; `tally` counts the keys written.
    pub fn replace_in(
        &self,
        txn: &Txn,
        rid: u64,
        (old, new): (&Document, &Document),
        tally: &Tally,
    ) -> Result<bool, DocError> {
        debug_assert_eq!(old.get("_id"), new.get("_id"), "a replacement keeps its _id");
        self.not_capped()?;
        let replaced = self.replace_bytes_in(txn, rid, &encode(old)?, &encode_replacement(new)?)?;
        if replaced {
            tally.wrote(self.index_replace(txn, &self.indexes.read(), rid, old, new)?);
        }
        Ok(replaced)
    }

    /// `replace_in` with both documents already encoded.
    fn replace_bytes_in(&self, txn: &Txn, rid: u64, expected: &[u8], bytes: &[u8]) -> Result<bool, DocError> {
        match txn.get(&self.records, &rid.to_be_bytes())? {
            Some(current) if *current == *expected => {}
            _ => return Ok(false),
        }
        txn.put(&self.records, &rid.to_be_bytes(), bytes)?;
        Ok(true)
    }
}

/// Run `write` in a transaction of its own and commit it with `stamp`
/// (statement 0); `None` from `write` commits nothing. A write conflict
/// begins again after `wait`'s backoff (`conflict_wait.rs`), until the
/// other writer has committed or rolled back (first updater wins), so
/// that `write` sees its outcome.
fn retrying<T>(
    engine: &Engine,
    (ack, wait): (Ack, &ConflictWait),
    stamp: Option<&dyn Stamp>,
    mut write: impl FnMut(&Txn) -> Result<Option<T>, DocError>,
) -> Result<Option<T>, DocError> {
    loop {
        let txn = engine.begin(ack.txn_options())?;
        let attempt = match write(&txn) {
            Ok(Some(done)) => commit_stamped(txn, stamp, &[0]).map(|_| Some(done)).map_err(DocError::from),
            other => other,
        };
        match attempt {
            Err(DocError::Storage(e)) if e.is_retryable() => wait.pause(&e)?,
            other => return other,
        }
    }
}

/// A record id stored as 8 big-endian bytes (a record key or an `_id`
/// index value).
pub(crate) fn record_id(bytes: &[u8]) -> Result<u64, DocError> {
    let b: [u8; 8] =
        bytes.try_into().map_err(|_| DocError::Corrupt(format!("a record id of {} bytes", bytes.len())))?;
    Ok(u64::from_be_bytes(b))
}

/// A document's bytes as stored (`bson_bytes`: exactly as sent).
pub(crate) fn encode(doc: &Document) -> Result<Vec<u8>, DocError> {
    Ok(crate::bson_bytes::encode(doc)?)
}

/// A record's bytes: also refused past `stored_depth_max`, in the same
/// pass, so that every stored record decodes again (`limits.rs`).
pub(crate) fn encode_record(doc: &Document) -> Result<Vec<u8>, DocError> {
    crate::bson_bytes::encode_within(doc, crate::limits::stored_depth_max).map_err(|e| match e {
        crate::bson_bytes::EncodeError::TooDeep(max) => DocError::TooDeep { max, update: false },
        other => other.into(),
    })
}

/// A replacement's bytes: as [`encode_record`], its refusal worded as
/// mongod words an update's.
fn encode_replacement(doc: &Document) -> Result<Vec<u8>, DocError> {
    encode_record(doc).map_err(|e| match e {
        DocError::TooDeep { max, .. } => DocError::TooDeep { max, update: true },
        other => other,
    })
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Document, DocError> {
    crate::bson_bytes::decode(bytes).map_err(|e| DocError::Corrupt(e.to_string()))
}

/// Write `stamp` (for the statements `done`), then commit.
pub(crate) fn commit_stamped(txn: Txn, stamp: Option<&dyn Stamp>, done: &[usize]) -> Result<u64, StorageError> {
    if let Some(s) = stamp {
        s.write(&txn, done)?;
    }
    txn.commit()
}

/// A stamp seen from a suffix of the statements: index `i` is `base + i`.
pub(crate) struct Shifted<'a> {
    pub(crate) inner: &'a dyn Stamp,
    pub(crate) base: usize,
}

impl Stamp for Shifted<'_> {
    fn write(&self, txn: &Txn, done: &[usize]) -> Result<(), StorageError> {
        let done: Vec<usize> = done.iter().map(|i| i + self.base).collect();
        self.inner.write(txn, &done)
    }
}
