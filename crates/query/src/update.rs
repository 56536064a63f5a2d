//! The update language: replacement documents and update operators
//! (`$set $unset $inc $mul $rename $min $max $currentDate $setOnInsert
//! $push $addToSet $pop $pull $pullAll $bit`), positional `$`, `$[]` and
//! `$[<identifier>]` with array filters, and the document an upsert
//! inserts.
//!
//! As in MongoDB, the operators of one update form a tree of paths: two
//! paths where one is a prefix of the other (or the same path twice) are a
//! conflict (code 40). The tree is applied field by field, new fields in
//! the order MongoDB 5.0+ creates them: numeric names in numeric order,
//! others in byte order.

use crate::collation::Collation;
use crate::context::EvalContext;
use crate::error::{
    bad_value, err, FilterError, CONFLICTING_UPDATE_OPERATORS, DOLLAR_PREFIXED_FIELD_NAME, EMPTY_FIELD_NAME,
    FAILED_TO_PARSE, IMMUTABLE_FIELD, NOT_SINGLE_VALUE_FIELD, PATH_NOT_VIABLE, TYPE_MISMATCH,
};
use crate::expr::{Scope, FIELD_PATH_PARTS_MAX};
use crate::field_names::check_updated;
use crate::matcher::{is_operator_document, ElementFilter, Filter};
use crate::types::is_number;
use crate::update_pipeline::UpdatePipeline;
use bson::{Bson, Document, Timestamp};
use doc::compare::{canonical_type, compare};
use doc::decimal_math::{Dec, DoubleDigits};
use doc::format;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::Arc;

/// mongod's type names (`types.rs`), also at the path other crates use.
pub use crate::types::type_name;

/// A parsed update.
#[derive(Debug, Clone)]
pub struct Update {
    kind: Kind,
    /// An operator path whose first field starts with `$` (`{$set:
    /// {$hotel: 1}}`): refused when it updates a document, allowed when an
    /// upsert inserts one (insert rules, as mongod's manual shows).
    dollar_path: Option<String>,
    filters: ArrayFilters,
    /// Strings compare through it (`$pull`, `$addToSet`, `$min`/`$max`,
    /// pipeline expressions; not arrayFilters, which have their own).
    collation: Option<Arc<Collation>>,
}

#[derive(Debug, Clone)]
enum Kind {
    Replacement(Document),
    Operators(Node),
    Pipeline(UpdatePipeline),
}

/// A field name in the update tree, ordered as MongoDB applies them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldName(String);

impl Ord for FieldName {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.0.parse::<u64>(), other.0.parse::<u64>()) {
            (Ok(a), Ok(b)) => a.cmp(&b).then_with(|| self.0.cmp(&other.0)),
            _ => self.0.cmp(&other.0),
        }
    }
}

impl PartialOrd for FieldName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone, Default)]
struct Node {
    children: BTreeMap<FieldName, Node>,
    leaf: Option<Leaf>,
}

#[derive(Debug, Clone)]
enum Leaf {
    Set(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    /// `true`: a timestamp, `false`: a date.
    CurrentDate(bool),
    SetOnInsert(Bson),
    Push(Push),
    AddToSet(Vec<Bson>),
    /// `true`: remove the first element (`$pop: -1`).
    Pop(bool),
    Pull(ElementFilter),
    PullAll(Vec<Bson>),
    /// The source of a `$rename`: removed.
    RenameFrom,
    /// The target of a `$rename`: set to the source's old value.
    RenameTo(String),
    Bit(Vec<(BitOp, Bson)>),
}

impl Leaf {
    /// Would applying this to a missing field create it?
    fn creates(&self) -> bool {
        !matches!(self, Leaf::Unset | Leaf::Pop(_) | Leaf::Pull(_) | Leaf::PullAll(_) | Leaf::RenameFrom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Default)]
struct Push {
    each: Vec<Bson>,
    slice: Option<i64>,
    sort: Option<PushSort>,
    position: Option<i64>,
}

#[derive(Debug, Clone)]
enum PushSort {
    /// Sort the elements themselves; `true` is descending.
    Whole(bool),
    /// Sort by fields of the elements.
    Fields(Vec<(String, bool)>),
}

/// The named array filters of an update (`arrayFilters`).
#[derive(Debug, Clone, Default)]
struct ArrayFilters {
    by_name: HashMap<String, Filter>,
}

/// What an update is applied with.
struct Cx<'a> {
    /// The array position the query matched (for `$`).
    position: Option<usize>,
    /// The document is being inserted by an upsert (for `$setOnInsert`).
    inserting: bool,
    /// `_id: …` of the document, for error messages.
    id: String,
    filters: &'a ArrayFilters,
    renamed: HashMap<String, Option<Bson>>,
    /// The update's collation, for the comparisons its operators make.
    eval: &'a EvalContext<'a>,
}

impl Update {
    /// Parse an update document: a replacement when no field starts with
    /// `$`, update operators otherwise.
    pub fn parse(update: &Document, array_filters: &[Document]) -> Result<Update, FilterError> {
        let filters = parse_array_filters(array_filters)?;
        if !update.keys().next().is_some_and(|k| k.starts_with('$')) {
            if !array_filters.is_empty() {
                return Err(err(
                    FAILED_TO_PARSE,
                    "arrayFilters may only be specified for update operators, not replacement documents",
                ));
            }
            return Ok(Update { kind: Kind::Replacement(update.clone()), dollar_path: None, filters, collation: None });
        }
        let mut root = Node::default();
        let mut used = Vec::new();
        let mut dollar_path = None;
        for (op, arg) in update {
            let Bson::Document(fields) = arg else {
                return Err(err(
                    FAILED_TO_PARSE,
                    format!(
                        "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{}}}",
                        type_name(arg),
                        format::field(op, arg)
                    ),
                ));
            };
            for (path, value) in fields {
                let leaf = parse_leaf(op, path, value)?;
                check_path(path, &filters, &mut used)?;
                if dollar_path.is_none() && starts_with_dollar_name(path) {
                    dollar_path = Some(path.clone());
                }
                if let Leaf::RenameTo(_) = leaf {
                    let Bson::String(to) = value else { unreachable!("parse_leaf checked the target") };
                    check_path(to, &filters, &mut used)?;
                    insert(&mut root, path, Leaf::RenameFrom)?;
                    insert(&mut root, to, Leaf::RenameTo(path.clone()))?;
                } else {
                    insert(&mut root, path, leaf)?;
                }
            }
        }
        if let Some(unused) = filters.by_name.keys().find(|name| !used.contains(name)) {
            return Err(err(
                FAILED_TO_PARSE,
                format!(
                    "The array filter for identifier '{unused}' was not used in the update {}",
                    format::document(update)
                ),
            ));
        }
        Ok(Update { kind: Kind::Operators(root), dollar_path, filters, collation: None })
    }

    /// A pipeline-style update (`u: [stages]`), its expressions seeing
    /// `scope`'s variables.
    pub fn parse_pipeline(stages: &[Bson], array_filters: &[Document], scope: &Scope) -> Result<Update, FilterError> {
        if !array_filters.is_empty() {
            return Err(err(FAILED_TO_PARSE, "arrayFilters may not be specified for pipeline-style updates"));
        }
        let pipeline = UpdatePipeline::parse(stages, scope)?;
        Ok(Update {
            kind: Kind::Pipeline(pipeline),
            dollar_path: None,
            filters: parse_array_filters(&[])?,
            collation: None,
        })
    }

