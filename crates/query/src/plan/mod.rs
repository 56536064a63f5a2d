//! The access-path seam: how a read reaches its documents, decided from the
//! parsed request alone. Every read asks here — `find`, `count`,
//! `distinct`, `aggregate` (from its leading `$match`), the update and
//! delete statements (update, delete, findAndModify, bulkWrite) and the
//! point-read fast path — and carries out the answer in
//! `server/exec/access.rs`.
//!
//! The paths: the `_id` index for a filter that pins one `_id`
//! ([`AccessPath::IdPoint`]), a secondary index scan with bounds built by
//! `bounds.rs` ([`AccessPath::IndexScan`]), and the collection scan.
//! Index unions (`$or`, [`AccessPath::Or`]) and intersections of point
//! scans ([`AccessPath::AndSorted`]) are enumerated beside the single
//! scans and raced with them.
//!
//! Invariants:
//! 1. Pure: no I/O, no catalog; the caller states what it knows about the
//!    collection in the [`ReadShape`].
//! 2. Any path returns exactly the documents a collection scan filtered by
//!    the same filter would (the executor still applies the filter); a path
//!    only narrows which documents are looked at.

mod wildcard;

pub use wildcard::{could_read as wildcard_could_read, WildcardInfo};

use crate::bounds::{self, Interval, Leaf};
use bson::{Bson, Document};
use doc::catalog::KeyCollation;
use std::collections::BTreeSet;
use std::sync::Arc;

/// What the planner needs to know about one read.
#[derive(Debug, Clone, Copy)]
pub struct ReadShape<'a, 'i> {
    pub filter: &'a Document,
    /// The read's collation compares strings as the collection's `_id`
    /// index does (both binary, or the same collation).
    pub id_index_collation_matches: bool,
    /// A tailable cursor follows the collection's natural order.
    pub tailable: bool,
    /// The collection's ready secondary indexes.
    pub indexes: &'i [IndexInfo],
    pub hint: Hint,
    /// The fields a projection needs, when it needs nothing else
    /// (`projection_fields`); `None`: the whole document.
    pub projection: Option<&'i [String]>,
    /// `min()` and `max()`: key values (in key-pattern order) the hinted
    /// index's scan starts at and stops before.
    pub min_max: Option<&'i KeyRange>,
    /// The requested order (each path and whether descending), which an
    /// index scan may give without a blocking SORT.
    pub sort: Option<&'i [(String, bool)]>,
}

/// An index scan's own start (included) and end (excluded) keys, each a
/// value per key-pattern field; `None`: the index's first or last key.
pub type KeyRange = (Option<Vec<Bson>>, Option<Vec<Bson>>);

/// A secondary index as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexInfo {
    pub name: String,
    /// Each field's path and whether it is descending.
    pub fields: Vec<(String, bool)>,
    /// Per field, the path components where arrays were met.
    pub multikey: Vec<BTreeSet<usize>>,
    pub sparse: bool,
    pub hidden: bool,
    /// A partial index's `partialFilterExpression`.
    pub partial: Option<Document>,
    /// The position of its `"hashed"` field, if any: bounded only by
    /// equalities (points of their values' hashes), never giving a sort or
    /// covering a read.
    pub hashed: Option<usize>,
    /// Its collation (`None`: binary): it holds strings as their sort
    /// keys under it, so it never covers a read.
    pub collation: Option<IndexCollation>,
    /// The read's collation is the index's (both binary, or the same):
    /// only then may it bound a predicate that compares strings
    /// (`Leaf::collatable`), give a sort, or serve as a partial index.
    pub collation_matches: bool,
    /// A wildcard index's paths (`wildcard.rs`): its `fields` are
    /// `$_path` and the value.
    pub wildcard: Option<WildcardInfo>,
}

impl IndexInfo {
    /// Whether its bounds may take `leaf` (see `collation_matches`).
    fn takes(&self, leaf: &Leaf) -> bool {
        (self.collation_matches || !leaf.collatable())
            && self.wildcard.as_ref().is_none_or(|w| wildcard::takes(&w.paths, leaf))
    }

    fn key_collation(&self) -> Option<&dyn KeyCollation> {
        self.collation.as_ref().map(|c| &*c.0)
    }

    /// A partial index serves the read: their collations match and the
    /// read implies its filter.
    fn partial_serves(&self, conj: &bounds::Conjunction) -> bool {
        self.partial.as_ref().is_none_or(|p| self.collation_matches && implies(conj, p, self.collation.is_none()))
    }
}

/// An index's collation, shown and compared by its full specification.
#[derive(Clone)]
pub struct IndexCollation(pub Arc<dyn KeyCollation>);

impl std::fmt::Debug for IndexCollation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.full_spec())
    }
}

impl PartialEq for IndexCollation {
    fn eq(&self, other: &Self) -> bool {
        self.0.full_spec() == other.0.full_spec()
    }
}

/// A `hint` the caller resolved against the collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hint {
    #[default]
    None,
    /// `{$natural: ±1}`.
    Natural { reverse: bool },
    /// The secondary index at this position of `ReadShape::indexes`.
    Index(usize),
}

/// How to reach the documents of a read.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessPath<'a> {
    /// At most one document: the `_id` index entry of this value.
    IdPoint(&'a Bson),
    /// Every document, in natural order (reversed when `reverse`).
    CollScan { reverse: bool },
    /// The entries of one secondary index within bounds, their documents
    /// fetched.
    IndexScan(IndexScan),
    /// A top-level `$or`, each branch by its own index scan: the union of
    /// their records, each once (mongod's OR stage).
    Or(Vec<IndexScan>),
    /// Index intersection (mongod's AND_SORTED): scans of different
    /// indexes, each over one point per field, so each returns its record
    /// ids in order; the records all of them hold, fetched, with
    /// `fetch_filter` (what no scan answers exactly) on FETCH.
    AndSorted { scans: Vec<IndexScan>, fetch_filter: Option<Document> },
}

