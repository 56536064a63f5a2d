//! Aggregation pipelines, a first subset: `$match`, `$skip`, `$limit`,
//! `$count`, `$sort`, `$project`, `$unset`, `$addFields`/`$set`,
//! `$replaceRoot`/`$replaceWith`, `$unwind`, and `$group` with `$sum $avg
//! $min $max $first $last $push` over aggregation expressions (`expr/`). Enough
//! for the drivers' `countDocuments` and everyday grouping and reshaping;
//! other stages are refused as unknown, with MongoDB's message.
//!
//! Runs over documents handed in by the caller (no I/O of its own, but
//! for spills). A pipeline's collation reaches every stage: `$match` and
//! `$sort` hold it themselves; the others build their evaluation context
//! from it for each document they produce, as it is read.

use crate::collation::Collation;
use crate::context::EvalContext;
use crate::error::{err, FilterError};
use crate::expr::{parse_path, Expression, Scope};
use crate::external::{read_document, Runs, Spill};
use crate::matcher::Filter;
use crate::projection::Projection;
use crate::sort::Sort;
use crate::types::type_name;
use crate::update::set_path;
use crate::update_pipeline::{stage_of, unset, unset_fields, UpdatePipeline};
use bson::{Bson, Document};
use doc::compare::{number, Number};
use doc::decimal_math::{Dec, DoubleDigits};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering as Atomic};
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
enum AccKind {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
}

#[derive(Debug, Clone)]
enum Stage {
    Match(Filter),
    Skip(usize),
    Limit(usize),
    Count(String),
    Group {
        id: Expression,
        fields: Vec<(String, AccKind, Expression)>,
    },
    Sort(Sort),
    /// `$project` and `$unset` (never positional).
    Project(Box<Projection>),
    /// `$addFields`/`$set`, `$replaceRoot`/`$replaceWith`: one stage, as
    /// a pipeline-style update runs it.
    Reshape(UpdatePipeline),
    Unwind(Unwind),
}

/// A `$unwind` stage: one document per element of the array at `path`.
#[derive(Debug, Clone)]
struct Unwind {
    /// The field, dotted, and its parts.
    field: String,
    path: Vec<String>,
    index: Option<String>,
    preserve: bool,
}

impl Unwind {
    /// `{$unwind: "$path"}` or `{$unwind: {path, includeArrayIndex,
    /// preserveNullAndEmptyArrays}}`, checked in mongod's order.
    fn parse(arg: &Bson) -> Result<Unwind, FilterError> {
        let (mut path, mut index, mut preserve) = (String::new(), None, false);
        match arg {
            Bson::String(p) => path = p.clone(),
            Bson::Document(spec) => {
                for (k, v) in spec {
                    match (k.as_str(), v) {
                        ("path", Bson::String(p)) => path = p.clone(),
                        ("path", other) => {
                            return Err(err(
                                28808,
                                format!("expected a string as the path for $unwind stage, got {}", type_name(other)),
                            ))
                        }
                        ("preserveNullAndEmptyArrays", Bson::Boolean(b)) => preserve = *b,
                        ("preserveNullAndEmptyArrays", other) => {
                            return Err(err(
                                28809,
                                format!(
                                    "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}",
                                    type_name(other)
                                ),
                            ))
                        }
                        ("includeArrayIndex", Bson::String(i)) if !i.is_empty() => {
                            if i.starts_with('$') {
                                return Err(err(
                                    28822,
                                    format!(
                                        "includeArrayIndex option to $unwind stage should not be prefixed with a '$': {i}"
                                    ),
                                ));
                            }
                            parse_path(i)?;
                            index = Some(i.clone());
                        }
                        ("includeArrayIndex", other) => {
                            return Err(err(
                                28810,
                                format!(
                                    "expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}",
                                    type_name(other)
                                ),
                            ))
                        }
                        (other, _) => {
                            return Err(err(28811, format!("unrecognized option to $unwind stage: {other}")))
                        }
                    }
                }
            }
            other => {
                return Err(err(
                    15981,
                    format!(
                        "expected either a string or an object as specification for $unwind stage, got {}",
                        type_name(other)
                    ),
                ))
            }
        }
        if path.is_empty() {
            return Err(err(28812, "no path specified to $unwind stage"));
        }
        let Some(field) = path.strip_prefix('$') else {
            return Err(err(28818, format!("path option to $unwind stage should be prefixed with a '$': {path}")));
        };
        if field.is_empty() {
            return Err(err(40352, "FieldPath cannot be constructed with empty string"));
        }
        Ok(Unwind { field: field.to_string(), path: parse_path(field)?, index, preserve })
    }

    /// The documents `d` unwinds to. The path does not reach into arrays
    /// on its way (as mongod's); a value that is not an array counts as
    /// one element; null, missing and `[]` give nothing unless preserved
    /// (`[]` then leaves the field out).
    fn apply(&self, d: Document) -> Vec<Document> {
        let with_index = |mut d: Document, i: Bson| {
            if let Some(index) = &self.index {
                set_path(&mut d, index, i);
            }
            d
        };
        match get_path(&d, &self.path) {
            Some(Bson::Array(items)) if !items.is_empty() => {
                let items = items.clone();
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let mut out = d.clone();
                        set_path(&mut out, &self.field, item);
                        with_index(out, Bson::Int64(i as i64))
                    })
                    .collect()
            }
            Some(Bson::Array(_)) if self.preserve => {
                let mut out = d;
                // The path reached `[]` through documents only.
                unset(&mut out, &self.path);
                vec![with_index(out, Bson::Null)]
            }
            None | Some(Bson::Null | Bson::Undefined | Bson::Array(_)) if !self.preserve => Vec::new(),
            _ => vec![with_index(d, Bson::Null)],
        }
    }
}

/// The value at `path` through embedded documents only.
fn get_path<'a>(d: &'a Document, path: &[String]) -> Option<&'a Bson> {
    let (last, inner) = path.split_last()?;
    let mut cur = d;
    for p in inner {
        cur = cur.get_document(p).ok()?;
    }
    cur.get(last)
}

/// `stages` with each run of consecutive `$match` stages made one, their
/// filters under `$and` (as mongod's optimizer does, so the access path
/// is planned from all of them); an empty filter drops out.
pub fn coalesce_matches(stages: &[Bson]) -> Vec<Bson> {
    let filter_of = |s: &Bson| match s.as_document().filter(|d| d.len() == 1)?.get("$match")? {
        Bson::Document(f) => Some(f.clone()),
        _ => None,
    };
    let mut out: Vec<Bson> = Vec::with_capacity(stages.len());
    for stage in stages {
        let merged = match (out.last().and_then(filter_of), filter_of(stage)) {
            (Some(before), Some(this)) if this.is_empty() => Some(before),
            (Some(before), Some(this)) if before.is_empty() => Some(this),
            (Some(before), Some(this)) => {
                // A run already joined under `$and` takes the next filter in.
                // (Only a well-formed one: an empty `$and` keeps its error.)
                let joined = before
                    .get_array("$and")
                    .ok()
                    .filter(|parts| {
                        before.len() == 1 && !parts.is_empty() && parts.iter().all(|p| p.as_document().is_some())
                    })
                    .cloned();
                let mut parts = joined.unwrap_or_else(|| vec![Bson::Document(before)]);
                parts.push(Bson::Document(this));
                Some(bson::doc! { "$and": parts })
            }
            _ => None,
        };
        match merged {
            Some(filter) => *out.last_mut().expect("a stage before") = Bson::Document(bson::doc! { "$match": filter }),
            None => out.push(stage.clone()),
        }
    }
    out
}

