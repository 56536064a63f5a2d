//! Wildcard indexes (`{"$**": 1}`, `{"a.b.$**": 1}`), as mongod's
//! wildcard key generator makes their keys: every leaf of the document
//! (under the index's path, or within its `wildcardProjection`) gives a
//! key `(path, value)`, the path the field's dotted path (array positions
//! left out), the value:
//! - a scalar (null included) as it is;
//! - an empty document `{}`, an empty array as `undefined`, an array
//!   inside an array as a whole (not descended);
//! - a non-empty document or array is descended (array elements under
//!   the array's own path, which is then a multikey path).
//!
//! A field whose name holds a dot is skipped; `_id` is left out unless
//! the projection names it. Keys under a collation hold strings as their
//! sort keys (the path never: paths compare binary).
//!
//! The multikey paths (where arrays were met) are kept in the catalog
//! entry (`wildcardMultikeyPaths`), raised as `multikeyPaths` are.

use crate::catalog::KeyCollation;
use bson::{Bson, Document};
use std::collections::{BTreeMap, BTreeSet};

/// Which paths a wildcard index holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Wildcard {
    /// Included (`true`) or excluded paths; `{"a.$**": 1}` includes `a`.
    pub include: bool,
    pub paths: Vec<String>,
    /// `_id` (and paths under it) are held: only when named.
    pub id: bool,
}

impl Wildcard {
    /// The wildcard of a key pattern's only field, `path` (`"$**"` or
    /// `"a.b.$**"`) with its `wildcardProjection`, which the caller checked
    /// (inclusions or exclusions of plain paths, `_id` either way).
    pub fn of(path: &str, projection: Option<&Document>) -> Option<Wildcard> {
        if let Some(prefix) = path.strip_suffix(".$**") {
            return Some(Wildcard { include: true, paths: vec![prefix.to_string()], id: prefix == "_id" });
        }
        if path != "$**" {
            return None;
        }
        let Some(projection) = projection else {
            return Some(Wildcard { include: false, paths: Vec::new(), id: false });
        };
        let on = |v: &Bson| match v {
            Bson::Boolean(b) => *b,
            Bson::Int32(n) => *n != 0,
            Bson::Int64(n) => *n != 0,
            Bson::Double(n) => *n != 0.0,
            _ => true,
        };
        let mut id = None;
        let mut others: Vec<(String, bool)> = Vec::new();
        flatten(projection, "", &on, &mut others);
        others.retain(|(p, v)| {
            if p == "_id" {
                id = Some(*v);
            }
            p != "_id"
        });
        // All inclusions or all exclusions (the caller checked); `_id`
        // alone decides the mode only when nothing else is named.
        let include = others.first().map(|(_, v)| *v).unwrap_or(id == Some(true));
        let mut paths: Vec<String> = others.into_iter().map(|(p, _)| p).collect();
        if include && id == Some(true) {
            paths.push("_id".into());
        }
        Some(Wildcard { include, paths, id: id == Some(true) })
    }

    /// Whether the index holds keys of `path` (a dotted path without
    /// array positions).
    pub fn holds(&self, path: &str) -> bool {
        let under = |q: &String| path == q || path.strip_prefix(q.as_str()).is_some_and(|r| r.starts_with('.'));
        if (path == "_id" || path.starts_with("_id.")) && !self.id {
            return false;
        }
        match self.include {
            true => self.paths.iter().any(under),
            false => !self.paths.iter().any(under),
        }
    }

    /// Whether every path below `path` is held too (no exclusion under
    /// it): a document there has keys for all its leaves.
    pub fn holds_below(&self, path: &str) -> bool {
        let below = |q: &String| q.strip_prefix(path).is_some_and(|r| r.starts_with('.'));
        self.holds(path) && (self.include || !self.paths.iter().any(below))
    }

    /// Whether keys of some path below `path` may be held.
    fn may_descend(&self, path: &str) -> bool {
        self.holds(path)
            || (self.include && self.paths.iter().any(|q| q.strip_prefix(path).is_some_and(|r| r.starts_with('.'))))
    }

    /// The keys of `doc`, `(path, value)` each, and the paths where
    /// arrays were met.
    pub fn keys(
        &self,
        doc: &Document,
        collation: Option<&dyn KeyCollation>,
    ) -> (Vec<(String, Bson)>, BTreeSet<String>) {
        let mut out = Walk { wildcard: self, collation, keys: BTreeMap::new(), arrays: BTreeSet::new() };
        out.document(doc, "");
        (out.keys.into_values().collect(), out.arrays)
    }
}