    /// This update with strings compared through `collation`.
    pub fn with_collation(mut self, collation: Option<Arc<Collation>>) -> Update {
        self.collation = collation;
        self
    }

    /// Is this a replacement document (not update operators)?
    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, Kind::Replacement(_))
    }

    /// The top-level fields this update sets, with their values, when all
    /// it does is `$set` top-level fields other than `_id` to values that
    /// nest nothing (no document, array or code with scope; no dotted or
    /// positional path, no
    /// other operator); `None` for any other update. Applied to a document
    /// that has every one of those fields, such an update replaces their
    /// values where they are and changes nothing else, so a caller holding
    /// the stored bytes can build the new ones without a `Document`.
    pub fn top_level_scalar_sets(&self) -> Option<Vec<(&str, &Bson)>> {
        let Kind::Operators(root) = &self.kind else { return None };
        if root.leaf.is_some() || self.dollar_path.is_some() || root.children.is_empty() {
            return None;
        }
        root.children
            .iter()
            .map(|(name, node)| match (&node.leaf, node.children.is_empty()) {
                (Some(Leaf::Set(v)), true)
                    if name.0 != "_id"
                        && !name.0.starts_with('$')
                        && !name.0.contains('.')
                        && !matches!(v, Bson::Document(_) | Bson::Array(_) | Bson::JavaScriptCodeWithScope(_)) =>
                {
                    Some((name.0.as_str(), v))
                }
                _ => None,
            })
            .collect()
    }

    /// The document `doc` becomes. `position` is the array position the
    /// query matched (for `$`); `inserting` is set for an upsert's insert.
    pub fn apply(&self, doc: &Document, position: Option<usize>, inserting: bool) -> Result<Document, FilterError> {
        // Nesting past what may be stored is refused as the document is
        // encoded (`doc::catalog`), in the same pass.
        self.apply_in(doc, position, inserting, &EvalContext::new(self.collation.as_deref()))
    }

    fn apply_in(
        &self,
        doc: &Document,
        position: Option<usize>,
        inserting: bool,
        eval: &EvalContext,
    ) -> Result<Document, FilterError> {
        let old_id = doc.get("_id");
        match &self.kind {
            Kind::Replacement(r) => {
                let mut out = Document::new();
                if let Some(id) = r.get("_id").or(old_id) {
                    out.insert("_id", id.clone());
                }
                for (k, v) in r {
                    if k != "_id" {
                        out.insert(k.clone(), v.clone());
                    }
                }
                // mongod checks the new document's names (its own `_id`
                // included) before the immutable `_id`; an upsert's new
                // document follows the insert rules instead (the caller's).
                if !inserting {
                    check_updated(&out, false)?;
                }
                check_id_unchanged(old_id, r.get("_id"))?;
                if let Some(id) = old_id {
                    out.insert("_id", id.clone()); // the stored `_id` stays as it was
                }
                Ok(out)
            }
            Kind::Operators(root) => {
                if let (Some(path), false) = (&self.dollar_path, inserting) {
                    let part = path.split('.').next().unwrap_or(path);
                    return Err(err(
                        DOLLAR_PREFIXED_FIELD_NAME,
                        format!("The dollar ($) prefixed field '{part}' in '{path}' is not valid for storage."),
                    ));
                }
                let mut cx = Cx {
                    position,
                    inserting,
                    id: old_id.map(|id| format!("{{{}}}", format::field("_id", id))).unwrap_or_else(|| "{}".into()),
                    filters: &self.filters,
                    renamed: HashMap::new(),
                    eval,
                };
                collect_renames(root, doc, &mut cx)?;
                let mut out = doc.clone();
                apply_document(root, &mut out, &cx, "")?;
                check_id_kept(old_id, &out, inserting)?;
                Ok(out)
            }
            Kind::Pipeline(p) => {
                let out = p.apply_in(doc, eval)?;
                // A pipeline that drops `_id` keeps the document's own, first.
                let out = match (old_id, out.contains_key("_id")) {
                    (Some(id), false) => {
                        let mut with = Document::new();
                        with.insert("_id", id.clone());
                        with.extend(out);
                        with
                    }
                    _ => out,
                };
                if !inserting {
                    check_updated(&out, true)?;
                }
                check_id_unchanged(old_id, out.get("_id"))?;
                Ok(out)
            }
        }
    }

    /// The document an upsert inserts when nothing matched `query`: for a
    /// replacement, the replacement (with the query's `_id`, if it has an
    /// equality on one); for operators, the query's equality fields with
    /// the update applied. The caller adds an `_id` if there is none.
    pub fn upsert_document(&self, query: &Document) -> Result<Document, FilterError> {
        let mut seed = Document::new();
        let mut fields = Vec::new();
        equality_fields(query, &mut fields);
        match &self.kind {
            Kind::Replacement(_) => {
                if let Some((_, id)) = fields.iter().find(|(p, _)| p == "_id") {
                    seed.insert("_id", id.clone());
                }
                self.apply(&seed, None, true)
            }
            Kind::Operators(_) | Kind::Pipeline(_) => {
                let mut seen: Vec<&str> = Vec::new();
                for (path, value) in &fields {
                    if let Some(prior) = seen.iter().find(|p| *p == path || is_prefix(p, path) || is_prefix(path, p)) {
                        return Err(err(
                            NOT_SINGLE_VALUE_FIELD,
                            format!("cannot infer query fields to set, path '{prior}' is matched twice"),
                        ));
                    }
                    seen.push(path);
                    set_path(&mut seed, path, value.clone());
                }
                let mut out = self.apply(&seed, None, true)?;
                if let Some(id) = out.remove("_id") {
                    let mut first = Document::new();
                    first.insert("_id", id);
                    first.extend(out);
                    out = first;
                }
                Ok(out)
            }
        }
    }
}

/// Update operators must leave `_id` as it was (an upsert's insert may
/// set it).
fn check_id_kept(old_id: Option<&Bson>, out: &Document, inserting: bool) -> Result<(), FilterError> {
    match (old_id, out.get("_id")) {
        (Some(old), Some(new)) if same_value(old, new) => Ok(()),
        (None, _) if inserting => Ok(()),
        _ => Err(err(IMMUTABLE_FIELD, "Performing an update on the path '_id' would modify the immutable field '_id'")),
    }
}

/// Is `a` a strict path prefix of `b` (`a` then `.` then more)?
fn is_prefix(a: &str, b: &str) -> bool {
    b.len() > a.len() && b.starts_with(a) && b.as_bytes()[a.len()] == b'.'
}

/// Equal, and of the same canonical type (so `1` and `1.0` are the same
/// `_id`, as MongoDB's comparison says, but `1` and `"1"` are not).
/// [`same_value`] with strings compared through the collation in force
/// (`$addToSet`, `$pullAll`); `_id` checks stay binary.
fn same_collated(a: &Bson, b: &Bson, cx: &EvalContext) -> bool {
    canonical_type(a) == canonical_type(b) && cx.compare(a, b) == Ordering::Equal
}

