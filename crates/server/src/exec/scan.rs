//! Scans: collection scans, point reads by `_id`, sorted hits (spilling
//! to disk past the memory limit), hints and collations of a read.

use crate::error::CommandError;
use crate::exec::access;
use crate::exec::ctx::Ctx;
use crate::exec::cursors::Source;
use crate::exec::deadline::Deadline;
use crate::exec::views::resolve_view;
use crate::exec::views::stream_over;
use bson::{Bson, Document};
use doc::catalog::{Collection, DocError, Namespace, ScanFrom};
use doc::stored::Stored;
use query::{Collation, Filter, Sort};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Memory a blocking sort may use by default (MongoDB's
/// `internalQueryMaxBlockingSortMemoryUsageBytes`, a server parameter).
pub(crate) const SORT_MEMORY_LIMIT_BYTES: usize = 100 * 1024 * 1024;

/// `internalDocumentSourceGroupMaxMemoryBytes`' default, as mongod's.
pub(crate) const GROUP_MEMORY_LIMIT_BYTES: usize = 100 * 1024 * 1024;

/// Documents read per storage scan call.
pub(crate) const SCAN_CHUNK: usize = 256;

/// A matching document: its record id, and the array position the filter
/// matched at (for positional projections).
pub(crate) struct Hit {
    pub rid: u64,
    pub doc: Stored,
    pub pos: Option<usize>,
}

impl Hit {
    /// A sorted hit's document: one made elsewhere, or decoded for a
    /// spilled run (`sorted_hits`).
    pub(crate) fn sorted(&self) -> &Document {
        self.doc.decoded().expect("a sort compares decoded documents")
    }
}

/// Whether a stored document matches `filter` (and at which array
/// position), decoding only the fields the filter reads.
pub(crate) fn matches_stored(filter: &Filter, d: &Stored) -> Result<(bool, Option<usize>), CommandError> {
    let fields = match filter.reads() {
        Some(names) => d.fields(names),
        None => d.document().map(std::borrow::Cow::Borrowed),
    };
    Ok(filter.try_matches_at(fields.map_err(DocError::from)?.as_ref())?)
}

/// The collection's documents in record-id order, read in chunks; a
/// storage error ends the iteration and is kept in `error`. Owns what it
/// reads with, so a cursor may keep it between batches.
pub(crate) struct ScanIter {
    pub(crate) reader: storage::Reader,
    pub(crate) coll: Option<Arc<Collection>>,
    pub(crate) after: ScanFrom,
    pub(crate) pending: VecDeque<(ScanFrom, u64, Stored)>,
    pub error: Option<DocError>,
}

impl ScanIter {
    pub fn new(shared: &Ctx<'_>, ns: &Namespace) -> ScanIter {
        ScanIter {
            reader: shared.reader(),
            coll: shared.collection(ns),
            after: ScanFrom::Start,
            pending: VecDeque::new(),
            error: None,
        }
    }

    /// The records, a storage error as the last item.
    pub fn results(mut self) -> impl Iterator<Item = Result<(u64, Stored), DocError>> + Send {
        std::iter::from_fn(move || match self.next() {
            Some(record) => Some(Ok(record)),
            None => self.error.take().map(Err),
        })
    }
}

impl Iterator for ScanIter {
    type Item = (u64, Stored);

    fn next(&mut self) -> Option<(u64, Stored)> {
        if self.pending.is_empty() {
            let coll = self.coll.as_ref()?;
            match coll.natural(&self.reader, &self.after, false, SCAN_CHUNK) {
                Ok(chunk) => self.pending.extend(chunk),
                Err(e) => {
                    self.error = Some(e);
                    self.coll = None;
                    return None;
                }
            }
        }
        let (at, rid, d) = self.pending.pop_front()?;
        self.after = at;
        Some((rid, d))
    }
}

/// A sort's matches, sorted, with `skip` and `limit` applied. Keeps only
/// the best `skip + limit` while scanning when there is a limit. Past the
/// sort memory limit it spills sorted runs to disk (`spill.rs`) when
/// `allow_disk_use`, and fails with 292 otherwise.
pub(crate) fn sorted_hits(
    shared: &Ctx<'_>,
    hits: &mut dyn Iterator<Item = Result<Hit, CommandError>>,
    sort: &Sort,
    (skip, limit): (usize, Option<usize>),
    allow_disk_use: bool,
    deadline: &Deadline,
) -> Result<Source, CommandError> {
    let memory_limit = shared.parameters.sort_memory_limit.load(Ordering::Relaxed);
    let keep = limit.map(|l| l.saturating_add(skip));
    let fields = sort.reads();
    let mut buf: Vec<Keyed> = Vec::new();
    let mut bytes = 0usize;
    let mut spilled: Option<crate::exec::spill::Spilled> = None;
    // With a limit, once the best `keep` are known: the last of them. A
    // hit that does not sort before it is passed over, its key alone read.
    let mut worst: Option<Document> = None;
    let by_sort = |a: &Keyed, b: &Keyed| sort.compare(a.key(), b.key());
    for hit in hits {
        deadline.check()?;
        let keyed = Keyed::of(hit?, &fields)?;
        if worst.as_ref().is_some_and(|w| !sort.compare(keyed.key(), w).is_lt()) {
            continue;
        }
        let keyed = keyed.kept();
        bytes += keyed.size();
        buf.push(keyed);
        if let Some(k) = keep {
            if buf.len() >= k.max(512).saturating_mul(2) {
                buf.sort_by(by_sort);
                buf.truncate(k);
                worst = buf.last().filter(|_| buf.len() == k).map(|e| e.key().clone());
                bytes = buf.iter().map(Keyed::size).sum();
            }
        }
        if bytes > memory_limit {
            if !allow_disk_use {
                return Err(CommandError::query_exceeded_memory_limit(format!(
                    "Executor error during find command :: caused by :: Sort exceeded memory limit of {memory_limit} bytes, but did not opt in to external sorting."
                )));
            }
            let runs =
                spilled.get_or_insert_with(|| crate::exec::spill::Spilled::new(&spill_dir(shared), sort.clone()));
            // Sorted and cut by key before the documents are decoded.
            buf.sort_by(by_sort);
            buf.truncate(keep.unwrap_or(usize::MAX));
            let mut run = std::mem::take(&mut buf).into_iter().map(Keyed::decoded).collect::<Result<Vec<_>, _>>()?;
            runs.spill(&mut run, keep)?;
            shared.opcounters.spills.sort_spills.fetch_add(1, Ordering::Relaxed);
            bytes = 0;
        }
    }
    if let Some(mut runs) = spilled {
        let rest = buf.into_iter().map(Keyed::decoded).collect::<Result<Vec<_>, _>>()?;
        runs.finish(rest, skip)?;
        return Ok(Source::Merge(Box::new(runs)));
    }
    buf.sort_by(by_sort);
    let mut out: Vec<Hit> = buf.into_iter().skip(skip).map(|e| e.hit).collect();
    if let Some(l) = limit {
        out.truncate(l);
    }
    Ok(Source::Buffer(out.into_iter()))
}

/// A hit a sort holds: a stored document's sort fields decoded alone
/// (`key`; the hit keeps its bytes, copied off their page once kept, so
/// that the page is not held outside the cache's count), or a document
/// decoded already (made elsewhere, or by a filter that read it whole),
/// its own key.
struct Keyed {
    key: Option<Document>,
    hit: Hit,
}

impl Keyed {
    fn of(hit: Hit, fields: &[String]) -> Result<Keyed, CommandError> {
        if hit.doc.bytes().is_none() {
            return Ok(Keyed { key: None, hit });
        }
        if hit.doc.decoded().is_some() {
            let doc = Stored::owned(hit.doc.into_document().map_err(DocError::from)?);
            return Ok(Keyed { key: None, hit: Hit { doc, ..hit } });
        }
        let key = hit.doc.fields(fields).map_err(DocError::from)?.into_owned();
        Ok(Keyed { key: Some(key), hit })
    }

    /// Kept by the sort: its bytes its own.
    fn kept(mut self) -> Keyed {
        self.hit.doc.detach();
        self
    }

    fn key(&self) -> &Document {
        self.key.as_ref().unwrap_or_else(|| self.hit.sorted())
    }

    /// Memory held, as the sort's limit counts it.
    fn size(&self) -> usize {
        self.hit.doc.size() + self.key.as_ref().map_or(0, doc::bson_bytes::encoded_len)
    }

    /// The hit with its document decoded, as a spilled run holds it.
    fn decoded(self) -> Result<Hit, CommandError> {
        match self.key {
            None => Ok(self.hit),
            Some(_) => {
                Ok(Hit { doc: Stored::owned(self.hit.doc.into_document().map_err(DocError::from)?), ..self.hit })
            }
        }
    }
}

/// Where blocking sorts and groups spill to (`allowDiskUse`).
pub(crate) fn spill_dir(shared: &Ctx<'_>) -> std::path::PathBuf {
    shared.options.dbpath.join("_tmp")
}

/// The hits of `filter` over a whole collection, or over a view's
/// documents.
pub(crate) fn scan_hits<'a>(
    shared: &'a Ctx<'a>,
    ns: &Namespace,
    (filter_doc, filter): (&Document, &'a Filter),
    hint: Option<&Bson>,
    deadline: &'a Deadline,
    op: &crate::exec::call::OpDebug,
) -> Box<dyn Iterator<Item = Result<Hit, CommandError>> + 'a> {
    match resolve_view(shared, ns) {
        Err(e) => return Box::new(std::iter::once(Err(e))),
        Ok(Some((base, stages))) => {
            // The view's documents as its pipeline produces them.
            let pipeline = query::Pipeline::parse(&stages).map(|p| p.with_collation(filter.collation().cloned()));
            let read_deadline = crate::exec::deadline::SharedDeadline::new(deadline);
            let streamed = pipeline
                .map_err(CommandError::from)
                .and_then(|p| stream_over(shared, &base, &p, hint, (op, &read_deadline)));
            return match streamed {
                Err(e) => Box::new(std::iter::once(Err(e))),
                Ok((docs, _)) => Box::new(docs.filter_map(move |doc| {
                    let doc = match doc.map_err(CommandError::from).and_then(|d| deadline.check().map(|()| d)) {
                        Ok(doc) => doc,
                        Err(e) => return Some(Err(e)),
                    };
                    match filter.try_matches_at(&doc) {
                        Ok((ok, pos)) => ok.then_some(Ok(Hit { rid: 0, doc: Stored::owned(doc), pos })),
                        Err(e) => Some(Err(e.into())),
                    }
                })),
            };
        }
        Ok(None) => {}
    }
    let Some(coll) = shared.collection(ns) else { return Box::new(std::iter::empty()) };
    let planned = access::plan_read(&coll, filter_doc, filter.collation(), (false, shared.read_ts()), hint);
    op.note_plan(&planned);
    planned_hits(shared, (ns, &coll), &planned, (filter, None), deadline)
}

