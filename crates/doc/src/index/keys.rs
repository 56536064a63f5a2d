//! Index keys of a document, as mongod's B-tree key generator makes them:
//! - a path that reaches a value gives that value; a missing one gives
//!   null (counted as missing, for sparse indexes); a path that continues
//!   past a scalar is missing;
//! - an array met on a path gives one key per element (the rest of the
//!   path applied to each element; an element that is not a document has
//!   none of it); an empty array ending the path gives `undefined`, and
//!   an array inside an array is a key as a whole;
//! - at most one array per document may be expanded: two indexed paths
//!   meeting different arrays are parallel arrays (171) — unless the index
//!   takes parallel arrays (`parallelArrays: true`, our extension): then
//!   the later array is expanded for each element of the earlier one, so
//!   the keys are the cartesian product of the arrays' elements, at most
//!   `KeyRules::parallel_max` of them;
//! - a compound key is the tuple of its fields; equal tuples count once.
//!
//! It also reports, per indexed field, the path components where arrays
//! were met (`multikeyPaths`).
//!
//! Invariant: keys come out in index order (by their KeyString), without
//! duplicates.

use crate::catalog::KeyCollation;
use bson::{Bson, Document};
use std::collections::{BTreeMap, BTreeSet};

/// Two indexed paths met different arrays: mongod's
/// `cannot index parallel arrays [b] [a]` (each the array's field name,
/// the later path's first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelArrays {
    pub later: String,
    pub earlier: String,
}

impl std::fmt::Display for ParallelArrays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot index parallel arrays [{}] [{}]", self.later, self.earlier)
    }
}

/// Why a document has no keys for an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    Parallel(ParallelArrays),
    /// Parallel arrays whose product has more keys than the cap.
    TooMany {
        cap: usize,
    },
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::Parallel(p) => p.fmt(f),
            KeyError::TooMany { cap } => {
                write!(f, "the document's parallel arrays give more than {cap} keys of a parallelArrays index")
            }
        }
    }
}

impl From<ParallelArrays> for KeyError {
    fn from(p: ParallelArrays) -> KeyError {
        KeyError::Parallel(p)
    }
}

/// The keys of one document for one index.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DocKeys {
    /// Each key's KeyString (fields in order, a descending field's bytes
    /// inverted) and its values (`None`: the field is missing, which the
    /// key holds as null), in index order.
    pub keys: BTreeMap<Vec<u8>, KeyValues>,
    /// Per indexed field, the component positions where arrays were met
    /// (0: the first component).
    pub multikey: Vec<BTreeSet<usize>>,
    /// A wildcard index's: the paths where arrays were met.
    pub wildcard_arrays: BTreeSet<String>,
}

impl DocKeys {
    /// Whether any field met an array.
    pub fn is_multikey(&self) -> bool {
        self.multikey.iter().any(|p| !p.is_empty()) || !self.wildcard_arrays.is_empty()
    }
}

/// A key's values, field by field; `None` where the document has no
/// such field (its key holds null; a covered read leaves it out).
pub type KeyValues = Vec<Option<Bson>>;

/// One indexed field: its path split at dots, and its direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    pub path: Vec<String>,
    pub descending: bool,
    /// `"hashed"`: the key holds the value's hash (`hashed.rs`), never an
    /// array's elements (a document with an array there is refused).
    pub hashed: bool,
}

/// Where one field stands while a document is walked.
#[derive(Clone)]
enum Slot<'p> {
    /// Still to find: the rest of its path in `base`, starting at
    /// component `at`.
    Pending {
        base: &'p Document,
        rest: &'p [String],
        at: usize,
    },
    Found(Bson),
    Missing,
}

/// What a path continues into past an element that is not a document.
static EMPTY: std::sync::LazyLock<Document> = std::sync::LazyLock::new(Document::new);

/// How an index turns the values it finds into keys.
#[derive(Clone, Copy)]
pub struct KeyRules<'c> {
    /// No key in which every field is missing.
    pub sparse: bool,
    /// Strings by their sort keys under the index's collation.
    pub collation: Option<&'c dyn KeyCollation>,
    /// `Some(cap)`: parallel arrays give the product of their elements,
    /// at most `cap` keys; `None`: they are refused (171).
    pub parallel_max: Option<usize>,
}