/// A projection's paths, nested documents flattened (`{a: {b: 1}}` is
/// `a.b`).
fn flatten(projection: &Document, prefix: &str, on: &dyn Fn(&Bson) -> bool, out: &mut Vec<(String, bool)>) {
    for (k, v) in projection {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            Bson::Document(inner) if !inner.is_empty() => flatten(inner, &path, on, out),
            v => out.push((path, on(v))),
        }
    }
}

struct Walk<'w, 'c> {
    wildcard: &'w Wildcard,
    collation: Option<&'c dyn KeyCollation>,
    /// By (path, value) bytes, so equal keys count once, in a stable order.
    keys: BTreeMap<(String, Vec<u8>), (String, Bson)>,
    arrays: BTreeSet<String>,
}

impl Walk<'_, '_> {
    fn document(&mut self, doc: &Document, prefix: &str) {
        for (k, v) in doc {
            if k.contains('.') {
                continue;
            }
            let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            if self.wildcard.may_descend(&path) {
                self.value(v, &path, false);
            }
        }
    }

    fn value(&mut self, v: &Bson, path: &str, in_array: bool) {
        match v {
            Bson::Document(d) if !d.is_empty() => self.document(d, path),
            Bson::Array(items) if in_array => self.emit(path, Bson::Array(items.clone())),
            Bson::Array(items) if items.is_empty() => self.emit(path, Bson::Undefined),
            Bson::Array(items) => {
                // Recorded wherever the walk meets it, held or not: the
                // paths below it (which may be held) are multikey.
                self.arrays.insert(path.to_string());
                for item in items {
                    self.value(item, path, true);
                }
            }
            other => self.emit(path, other.clone()),
        }
    }

    fn emit(&mut self, path: &str, value: Bson) {
        if !self.wildcard.holds(path) {
            return;
        }
        let value = match self.collation {
            Some(c) => c.key_of(&value),
            None => value,
        };
        let id = (path.to_string(), crate::keystring::encode(&value));
        self.keys.insert(id, (path.to_string(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn keys(w: &Wildcard, d: Document) -> Vec<(String, Bson)> {
        w.keys(&d, None).0
    }

    #[test]
    fn leaves_arrays_and_documents_as_mongod_keys_them() {
        let all = Wildcard::of("$**", None).unwrap();
        let d = doc! { "_id": 1, "a": { "b": 1, "c": [2, { "d": 3 }, [4, 5], []] }, "e": {}, "f": [], "g.h": 7 };
        let (k, arrays) = all.keys(&d, None);
        let want = vec![
            ("a.b".to_string(), bson!(1)),
            ("a.c".to_string(), bson!(2)),
            ("a.c".to_string(), bson!([4, 5])),
            ("a.c".to_string(), bson!([])),
            ("a.c.d".to_string(), bson!(3)),
            ("e".to_string(), bson!({})),
            ("f".to_string(), Bson::Undefined),
        ];
        let mut got = k.clone();
        got.sort_by(|x, y| x.0.cmp(&y.0).then_with(|| crate::compare::compare(&x.1, &y.1)));
        let mut want_sorted = want.clone();
        want_sorted.sort_by(|x, y| x.0.cmp(&y.0).then_with(|| crate::compare::compare(&x.1, &y.1)));
        assert_eq!(got, want_sorted);
        assert_eq!(arrays, BTreeSet::from(["a.c".to_string()]));
    }

    #[test]
    fn projections_and_subtrees_choose_the_paths() {
        let sub = Wildcard::of("a.$**", None).unwrap();
        assert_eq!(keys(&sub, doc! { "a": { "x": 1 }, "ab": 2, "b": 3 }), vec![("a.x".to_string(), bson!(1))]);
        let only = Wildcard::of("$**", Some(&doc! { "a.b": 1, "_id": 1 })).unwrap();
        let got = keys(&only, doc! { "_id": 5, "a": { "b": 1, "c": 2 }, "d": 3 });
        assert_eq!(got, vec![("_id".to_string(), bson!(5)), ("a.b".to_string(), bson!(1))]);
        let but = Wildcard::of("$**", Some(&doc! { "a": 0 })).unwrap();
        assert_eq!(keys(&but, doc! { "_id": 5, "a": { "b": 1 }, "d": 3 }), vec![("d".to_string(), bson!(3))]);
        assert!(but.holds("d.e") && !but.holds("a.b") && !but.holds("_id"));
        let nested = Wildcard::of("$**", Some(&doc! { "a": { "b": 1 } })).unwrap();
        assert!(nested.holds("a.b.c") && !nested.holds("a") && !nested.holds("a.c"));
    }
}
