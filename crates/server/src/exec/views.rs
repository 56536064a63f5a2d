//! Views: resolving a view to its base collection and pipeline, and the
//! checks that refuse commands views do not take.

use crate::error::CommandError;
use crate::exec::access;
use crate::exec::call::Place;
use crate::exec::ctx::Ctx;
use bson::Bson;
use doc::catalog::Collection;
use doc::catalog::Namespace;
use doc::stored::Stored;
use std::sync::Arc;

/// Writes and storage commands on a view fail as mongod's do.
pub(crate) fn check_not_view(shared: &Ctx<'_>, ns: &Namespace) -> Result<(), CommandError> {
    match shared.collection(ns) {
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
pub(crate) fn resolve_view(shared: &Ctx<'_>, ns: &Namespace) -> Result<Option<(Namespace, Vec<Bson>)>, CommandError> {
    let mut current = ns.clone();
    let mut stages: Vec<Bson> = Vec::new();
    let mut depth = 0;
    while let Some(c) = shared.collection(&current) {
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

/// The collection's documents come by the access path planned from the
/// pipeline's leading `$match`.
pub(crate) fn stream_over(
    shared: &Ctx<'_>,
    base: &Namespace,
    pipeline: &query::Pipeline,
    hint: Option<&Bson>,
    (op, deadline): (&crate::exec::call::OpDebug, &Arc<crate::exec::deadline::SharedDeadline>),
) -> Result<(query::pipeline::DocStream<'static>, Scanning), CommandError> {
    let Some(coll) = shared.collection(base) else {
        return Ok((pipeline.stream(std::iter::empty())?, None));
    };
    let empty = bson::Document::new();
    let filter_doc = pipeline.leading_match().unwrap_or(&empty);
    let sort = pipeline.leading_sort().map(|s| s.fields());
    // A covered read gives documents of the index's fields alone: the
    // `$sort` (when the index does not give it) needs its fields too.
    let needs = pipeline.final_projection().and_then(query::plan::projection_fields).map(|mut fields| {
        fields.extend(sort.into_iter().flatten().map(|(path, _)| path.clone()));
        fields
    });
    let how =
        access::How { hint, sort, projection: needs.as_deref(), read_ts: shared.read_ts(), ..access::How::default() };
    let planned = access::plan_projected(&coll, filter_doc, pipeline.collation(), how);
    let everything = query::Filter::parse(&empty)?;
    let planned =
        access::race(shared, Place::Blocking, base, &coll, planned, pipeline.leading_filter().unwrap_or(&everything))?;
    op.note_plan(&planned);
    let records = access::candidates(shared, base, &coll, &planned, Default::default())?;
    // An index scan in the `$sort`'s order stands in for it.
    let sorted = matches!(&planned.path, query::plan::AccessPath::IndexScan(s) if s.sorted);
    let stages = if sorted { pipeline.without_leading_sort() } else { pipeline.clone() };
    // Decoded only as far as the pipeline reads them.
    let reads = stages.reads();
    Ok((stages.stream(pipeline_input(records, reads, deadline.clone()))?, Some((base.clone(), coll))))
}

/// `pipeline` held to mongod's memory limits: past them `$sort` and
/// `$group` fail, or spill with `allowDiskUse`.
pub(crate) fn held_to_limits(
    shared: &Ctx<'_>,
    cmd: &bson::Document,
    pipeline: query::Pipeline,
) -> Result<query::Pipeline, CommandError> {
    let allow_disk_use = crate::args::bool_option(
        cmd,
        "allowDiskUse",
        "aggregate",
        shared.parameters.allow_disk_use_by_default.load(std::sync::atomic::Ordering::Relaxed),
    )?;
    let limits = query::MemoryLimits {
        sort: shared.parameters.sort_memory_limit.load(std::sync::atomic::Ordering::Relaxed),
        group: shared.parameters.group_memory_limit.load(std::sync::atomic::Ordering::Relaxed),
    };
    let spill = allow_disk_use.then(|| query::pipeline::SpillTo {
        dir: crate::exec::scan::spill_dir(shared),
        counters: shared.opcounters.spills.clone(),
    });
    Ok(pipeline.with_memory_limits(Some(limits)).with_spill(spill))
}

/// Records as a pipeline takes them: documents (only the top-level
/// fields `reads` lists, when it lists them: `Pipeline::reads`), an error
/// as the last item. A collection dropped under the read ends it with
/// QueryPlanKilled (175), as mongod's; the reading command's `deadline`
/// passed or its operation killed, with MaxTimeMSExpired or Interrupted.
pub(crate) fn pipeline_input(
    records: access::Records,
    reads: Option<Vec<String>>,
    deadline: Arc<crate::exec::deadline::SharedDeadline>,
) -> impl Iterator<Item = Result<bson::Document, query::FilterError>> + Send {
    records.map(move |r| {
        if let Err(e) = deadline.check() {
            return Err(query::FilterError { code: e.code, message: e.errmsg });
        }
        r.and_then(|(_, d)| match &reads {
            Some(names) => Ok(d.fields(names)?.into_owned()),
            None => Ok(d.into_document()?),
        })
        .map_err(read_error)
    })
}

/// Records as a cursor streams them, as stored (errors as
/// [`pipeline_input`]'s).
pub(crate) fn stored_input(records: access::Records) -> crate::exec::cursors::Stream {
    let stored = records.map(|r| r.map_err(read_error));
    let boxed: Box<dyn Iterator<Item = Result<(u64, Stored), query::FilterError>> + Send> = Box::new(stored);
    boxed.peekable()
}

/// A read's storage error as a stream carries it: a collection dropped
/// under the read is QueryPlanKilled (175).
pub(crate) fn read_error(e: doc::catalog::DocError) -> query::FilterError {
    match e {
        doc::catalog::DocError::Storage(storage::StorageError::TableNotFound(_)) => query::FilterError {
            code: 175,
            message: "PlanExecutor error during aggregation :: caused by :: collection dropped".into(),
        },
        e => {
            let e = CommandError::from(e);
            query::FilterError { code: e.code, message: e.errmsg }
        }
    }
}

/// The collection a command names, which must exist and not be a view.
/// It is looked up once: a concurrent drop between a
/// check and a use cannot make it vanish (the `Arc` keeps it).
pub(crate) fn existing(
    shared: &Ctx<'_>,
    cmd: &bson::Document,
    name: &str,
) -> Result<(Namespace, Arc<Collection>), CommandError> {
    let ns = crate::args::namespace(cmd, name)?;
    let Some(coll) = shared.collection(&ns) else {
        return Err(CommandError::namespace_not_found(format!("ns does not exist: {ns}")));
    };
    if coll.view_on().is_some() {
        return Err(crate::exec::views::not_on_view(&ns));
    }
    Ok((ns, coll))
}
