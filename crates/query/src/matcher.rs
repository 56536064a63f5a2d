//! The filter language: parse a filter document into an expression tree,
//! then match documents with MongoDB's semantics, including its array
//! rules for dotted paths.
//!
//! Operators: implicit equality, `$eq $ne $gt $gte $lt $lte $in $nin
//! $exists $type $size $all $mod $regex $elemMatch $bits* $and $or $nor
//! $not $comment $expr $jsonSchema`, and DBRef fields (`$ref $id $db`)
//! matched as fields. Others are refused as unknown, with MongoDB's code
//! and message.
//!
//! Array rules: a path step into an array looks into each element (and a
//! numeric step may also index the array); a comparison matches if any
//! value the path reaches matches, where an array reached at the end of the
//! path offers both itself and its elements. Comparisons only compare
//! values of the same canonical type ("type bracketing"); `null` equality
//! also matches a missing field.
//!
//! Matching cannot fail: strings compare through the evaluation context's
//! collation, and an `$expr`'s error goes to the context's error slot, for
//! [`Filter::try_matches_at`] to report (`context.rs`).

use crate::collation::Collation;
use crate::context::EvalContext;
use crate::error::{bad_value, err, TYPE_MISMATCH};
use crate::expr::{Expression, Scope};
use crate::regex::Regex;
use crate::schema::JsonSchema;
use crate::types::{has_type, truthy, type_code};
use bson::{Bson, Document};
use doc::compare::{canonical_type, number, Number};
use doc::format;
use std::cmp::Ordering;
use std::sync::Arc;

/// The layer's error (`error.rs`), also at the path other crates use.
pub use crate::error::FilterError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone)]
enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Nor(Vec<Expr>),
    Not(Box<Expr>),
    Compare(String, Cmp, Bson),
    In(String, Vec<Bson>),
    Exists(String, bool),
    /// Canonical BSON type numbers (or "number") any reached value has.
    Type(String, Vec<i32>),
    Size(String, usize),
    Mod(String, i64, i64),
    Regex(String, Box<Regex>),
    Bits(String, BitTest, Vec<u64>),
    ElemMatch(String, Box<ElemCond>),
    /// `$jsonSchema`, on the whole document.
    Schema(Box<JsonSchema>),
    /// `$expr`: an aggregation expression, true when its value is truthy.
    Agg(Box<Expression>),
    True,
}

/// Gather the first components of the paths `e` reads into `reads`, or
/// make it `None` when `e` reads the whole document.
fn top_fields(e: &Expr, reads: &mut Option<Vec<String>>) {
    let path = match e {
        Expr::True => return,
        Expr::Schema(_) | Expr::Agg(_) => {
            *reads = None;
            return;
        }
        Expr::And(subs) | Expr::Or(subs) | Expr::Nor(subs) => return subs.iter().for_each(|s| top_fields(s, reads)),
        Expr::Not(sub) => return top_fields(sub, reads),
        Expr::Compare(path, ..)
        | Expr::In(path, _)
        | Expr::Exists(path, _)
        | Expr::Type(path, _)
        | Expr::Size(path, _)
        | Expr::Mod(path, ..)
        | Expr::Regex(path, _)
        | Expr::Bits(path, ..)
        | Expr::ElemMatch(path, _) => path,
    };
    crate::reads::note(reads, path);
}

/// Which of the `$bits*` operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitTest {
    AllSet,
    AnySet,
    AllClear,
    AnyClear,
}

/// A parsed filter, ready to match documents.
#[derive(Debug, Clone)]
pub struct Filter {
    root: Expr,
    /// Strings compare through it (`None`: binary).
    collation: Option<Arc<Collation>>,
    /// The top-level fields the filter reads (`None`: the whole document,
    /// for `$expr` and `$jsonSchema`).
    reads: Option<Vec<String>>,
}

impl Filter {
    pub fn parse(filter: &Document) -> Result<Filter, FilterError> {
        Filter::parse_in(filter, &Scope::default())
    }

    /// Parse with a command's `let` variables in scope for `$expr`.
    pub fn parse_in(filter: &Document, scope: &Scope) -> Result<Filter, FilterError> {
        let root = parse_document(filter, Some(scope))?;
        let mut reads = Some(Vec::new());
        top_fields(&root, &mut reads);
        Ok(Filter { root, collation: None, reads })
    }

    /// The top-level fields a match reads, each once: a document holding
    /// only those matches exactly when the whole does. `None` when the
    /// match reads the whole document (`$expr`, `$jsonSchema`).
    pub fn reads(&self) -> Option<&[String]> {
        self.reads.as_deref()
    }

    /// The collation strings are compared through (`None`: binary).
    pub fn collation(&self) -> Option<&Arc<Collation>> {
        self.collation.as_ref()
    }

    /// This filter with strings compared through `collation`.
    pub fn with_collation(mut self, collation: Option<Arc<Collation>>) -> Filter {
        self.collation = collation;
        self
    }

    /// As [`Filter::matches_at`], but an error an `$expr` meets (a type
    /// error in `$add`, say) fails the match, as it fails mongod's query.
    pub fn try_matches_at(&self, doc: &Document) -> Result<(bool, Option<usize>), FilterError> {
        let cx = EvalContext::new(self.collation.as_deref());
        let found = self.matches_in(doc, &cx);
        match cx.into_expr_error() {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }

    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_at(doc).0
    }

    /// Whether `doc` matches, and the array position the positional `$`
    /// operator of an update or projection uses.
    pub fn matches_at(&self, doc: &Document) -> (bool, Option<usize>) {
        self.matches_in(doc, &EvalContext::new(self.collation.as_deref()))
    }

