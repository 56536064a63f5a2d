//! The evaluation context: what matching a filter, evaluating an
//! expression, sorting or applying an update reads besides the document
//! and its parsed tree. It is passed down the call chain as a parameter
//! (`cx`), so nothing is carried on the side.
//!
//! Invariants:
//! 1. Each public entry point builds its own context from its own
//!    collation (`Filter::matches_at`, `Sort::compare`, `Update::apply`,
//!    `Pipeline::stream`; `Expression::eval`, `Projection::apply`,
//!    `UpdatePipeline::apply` and `ElementFilter::matches` with none): a
//!    context never leaks from one call into another. A filter run for
//!    another (an update's array filters) uses its own collation, not its
//!    caller's.
//! 2. Strings compare through the context's collation wherever they sit
//!    (alone, in arrays, in documents: `Collation::compare`), or binary
//!    without one.
//! 3. The `$expr` error slot keeps the first error an `$expr` met while
//!    one filter matched one document (matching itself cannot fail);
//!    only matching fills it, and only `Filter::try_matches_at` reads it.

use crate::collation::Collation;
use crate::error::FilterError;
use bson::Bson;
use std::cell::Cell;
use std::cmp::Ordering;

/// One evaluation's context: made by an entry point, lent to everything
/// below it.
pub(crate) struct EvalContext<'a> {
    /// Strings compare through it (`None`: binary).
    collation: Option<&'a Collation>,
    /// The first error an `$expr` met (invariant 3).
    expr_error: Cell<Option<FilterError>>,
}

impl<'a> EvalContext<'a> {
    pub(crate) fn new(collation: Option<&'a Collation>) -> EvalContext<'a> {
        EvalContext { collation, expr_error: Cell::new(None) }
    }

    /// MongoDB's order of `a` and `b`, strings collated (invariant 2).
    pub(crate) fn compare(&self, a: &Bson, b: &Bson) -> Ordering {
        match self.collation {
            Some(c) => c.compare(a, b),
            None => doc::compare::compare(a, b),
        }
    }

    /// Under a collation: `v` in a form whose binary comparison treats
    /// strings as the collation does (a `$group` key).
    pub(crate) fn collation_key(&self, v: &Bson) -> Option<Bson> {
        self.collation.map(|c| c.key_of(v))
    }

    /// Record an error an `$expr` met, unless one came before it.
    pub(crate) fn note_expr_error(&self, e: FilterError) {
        let first = self.expr_error.take();
        self.expr_error.set(Some(first.unwrap_or(e)));
    }

    /// The first error an `$expr` met, if any.
    pub(crate) fn into_expr_error(self) -> Option<FilterError> {
        self.expr_error.into_inner()
    }
}

/// Where a command's collation reaches (invariants 1 and 2) and what
/// the error slot keeps (3), through the public entry points.
#[cfg(test)]
mod tests {
    use crate::collation::Collation;
    use crate::expr::{Expression, Scope};
    use crate::{Filter, Pipeline, Projection, Sort, Update};
    use bson::{bson, doc, Bson, Document};
    use std::cmp::Ordering;
    use std::sync::Arc;

    /// `en`, strength 2: case-insensitive.
    fn s2() -> Option<Arc<Collation>> {
        Collation::parse(Some(&bson!({ "locale": "en", "strength": 2 }))).unwrap()
    }

    fn filter(f: Document, collation: Option<Arc<Collation>>) -> Filter {
        Filter::parse(&f).unwrap().with_collation(collation)
    }

    fn run(stages: Bson, collation: Option<Arc<Collation>>, docs: Vec<Document>) -> Vec<Document> {
        let Bson::Array(stages) = stages else { panic!() };
        Pipeline::parse(&stages).unwrap().with_collation(collation).run(docs.into_iter()).unwrap()
    }

    fn update(u: Document, filters: &[Document], d: Document) -> Document {
        Update::parse(&u, filters).unwrap().with_collation(s2()).apply(&d, None, false).unwrap()
    }

    #[test]
    fn filters_and_their_expressions() {
        let d = doc! { "a": "abc", "arr": ["X", "y"] };
        for f in [
            doc! { "a": "ABC" },
            doc! { "a": { "$in": ["ABC"] } },
            doc! { "arr": { "$elemMatch": { "$eq": "x" } } },
            doc! { "$expr": { "$eq": ["$a", "ABC"] } },
            doc! { "$expr": { "$in": ["ABC", ["$a"]] } },
        ] {
            assert!(filter(f.clone(), s2()).matches(&d), "{f}");
            assert!(!filter(f.clone(), None).matches(&d), "{f}");
        }
    }