/// A parsed pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    stages: Vec<Stage>,
    /// Strings compare through it in every stage's expressions.
    collation: Option<Arc<Collation>>,
    /// The most `$sort` and `$group` may hold (`None`: no limit).
    memory: Option<MemoryLimits>,
    /// With `allowDiskUse`: past their limits, `$sort` and `$group`
    /// spill here instead of failing.
    spill: Option<SpillTo>,
    /// The filter of a leading `$match`, as given: what the access path
    /// is planned from (`plan/mod.rs`).
    leading_match: Option<Document>,
    /// A `$project` ending a pipeline of only `$match`, `$sort`, `$skip`
    /// and `$limit` before it, as given: an index may cover it.
    final_projection: Option<Document>,
}

/// Where blocking stages spill, and the counters they report spills to
/// (`serverStatus`' `metrics.query`).
#[derive(Debug, Clone)]
pub struct SpillTo {
    pub dir: std::path::PathBuf,
    pub counters: Arc<SpillCounters>,
}

#[derive(Debug, Default)]
pub struct SpillCounters {
    /// Sorted runs written by sorts (`metrics.query.sort.spillToDisk`).
    pub sort_spills: AtomicU64,
    /// `$group`'s spills, the partial groups written, and their bytes.
    pub group_spills: AtomicU64,
    pub group_records: AtomicU64,
    pub group_bytes: AtomicU64,
}

/// The documents a pipeline produces, as they are read.
pub type DocStream<'a> = Box<dyn Iterator<Item = Result<Document, FilterError>> + Send + 'a>;

/// What one stage of a counted run returned, and the time spent in it
/// and in the stages before it (cumulative, as mongod estimates it).
#[derive(Debug, Default)]
pub struct StageCounts {
    pub returned: AtomicU64,
    pub nanos: AtomicU64,
}

impl StageCounts {
    fn add_time(&self, since: std::time::Instant) {
        let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Atomic::Relaxed);
    }

    /// The time, in whole milliseconds.
    pub fn millis(&self) -> u64 {
        self.nanos.load(Atomic::Relaxed) / 1_000_000
    }
}

/// `docs` counted into `counts[at]` as they are read (what they return,
/// the time reading them takes).
pub fn counted<'a>(docs: DocStream<'a>, counts: Arc<[StageCounts]>, at: usize) -> DocStream<'a> {
    Box::new(Counted { docs, counts, at })
}

/// A stage's output, counted into `counts[at]`.
struct Counted<'a> {
    docs: DocStream<'a>,
    counts: Arc<[StageCounts]>,
    at: usize,
}

impl Iterator for Counted<'_> {
    type Item = Result<Document, FilterError>;

    fn next(&mut self) -> Option<Self::Item> {
        let started = std::time::Instant::now();
        let next = self.docs.next();
        let counts = &self.counts[self.at];
        counts.add_time(started);
        if let Some(Ok(_)) = next {
            counts.returned.fetch_add(1, Atomic::Relaxed);
        }
        next
    }
}

fn spill_error(e: std::io::Error) -> FilterError {
    err(1, format!("a blocking stage could not spill to disk: {e}"))
}

/// What the blocking stages may hold when they may not spill (bytes).
#[derive(Debug, Clone, Copy)]
pub struct MemoryLimits {
    pub sort: usize,
    pub group: usize,
}

/// A value's size as BSON (its element, without a name).
fn bson_size(v: &Bson) -> usize {
    match v {
        Bson::Document(d) => doc_size(d),
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => s.len() + 5,
        Bson::Array(items) => 5 + items.iter().map(|i| bson_size(i) + 2).sum::<usize>(),
        Bson::Binary(b) => b.bytes.len() + 5,
        Bson::RegularExpression(r) => r.pattern.len() + r.options.len() + 2,
        Bson::JavaScriptCodeWithScope(c) => c.code.len() + doc_size(&c.scope) + 9,
        Bson::DbPointer(_) => 24,
        Bson::Decimal128(_) => 16,
        _ => 8,
    }
}

fn doc_size(d: &Document) -> usize {
    5 + d.iter().map(|(k, v)| k.len() + 2 + bson_size(v)).sum::<usize>()
}