/// The keys `doc` gives the index on `fields` under `rules`.
pub fn doc_keys(doc: &Document, fields: &[KeyField], rules: KeyRules<'_>) -> Result<DocKeys, KeyError> {
    let mut out = DocKeys { multikey: vec![BTreeSet::new(); fields.len()], ..DocKeys::default() };
    let slots: Vec<Slot> = fields.iter().map(|f| Slot::Pending { base: doc, rest: &f.path, at: 0 }).collect();
    walk(slots, fields, rules, &mut out)?;
    Ok(out)
}

/// Resolve every pending slot in its base; expand the one array met, if
/// any (a slot meeting another array waits for the next level, where the
/// index takes parallel arrays).
fn walk<'p>(
    mut slots: Vec<Slot<'p>>,
    fields: &[KeyField],
    rules: KeyRules<'_>,
    out: &mut DocKeys,
) -> Result<(), KeyError> {
    // The array met (by address, so two paths through one array share it),
    // its field name, and the fields that reached it.
    let mut array: Option<(&Vec<Bson>, &str)> = None;
    let mut through_array = Vec::new();
    for (i, slot) in slots.iter_mut().enumerate() {
        let Slot::Pending { base, rest, at } = *slot else { continue };
        // `value` is at component `k`; `positional`: reached through a
        // numeric component naming an array element ("a.0.b"); `holder`
        // is the document component `from` was looked up in.
        let (mut value, mut k, mut positional) = (base.get(&rest[0]), 0, false);
        let (mut holder, mut from) = (base, 0);
        *slot = loop {
            match value {
                None => break Slot::Missing,
                Some(Bson::Array(items)) => {
                    if let Some(at) = rest.get(k + 1).and_then(|c| element_index(c)).filter(|&at| at < items.len()) {
                        value = Some(&items[at]);
                        k += 1;
                        positional = true;
                        continue;
                    }
                    // An array an element position ends at is one key.
                    if positional && k + 1 == rest.len() {
                        break Slot::Found(Bson::Array(items.clone()));
                    }
                    match array {
                        Some((met, _)) if std::ptr::eq(met, items) => {}
                        Some((_, name)) if rules.parallel_max.is_none() => {
                            let (later, earlier) = (rest[k].clone(), name.to_string());
                            return Err(ParallelArrays { later, earlier }.into());
                        }
                        // Expanded for each element of the first array.
                        Some(_) => break Slot::Pending { base: holder, rest: &rest[from..], at: at + from },
                        None => array = Some((items, rest[k].as_str())),
                    }
                    out.multikey[i].insert(at + k);
                    through_array.push(i);
                    break Slot::Pending { base: &EMPTY, rest: &rest[k + 1..], at: at + k + 1 };
                }
                Some(Bson::Document(d)) if k + 1 < rest.len() => {
                    value = d.get(&rest[k + 1]);
                    (holder, from) = (d, k + 1);
                    k += 1;
                    positional = false;
                }
                Some(v) if k + 1 == rest.len() => break Slot::Found(v.clone()),
                // The path goes on past a scalar.
                Some(_) => break Slot::Missing,
            }
        };
    }
    let Some((items, _)) = array else {
        // (A slot waits behind another array only when one was met.)
        emit(&slots, fields, rules, out);
        return match rules.parallel_max {
            Some(cap) if out.keys.len() > cap => Err(KeyError::TooMany { cap }),
            _ => Ok(()),
        };
    };
    if items.is_empty() {
        // An empty array ending a path is `undefined`; a path going on
        // finds nothing in it.
        for &i in &through_array {
            if let Slot::Pending { rest: [], .. } = slots[i] {
                slots[i] = Slot::Found(Bson::Undefined);
            }
        }
        return walk(slots, fields, rules, out);
    }
    for item in items {
        let mut each = slots.clone();
        for &i in &through_array {
            each[i] = match each[i] {
                Slot::Pending { rest: [], .. } => Slot::Found(item.clone()),
                Slot::Pending { rest, at, .. } => {
                    let base = match item {
                        Bson::Document(d) => d,
                        _ => &EMPTY,
                    };
                    Slot::Pending { base, rest, at }
                }
                ref done => done.clone(),
            };
        }
        walk(each, fields, rules, out)?;
    }
    Ok(())
}

/// The element a path component names in an array: a number written
/// canonically ("0", "12"; not "01" or "+1"), as the matcher reads paths
/// too.
pub fn element_index(component: &str) -> Option<usize> {
    let at: usize = component.parse().ok()?;
    (at.to_string() == component).then_some(at)
}

