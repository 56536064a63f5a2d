//! Sorting documents as MongoDB does: by each field's sort key, which for
//! an array is its smallest element ascending and its largest descending;
//! a missing field sorts as null, and an empty array as undefined (below
//! null, above MinKey), as mongod's sort keys and index keys both have it.

use crate::collation::Collation;
use crate::context::EvalContext;
use crate::error::{err, FilterError};
use crate::matcher::walk;
use bson::{Bson, Document};
use doc::format;
use std::cmp::Ordering;
use std::sync::Arc;

/// A parsed sort specification (`{a: 1, "b.c": -1}`).
#[derive(Debug, Clone, Default)]
pub struct Sort {
    /// Each path and whether it is descending.
    fields: Vec<(String, bool)>,
    /// Strings compare through it (`None`: binary).
    collation: Option<Arc<Collation>>,
}

impl Sort {
    pub fn parse(spec: &Document) -> Result<Sort, FilterError> {
        let mut fields = Vec::new();
        for (path, dir) in spec {
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return Err(err(2, "FieldPath field names may not be empty strings."));
            }
            let desc = match dir {
                Bson::Int32(1) | Bson::Int64(1) => false,
                Bson::Int32(-1) | Bson::Int64(-1) => true,
                Bson::Double(d) if *d == 1.0 => false,
                Bson::Double(d) if *d == -1.0 => true,
                Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                    return Err(err(15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)"))
                }
                Bson::Document(d) if d.contains_key("$meta") => {
                    return Err(err(238, "$meta sort keys are not supported yet: text search is not built"))
                }
                other => {
                    return Err(err(
                        15974,
                        format!("Illegal key in $sort specification: {}", format::field(path, other)),
                    ))
                }
            };
            fields.push((path.clone(), desc));
        }
        Ok(Sort { fields, collation: None })
    }

    /// This sort with strings compared through `collation`.
    pub fn with_collation(mut self, collation: Option<Arc<Collation>>) -> Sort {
        self.collation = collation;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Each path and whether it is descending.
    pub fn fields(&self) -> &[(String, bool)] {
        &self.fields
    }

    /// The top-level fields the sort keys are read from.
    pub fn reads(&self) -> Vec<String> {
        let mut reads = Some(Vec::new());
        self.fields.iter().for_each(|(path, _)| crate::reads::note(&mut reads, path));
        reads.unwrap_or_default()
    }

    /// The order of two documents.
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        let cx = EvalContext::new(self.collation.as_deref());
        for (path, desc) in &self.fields {
            let o = cx.compare(&sort_key(a, path, *desc, &cx), &sort_key(b, path, *desc, &cx));
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// Sort `docs` in place (stable, so equal keys keep their order).
    pub fn sort(&self, docs: &mut [Document]) {
        docs.sort_by(|a, b| self.compare(a, b));
    }
}

/// A field's sort key (an empty array's is undefined, as its index key).
fn sort_key(d: &Document, path: &str, desc: bool, cx: &EvalContext) -> Bson {
    let mut best: Option<Bson> = None;
    let mut offer = |k: Bson| {
        let better = match &best {
            None => true,
            Some(cur) => {
                let o = cx.compare(&k, cur);
                if desc {
                    o == Ordering::Greater
                } else {
                    o == Ordering::Less
                }
            }
        };
        if better {
            best = Some(k);
        }
    };
    walk(d, path, None, &mut |v, _| match v {
        None => offer(Bson::Null),
        Some(Bson::Array(items)) if items.is_empty() => offer(Bson::Undefined),
        Some(Bson::Array(items)) => items.iter().for_each(|i| offer(i.clone())),
        Some(v) => offer(v.clone()),
    });
    best.unwrap_or(Bson::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn sorted(spec: Document, docs: Vec<Document>) -> Vec<i32> {
        let mut docs = docs;
        Sort::parse(&spec).unwrap().sort(&mut docs);
        docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
    }

    #[test]
    fn arrays_sort_by_smallest_ascending_and_largest_descending() {
        let docs = vec![
            doc! { "_id": 1, "a": [1, 9] },
            doc! { "_id": 2, "a": 5 },
            doc! { "_id": 3 },
            doc! { "_id": 4, "a": [] },
            doc! { "_id": 5, "a": "x" },
        ];
        assert_eq!(sorted(doc! { "a": 1 }, docs.clone()), vec![4, 3, 1, 2, 5]);
        assert_eq!(sorted(doc! { "a": -1 }, docs.clone()), vec![5, 1, 2, 3, 4]);
        // An empty array sorts as undefined: above MinKey.
        let mut with_min = docs;
        with_min.push(doc! { "_id": 6, "a": Bson::MinKey });
        assert_eq!(sorted(doc! { "a": 1 }, with_min), vec![6, 4, 3, 1, 2, 5]);
    }

    #[test]
    fn compound_and_dotted() {
        let docs = vec![
            doc! { "_id": 1, "a": 1, "b": { "c": 2 } },
            doc! { "_id": 2, "a": 1, "b": { "c": 1 } },
            doc! { "_id": 3, "a": 0, "b": { "c": 9 } },
        ];
        assert_eq!(sorted(doc! { "a": -1, "b.c": 1 }, docs), vec![2, 1, 3]);
    }

    #[test]
    fn bad_specs() {
        assert_eq!(Sort::parse(&doc! { "a": 2 }).unwrap_err().code, 15975);
        assert_eq!(Sort::parse(&doc! { "a": "x" }).unwrap_err().code, 15974);
    }
}