/// A `$skip` or `$limit` argument: a whole number, not negative (mongod's
/// 5107200 and 5107201); `$limit` also not 0 (15958).
fn positive(stage: &str, v: &Bson) -> Result<usize, FilterError> {
    let code = if stage == "$skip" { 5107200 } else { 5107201 };
    let n = crate::integer::parse(stage, v, true)
        .map_err(|why| err(code, format!("invalid argument to {stage} stage: {why}")))?;
    if stage == "$limit" && n == 0 {
        return Err(err(15958, "the limit must be positive"));
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

impl Pipeline {
    /// This pipeline with strings compared through `collation` in its
    /// `$match` and `$sort` stages (group keys stay binary for now).
    pub fn with_collation(mut self, collation: Option<Arc<Collation>>) -> Pipeline {
        if collation.is_none() {
            return self;
        }
        self.collation = collation.clone();
        for stage in &mut self.stages {
            match stage {
                Stage::Match(f) => *f = f.clone().with_collation(collation.clone()),
                Stage::Sort(s) => *s = s.clone().with_collation(collation.clone()),
                _ => {}
            }
        }
        self
    }

    /// The filter of the first stage, if it is a `$match`.
    pub fn leading_match(&self) -> Option<&Document> {
        self.leading_match.as_ref()
    }

    /// The position of the `$sort` that orders the pipeline's input: the
    /// first stage, or the second after the leading `$match`.
    fn leading_sort_at(&self) -> Option<usize> {
        let at = usize::from(matches!(self.stages.first(), Some(Stage::Match(_))));
        matches!(self.stages.get(at), Some(Stage::Sort(_))).then_some(at)
    }

    /// The `$project` an index may cover (see `final_projection`).
    pub fn final_projection(&self) -> Option<&Document> {
        self.final_projection.as_ref()
    }

    /// The leading `$match` as parsed (its variables and collation in).
    pub fn leading_filter(&self) -> Option<&Filter> {
        match self.stages.first() {
            Some(Stage::Match(f)) => Some(f),
            _ => None,
        }
    }

    /// That `$sort`, which an index scan may give.
    pub fn leading_sort(&self) -> Option<&Sort> {
        match self.stages.get(self.leading_sort_at()?) {
            Some(Stage::Sort(sort)) => Some(sort),
            _ => None,
        }
    }

    /// This pipeline without its leading `$sort`, for input that comes in
    /// its order already (a `$limit` after it then stops the read).
    pub fn without_leading_sort(&self) -> Pipeline {
        let mut out = self.clone();
        if let Some(at) = self.leading_sort_at() {
            out.stages.remove(at);
        }
        out
    }

    /// The collation its stages compare strings under (`None`: binary).
    pub fn collation(&self) -> Option<&Arc<Collation>> {
        self.collation.as_ref()
    }

    pub fn parse(stages: &[Bson]) -> Result<Pipeline, FilterError> {
        Pipeline::parse_in(stages, &Scope::default())
    }

    /// Parse with a command's `let` variables in scope.
    pub fn parse_in(stages: &[Bson], scope: &Scope) -> Result<Pipeline, FilterError> {
        let stages = &coalesce_matches(stages);
        let mut out = Vec::new();
        for s in stages {
            let (name, arg) = stage_of(s)?;
            out.push(match name.as_str() {
                "$match" => match arg {
                    Bson::Document(f) => Stage::Match(Filter::parse_in(f, scope)?),
                    _ => return Err(err(15959, "the match filter must be an expression in an object")),
                },
                "$skip" => Stage::Skip(positive("$skip", arg)?),
                "$limit" => Stage::Limit(positive("$limit", arg)?),
                "$count" => match arg {
                    Bson::String(n) if n.is_empty() => {
                        return Err(err(40157, "the count field must be a non-empty string"))
                    }
                    Bson::String(n) if n.starts_with('$') => {
                        return Err(err(40158, "the count field cannot be a $-prefixed path"))
                    }
                    Bson::String(n) if n.contains('\0') => {
                        return Err(err(40159, "the count field cannot contain a null byte"))
                    }
                    Bson::String(n) if n.contains('.') => return Err(err(40160, "the count field cannot contain '.'")),
                    Bson::String(n) => Stage::Count(n.clone()),
                    _ => return Err(err(40156, "the count field must be a non-empty string")),
                },
                "$group" => parse_group(arg, scope)?,
                "$addFields" | "$set" | "$replaceRoot" | "$replaceWith" => {
                    Stage::Reshape(UpdatePipeline::parse(std::slice::from_ref(s), scope)?)
                }
                "$sort" => match arg {
                    Bson::Document(spec) if !spec.is_empty() => Stage::Sort(Sort::parse(spec)?),
                    Bson::Document(_) => return Err(err(15976, "$sort stage must have at least one sort key")),
                    _ => return Err(err(15973, "the $sort key specification must be an object")),
                },
                "$project" => match arg {
                    Bson::Document(spec) if !spec.is_empty() => {
                        let p = Projection::parse_in(spec, scope)?;
                        if p.is_positional() {
                            return Err(err(31324, "Cannot use positional projection in aggregation projection"));
                        }
                        Stage::Project(Box::new(p))
                    }
                    Bson::Document(_) => return Err(err(51272, "$project requires at least one output field")),
                    _ => return Err(err(15969, "$project specification must be an object")),
                },
                "$unset" => {
                    let mut spec = Document::new();
                    for f in unset_fields(arg)? {
                        spec.insert(f, 0);
                    }
                    Stage::Project(Box::new(Projection::parse(&spec)?))
                }
                "$unwind" => Stage::Unwind(Unwind::parse(arg)?),
                other => return Err(err(40324, format!("Unrecognized pipeline stage name: '{other}'"))),
            });
        }
        let leading_match = match stages.first().map(stage_of).transpose()? {
            Some((name, Bson::Document(filter))) if name.as_str() == "$match" => Some(filter.clone()),
            _ => None,
        };
        // Only a leading `$match` and `$sort` (whose fields the read can
        // be asked to hold) and `$skip`/`$limit` may come before it.
        let leading = |i: usize, s: &Stage, before: &[Stage]| match s {
            Stage::Match(_) => i == 0,
            Stage::Sort(_) => i == 0 || (i == 1 && matches!(before[0], Stage::Match(_))),
            Stage::Skip(_) | Stage::Limit(_) => true,
            _ => false,
        };
        let final_projection = match out.split_last() {
            Some((Stage::Project(_), before)) if before.iter().enumerate().all(|(i, s)| leading(i, s, before)) => {
                stages.last().map(stage_of).transpose()?.and_then(|(_, spec)| spec.as_document().cloned())
            }
            _ => None,
        };
        Ok(Pipeline { stages: out, collation: None, memory: None, spill: None, leading_match, final_projection })
    }

    /// Hold `$sort` and `$group` to `limits`: past them they fail with
    /// 292, or spill when given somewhere to (`with_spill`). `None`: no
    /// limit.
    pub fn with_memory_limits(mut self, limits: Option<MemoryLimits>) -> Pipeline {
        self.memory = limits;
        self
    }

    /// This pipeline held to `other`'s memory limits and spill.
    pub fn with_limits_of(mut self, other: &Pipeline) -> Pipeline {
        self.memory = other.memory;
        self.spill = other.spill.clone();
        self
    }

    /// Let `$sort` and `$group` spill past their memory limits
    /// (`allowDiskUse`).
    pub fn with_spill(mut self, spill: Option<SpillTo>) -> Pipeline {
        self.spill = spill;
        self
    }

    /// Run the pipeline over `input`, collecting its output.
    pub fn run(&self, input: impl Iterator<Item = Document> + Send) -> Result<Vec<Document>, FilterError> {
        self.stream(input.map(Ok))?.collect()
    }

    /// The top-level fields of its input documents the pipeline reads,
    /// when a stage replaces the documents (`$group`, `$count`, an
    /// inclusion `$project`) before any stage needs them whole; `None`
    /// otherwise. A document holding only those fields gives the same
    /// output as the whole document.
    pub fn reads(&self) -> Option<Vec<String>> {
        let mut reads = Some(Vec::new());
        let add = crate::reads::note;
        for stage in &self.stages {
            match stage {
                Stage::Match(f) => match f.reads() {
                    Some(names) => names.iter().for_each(|n| add(&mut reads, n)),
                    None => return None,
                },
                Stage::Skip(_) | Stage::Limit(_) => {}
                Stage::Sort(s) => s.reads().iter().for_each(|n| add(&mut reads, n)),
                Stage::Unwind(u) => add(&mut reads, &u.field),
                Stage::Count(_) => return reads,
                Stage::Group { id, fields } => {
                    id.top_fields(&mut reads);
                    fields.iter().for_each(|(_, _, e)| e.top_fields(&mut reads));
                    return reads;
                }
                // An inclusion's output holds only what it reads.
                Stage::Project(p) => {
                    p.reads()?.iter().for_each(|n| add(&mut reads, n));
                    return reads;
                }
                Stage::Reshape(_) => return None,
            }
        }
        None
    }

    /// The pipeline's output over `input`, produced as it is read. Stages
    /// stream where they can (a `$limit` stops the reading); `$sort`,
    /// `$group` and `$count` take in all their input here, so their
    /// errors come back at once. Errors from streaming stages come as
    /// items: the first ends the run. An error in `input` ends it too.
    pub fn stream<'a>(
        &self,
        input: impl Iterator<Item = Result<Document, FilterError>> + Send + 'a,
    ) -> Result<DocStream<'a>, FilterError> {
        self.stream_with(Box::new(input), None)
    }

    /// As [`Pipeline::stream`], counting in `counts[i]` what stage `i`
    /// returns and the time it and the stages before it take (`explain`'s
    /// `nReturned` and `executionTimeMillisEstimate`). `counts` holds an
    /// entry per stage at least.
    pub fn stream_counted<'a>(
        &self,
        input: impl Iterator<Item = Result<Document, FilterError>> + Send + 'a,
        counts: Arc<[StageCounts]>,
    ) -> Result<DocStream<'a>, FilterError> {
        assert!(counts.len() >= self.stages.len(), "a count per stage");
        self.stream_with(Box::new(input), Some(counts))
    }

    fn stream_with<'a>(
        &self,
        input: DocStream<'a>,
        counts: Option<Arc<[StageCounts]>>,
    ) -> Result<DocStream<'a>, FilterError> {
        let mut docs = input;
        for (i, stage) in self.stages.iter().enumerate() {
            let started = std::time::Instant::now();
            docs = self.stage_stream(i, stage, docs)?;
            if let Some(counts) = &counts {
                // A blocking stage took in its whole input above.
                counts[i].add_time(started);
                docs = counted(docs, counts.clone(), i);
            }
        }
        Ok(docs)
    }

    /// Stage `i`, `stage`, reading `docs`.
    fn stage_stream<'a>(&self, i: usize, stage: &Stage, docs: DocStream<'a>) -> Result<DocStream<'a>, FilterError> {
        Ok({
            match stage.clone() {
                Stage::Match(f) => Box::new(docs.filter_map(move |d| match d {
                    Ok(d) => match f.try_matches_at(&d) {
                        Ok((true, _)) => Some(Ok(d)),
                        Ok((false, _)) => None,
                        Err(e) => Some(Err(e)),
                    },
                    Err(e) => Some(Err(e)),
                })),
                // Errors are not documents: they pass, and are not counted.
                Stage::Skip(n) => {
                    let mut left = n;
                    Box::new(docs.filter(move |d| match d {
                        Ok(_) if left > 0 => {
                            left -= 1;
                            false
                        }
                        _ => true,
                    }))
                }
                Stage::Limit(n) => Box::new(docs.take(n)),
                Stage::Count(name) => {
                    let mut n = 0usize;
                    for d in docs {
                        d?;
                        n += 1;
                    }
                    let out = if n == 0 { vec![] } else { vec![bson::doc! { name: n as i32 }] };
                    Box::new(out.into_iter().map(Ok))
                }
                Stage::Group { id, fields } => self.group(docs, &id, &fields)?,
                Stage::Sort(sort) => {
                    // Followed by a $limit: only the top k are ever held.
                    let top = match self.stages.get(i + 1) {
                        Some(Stage::Limit(k)) => Some(*k),
                        _ => None,
                    };
                    self.sort(docs, sort, top)?
                }
                // Each document's context is made as it is read.
                Stage::Project(p) => {
                    let collation = self.collation.clone();
                    Box::new(
                        docs.map(move |d| {
                            d.and_then(|d| p.apply_in(&d, None, &EvalContext::new(collation.as_deref())))
                        }),
                    )
                }
                Stage::Reshape(p) => {
                    let collation = self.collation.clone();
                    Box::new(docs.map(move |d| d.and_then(|d| p.apply_in(&d, &EvalContext::new(collation.as_deref())))))
                }
                Stage::Unwind(u) => Box::new(docs.flat_map(move |d| match d {
                    Ok(d) => u.apply(d).into_iter().map(Ok).collect::<Vec<_>>(),
                    Err(e) => vec![Err(e)],
                })),
            }
        })
    }

    /// A `$sort` (of the best `top` only, when a `$limit` follows). Past
    /// the memory limit it spills sorted runs, merged as they are read, or
    /// fails with 292.
    fn sort<'a>(&self, docs: DocStream<'a>, sort: Sort, top: Option<usize>) -> Result<DocStream<'a>, FilterError> {
        let limit = self.memory.map(|m| m.sort);
        let mut all = Vec::new();
        let mut held = 0;
        let mut runs: Option<Runs<Document>> = None;
        for d in docs {
            let d = d?;
            if let Some(k) = top {
                if all.len() >= 2 * k.max(8) {
                    sort.sort(&mut all);
                    all.truncate(k);
                    held = all.iter().map(doc_size).sum();
                }
            }
            if let Some(limit) = limit {
                held += doc_size(&d);
                if held > limit {
                    let Some(to) = &self.spill else {
                        return Err(err(
                            292,
                            format!("PlanExecutor error during aggregation :: caused by :: Sort exceeded memory limit of {limit} bytes, but did not opt in to external sorting."),
                        ));
                    };
                    all.push(d);
                    let by = sort.clone();
                    let runs =
                        runs.get_or_insert_with(|| Runs::new(to.dir.clone(), Arc::new(move |a, b| by.compare(a, b))));
                    runs.spill(&mut all, top).map_err(spill_error)?;
                    to.counters.sort_spills.fetch_add(1, Atomic::Relaxed);
                    held = 0;
                    continue;
                }
            }
            all.push(d);
        }
        let Some(mut runs) = runs else {
            sort.sort(&mut all);
            return Ok(Box::new(all.into_iter().map(Ok)));
        };
        runs.finish(all).map_err(spill_error)?;
        Ok(Box::new(std::iter::from_fn(move || runs.pop().map_err(spill_error).transpose())))
    }

    /// `$group` over `docs` as they stream in: only the groups are held.
    /// Past the memory limit, the groups so far are written out in key
    /// order as a run of partial groups, and the runs are merged at the
    /// end, combining a key's partials in arrival order; without
    /// somewhere to spill, 292.
    fn group<'a>(
        &self,
        docs: DocStream<'a>,
        id: &Expression,
        fields: &[(String, AccKind, Expression)],
    ) -> Result<DocStream<'a>, FilterError> {
        let limit = self.memory.map(|m| m.group);
        let cx = EvalContext::new(self.collation.as_deref());
        let mut held = 0;
        // Keyed by KeyString so 1 and 1.0 share a group, as in MongoDB; under
        // a collation, strings by their collation keys ("a" and "A" share one
        // at strength 2, the first seen naming it).
        let mut groups: BTreeMap<Vec<u8>, (Bson, Vec<Acc>)> = BTreeMap::new();
        let mut runs: Option<Runs<Partial>> = None;
        for d in docs {
            let d = d?;
            let key = id.eval_in(&d, &cx)?.unwrap_or(Bson::Null);
            let k = collated_key(&key, &cx);
            let fresh = !groups.contains_key(&k);
            // A group holds its key and about one value per accumulator
            // (counted as it starts); a $push grows with each value.
            let mut bytes = if fresh { k.len() + bson_size(&key) + 48 * fields.len() } else { 0 };
            let entry =
                groups.entry(k).or_insert_with(|| (key, fields.iter().map(|(_, kind, _)| Acc::new(*kind)).collect()));
            for ((_, kind, operand), acc) in fields.iter().zip(entry.1.iter_mut()) {
                let v = operand.eval_in(&d, &cx)?;
                // A set holds each new value and its key (keyed once here).
                // (A missing value adds nothing to a set.)
                if let Acc::Set(set) = acc {
                    if let Some(v) = v {
                        if let std::collections::btree_map::Entry::Vacant(slot) = set.entry(collated_key(&v, &cx)) {
                            bytes += bson_size(&v) + slot.key().len();
                            slot.insert(v);
                        }
                    }
                    continue;
                }
                match (kind, &v) {
                    (AccKind::Push, Some(v)) => bytes += bson_size(v),
                    (AccKind::First | AccKind::Last | AccKind::Min | AccKind::Max, Some(v)) if fresh => {
                        bytes += bson_size(v)
                    }
                    _ => {}
                }
                accumulate(*kind, acc, v, &cx);
            }
            held += bytes;
            if limit.is_none_or(|l| held <= l) {
                continue;
            }
            let Some(to) = &self.spill else {
                return Err(err(
                    292,
                    "PlanExecutor error during aggregation :: caused by :: Exceeded memory limit for $group, but didn't allow external spilling; pass allowDiskUse:true to opt in.",
                ));
            };
            let runs = runs.get_or_insert_with(|| {
                let kinds: Vec<AccKind> = fields.iter().map(|(_, kind, _)| *kind).collect();
                let collation = self.collation.clone();
                Runs::new(to.dir.clone(), Arc::new(|a: &Partial, b: &Partial| a.key.cmp(&b.key))).with_combine(
                    Arc::new(move |a: &mut Partial, b: Partial| {
                        let cx = EvalContext::new(collation.as_deref());
                        for ((x, y), kind) in a.accs.iter_mut().zip(b.accs).zip(&kinds) {
                            x.combine(*kind, y, &cx);
                        }
                    }),
                )
            });
            let mut partials: Vec<Partial> =
                std::mem::take(&mut groups).into_iter().map(|(key, (id, accs))| Partial { key, id, accs }).collect();
            to.counters.group_records.fetch_add(partials.len() as u64, Atomic::Relaxed);
            let before = runs.bytes;
            runs.spill(&mut partials, None).map_err(spill_error)?;
            to.counters.group_spills.fetch_add(1, Atomic::Relaxed);
            to.counters.group_bytes.fetch_add(runs.bytes - before, Atomic::Relaxed);
            held = 0;
        }
        let fields: Vec<(String, AccKind)> = fields.iter().map(|(name, kind, _)| (name.clone(), *kind)).collect();
        let output = move |id: Bson, accs: Vec<Acc>| {
            let mut out = Document::new();
            out.insert("_id", id);
            for ((name, _), acc) in fields.iter().zip(accs) {
                out.insert(name.clone(), finish(acc));
            }
            out
        };
        let Some(mut runs) = runs else {
            return Ok(Box::new(groups.into_values().map(move |(id, accs)| Ok(output(id, accs)))));
        };
        runs.finish(groups.into_iter().map(|(key, (id, accs))| Partial { key, id, accs }).collect())
            .map_err(spill_error)?;
        // Partials of one key come together, folded in arrival order.
        Ok(Box::new(std::iter::from_fn(move || match runs.pop_combined() {
            Ok(Some(p)) => Some(Ok(output(p.id, p.accs))),
            Ok(None) => None,
            Err(e) => Some(Err(spill_error(e))),
        })))
    }
}