/// The hits of `filter` among the records `planned` reads of `coll`
/// (`ns`); a plan from the cache watched by `watch` through its trial.
pub(crate) fn planned_hits<'a>(
    shared: &'a Ctx<'a>,
    (ns, coll): (&Namespace, &Arc<doc::catalog::Collection>),
    planned: &access::Planned<'_>,
    (filter, watch): (&'a Filter, Option<(&Arc<access::TrialWatch>, &Filter)>),
    deadline: &'a Deadline,
) -> Box<dyn Iterator<Item = Result<Hit, CommandError>> + 'a> {
    let mut records = match access::watched_candidates(shared, (ns, coll), planned, Default::default(), watch) {
        Ok(records) => records,
        Err(e) => return Box::new(std::iter::once(Err(e))),
    };
    let mut failed = false;
    Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        for record in records.by_ref() {
            // The deadline bounds every record examined, matching or not.
            let matched = record.map_err(CommandError::from).and_then(|(rid, d)| {
                deadline.check()?;
                let (ok, pos) = matches_stored(filter, &d)?;
                Ok(ok.then_some(Hit { rid, doc: d, pos }))
            });
            match matched {
                Ok(None) => {}
                Ok(Some(hit)) => return Some(Ok(hit)),
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        }
        failed = true;
        None
    }))
}