/// A scan of one secondary index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexScan {
    /// Its position in `ReadShape::indexes`.
    pub index: usize,
    /// Per index field, its ordered intervals.
    pub bounds: Vec<Vec<Interval>>,
    /// What the bounds do not answer exactly: FETCH's filter in explain.
    pub fetch_filter: Option<Document>,
    /// The index alone answers the read (PROJECTION_COVERED): the bounds
    /// are exact and the index holds every projected field, on no
    /// multikey path; no document is fetched.
    pub covered: bool,
    /// `min()`/`max()`: the scan runs between these keys instead of
    /// `bounds` (which are then every key), the whole filter on FETCH.
    pub key_range: Option<KeyRange>,
    /// The scan reads the index from its last key to its first.
    pub reverse: bool,
    /// The scan returns documents in the read's requested sort order
    /// (no blocking SORT stage).
    pub sorted: bool,
    /// A wildcard index's scan: the path it reads (`$_path`).
    pub wildcard_path: Option<String>,
}

/// The fields an inclusion projection of plain paths needs (`_id`
/// among them unless excluded); `None` for any other projection.
pub fn projection_fields(projection: &Document) -> Option<Vec<String>> {
    let mut fields = Vec::new();
    let mut id = true;
    for (k, v) in projection {
        let on = match v {
            Bson::Boolean(b) => *b,
            Bson::Int32(n) => *n != 0,
            Bson::Int64(n) => *n != 0,
            Bson::Double(d) => *d != 0.0,
            _ => return None,
        };
        if k.starts_with('$') || k.contains(".$") {
            return None;
        }
        match (k.as_str(), on) {
            ("_id", false) => id = false,
            (_, false) => return None,
            _ => fields.push(k.clone()),
        }
    }
    if id && !fields.iter().any(|f| f == "_id") {
        fields.push("_id".to_string());
    }
    (!fields.is_empty()).then_some(fields)
}

/// Choose the access path of `shape`.
pub fn plan<'a>(shape: &ReadShape<'a, '_>) -> AccessPath<'a> {
    plan_among(shape).0
}

/// [`plan`], and when it chose among unhinted index candidates, the
/// other candidates (those on other indexes or paths, then intersections,
/// then an `$or` by its branches), best first.
pub fn plan_among<'a>(shape: &ReadShape<'a, '_>) -> (AccessPath<'a>, Vec<AccessPath<'a>>) {
    let none = Vec::new();
    let scan = AccessPath::CollScan { reverse: false };
    if shape.tailable {
        return (scan, none);
    }
    match shape.hint {
        Hint::Natural { reverse } => return (AccessPath::CollScan { reverse }, none),
        // A wildcard index reads one path; with none to read (or with
        // min/max), which the server refuses before, every document.
        Hint::Index(i) if shape.indexes[i].wildcard.is_some() => {
            let path = match (shape.min_max, wildcard::paths(shape, i).first()) {
                (None, Some(path)) => AccessPath::IndexScan(wildcard::scan(shape, i, path)),
                _ => scan,
            };
            return (path, none);
        }
        Hint::Index(i) => {
            let path = AccessPath::IndexScan(match shape.min_max {
                Some(range) => min_max_scan(shape, i, range),
                None => index_scan(shape, i),
            });
            return (path, none);
        }
        Hint::None => {}
    }
    if let Some(id) = id_point(shape.filter, shape.id_index_collation_matches) {
        return (AccessPath::IdPoint(id), none);
    }
    let found = candidates(shape);
    // (Read from the candidates before they are moved into the plans.)
    let intersected = intersections(shape, &found);
    let mut found_scans = found.into_iter();
    match found_scans.next() {
        Some(best) => {
            let mut others: Vec<AccessPath<'a>> = found_scans
                .filter(|c| (c.index, &c.wildcard_path) != (best.index, &best.wildcard_path))
                .map(AccessPath::IndexScan)
                .collect();
            others.extend(intersected);
            // (Only a filter with a top-level `$or` or `$and` has an `$or`
            // in its conjunction.)
            if shape.filter.contains_key("$or") || shape.filter.contains_key("$and") {
                others.extend(or_plan(shape).map(AccessPath::Or));
            }
            (AccessPath::IndexScan(best), others)
        }
        None => (or_plan(shape).map_or(scan, AccessPath::Or), none),
    }
}

/// The index intersections mongod considers (AND_SORTED; its hash
/// intersection is off by default): pairs of candidate scans of different
/// indexes, each over one point per field (so each returns its record
/// ids in order), whose bounds use disjoint predicates of the filter.
fn intersections<'a>(shape: &ReadShape<'_, '_>, found: &[IndexScan]) -> Vec<AccessPath<'a>> {
    let points = |s: &IndexScan| {
        s.wildcard_path.is_none() && s.key_range.is_none() && s.bounds.iter().all(|f| f.len() == 1 && f[0].is_point())
    };
    let mut seen = BTreeSet::new();
    let indexes: Vec<usize> = found.iter().filter(|s| points(s) && seen.insert(s.index)).map(|s| s.index).collect();
    if indexes.len() < 2 {
        return Vec::new();
    }
    // Each point scan once per index, with the predicates it uses and
    // those it answers.
    let conj = bounds::conjunction(shape.filter);
    let parts: Vec<_> =
        indexes.into_iter().map(|i| index_scan_parts(shape, i, &conj)).filter(|(scan, ..)| points(scan)).collect();
    let mut out = Vec::new();
    for (i, (a, a_uses, a_answers)) in parts.iter().enumerate() {
        for (b, b_uses, b_answers) in &parts[i + 1..] {
            if a_uses.iter().zip(b_uses).any(|(x, y)| *x && *y) {
                continue;
            }
            let answered: Vec<bool> = a_answers.iter().zip(b_answers).map(|(x, y)| *x || *y).collect();
            let child = |s: &IndexScan| IndexScan { covered: false, sorted: false, reverse: false, ..s.clone() };
            out.push(AccessPath::AndSorted {
                scans: vec![child(a), child(b)],
                fetch_filter: residual(&conj, &answered),
            });
        }
    }
    out
}

