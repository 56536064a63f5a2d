//! Views: resolving a view to its base collection and pipeline, and the
//! checks that refuse commands views do not take.

use crate::error::CommandError;
use crate::exec::scan::ScanIter;
use crate::server::Shared;
use bson::Bson;
use doc::catalog::Collection;
use doc::catalog::Namespace;
use std::sync::Arc;

/// Writes and storage commands on a view fail as mongod's do.
pub(crate) fn check_not_view(shared: &Shared, ns: &Namespace) -> Result<(), CommandError> {
    match shared.catalog.get(ns) {
        Some(c) if c.view_on().is_some() => Err(not_on_view(ns)),
        _ => Ok(()),
    }
}

/// CommandNotSupportedOnView (166) for `ns`.
pub(crate) fn not_on_view(ns: &Namespace) -> CommandError {
    CommandError::command_not_supported_on_view(format!("Namespace {ns} is a view, not a collection"))
}

/// How many views may stack (MongoDB's limit).
pub(crate) const VIEW_DEPTH_MAX: usize = 20;

/// For a view: the collection it finally reads and the stages its
/// documents go through (the innermost view's first). `None` for a
/// collection or a missing namespace.
pub(crate) fn resolve_view(shared: &Shared, ns: &Namespace) -> Result<Option<(Namespace, Vec<Bson>)>, CommandError> {
    let mut current = ns.clone();
    let mut stages: Vec<Bson> = Vec::new();
    let mut depth = 0;
    while let Some(c) = shared.catalog.get(&current) {
        let Some((on, pipeline)) = c.view_on() else { break };
        depth += 1;
        if depth > VIEW_DEPTH_MAX {
            return Err(CommandError::view_depth_limit_exceeded(format!(
                "View depth too deep or view cycle detected. Maximum depth is {VIEW_DEPTH_MAX}"
            )));
        }
        stages.splice(0..0, pipeline.iter().cloned());
        current = Namespace::new(&current.db, on)?;
    }
    Ok((depth > 0).then_some((current, stages)))
}

/// `pipeline` over the collection `base`, produced as it is read, with
/// the collection it scans (for a cursor to check it is still there).
pub(crate) type Scanning = Option<(Namespace, Arc<Collection>)>;

pub(crate) fn stream_over(
    shared: &Shared,
    base: &Namespace,
    pipeline: &query::Pipeline,
) -> Result<(query::pipeline::DocStream<'static>, Scanning), CommandError> {
    let scan = ScanIter::new(shared, base);
    let scanning = scan.coll.clone().map(|c| (base.clone(), c));
    Ok((pipeline.stream(scan.fallible())?, scanning))
}