/// `hint`: an index of the collection (by name or key pattern; the `_id`
/// index by its name, `_id_` or a clustered index's own, or by `{_id:
/// 1}`), or `$natural`. On a view, the index is the base collection's.
pub(crate) fn check_hint(shared: &Ctx<'_>, ns: &Namespace, cmd: &Document) -> Result<(), CommandError> {
    let hint = match cmd.get("hint") {
        None | Some(Bson::Null) => return Ok(()),
        Some(h) => h,
    };
    // A view's reads go to the collection under it, hint and all.
    let coll = resolve_view(shared, ns)?.map_or_else(|| shared.collection(ns), |(base, _)| shared.collection(&base));
    // An index the read's snapshot does not hold whole cannot be hinted
    // (mongod's SnapshotUnavailable).
    let named = |ix: &doc::index::Index| match hint {
        Bson::String(name) => ix.spec.name == *name,
        Bson::Document(d) => crate::exec::index_spec::same_pattern(&ix.spec.key, d),
        _ => false,
    };
    let read_ts = shared.read_ts();
    if coll
        .as_ref()
        .is_some_and(|c| c.indexes().iter().any(|ix| named(ix) && ix.is_ready() && !ix.readable_at(read_ts)))
    {
        return Err(CommandError::with_code(
            246,
            "Unable to read from a snapshot due to pending collection catalog changes; please retry the operation.",
        ));
    }
    // Hidden indexes cannot be hinted (mongod answers BadValue).
    let ready = || {
        let all = coll.as_ref().map(|c| crate::exec::access::ready(c, None)).unwrap_or_default();
        all.into_iter().filter(|ix| !crate::exec::access::is_hidden(ix)).collect::<Vec<_>>()
    };
    let ok = match hint {
        Bson::String(name) => match &coll {
            Some(c) => {
                *name == crate::exec::id_index::id_index_name(c) || ready().iter().any(|ix| ix.spec.name == *name)
            }
            None => name == "_id_",
        },
        Bson::Document(d) => {
            let matched: Vec<_> =
                ready().into_iter().filter(|ix| crate::exec::index_spec::same_pattern(&ix.spec.key, d)).collect();
            if let [first, second, ..] = matched.as_slice() {
                // Indexes of one key pattern and other collations or filters.
                let entry = |ix: &doc::index::Index| {
                    format!(
                        "kp: {} name: '{}'",
                        doc::format::spaced(&Bson::Document(ix.spec.key.clone())),
                        ix.spec.name
                    )
                };
                return Err(CommandError::with_code(
                    27,
                    format!(
                        "error processing query: planner returned error :: caused by :: Hint matched multiple indexes, must hint by index name. Matched: {} and {}",
                        entry(first),
                        entry(second)
                    ),
                ));
            }
            d.is_empty()
                || crate::exec::id_index::is_id_key(d)
                || d.keys().next().is_some_and(|k| k == "$natural")
                || !matched.is_empty()
        }
        _ => false,
    };
    // A wildcard index reads the paths of a predicate, never all of it.
    let hinted = match hint {
        Bson::String(name) => ready().into_iter().find(|ix| ix.spec.name == *name),
        Bson::Document(d) => ready().into_iter().find(|ix| crate::exec::index_spec::same_pattern(&ix.spec.key, d)),
        _ => None,
    };
    // (With min()/max() the hint is refused for those, 51174.)
    let min_max = cmd.contains_key("min") || cmd.contains_key("max");
    if let Some(w) = hinted.as_ref().and_then(|ix| ix.spec.wildcard.as_ref()).filter(|_| !min_max) {
        if !query::plan::wildcard_could_read(&hinted_filter(cmd), w) {
            return Err(CommandError::with_code(
                291,
                "error processing query: planner returned error :: caused by :: $hint: refusing to build whole-index solution, because it's a wildcard index",
            ));
        }
    }
    if ok {
        Ok(())
    } else {
        Err(CommandError::bad_value(
            "error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index",
        ))
    }
}