/// Add the key the resolved `slots` make: under a collation, strings
/// as their sort keys (then hashed, for a hashed field).
fn emit(slots: &[Slot], fields: &[KeyField], rules: KeyRules<'_>, out: &mut DocKeys) {
    if rules.sparse && slots.iter().all(|s| matches!(s, Slot::Missing)) {
        return;
    }
    let collated = |v: &Bson| match rules.collation {
        Some(c) => c.key_of(v),
        None => v.clone(),
    };
    let values: KeyValues = slots
        .iter()
        .zip(fields)
        .map(|(s, f)| match s {
            Slot::Found(v) if f.hashed => Some(Bson::Int64(crate::index::hashed::hash64(&collated(v)))),
            Slot::Missing if f.hashed => Some(Bson::Int64(crate::index::hashed::hash64(&Bson::Null))),
            Slot::Found(v) => Some(collated(v)),
            Slot::Missing => None,
            Slot::Pending { .. } => unreachable!("walk resolves every slot before it emits"),
        })
        .collect();
    out.keys.insert(key_string(&values, fields), values);
}

/// The path of `field` in `doc` meets an array (which a hashed field
/// refuses): the first array's path, if any.
pub fn array_on_path(doc: &Document, field: &KeyField) -> Option<String> {
    let mut current = doc;
    for (i, component) in field.path.iter().enumerate() {
        match current.get(component) {
            Some(Bson::Array(_)) => return Some(field.path[..=i].join(".")),
            Some(Bson::Document(d)) => current = d,
            _ => return None,
        }
    }
    None
}