/// An `$or` of the filter's top-level conjunction answered branch by
/// branch, when every branch has an index scan (the best ranked); none
/// when a branch has none, as then every document must be read anyway.
fn or_plan(shape: &ReadShape<'_, '_>) -> Option<Vec<IndexScan>> {
    let conj = bounds::conjunction(shape.filter);
    let branches = conj.others.iter().find_map(|d| match d.get("$or") {
        Some(Bson::Array(items)) if d.len() == 1 && items.len() > 1 => Some(items),
        _ => None,
    })?;
    // The branches in canonical order, as mongod plans them.
    let mut branches: Vec<&Document> = branches.iter().map(Bson::as_document).collect::<Option<_>>()?;
    branches.sort_by_cached_key(|b| canonical_rank(&parsed_query(b)));
    let mut scans = Vec::with_capacity(branches.len());
    for filter in branches {
        let sub = ReadShape { filter, projection: None, sort: None, hint: Hint::None, min_max: None, ..*shape };
        let mut scan = candidates(&sub).into_iter().next()?;
        scan.covered = false;
        scans.push(scan);
    }
    Some(scans)
}

/// The index scans that could answer `shape` unhinted, best first: an
/// index is a candidate when a predicate bounds its leading field (never
/// a hidden one; a sparse one only when such a predicate needs a value
/// there, so every matching document is in the index). Ranked by how many leading
/// fields are pinned to points, then fewer fields; the executor races
/// them when there are several (`server/exec/access.rs`).
pub fn candidates(shape: &ReadShape<'_, '_>) -> Vec<IndexScan> {
    let conj = bounds::conjunction(shape.filter);
    let mut out: Vec<IndexScan> = (0..shape.indexes.len())
        .filter(|&i| {
            let ix = &shape.indexes[i];
            let leading = |l: &&Leaf| {
                l.path == ix.fields[0].0
                    && ix.takes(l)
                    && (ix.hashed != Some(0) || matches!(l.op, bounds::Op::Eq | bounds::Op::In))
            };
            !ix.hidden
                && ix.wildcard.is_none()
                && conj.leaves.iter().any(|l| leading(&l))
                && (!ix.sparse || conj.leaves.iter().filter(leading).any(Leaf::needs_value))
                && ix.partial_serves(&conj)
        })
        .map(|i| index_scan(shape, i))
        .collect();
    // A wildcard index: one scan per path it could read.
    for i in 0..shape.indexes.len() {
        let ix = &shape.indexes[i];
        if ix.wildcard.is_some() && !ix.hidden && ix.partial_serves(&conj) {
            out.extend(wildcard::paths(shape, i).iter().map(|p| wildcard::scan(shape, i, p)));
        }
    }
    // A sort no bounded scan gives: every index that gives it, scanned
    // whole (mongod adds these even without a predicate on them).
    if shape.sort.is_some() && !out.iter().any(|s| s.sorted) {
        for i in 0..shape.indexes.len() {
            let ix = &shape.indexes[i];
            if ix.hidden || ix.sparse || ix.wildcard.is_some() || !ix.partial_serves(&conj) {
                continue;
            }
            let scan = whole_scan(shape, i);
            if scan.sorted {
                out.push(scan);
            }
        }
    }
    let pinned = |s: &IndexScan| s.bounds.iter().take_while(|f| f.iter().all(Interval::is_point)).count();
    out.sort_by_key(|s| (std::cmp::Reverse(pinned(s)), !s.sorted, shape.indexes[s.index].fields.len()));
    out
}

/// Index `i` scanned whole, the filter on FETCH, in the order of the
/// read's sort when the index gives it.
fn whole_scan(shape: &ReadShape<'_, '_>, i: usize) -> IndexScan {
    let ix = &shape.indexes[i];
    let bounds: Vec<Vec<Interval>> = ix.fields.iter().map(|_| vec![Interval::all()]).collect();
    let parsed = parsed_query(shape.filter);
    scan_within(shape, i, bounds, (!parsed.is_empty()).then_some(parsed))
}

/// The scan of index `i` within `bounds`, `fetch_filter` on FETCH: in the
/// read's order when the index gives it, covered when it can be.
fn scan_within(
    shape: &ReadShape<'_, '_>,
    i: usize,
    bounds: Vec<Vec<Interval>>,
    fetch_filter: Option<Document>,
) -> IndexScan {
    let ix = &shape.indexes[i];
    let order = sort_order(shape, ix, &bounds);
    let covered = fetch_filter.is_none() && covers(ix, shape.projection) && sort_covered(shape, ix, order);
    IndexScan {
        index: i,
        bounds,
        fetch_filter,
        covered,
        key_range: None,
        reverse: order == Some(true),
        sorted: order.is_some(),
        wildcard_path: None,
    }
}

/// Whether a covered read's documents can be sorted: the index gives the
/// order, or holds every sort field (on no multikey path) for a
/// blocking SORT over them.
fn sort_covered(shape: &ReadShape<'_, '_>, ix: &IndexInfo, order: Option<bool>) -> bool {
    let fields: Option<Vec<String>> = shape.sort.map(|s| s.iter().map(|(p, _)| p.clone()).collect());
    order.is_some() || fields.is_none_or(|f| covers(ix, Some(&f)))
}

/// Whether `ix` holds every field of `projection` on no multikey path
/// and no numeric component (`a.0` may name an array element, which a
/// document made from the key would show as a field), as given (no
/// collation's sort keys).
fn covers(ix: &IndexInfo, projection: Option<&[String]>) -> bool {
    ix.collation.is_none()
        && projection.is_some_and(|fields| {
            fields.iter().all(|p| {
                !p.split('.').any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
                    && ix
                        .fields
                        .iter()
                        .position(|(f, _)| f == p)
                        .is_some_and(|at| ix.multikey[at].is_empty() && ix.hashed != Some(at))
            })
        })
}