    fn matches_in(&self, doc: &Document, cx: &EvalContext) -> (bool, Option<usize>) {
        let mut pos = None;
        let ok = eval(&self.root, doc, &mut pos, cx);
        (ok, pos)
    }

    /// A condition on single values (`{$gt: 5}`, `5`, or `{a: 1}` for
    /// document elements), as `$pull` and `$elemMatch` use.
    pub fn parse_element(cond: &Bson) -> Result<ElementFilter, FilterError> {
        parse_elem_cond(cond).map(ElementFilter)
    }

    /// The `_id` value when the filter is exactly `{_id: <scalar>}`: a
    /// point lookup needs no scan.
    pub fn id_equality(filter: &Document) -> Option<&Bson> {
        if filter.len() != 1 {
            return None;
        }
        match filter.get("_id")? {
            Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => None,
            Bson::Document(_) | Bson::Array(_) | Bson::RegularExpression(_) => None,
            v => Some(v),
        }
    }
}

/// A filter document; `scope` is `None` where `$expr` may not appear
/// (inside `$elemMatch`).
fn parse_document(filter: &Document, scope: Option<&Scope>) -> Result<Expr, FilterError> {
    let mut all = Vec::new();
    for (key, value) in filter {
        all.push(match key.as_str() {
            "$and" | "$or" | "$nor" => {
                let Bson::Array(items) = value else {
                    return Err(bad_value(format!("{key} must be an array")));
                };
                if items.is_empty() {
                    return Err(bad_value("$and/$or/$nor must be a nonempty array"));
                }
                let mut subs = Vec::new();
                for item in items {
                    match item {
                        Bson::Document(d) => subs.push(parse_document(d, scope)?),
                        _ => return Err(bad_value("$or/$and/$nor entries need to be full objects")),
                    }
                }
                match key.as_str() {
                    "$and" => Expr::And(subs),
                    "$or" => Expr::Or(subs),
                    _ => Expr::Nor(subs),
                }
            }
            "$comment" => Expr::True,
            "$jsonSchema" => match value {
                Bson::Document(schema) => Expr::Schema(Box::new(JsonSchema::parse(schema)?)),
                _ => return Err(err(TYPE_MISMATCH, "$jsonSchema must be an object")),
            },
            // mongod answers this when server-side JavaScript is off, as it
            // always is here.
            "$where" => return Err(bad_value("no globalScriptEngine in $where parsing")),
            "$expr" => match scope {
                Some(scope) => Expr::Agg(Box::new(Expression::parse(value, scope)?)),
                None => return Err(bad_value("$expr can only be applied to the top-level document")),
            },
            // A DBRef's fields are matched by equality, as fields (mongod's
            // parseDBRef): `{$ref: "users", $id: 5}` inside `$elemMatch`.
            "$ref" | "$id" | "$db" => Expr::Compare(key.clone(), Cmp::Eq, value.clone()),
            k if k.starts_with('$') => return Err(bad_value(format!("unknown top level operator: {k}"))),
            path => parse_condition(path, value)?,
        });
    }
    Ok(if all.len() == 1 { all.pop().unwrap() } else { Expr::And(all) })
}

/// A condition on one value; see [`Filter::parse_element`].
#[derive(Debug, Clone)]
pub struct ElementFilter(ElemCond);

impl ElementFilter {
    /// Does `v` satisfy it, strings compared binary?
    pub fn matches(&self, v: &Bson) -> bool {
        self.matches_in(v, &EvalContext::new(None))
    }

    /// Does `v` satisfy it, strings compared as `cx` says?
    pub(crate) fn matches_in(&self, v: &Bson, cx: &EvalContext) -> bool {
        elem_matches(&self.0, v, cx)
    }

    /// Does the array element `v` satisfy it as `$elemMatch` tests one
    /// (a value condition on the element itself, not inside it)?
    pub(crate) fn matches_element_in(&self, v: &Bson, cx: &EvalContext) -> bool {
        elem_match_one(&self.0, v, cx)
    }
}

/// The two shapes of `$elemMatch` (and `$pull`) conditions.
#[derive(Debug, Clone)]
enum ElemCond {
    /// `{b: 1, c: {$gt: 2}}`: a filter on document elements.
    Object(Box<Expr>),
    /// `{$gte: 80, $lt: 85}`: a condition on the element.
    Value(Box<Expr>),
    /// A plain value: elements equal to it (arrays compared whole).
    Equal(Bson),
}

fn parse_elem_cond(cond: &Bson) -> Result<ElemCond, FilterError> {
    match cond {
        Bson::Document(d) if is_value_condition(d) => Ok(ElemCond::Value(Box::new(parse_condition("", cond)?))),
        Bson::Document(d) => Ok(ElemCond::Object(Box::new(parse_document(d, None)?))),
        Bson::RegularExpression(_) => Ok(ElemCond::Value(Box::new(parse_condition("", cond)?))),
        v => Ok(ElemCond::Equal(v.clone())),
    }
}

/// `{$gt: 1, $lt: 5}` is a condition on the value itself; a document whose
/// first field is a field name, a top-level operator or part of a DBRef is
/// a filter on documents (mongod's `isExpressionDocument(e, true)` and
/// its pathless-operator test, both on the first field).
fn is_value_condition(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| {
        k.starts_with('$')
            && !matches!(
                k.as_str(),
                "$and" | "$or" | "$nor" | "$where" | "$expr" | "$comment" | "$jsonSchema" | "$ref" | "$id" | "$db"
            )
    }) && !is_dbref(d, true)
}

/// A document of operators (`{$gt: 5}`), not a value to compare with. A
/// DBRef (`{$ref: "c", $id: 5}`) is a value, as in mongod.
pub(crate) fn is_operator_document(v: &Bson) -> Option<&Document> {
    match v {
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) && !is_dbref(d, false) => Some(d),
        _ => None,
    }
}