fn same_value(a: &Bson, b: &Bson) -> bool {
    canonical_type(a) == canonical_type(b) && compare(a, b) == Ordering::Equal
}

/// A replacement or pipeline may not change a document's `_id`.
fn check_id_unchanged(old: Option<&Bson>, new: Option<&Bson>) -> Result<(), FilterError> {
    match (old, new) {
        (Some(old), Some(new)) if !same_value(old, new) => Err(err(
            IMMUTABLE_FIELD,
            format!(
                "After applying the update, the (immutable) field '_id' was found to have been altered to {}",
                format::field("_id", new)
            ),
        )),
        _ => Ok(()),
    }
}

fn parse_array_filters(array_filters: &[Document]) -> Result<ArrayFilters, FilterError> {
    /// `$expr` anywhere in the filter's logical tree (mongod parses array
    /// filters with it banned, before it looks for the identifier).
    fn has_expr(f: &Document) -> bool {
        f.iter().any(|(k, v)| match (k.as_str(), v) {
            ("$expr", _) => true,
            ("$and" | "$or" | "$nor", Bson::Array(items)) => items.iter().filter_map(Bson::as_document).any(has_expr),
            _ => false,
        })
    }
    let mut out = ArrayFilters::default();
    for f in array_filters {
        if has_expr(f) {
            return Err(err(224, "Error parsing array filter :: caused by :: $expr is not allowed in this context"));
        }
        let mut name: Option<&str> = None;
        for key in f.keys() {
            if key.starts_with('$') {
                continue;
            }
            let ident = key.split('.').next().unwrap_or("");
            match name {
                Some(n) if n != ident => {
                    return Err(err(
                        FAILED_TO_PARSE,
                        format!("Error parsing array filter :: caused by :: Expected a single top-level field name, found '{n}' and '{ident}'"),
                    ))
                }
                _ => name = Some(ident),
            }
        }
        let Some(name) = name else {
            return Err(err(
                FAILED_TO_PARSE,
                "Cannot use an expression without a top-level field name in arrayFilters",
            ));
        };
        let mut chars = name.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_lowercase()) || !chars.all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad_value(format!("Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{name}'")));
        }
        let filter = Filter::parse(f)
            .map_err(|e| err(e.code, format!("Error parsing array filter :: caused by :: {}", e.message)))?;
        if out.by_name.insert(name.to_string(), filter).is_some() {
            return Err(err(
                FAILED_TO_PARSE,
                format!("Found multiple array filters with the same top-level field name {name}"),
            ));
        }
    }
    Ok(out)
}

/// Check an update path's shape; records the array filters it names.
fn check_path(path: &str, filters: &ArrayFilters, used: &mut Vec<String>) -> Result<(), FilterError> {
    if path.is_empty() {
        return Err(err(EMPTY_FIELD_NAME, "An empty update path is not valid."));
    }
    if path.split('.').count() > FIELD_PATH_PARTS_MAX {
        let max = FIELD_PATH_PARTS_MAX;
        return Err(err(FAILED_TO_PARSE, format!("The update path is too long: more than {max} parts")));
    }
    let mut positional = 0;
    for (i, part) in path.split('.').enumerate() {
        if part.is_empty() {
            return Err(err(
                EMPTY_FIELD_NAME,
                format!("The update path '{path}' contains an empty field name, which is not allowed."),
            ));
        }
        if i == 0 && (part == "$" || part.starts_with("$[")) {
            return Err(bad_value(format!(
                "Cannot have positional (i.e. '$') element in the first position in path '{path}'"
            )));
        }
        if part == "$" {
            positional += 1;
            if positional > 1 {
                return Err(bad_value(format!("Too many positional (i.e. '$') elements found in path '{path}'")));
            }
        } else if let Some(ident) = part.strip_prefix("$[").and_then(|p| p.strip_suffix(']')) {
            if !ident.is_empty() {
                if !filters.by_name.contains_key(ident) {
                    return Err(bad_value(format!("No array filter found for identifier '{ident}' in path '{path}'")));
                }
                if !used.iter().any(|u| u == ident) {
                    used.push(ident.to_string());
                }
            }
        }
    }
    Ok(())
}

/// A path whose first field is a `$` name (not a positional operator).
fn starts_with_dollar_name(path: &str) -> bool {
    let first = path.split('.').next().unwrap_or(path);
    first.starts_with('$') && first != "$" && !first.starts_with("$[")
}

/// Add a leaf at `path`, refusing conflicts with paths already there.
fn insert(root: &mut Node, path: &str, leaf: Leaf) -> Result<(), FilterError> {
    let conflict = |at: &str| {
        err(CONFLICTING_UPDATE_OPERATORS, format!("Updating the path '{path}' would create a conflict at '{at}'"))
    };
    let mut node = root;
    let mut walked = String::new();
    for part in path.split('.') {
        if node.leaf.is_some() {
            return Err(conflict(&walked));
        }
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(part);
        node = node.children.entry(FieldName(part.to_string())).or_default();
    }
    if node.leaf.is_some() || !node.children.is_empty() {
        return Err(conflict(path));
    }
    node.leaf = Some(leaf);
    Ok(())
}

/// A number with no fraction, as an i64 (doubles up to 2^53 or so).
pub fn integral(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => Some(*d as i64),
        _ => None,
    }
}