/// A group spilled before the end of its input: its key (as grouped
/// by), its `_id`, and its accumulators so far.
struct Partial {
    key: Vec<u8>,
    id: Bson,
    accs: Vec<Acc>,
}

impl Spill for Partial {
    fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let accs: Vec<Bson> = self.accs.iter().map(|a| Bson::Document(a.to_document())).collect();
        let d = bson::doc! {
            "k": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: self.key.clone() },
            "id": self.id.clone(),
            "a": accs,
        };
        d.write_to(w)
    }

    fn read_from(r: &mut dyn std::io::Read) -> std::io::Result<Option<Partial>> {
        let Some(d) = read_document(r)? else { return Ok(None) };
        let bad = || std::io::Error::other("a malformed partial group in a spill run");
        let key = match d.get("k") {
            Some(Bson::Binary(b)) => b.bytes.clone(),
            _ => return Err(bad()),
        };
        let id = d.get("id").cloned().ok_or_else(bad)?;
        let accs = d.get_array("a").map_err(|_| bad())?;
        let accs = accs.iter().map(|a| a.as_document().and_then(Acc::from_document).ok_or_else(bad));
        Ok(Some(Partial { key, id, accs: accs.collect::<Result<_, _>>()? }))
    }
}

fn parse_group(arg: &Bson, scope: &Scope) -> Result<Stage, FilterError> {
    let Bson::Document(spec) = arg else {
        return Err(err(15947, "a group's fields must be specified in an object"));
    };
    let id = match spec.get("_id") {
        Some(v) => Expression::parse(v, scope)?,
        None => return Err(err(15955, "a group specification must include an _id")),
    };
    let mut fields = Vec::new();
    for (name, acc) in spec.iter().filter(|(k, _)| *k != "_id") {
        let Bson::Document(acc) = acc else {
            return Err(err(40234, format!("The field '{name}' must be an accumulator object")));
        };
        if acc.len() != 1 {
            return Err(err(40238, format!("The field '{name}' must specify one accumulator")));
        }
        let (op, operand) = acc.iter().next().unwrap();
        let kind = match op.as_str() {
            "$sum" => AccKind::Sum,
            "$avg" => AccKind::Avg,
            "$min" => AccKind::Min,
            "$max" => AccKind::Max,
            "$first" => AccKind::First,
            "$last" => AccKind::Last,
            "$push" => AccKind::Push,
            "$addToSet" => AccKind::AddToSet,
            other => return Err(err(15952, format!("unknown group operator '{other}'"))),
        };
        fields.push((name.clone(), kind, Expression::parse(operand, scope)?));
    }
    Ok(Stage::Group { id, fields })
}