/// Whether a scan of `ix` within `bounds` returns documents in the
/// read's sort order, and then whether backwards, as mongod decides
/// (`IndexScanNode`'s provided sorts): the sort's fields follow the key
/// pattern in order, each in the pattern's direction (or each reversed),
/// leaving out fields the bounds pin to one value. Only under binary
/// comparison, never over a hashed field or numeric path components.
///
/// A multikey field gives its order only when its bounds are every key
/// and no other multikey field under the same top-level field is
/// bounded: the scan, which returns each document once, then meets a
/// document first at its lowest value (backwards: its highest), the
/// value a sort orders it by. Otherwise a multikey field pinned to one
/// value is passed over (the sort may not name it), and any other ends
/// the order the index gives. Two sort fields under one multikey
/// top-level field give no order.
fn sort_order(shape: &ReadShape<'_, '_>, ix: &IndexInfo, bounds: &[Vec<Interval>]) -> Option<bool> {
    let sort = shape.sort.filter(|s| !s.is_empty())?;
    if !ix.collation_matches || ix.hashed.is_some() {
        return None;
    }
    let numeric = |path: &str| path.split('.').any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()));
    let point = |f: usize| bounds[f].len() == 1 && bounds[f][0].is_point();
    let full = |f: usize| bounds[f].len() == 1 && bounds[f][0].is_all();
    let multikey = |f: usize| !ix.multikey[f].is_empty();
    let top = |f: usize| ix.fields[f].0.split('.').next().unwrap_or_default();
    let orders =
        |f: usize| full(f) && !(0..ix.fields.len()).any(|g| g != f && multikey(g) && !full(g) && top(g) == top(f));
    // The fields whose order the scan gives, in key pattern order.
    let mut given: Vec<usize> = Vec::new();
    for f in 0..ix.fields.len() {
        if numeric(&ix.fields[f].0) {
            break;
        }
        match (multikey(f), point(f)) {
            (true, _) if orders(f) => given.push(f),
            (true, true) => {}
            (true, false) => break,
            (false, _) => given.push(f),
        }
    }
    // The sort's fields, but those pinned by the bounds on a field that
    // is not multikey, must be the given fields in order, passing over
    // given fields pinned to a point.
    let pinned_at = |f: usize| point(f) && !multikey(f);
    let pinned = |path: &str| (0..ix.fields.len()).any(|f| ix.fields[f].0 == path && pinned_at(f));
    let mut given = given.into_iter().peekable();
    let mut reverse = None;
    // The top-level fields of the multikey fields the sort uses: a
    // document meets the scan at its lowest key as a whole, where a sort
    // takes each field's lowest value, so two sort fields in one array
    // could disagree.
    let mut arrays: Vec<&str> = Vec::new();
    for (want, want_desc) in sort.iter().filter(|(p, _)| !pinned(p)) {
        let f = loop {
            let f = given.next()?;
            if ix.fields[f].0 == *want {
                break f;
            }
            if !pinned_at(f) {
                return None;
            }
        };
        if multikey(f) {
            if arrays.contains(&top(f)) {
                return None;
            }
            arrays.push(top(f));
        }
        let backwards = *want_desc != ix.fields[f].1;
        if *reverse.get_or_insert(backwards) != backwards {
            return None;
        }
    }
    Some(reverse.unwrap_or(false))
}

/// Whether every document the query's conjunction matches also matches
/// a partial index's filter `partial`, so the index holds them all: each
/// of the filter's predicates is implied by one of the query's on the
/// same path (a tighter or equal bound of the same type, an equality
/// inside an `$in`), and anything else appears in the query as written.
///
/// `binary`: strings compare binary (else only equal values imply each
/// other: a collation orders strings otherwise).
pub fn implies(query: &bounds::Conjunction, partial: &Document, binary: bool) -> bool {
    let needed = bounds::conjunction(partial);
    // A leaf inside one of the filter's `$elemMatch`es is implied by the
    // same `$elemMatch` only (checked with the groups).
    let leaves_implied = needed
        .leaves
        .iter()
        .filter(|n| n.group.is_none())
        .all(|need| query.leaves.iter().any(|have| leaf_implies(have, need, binary)));
    let others_implied = needed
        .others
        .iter()
        .chain(needed.groups.iter().map(|(_, d)| d))
        .all(|need| query.others.contains(need) || query.groups.iter().any(|(_, d)| d == need));
    leaves_implied && others_implied
}

/// Whether the query predicate `have` implies `need` (same path); an
/// order between strings only when they compare `binary`.
fn leaf_implies(have: &Leaf, need: &Leaf, binary: bool) -> bool {
    use bounds::Op::*;
    use doc::compare::{canonical_type, compare};
    use std::cmp::Ordering::*;
    if have.path != need.path {
        return false;
    }
    let same_type = |a: &Bson, b: &Bson| canonical_type(a) == canonical_type(b);
    let ordered = |v: &Bson| binary || !bounds::collatable(v);
    let cmp =
        |a: &Bson, b: &Bson| same_type(a, b).then(|| compare(a, b)).filter(|o| o.is_eq() || (ordered(a) && ordered(b)));
    let in_list = |v: &Bson, list: &Bson| match list {
        Bson::Array(items) => items.iter().any(|i| compare(i, v).is_eq()),
        _ => false,
    };
    match (need.op, have.op) {
        (Exists, _) => have.needs_value(),
        (Type, Type) => match (bounds::type_codes(&have.value), bounds::type_codes(&need.value)) {
            (Some(h), Some(n)) => h.iter().all(|c| n.contains(c)),
            _ => false,
        },
        (Eq, Eq) => cmp(&have.value, &need.value) == Some(Equal),
        (In, Eq) => in_list(&have.value, &need.value),
        (In, In) => match &have.value {
            Bson::Array(items) => items.iter().all(|i| in_list(i, &need.value)),
            _ => false,
        },
        (Gt, Eq | Gt) => {
            matches!(cmp(&have.value, &need.value), Some(Greater))
                || (have.op == Gt && cmp(&have.value, &need.value) == Some(Equal))
        }
        (Gt, Gte) => cmp(&have.value, &need.value) == Some(Greater),
        (Gte, Eq | Gt | Gte) => matches!(cmp(&have.value, &need.value), Some(Greater | Equal)),
        (Lt, Eq | Lt) => {
            matches!(cmp(&have.value, &need.value), Some(Less))
                || (have.op == Lt && cmp(&have.value, &need.value) == Some(Equal))
        }
        (Lt, Lte) => cmp(&have.value, &need.value) == Some(Less),
        (Lte, Eq | Lt | Lte) => matches!(cmp(&have.value, &need.value), Some(Less | Equal)),
        _ => false,
    }
}

/// The scan of index `i` with the bounds `shape`'s filter gives it.
fn index_scan(shape: &ReadShape<'_, '_>, i: usize) -> IndexScan {
    index_scan_parts(shape, i, &bounds::conjunction(shape.filter)).0
}

