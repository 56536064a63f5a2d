//! The cursor registry and cursor state: batches, `getMore`, tailable
//! and awaitData cursors, kills.

use crate::args::ReplyResult;
use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::exec::deadline::Deadline;
use crate::exec::scan::SCAN_CHUNK;
use crate::exec::scan::{matches_stored, Hit};
use crate::exec::views::Scanning;
use crate::limits::*;
use crate::reply::Reply;
use bson::{Bson, Document};
use doc::catalog::{Collection, DocError, Namespace, ScanFrom};
use doc::stored::Stored;
use parking_lot::Mutex;
use query::{Filter, Projection};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use storage::Reader;

/// Default size of a first batch (MongoDB's).
pub(crate) const FIRST_BATCH_DEFAULT: usize = 101;

pub(crate) enum Source {
    /// Scanning the collection in natural order (`Collection::natural`),
    /// or in reverse; `after` is where the last record examined was.
    /// `reader`: where the cursor was opened (a transaction's cursor reads
    /// its snapshot).
    Scan { filter: Filter, after: ScanFrom, pending: VecDeque<(ScanFrom, u64, Stored)>, reverse: bool, reader: Reader },
    /// Results computed up front (a sort, a point lookup, a pipeline).
    Buffer(std::vec::IntoIter<Hit>),
    /// A sort that spilled to disk, merged as it is read.
    Merge(Box<crate::exec::spill::Spilled>),
    /// An aggregation's output, or a `find`'s index scan, produced as it
    /// is read; `scanning`: the collection read (if it is dropped or
    /// replaced, the cursor dies). A `find` filters what it reads
    /// (`filter`), but not while [`Exact`] vouches for what it reads.
    Stream { docs: Stream, scanning: Scanning, filter: Option<Filter>, exact: Option<Exact> },
}

/// An index scan every key of which is of a match (`access::every_key_matches`):
/// its records need no filter while no commit has been published since
/// the scan began (`since`, `Engine::published_ts`; a record is fetched
/// after its key was read, and a commit in between may have changed it)
/// and the index holds no arrays (an index raises its multikey flag
/// before the write that makes it multikey commits).
pub(crate) struct Exact {
    pub(crate) index: Arc<doc::index::Index>,
    pub(crate) since: u64,
}

impl Exact {
    /// Whether the record just read needs no filter.
    fn vouches(&self, shared: &Ctx<'_>) -> bool {
        shared.txn().is_none() && shared.catalog.engine().published_ts() == self.since && !self.index.is_multikey()
    }
}

/// What a cursor streams: stored records with their record ids, or a
/// pipeline's documents (record id 0).
pub(crate) type Stream =
    std::iter::Peekable<Box<dyn Iterator<Item = Result<(u64, Stored), query::FilterError>> + Send>>;

/// A pipeline's output as a cursor streams it.
pub(crate) fn stream_of(docs: query::pipeline::DocStream<'static>) -> Stream {
    let stored: Box<dyn Iterator<Item = Result<(u64, Stored), query::FilterError>> + Send> =
        Box::new(docs.map(|d| d.map(|d| (0, Stored::owned(d)))));
    stored.peekable()
}

/// A cursor between batches.
pub(crate) struct CursorState {
    pub(crate) ns: Namespace,
    pub(crate) source: Source,
    pub(crate) projection: Option<Projection>,
    /// `showRecordId`: whether and how `$recordId` is added.
    pub(crate) record_id: RecordIds,
    /// Documents still allowed by `limit` (`None`: no limit).
    pub(crate) remaining: Option<usize>,
    pub(crate) last_used: Instant,
    /// A tailable cursor (capped collections): its end is not its last
    /// batch; with `await_data`, a `getMore` at the end waits for inserts.
    pub(crate) tailable: bool,
    pub(crate) await_data: bool,
    /// A tailable cursor's collection: if it is dropped (or renamed, or
    /// replaced), the cursor dies.
    pub(crate) tailing: Option<std::sync::Weak<Collection>>,
    /// The session that opened the cursor: killing the session kills it.
    pub(crate) lsid: Option<doc::sessions::SessionId>,
    /// What is left of the opening command's `maxTimeMS`: it bounds the
    /// cursor's work across its `getMore`s, as mongod's (not for an
    /// awaitData cursor, whose `getMore` brings its own wait).
    pub(crate) time_left: Option<Duration>,
    /// The multi-document transaction the cursor was opened in: its end
    /// closes the cursor.
    pub(crate) txn: Option<Arc<storage::Txn>>,
    /// The tally of the command that opened the cursor, which its
    /// streams count their work in: a `getMore` adds what they counted
    /// during it to its own (a collection scan counts in the current
    /// command's directly).
    pub(crate) tally: Arc<doc::catalog::Tally>,
    /// A pipeline's input checks this deadline (`SharedDeadline`): each
    /// `getMore` sets its own.
    pub(crate) read_deadline: Option<Arc<crate::exec::deadline::SharedDeadline>>,
}