/// mongod's `isDBRefDocument`: `$ref` and `$id` anywhere among the fields,
/// or, where `incomplete` is allowed, any one of `$ref`, `$id`, `$db`.
pub(crate) fn is_dbref(d: &Document, incomplete: bool) -> bool {
    let (has_ref, has_id) = (d.contains_key("$ref"), d.contains_key("$id"));
    (has_ref && has_id) || (incomplete && (has_ref || has_id || d.contains_key("$db")))
}

fn parse_condition(path: &str, value: &Bson) -> Result<Expr, FilterError> {
    let Some(ops) = is_operator_document(value) else {
        if let Bson::RegularExpression(r) = value {
            return Ok(Expr::Regex(path.to_string(), Box::new(Regex::from_bson(r)?)));
        }
        return Ok(Expr::Compare(path.to_string(), Cmp::Eq, value.clone()));
    };
    let mut all = Vec::new();
    for (op, arg) in ops {
        match op.as_str() {
            "$regex" => all.push(Expr::Regex(path.to_string(), Box::new(regex_operator(arg, ops.get("$options"))?))),
            "$options" if !ops.contains_key("$regex") => return Err(bad_value("$options needs a $regex")),
            "$options" => {}
            _ => all.push(parse_operator(path, op, arg)?),
        }
    }
    Ok(if all.len() == 1 { all.pop().unwrap() } else { Expr::And(all) })
}

fn parse_operator(path: &str, op: &str, arg: &Bson) -> Result<Expr, FilterError> {
    let p = path.to_string();
    Ok(match op {
        "$eq" => Expr::Compare(p, Cmp::Eq, arg.clone()),
        "$ne" => Expr::Not(Box::new(Expr::Compare(p, Cmp::Eq, arg.clone()))),
        "$gt" => Expr::Compare(p, Cmp::Gt, arg.clone()),
        "$gte" => Expr::Compare(p, Cmp::Gte, arg.clone()),
        "$lt" => Expr::Compare(p, Cmp::Lt, arg.clone()),
        "$lte" => Expr::Compare(p, Cmp::Lte, arg.clone()),
        "$in" | "$nin" => {
            let Bson::Array(items) = arg else {
                return Err(bad_value(format!("{op} needs an array")));
            };
            if items.iter().any(|v| is_operator_document(v).is_some()) {
                return Err(bad_value("cannot nest $ under $in"));
            }
            for item in items {
                if let Bson::RegularExpression(r) = item {
                    Regex::from_bson(r)?;
                }
            }
            let e = Expr::In(p, items.clone());
            if op == "$in" {
                e
            } else {
                Expr::Not(Box::new(e))
            }
        }
        "$exists" => Expr::Exists(p, truthy(&Some(arg.clone()))),
        "$type" => {
            let items = match arg {
                Bson::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            Expr::Type(p, items.iter().map(type_code).collect::<Result<_, _>>()?)
        }
        "$size" => match crate::integer::parse("$size", arg, true) {
            Ok(n) => Expr::Size(p, usize::try_from(n).unwrap_or(usize::MAX)),
            Err(why) => return Err(bad_value(format!("Failed to parse $size. {why}"))),
        },
        "$all" => {
            let Bson::Array(items) = arg else {
                return Err(bad_value("$all needs an array"));
            };
            if items.is_empty() {
                // Matches nothing, as in MongoDB.
                return Ok(Expr::Not(Box::new(Expr::True)));
            }
            Expr::And(items.iter().map(|v| Expr::Compare(p.clone(), Cmp::Eq, v.clone())).collect())
        }
        "$mod" => {
            let Bson::Array(items) = arg else {
                return Err(bad_value("malformed mod, needs to be an array"));
            };
            if items.len() != 2 {
                return Err(bad_value(if items.len() < 2 {
                    "malformed mod, not enough elements"
                } else {
                    "malformed mod, too many elements"
                }));
            }
            let int = |v: &Bson, what: &str| match number(v) {
                Some(Number::Int(i)) => Ok(i),
                Some(Number::Float(f)) if f.is_finite() => Ok(f.trunc() as i64),
                _ => Err(bad_value(format!("malformed mod, {what} not a number"))),
            };
            let divisor = int(&items[0], "divisor")?;
            if divisor == 0 {
                return Err(bad_value("divisor cannot be 0"));
            }
            Expr::Mod(p, divisor, int(&items[1], "remainder")?)
        }
        "$elemMatch" => match arg {
            Bson::Document(_) => Expr::ElemMatch(p, Box::new(parse_elem_cond(arg)?)),
            _ => return Err(bad_value("$elemMatch needs an Object")),
        },
        "$bitsAllSet" | "$bitsAnySet" | "$bitsAllClear" | "$bitsAnyClear" => {
            let test = match op {
                "$bitsAllSet" => BitTest::AllSet,
                "$bitsAnySet" => BitTest::AnySet,
                "$bitsAllClear" => BitTest::AllClear,
                _ => BitTest::AnyClear,
            };
            Expr::Bits(p, test, bit_mask(op, arg)?)
        }
        "$not" => match arg {
            Bson::RegularExpression(r) => Expr::Not(Box::new(Expr::Regex(p, Box::new(Regex::from_bson(r)?)))),
            Bson::Document(d) if is_operator_document(arg).is_some() => {
                Expr::Not(Box::new(parse_condition(path, &Bson::Document(d.clone()))?))
            }
            Bson::Document(_) => return Err(bad_value("$not cannot be empty")),
            _ => return Err(bad_value("$not needs a regex or a document")),
        },
        other => return Err(bad_value(format!("unknown operator: {other}"))),
    })
}

/// A `$bits*` argument as the positions of the bits it tests (from a
/// non-negative integer, an array of positions, or binary data read
/// little-endian).
fn bit_mask(op: &str, arg: &Bson) -> Result<Vec<u64>, FilterError> {
    let mut positions = Vec::new();
    match arg {
        Bson::Binary(b) => {
            for (i, byte) in b.bytes.iter().enumerate() {
                positions.extend((0..8).filter(|j| byte & (1 << j) != 0).map(|j| i as u64 * 8 + j));
            }
        }
        Bson::Array(items) => {
            for item in items {
                let shown = format::element(item);
                match number(item) {
                    Some(Number::Int(i)) if (0..=i64::from(i32::MAX)).contains(&i) => positions.push(i as u64),
                    Some(Number::Float(f)) if f >= 0.0 && f.fract() == 0.0 && f <= f64::from(i32::MAX) => {
                        positions.push(f as u64)
                    }
                    Some(Number::Int(i)) if i < 0 => {
                        return Err(bad_value(format!("bit positions must be >= 0 but got: {shown}")))
                    }
                    Some(_) => {
                        return Err(bad_value(format!(
                            "bit positions cannot be represented as a 32-bit signed integer: {shown}"
                        )))
                    }
                    None => return Err(bad_value(format!("bit positions must be an integer but got: {shown}"))),
                }
            }
        }
        other => match number(other) {
            Some(Number::Int(i)) if i >= 0 => positions.extend((0..63).filter(|j| i & (1 << j) != 0)),
            Some(Number::Float(f)) if f >= 0.0 && f.fract() == 0.0 && f < i64::MAX as f64 => {
                let i = f as i64;
                positions.extend((0..63).filter(|j| i & (1 << j) != 0))
            }
            Some(Number::Int(_)) | Some(Number::Float(_)) => {
                return Err(bad_value(format!(
                    "{op} cannot take a negative or non-integral number: {}",
                    format::element(other)
                )))
            }
            None => {
                return Err(bad_value(format!(
                    "{op} takes an Array, a number, or a BinData but received: {}",
                    format::element(other)
                )))
            }
        },
    }
    positions.sort_unstable();
    positions.dedup();
    Ok(positions)
}

/// Does value `v` pass a `$bits*` test of these bit positions? Numbers
/// must be integral (a negative number is in two's complement, its sign
/// bit extended); binary data is little-endian.
fn bits_match(v: &Bson, test: BitTest, positions: &[u64]) -> bool {
    let bit: Box<dyn Fn(u64) -> bool + '_> = match v {
        Bson::Binary(b) => {
            Box::new(move |p| b.bytes.get((p / 8) as usize).is_some_and(|byte| byte & (1 << (p % 8)) != 0))
        }
        other => {
            let n = match number(other) {
                Some(Number::Int(i)) => i,
                Some(Number::Float(f)) if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 => f as i64,
                _ => return false,
            };
            Box::new(move |p| if p < 64 { (n >> p) & 1 == 1 } else { n < 0 })
        }
    };
    let want_set = matches!(test, BitTest::AllSet | BitTest::AnySet);
    let mut hits = positions.iter().map(|p| bit(*p) == want_set);
    match test {
        BitTest::AllSet | BitTest::AllClear => hits.all(|h| h),
        BitTest::AnySet | BitTest::AnyClear => hits.any(|h| h),
    }
}