/// The scan of index `i` for `shape` (whose filter's conjunction is
/// `conj`), with the conjunction's leaves its bounds use and those they
/// answer exactly.
fn index_scan_parts(
    shape: &ReadShape<'_, '_>,
    i: usize,
    conj: &bounds::Conjunction,
) -> (IndexScan, Vec<bool>, Vec<bool>) {
    let ix = &shape.indexes[i];
    // Leaves its collation cannot take stay for FETCH from the start.
    let untaken: Vec<bool> = conj.leaves.iter().map(|l| !ix.takes(l)).collect();
    let mut used = untaken.clone();
    let collation = ix.key_collation();
    // The leaves the bounds answer exactly (FETCH need not test them).
    let mut answered = vec![false; conj.leaves.len()];
    let single_sparse = ix.sparse && ix.fields.len() == 1;
    let mut field_bounds = Vec::with_capacity(ix.fields.len());
    // The multikey prefixes of the fields bounded so far, each with the
    // `$elemMatch` group their predicates came from.
    let mut bounded: Vec<(String, Option<usize>)> = Vec::new();
    for (f, (path, _)) in ix.fields.iter().enumerate() {
        let parts: Vec<&str> = path.split('.').collect();
        let prefixes: Vec<String> =
            ix.multikey[f].iter().map(|&at| parts[..=at.min(parts.len() - 1)].join(".")).collect();
        // A numeric component may name an array element, whose key is
        // then the element whole (an inner array as one key) while the
        // query compares inside it: no bounds on such a path.
        let positional = parts.iter().any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()));
        let mut intervals = vec![Interval::all()];
        if ix.hashed == Some(f) {
            // Points of the equalities' hashes; never exact (hashes collide).
            for (l, leaf) in conj.leaves.iter().enumerate() {
                if used[l] || leaf.path != *path || leaf.group.is_some() {
                    continue;
                }
                if let Some(points) = bounds::hashed_intervals(leaf, collation) {
                    intervals = if intervals.iter().all(Interval::is_all) {
                        points
                    } else {
                        bounds::intersect(&intervals, &points)
                    };
                    used[l] = true;
                }
            }
        } else if !positional {
            let chosen = field_leaves(conj, &used, path, &prefixes, &bounded);
            for (n, &l) in chosen.iter().enumerate() {
                let leaf = &conj.leaves[l];
                let leaf_bounds = bounds::intervals_under(leaf, collation);
                intervals = if n == 0 { leaf_bounds } else { bounds::intersect(&intervals, &leaf_bounds) };
                used[l] = true;
                // A complement on a multikey field holds the keys of
                // arrays that also hold the excluded value.
                let negated = matches!(leaf.op, bounds::Op::Ne | bounds::Op::Nin);
                answered[l] = (leaf.exact_on(collation.is_some()) && (prefixes.is_empty() || !negated))
                    || (leaf.op == bounds::Op::Exists && single_sparse);
            }
            let group = chosen
                .first()
                .and_then(|&l| conj.leaves[l].group)
                .filter(|&g| chosen.iter().all(|&l| conj.leaves[l].group == Some(g)));
            if !chosen.is_empty() {
                bounded.extend(prefixes.into_iter().map(|p| (p, group)));
            }
        }
        field_bounds.push(intervals);
    }
    let uses = used.iter().zip(&untaken).map(|(u, t)| *u && !*t).collect();
    let fetch_filter = residual(conj, &answered);
    (scan_within(shape, i, field_bounds, fetch_filter), uses, answered)
}

/// Whether the `$elemMatch` at `group_path` holds one element of the
/// array at `prefix` (so predicates inside it meet one key together).
fn within(group_path: &str, prefix: &str) -> bool {
    group_path == prefix || group_path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.'))
}

/// The leaves (positions in `conj.leaves`, canonical order) that bound
/// the index field at `path`, whose multikey prefixes are `prefixes`,
/// after the fields bounded so far (`bounded`), as mongod's rules allow:
/// - under a multikey prefix an earlier bounded field shares, the keys
///   of one document do not pair up: only a leaf of the `$elemMatch`
///   that bounded it, on that prefix or below, may compound;
/// - a multikey field takes its first leaf, intersected only with the
///   leaves of the same `$elemMatch` when no array lies below it;
/// - a field that is not multikey intersects every leaf.
fn field_leaves(
    conj: &bounds::Conjunction,
    used: &[bool],
    path: &str,
    prefixes: &[String],
    bounded: &[(String, Option<usize>)],
) -> Vec<usize> {
    let group_path = |g: Option<usize>| g.map(|g| conj.groups[g].0.as_str());
    let usable = |l: &Leaf| {
        bounded
            .iter()
            .filter(|(p, _)| prefixes.contains(p))
            .all(|(p, g)| l.group.is_some() && l.group == *g && group_path(l.group).is_some_and(|gp| within(gp, p)))
    };
    let multikey = !prefixes.is_empty();
    let mut out: Vec<usize> = (0..conj.leaves.len())
        .filter(|&l| {
            let leaf = &conj.leaves[l];
            !used[l] && leaf.path == path && usable(leaf) && (!multikey || leaf.multikey_safe())
        })
        .collect();
    if multikey && !out.is_empty() {
        let first = conj.leaves[out[0]].group;
        let whole = group_path(first).is_some_and(|gp| prefixes.iter().all(|p| within(gp, p)));
        let mut n = 0;
        out.retain(|&l| {
            n += 1;
            n == 1 || (whole && conj.leaves[l].group == first)
        });
    }
    out
}

/// A `min()`/`max()` scan of index `i`: every key between them, the
/// whole filter applied after FETCH.
fn min_max_scan(shape: &ReadShape<'_, '_>, i: usize, range: &KeyRange) -> IndexScan {
    let all = shape.indexes[i].fields.iter().map(|_| vec![Interval::all()]).collect();
    let parsed = parsed_query(shape.filter);
    let fetch_filter = (!parsed.is_empty()).then_some(parsed);
    IndexScan {
        index: i,
        bounds: all,
        fetch_filter,
        covered: false,
        key_range: Some(range.clone()),
        reverse: false,
        sorted: false,
        wildcard_path: None,
    }
}