/// `showRecordId`'s `$recordId`.
#[derive(Clone)]
pub(crate) enum RecordIds {
    Hidden,
    /// The record id, a long.
    Long,
    /// A clustered collection's: BinData (subtype 0) holding its `_id`
    /// index key, as mongod's record id there is the KeyString of `_id`
    /// (an opaque value to clients; ours is our KeyString's bytes).
    Key(Arc<Collection>),
}

impl CursorState {
    /// A cursor like this one over no source yet (a read that starts
    /// again on another plan).
    pub(crate) fn fresh(&self) -> CursorState {
        CursorState {
            ns: self.ns.clone(),
            source: Source::Buffer(Vec::new().into_iter()),
            projection: self.projection.clone(),
            record_id: self.record_id.clone(),
            remaining: self.remaining,
            last_used: self.last_used,
            tailable: self.tailable,
            await_data: self.await_data,
            tailing: self.tailing.clone(),
            lsid: self.lsid,
            time_left: self.time_left,
            txn: self.txn.clone(),
            tally: self.tally.clone(),
            read_deadline: self.read_deadline.clone(),
        }
    }

    /// Ready to wait between batches: records read ahead hold bytes of
    /// their own, not slices of pages (which would keep the pages in
    /// memory, outside the cache's count, for as long as the cursor
    /// lives).
    pub(crate) fn park(&mut self) {
        match &mut self.source {
            Source::Scan { pending, .. } => pending.iter_mut().for_each(|(_, _, d)| d.detach()),
            Source::Stream { docs, .. } => {
                if let Some(Ok((_, d))) = docs.peek_mut() {
                    d.detach();
                }
            }
            Source::Buffer(hits) => hits.as_mut_slice().iter_mut().for_each(|h| h.doc.detach()),
            Source::Merge(_) => {}
        }
        self.last_used = Instant::now();
    }

    /// A cursor over `source` as it is: no projection, limit or tailing.
    pub(crate) fn of(ns: Namespace, source: Source) -> CursorState {
        CursorState {
            ns,
            source,
            projection: None,
            record_id: RecordIds::Hidden,
            remaining: None,
            last_used: Instant::now(),
            tailable: false,
            await_data: false,
            tailing: None,
            lsid: None,
            time_left: None,
            txn: None,
            tally: Arc::default(),
            read_deadline: None,
        }
    }
}

#[derive(Default)]
pub struct Cursors {
    pub(crate) open: Mutex<HashMap<i64, CursorState>>,
    /// Cursors a `getMore` has out of `open` while it fills a batch, with
    /// their session and whether a kill came meanwhile (then the cursor
    /// is not put back, and the `getMore` fails with CursorKilled).
    pub(crate) busy: Mutex<HashMap<i64, (Option<doc::sessions::SessionId>, bool)>>,
}

/// A cursor out for a `getMore`: leaves `Cursors::busy` when dropped.
pub(crate) struct Busy<'a>(pub(crate) &'a Cursors, pub(crate) i64);

impl Busy<'_> {
    /// Whether the cursor was killed while out.
    pub(crate) fn killed(&self) -> bool {
        self.0.busy.lock().get(&self.1).is_some_and(|b| b.1)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.lock().remove(&self.1);
    }
}

impl Cursors {
    /// Tie an open cursor to the session whose command opened it.
    pub fn bind_session(&self, id: i64, lsid: doc::sessions::SessionId) {
        if let Some(c) = self.open.lock().get_mut(&id) {
            c.lsid = Some(lsid);
        }
    }