/// `$regex` with its optional `$options`.
fn regex_operator(arg: &Bson, options: Option<&Bson>) -> Result<Regex, FilterError> {
    let extra = match options {
        None => "",
        Some(Bson::String(o)) => o.as_str(),
        Some(_) => return Err(bad_value("$options has to be a string")),
    };
    match arg {
        Bson::String(pattern) => Regex::new(pattern, extra),
        Bson::RegularExpression(r) if !extra.is_empty() && !r.options.is_empty() => {
            Err(err(51075, "options set in both $regex and $options"))
        }
        Bson::RegularExpression(r) => Regex::new(&r.pattern, if extra.is_empty() { &r.options } else { extra }),
        _ => Err(bad_value("$regex has to be a string")),
    }
}

/// Evaluate `e` on `doc`. `pos` receives the array position MongoDB's
/// positional `$` operator uses: the index, in the first array a matching
/// path crossed, of the element that matched; `cx`, the collation and
/// where an `$expr`'s error goes.
fn eval(e: &Expr, doc: &Document, pos: &mut Option<usize>, cx: &EvalContext) -> bool {
    match e {
        Expr::True => true,
        Expr::Schema(schema) => schema.matches_document(doc),
        Expr::Agg(e) => match e.eval_in(doc, cx) {
            Ok(v) => truthy(&v),
            Err(e) => {
                cx.note_expr_error(e);
                false
            }
        },
        Expr::And(subs) => subs.iter().all(|s| eval(s, doc, pos, cx)),
        Expr::Or(subs) => subs.iter().any(|s| eval(s, doc, pos, cx)),
        Expr::Nor(subs) => !subs.iter().any(|s| eval(s, doc, &mut None, cx)),
        Expr::Not(sub) => !eval(sub, doc, &mut None, cx),
        Expr::Compare(path, cmp, target) => compare_path(doc, path, *cmp, target, pos, cx),
        Expr::In(path, items) => items.iter().any(|t| match t {
            Bson::RegularExpression(r) => match Regex::from_bson(r) {
                Ok(re) => any_value(doc, path, pos, &mut false, &mut |v| re.matches(v)),
                Err(_) => false,
            },
            t => compare_path(doc, path, Cmp::Eq, t, pos, cx),
        }),
        Expr::Regex(path, re) => any_value(doc, path, pos, &mut false, &mut |v| re.matches(v)),
        Expr::Type(path, codes) => any_value(doc, path, pos, &mut false, &mut |v| has_type(v, codes)),
        Expr::Size(path, n) => {
            let mut found = false;
            walk(doc, path, None, &mut |v, at| {
                if !found && matches!(v, Some(Bson::Array(items)) if items.len() == *n) {
                    found = true;
                    *pos = pos.or(at);
                }
            });
            found
        }
        Expr::Mod(path, divisor, remainder) => {
            any_value(doc, path, pos, &mut false, &mut |v| mod_match(v, *divisor, *remainder))
        }
        Expr::Bits(path, test, mask) => any_value(doc, path, pos, &mut false, &mut |v| bits_match(v, *test, mask)),
        Expr::Exists(path, want) => {
            let mut exists = false;
            walk(doc, path, None, &mut |v, _| exists |= v.is_some());
            exists == *want
        }
        Expr::ElemMatch(path, cond) => {
            let mut found = false;
            walk(doc, path, None, &mut |v, at| {
                if found {
                    return;
                }
                if let Some(Bson::Array(items)) = v {
                    if let Some(i) = items.iter().position(|item| elem_match_one(cond, item, cx)) {
                        found = true;
                        *pos = pos.or(at).or(Some(i));
                    }
                }
            });
            found
        }
    }
}