/// The FETCH filter: what the bounds do not answer (the leaves not
/// `answered`, the other children and every `$elemMatch`), one child as
/// itself, several under `$and`.
fn residual(conj: &bounds::Conjunction, answered: &[bool]) -> Option<Document> {
    let mut children: Vec<Document> = (conj.groups.iter().map(|(_, d)| d.clone()))
        .chain(conj.leaves.iter().zip(answered).filter(|(l, a)| !**a && l.group.is_none()).map(|(l, _)| l.as_filter()))
        .collect();
    children.extend(conj.others.iter().map(normalized_other));
    // mongod's canonical order: by match type, then path (stable).
    children.sort_by_cached_key(canonical_rank);
    match children.len() {
        0 => None,
        1 => children.pop(),
        _ => Some(bson::doc! { "$and": children.into_iter().map(Bson::Document).collect::<Vec<_>>() }),
    }
}

/// A conjunction child bounds cannot use, as parsed: an `$or`'s branches
/// each in parsed form, in canonical order.
fn normalized_other(other: &Document) -> Document {
    match other.get("$or") {
        Some(Bson::Array(branches)) if other.len() == 1 => {
            let mut parsed: Vec<Document> =
                branches.iter().map(|b| b.as_document().map_or_else(Document::new, parsed_query)).collect();
            parsed.sort_by_cached_key(canonical_rank);
            bson::doc! { "$or": parsed.into_iter().map(Bson::Document).collect::<Vec<_>>() }
        }
        _ => other.clone(),
    }
}

/// Where a filter child sorts in mongod's canonical order: its match
/// type's place (AND, OR, ELEM_MATCH_OBJECT, ELEM_MATCH_VALUE, SIZE, EQ,
/// LTE, LT, GT, GTE, REGEX, MOD, EXISTS, MATCH_IN, BITS_*, NOT, NOR,
/// TYPE_OPERATOR, GEO, WHERE, EXPRESSION, others), then its path.
fn canonical_rank(child: &Document) -> (u8, String) {
    let Some((key, value)) = child.iter().next() else { return (0, String::new()) };
    let rank = match key.as_str() {
        "$and" => 0,
        "$or" => 1,
        "$nor" => 19,
        "$where" => 22,
        "$expr" => 23,
        k if k.starts_with('$') => 30,
        _ => match value {
            Bson::Document(cond) => match cond.keys().next().map(String::as_str) {
                Some("$elemMatch") => match cond.get_document("$elemMatch") {
                    Ok(arg) if bounds::is_value_form(arg) => 3,
                    _ => 2,
                },
                Some("$size") => 4,
                Some("$eq") => 5,
                Some("$lte") => 6,
                Some("$lt") => 7,
                Some("$gt") => 8,
                Some("$gte") => 9,
                Some("$regex") => 10,
                Some("$mod") => 11,
                Some("$exists") => 12,
                Some("$in") => 13,
                Some("$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear") => 14,
                Some("$not" | "$ne" | "$nin") => 18,
                Some("$type") => 20,
                Some("$geoWithin" | "$geoIntersects" | "$near" | "$nearSphere") => 21,
                Some("$all") => 0,
                _ => 5,
            },
            Bson::RegularExpression(_) => 10,
            _ => 5,
        },
    };
    (rank, key.clone())
}

/// A read's shape, as the plan cache keys it: the filter's paths and
/// operators in canonical order without their values, and the projected
/// fields.
pub fn shape(filter: &Document, projection: Option<&[String]>, sort: Option<&[(String, bool)]>) -> String {
    let conj = bounds::conjunction(filter);
    let mut out = String::new();
    for l in &conj.leaves {
        out.push_str(&format!("{}:{:?};", l.path, l.op));
    }
    for o in conj.groups.iter().map(|(_, d)| d).chain(&conj.others) {
        out.push_str(&shape_of_other(o));
        out.push(';');
    }
    if let Some(fields) = projection {
        out.push_str(&format!("|{}", fields.join(",")));
    }
    if let Some(sort) = sort {
        let keys: Vec<String> = sort.iter().map(|(p, d)| format!("{p}:{}", if *d { -1 } else { 1 })).collect();
        out.push_str(&format!("|sort {}", keys.join(",")));
    }
    out
}