    #[test]
    fn an_expr_error_fails_only_its_own_match() {
        let f = filter(doc! { "$expr": { "$add": ["$a", 1] } }, None);
        assert_eq!(f.try_matches_at(&doc! { "a": "x" }).unwrap_err().code, 16554);
        assert!(!f.matches(&doc! { "a": "x" }));
        assert_eq!(f.try_matches_at(&doc! { "a": 1 }), Ok((true, None)));
        let first = filter(doc! { "$or": [{ "$expr": { "$add": ["$a", 1] } }, { "$expr": { "$abs": "$a" } }] }, None);
        assert_eq!(first.try_matches_at(&doc! { "a": "x" }).unwrap_err().code, 16554, "the first error");
    }

    #[test]
    fn pipeline_stages_and_lazy_streams() {
        let docs = vec![doc! { "_id": 1, "a": "b" }, doc! { "_id": 2, "a": "B" }, doc! { "_id": 3, "a": "a" }];
        let stages = bson!([
            { "$group": { "_id": "$a", "n": { "$sum": 1 }, "least": { "$min": "$a" } } },
            { "$sort": { "_id": 1 } },
        ]);
        let collated = run(stages.clone(), s2(), docs.clone());
        assert_eq!(
            collated,
            vec![doc! { "_id": "a", "n": 1, "least": "a" }, doc! { "_id": "b", "n": 2, "least": "b" }]
        );
        assert_eq!(run(stages, None, docs.clone()).len(), 3);
        // Streaming stages read the collation as each document is produced.
        let stages = bson!([
            { "$match": { "a": "B" } },
            { "$set": { "isB": { "$eq": ["$a", "B"] } } },
            { "$project": { "isB": 1, "lower": { "$lt": ["$a", "C"] } } },
        ]);
        let Bson::Array(stages) = stages else { panic!() };
        let p = Pipeline::parse(&stages).unwrap().with_collation(s2());
        let out: Vec<Document> = p.stream(docs.clone().into_iter().map(Ok)).unwrap().map(Result::unwrap).collect();
        assert_eq!(
            out,
            vec![doc! { "_id": 1, "isB": true, "lower": true }, doc! { "_id": 2, "isB": true, "lower": true }]
        );
        let sorted = run(bson!([{ "$sort": { "a": -1, "_id": 1 } }]), s2(), docs);
        assert_eq!(sorted.iter().map(|d| d.get_i32("_id").unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    #[test]
    fn updates_but_not_their_array_filters() {
        let d = doc! { "_id": 1, "a": ["x", "Y"], "m": "b", "s": [{ "k": "b" }, { "k": "A" }] };
        assert_eq!(update(doc! { "$addToSet": { "a": "X" } }, &[], d.clone()).get_array("a").unwrap().len(), 2);
        assert_eq!(update(doc! { "$pull": { "a": "y" } }, &[], d.clone()).get_array("a").unwrap(), &vec![bson!("x")]);
        assert_eq!(update(doc! { "$pull": { "s": { "k": "B" } } }, &[], d.clone()).get_array("s").unwrap().len(), 1);
        assert_eq!(update(doc! { "$pullAll": { "a": ["X"] } }, &[], d.clone()).get_array("a").unwrap().len(), 1);
        assert_eq!(update(doc! { "$min": { "m": "B" } }, &[], d.clone()).get_str("m").unwrap(), "b");
        assert_eq!(update(doc! { "$max": { "m": "C" } }, &[], d.clone()).get_str("m").unwrap(), "C");
        let pushed = update(doc! { "$push": { "s": { "$each": [], "$sort": { "k": 1 } } } }, &[], d.clone());
        assert_eq!(pushed.get_array("s").unwrap()[0], bson!({ "k": "A" }));
        let piped =
            Update::parse_pipeline(&[bson!({ "$set": { "e": { "$eq": ["$m", "B"] } } })], &[], &Scope::default())
                .unwrap()
                .with_collation(s2())
                .apply(&d, None, false)
                .unwrap();
        assert_eq!(piped.get_bool("e"), Ok(true));
        // Array filters compare binary, whatever the update's collation.
        let set = update(doc! { "$set": { "a.$[e]": 0 } }, &[doc! { "e": "y" }], d);
        assert_eq!(set.get_array("a").unwrap(), &vec![bson!("x"), bson!("Y")]);
    }

    #[test]
    fn sorts_and_entry_points_without_one() {
        let sort = Sort::parse(&doc! { "a": 1 }).unwrap().with_collation(s2());
        assert_eq!(sort.compare(&doc! { "a": "B" }, &doc! { "a": "a" }), Ordering::Greater);
        assert_eq!(
            Sort::parse(&doc! { "a": 1 }).unwrap().compare(&doc! { "a": "B" }, &doc! { "a": "a" }),
            Ordering::Less
        );
        // Projections and expressions called on their own compare binary.
        let p = Projection::parse(&doc! { "e": { "$eq": ["$a", "A"] } }).unwrap();
        assert_eq!(p.apply(&doc! { "a": "a" }, None).unwrap(), doc! { "e": false });
        let e = Expression::parse(&bson!({ "$eq": ["$a", "A"] }), &Scope::default()).unwrap();
        assert_eq!(e.eval(&doc! { "a": "a" }).unwrap(), Some(Bson::Boolean(false)));
    }
}
