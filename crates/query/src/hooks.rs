//! What the catalog (in `doc`, below this crate) evaluates through this
//! crate: index collations and partial indexes' filters.

use crate::Filter;
use bson::Document;
use doc::catalog::Hooks;
use doc::index::DocFilter;
use std::sync::Arc;

/// The catalog's hooks into the query language.
pub fn hooks() -> Hooks {
    Hooks { collations: Some(crate::collation::key_collation), filters: Some(partial_filter) }
}

/// A `partialFilterExpression` as a `DocFilter`, strings compared under
/// the index's `collation` (`None` if either does not parse, which
/// `createIndexes` refused before they were stored).
fn partial_filter(expr: &Document, collation: Option<&Document>) -> Option<Arc<dyn DocFilter>> {
    let collation = match collation {
        Some(c) => crate::Collation::parse(Some(&bson::Bson::Document(c.clone()))).ok()?,
        None => None,
    };
    Some(Arc::new(Partial(Filter::parse(expr).ok()?.with_collation(collation))))
}

struct Partial(Filter);

impl DocFilter for Partial {
    fn matches(&self, doc: &Document) -> bool {
        self.0.matches(doc)
    }
}
