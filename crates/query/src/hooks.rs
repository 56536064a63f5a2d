//! What the catalog (in `doc`, below this crate) evaluates through this
//! crate: `_id` index collations and partial indexes' filters.

use crate::Filter;
use bson::Document;
use doc::catalog::Hooks;
use doc::index::DocFilter;
use std::sync::Arc;

/// The catalog's hooks into the query language.
pub fn hooks() -> Hooks {
    Hooks { id_collations: Some(crate::collation::id_collation), filters: Some(partial_filter) }
}

/// A `partialFilterExpression` as a `DocFilter` (`None` if it does not
/// parse, which `createIndexes` refused before it was stored).
fn partial_filter(expr: &Document) -> Option<Arc<dyn DocFilter>> {
    Some(Arc::new(Partial(Filter::parse(expr).ok()?)))
}

struct Partial(Filter);

impl DocFilter for Partial {
    fn matches(&self, doc: &Document) -> bool {
        self.0.matches(doc)
    }
}