/// Whether a value at `path` compares as `cmp` to `target` (a missing
/// path equals null).
fn compare_path(
    doc: &Document,
    path: &str,
    cmp: Cmp,
    target: &Bson,
    pos: &mut Option<usize>,
    cx: &EvalContext,
) -> bool {
    let mut missing = false;
    let found = any_value(doc, path, pos, &mut missing, &mut |v| compare_one(v, cmp, target, cx));
    found || (missing && matches!(target, Bson::Null) && matches!(cmp, Cmp::Eq | Cmp::Gte | Cmp::Lte))
}

/// Does one array element satisfy an `$elemMatch`? A value condition
/// tests the element itself (mongod's `matchesSingleElement`): an inner
/// array is not searched, unlike `$pull`'s conditions.
fn elem_match_one(cond: &ElemCond, item: &Bson, cx: &EvalContext) -> bool {
    match cond {
        ElemCond::Value(e) => eval_single(e, item, cx),
        other => elem_matches(other, item, cx),
    }
}

/// Evaluate a value condition (parsed on the empty path) on `v` alone.
fn eval_single(e: &Expr, v: &Bson, cx: &EvalContext) -> bool {
    match e {
        Expr::And(subs) => subs.iter().all(|s| eval_single(s, v, cx)),
        Expr::Or(subs) => subs.iter().any(|s| eval_single(s, v, cx)),
        Expr::Nor(subs) => !subs.iter().any(|s| eval_single(s, v, cx)),
        Expr::Not(sub) => !eval_single(sub, v, cx),
        Expr::Compare(_, cmp, target) => compare_one(v, *cmp, target, cx),
        Expr::In(_, items) => items.iter().any(|t| match t {
            Bson::RegularExpression(r) => Regex::from_bson(r).is_ok_and(|re| re.matches(v)),
            t => compare_one(v, Cmp::Eq, t, cx),
        }),
        Expr::Exists(_, want) => *want,
        Expr::Type(_, codes) => has_type(v, codes),
        Expr::Size(_, n) => matches!(v, Bson::Array(items) if items.len() == *n),
        Expr::Regex(_, re) => re.matches(v),
        Expr::ElemMatch(_, cond) => {
            matches!(v, Bson::Array(items) if items.iter().any(|i| elem_match_one(cond, i, cx)))
        }
        Expr::Mod(_, divisor, remainder) => mod_match(v, *divisor, *remainder),
        Expr::Bits(_, test, mask) => bits_match(v, *test, mask),
        // Not parsed inside `$elemMatch`'s value form.
        Expr::Schema(_) | Expr::Agg(_) | Expr::True => eval(e, &wrap(v), &mut None, cx),
    }
}

/// Does `v` pass `$mod: [divisor, remainder]`?
fn mod_match(v: &Bson, divisor: i64, remainder: i64) -> bool {
    match number(v) {
        Some(Number::Int(i)) => i.wrapping_rem(divisor) == remainder,
        Some(Number::Float(f)) if f.is_finite() => (f.trunc() as i64).wrapping_rem(divisor) == remainder,
        _ => false,
    }
}

/// Does one value satisfy a `$pull` condition (a value condition
/// searches an array value too)?
fn elem_matches(cond: &ElemCond, item: &Bson, cx: &EvalContext) -> bool {
    match cond {
        ElemCond::Object(e) => matches!(item, Bson::Document(d) if eval(e, d, &mut None, cx)),
        ElemCond::Value(e) => eval(e, &wrap(item), &mut None, cx),
        ElemCond::Equal(v) => cx.compare(v, item) == Ordering::Equal && canonical_type(v) == canonical_type(item),
    }
}

/// A value as the one field of a document, so a value condition (built on
/// the empty path) can be evaluated on it.
fn wrap(v: &Bson) -> Document {
    let mut d = Document::new();
    d.insert("", v.clone());
    d
}

/// Does any value `path` reaches satisfy `test`? A value that is an array
/// at the end of the path offers itself and each of its elements. Records
/// the match position in `pos`, and sets `missing` when a step found
/// nothing.
fn any_value(
    doc: &Document,
    path: &str,
    pos: &mut Option<usize>,
    missing: &mut bool,
    test: &mut dyn FnMut(&Bson) -> bool,
) -> bool {
    let mut found = false;
    walk(doc, path, None, &mut |v, at| {
        if found {
            return;
        }
        match v {
            None => *missing = true,
            Some(v) => {
                if test(v) {
                    found = true;
                    *pos = pos.or(at);
                } else if let Bson::Array(items) = v {
                    if let Some(i) = items.iter().position(&mut *test) {
                        found = true;
                        *pos = pos.or(at).or(Some(i));
                    }
                }
            }
        }
    });
    found
}