/// A sum kept as two doubles (mongod's `DoubleDoubleSummation`): doubles
/// add with twice a double's precision (ten 0.1s make 1), integers add
/// exactly (each split in two halves a double holds exactly), and
/// infinities and NaN are summed apart.
#[derive(Debug, Clone, Copy, Default)]
struct DoubleDouble {
    hi: f64,
    lo: f64,
    /// The sum of the non-finite values, if any came.
    special: Option<f64>,
}

impl DoubleDouble {
    fn add(&mut self, x: f64) {
        if !x.is_finite() {
            self.special = Some(self.special.unwrap_or(0.0) + x);
            return;
        }
        // Knuth's two-sum, then renormalise so that |lo| stays below hi's ulp.
        let sum = self.hi + x;
        let b = sum - self.hi;
        let error = (self.hi - (sum - b)) + (x - b);
        let lo = self.lo + error;
        self.hi = sum + lo;
        self.lo = lo - (self.hi - sum);
    }

    /// Add another sum (both halves, and its non-finite part).
    fn merge(&mut self, other: &DoubleDouble) {
        self.add(other.hi);
        self.add(other.lo);
        if let Some(sp) = other.special {
            self.add(sp);
        }
    }

    fn add_long(&mut self, x: i64) {
        let high = x / (1 << 32) * (1 << 32);
        self.add(high as f64);
        self.add((x - high) as f64);
    }

    /// The total as a long, if it is a whole number that fits one (an
    /// integer total is exact: `hi + lo` to the unit).
    fn as_long(&self) -> Option<i64> {
        if self.special.is_some() || self.hi.fract() != 0.0 || self.lo.fract() != 0.0 {
            return None;
        }
        // Whole numbers; as i128 (saturating far out of range) they add
        // exactly wherever the total could be a long.
        let (hi, lo) = (self.hi as i128, self.lo as i128);
        i64::try_from(hi.checked_add(lo)?).ok()
    }

    fn value(&self) -> f64 {
        match self.special {
            Some(special) => special + self.hi,
            None => self.hi + self.lo,
        }
    }
}

/// The widest numeric type a `$sum` has seen: its result's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Widest {
    Int,
    Long,
    Double,
}

/// One group's running accumulators.
#[derive(Debug, Clone)]
enum Acc {
    /// `dec`: the total of Decimal128 values, once one is seen (the
    /// result is then a decimal, as mongod's).
    Sum {
        total: DoubleDouble,
        widest: Widest,
        dec: Option<Dec>,
    },
    Avg {
        total: DoubleDouble,
        n: u64,
        dec: Option<Dec>,
    },
    Pick(Option<Bson>),
    Push(Vec<Bson>),
    /// `$addToSet`'s values, each once, by their (collated) KeyString.
    Set(BTreeMap<Vec<u8>, Bson>),
}

impl Acc {
    fn new(kind: AccKind) -> Acc {
        match kind {
            AccKind::Sum => Acc::Sum { total: DoubleDouble::default(), widest: Widest::Int, dec: None },
            AccKind::Avg => Acc::Avg { total: DoubleDouble::default(), n: 0, dec: None },
            AccKind::Push => Acc::Push(Vec::new()),
            AccKind::AddToSet => Acc::Set(BTreeMap::new()),
            AccKind::Min | AccKind::Max | AccKind::First | AccKind::Last => Acc::Pick(None),
        }
    }

    /// Fold in `later`, the same group's accumulator over later input.
    fn combine(&mut self, kind: AccKind, later: Acc, cx: &EvalContext) {
        let add_dec = |dec: &mut Option<Dec>, other: Option<Dec>| {
            if let Some(o) = other {
                *dec = Some(match dec.take() {
                    Some(d) => d.add(&o),
                    None => o,
                });
            }
        };
        match (self, later) {
            (Acc::Sum { total, widest, dec }, Acc::Sum { total: t, widest: w, dec: d }) => {
                total.merge(&t);
                *widest = (*widest).max(w);
                add_dec(dec, d);
            }
            (Acc::Avg { total, n, dec }, Acc::Avg { total: t, n: m, dec: d }) => {
                total.merge(&t);
                *n += m;
                add_dec(dec, d);
            }
            (Acc::Push(items), Acc::Push(more)) => items.extend(more),
            // The first seen of equal values stays.
            (Acc::Set(held), Acc::Set(more)) => more.into_iter().for_each(|(k, v)| {
                held.entry(k).or_insert(v);
            }),
            // What the later input would have done to this accumulator.
            (acc @ Acc::Pick(_), Acc::Pick(Some(v))) => accumulate(kind, acc, Some(v), cx),
            (Acc::Pick(_), Acc::Pick(None)) => {}
            _ => unreachable!("partials of one group have the same accumulators"),
        }
    }

