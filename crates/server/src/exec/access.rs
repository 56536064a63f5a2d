//! Carries out the access path `query::plan` chose: the one place a read
//! turns an [`AccessPath`] into documents (or, for `find`, into its
//! cursor's source). What the planner cannot know about the collection
//! (whether the read's collation is the `_id` index's) is stated here.

use crate::error::CommandError;
use crate::exec::scan::ScanIter;
use crate::server::Shared;
use bson::{Bson, Document};
use doc::catalog::{Collection, DocError, Namespace};
use query::plan::{self, AccessPath, ReadShape};
use query::Collation;
use std::sync::Arc;

/// The access path of a read of `coll` with `filter` under `collation`
/// (`None`: binary), for a tailable cursor or not.
pub(crate) fn plan_read<'a>(
    coll: &Collection,
    filter: &'a Document,
    collation: Option<&Arc<Collation>>,
    tailable: bool,
) -> AccessPath<'a> {
    let id_index_collation_matches = match (collation, coll.id_collation()) {
        (None, None) => true,
        (Some(a), Some(b)) => a.full_spec() == b.full_spec(),
        _ => false,
    };
    plan::plan(&ReadShape { filter, id_index_collation_matches, tailable })
}

/// Records `(record id, document)` as a path yields them; a storage error
/// is an item.
pub(crate) type Records = Box<dyn Iterator<Item = Result<(u64, Document), DocError>> + Send>;

/// The candidate records of a read, `(record id, document)` in the path's
/// order; the caller still applies the filter (a path only narrows what
/// is looked at).
pub(crate) fn candidates(
    shared: &Shared,
    ns: &Namespace,
    coll: &Collection,
    path: &AccessPath<'_>,
) -> Result<Records, CommandError> {
    Ok(match path {
        AccessPath::IdPoint(id) => Box::new(coll.find_rid_by_id(shared.catalog.engine(), id)?.into_iter().map(Ok)),
        AccessPath::CollScan { reverse } => {
            debug_assert!(!reverse, "reads that take $natural scan in cursors (find)");
            Box::new(ScanIter::new(shared, ns).results())
        }
    })
}

/// The access path of a write's read (update, delete, findAndModify):
/// natural order, never a tailable cursor.
pub(crate) fn plan_write<'a>(
    coll: &Collection,
    filter: &'a Document,
    collation: Option<&Arc<Collation>>,
) -> AccessPath<'a> {
    plan_read(coll, filter, collation, false)
}

/// The one `_id` a point read looks up, if the path is one.
pub(crate) fn point<'a>(path: &AccessPath<'a>) -> Option<&'a Bson> {
    match path {
        AccessPath::IdPoint(id) => Some(id),
        AccessPath::CollScan { .. } => None,
    }
}