/// The KeyString of a key: each field's encoding, inverted for a
/// descending field (each encoding is prefix-free, so inverting keeps
/// compound keys comparing field by field).
pub fn key_string(values: &[Option<Bson>], fields: &[KeyField]) -> Vec<u8> {
    debug_assert_eq!(values.len(), fields.len());
    let mut out = Vec::new();
    for (v, f) in values.iter().zip(fields) {
        let start = out.len();
        crate::keystring::append(&mut out, v.as_ref().unwrap_or(&Bson::Null));
        if f.descending {
            out[start..].iter_mut().for_each(|b| *b = !*b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    const PLAIN: KeyRules = KeyRules { sparse: false, collation: None, parallel_max: None };
    const SPARSE: KeyRules = KeyRules { sparse: true, collation: None, parallel_max: None };
    const PARALLEL: KeyRules = KeyRules { sparse: false, collation: None, parallel_max: Some(20) };

    fn parallel_keys(d: Document, paths: &[&str]) -> Result<Vec<Vec<Bson>>, KeyError> {
        let keys = doc_keys(&d, &fields(paths), PARALLEL)?.keys;
        Ok(keys.into_values().map(|k| k.into_iter().map(|v| v.unwrap_or(Bson::Null)).collect()).collect())
    }

    /// With parallel arrays taken, different arrays give the product of
    /// their elements; paths through one array stay paired; nested
    /// arrays, empty arrays and positional paths as without; past the cap,
    /// an error and no keys.
    #[test]
    fn parallel_arrays_give_the_product_up_to_the_cap() {
        let b = |v: i32| Bson::Int32(v);
        let got = parallel_keys(doc! { "a": [1, 2], "b": [3, 4, 4] }, &["a", "b"]).unwrap();
        assert_eq!(got, vec![vec![b(1), b(3)], vec![b(1), b(4)], vec![b(2), b(3)], vec![b(2), b(4)]]);
        // Through one array: pairs, not a product.
        let got = parallel_keys(doc! { "a": [{ "x": 1, "y": 2 }, { "x": 3, "y": 4 }] }, &["a.x", "a.y"]).unwrap();
        assert_eq!(got, vec![vec![b(1), b(2)], vec![b(3), b(4)]]);
        // One array paired, one other: the product of pairs and elements.
        let d = doc! { "a": [{ "x": 1, "y": 2 }, { "x": 3, "y": 4 }], "c": [7, 8] };
        assert_eq!(parallel_keys(d, &["a.x", "c", "a.y"]).unwrap().len(), 4);
        // Nested: the later field's array inside the first array's elements.
        let d = doc! { "a": [{ "x": [1, 2] }], "b": [5, 6] };
        let got = parallel_keys(d.clone(), &["a.x", "b"]).unwrap();
        assert_eq!(got, vec![vec![b(1), b(5)], vec![b(1), b(6)], vec![b(2), b(5)], vec![b(2), b(6)]]);
        let multikey = doc_keys(&d, &fields(&["a.x", "b"]), PARALLEL).unwrap().multikey;
        assert_eq!(multikey, vec![BTreeSet::from([0, 1]), BTreeSet::from([0])]);
        // An empty array is `undefined`, whichever comes first.
        let got = parallel_keys(doc! { "a": [], "b": [1, 2] }, &["a", "b"]).unwrap();
        assert_eq!(got, vec![vec![Bson::Undefined, b(1)], vec![Bson::Undefined, b(2)]]);
        // A positional path is not expanded.
        assert_eq!(parallel_keys(doc! { "a": [1, 2], "b": [3, 4] }, &["a.0", "b"]).unwrap().len(), 2);
        // 5 x 4 = 20 keys is the cap; 5 x 5 is past it.
        let five: Vec<i32> = (0..5).collect();
        assert_eq!(parallel_keys(doc! { "a": five.clone(), "b": [1, 2, 3, 4] }, &["a", "b"]).unwrap().len(), 20);
        let err = parallel_keys(doc! { "a": five.clone(), "b": five }, &["a", "b"]).unwrap_err();
        assert_eq!(err, KeyError::TooMany { cap: 20 });
    }

    fn fields(paths: &[&str]) -> Vec<KeyField> {
        paths
            .iter()
            .map(|p| KeyField { path: p.split('.').map(String::from).collect(), descending: false, hashed: false })
            .collect()
    }

    /// The keys as the index holds them (a missing field as null).
    fn keys_of(d: Document, paths: &[&str]) -> Vec<Vec<Bson>> {
        let keys = doc_keys(&d, &fields(paths), PLAIN).unwrap().keys;
        keys.into_values().map(|k| k.into_iter().map(|v| v.unwrap_or(Bson::Null)).collect()).collect()
    }

    #[test]
    fn scalars_missing_fields_and_arrays() {
        assert_eq!(keys_of(doc! { "a": 1 }, &["a"]), vec![vec![Bson::Int32(1)]]);
        assert_eq!(keys_of(doc! { "b": 1 }, &["a"]), vec![vec![Bson::Null]]);
        assert_eq!(keys_of(doc! { "a": [3, 1, 3] }, &["a"]), vec![vec![Bson::Int32(1)], vec![Bson::Int32(3)]]);
        assert_eq!(keys_of(doc! { "a": [] }, &["a"]), vec![vec![Bson::Undefined]]);
        assert_eq!(keys_of(doc! { "a": [[1, 2]] }, &["a"]), vec![vec![bson::bson!([1, 2])]]);
        assert_eq!(keys_of(doc! { "a": [1, { "b": 2 }] }, &["a.b"]), vec![vec![Bson::Null], vec![Bson::Int32(2)]]);
        assert_eq!(keys_of(doc! { "a": 5 }, &["a.b"]), vec![vec![Bson::Null]]);
        assert_eq!(keys_of(doc! { "a": [] }, &["a.b"]), vec![vec![Bson::Null]]);
    }

    #[test]
    fn compound_keys_expand_one_array_and_refuse_parallel_ones() {
        let got = keys_of(doc! { "field1": 2, "field2": ["x", "y", "z"] }, &["field1", "field2"]);
        assert_eq!(got.len(), 3);
        let d = doc! { "field1": [0, 5], "field2": ["x", "y", "z"] };
        let err = doc_keys(&d, &fields(&["field1", "field2"]), PLAIN).unwrap_err();
        assert_eq!(err.to_string(), "cannot index parallel arrays [field2] [field1]");
        // Two paths through one array are not parallel.
        let d = doc! { "a": [{ "b": 1, "c": 2 }, { "b": 3, "c": 4 }] };
        let got = keys_of(d, &["a.b", "a.c"]);
        assert_eq!(got, vec![vec![Bson::Int32(1), Bson::Int32(2)], vec![Bson::Int32(3), Bson::Int32(4)]]);
    }

    /// Positional components name an element (mongod's tests' cases).
    #[test]
    fn numeric_components_name_array_elements() {
        let one = |d: Document, p: &str| keys_of(d, &[p]);
        assert_eq!(one(doc! { "a": [5, 6] }, "a.0"), vec![vec![Bson::Int32(5)]]);
        assert_eq!(one(doc! { "a": [[1]] }, "a.0"), vec![vec![bson::bson!([1])]]);
        assert_eq!(one(doc! { "a": [[1]] }, "a.0.0"), vec![vec![Bson::Int32(1)]]);
        assert_eq!(one(doc! { "a": { "0": 1 } }, "a.0"), vec![vec![Bson::Int32(1)]]);
        assert_eq!(one(doc! { "a": [{ "b": 1 }] }, "a.0.b"), vec![vec![Bson::Int32(1)]]);
        assert_eq!(one(doc! { "a": [{ "b": [1, 2] }] }, "a.0.b"), vec![vec![Bson::Int32(1)], vec![Bson::Int32(2)]]);
        assert_eq!(one(doc! { "a": [] }, "a.0.0"), vec![vec![Bson::Null]]);
        let k = doc_keys(&doc! { "a": [{ "b": [1] }] }, &fields(&["a.0.b"]), PLAIN).unwrap();
        assert_eq!(k.multikey, vec![BTreeSet::from([2])]);
        let k = doc_keys(&doc! { "a": [5, 6] }, &fields(&["a.0"]), PLAIN).unwrap();
        assert!(!k.is_multikey());
    }

    #[test]
    fn multikey_paths_name_where_arrays_were_met() {
        let d = doc! { "obj": [{ "sub1": [1, 2, 3], "sub2": "x" }] };
        let k = doc_keys(&d, &fields(&["obj.sub1", "obj.sub2"]), PLAIN).unwrap();
        assert_eq!(k.multikey, vec![BTreeSet::from([0, 1]), BTreeSet::from([0])]);
        // mongod's GetKeysComplexNestedArrays.
        let d = doc! { "a": [1, { "b": [2, { "c": [3, { "d": 1 }], "e": 4 }, 5, { "f": 6 }], "g": 7 }] };
        let paths = ["a.b.c.d", "a.g", "a.b.f", "a.b.c", "a.b.e"];
        let k = doc_keys(&d, &fields(&paths), PLAIN).unwrap();
        let shown: Vec<String> = k
            .keys
            .values()
            .map(|key| key.iter().map(|v| v.clone().unwrap_or(Bson::Null).to_string()).collect::<Vec<_>>().join(","))
            .collect();
        let mut shown = shown;
        shown.sort();
        let mut want = vec![
            "null,null,null,null,null",
            "null,7,null,null,null",
            "null,7,null,3,4",
            "null,7,6,null,null",
            "1,7,null,{ \"d\": 1 },4",
        ];
        want.sort();
        assert_eq!(shown, want);
        let want_mk: Vec<BTreeSet<usize>> =
            vec![[0, 1, 2].into(), [0].into(), [0, 1].into(), [0, 1, 2].into(), [0, 1].into()];
        assert_eq!(k.multikey, want_mk);
        let d = doc! { "field1": 2, "field2": ["x"] };
        let k = doc_keys(&d, &fields(&["field1", "field2"]), PLAIN).unwrap();
        assert_eq!(k.multikey, vec![BTreeSet::new(), BTreeSet::from([0])]);
    }

    #[test]
    fn sparse_skips_documents_missing_every_field_but_keeps_nulls() {
        assert!(doc_keys(&doc! { "b": 1 }, &fields(&["a"]), SPARSE).unwrap().keys.is_empty());
        assert_eq!(doc_keys(&doc! { "a": null }, &fields(&["a"]), SPARSE).unwrap().keys.len(), 1);
        assert_eq!(doc_keys(&doc! { "a": 1 }, &fields(&["a", "c"]), SPARSE).unwrap().keys.len(), 1);
    }

    #[test]
    fn descending_fields_reverse_their_order_only() {
        let f = vec![
            KeyField { path: vec!["a".into()], descending: false, hashed: false },
            KeyField { path: vec!["b".into()], descending: true, hashed: false },
        ];
        let k = |a: i32, b: &str| key_string(&[Some(Bson::Int32(a)), Some(Bson::String(b.into()))], &f);
        assert!(k(1, "z") < k(2, "a"));
        assert!(k(1, "b") < k(1, "a"));
        assert!(k(1, "ab") < k(1, "a"), "a longer string sorts first descending");
    }
}