fn parse_leaf(op: &str, path: &str, value: &Bson) -> Result<Leaf, FilterError> {
    let field = || format::field(path, value);
    Ok(match op {
        "$set" => Leaf::Set(value.clone()),
        "$unset" => Leaf::Unset,
        "$setOnInsert" => Leaf::SetOnInsert(value.clone()),
        "$min" => Leaf::Min(value.clone()),
        "$max" => Leaf::Max(value.clone()),
        "$inc" | "$mul" => {
            if !is_number(value) {
                let verb = if op == "$inc" { "increment" } else { "multiply" };
                return Err(err(TYPE_MISMATCH, format!("Cannot {verb} with non-numeric argument: {{{}}}", field())));
            }
            if op == "$inc" {
                Leaf::Inc(value.clone())
            } else {
                Leaf::Mul(value.clone())
            }
        }
        "$currentDate" => match value {
            Bson::Boolean(_) => Leaf::CurrentDate(false),
            Bson::Document(d) if d.len() == 1 && d.contains_key("$type") => match d.get("$type") {
                Some(Bson::String(t)) if t == "date" => Leaf::CurrentDate(false),
                Some(Bson::String(t)) if t == "timestamp" => Leaf::CurrentDate(true),
                _ => {
                    return Err(bad_value(
                        "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                    ))
                }
            },
            _ => {
                return Err(bad_value(format!(
                    "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
                    type_name(value)
                )))
            }
        },
        "$push" => Leaf::Push(parse_push(value)?),
        "$addToSet" => match value {
            Bson::Document(d) if d.contains_key("$each") => match d.get("$each") {
                Some(Bson::Array(items)) if d.len() == 1 => Leaf::AddToSet(items.clone()),
                Some(Bson::Array(_)) => {
                    let other = d.keys().find(|k| *k != "$each").cloned().unwrap_or_default();
                    return Err(bad_value(format!("Found unexpected fields after $each in $addToSet: {other}")));
                }
                Some(other) => {
                    return Err(err(
                        TYPE_MISMATCH,
                        format!(
                            "The argument to $each in $addToSet must be an array but it was of type {}",
                            type_name(other)
                        ),
                    ))
                }
                None => unreachable!(),
            },
            v => Leaf::AddToSet(vec![v.clone()]),
        },
        "$pop" => match integral(value) {
            Some(1) => Leaf::Pop(false),
            Some(-1) => Leaf::Pop(true),
            _ if is_number(value) => {
                return Err(err(FAILED_TO_PARSE, format!("$pop expects 1 or -1, found: {}", format::value(value))))
            }
            _ => return Err(err(FAILED_TO_PARSE, format!("Expected a number in: {}", field()))),
        },
        "$pull" => Leaf::Pull(Filter::parse_element(value)?),
        "$pullAll" => match value {
            Bson::Array(items) => Leaf::PullAll(items.clone()),
            other => {
                return Err(bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_name(other)
                )))
            }
        },
        "$rename" => {
            let Bson::String(to) = value else {
                return Err(bad_value(format!("The 'to' field for $rename must be a string: {}", field())));
            };
            if path.split('.').any(|p| p.starts_with('$')) {
                return Err(bad_value(format!("The source field for $rename may not be dynamic: {path}")));
            }
            if to.split('.').any(|p| p.starts_with('$')) {
                return Err(bad_value(format!("The destination field for $rename may not be dynamic: {to}")));
            }
            if to == path {
                return Err(bad_value(format!("The source and target field for $rename must differ: {}", field())));
            }
            if is_prefix(path, to) || is_prefix(to, path) {
                return Err(bad_value(format!(
                    "The source and target field for $rename must not be on the same path: {}",
                    field()
                )));
            }
            Leaf::RenameTo(path.to_string())
        }
        "$bit" => {
            let Bson::Document(ops) = value else {
                return Err(bad_value(format!(
                    "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
                    type_name(value)
                )));
            };
            let mut out = Vec::new();
            for (name, operand) in ops {
                let bop = match name.as_str() {
                    "and" => BitOp::And,
                    "or" => BitOp::Or,
                    "xor" => BitOp::Xor,
                    _ => {
                        return Err(bad_value(format!(
                            "The $bit modifier only supports 'and', 'or', and 'xor', not '{name}' which is an unknown operator: {{{}}}",
                            format::field(name, operand)
                        )))
                    }
                };
                if !matches!(operand, Bson::Int32(_) | Bson::Int64(_)) {
                    return Err(bad_value(format!(
                        "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{}}}",
                        type_name(operand),
                        format::field(name, operand)
                    )));
                }
                out.push((bop, operand.clone()));
            }
            if out.is_empty() {
                return Err(bad_value(
                    "You must pass in at least one bitwise operation. The format is: {$bit: {field: {and/or/xor: #}}",
                ));
            }
            Leaf::Bit(out)
        }
        other => {
            return Err(err(
                FAILED_TO_PARSE,
                format!("Unknown modifier: {other}. Expected a valid update modifier or pipeline-style update specified as an array"),
            ))
        }
    })
}

fn parse_push(value: &Bson) -> Result<Push, FilterError> {
    let Bson::Document(d) = value else { return Ok(Push { each: vec![value.clone()], ..Push::default() }) };
    if !d.contains_key("$each") {
        return Ok(Push { each: vec![value.clone()], ..Push::default() });
    }
    let mut push = Push::default();
    for (k, v) in d {
        match k.as_str() {
            "$each" => match v {
                Bson::Array(items) => push.each = items.clone(),
                other => {
                    return Err(bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        type_name(other)
                    )))
                }
            },
            "$slice" => match integral(v) {
                Some(n) => push.slice = Some(n),
                None => {
                    return Err(bad_value(format!(
                        "The value for $slice must be an integral value but was given type: {}",
                        type_name(v)
                    )))
                }
            },
            "$position" => match integral(v) {
                Some(n) => push.position = Some(n),
                None => {
                    return Err(bad_value(format!(
                        "The value for $position must be an integer value, not of type: {}",
                        type_name(v)
                    )))
                }
            },
            "$sort" => push.sort = Some(parse_push_sort(v)?),
            other => return Err(bad_value(format!("Unrecognized clause in $push: {other}"))),
        }
    }
    Ok(push)
}

fn parse_push_sort(v: &Bson) -> Result<PushSort, FilterError> {
    let direction = |v: &Bson| match integral(v) {
        Some(1) => Ok(false),
        Some(-1) => Ok(true),
        _ => Err(bad_value("The $sort element value must be either 1 or -1")),
    };
    match v {
        Bson::Document(d) => {
            if d.is_empty() {
                return Err(bad_value("The $sort pattern is empty when it should be a set of fields."));
            }
            let mut fields = Vec::new();
            for (k, dir) in d {
                if k.is_empty() || k.split('.').any(|p| p.is_empty() || p.starts_with('$')) {
                    return Err(bad_value("The $sort field is a dotted field but has an empty part: "));
                }
                fields.push((k.clone(), direction(dir)?));
            }
            Ok(PushSort::Fields(fields))
        }
        v if is_number(v) => Ok(PushSort::Whole(direction(v).map_err(|_| {
            bad_value(
                "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
            )
        })?)),
        _ => Err(bad_value(
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
        )),
    }
}

/// The value at an exact dotted path, for `$rename`: arrays may not be
/// crossed.
fn collect_renames(node: &Node, doc: &Document, cx: &mut Cx) -> Result<(), FilterError> {
    if let Some(Leaf::RenameTo(src)) = &node.leaf {
        let mut cur: Option<&Bson> = None;
        let mut container = doc;
        let parts: Vec<&str> = src.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            cur = container.get(*part);
            match cur {
                Some(Bson::Document(d)) if i + 1 < parts.len() => container = d,
                Some(Bson::Array(_)) if i + 1 < parts.len() => {
                    return Err(bad_value(format!(
                        "The source field cannot be an array element, '{src}' in doc with {} has an array field called '{}'",
                        cx.id.trim_start_matches('{').trim_end_matches('}'),
                        parts[..=i].join(".")
                    )))
                }
                _ if i + 1 < parts.len() => {
                    cur = None;
                    break;
                }
                _ => {}
            }
        }
        cx.renamed.insert(src.clone(), cur.cloned());
    }
    for child in node.children.values() {
        collect_renames(child, doc, cx)?;
    }
    Ok(())
}

impl Node {
    /// Would applying this subtree to a missing field create something?
    fn creates(&self) -> bool {
        self.leaf.as_ref().is_some_and(Leaf::creates) || self.children.values().any(Node::creates)
    }

    fn has_array_updates(&self) -> bool {
        self.children.keys().any(|k| k.0.starts_with("$["))
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Replace `$` by the position the query matched.
fn resolve<'n>(name: &'n str, cx: &Cx) -> Result<std::borrow::Cow<'n, str>, FilterError> {
    if name == "$" {
        match cx.position {
            Some(p) => Ok(std::borrow::Cow::Owned(p.to_string())),
            None => Err(bad_value("The positional operator did not find the match needed from the query.")),
        }
    } else {
        Ok(std::borrow::Cow::Borrowed(name))
    }
}