    /// Close the cursors of killed sessions (`None`: of every session),
    /// those out for a `getMore` included.
    pub fn kill_sessions(&self, ids: Option<&[doc::sessions::SessionId]>) {
        let killed = |lsid: Option<doc::sessions::SessionId>| match (lsid, ids) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(lsid), Some(ids)) => ids.contains(&lsid),
        };
        self.open.lock().retain(|_, c| !killed(c.lsid));
        for (lsid, dead) in self.busy.lock().values_mut() {
            *dead |= killed(*lsid);
        }
    }

    /// Close the cursors opened in transaction `txn` (at its end).
    pub fn kill_txn(&self, txn: &Arc<storage::Txn>) {
        self.open.lock().retain(|_, c| !c.txn.as_ref().is_some_and(|t| Arc::ptr_eq(t, txn)));
    }

    pub(crate) fn reap(open: &mut HashMap<i64, CursorState>) {
        open.retain(|_, c| c.last_used.elapsed() < Duration::from_secs(cursor_idle_timeout_secs));
    }
}

/// The next match of a cursor's source.
/// The cursor's next hit; `deadline` bounds every document examined on
/// the way, matching or not.
pub(crate) fn next_hit(
    shared: &Ctx<'_>,
    c: &mut CursorState,
    deadline: &Deadline,
) -> Result<Option<Hit>, CommandError> {
    match &mut c.source {
        Source::Buffer(items) => Ok(items.next()),
        Source::Merge(runs) => runs.next(),
        Source::Stream { docs, filter, exact, .. } => loop {
            let Some((rid, doc)) = docs.next().transpose()? else { return Ok(None) };
            deadline.check()?;
            let pos = match filter {
                None => None,
                Some(_) if exact.as_ref().is_some_and(|e| e.vouches(shared)) => None,
                Some(f) => match matches_stored(f, &doc)? {
                    (true, pos) => pos,
                    (false, _) => continue,
                },
            };
            return Ok(Some(Hit { rid, doc, pos }));
        },
        Source::Scan { filter, after, pending, reverse, reader } => loop {
            if pending.is_empty() {
                // Gone, or made a view since the read was planned (a
                // missing namespace is empty): nothing more to read.
                let Some(coll) = shared.collection(&c.ns).filter(|coll| coll.view_on().is_none()) else {
                    return Ok(None);
                };
                pending.extend(coll.natural(reader, after, *reverse, SCAN_CHUNK)?);
                if pending.is_empty() {
                    return Ok(None);
                }
            }
            let (at, rid, d) = pending.pop_front().expect("refilled above");
            *after = at;
            shared.conflicts.tally.examined(0, 1);
            deadline.check()?;
            let (ok, pos) = matches_stored(filter, &d)?;
            if ok {
                return Ok(Some(Hit { rid, doc: d, pos }));
            }
        },
    }
}

/// Pass over the first `skip` hits of a cursor's source.
pub(crate) fn skip_hits(
    shared: &Ctx<'_>,
    c: &mut CursorState,
    skip: usize,
    deadline: &Deadline,
) -> Result<(), CommandError> {
    for _ in 0..skip {
        deadline.check()?;
        if next_hit(shared, c, deadline)?.is_none() {
            break;
        }
    }
    Ok(())
}

/// The direction of `{$natural: n}` (the only key): -1 for a negative n.
pub(crate) fn natural_direction(d: &Document) -> Option<i32> {
    match (d.len(), d.iter().next()) {
        (1, Some((k, v))) if k == "$natural" => {
            let negative = match v {
                Bson::Int32(i) => *i < 0,
                Bson::Int64(i) => *i < 0,
                Bson::Double(f) => *f < 0.0,
                _ => false,
            };
            Some(if negative { -1 } else { 1 })
        }
        _ => None,
    }
}

/// A tailable cursor resumes after the last document it returned; if a
/// capped insert has deleted that document since, documents in between
/// may be gone too, so the cursor dies as MongoDB's does.
/// Documents read ahead are dropped: the next batch reads what is there
/// now.
pub(crate) fn check_tail_position(shared: &Ctx<'_>, c: &mut CursorState) -> Result<(), CommandError> {
    let current = shared.collection(&c.ns);
    let same = match (&c.tailing, &current) {
        (Some(weak), Some(now)) => weak.upgrade().is_some_and(|then| Arc::ptr_eq(&then, now)),
        _ => false,
    };
    if !same {
        return Err(CommandError::query_plan_killed(format!("collection dropped or renamed: {}", c.ns)));
    }
    let Source::Scan { after, pending, .. } = &mut c.source else { return Ok(()) };
    pending.clear();
    // Capped collections are never clustered: positions are record ids.
    let ScanFrom::Record(after) = after else { return Ok(()) };
    let Some(coll) = shared.collection(&c.ns) else { return Ok(()) };
    if coll.get(shared.catalog.engine(), *after)?.is_some() {
        return Ok(());
    }
    Err(CommandError::capped_position_lost(format!(
        "CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId({after})"
    )))
}