    /// As written to a spill run.
    fn to_document(&self) -> Document {
        let total_doc = |t: &DoubleDouble| {
            let mut d = bson::doc! { "hi": t.hi, "lo": t.lo };
            if let Some(sp) = t.special {
                d.insert("sp", sp);
            }
            d
        };
        let mut d = match self {
            Acc::Sum { total, widest, .. } => bson::doc! { "sum": total_doc(total), "w": *widest as i32 },
            Acc::Avg { total, n, .. } => bson::doc! { "avg": total_doc(total), "n": *n as i64 },
            Acc::Pick(v) => v.iter().map(|v| ("v".to_string(), v.clone())).collect(),
            Acc::Push(items) => bson::doc! { "push": items.clone() },
            Acc::Set(held) => {
                let keys: Vec<Bson> = held
                    .keys()
                    .map(|k| {
                        Bson::Binary(bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: k.clone() })
                    })
                    .collect();
                bson::doc! { "set": held.values().cloned().collect::<Vec<_>>(), "keys": keys }
            }
        };
        if let Acc::Sum { dec: Some(dec), .. } | Acc::Avg { dec: Some(dec), .. } = self {
            d.insert("dec", dec.to_bson());
        }
        d
    }

    fn from_document(d: &Document) -> Option<Acc> {
        let total = |t: &Document| {
            Some(DoubleDouble { hi: t.get_f64("hi").ok()?, lo: t.get_f64("lo").ok()?, special: t.get_f64("sp").ok() })
        };
        let dec = match d.get("dec") {
            Some(v) => Some(Dec::from_bson(v, DoubleDigits::ThirtyFour)?),
            None => None,
        };
        if let Ok(t) = d.get_document("sum") {
            let widest = match d.get_i32("w").ok()? {
                0 => Widest::Int,
                1 => Widest::Long,
                _ => Widest::Double,
            };
            return Some(Acc::Sum { total: total(t)?, widest, dec });
        }
        if let Ok(t) = d.get_document("avg") {
            return Some(Acc::Avg { total: total(t)?, n: u64::try_from(d.get_i64("n").ok()?).ok()?, dec });
        }
        if let Ok(items) = d.get_array("push") {
            return Some(Acc::Push(items.clone()));
        }
        if let (Ok(items), Ok(keys)) = (d.get_array("set"), d.get_array("keys")) {
            let keys = keys.iter().map(|k| match k {
                Bson::Binary(b) => Some(b.bytes.clone()),
                _ => None,
            });
            return keys.zip(items).map(|(k, v)| Some((k?, v.clone()))).collect::<Option<_>>().map(Acc::Set);
        }
        Some(Acc::Pick(d.get("v").cloned()))
    }
}

fn accumulate(kind: AccKind, acc: &mut Acc, v: Option<Bson>, cx: &EvalContext) {
    // A decimal joins the decimal total of $sum and $avg.
    if let Some(d @ Bson::Decimal128(_)) = &v {
        match acc {
            Acc::Sum { dec, .. } => return add_decimal(dec, d),
            Acc::Avg { dec, n, .. } => {
                *n += 1;
                return add_decimal(dec, d);
            }
            Acc::Pick(_) | Acc::Push(_) | Acc::Set(_) => {}
        }
    }
    match (kind, acc) {
        (AccKind::Sum, Acc::Sum { total, widest, .. }) => match v.as_ref().and_then(number) {
            Some(Number::Int(i)) => {
                if matches!(v, Some(Bson::Int64(_))) {
                    *widest = (*widest).max(Widest::Long);
                }
                total.add_long(i);
            }
            Some(Number::Float(f)) => {
                *widest = Widest::Double;
                total.add(f);
            }
            None => {}
        },
        (AccKind::Avg, Acc::Avg { total, n, .. }) => match v.as_ref().and_then(number) {
            Some(Number::Int(i)) => {
                total.add_long(i);
                *n += 1;
            }
            Some(Number::Float(f)) => {
                total.add(f);
                *n += 1;
            }
            None => {}
        },
        (AccKind::Min | AccKind::Max, Acc::Pick(cur)) => {
            let Some(v) = v.filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) else { return };
            let better = match cur {
                None => true,
                Some(c) => {
                    let o = cx.compare(&v, c);
                    if matches!(kind, AccKind::Min) {
                        o == Ordering::Less
                    } else {
                        o == Ordering::Greater
                    }
                }
            };
            if better {
                *cur = Some(v);
            }
        }
        (AccKind::First, Acc::Pick(cur)) => {
            if cur.is_none() {
                *cur = Some(v.unwrap_or(Bson::Null));
            }
        }
        (AccKind::Last, Acc::Pick(cur)) => *cur = Some(v.unwrap_or(Bson::Null)),
        (AccKind::Push, Acc::Push(items)) => {
            if let Some(v) = v {
                items.push(v);
            }
        }
        // `$addToSet` is taken in by `group` itself, which counts the key
        // each new value is held by.
        _ => unreachable!("accumulator state matches its kind"),
    }
}

fn add_decimal(total: &mut Option<Dec>, v: &Bson) {
    let value = Dec::from_bson(v, DoubleDigits::ThirtyFour).expect("a decimal");
    *total = Some(match total.take() {
        Some(total) => total.add(&value),
        None => value,
    });
}

/// A `$sum` of numbers that were not decimals: an int if every one was
/// and it fits, a long if the widest was a long (or an int sum outgrew
/// int), else a double (also when an integer sum overflows a long).
fn non_decimal_sum(total: &DoubleDouble, widest: Widest) -> Bson {
    match (widest, total.as_long()) {
        (Widest::Int, Some(i)) => i32::try_from(i).map_or(Bson::Int64(i), Bson::Int32),
        (Widest::Long, Some(i)) => Bson::Int64(i),
        _ => Bson::Double(total.value()),
    }
}

/// As a decimal (mongod converts its double sum with 34 digits).
fn as_decimal(v: &Bson) -> Dec {
    Dec::from_bson(v, DoubleDigits::ThirtyFour).expect("a number")
}

/// A double-double total joining a decimal total: each half converted
/// with 34 digits, so the pair's extra precision is kept.
fn add_to_decimal(dec: &Dec, total: &DoubleDouble, widest: Widest) -> Dec {
    match (widest, total.as_long(), total.special) {
        (Widest::Int | Widest::Long, Some(i), _) => dec.add(&as_decimal(&Bson::Int64(i))),
        (_, _, Some(special)) => dec.add(&as_decimal(&Bson::Double(special + total.hi))),
        _ => dec.add(&as_decimal(&Bson::Double(total.hi))).add(&as_decimal(&Bson::Double(total.lo))),
    }
}

fn finish(acc: Acc) -> Bson {
    match acc {
        Acc::Sum { total, widest, dec: Some(dec) } => add_to_decimal(&dec, &total, widest).to_bson(),
        Acc::Avg { total, n, dec: Some(dec) } => add_to_decimal(&dec, &total, Widest::Double).div_count(n).to_bson(),
        Acc::Sum { total, widest, dec: None } => non_decimal_sum(&total, widest),
        Acc::Avg { n: 0, .. } => Bson::Null,
        Acc::Avg { total, n, .. } => Bson::Double(total.value() / n as f64),
        Acc::Pick(v) => v.unwrap_or(Bson::Null),
        Acc::Push(items) => Bson::Array(items),
        Acc::Set(held) => Bson::Array(held.into_values().collect()),
    }
}