/// A double or Decimal128 NaN.
fn is_nan(v: &Bson) -> bool {
    match v {
        Bson::Double(d) => d.is_nan(),
        Bson::Decimal128(d) => doc::decimal::is_nan(d),
        _ => false,
    }
}

fn compare_one(v: &Bson, cmp: Cmp, target: &Bson, cx: &EvalContext) -> bool {
    // A regular expression as an equality target matches strings.
    if let (Bson::RegularExpression(r), Cmp::Eq) = (target, cmp) {
        if let Ok(re) = Regex::from_bson(r) {
            return re.matches(v);
        }
    }
    // Type bracketing: only same-type values compare, MinKey and MaxKey
    // bracket everything.
    let bracketed = canonical_type(v) == canonical_type(target) || matches!(target, Bson::MinKey | Bson::MaxKey);
    if !bracketed {
        return false;
    }
    // NaN equals NaN, and is otherwise neither less nor greater than
    // anything (mongod's rule; the sort order puts it below all numbers).
    if cmp != Cmp::Eq && (is_nan(v) || is_nan(target)) {
        return matches!(cmp, Cmp::Gte | Cmp::Lte) && is_nan(v) && is_nan(target);
    }
    let o = cx.compare(v, target);
    match cmp {
        Cmp::Eq => o == Ordering::Equal,
        Cmp::Gt => o == Ordering::Greater,
        Cmp::Gte => o != Ordering::Less,
        Cmp::Lt => o == Ordering::Less,
        Cmp::Lte => o != Ordering::Greater,
    }
}

/// The values `path` reaches in `doc`, as `distinct` counts them: an
/// array at the end of the path gives its elements; missing gives nothing.
pub fn values_at(doc: &Document, path: &str, f: &mut dyn FnMut(&Bson)) {
    walk(doc, path, None, &mut |v, _| match v {
        Some(Bson::Array(items)) => items.iter().for_each(&mut *f),
        Some(v) => f(v),
        None => {}
    });
}

/// Call `f` with every value `path` reaches in `doc` (`None` where a step
/// finds nothing), following MongoDB's array rules, and with the index in
/// the first array crossed on the way (`at`).
pub(crate) fn walk(doc: &Document, path: &str, at: Option<usize>, f: &mut dyn FnMut(Option<&Bson>, Option<usize>)) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    walk_value(doc.get(head), rest, at, f);
}

