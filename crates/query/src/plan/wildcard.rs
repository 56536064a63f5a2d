//! Planning over a wildcard index (`doc::index::wildcard`): mongod
//! expands it into one index per queried path `p` the index holds, keys
//! `($_path, p)`, and scans it with `$_path` pinned to `p` and the value
//! bounded as an index on `p` would be (multikey where the index met
//! arrays on `p`'s prefixes).
//!
//! A wildcard index holds no key for a missing field or for a document
//! (it descends into documents), so it serves no predicate a missing
//! field or a document could satisfy: null, `$exists: false`, `$ne`,
//! `$nin`, equality to a non-empty document or array, `$type: "array"`.
//! Where the value bounds reach documents (`$exists: true`, `$type:
//! "object"`), the scan also reads every path below `p` (`["p.",
//! "p/")`), every value, and leaves the whole filter to FETCH.

use super::*;
use doc::index::wildcard::Wildcard;

/// A wildcard index as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct WildcardInfo {
    pub paths: Wildcard,
    /// The paths where the index met arrays.
    pub multikey: BTreeSet<String>,
}

impl IndexInfo {
    /// A wildcard index as it is for `path`: fields `($_path, path)`,
    /// multikey where it met arrays on `path`'s prefixes (how it is
    /// scanned and explained).
    pub fn expanded(&self, path: &str) -> IndexInfo {
        let w = self.wildcard.as_ref().expect("a wildcard index");
        let parts: Vec<&str> = path.split('.').collect();
        let at = (0..parts.len()).filter(|&k| w.multikey.contains(&parts[..=k].join("."))).collect();
        IndexInfo {
            fields: vec![("$_path".to_string(), false), (path.to_string(), self.fields[1].1)],
            multikey: vec![BTreeSet::new(), at],
            ..self.clone()
        }
    }
}

/// Whether a wildcard index holding `paths` can bound `leaf`: as
/// `serves`, and a leaf a document with keys only below its path could
/// match (`$exists`, `$type: "object"`) only where nothing below is left
/// out of the index.
pub(super) fn takes(paths: &Wildcard, leaf: &Leaf) -> bool {
    let reaches_documents = match leaf.op {
        bounds::Op::Exists => true,
        bounds::Op::Type => bounds::type_codes(&leaf.value).is_some_and(|codes| codes.contains(&3)),
        _ => false,
    };
    serves(leaf) && (!reaches_documents || paths.holds_below(&leaf.path))
}

/// Whether a wildcard index can bound `leaf` (see the module).
pub(super) fn serves(leaf: &Leaf) -> bool {
    use bounds::Op;
    let filled = |v: &Bson| match v {
        Bson::Document(d) => !d.is_empty(),
        Bson::Array(a) => !a.is_empty(),
        _ => false,
    };
    match (leaf.op, &leaf.value) {
        (Op::Eq, v) => !matches!(v, Bson::Null | Bson::RegularExpression(_)) && !filled(v),
        (Op::Lt | Op::Lte | Op::Gt | Op::Gte, v) => {
            !matches!(v, Bson::Null | Bson::Document(_) | Bson::Array(_) | Bson::MinKey | Bson::MaxKey)
        }
        (Op::In, Bson::Array(items)) => !items.iter().any(|i| matches!(i, Bson::Null) || filled(i)),
        (Op::Regex | Op::Exists, _) => true,
        (Op::Type, v) => bounds::type_codes(v).is_some_and(|codes| !codes.contains(&4)),
        _ => false,
    }
}

/// Whether a wildcard index holding `paths` could read some path of
/// `filter` (a hint of it must, as mongod refuses a whole-index scan).
pub fn could_read(filter: &Document, paths: &Wildcard) -> bool {
    let conj = bounds::conjunction(filter);
    conj.leaves.iter().any(|l| !positional(&l.path) && paths.holds(&l.path) && takes(paths, l))
}

/// A path with a numeric component, which may name an array position
/// (not read through a wildcard index here).
fn positional(path: &str) -> bool {
    path.split('.').any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
}

/// The paths of `shape`'s filter a wildcard index `i` could scan for,
/// in the filter's canonical order.
pub(super) fn paths(shape: &ReadShape<'_, '_>, i: usize) -> Vec<String> {
    let ix = &shape.indexes[i];
    let Some(w) = &ix.wildcard else { return Vec::new() };
    let conj = bounds::conjunction(shape.filter);
    let mut out: Vec<String> = Vec::new();
    for l in &conj.leaves {
        if !positional(&l.path) && w.paths.holds(&l.path) && ix.takes(l) && !out.contains(&l.path) {
            out.push(l.path.clone());
        }
    }
    out
}

/// The scan of wildcard index `i` for `path`.
pub(super) fn scan(shape: &ReadShape<'_, '_>, i: usize, path: &str) -> IndexScan {
    let ix = &shape.indexes[i];
    let indexes = [ix.expanded(path)];
    let sub = ReadShape { indexes: &indexes, hint: Hint::None, projection: None, min_max: None, ..*shape };
    let mut scan = index_scan(&sub, 0);
    scan.index = i;
    scan.wildcard_path = Some(path.to_string());
    scan.covered = false;
    scan.bounds[0] = vec![Interval::point(Bson::String(path.to_string()))];
    let documents = Interval {
        low: Bson::Document(Document::new()),
        low_inclusive: true,
        high: Bson::Array(Vec::new()),
        high_inclusive: false,
    };
    if !bounds::intersect(&scan.bounds[1], &[documents]).is_empty() {
        // Documents are not keys: every path below, every value.
        scan.bounds[0].push(Interval {
            low: Bson::String(format!("{path}.")),
            low_inclusive: true,
            high: Bson::String(format!("{path}/")),
            high_inclusive: false,
        });
        scan.bounds[1] = vec![Interval::all()];
        let parsed = parsed_query(shape.filter);
        scan.fetch_filter = (!parsed.is_empty()).then_some(parsed);
        scan.sorted = false;
        scan.reverse = false;
    }
    scan
}