fn apply_document(node: &Node, d: &mut Document, cx: &Cx, prefix: &str) -> Result<(), FilterError> {
    for (name, child) in &node.children {
        if name.0.starts_with("$[") {
            let shown = prefix.rsplit('.').next().unwrap_or(prefix);
            return Err(bad_value(format!(
                "Cannot apply array updates to non-array element {}",
                format::field(shown, &Bson::Document(d.clone()))
            )));
        }
        let name = resolve(&name.0, cx)?;
        let path = join(prefix, &name);
        match d.get_mut(name.as_ref()) {
            Some(v) => {
                if apply_existing(child, v, cx, &path, &name)? {
                    d.remove(name.as_ref());
                }
            }
            None => {
                if let Some(v) = create(child, cx, &path)? {
                    d.insert(name.into_owned(), v);
                }
            }
        }
    }
    Ok(())
}

fn apply_array(node: &Node, items: &mut Vec<Bson>, cx: &Cx, prefix: &str, field: &str) -> Result<(), FilterError> {
    for (name, child) in &node.children {
        let name = resolve(&name.0, cx)?;
        if name == "$[]" {
            for (i, item) in items.iter_mut().enumerate() {
                if apply_existing(child, item, cx, &join(prefix, &i.to_string()), &i.to_string())? {
                    *item = Bson::Null;
                }
            }
        } else if let Some(ident) = name.strip_prefix("$[").and_then(|n| n.strip_suffix(']')) {
            let filter = &cx.filters.by_name[ident];
            for (i, item) in items.iter_mut().enumerate() {
                let mut wrapped = Document::new();
                wrapped.insert(ident, item.clone());
                if filter.matches(&wrapped)
                    && apply_existing(child, item, cx, &join(prefix, &i.to_string()), &i.to_string())?
                {
                    *item = Bson::Null;
                }
            }
        } else if let Ok(i) = name.parse::<usize>() {
            let path = join(prefix, &name);
            if i < items.len() {
                if apply_existing(child, &mut items[i], cx, &path, &name)? {
                    items[i] = Bson::Null;
                }
            } else if let Some(v) = create(child, cx, &path)? {
                items.resize(i, Bson::Null);
                items.push(v);
            }
        } else if child.creates() {
            return Err(err(
                PATH_NOT_VIABLE,
                format!(
                    "Cannot create field '{name}' in element {{{}}}",
                    format::field(field, &Bson::Array(items.clone()))
                ),
            ));
        }
    }
    Ok(())
}

/// Apply `node` to an existing value; returns whether to remove it.
fn apply_existing(node: &Node, v: &mut Bson, cx: &Cx, path: &str, field: &str) -> Result<bool, FilterError> {
    if let Some(leaf) = &node.leaf {
        return apply_leaf(leaf, v, cx, path, field);
    }
    match v {
        Bson::Document(d) => apply_document(node, d, cx, path)?,
        Bson::Array(items) => apply_array(node, items, cx, path, field)?,
        scalar => {
            if node.creates() || node.has_array_updates() {
                let (first, _) = node.children.iter().next().expect("an inner node has children");
                if first.0.starts_with("$[") {
                    return Err(bad_value(format!(
                        "Cannot apply array updates to non-array element {}",
                        format::field(field, scalar)
                    )));
                }
                return Err(err(
                    PATH_NOT_VIABLE,
                    format!("Cannot create field '{}' in element {{{}}}", first.0, format::field(field, scalar)),
                ));
            }
        }
    }
    Ok(false)
}

/// The value a subtree creates where nothing was, if any.
fn create(node: &Node, cx: &Cx, path: &str) -> Result<Option<Bson>, FilterError> {
    if let Some(leaf) = &node.leaf {
        return create_leaf(leaf, cx);
    }
    if node.has_array_updates() {
        return Err(bad_value(format!(
            "The path '{path}' must exist in the document in order to apply array updates."
        )));
    }
    let mut d = Document::new();
    apply_document(node, &mut d, cx, path)?;
    Ok((!d.is_empty()).then_some(Bson::Document(d)))
}

fn now_timestamp() -> Timestamp {
    static INCREMENT: AtomicU32 = AtomicU32::new(0);
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Timestamp { time: secs as u32, increment: INCREMENT.fetch_add(1, AtomicOrdering::Relaxed) + 1 }
}

fn current_date(timestamp: bool) -> Bson {
    if timestamp {
        Bson::Timestamp(now_timestamp())
    } else {
        Bson::DateTime(bson::DateTime::now())
    }
}

fn create_leaf(leaf: &Leaf, cx: &Cx) -> Result<Option<Bson>, FilterError> {
    Ok(match leaf {
        Leaf::Set(v) | Leaf::Min(v) | Leaf::Max(v) | Leaf::Inc(v) => Some(v.clone()),
        // As mongod: the operand times int32 0, so the zero has the
        // operand's type (and a double's sign; NaN stays NaN).
        Leaf::Mul(v) => Some(arith(v, &Bson::Int32(0), true).unwrap_or(Bson::Int32(0))),
        Leaf::CurrentDate(ts) => Some(current_date(*ts)),
        Leaf::SetOnInsert(v) => cx.inserting.then(|| v.clone()),
        Leaf::Push(p) => {
            let mut items = Vec::new();
            push(p, &mut items, cx.eval);
            Some(Bson::Array(items))
        }
        Leaf::AddToSet(each) => {
            let mut items = Vec::new();
            add_to_set(each, &mut items, cx.eval);
            Some(Bson::Array(items))
        }
        Leaf::RenameTo(src) => cx.renamed.get(src).cloned().flatten(),
        Leaf::Bit(ops) => {
            let zero = match &ops[0].1 {
                Bson::Int64(_) => Bson::Int64(0),
                _ => Bson::Int32(0),
            };
            Some(bit(&zero, ops))
        }
        Leaf::Unset | Leaf::Pop(_) | Leaf::Pull(_) | Leaf::PullAll(_) | Leaf::RenameFrom => None,
    })
}