impl Cursors {
    /// How long a `getMore` on cursor `id` may wait for inserts at its
    /// end: `maxTimeMS` (default 1 s) for an awaitData cursor.
    pub fn await_data(&self, id: i64, cmd: &Document) -> Option<Duration> {
        let open = self.open.lock();
        open.get(&id).filter(|c| c.await_data)?;
        Some(Deadline::of(cmd).ok().and_then(|d| d.left()).unwrap_or(Duration::from_secs(1)))
    }
}

/// A hit as the client sees it: projected, with `$recordId` if asked; a
/// stored document returned whole stays its stored bytes.
pub(crate) fn render(c: &CursorState, hit: Hit) -> Result<Stored, CommandError> {
    if c.projection.is_none() && matches!(c.record_id, RecordIds::Hidden) {
        return Ok(hit.doc);
    }
    let record_id = match &c.record_id {
        RecordIds::Hidden => None,
        RecordIds::Long => Some(Bson::Int64(hit.rid as i64)),
        RecordIds::Key(coll) => hit.doc.fields(&["_id".to_string()]).map_err(DocError::from)?.get("_id").map(|id| {
            Bson::Binary(bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: coll.id_key(id) })
        }),
    };
    // A projection decodes only the fields it reads.
    let mut d = match &c.projection {
        Some(p) => match p.reads() {
            Some(names) => p.apply(hit.doc.fields(names).map_err(DocError::from)?.as_ref(), hit.pos)?,
            None => p.apply(hit.doc.document().map_err(DocError::from)?, hit.pos)?,
        },
        None => hit.doc.into_document().map_err(DocError::from)?,
    };
    if let Some(record_id) = record_id {
        d.insert("$recordId", record_id);
    }
    Ok(Stored::owned(d))
}

/// Up to `batch` documents from the cursor; `true` when it is exhausted.
pub(crate) fn fill(
    shared: &Ctx<'_>,
    c: &mut CursorState,
    batch: usize,
    deadline: &Deadline,
) -> Result<(Vec<Stored>, bool), CommandError> {
    let want = match c.remaining {
        Some(r) => batch.min(r),
        None => batch,
    };
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while out.len() < want {
        deadline.check()?;
        let Some(hit) = next_hit(shared, c, deadline)? else { return Ok((out, !c.tailable)) };
        let d = render(c, hit)?;
        bytes += d.size();
        out.push(d);
        if let Some(r) = &mut c.remaining {
            *r -= 1;
            if *r == 0 {
                return Ok((out, true));
            }
        }
        // A batch stays well under the 48 MB message limit.
        if bytes >= bson_object_size_max_bytes {
            break;
        }
    }
    read_ahead_interrupted(c)?;
    let exhausted = match &mut c.source {
        Source::Buffer(items) => items.len() == 0,
        Source::Merge(runs) => runs.is_done(),
        Source::Stream { docs, .. } => docs.peek().is_none(),
        Source::Scan { .. } => false,
    };
    Ok((out, exhausted))
}

/// Read a stream's next item ahead (to tell whether it is exhausted);
/// when the command was killed meanwhile, the error is this command's,
/// not kept for the next `getMore`. (Its deadline passed is kept: the
/// cursor's time is spent, and the next `getMore` fails with it, as
/// mongod's, which reads no further than the batch, would fail then.)
fn read_ahead_interrupted(c: &mut CursorState) -> Result<(), CommandError> {
    let Source::Stream { docs, .. } = &mut c.source else { return Ok(()) };
    if docs.peek().is_some_and(|r| r.as_ref().is_err_and(|e| e.code == 11601)) {
        let Some(Err(e)) = docs.next() else { unreachable!("peeked an error") };
        return Err(e.into());
    }
    Ok(())
}

pub(crate) fn register(shared: &Ctx<'_>, mut state: CursorState) -> i64 {
    state.park();
    state.txn = shared.txn().cloned();
    state.tally = shared.conflicts.tally.clone();
    let mut open = shared.cursors.open.lock();
    Cursors::reap(&mut open);
    loop {
        let id = (rand_u64() >> 1) as i64;
        if id != 0 && !open.contains_key(&id) {
            open.insert(id, state);
            return id;
        }
    }
}

/// A random number: each `RandomState` is keyed afresh.
pub(crate) fn rand_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}