/// A non-indexable child's shape: its keys, nested, without values.
fn shape_of_other(d: &Document) -> String {
    d.iter()
        .map(|(k, v)| match v {
            Bson::Document(inner) => format!("{k}{{{}}}", shape_of_other(inner)),
            Bson::Array(items) => format!(
                "{k}[{}]",
                items
                    .iter()
                    .map(|i| i.as_document().map(shape_of_other).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            _ => k.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The filter as explain's `parsedQuery` shows it: leaves in canonical
/// order, several under `$and`.
pub fn parsed_query(filter: &Document) -> Document {
    let conj = bounds::conjunction(filter);
    residual(&conj, &vec![false; conj.leaves.len()]).unwrap_or_default()
}

/// The `_id` an unhinted read of `filter` looks up alone (a point read):
/// an `_id` equality, whose value the `_id` index finds (a string only
/// under the index's own collation).
pub fn id_point(filter: &Document, id_index_collation_matches: bool) -> Option<&Bson> {
    crate::Filter::id_equality(filter).filter(|id| id_index_collation_matches || !holds_string(id))
}

fn holds_string(v: &Bson) -> bool {
    match v {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(d) => d.values().any(holds_string),
        Bson::Array(items) => items.iter().any(holds_string),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn check(filter: Document, matches: bool, tailable: bool) -> String {
        let shape = ReadShape {
            filter: &filter,
            id_index_collation_matches: matches,
            tailable,
            indexes: &[],
            hint: Hint::None,
            projection: None,
            min_max: None,
            sort: None,
        };
        format!("{:?}", plan(&shape))
    }

    fn index(name: &str, fields: &[&str], multikey: &[&[usize]]) -> IndexInfo {
        IndexInfo {
            name: name.into(),
            fields: fields.iter().map(|f| (f.to_string(), false)).collect(),
            multikey: multikey.iter().map(|m| m.iter().copied().collect()).collect(),
            sparse: false,
            hidden: false,
            partial: None,
            hashed: None,
            collation: None,
            collation_matches: true,
            wildcard: None,
        }
    }

    #[test]
    fn a_partial_index_serves_only_queries_that_imply_its_filter() {
        let q = |f: Document| bounds::conjunction(&f);
        let partial = doc! { "status": "active", "age": { "$gt": 18 } };
        assert!(implies(&q(doc! { "status": "active", "age": { "$gte": 30 } }), &partial, true));
        assert!(implies(&q(doc! { "status": "active", "age": 19, "x": 1 }), &partial, true));
        assert!(!implies(&q(doc! { "status": "active", "age": { "$gte": 18 } }), &partial, true));
        assert!(!implies(&q(doc! { "age": { "$gte": 30 } }), &partial, true));
        assert!(!implies(&q(doc! { "status": "active", "age": { "$gt": "30" } }), &partial, true), "another type");
        let exists = doc! { "a": { "$exists": true } };
        assert!(implies(&q(doc! { "a": { "$lt": 3 } }), &exists, true));
        assert!(!implies(&q(doc! { "b": { "$lt": 3 } }), &exists, true));
        // Under a collation strings order otherwise: only equal ones imply.
        let named = doc! { "name": { "$gt": "m" } };
        assert!(implies(&q(doc! { "name": { "$gt": "n" } }), &named, true));
        assert!(!implies(&q(doc! { "name": { "$gt": "n" } }), &named, false));
        assert!(implies(&q(doc! { "name": { "$gt": "m" } }), &named, false));
        assert!(implies(&q(doc! { "n": { "$gt": 5 } }), &doc! { "n": { "$gt": 1 } }, false));
    }

    /// A plain unhinted read of `filter` over `indexes`.
    fn shape_over<'a, 'i>(filter: &'a Document, indexes: &'i [IndexInfo]) -> ReadShape<'a, 'i> {
        ReadShape {
            filter,
            id_index_collation_matches: true,
            tailable: false,
            indexes,
            hint: Hint::None,
            projection: None,
            min_max: None,
            sort: None,
        }
    }

    fn shown(filter: Document, ix: IndexInfo) -> (Vec<Vec<String>>, Option<Document>) {
        let indexes = [ix];
        let AccessPath::IndexScan(s) = plan(&shape_over(&filter, &indexes)) else {
            panic!("no index scan for {filter}")
        };
        (s.bounds.iter().map(|f| f.iter().map(|i| i.shown(false)).collect()).collect(), s.fetch_filter)
    }

    /// An index of another collation than the read's takes only the
    /// predicates that compare no strings; it never gives a sort.
    #[test]
    fn an_index_of_another_collation_bounds_no_strings() {
        let mut ix = index("a", &["a"], &[&[]]);
        ix.collation_matches = false;
        let indexes = [ix];
        let strings = doc! { "a": "x" };
        assert_eq!(plan(&shape_over(&strings, &indexes)), AccessPath::CollScan { reverse: false });
        let numbers = doc! { "a": { "$gt": 5 } };
        assert!(matches!(plan(&shape_over(&numbers, &indexes)), AccessPath::IndexScan(_)));
        let both = doc! { "a": { "$gt": 5, "$ne": "x" } };
        let AccessPath::IndexScan(s) = plan(&shape_over(&both, &indexes)) else { panic!("no index scan") };
        assert_eq!(s.fetch_filter, Some(doc! { "a": { "$not": { "$eq": "x" } } }));
        let sort = [("a".to_string(), false)];
        let sorted = ReadShape { sort: Some(&sort), ..shape_over(&numbers, &indexes) };
        let AccessPath::IndexScan(s) = plan(&sorted) else { panic!("no index scan") };
        assert!(!s.sorted);
    }

    /// The bounds of `multikey-bounds.md`, step by step.
    #[test]
    fn multikey_bounds_as_mongodb_builds_them() {
        let q = doc! { "field1": { "$gt": 1, "$lt": 3 } };
        let (b, f) = shown(q.clone(), index("f", &["field1", "field2"], &[&[], &[0]]));
        assert_eq!(b, vec![vec!["(1, 3)"], vec!["[MinKey, MaxKey]"]]);
        assert_eq!(f, None);
        let (b, f) = shown(q, index("f", &["field1", "field2"], &[&[0], &[0]]));
        assert_eq!(b, vec![vec!["[-inf.0, 3)"], vec!["[MinKey, MaxKey]"]]);
        assert_eq!(f, Some(doc! { "field1": { "$gt": 1 } }));
        let q = doc! { "obj.sub1": { "$gt": 1 }, "obj.sub2": { "$lt": 3 } };
        let (b, _) = shown(q.clone(), index("o", &["obj.sub1", "obj.sub2"], &[&[1], &[]]));
        assert_eq!(b, vec![vec!["(1, inf.0]"], vec!["[-inf.0, 3)"]]);
        let (b, f) = shown(q, index("o", &["obj.sub1", "obj.sub2"], &[&[0, 1], &[0]]));
        assert_eq!(b, vec![vec!["(1, inf.0]"], vec!["[MinKey, MaxKey]"]]);
        assert_eq!(f, Some(doc! { "obj.sub2": { "$lt": 3 } }));
    }

    /// Predicates inside one `$elemMatch` meet one array element: their
    /// bounds intersect on a multikey field and compound under the
    /// group's path; the `$elemMatch` itself stays on FETCH.
    #[test]
    fn elem_match_bounds_as_mongodb_builds_them() {
        let q = doc! { "field1": { "$elemMatch": { "$gt": 1, "$lt": 3 } } };
        let (b, f) = shown(q.clone(), index("f", &["field1", "field2"], &[&[0], &[0]]));
        assert_eq!(b, vec![vec!["(1, 3)"], vec!["[MinKey, MaxKey]"]]);
        assert_eq!(f, Some(q));
        let q = doc! { "obj": { "$elemMatch": { "sub1": { "$gt": 1 }, "sub2": { "$lt": 3 } } } };
        let mk = index("o", &["obj.sub1", "obj.sub2"], &[&[0, 1], &[0]]);
        let (b, f) = shown(q.clone(), mk.clone());
        assert_eq!(b, vec![vec!["(1, inf.0]"], vec!["[-inf.0, 3)"]]);
        assert_eq!(f, Some(q));
        // Two predicates on a path with an array below the `$elemMatch`
        // may be met by different elements of it: the first one only.
        let q = doc! { "obj": { "$elemMatch": { "sub1": { "$gt": 1, "$lt": 3 } } } };
        let (b, _) = shown(q, mk.clone());
        assert_eq!(b, vec![vec!["[-inf.0, 3)"], vec!["[MinKey, MaxKey]"]]);
        // An `$elemMatch` on a deeper path than the shared array does not
        // pair the fields' keys.
        let q = doc! { "obj.sub1": { "$elemMatch": { "$gt": 1 } }, "obj.sub2": { "$lt": 3 } };
        let (b, f) = shown(q, mk);
        assert_eq!(b, vec![vec!["(1, inf.0]"], vec!["[MinKey, MaxKey]"]]);
        assert_eq!(
            f,
            Some(doc! { "$and": [{ "obj.sub1": { "$elemMatch": { "$gt": 1 } } }, { "obj.sub2": { "$lt": 3 } }] })
        );
    }

    #[test]
    fn an_or_is_read_by_its_branches_indexes_when_each_has_one() {
        let indexes = [index("a_1", &["a"], &[&[]]), index("b_1", &["b"], &[&[]])];
        let plan_of = |filter: Document| match plan(&shape_over(&filter, &indexes)) {
            AccessPath::Or(scans) => format!("Or{:?}", scans.iter().map(|s| s.index).collect::<Vec<_>>()),
            AccessPath::IndexScan(s) => format!("Ix{}", s.index),
            other => format!("{other:?}"),
        };
        assert_eq!(plan_of(doc! { "$or": [{ "a": 1 }, { "b": { "$gt": 2 } }] }), "Or[0, 1]");
        // The branches in canonical order (by path here), as mongod plans them.
        assert_eq!(plan_of(doc! { "x": 1, "$or": [{ "b": 1 }, { "a": 2 }] }), "Or[0, 1]");
        assert_eq!(
            parsed_query(&doc! { "x": 1, "$or": [{ "b": { "$gt": 1 } }, { "b": 0 }, { "a": 2 }] }),
            doc! { "$and": [{ "$or": [{ "a": { "$eq": 2 } }, { "b": { "$eq": 0 } }, { "b": { "$gt": 1 } }] }, { "x": { "$eq": 1 } }] }
        );
        assert_eq!(plan_of(doc! { "$or": [{ "a": 1 }, { "x": 2 }] }), "CollScan { reverse: false }");
        // Equalities on one path: one `$in`, one scan; one branch: itself.
        assert_eq!(plan_of(doc! { "$or": [{ "b": 1 }, { "b": 3 }] }), "Ix1");
        assert_eq!(
            parsed_query(&doc! { "$or": [{ "b": 3 }, { "b": { "$in": [1, 3] } }] }),
            doc! { "b": { "$in": [1, 3] } }
        );
        assert_eq!(parsed_query(&doc! { "$or": [{ "b": { "$gt": 3 } }] }), doc! { "b": { "$gt": 3 } });
        // A predicate on an indexed field outside the `$or` wins.
        assert_eq!(plan_of(doc! { "a": 1, "$or": [{ "b": 1 }, { "x": 3 }] }), "Ix0");
    }

    #[test]
    fn intersections_pair_point_scans_over_disjoint_predicates() {
        let indexes =
            [index("a_1", &["a"], &[&[]]), index("b_1", &["b"], &[&[]]), index("a_1_b_1", &["a", "b"], &[&[], &[]])];
        let ands = |filter: Document, among: &[IndexInfo]| -> Vec<(Vec<usize>, Option<Document>)> {
            plan_among(&shape_over(&filter, among))
                .1
                .into_iter()
                .filter_map(|p| match p {
                    AccessPath::AndSorted { scans, fetch_filter } => {
                        Some((scans.iter().map(|s| s.index).collect(), fetch_filter))
                    }
                    _ => None,
                })
                .collect()
        };
        // Two single-field indexes, each pinned: one intersection, its
        // FETCH filter what neither answers.
        assert_eq!(ands(doc! { "a": 1, "b": 2 }, &indexes[..2]), vec![(vec![0, 1], None)]);
        assert_eq!(
            ands(doc! { "a": 1, "b": 2, "c": { "$gt": 3 } }, &indexes[..2]),
            vec![(vec![0, 1], Some(doc! { "c": { "$gt": 3 } }))]
        );
        // A range is no point: its scan's ids come in key order.
        assert!(ands(doc! { "a": 1, "b": { "$gt": 2 } }, &indexes[..2]).is_empty());
        assert!(ands(doc! { "a": { "$in": [1, 2] }, "b": 2 }, &indexes[..2]).is_empty());
        // The compound index bounds both predicates: nothing to pair it with.
        assert_eq!(ands(doc! { "a": 1, "b": 2 }, &indexes), vec![(vec![0, 1], None)]);
    }

    #[test]
    fn an_id_equality_is_a_point_read() {
        assert_eq!(check(doc! { "_id": 5 }, true, false), "IdPoint(Int32(5))");
        assert_eq!(check(doc! { "_id": "a" }, true, false), "IdPoint(String(\"a\"))");
        assert_eq!(check(doc! { "_id": 1.5 }, false, false), "IdPoint(Double(1.5))");
    }

    #[test]
    fn anything_else_scans() {
        assert_eq!(check(doc! { "_id": { "$gt": 5 } }, true, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": 5, "a": 1 }, true, false), "CollScan { reverse: false }");
        // A document `_id` is matched by a scan (`Filter::id_equality`).
        assert_eq!(check(doc! { "_id": { "x": 1 } }, true, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": 5 }, true, true), "CollScan { reverse: false }");
    }

    /// Under another collation than the index's, a string `_id` may equal
    /// keys the index holds apart (or the reverse): scan.
    #[test]
    fn a_string_id_under_another_collation_scans() {
        assert_eq!(check(doc! { "_id": "a" }, false, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": ["a"] }, false, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": 1 }, false, false), "IdPoint(Int32(1))");
    }
}