/// Apply a leaf to an existing value; returns whether to remove it.
fn apply_leaf(leaf: &Leaf, v: &mut Bson, cx: &Cx, path: &str, field: &str) -> Result<bool, FilterError> {
    match leaf {
        Leaf::Set(x) => *v = x.clone(),
        Leaf::Unset | Leaf::RenameFrom => return Ok(true),
        Leaf::SetOnInsert(x) => {
            if cx.inserting {
                *v = x.clone()
            }
        }
        Leaf::Inc(n) | Leaf::Mul(n) => {
            let (verb, mul) = if matches!(leaf, Leaf::Inc(_)) { ("$inc", false) } else { ("$mul", true) };
            if !is_number(v) {
                return Err(err(
                    TYPE_MISMATCH,
                    format!(
                        "Cannot apply {verb} to a value of non-numeric type. {} has the field '{field}' of non-numeric type {}",
                        cx.id,
                        type_name(v)
                    ),
                ));
            }
            *v = arith(v, n, mul).map_err(|e| match e {
                Some(e) => e,
                None => bad_value(format!(
                    "Failed to apply {verb} operations to current value ({}) for document {}",
                    describe_number(v),
                    cx.id
                )),
            })?;
        }
        Leaf::Min(x) => {
            if cx.eval.compare(x, v) == Ordering::Less {
                *v = x.clone()
            }
        }
        Leaf::Max(x) => {
            if cx.eval.compare(x, v) == Ordering::Greater {
                *v = x.clone()
            }
        }
        Leaf::CurrentDate(ts) => *v = current_date(*ts),
        Leaf::RenameTo(src) => {
            if let Some(Some(x)) = cx.renamed.get(src) {
                *v = x.clone()
            }
        }
        Leaf::Push(p) => match v {
            Bson::Array(items) => push(p, items, cx.eval),
            _ => {
                return Err(bad_value(format!(
                    "The field '{path}' must be an array but is of type {} in document {}",
                    type_name(v),
                    cx.id
                )))
            }
        },
        Leaf::AddToSet(each) => match v {
            Bson::Array(items) => add_to_set(each, items, cx.eval),
            _ => {
                return Err(bad_value(format!(
                    "Cannot apply $addToSet to non-array field. Field named '{field}' has non-array type {}",
                    type_name(v)
                )))
            }
        },
        Leaf::Pop(first) => match v {
            Bson::Array(items) => {
                if *first && !items.is_empty() {
                    items.remove(0);
                } else {
                    items.pop();
                }
            }
            _ => {
                return Err(err(
                    TYPE_MISMATCH,
                    format!("Path '{path}' contains an element of non-array type '{}'", type_name(v)),
                ))
            }
        },
        Leaf::Pull(cond) => match v {
            Bson::Array(items) => items.retain(|item| !cond.matches_in(item, cx.eval)),
            _ => return Err(bad_value("Cannot apply $pull to a non-array value")),
        },
        Leaf::PullAll(values) => match v {
            Bson::Array(items) => items.retain(|item| !values.iter().any(|x| same_collated(x, item, cx.eval))),
            _ => return Err(bad_value("Cannot apply $pull to a non-array value")),
        },
        Leaf::Bit(ops) => {
            if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
                return Err(err(
                    TYPE_MISMATCH,
                    format!(
                        "Cannot apply $bit to a value of non-integral type.{} has the field {field} of non-integer type {}",
                        cx.id,
                        type_name(v)
                    ),
                ));
            }
            *v = bit(v, ops);
        }
    }
    Ok(false)
}

/// `(NumberLong)9223372036854775807`, as mongod describes a number in an
/// overflow message.
fn describe_number(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => format!("(NumberInt){i}"),
        Bson::Int64(i) => format!("(NumberLong){i}"),
        Bson::Double(d) => format!("(NumberDouble){d}"),
        other => format::value(other),
    }
}

/// `a + b` or `a * b` with MongoDB's type rules: the wider type wins, an
/// int overflow widens to a long, a long overflow is an error (`Err(None)`).
fn arith(a: &Bson, b: &Bson, mul: bool) -> Result<Bson, Option<FilterError>> {
    if matches!(a, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
        // The other operand converts as mongod's: a double to 15 digits.
        let dec = |v: &Bson| Dec::from_bson(v, DoubleDigits::Fifteen).unwrap_or(Dec::NaN);
        let (x, y) = (dec(a), dec(b));
        return Ok(if mul { x.mul(&y) } else { x.add(&y) }.to_bson());
    }
    let as_f64 = |v: &Bson| match v {
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => *i as f64,
        Bson::Double(d) => *d,
        _ => 0.0,
    };
    let as_i64 = |v: &Bson| match v {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        _ => 0,
    };
    Ok(match (a, b) {
        (Bson::Double(_), _) | (_, Bson::Double(_)) => {
            Bson::Double(if mul { as_f64(a) * as_f64(b) } else { as_f64(a) + as_f64(b) })
        }
        (Bson::Int32(x), Bson::Int32(y)) => {
            let r = if mul { x.checked_mul(*y) } else { x.checked_add(*y) };
            match r {
                Some(r) => Bson::Int32(r),
                None => Bson::Int64(if mul { i64::from(*x) * i64::from(*y) } else { i64::from(*x) + i64::from(*y) }),
            }
        }
        _ => {
            let (x, y) = (as_i64(a), as_i64(b));
            Bson::Int64(if mul { x.checked_mul(y) } else { x.checked_add(y) }.ok_or(None)?)
        }
    })
}

fn bit(v: &Bson, ops: &[(BitOp, Bson)]) -> Bson {
    let mut long = matches!(v, Bson::Int64(_));
    let mut acc = match v {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        _ => 0,
    };
    for (op, operand) in ops {
        let x = match operand {
            Bson::Int32(i) => i64::from(*i),
            Bson::Int64(i) => {
                long = true;
                *i
            }
            _ => 0,
        };
        acc = match op {
            BitOp::And => acc & x,
            BitOp::Or => acc | x,
            BitOp::Xor => acc ^ x,
        };
    }
    if long {
        Bson::Int64(acc)
    } else {
        Bson::Int32(acc as i32)
    }
}

fn push(p: &Push, items: &mut Vec<Bson>, cx: &EvalContext) {
    let at = match p.position {
        None => items.len(),
        Some(n) if n >= 0 => (n as usize).min(items.len()),
        Some(n) => items.len().saturating_sub(n.unsigned_abs() as usize),
    };
    items.splice(at..at, p.each.iter().cloned());
    match &p.sort {
        Some(PushSort::Whole(desc)) => items.sort_by(|a, b| directed(cx.compare(a, b), *desc)),
        Some(PushSort::Fields(fields)) => items.sort_by(|a, b| {
            for (path, desc) in fields {
                let o = cx.compare(&field_value(a, path), &field_value(b, path));
                if o != Ordering::Equal {
                    return directed(o, *desc);
                }
            }
            Ordering::Equal
        }),
        None => {}
    }
    match p.slice {
        Some(n) if n >= 0 => items.truncate(n as usize),
        Some(n) => {
            let keep = n.unsigned_abs() as usize;
            if items.len() > keep {
                items.drain(..items.len() - keep);
            }
        }
        None => {}
    }
}

fn directed(o: Ordering, desc: bool) -> Ordering {
    if desc {
        o.reverse()
    } else {
        o
    }
}

/// A dotted field of a `$push` element, for `$sort` (missing is null).
fn field_value(v: &Bson, path: &str) -> Bson {
    let mut cur = v;
    for part in path.split('.') {
        match cur {
            Bson::Document(d) => match d.get(part) {
                Some(x) => cur = x,
                None => return Bson::Null,
            },
            _ => return Bson::Null,
        }
    }
    cur.clone()
}

fn add_to_set(each: &[Bson], items: &mut Vec<Bson>, cx: &EvalContext) {
    for v in each {
        if !items.iter().any(|x| same_collated(x, v, cx)) {
            items.push(v.clone());
        }
    }
}