/// `{cursor: {<key>: batch, id, ns}, ok: 1}`, written as BSON with each
/// stored document's bytes copied as they were read.
pub(crate) fn cursor_reply(ns: &Namespace, id: i64, key: &str, batch: Vec<Stored>) -> ReplyResult {
    let mut w = doc::bson_bytes::Writer::new();
    let written: Result<(), doc::bson_bytes::EncodeError> = (|| {
        w.open("cursor", false)?;
        w.open(key, true)?;
        for (i, d) in batch.iter().enumerate() {
            match d.bytes() {
                Some(bytes) => w.document_bytes(&i.to_string(), bytes)?,
                None => w.document(&i.to_string(), d.decoded().expect("a Stored without bytes is a document"))?,
            }
        }
        w.close()?;
        w.field("id", &Bson::Int64(id))?;
        w.field("ns", &Bson::String(ns.to_string()))?;
        w.close()?;
        w.field("ok", &Bson::Double(1.0))
    })();
    // A document BSON cannot hold (a field name with a null byte, built by
    // an expression) fails the command.
    written.and_then(|()| w.finish()).map(Reply::Bytes).map_err(|e| CommandError::bad_value(e.to_string()))
}

/// Reply with a first batch, keeping a cursor open for the rest.
pub(crate) fn first_batch(
    shared: &Ctx<'_>,
    mut state: CursorState,
    batch_size: Option<usize>,
    single: bool,
    deadline: &Deadline,
) -> ReplyResult {
    let ns = state.ns.clone();
    let first = batch_size.unwrap_or(FIRST_BATCH_DEFAULT);
    let (batch, done) = if first == 0 && !single {
        // (Parking the cursor reads its first item ahead.)
        read_ahead_interrupted(&mut state)?;
        (Vec::new(), false)
    } else {
        fill(shared, &mut state, first.max(1), deadline)?
    };
    // A tailable cursor whose query finds nothing dies at once, as
    // MongoDB's does.
    let dead = state.tailable && first > 0 && batch.is_empty();
    state.time_left = deadline.left();
    let id = if done || single || dead { 0 } else { register(shared, state) };
    let reply = cursor_reply(&ns, id, "firstBatch", batch);
    // A batch BSON cannot hold fails the command, and its cursor goes.
    if reply.is_err() && id != 0 {
        shared.cursors.open.lock().remove(&id);
    }
    reply
}

/// Reply with the first batch of documents computed up front, keeping a
/// cursor on `ns` open for the rest (`batch_size` 101 by default).
pub(crate) fn buffered_cursor(
    shared: &Ctx<'_>,
    ns: Namespace,
    docs: Vec<Document>,
    batch_size: Option<usize>,
) -> ReplyResult {
    let hits: Vec<Hit> = docs.into_iter().map(|doc| Hit { rid: 0, doc: Stored::owned(doc), pos: None }).collect();
    let state = CursorState::of(ns, Source::Buffer(hits.into_iter()));
    first_batch(shared, state, batch_size, false, &Deadline::none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_comes_from_max_time_ms() {
        let of = |v: Bson| Deadline::of(&bson::doc! { "find": "c", "maxTimeMS": v });
        let left = of(Bson::Int32(5000)).unwrap().left().unwrap();
        assert!(left <= Duration::from_millis(5000) && left > Duration::from_millis(4000));
        assert_eq!(of(Bson::Int64(0)).unwrap().left(), None, "0 means no limit");
        assert_eq!(of(Bson::Double(7.0)).unwrap().left().map(|d| d <= Duration::from_millis(7)), Some(true));
        assert_eq!(of(Bson::String("x".into())).err().map(|e| e.code), Some(2));
        assert_eq!(of(Bson::Int64(-1)).err().map(|e| e.code), Some(2));
        assert_eq!(Deadline::of(&bson::doc! { "find": "c" }).unwrap().left(), None);
    }

    /// A command that panics while it holds the registry (the panic is
    /// caught and answered as InternalError) leaves it usable by the next.
    #[test]
    fn the_cursor_registry_survives_a_panic_while_locked() {
        let cursors = Arc::new(Cursors::default());
        let held = Arc::clone(&cursors);
        let panicked = std::thread::spawn(move || {
            let _guard = held.open.lock();
            panic!("a command fails while it holds the registry");
        })
        .join();
        assert!(panicked.is_err());
        assert!(cursors.open.lock().is_empty(), "the registry is still usable");
        assert!(cursors.busy.lock().is_empty());
    }
}