/// The filter a hinted command reads by: `find`'s `filter`, `count`'s,
/// `distinct`'s and `findAndModify`'s `query`, an update or delete
/// statement's `q`, an aggregate's leading `$match`.
fn hinted_filter(cmd: &Document) -> Document {
    let leading_match = || {
        let first = cmd.get_array("pipeline").ok()?.first()?.as_document()?;
        first.get_document("$match").ok().cloned()
    };
    ["filter", "query", "q"]
        .iter()
        .find_map(|f| cmd.get_document(f).ok().cloned())
        .or_else(leading_match)
        .unwrap_or_default()
}

/// The collation a command (or statement) on `ns` uses: its own
/// `collation`, else the collection's or view's default; `None` for the
/// simple one. A view's default cannot be overridden (167), as in mongod.
pub(crate) fn collation_of(
    shared: &Ctx<'_>,
    ns: &Namespace,
    cmd: &Document,
) -> Result<Option<Arc<Collation>>, CommandError> {
    let entry = shared.collection(ns);
    let default = || entry.as_ref().and_then(|c| Collation::parse(c.options.get("collation")).ok().flatten());
    let given = match cmd.get("collation") {
        // An empty collation is no collation given, as in mongod.
        None | Some(Bson::Null) => return Ok(default()),
        Some(Bson::Document(d)) if d.is_empty() => return Ok(default()),
        given => Collation::parse(given)?,
    };
    if entry.as_ref().is_some_and(|c| c.view_on().is_some()) && !same_collation(given.as_ref(), default().as_ref()) {
        return Err(CommandError::option_not_supported_on_view("Cannot override a view's default collation"));
    }
    Ok(given)
}

/// Whether two collations compare alike (`None`: the simple one).
pub(crate) fn same_collation(a: Option<&Arc<Collation>>, b: Option<&Arc<Collation>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.full_spec() == b.full_spec(),
        _ => false,
    }
}