/// `v`'s KeyString under the context's collation: equal values (1 and
/// 1.0; strings equal under the collation) share it.
fn collated_key(v: &Bson, cx: &EvalContext) -> Vec<u8> {
    match cx.collation_key(v) {
        Some(collated) => doc::keystring::encode(&collated),
        None => doc::keystring::encode(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn run(pipeline: Bson, docs: Vec<Document>) -> Vec<Document> {
        let Bson::Array(stages) = pipeline else { panic!() };
        Pipeline::parse(&stages).unwrap().run(docs.into_iter()).unwrap()
    }

    /// A pipeline over documents holding only the fields it reads gives
    /// what it gives over the whole documents.
    #[test]
    fn a_pipeline_reads_only_the_fields_it_names() {
        let docs = vec![
            doc! { "_id": 1, "k": 5, "s": "x".repeat(50), "arr": [1, 2], "g": { "h": 1 } },
            doc! { "_id": 2, "k": 12, "arr": [], "g": { "h": 2 } },
            doc! { "_id": 3, "s": "y", "g": null },
            doc! { "_id": 4, "k": 7.5, "arr": [3], "g": { "h": 1 } },
        ];
        let cases = [
            (
                bson!([{ "$match": { "k": { "$lt": 10 } } }, { "$group": { "_id": 1, "n": { "$sum": 1 } } }]),
                Some(vec!["k"]),
            ),
            (bson!([{ "$group": { "_id": { "$mod": ["$k", 10] }, "n": { "$sum": 1 } } }]), Some(vec!["k"])),
            (bson!([{ "$unwind": "$arr" }, { "$sort": { "g.h": 1 } }, { "$count": "c" }]), Some(vec!["arr", "g"])),
            (bson!([{ "$match": {} }, { "$group": { "_id": null, "n": { "$sum": 1 } } }]), Some(vec![])),
            (bson!([{ "$group": { "_id": "$g.h", "all": { "$push": "$$ROOT.s" } } }]), Some(vec!["g", "s"])),
            (bson!([{ "$group": { "_id": "$$ROOT", "n": { "$sum": 1 } } }]), None),
            (bson!([{ "$match": { "$expr": { "$gt": ["$k", 6] } } }, { "$count": "c" }]), None),
            (bson!([{ "$match": { "k": 5 } }]), None),
            (bson!([{ "$project": { "k": 1 } }, { "$count": "c" }]), Some(vec!["_id", "k"])),
            (
                bson!([{ "$match": { "arr": 1 } }, { "$project": { "_id": 0, "t": { "$add": ["$k", 1] } } }]),
                Some(vec!["arr", "t", "k"]),
            ),
            (bson!([{ "$project": { "k": 0 } }, { "$count": "c" }]), None),
        ];
        for (stages, want) in cases {
            let Bson::Array(list) = &stages else { panic!() };
            let pipeline = Pipeline::parse(list).unwrap();
            let reads = pipeline.reads();
            assert_eq!(reads, want.map(|w| w.into_iter().map(String::from).collect::<Vec<_>>()), "{stages}");
            let Some(names) = reads else { continue };
            let partial: Vec<Document> = docs
                .iter()
                .map(|d| doc::bson_bytes::decode_fields(&doc::bson_bytes::encode(d).unwrap(), &names).unwrap())
                .collect();
            assert_eq!(run(stages.clone(), partial), run(stages.clone(), docs.clone()), "{stages}");
        }
    }

    fn people() -> Vec<Document> {
        vec![
            doc! { "name": "a", "team": "x", "age": 30 },
            doc! { "name": "b", "team": "y", "age": 20.5 },
            doc! { "name": "c", "team": "x", "age": 40 },
            doc! { "name": "d", "team": "y" },
        ]
    }

    #[test]
    fn sum_and_avg_keep_precision_and_mongod_result_types() {
        let sum = |values: Vec<Bson>| {
            let docs = values.into_iter().map(|v| doc! { "v": v }).collect();
            let out = run(bson!([{ "$group": { "_id": null, "s": { "$sum": "$v" }, "a": { "$avg": "$v" } } }]), docs);
            (out[0].get("s").unwrap().clone(), out[0].get("a").unwrap().clone())
        };
        // Twice a double's precision: ten 0.1s make 1, their mean 0.1.
        assert_eq!(sum(vec![Bson::Double(0.1); 10]), (Bson::Double(1.0), Bson::Double(0.1)));
        assert_eq!(sum(vec![Bson::Double(1e100), Bson::Double(1.0), Bson::Double(-1e100)]).0, Bson::Double(1.0));
        // The widest integer type seen, growing from int to long.
        assert_eq!(sum(vec![Bson::Int32(1), Bson::Int32(2)]).0, Bson::Int32(3));
        assert_eq!(sum(vec![Bson::Int64(5)]).0, Bson::Int64(5));
        assert_eq!(sum(vec![Bson::Int32(i32::MAX), Bson::Int32(1)]).0, Bson::Int64(1 << 31));
        // A long overflow turns to a double, exactly summed.
        assert_eq!(sum(vec![Bson::Int64(i64::MAX), Bson::Int64(i64::MAX)]).0, Bson::Double(2.0 * i64::MAX as f64));
        assert_eq!(sum(vec![Bson::Int64(i64::MAX), Bson::Int64(1), Bson::Int64(-2)]).0, Bson::Int64(i64::MAX - 1));
        assert_eq!(sum(vec![Bson::Int32(1), Bson::Double(0.5)]).0, Bson::Double(1.5));
        // Infinities and NaN as doubles add them.
        assert_eq!(sum(vec![Bson::Double(f64::INFINITY), Bson::Int32(1)]).0, Bson::Double(f64::INFINITY));
        let (s, _) = sum(vec![Bson::Double(f64::INFINITY), Bson::Double(f64::NEG_INFINITY)]);
        assert!(matches!(s, Bson::Double(x) if x.is_nan()));
        // Joining a decimal, both halves of the double total count.
        let mut tenths = vec![Bson::Double(0.1); 10];
        tenths.push(Bson::Decimal128("0".parse().unwrap()));
        let Bson::Decimal128(d) = sum(tenths).0 else { panic!("a decimal") };
        assert!(d.to_string().starts_with("1.00000000000000005551115123125"), "{d}");
    }

    #[test]
    fn spilled_sorts_and_groups_answer_as_in_memory_ones() {
        let docs: Vec<Document> = (0..3000)
            .map(|i| {
                let v: Bson = match i % 4 {
                    0 => Bson::Int32(i),
                    1 => Bson::Int64(i as i64 * 3),
                    2 => Bson::Double(i as f64 * 0.5),
                    _ => Bson::Decimal128(format!("{i}.25").parse().unwrap()),
                };
                doc! { "k": (i * 7919) % 503, "g": i % 37, "s": format!("s{}", i % 11), "v": v, "i": i }
            })
            .collect();
        let pipelines = [
            bson!([{ "$sort": { "k": 1, "i": -1 } }]),
            bson!([{ "$sort": { "s": -1, "k": 1 } }, { "$limit": 700 }, { "$skip": 5 }]),
            bson!([{ "$group": {
                "_id": "$g", "sum": { "$sum": "$v" }, "avg": { "$avg": "$v" }, "min": { "$min": "$k" },
                "max": { "$max": "$s" }, "first": { "$first": "$i" }, "last": { "$last": "$i" },
                "all": { "$push": "$i" }, "kinds": { "$addToSet": "$s" }, "ks": { "$addToSet": { "$mod": ["$k", 9] } },
            } }]),
            bson!([{ "$group": { "_id": { "s": "$s", "k": { "$mod": ["$k", 50] } }, "n": { "$sum": 1 } } },
                   { "$sort": { "n": -1, "_id.s": 1, "_id.k": 1 } }]),
            // One group holding everything: its partials are concatenated.
            bson!([{ "$group": { "_id": null, "all": { "$push": "$k" }, "n": { "$sum": "$i" } } }]),
        ];
        let limits = Some(MemoryLimits { sort: 4000, group: 4000 });
        for p in pipelines {
            let parsed = Pipeline::parse(p.as_array().unwrap()).unwrap();
            let want = parsed.run(docs.clone().into_iter()).unwrap();
            let refused = parsed.clone().with_memory_limits(limits).run(docs.clone().into_iter()).unwrap_err();
            assert_eq!(refused.code, 292, "{p}");
            let dir = tempfile::tempdir().unwrap();
            let counters = Arc::new(SpillCounters::default());
            let spill = SpillTo { dir: dir.path().to_path_buf(), counters: counters.clone() };
            let got = parsed.with_memory_limits(limits).with_spill(Some(spill)).run(docs.clone().into_iter()).unwrap();
            assert_eq!(got, want, "{p}");
            // The first stage is the one held to the small limit.
            let first_stage_spills = match p.as_array().unwrap()[0].as_document().unwrap().contains_key("$group") {
                true => counters.group_spills.load(Atomic::Relaxed),
                false => counters.sort_spills.load(Atomic::Relaxed),
            };
            assert!(first_stage_spills > 2, "{p}: {first_stage_spills} spills");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_partial_group_survives_its_run() {
        let accs = vec![
            Acc::Sum { total: DoubleDouble { hi: 1.5, lo: 1e-20, special: None }, widest: Widest::Long, dec: None },
            Acc::Avg {
                total: DoubleDouble { hi: 2.0, lo: 0.0, special: Some(f64::INFINITY) },
                n: 7,
                dec: Some(
                    Dec::from_bson(&Bson::Decimal128("1.10".parse().unwrap()), DoubleDigits::ThirtyFour).unwrap(),
                ),
            },
            Acc::Pick(None),
            Acc::Pick(Some(Bson::Null)),
            Acc::Push(vec![Bson::Int32(1), Bson::String("x".into())]),
            Acc::Set([(vec![7, 1], Bson::Int32(1)), (vec![9], Bson::String("y".into()))].into_iter().collect()),
        ];
        let p = Partial { key: vec![1, 2, 0], id: Bson::String("a".into()), accs };
        let mut bytes = Vec::new();
        p.write_to(&mut bytes).unwrap();
        let back = Partial::read_from(&mut &bytes[..]).unwrap().unwrap();
        assert_eq!((back.key.clone(), back.id.clone()), (p.key.clone(), p.id.clone()));
        assert_eq!(format!("{:?}", back.accs), format!("{:?}", p.accs));
        assert!(Partial::read_from(&mut &bytes[..0]).unwrap().is_none());
        let mut bad = Vec::new();
        doc! { "k": 1 }.write_to(&mut bad).unwrap();
        assert!(Partial::read_from(&mut &bad[..]).is_err());
    }

    #[test]
    fn consecutive_matches_are_one() {
        let stages = bson!([{ "$match": { "a": 1 } }, { "$match": {} }, { "$match": { "b": 2 } }, { "$match": { "c": 3 } }, { "$limit": 1 }, { "$match": { "d": 4 } }]);
        let merged = coalesce_matches(stages.as_array().unwrap());
        assert_eq!(
            Bson::Array(merged),
            bson!([{ "$match": { "$and": [{ "a": 1 }, { "b": 2 }, { "c": 3 }] } }, { "$limit": 1 }, { "$match": { "d": 4 } }])
        );
        // An invalid filter keeps its error (an empty `$and` is no list to join).
        let empty_and = bson!([{ "$match": { "$and": [] } }, { "$match": { "a": 1 } }]);
        assert_eq!(Pipeline::parse(empty_and.as_array().unwrap()).unwrap_err().code, 2);
        let not_a_filter = bson!([{ "$match": 5 }, { "$match": { "a": 1 } }]);
        assert_eq!(Pipeline::parse(not_a_filter.as_array().unwrap()).unwrap_err().code, 15959);
    }

    #[test]
    fn add_to_set_keeps_each_value_once() {
        let docs = vec![
            doc! { "g": 1, "v": 1 },
            doc! { "g": 1, "v": 1.0 },
            doc! { "g": 1, "v": "a" },
            doc! { "g": 1, "v": [1, 2] },
            doc! { "g": 1, "v": [1, 2] },
            doc! { "g": 1 },
            doc! { "g": 2, "v": null },
        ];
        let got =
            run(bson!([{ "$group": { "_id": "$g", "s": { "$addToSet": "$v" } } }, { "$sort": { "_id": 1 } }]), docs);
        // 1 and 1.0 are one value (the first seen stays); a missing value adds nothing.
        assert_eq!(got, vec![doc! { "_id": 1, "s": [1, "a", [1, 2]] }, doc! { "_id": 2, "s": [null] }]);
    }

    #[test]
    fn count_documents_shape() {
        let p = bson!([{ "$match": { "team": "x" } }, { "$group": { "_id": 1, "n": { "$sum": 1 } } }]);
        assert_eq!(run(p, people()), vec![doc! { "_id": 1, "n": 2 }]);
        let p = bson!([{ "$skip": 1 }, { "$limit": 2 }, { "$count": "n" }]);
        assert_eq!(run(p, people()), vec![doc! { "n": 2 }]);
        assert_eq!(run(bson!([{ "$match": { "none": 1 } }, { "$count": "n" }]), people()), vec![]);
    }

    #[test]
    fn group_accumulators() {
        let p = bson!([{ "$group": {
            "_id": "$team",
            "total": { "$sum": "$age" }, "avg": { "$avg": "$age" },
            "min": { "$min": "$age" }, "max": { "$max": "$age" },
            "first": { "$first": "$name" }, "last": { "$last": "$name" }, "names": { "$push": "$name" },
        } }]);
        let out = run(p, people());
        assert_eq!(
            out[0],
            doc! { "_id": "x", "total": 70, "avg": 35.0, "min": 30, "max": 40, "first": "a", "last": "c", "names": ["a", "c"] }
        );
        assert_eq!(out[1].get("total"), Some(&Bson::Double(20.5)));
        assert_eq!(out[1].get("avg"), Some(&Bson::Double(20.5)), "missing values are skipped");
    }

    #[test]
    fn numbers_that_compare_equal_share_a_group() {
        let p = bson!([{ "$group": { "_id": "$k", "n": { "$sum": 1 } } }]);
        let out = run(p, vec![doc! { "k": 1 }, doc! { "k": 1.0 }, doc! { "k": 2i64 }]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn bad_pipelines_are_refused() {
        let parse = |p: Bson| Pipeline::parse(p.as_array().unwrap()).unwrap_err();
        assert_eq!(parse(bson!([{ "$frob": {} }])).message, "Unrecognized pipeline stage name: '$frob'");
        assert_eq!(parse(bson!([{ "$limit": 0 }])).message, "the limit must be positive");
        let skip = parse(bson!([{ "$skip": -1 }]));
        assert_eq!(skip.code, 5107200);
        assert_eq!(skip.message, "invalid argument to $skip stage: Expected a non-negative number in: $skip: -1");
        assert_eq!(
            parse(bson!([{ "$limit": 1.5 }])).message,
            "invalid argument to $limit stage: Expected an integer: $limit: 1.5"
        );
        assert_eq!(
            parse(bson!([{ "$skip": "x" }])).message,
            "invalid argument to $skip stage: Expected a number in: $skip: \"x\""
        );
        assert_eq!(
            parse(bson!([{ "$limit": f64::NAN }])).message,
            "invalid argument to $limit stage: Expected an integer, but found NaN in: $limit: nan.0"
        );
        assert_eq!(
            parse(bson!([{ "$skip": f64::INFINITY }])).message,
            "invalid argument to $skip stage: Cannot represent as a 64-bit integer: $skip: inf.0"
        );
        assert_eq!(parse(bson!([{ "$count": "" }])).code, 40157);
        assert_eq!(parse(bson!([{ "$count": "$n" }])).code, 40158);
        assert_eq!(parse(bson!([{ "$count": "a.b" }])).code, 40160);
        assert_eq!(parse(bson!([{ "$unset": [] }])).code, 31119);
        assert_eq!(parse(bson!([{ "$unset": [1] }])).code, 31120);
        assert_eq!(parse(bson!([{ "$unset": 1 }])).code, 31002);
        assert_eq!(parse(bson!([{ "$group": { "n": { "$sum": 1 } } }])).code, 15955);
        assert_eq!(parse(bson!([{ "$group": { "_id": 1, "n": { "$frob": 1 } } }])).code, 15952);
        assert_eq!(parse(bson!([{ "$match": {}, "$skip": 1 }])).code, 40323);
    }
}