/// The equality conditions of a query (top level and inside `$and`), as
/// an upsert copies them into the new document.
fn equality_fields(query: &Document, out: &mut Vec<(String, Bson)>) {
    for (k, v) in query {
        if k == "$and" {
            if let Bson::Array(items) = v {
                for item in items {
                    if let Bson::Document(d) = item {
                        equality_fields(d, out);
                    }
                }
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        match v {
            Bson::Document(d) if is_operator_document(v).is_some() => {
                if let Some(eq) = d.get("$eq") {
                    out.push((k.clone(), eq.clone()));
                }
            }
            Bson::RegularExpression(_) => {}
            v => out.push((k.clone(), v.clone())),
        }
    }
}

/// Set a dotted path in `d`, creating documents on the way.
pub(crate) fn set_path(d: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            d.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(d.get(head), Some(Bson::Document(_))) {
                d.insert(head, Document::new());
            }
            if let Some(Bson::Document(inner)) = d.get_mut(head) {
                set_path(inner, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn up(update: Document, d: Document) -> Result<Document, FilterError> {
        Update::parse(&update, &[])?.apply(&d, None, false)
    }

    fn code(update: Document, d: Document) -> i32 {
        up(update, d).unwrap_err().code
    }

    #[test]
    fn set_unset_and_field_order() {
        assert_eq!(
            up(doc! { "$set": { "b": 1, "a": 2 } }, doc! { "_id": 1 }).unwrap(),
            doc! { "_id": 1, "a": 2, "b": 1 }
        );
        assert_eq!(
            up(doc! { "$set": { "x.y.z": 1 } }, doc! { "_id": 1 }).unwrap(),
            doc! { "_id": 1, "x": { "y": { "z": 1 } } }
        );
        assert_eq!(
            up(doc! { "$set": { "a.1": 9 } }, doc! { "_id": 1, "a": [1, 2] }).unwrap(),
            doc! { "_id": 1, "a": [1, 9] }
        );
        assert_eq!(
            up(doc! { "$set": { "a.3": 9 } }, doc! { "_id": 1, "a": [1] }).unwrap(),
            doc! { "_id": 1, "a": [1, null, null, 9] }
        );
        assert_eq!(
            up(doc! { "$unset": { "a": "" } }, doc! { "_id": 1, "a": 1, "b": 2 }).unwrap(),
            doc! { "_id": 1, "b": 2 }
        );
        assert_eq!(
            up(doc! { "$unset": { "a.0": 1 } }, doc! { "_id": 1, "a": [1, 2] }).unwrap(),
            doc! { "_id": 1, "a": [null, 2] }
        );
        assert_eq!(up(doc! { "$unset": { "q.r": 1 } }, doc! { "_id": 1 }).unwrap(), doc! { "_id": 1 });
        assert_eq!(code(doc! { "$set": { "a.b": 1 } }, doc! { "_id": 1, "a": 5 }), 28);
        assert_eq!(code(doc! { "$set": { "a.b": 1 } }, doc! { "_id": 1, "a": [1] }), 28);
    }

    #[test]
    fn arithmetic_and_comparisons() {
        assert_eq!(up(doc! { "$inc": { "n": 2 } }, doc! { "_id": 1, "n": 1 }).unwrap(), doc! { "_id": 1, "n": 3 });
        assert_eq!(up(doc! { "$inc": { "n": 1.5 } }, doc! { "_id": 1, "n": 1 }).unwrap(), doc! { "_id": 1, "n": 2.5 });
        assert_eq!(
            up(doc! { "$inc": { "n": 1 } }, doc! { "_id": 1, "n": i32::MAX }).unwrap(),
            doc! { "_id": 1, "n": i64::from(i32::MAX) + 1 },
            "an int overflow widens to a long"
        );
        assert_eq!(code(doc! { "$inc": { "n": 1i64 } }, doc! { "_id": 1, "n": i64::MAX }), 2);
        assert_eq!(up(doc! { "$inc": { "n": 5 } }, doc! { "_id": 1 }).unwrap(), doc! { "_id": 1, "n": 5 });
        assert_eq!(up(doc! { "$mul": { "n": 3 } }, doc! { "_id": 1 }).unwrap(), doc! { "_id": 1, "n": 0 });
        assert_eq!(up(doc! { "$mul": { "n": 3 } }, doc! { "_id": 1, "n": 2 }).unwrap(), doc! { "_id": 1, "n": 6 });
        let e = up(doc! { "$inc": { "s": 1 } }, doc! { "_id": 1, "s": "x" }).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (14, "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 's' of non-numeric type string")
        );
        assert_eq!(code(doc! { "$inc": { "s": "x" } }, doc! { "_id": 1 }), 14);
        assert_eq!(up(doc! { "$min": { "n": 1 } }, doc! { "_id": 1, "n": 3 }).unwrap(), doc! { "_id": 1, "n": 1 });
        assert_eq!(up(doc! { "$max": { "n": 1 } }, doc! { "_id": 1, "n": 3 }).unwrap(), doc! { "_id": 1, "n": 3 });
        assert_eq!(
            up(doc! { "$bit": { "n": { "and": 6, "or": 1 } } }, doc! { "_id": 1, "n": 3 }).unwrap(),
            doc! { "_id": 1, "n": 3 }
        );
        let d = up(doc! { "$currentDate": { "d": true, "t": { "$type": "timestamp" } } }, doc! { "_id": 1 }).unwrap();
        assert!(matches!(d.get("d"), Some(Bson::DateTime(_))) && matches!(d.get("t"), Some(Bson::Timestamp(_))));
    }

    #[test]
    fn arrays() {
        let d = doc! { "_id": 1, "a": [3, 1] };
        assert_eq!(up(doc! { "$push": { "a": 2 } }, d.clone()).unwrap(), doc! { "_id": 1, "a": [3, 1, 2] });
        assert_eq!(
            up(doc! { "$push": { "a": { "$each": [5, 0], "$sort": 1, "$slice": -3 } } }, d.clone()).unwrap(),
            doc! { "_id": 1, "a": [1, 3, 5] }
        );
        assert_eq!(
            up(doc! { "$push": { "a": { "$each": [7], "$position": 0 } } }, d.clone()).unwrap(),
            doc! { "_id": 1, "a": [7, 3, 1] }
        );
        assert_eq!(
            up(
                doc! { "$push": { "s": { "$each": [{ "k": 2 }, { "k": 1 }], "$sort": { "k": -1 } } } },
                doc! { "_id": 1 }
            )
            .unwrap(),
            doc! { "_id": 1, "s": [{ "k": 2 }, { "k": 1 }] }
        );
        assert_eq!(
            up(doc! { "$addToSet": { "a": { "$each": [1, 4, 4] } } }, d.clone()).unwrap(),
            doc! { "_id": 1, "a": [3, 1, 4] }
        );
        assert_eq!(up(doc! { "$pop": { "a": -1 } }, d.clone()).unwrap(), doc! { "_id": 1, "a": [1] });
        assert_eq!(up(doc! { "$pop": { "a": 1 } }, d.clone()).unwrap(), doc! { "_id": 1, "a": [3] });
        assert_eq!(up(doc! { "$pull": { "a": { "$gte": 2 } } }, d.clone()).unwrap(), doc! { "_id": 1, "a": [1] });
        assert_eq!(
            up(doc! { "$pull": { "a": { "k": 1 } } }, doc! { "_id": 1, "a": [{ "k": 1, "x": 1 }, { "k": 2 }] })
                .unwrap(),
            doc! { "_id": 1, "a": [{ "k": 2 }] }
        );
        assert_eq!(up(doc! { "$pullAll": { "a": [3, 9] } }, d.clone()).unwrap(), doc! { "_id": 1, "a": [1] });
        assert_eq!(code(doc! { "$push": { "n": 1 } }, doc! { "_id": 1, "n": 1 }), 2);
        assert_eq!(code(doc! { "$pop": { "a": 2 } }, d.clone()), 9);
    }

    #[test]
    fn positional_operators() {
        let d = doc! { "_id": 1, "a": [1, 5, 9], "b": [{ "x": 1 }, { "x": 7 }] };
        let u = Update::parse(&doc! { "$set": { "a.$": 0 } }, &[]).unwrap();
        assert_eq!(
            u.apply(&d, Some(1), false).unwrap().get_array("a").unwrap(),
            &vec![Bson::Int32(1), 0.into(), 9.into()]
        );
        assert_eq!(u.apply(&d, None, false).unwrap_err().code, 2);
        let all = up(doc! { "$inc": { "b.$[].x": 1 } }, d.clone()).unwrap();
        assert_eq!(
            all.get_array("b").unwrap(),
            &vec![Bson::Document(doc! { "x": 2 }), Bson::Document(doc! { "x": 8 })]
        );
        let filtered = Update::parse(&doc! { "$set": { "a.$[big]": 0 } }, &[doc! { "big": { "$gt": 4 } }])
            .unwrap()
            .apply(&d, None, false)
            .unwrap();
        assert_eq!(filtered.get_array("a").unwrap(), &vec![Bson::Int32(1), 0.into(), 0.into()]);
        let e = Update::parse(&doc! { "$set": { "a.$[q]": 0 } }, &[]).unwrap_err();
        assert_eq!(e.message, "No array filter found for identifier 'q' in path 'a.$[q]'");
        let e = Update::parse(&doc! { "$set": { "a": 0 } }, &[doc! { "q": 1 }]).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (9, "The array filter for identifier 'q' was not used in the update {$set: {a: 0}}")
        );
        assert_eq!(code(doc! { "$set": { "z.$[]": 1 } }, doc! { "_id": 1 }), 2);
    }

    #[test]
    fn rename() {
        assert_eq!(
            up(doc! { "$rename": { "a": "z" } }, doc! { "_id": 1, "a": 1, "b": 2 }).unwrap(),
            doc! { "_id": 1, "b": 2, "z": 1 }
        );
        assert_eq!(
            up(doc! { "$rename": { "a.b": "c" } }, doc! { "_id": 1, "a": { "b": 1 } }).unwrap(),
            doc! { "_id": 1, "a": {}, "c": 1 }
        );
        assert_eq!(up(doc! { "$rename": { "q": "z" } }, doc! { "_id": 1 }).unwrap(), doc! { "_id": 1 });
        assert_eq!(code(doc! { "$rename": { "a": "a" } }, doc! { "_id": 1 }), 2);
        assert_eq!(code(doc! { "$rename": { "a": "a.b" } }, doc! { "_id": 1 }), 2);
        assert_eq!(code(doc! { "$rename": { "a.0": "b" } }, doc! { "_id": 1, "a": [1] }), 2);
    }

    #[test]
    fn parse_errors() {
        let p = |u: Document| Update::parse(&u, &[]).unwrap_err();
        let e = p(doc! { "$set": { "a": 1 }, "$inc": { "a": 1 } });
        assert_eq!((e.code, e.message.as_str()), (40, "Updating the path 'a' would create a conflict at 'a'"));
        let e = p(doc! { "$set": { "a.b": 1, "a": 1 } });
        assert_eq!(e.message, "Updating the path 'a' would create a conflict at 'a'");
        let e = p(doc! { "$set": { "a": 1, "a.b": 1 } });
        assert_eq!(e.message, "Updating the path 'a.b' would create a conflict at 'a'");
        let e = p(doc! { "$frob": { "a": 1 } });
        assert_eq!(
            (e.code, e.message.as_str()),
            (9, "Unknown modifier: $frob. Expected a valid update modifier or pipeline-style update specified as an array")
        );
        let e = p(doc! { "$set": 1 });
        assert_eq!(e.message, "Modifiers operate on fields but we found type int instead. For example: {$mod: {<field>: ...}} not {$set: 1}");
        assert_eq!(p(doc! { "$set": { "a..b": 1 } }).code, 56);
        assert_eq!(p(doc! { "$set": { "$": 1 } }).code, 2);
        assert_eq!(p(doc! { "$set": { "$[]": 1 } }).code, 2);
        assert_eq!(p(doc! { "$set": { "a": 1 }, "b": 1 }).code, 9);
    }

    #[test]
    fn id_is_immutable() {
        let e = up(doc! { "$set": { "_id": 2 } }, doc! { "_id": 1 }).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (66, "Performing an update on the path '_id' would modify the immutable field '_id'")
        );
        assert!(up(doc! { "$set": { "_id": 1.0 } }, doc! { "_id": 1 }).is_ok());
        let e = up(doc! { "_id": 2, "a": 1 }, doc! { "_id": 1 }).unwrap_err();
        assert_eq!(
            e.message,
            "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2"
        );
        assert_eq!(up(doc! { "a": 1 }, doc! { "_id": 1, "b": 1 }).unwrap(), doc! { "_id": 1, "a": 1 });
    }

    #[test]
    fn upsert_documents() {
        let u = Update::parse(&doc! { "$set": { "b": 2 }, "$setOnInsert": { "c": 3 } }, &[]).unwrap();
        let d =
            u.upsert_document(&doc! { "a": 1, "x.y": 5, "n": { "$gt": 1 }, "$and": [{ "e": { "$eq": 4 } }] }).unwrap();
        assert_eq!(d, doc! { "a": 1, "x": { "y": 5 }, "e": 4, "b": 2, "c": 3 });
        let d = u.upsert_document(&doc! { "k": 1, "_id": 7 }).unwrap();
        assert_eq!(d.keys().next().map(String::as_str), Some("_id"), "_id first");
        let r = Update::parse(&doc! { "z": 1 }, &[]).unwrap();
        assert_eq!(r.upsert_document(&doc! { "_id": 3, "q": 1 }).unwrap(), doc! { "_id": 3, "z": 1 });
        let plain = Update::parse(&doc! { "$set": { "b": 2 } }, &[]).unwrap();
        assert_eq!(plain.apply(&doc! { "_id": 1 }, None, false).unwrap(), doc! { "_id": 1, "b": 2 });
        let only_insert = Update::parse(&doc! { "$setOnInsert": { "c": 3 } }, &[]).unwrap();
        assert_eq!(only_insert.apply(&doc! { "_id": 1 }, None, false).unwrap(), doc! { "_id": 1 });
        assert_eq!(u.upsert_document(&doc! { "a": 1, "a.b": 2 }).unwrap_err().code, 54);
    }
}