fn walk_value(
    v: Option<&Bson>,
    rest: Option<&str>,
    at: Option<usize>,
    f: &mut dyn FnMut(Option<&Bson>, Option<usize>),
) {
    let Some(rest) = rest else {
        f(v, at);
        return;
    };
    match v {
        Some(Bson::Document(d)) => walk(d, rest, at, f),
        Some(Bson::Array(items)) => {
            let (head, tail) = match rest.split_once('.') {
                Some((h, t)) => (h, Some(t)),
                None => (rest, None),
            };
            // A numeric step may index the array...
            let index = doc::index::keys::element_index(head);
            if let Some(i) = index {
                if let Some(item) = items.get(i) {
                    walk_value(Some(item), tail, at, f);
                }
            }
            // ...and the path also applies to each embedded document.
            let mut any = false;
            for (i, item) in items.iter().enumerate() {
                if let Bson::Document(d) = item {
                    any = true;
                    walk(d, rest, at.or(Some(i)), f);
                }
            }
            if !any && index.is_none() {
                f(None, at);
            }
        }
        _ => f(None, at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    /// A match over only the fields a filter reads (decoded from the
    /// stored bytes) agrees with the match over the whole document.
    #[test]
    fn a_filter_reads_only_its_top_level_fields() {
        let docs = [
            doc! { "_id": 1, "a": [1, { "b": 2 }], "c": "x", "k": 5 },
            doc! { "_id": 2, "a": { "b": [2, 3] }, "k": null },
            doc! { "_id": 3, "z": 1 },
            doc! { "_id": 4, "a": [], "k": [4, 6], "c": { "d": 1 } },
        ];
        let filters = [
            doc! { "k": { "$gt": 4 } },
            doc! { "a.b": 2, "c": { "$exists": false } },
            doc! { "$or": [{ "k": null }, { "a": { "$size": 0 } }] },
            doc! { "$nor": [{ "c.d": 1 }], "a": { "$elemMatch": { "b": 2 } } },
            doc! { "k": { "$not": { "$in": [5, 6] } } },
            doc! {},
        ];
        for f in &filters {
            let filter = Filter::parse(f).unwrap();
            let reads = filter.reads().expect("path filters read named fields");
            for d in &docs {
                let bytes = doc::bson_bytes::encode(d).unwrap();
                let part = doc::bson_bytes::decode_fields(&bytes, reads).unwrap();
                assert_eq!(filter.matches_at(&part), filter.matches_at(d), "{f} on {d}");
            }
        }
        assert_eq!(
            Filter::parse(&doc! { "a.b": 1, "a": 2, "c": 3 }).unwrap().reads(),
            Some(&["a".to_string(), "c".to_string()][..])
        );
        assert_eq!(Filter::parse(&doc! { "$expr": { "$eq": ["$a", 1] } }).unwrap().reads(), None);
        assert_eq!(Filter::parse(&doc! { "k": 1, "$jsonSchema": { "required": ["q"] } }).unwrap().reads(), None);
    }

    fn m(filter: Document, d: Document) -> bool {
        Filter::parse(&filter).unwrap().matches(&d)
    }

    #[test]
    fn equality_and_arrays() {
        assert!(m(doc! { "a": 1 }, doc! { "a": 1.0 }));
        assert!(m(doc! { "a": 2 }, doc! { "a": [1, 2, 3] }));
        assert!(m(doc! { "a": [1, 2] }, doc! { "a": [1, 2] }));
        assert!(m(doc! { "a": [1, 2] }, doc! { "a": [[1, 2], 3] }));
        assert!(!m(doc! { "a": [1, 2] }, doc! { "a": [2, 1] }));
        assert!(m(doc! { "a.b": 1 }, doc! { "a": [{ "b": 0 }, { "b": 1 }] }));
        assert!(m(doc! { "a.1": 5 }, doc! { "a": [4, 5] }));
        assert!(m(doc! { "a": { "b": 1 } }, doc! { "a": { "b": 1 } }));
        assert!(!m(doc! { "a": { "b": 1 } }, doc! { "a": { "b": 1, "c": 2 } }));
    }

    #[test]
    fn null_matches_missing() {
        assert!(m(doc! { "a": null }, doc! { "b": 1 }));
        assert!(m(doc! { "a": null }, doc! { "a": null }));
        assert!(!m(doc! { "a": null }, doc! { "a": 0 }));
        assert!(m(doc! { "a.b": null }, doc! { "a": [{ "c": 1 }] }));
        assert!(m(doc! { "a": { "$ne": null } }, doc! { "a": 0 }));
        assert!(!m(doc! { "a": { "$ne": null } }, doc! { "x": 0 }));
    }

    #[test]
    fn comparisons_bracket_types() {
        assert!(m(doc! { "a": { "$gt": 1 } }, doc! { "a": 2.5 }));
        assert!(!m(doc! { "a": { "$gt": 1 } }, doc! { "a": "x" }));
        assert!(m(doc! { "a": { "$gt": 1 } }, doc! { "a": [0, 5] }));
        assert!(m(doc! { "a": { "$gte": 1, "$lt": 3 } }, doc! { "a": [0, 5] }), "any element for each bound");
        assert!(m(doc! { "a": { "$lt": "b" } }, doc! { "a": "a" }));
        assert!(m(doc! { "a": { "$gt": bson::Bson::MinKey } }, doc! { "a": "x" }));
    }

    #[test]
    fn logical_and_set_operators() {
        assert!(m(doc! { "$or": [{ "a": 1 }, { "b": 2 }] }, doc! { "b": 2 }));
        assert!(!m(doc! { "$nor": [{ "a": 1 }, { "b": 2 }] }, doc! { "b": 2 }));
        assert!(m(doc! { "$and": [{ "a": 1 }, { "b": 2 }] }, doc! { "a": 1, "b": 2 }));
        assert!(m(doc! { "a": { "$in": [5, 1] } }, doc! { "a": [1, 9] }));
        assert!(m(doc! { "a": { "$nin": [5] } }, doc! { "b": 1 }));
        assert!(m(doc! { "a": { "$in": [null] } }, doc! { "b": 1 }));
        assert!(m(doc! { "a": { "$not": { "$gt": 3 } } }, doc! { "a": 1 }));
        assert!(m(doc! { "a": { "$not": { "$gt": 3 } } }, doc! { "b": 1 }));
        assert!(m(doc! { "a": { "$exists": true } }, doc! { "a": null }));
        assert!(m(doc! { "a": { "$exists": false } }, doc! { "b": 1 }));
        assert!(m(doc! { "$comment": "hi", "a": 1 }, doc! { "a": 1 }));
    }

    #[test]
    fn type_size_all_mod() {
        assert!(m(doc! { "a": { "$type": "string" } }, doc! { "a": "x" }));
        assert!(m(doc! { "a": { "$type": 2 } }, doc! { "a": ["x", 1] }), "array elements count");
        assert!(m(doc! { "a": { "$type": "array" } }, doc! { "a": [] }));
        assert!(m(doc! { "a": { "$type": "number" } }, doc! { "a": 1i64 }));
        assert!(m(doc! { "a": { "$type": ["bool", "null"] } }, doc! { "a": null }));
        assert!(!m(doc! { "a": { "$type": "null" } }, doc! { "b": 1 }), "missing is no type");
        assert!(m(doc! { "a": { "$size": 2 } }, doc! { "a": [1, [2, 3]] }));
        assert!(!m(doc! { "a": { "$size": 1 } }, doc! { "a": 1 }));
        assert!(m(doc! { "a": { "$all": [1, 3] } }, doc! { "a": [3, 2, 1] }));
        assert!(!m(doc! { "a": { "$all": [1, 4] } }, doc! { "a": [3, 2, 1] }));
        assert!(!m(doc! { "a": { "$all": [] } }, doc! { "a": [1] }));
        assert!(m(doc! { "a": { "$mod": [4, 1] } }, doc! { "a": 9 }));
        assert!(m(doc! { "a": { "$mod": [4, 1] } }, doc! { "a": [8, 5.5] }), "doubles truncate");
        assert!(m(doc! { "a": { "$mod": [4, -1] } }, doc! { "a": -5 }), "remainder keeps the sign");
        for bad in [
            doc! { "a": { "$type": "frob" } },
            doc! { "a": { "$type": 99 } },
            doc! { "a": { "$size": -1 } },
            doc! { "a": { "$size": "x" } },
            doc! { "a": { "$all": 1 } },
            doc! { "a": { "$mod": [0, 1] } },
            doc! { "a": { "$mod": [1] } },
            doc! { "a": { "$mod": [1, 2, 3] } },
        ] {
            assert!(Filter::parse(&bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn bad_filters_are_refused_with_mongodb_messages() {
        let e = Filter::parse(&doc! { "a": { "$frob": 1 } }).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (2, "unknown operator: $frob"));
        let e = Filter::parse(&doc! { "$frob": 1 }).unwrap_err();
        assert_eq!(e.message, "unknown top level operator: $frob");
        assert!(Filter::parse(&doc! { "$or": [] }).is_err());
        assert!(Filter::parse(&doc! { "$or": 1 }).is_err());
        assert!(Filter::parse(&doc! { "a": { "$in": 1 } }).is_err());
    }

    #[test]
    fn regex_elem_match_and_bits() {
        assert!(m(doc! { "a": { "$regex": "^x", "$options": "i" } }, doc! { "a": ["y", "Xz"] }));
        assert!(m(doc! { "a": bson::Regex { pattern: "b$".into(), options: String::new() } }, doc! { "a": "ab" }));
        assert!(m(
            doc! { "a": { "$in": [bson::Regex { pattern: "^q".into(), options: String::new() }, 5] } },
            doc! { "a": "qq" }
        ));
        assert!(m(
            doc! { "a": { "$not": bson::Regex { pattern: "^q".into(), options: String::new() } } },
            doc! { "a": "x" }
        ));
        assert_eq!(Filter::parse(&doc! { "a": { "$options": "i" } }).unwrap_err().message, "$options needs a $regex");
        assert!(m(
            doc! { "a": { "$elemMatch": { "b": 1, "c": { "$gt": 1 } } } },
            doc! { "a": [{ "b": 1, "c": 1 }, { "b": 1, "c": 2 }] }
        ));
        assert!(!m(
            doc! { "a": { "$elemMatch": { "b": 1, "c": { "$gt": 1 } } } },
            doc! { "a": [{ "b": 1, "c": 1 }, { "b": 2, "c": 2 }] }
        ));
        assert!(m(doc! { "a": { "$elemMatch": { "$gte": 80, "$lt": 85 } } }, doc! { "a": [79, 82, 90] }));
        assert!(!m(doc! { "a": { "$elemMatch": { "$gte": 80, "$lt": 85 } } }, doc! { "a": [79, 90] }));
        assert!(!m(doc! { "a": { "$elemMatch": { "$gte": 80 } } }, doc! { "a": 82 }), "only arrays");
        // A path's array index is a canonical number, as the keys'.
        assert!(m(doc! { "a.1": 5 }, doc! { "a": [0, 5] }));
        assert!(!m(doc! { "a.01": 5 }, doc! { "a": [0, 5] }));
        assert!(!m(doc! { "a.+1": 5 }, doc! { "a": [0, 5] }));
        // The value form tests each element itself: an inner array is
        // one element, not searched (mongod's matchesSingleElement).
        assert!(!m(doc! { "a": { "$elemMatch": { "$gte": 1 } } }, doc! { "a": [[2, "x"]] }));
        assert!(!m(doc! { "a": { "$elemMatch": { "$in": [2] } } }, doc! { "a": [[2]] }));
        assert!(m(doc! { "a": { "$elemMatch": { "$eq": [2] } } }, doc! { "a": [[2]] }));
        assert!(m(doc! { "a": { "$elemMatch": { "$type": "array" } } }, doc! { "a": [[2]] }));
        assert!(m(doc! { "a": { "$elemMatch": { "$not": { "$gt": 1 } } } }, doc! { "a": [[2]] }));
        assert!(m(doc! { "a": { "$elemMatch": { "$elemMatch": { "$gt": 1 } } } }, doc! { "a": [[2]] }));
        assert!(m(doc! { "a": { "$bitsAllSet": [1, 5] } }, doc! { "a": 34 }));
        assert!(!m(doc! { "a": { "$bitsAllSet": [1, 5] } }, doc! { "a": 32 }));
        assert!(m(doc! { "a": { "$bitsAnySet": 3 } }, doc! { "a": 2 }));
        assert!(m(doc! { "a": { "$bitsAllClear": 5 } }, doc! { "a": 2.0 }));
        assert!(!m(doc! { "a": { "$bitsAllClear": 5 } }, doc! { "a": 2.5 }), "fractions never match");
        assert!(m(doc! { "a": { "$bitsAnyClear": [63] } }, doc! { "a": 1 }));
        assert!(!m(doc! { "a": { "$bitsAnyClear": [63] } }, doc! { "a": -1 }), "sign extends");
        assert!(Filter::parse(&doc! { "a": { "$bitsAllSet": -1 } }).is_err());
        // Found by the fuzzer: a huge bit position once sized a dense mask.
        assert!(Filter::parse(&doc! { "a": { "$bitsAllSet": [1i64 << 57] } }).is_err());
        assert!(m(doc! { "a": { "$bitsAllSet": [1_000_000] } }, doc! { "a": -1 }), "sign bits extend forever");
        let e = Filter::parse(&doc! { "$where": "true" }).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (2, "no globalScriptEngine in $where parsing"));
    }

    #[test]
    fn positions_for_the_positional_operator() {
        let at = |f: Document, d: Document| Filter::parse(&f).unwrap().matches_at(&d);
        assert_eq!(at(doc! { "a": 85 }, doc! { "a": [80, 85, 90] }), (true, Some(1)));
        assert_eq!(at(doc! { "a.b": 2 }, doc! { "a": [{ "b": 1 }, { "b": 2 }] }), (true, Some(1)));
        assert_eq!(at(doc! { "a": { "$elemMatch": { "$gt": 5 } } }, doc! { "a": [1, 7] }), (true, Some(1)));
        assert_eq!(at(doc! { "x": 1 }, doc! { "x": 1 }), (true, None));
    }

    #[test]
    fn id_equality_is_recognised() {
        assert_eq!(Filter::id_equality(&doc! { "_id": 5 }), Some(&Bson::Int32(5)));
        assert_eq!(Filter::id_equality(&doc! { "_id": { "$gt": 5 } }), None);
        assert_eq!(Filter::id_equality(&doc! { "_id": 5, "a": 1 }), None);
    }
}
