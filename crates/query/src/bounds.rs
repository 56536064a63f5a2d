//! Index bounds as MongoDB builds them: the filter's top-level `$and`
//! flattened into leaf predicates in canonical order, each indexable leaf
//! turned into an ordered list of intervals (type-bracketed: `$gt: 1`
//! covers numbers only), intervals on one field intersected only where
//! the field is not multikey, and the leaves the bounds do not answer
//! exactly left for the FETCH stage's filter.
//!
//! An index with a collation holds strings by their sort keys: its
//! bounds are built from the query's values and then mapped the same way
//! (`collated`); a regex prefix says nothing about sort keys, so there a
//! regex bounds all strings.
//!
//! Invariant: every document the filter matches has an index key inside
//! the bounds (bounds only narrow what is read; the executor still
//! applies the whole filter).

use bson::{Bson, Document};
use doc::catalog::KeyCollation;
use doc::compare::compare;
use std::cmp::Ordering;

/// One interval of key values.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub low: Bson,
    pub low_inclusive: bool,
    pub high: Bson,
    pub high_inclusive: bool,
}

impl Interval {
    pub fn point(v: Bson) -> Interval {
        Interval { low: v.clone(), low_inclusive: true, high: v, high_inclusive: true }
    }

    /// `[MinKey, MaxKey]`.
    pub fn all() -> Interval {
        Interval { low: Bson::MinKey, low_inclusive: true, high: Bson::MaxKey, high_inclusive: true }
    }

    pub fn is_point(&self) -> bool {
        self.low_inclusive && self.high_inclusive && compare(&self.low, &self.high).is_eq()
    }

    pub fn is_all(&self) -> bool {
        *self == Interval::all()
    }

    /// Whether `v` lies inside.
    pub fn contains(&self, v: &Bson) -> bool {
        let lo = compare(&self.low, v);
        let hi = compare(v, &self.high);
        (lo.is_lt() || (lo.is_eq() && self.low_inclusive)) && (hi.is_lt() || (hi.is_eq() && self.high_inclusive))
    }

    fn is_nonempty(&self) -> bool {
        match compare(&self.low, &self.high) {
            Ordering::Less => true,
            Ordering::Equal => self.low_inclusive && self.high_inclusive,
            Ordering::Greater => false,
        }
    }

    /// The overlap of two intervals, if any.
    fn intersect(&self, other: &Interval) -> Option<Interval> {
        let (low, low_inclusive) = match compare(&self.low, &other.low) {
            Ordering::Less => (other.low.clone(), other.low_inclusive),
            Ordering::Greater => (self.low.clone(), self.low_inclusive),
            Ordering::Equal => (self.low.clone(), self.low_inclusive && other.low_inclusive),
        };
        let (high, high_inclusive) = match compare(&self.high, &other.high) {
            Ordering::Less => (self.high.clone(), self.high_inclusive),
            Ordering::Greater => (other.high.clone(), other.high_inclusive),
            Ordering::Equal => (self.high.clone(), self.high_inclusive && other.high_inclusive),
        };
        let i = Interval { low, low_inclusive, high, high_inclusive };
        match compare(&i.low, &i.high) {
            Ordering::Less => Some(i),
            Ordering::Equal if i.low_inclusive && i.high_inclusive => Some(i),
            _ => None,
        }
    }

    /// As explain shows it: `(1, 3)`, `[MinKey, MaxKey]`, `[-inf.0, 3)`,
    /// `["a", "a"]`; on a descending field, high to low.
    pub fn shown(&self, descending: bool) -> String {
        let (a, ai, b, bi) = if descending {
            (&self.high, self.high_inclusive, &self.low, self.low_inclusive)
        } else {
            (&self.low, self.low_inclusive, &self.high, self.high_inclusive)
        };
        format!("{}{}, {}{}", if ai { '[' } else { '(' }, shown_value(a), shown_value(b), if bi { ']' } else { ')' })
    }
}

/// A bound value as mongod prints it in `indexBounds`.
fn shown_value(v: &Bson) -> String {
    match v {
        Bson::Double(d) if d.is_infinite() => if *d > 0.0 { "inf.0" } else { "-inf.0" }.to_string(),
        Bson::Double(d) if d.is_nan() => "nan.0".to_string(),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 1e15 => format!("{d:.1}"),
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        other => doc::format::spaced(other),
    }
}

/// A leaf predicate of the filter's top-level conjunction.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaf {
    pub path: String,
    pub op: Op,
    pub value: Bson,
    /// The `$elemMatch` it sits in (an index into
    /// `Conjunction::groups`): its predicates hold for one array element
    /// together, so their bounds may be intersected on a multikey field
    /// and compounded under the group's path.
    pub group: Option<usize>,
}

/// The operators bounds are built from, in MongoDB's canonical order of
/// match types (EQ, LTE, LT, GT, GTE, REGEX, EXISTS, IN, then the
/// negations under NOT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Eq,
    Lte,
    Lt,
    Gt,
    Gte,
    /// The value is a `Bson::RegularExpression`.
    Regex,
    /// `$exists: true`.
    Exists,
    In,
    /// `$ne`: the complement of an equality.
    Ne,
    /// `$nin`: the complement of an `$in`.
    Nin,
    /// `$exists: false`.
    NotExists,
    /// `$type`: the value is its argument (an alias, a code, or a list).
    Type,
}

impl Op {
    fn of(name: &str) -> Option<Op> {
        Some(match name {
            "$eq" => Op::Eq,
            "$lte" => Op::Lte,
            "$lt" => Op::Lt,
            "$gt" => Op::Gt,
            "$gte" => Op::Gte,
            "$in" => Op::In,
            "$ne" => Op::Ne,
            "$nin" => Op::Nin,
            _ => return None,
        })
    }
}

impl Leaf {
    /// The leaf as a filter document, as explain shows a FETCH filter.
    pub fn as_filter(&self) -> Document {
        let not = |inner: Document| bson::doc! { "$not": inner };
        let cond = match (self.op, &self.value) {
            (Op::Eq, v) => bson::doc! { "$eq": v.clone() },
            (Op::Lte, v) => bson::doc! { "$lte": v.clone() },
            (Op::Lt, v) => bson::doc! { "$lt": v.clone() },
            (Op::Gt, v) => bson::doc! { "$gt": v.clone() },
            (Op::Gte, v) => bson::doc! { "$gte": v.clone() },
            (Op::Regex, Bson::RegularExpression(r)) if r.options.is_empty() => bson::doc! { "$regex": &r.pattern },
            (Op::Regex, Bson::RegularExpression(r)) => bson::doc! { "$regex": &r.pattern, "$options": &r.options },
            (Op::Regex, v) => bson::doc! { "$regex": v.clone() },
            (Op::Exists, _) => bson::doc! { "$exists": true },
            (Op::In, v) => bson::doc! { "$in": v.clone() },
            (Op::Ne, v) => not(bson::doc! { "$eq": v.clone() }),
            (Op::Nin, v) => not(bson::doc! { "$in": v.clone() }),
            (Op::NotExists, _) => not(bson::doc! { "$exists": true }),
            (Op::Type, v) => bson::doc! { "$type": v.clone() },
        };
        let mut d = Document::new();
        d.insert(self.path.clone(), cond);
        d
    }

    /// Whether the bounds of this leaf hold exactly the keys of the
    /// values it matches on a field that is not multikey (mongod's EXACT
    /// tightness), so FETCH need not test it again. Null, arrays,
    /// regexes without a plain prefix and `$exists` are inexact: the key
    /// does not tell null from missing, nor an array from its elements.
    pub fn exact(&self) -> bool {
        match self.op {
            Op::Eq => exact_value(&self.value),
            // Type-bracketed: exact where the bracket is the value's type.
            Op::Lte | Op::Lt | Op::Gt | Op::Gte => type_bracket(&self.value).0 .0 != Bson::MinKey,
            Op::Regex => matches!(&self.value, Bson::RegularExpression(r) if regex_prefix(r).is_some_and(|(_, e)| e)),
            Op::In | Op::Nin => match &self.value {
                Bson::Array(items) => items.iter().all(|i| match i {
                    Bson::RegularExpression(r) => regex_prefix(r).is_some_and(|(_, e)| e),
                    v => exact_value(v),
                }),
                _ => false,
            },
            Op::Ne => exact_value(&self.value) || matches!(self.value, Bson::Null),
            Op::Exists | Op::NotExists => false,
            Op::Type => type_codes(&self.value).is_some_and(|codes| codes.iter().all(|&c| type_range(c).1)),
        }
    }

    /// `exact` on an index with a collation or not (`collated`), where a
    /// regex bounds all strings.
    pub fn exact_on(&self, collated: bool) -> bool {
        let regex = |v: &Bson| matches!(v, Bson::RegularExpression(_));
        let has_regex = match (&self.op, &self.value) {
            (Op::Regex, _) => true,
            (Op::In | Op::Nin, Bson::Array(items)) => items.iter().any(regex),
            _ => false,
        };
        self.exact() && !(collated && has_regex)
    }

    /// Whether its bounds depend on how strings compare (mongod's
    /// collatable types: a string, symbol, document or array value), so
    /// that an index of another collation than the query's cannot take
    /// them.
    pub fn collatable(&self) -> bool {
        match (self.op, &self.value) {
            (Op::Regex | Op::Exists | Op::NotExists | Op::Type, _) => false,
            (Op::In | Op::Nin, Bson::Array(items)) => items.iter().any(collatable),
            (_, v) => collatable(v),
        }
    }

    /// Whether every document the leaf matches has a value on its path
    /// (so a sparse index holds it).
    pub fn needs_value(&self) -> bool {
        match self.op {
            Op::Eq => !matches!(self.value, Bson::Null),
            Op::Lte | Op::Lt | Op::Gt | Op::Gte | Op::Regex | Op::Exists | Op::Type => true,
            Op::In => matches!(&self.value, Bson::Array(items) if !items.iter().any(|i| matches!(i, Bson::Null))),
            Op::Ne => matches!(self.value, Bson::Null),
            Op::Nin | Op::NotExists => false,
        }
    }

    /// Whether its bounds may be used on a multikey field: the
    /// complement of null would skip the keys of an array holding null
    /// beside other values, which `$ne: null` must not match but whose
    /// other keys lie in the bounds... and the reverse for `$nin`; mongod
    /// leaves these to FETCH.
    pub fn multikey_safe(&self) -> bool {
        match (self.op, &self.value) {
            (Op::Ne, Bson::Null) => false,
            (Op::Nin, Bson::Array(items)) => !items.iter().any(|i| matches!(i, Bson::Null)),
            _ => true,
        }
    }
}

/// The filter's top-level conjunction: indexable leaves in canonical
/// order (match type, then path), and whether anything else is there
/// (which the FETCH filter keeps).
#[derive(Debug, Default)]
pub struct Conjunction {
    pub leaves: Vec<Leaf>,
    /// Children bounds cannot use (`$or`, `$expr`, regexes, ...), as
    /// filter documents.
    pub others: Vec<Document>,
    /// The `$elemMatch` children: the path they match under and the child
    /// as written (always on FETCH: the bounds of its leaves do not say
    /// the value is an array).
    pub groups: Vec<(String, Document)>,
}

/// Split `filter` into its conjunction.
pub fn conjunction(filter: &Document) -> Conjunction {
    let mut out = Conjunction::default();
    flatten(filter, &mut out);
    // `$elemMatch` sorts before the comparisons, as in mongod's canonical
    // order of match types.
    out.leaves
        .sort_by(|a, b| (a.group.is_none(), a.op, &a.path, a.group).cmp(&(b.group.is_none(), b.op, &b.path, b.group)));
    out
}

/// Whether the `$elemMatch` at `path` with this argument is the value
/// form (`{$elemMatch: {$gt: 1}}`), not the object form.
pub(crate) fn is_value_form(arg: &Document) -> bool {
    arg.keys().next().is_some_and(|k| k.starts_with('$') && !matches!(k.as_str(), "$and" | "$or" | "$nor" | "$expr"))
}

/// The leaves of an `$elemMatch` on `path` (group `group`): the value
/// form's comparisons on `path` itself, the object form's on
/// `path.field`; anything else in it is left to FETCH with the group.
fn elem_match_leaves(path: &str, arg: &Document, group: usize, out: &mut Vec<Leaf>) {
    let mut push = |path: String, op: &str, v: &Bson| out.extend(leaf(&path, op, v, Some(group)));
    if is_value_form(arg) {
        for (op, v) in arg {
            push(path.to_string(), op, v);
        }
        return;
    }
    for (field, cond) in arg {
        if field.starts_with('$') {
            continue;
        }
        let full = format!("{path}.{field}");
        match cond {
            Bson::Document(c) if c.keys().next().is_some_and(|k| k.starts_with('$')) => {
                for (op, v) in c {
                    push(full.clone(), op, v);
                }
            }
            v => push(full, IMPLICIT_EQ, v),
        }
    }
}

fn flatten(filter: &Document, out: &mut Conjunction) {
    for (key, value) in filter {
        if key == "$or" {
            if let Some(rewritten) = or_simplified(value) {
                flatten(&rewritten, out);
                continue;
            }
        }
        if key == "$and" {
            if let Bson::Array(items) = value {
                for item in items {
                    match item {
                        Bson::Document(d) => flatten(d, out),
                        other => out.others.push(bson::doc! { "$and": [other.clone()] }),
                    }
                }
                continue;
            }
        }
        let mut other = || {
            let mut d = Document::new();
            d.insert(key.clone(), value.clone());
            out.others.push(d);
        };
        if key.starts_with('$') {
            other();
            continue;
        }
        match value {
            Bson::Document(cond) if cond.keys().next().is_some_and(|k| k.starts_with('$')) => {
                operators(key, cond, out);
            }
            v => match leaf(key, IMPLICIT_EQ, v, None) {
                Some(l) => out.leaves.push(l),
                None => other(),
            },
        }
    }
}

/// An `$or` as mongod simplifies it: one branch is that branch; branches
/// that are all equalities (or `$in`s) on one path are one `$in` of
/// their values, ordered and without duplicates.
fn or_simplified(value: &Bson) -> Option<Document> {
    let Bson::Array(items) = value else { return None };
    if let [Bson::Document(only)] = items.as_slice() {
        return Some(only.clone());
    }
    let mut path: Option<String> = None;
    let mut values = Vec::new();
    for item in items {
        let Bson::Document(branch) = item else { return None };
        let (p, v) = branch.iter().next().filter(|_| branch.len() == 1)?;
        if p.starts_with('$') || path.as_ref().is_some_and(|q| q != p) {
            return None;
        }
        path = Some(p.clone());
        match v {
            Bson::Document(cond) if cond.keys().next().is_some_and(|k| k.starts_with('$')) => {
                match (cond.len(), cond.iter().next()) {
                    (1, Some((op, Bson::Array(list)))) if op == "$in" => values.extend(list.iter().cloned()),
                    (1, Some((op, v))) if op == "$eq" && !matches!(v, Bson::RegularExpression(_)) => {
                        values.push(v.clone())
                    }
                    _ => return None,
                }
            }
            v => values.push(v.clone()),
        }
    }
    values.sort_by(compare);
    values.dedup_by(|a, b| compare(a, b).is_eq() && doc::compare::canonical_type(a) == doc::compare::canonical_type(b));
    let mut d = Document::new();
    match values.as_slice() {
        // A regex alone matches by pattern as a bare value, not as `$eq`.
        [one @ Bson::RegularExpression(_)] => d.insert(path?, one.clone()),
        [one] => d.insert(path?, bson::doc! { "$eq": one.clone() }),
        _ => d.insert(path?, bson::doc! { "$in": values }),
    };
    Some(d)
}

/// The leaves of `{path: {$op: value, ...}}`; an operator bounds cannot
/// use goes to `others` as `{path: {$op: value}}`.
fn operators(path: &str, cond: &Document, out: &mut Conjunction) {
    let regex = cond.get("$regex").and_then(|r| regex_of(r, cond.get("$options")));
    for (op, v) in cond {
        if let (true, Bson::Document(arg)) = (op == "$elemMatch", v) {
            let group = out.groups.len();
            let mut whole = Document::new();
            whole.insert(op.clone(), v.clone());
            let mut d = Document::new();
            d.insert(path.to_string(), whole);
            out.groups.push((path.to_string(), d));
            elem_match_leaves(path, arg, group, &mut out.leaves);
            continue;
        }
        let made = match (op.as_str(), &regex) {
            ("$regex", Some(r)) => leaf(path, IMPLICIT_EQ, &Bson::RegularExpression(r.clone()), None),
            ("$options", Some(_)) => continue,
            _ => leaf(path, op, v, None),
        };
        match made {
            Some(l) => out.leaves.push(l),
            None => {
                let mut c = Document::new();
                c.insert(op.clone(), v.clone());
                if op == "$regex" || op == "$options" {
                    c = cond.clone();
                }
                let mut d = Document::new();
                d.insert(path.to_string(), c);
                if !out.others.contains(&d) {
                    out.others.push(d);
                }
            }
        }
    }
}

/// `$regex` (a string or a regex) with its `$options`, as one regex.
fn regex_of(pattern: &Bson, options: Option<&Bson>) -> Option<bson::Regex> {
    let extra = match options {
        None => String::new(),
        Some(Bson::String(o)) => o.clone(),
        Some(_) => return None,
    };
    match pattern {
        Bson::String(p) => Some(bson::Regex { pattern: p.clone(), options: extra }),
        Bson::RegularExpression(r) if extra.is_empty() => Some(r.clone()),
        Bson::RegularExpression(r) if r.options.is_empty() => {
            Some(bson::Regex { pattern: r.pattern.clone(), options: extra })
        }
        _ => None,
    }
}

/// The operator of `{path: value}` (an equality, or a pattern match for
/// a regex value).
const IMPLICIT_EQ: &str = "";

/// The leaf of `{path: {op: v}}` when bounds can be built for it.
fn leaf(path: &str, op: &str, v: &Bson, group: Option<usize>) -> Option<Leaf> {
    let make = |op, value: &Bson| Some(Leaf { path: path.to_string(), op, value: value.clone(), group });
    match (op, v) {
        // `{a: /re/}` and `$regex` match by pattern; `$eq: /re/` matches
        // only that regex (left to FETCH).
        (IMPLICIT_EQ, Bson::RegularExpression(_)) => make(Op::Regex, v),
        (IMPLICIT_EQ, v) => leaf(path, "$eq", v, group),
        ("$exists", v) => make(if truthy(v) { Op::Exists } else { Op::NotExists }, &Bson::Boolean(truthy(v))),
        ("$type", v) => type_codes(v).and_then(|_| make(Op::Type, v)),
        (_, v) => {
            let op = Op::of(op)?;
            let fits = match op {
                Op::Eq => eq_value(v),
                Op::In => {
                    matches!(v, Bson::Array(items) if items.iter().all(|i| eq_value(i) || matches!(i, Bson::RegularExpression(_))))
                }
                Op::Ne => eq_value(v) && !matches!(v, Bson::Array(_)),
                Op::Nin => {
                    matches!(v, Bson::Array(items) if items.iter().all(|i| eq_value(i) && !matches!(i, Bson::Array(_))))
                }
                _ => range_value(v),
            };
            fits.then(|| make(op, v)).flatten()
        }
    }
}

/// `$exists`'s argument as the matcher reads it.
fn truthy(v: &Bson) -> bool {
    crate::types::truthy(&Some(v.clone()))
}

/// The type codes of a `$type` argument (`-2` for "number"); `None`
/// when it is not one the matcher takes.
pub fn type_codes(v: &Bson) -> Option<Vec<i32>> {
    match v {
        Bson::Array(items) if !items.is_empty() => items.iter().map(|i| crate::types::type_code(i).ok()).collect(),
        Bson::Array(_) => None,
        v => crate::types::type_code(v).ok().map(|c| vec![c]),
    }
}

/// The keys a value of type `code` may have, and whether every key there
/// is of that type (exact): mongod's bounds for `$type`.
fn type_range(code: i32) -> (Interval, bool) {
    let between = |low: Bson, high: Bson, high_inclusive| Interval { low, low_inclusive: true, high, high_inclusive };
    let numbers = between(Bson::Double(f64::NAN), Bson::Double(f64::INFINITY), true);
    match code {
        -2 => (numbers, true),
        1 | 16 | 18 | 19 => (numbers, false),
        2 | 14 => (between(Bson::String(String::new()), Bson::Document(Document::new()), false), false),
        3 => (between(Bson::Document(Document::new()), Bson::Array(Vec::new()), false), true),
        6 => (Interval::point(Bson::Undefined), false),
        10 => (Interval::point(Bson::Null), false),
        -1 => (Interval::point(Bson::MinKey), true),
        127 => (Interval::point(Bson::MaxKey), true),
        7 | 8 | 9 | 17 => {
            let sample = match code {
                7 => Bson::ObjectId(bson::oid::ObjectId::from_bytes([0; 12])),
                8 => Bson::Boolean(false),
                9 => Bson::DateTime(bson::DateTime::from_millis(0)),
                _ => Bson::Timestamp(bson::Timestamp { time: 0, increment: 0 }),
            };
            let ((low, _), (high, _)) = type_bracket(&sample);
            (between(low, high, true), true)
        }
        // Arrays (their elements are the keys), and types without a
        // bracket here: every key.
        _ => (Interval::all(), false),
    }
}

/// A value a collation compares otherwise than binary (mongod's
/// collatable types: string, symbol, document, array).
pub fn collatable(v: &Bson) -> bool {
    matches!(v, Bson::String(_) | Bson::Symbol(_) | Bson::Document(_) | Bson::Array(_))
}

/// Values an equality's bounds are built for.
fn eq_value(v: &Bson) -> bool {
    !matches!(v, Bson::RegularExpression(_) | Bson::Undefined | Bson::JavaScriptCodeWithScope(_))
}

/// Values a range's (type-bracketed) bounds are built for.
fn range_value(v: &Bson) -> bool {
    match v {
        Bson::Array(_)
        | Bson::Document(_)
        | Bson::RegularExpression(_)
        | Bson::Null
        | Bson::Undefined
        | Bson::MinKey
        | Bson::MaxKey
        | Bson::JavaScriptCodeWithScope(_) => false,
        Bson::Double(d) => !d.is_nan(),
        Bson::Decimal128(d) => !doc::decimal::is_nan(d),
        _ => true,
    }
}

/// An equality whose point bounds answer it exactly.
fn exact_value(v: &Bson) -> bool {
    !matches!(v, Bson::Null | Bson::Array(_) | Bson::RegularExpression(_))
}

/// Characters a backslash makes literal (any other escape is a class,
/// an anchor or a boundary, and ends a prefix).
const LITERAL_ESCAPES: &str = "\\.*?+()[]{}|^$/-# ";

/// A regex's fixed prefix (mongod's simple-regex analysis) and whether
/// the prefix alone decides a match (the regex is `^prefix` and no more):
/// only an unanchored-to-`^`/`\A` pattern, a `|`, or the `i` (or an
/// unknown) flag, or `m` with `^`, leave no prefix.
pub fn regex_prefix(r: &bson::Regex) -> Option<(String, bool)> {
    let extended = r.options.contains('x');
    if r.options.chars().any(|c| !matches!(c, 'm' | 's' | 'x')) {
        return None;
    }
    let (rest, caret) = match (r.pattern.strip_prefix('^'), r.pattern.strip_prefix("\\A")) {
        (Some(rest), _) => (rest, true),
        (None, Some(rest)) => (rest, false),
        _ => return None,
    };
    if (caret && r.options.contains('m')) || r.pattern.contains('|') {
        return None;
    }
    let mut prefix = String::new();
    let mut chars = rest.chars().peekable();
    let mut exact = true;
    while let Some(c) = chars.next() {
        // Where the prefix ends: `keep` whether its last character stays
        // (a quantifier that may follow — `?`, `*`, `{0,1}`, or one after
        // a comment — makes it optional).
        let keep = match c {
            // The whitespace the regex engine skips under `x`.
            ' ' | '\n' | '\t' | '\r' if extended => continue,
            '\\' => match chars.peek() {
                Some(&n) if LITERAL_ESCAPES.contains(n) => {
                    chars.next();
                    prefix.push(n);
                    continue;
                }
                // A class, an anchor, a boundary (`\<`, `\b`), a quote.
                _ => true,
            },
            '(' => !matches!((chars.next(), chars.next()), (Some('?'), Some('#'))),
            '#' if extended => false,
            '?' | '*' | '{' => false,
            '^' | '$' | '.' | '[' | ')' | '+' => true,
            c => {
                prefix.push(c);
                continue;
            }
        };
        if !keep {
            prefix.pop();
        }
        exact = false;
        break;
    }
    // `^abc.*` matches what `^abc` does.
    Some((prefix, exact))
}

/// The intervals of one leaf, ordered and disjoint.
pub fn intervals(leaf: &Leaf) -> Vec<Interval> {
    intervals_under(leaf, None)
}

/// The intervals of one leaf on an index of collation `c`: those of
/// `intervals` with every string as its sort key (a complement taken of
/// the mapped values), a regex bounding all strings.
pub fn intervals_under(leaf: &Leaf, c: Option<&dyn KeyCollation>) -> Vec<Interval> {
    let mapped = |list: Vec<Interval>| match c {
        Some(c) => collated(list, c),
        None => list,
    };
    match leaf.op {
        Op::Nin if !matches!(leaf.value, Bson::Array(_)) => vec![Interval::all()],
        Op::Ne | Op::Nin => {
            let excluded = Leaf { op: if leaf.op == Op::Ne { Op::Eq } else { Op::In }, ..leaf.clone() };
            complement(&mapped(leaf_intervals(&excluded, c.is_none())))
        }
        _ => mapped(leaf_intervals(leaf, c.is_none())),
    }
}

/// `list` as an index of collation `c` holds its values: each endpoint
/// by its sort key (the empty string's is the least), ordered and merged
/// again.
fn collated(list: Vec<Interval>, c: &dyn KeyCollation) -> Vec<Interval> {
    let mapped = list
        .into_iter()
        .map(|i| Interval {
            low: c.key_of(&i.low),
            low_inclusive: i.low_inclusive,
            high: c.key_of(&i.high),
            high_inclusive: i.high_inclusive,
        })
        .collect();
    union(mapped)
}

/// The intervals of one leaf that is no complement (`$ne`, `$nin`: see
/// `intervals_under`); `prefixes`: a regex bounds the strings under its
/// prefix (else all strings).
fn leaf_intervals(leaf: &Leaf, prefixes: bool) -> Vec<Interval> {
    let eq_intervals = |v: &Bson| eq_intervals(v, prefixes);
    let v = &leaf.value;
    let (min, max) = type_bracket(v);
    match leaf.op {
        Op::Eq => eq_intervals(v),
        Op::In => {
            let Bson::Array(items) = v else { return vec![Interval::all()] };
            union(items.iter().flat_map(eq_intervals).collect())
        }
        Op::Ne | Op::Nin => unreachable!("complements are taken in intervals_under"),
        Op::Regex => eq_intervals(v),
        Op::Exists => vec![Interval::all()],
        Op::NotExists => vec![Interval::point(Bson::Null)],
        Op::Type => match type_codes(v) {
            Some(codes) => union(codes.into_iter().map(|c| type_range(c).0).collect()),
            None => vec![Interval::all()],
        },
        Op::Gt => vec![Interval { low: v.clone(), low_inclusive: false, high: max.0, high_inclusive: max.1 }],
        Op::Gte => vec![Interval { low: v.clone(), low_inclusive: true, high: max.0, high_inclusive: max.1 }],
        Op::Lt => vec![Interval { low: min.0, low_inclusive: min.1, high: v.clone(), high_inclusive: false }],
        Op::Lte => vec![Interval { low: min.0, low_inclusive: min.1, high: v.clone(), high_inclusive: true }],
    }
}

/// The keys of a hashed field (of collation `c`) an equality (or `$in`)
/// may meet: the points of its values' hashes; `None` for any other leaf
/// (or an `$in` holding a regex), which bounds a hashed field not at all.
pub fn hashed_intervals(leaf: &Leaf, c: Option<&dyn KeyCollation>) -> Option<Vec<Interval>> {
    let hash = |v: &Bson| {
        let key = match c {
            Some(c) => c.key_of(v),
            None => v.clone(),
        };
        Interval::point(Bson::Int64(doc::index::hashed::hash64(&key)))
    };
    match (&leaf.op, &leaf.value) {
        (Op::Eq, v) => Some(vec![hash(v)]),
        (Op::In, Bson::Array(items)) if !items.iter().any(|i| matches!(i, Bson::RegularExpression(_))) => {
            Some(union(items.iter().map(hash).collect()))
        }
        _ => None,
    }
}

/// The keys a value equal to `v` may have: `v` itself; for an array
/// also its first element (an array field equal to it has that key) or
/// `undefined` for the empty array; for a regex the strings under its
/// prefix (or all strings, without `prefixes`) and the regex itself.
fn eq_intervals(v: &Bson, prefixes: bool) -> Vec<Interval> {
    match v {
        Bson::Array(items) => {
            let first = items.first().cloned().unwrap_or(Bson::Undefined);
            union(vec![Interval::point(first), Interval::point(v.clone())])
        }
        Bson::RegularExpression(r) => {
            let strings = match regex_prefix(r).filter(|_| prefixes) {
                Some((prefix, _)) if !prefix.is_empty() => prefix_range(prefix),
                _ => Interval {
                    low: Bson::String(String::new()),
                    low_inclusive: true,
                    high: Bson::Document(Document::new()),
                    high_inclusive: false,
                },
            };
            // Drivers write a regex's flags in order; a filter's may not be.
            let mut flags: Vec<char> = r.options.chars().collect();
            flags.sort_unstable();
            let ordered = bson::Regex { pattern: r.pattern.clone(), options: flags.into_iter().collect() };
            vec![strings, Interval::point(Bson::RegularExpression(ordered))]
        }
        v => vec![Interval::point(v.clone())],
    }
}

/// The strings starting with `prefix`: up to the prefix with its last
/// character's successor (or every later string when there is none).
fn prefix_range(prefix: String) -> Interval {
    let mut high = prefix.clone();
    let last = high.pop().expect("a prefix");
    let (high, high_inclusive) = match char::from_u32(last as u32 + 1) {
        Some(next) => {
            high.push(next);
            (Bson::String(high), false)
        }
        None => (Bson::Document(Document::new()), false),
    };
    Interval { low: Bson::String(prefix), low_inclusive: true, high, high_inclusive }
}

/// Sort intervals and merge those that overlap or touch.
fn union(mut list: Vec<Interval>) -> Vec<Interval> {
    list.sort_by(|a, b| compare(&a.low, &b.low).then_with(|| b.low_inclusive.cmp(&a.low_inclusive)));
    let mut out: Vec<Interval> = Vec::with_capacity(list.len());
    for i in list {
        if let Some(last) = out.last_mut() {
            let o = compare(&i.low, &last.high);
            if o.is_lt() || (o.is_eq() && (i.low_inclusive || last.high_inclusive)) {
                match compare(&i.high, &last.high) {
                    Ordering::Greater => {
                        last.high = i.high;
                        last.high_inclusive = i.high_inclusive;
                    }
                    Ordering::Equal => last.high_inclusive |= i.high_inclusive,
                    Ordering::Less => {}
                }
                continue;
            }
        }
        out.push(i);
    }
    out
}

/// Everything from MinKey to MaxKey outside `list` (ordered, disjoint).
fn complement(list: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::with_capacity(list.len() + 1);
    let (mut low, mut low_inclusive) = (Bson::MinKey, true);
    for i in list {
        let gap = Interval { low, low_inclusive, high: i.low.clone(), high_inclusive: !i.low_inclusive };
        if gap.is_nonempty() {
            out.push(gap);
        }
        (low, low_inclusive) = (i.high.clone(), !i.high_inclusive);
    }
    let last = Interval { low, low_inclusive, high: Bson::MaxKey, high_inclusive: true };
    if last.is_nonempty() {
        out.push(last);
    }
    out
}

/// The least and greatest values of `v`'s type class, each with whether
/// it is included (MongoDB's type bracketing).
fn type_bracket(v: &Bson) -> ((Bson, bool), (Bson, bool)) {
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            ((Bson::Double(f64::NEG_INFINITY), true), (Bson::Double(f64::INFINITY), true))
        }
        Bson::String(_) | Bson::Symbol(_) => {
            ((Bson::String(String::new()), true), (Bson::Document(Document::new()), false))
        }
        Bson::DateTime(_) => (
            (Bson::DateTime(bson::DateTime::from_millis(i64::MIN)), true),
            (Bson::DateTime(bson::DateTime::from_millis(i64::MAX)), true),
        ),
        Bson::ObjectId(_) => (
            (Bson::ObjectId(bson::oid::ObjectId::from_bytes([0; 12])), true),
            (Bson::ObjectId(bson::oid::ObjectId::from_bytes([0xff; 12])), true),
        ),
        Bson::Boolean(_) => ((Bson::Boolean(false), true), (Bson::Boolean(true), true)),
        Bson::Timestamp(_) => (
            (Bson::Timestamp(bson::Timestamp { time: 0, increment: 0 }), true),
            (Bson::Timestamp(bson::Timestamp { time: u32::MAX, increment: u32::MAX }), true),
        ),
        // Other types: the whole key space (still a superset).
        _ => ((Bson::MinKey, true), (Bson::MaxKey, true)),
    }
}

/// Intersect two ordered, disjoint interval lists (one pass over both).
pub fn intersect(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if let Some(both) = a[i].intersect(&b[j]) {
            out.push(both);
        }
        // Advance the one that ends first (both when they end together).
        match compare(&a[i].high, &b[j].high) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => match (a[i].high_inclusive, b[j].high_inclusive) {
                (false, true) => i += 1,
                (true, false) => j += 1,
                _ => {
                    i += 1;
                    j += 1;
                }
            },
        }
    }
    union(out)
}

/// Whether `v` lies in one of an ordered, disjoint list of intervals
/// (a binary search: an `$in` may hold many).
pub fn any_contains(list: &[Interval], v: &Bson) -> bool {
    let after = list.partition_point(|i| {
        let o = compare(&i.low, v);
        o.is_lt() || (o.is_eq() && i.low_inclusive)
    });
    after > 0 && list[after - 1].contains(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn leaves_come_in_canonical_order() {
        let c = conjunction(&doc! { "b": 1, "a": { "$gt": 1, "$lt": 3 }, "$or": [{ "x": 1 }, { "y": 1 }] });
        let ops: Vec<(String, Op)> = c.leaves.iter().map(|l| (l.path.clone(), l.op)).collect();
        assert_eq!(ops, vec![("b".into(), Op::Eq), ("a".into(), Op::Lt), ("a".into(), Op::Gt)]);
        assert_eq!(c.others, vec![doc! { "$or": [{ "x": 1 }, { "y": 1 }] }]);
    }

    fn shown_bounds(filter: Document) -> Vec<(Vec<String>, bool)> {
        conjunction(&filter)
            .leaves
            .iter()
            .map(|l| (intervals(l).iter().map(|i| i.shown(false)).collect(), l.exact()))
            .collect()
    }

    /// The bounds and tightness of mongod's index_bounds_builder for the
    /// operators beyond plain comparisons.
    #[test]
    fn negations_null_exists_regexes_and_arrays() {
        let re = |p: &str, o: &str| Bson::RegularExpression(bson::Regex { pattern: p.into(), options: o.into() });
        let cases: Vec<(Document, Vec<&str>, bool)> = vec![
            (doc! { "a": { "$ne": 5 } }, vec!["[MinKey, 5)", "(5, MaxKey]"], true),
            (doc! { "a": { "$nin": [2, 1] } }, vec!["[MinKey, 1)", "(1, 2)", "(2, MaxKey]"], true),
            (doc! { "a": null }, vec!["[null, null]"], false),
            (doc! { "a": { "$ne": null } }, vec!["[MinKey, null)", "(null, MaxKey]"], true),
            (doc! { "a": { "$in": [null, 1] } }, vec!["[null, null]", "[1, 1]"], false),
            (doc! { "a": { "$exists": true } }, vec!["[MinKey, MaxKey]"], false),
            (doc! { "a": { "$exists": false } }, vec!["[null, null]"], false),
            (doc! { "a": re("^abc", "") }, vec!["[\"abc\", \"abd\")", "[/^abc/, /^abc/]"], true),
            (doc! { "a": { "$regex": "^abc", "$options": "i" } }, vec!["[\"\", {})", "[/^abc/i, /^abc/i]"], false),
            (doc! { "a": re("abc", "") }, vec!["[\"\", {})", "[/abc/, /abc/]"], false),
            (doc! { "a": re("^a.c", "") }, vec!["[\"a\", \"b\")", "[/^a.c/, /^a.c/]"], false),
            (doc! { "a": re("^ab?", "") }, vec!["[\"a\", \"b\")", "[/^ab?/, /^ab?/]"], false),
            (doc! { "a": re("^a|b", "") }, vec!["[\"\", {})", "[/^a|b/, /^a|b/]"], false),
            (doc! { "a": { "$in": [re("^a", ""), 1] } }, vec!["[1, 1]", "[\"a\", \"b\")", "[/^a/, /^a/]"], true),
            (doc! { "a": [1, 2] }, vec!["[1, 1]", "[[ 1, 2 ], [ 1, 2 ]]"], false),
            (doc! { "a": [] }, vec!["[undefined, undefined]", "[[], []]"], false),
            (doc! { "a": { "b": 1 } }, vec!["[{ b: 1 }, { b: 1 }]"], true),
            (doc! { "a": { "$type": "number" } }, vec!["[nan.0, inf.0]"], true),
            (doc! { "a": { "$type": "int" } }, vec!["[nan.0, inf.0]"], false),
            (doc! { "a": { "$type": 2 } }, vec!["[\"\", {})"], false),
            (doc! { "a": { "$type": "object" } }, vec!["[{}, [])"], true),
            (doc! { "a": { "$type": ["bool", "null"] } }, vec!["[null, null]", "[false, true]"], false),
            (doc! { "a": { "$type": "array" } }, vec!["[MinKey, MaxKey]"], false),
        ];
        for (filter, want, exact) in cases {
            let got = shown_bounds(filter.clone());
            assert_eq!(got.len(), 1, "{filter}");
            assert_eq!(got[0].0, want, "{filter}");
            assert_eq!(got[0].1, exact, "{filter}");
        }
        // Not bounded: a negated array or regex, `$not`, `$mod`.
        for filter in [
            doc! { "a": { "$ne": [1] } },
            doc! { "a": { "$nin": [re("^a", "")] } },
            doc! { "a": { "$not": { "$gt": 1 } } },
            doc! { "a": { "$mod": [2, 0] } },
        ] {
            let c = conjunction(&filter);
            assert!(c.leaves.is_empty(), "{filter}");
            assert_eq!(c.others, vec![filter]);
        }
        // `$eq` with a regex matches that regex only: left to FETCH.
        let eq_re = doc! { "a": { "$eq": re("^a", "") } };
        assert_eq!(conjunction(&eq_re).others, vec![eq_re.clone()]);
        // An `$or` of one value on one path is its equality.
        let one = conjunction(&doc! { "$or": [{ "a": 1 }, { "a": 1.0 }] });
        assert_eq!((one.leaves[0].op, one.leaves[0].as_filter()), (Op::Eq, doc! { "a": { "$eq": 1 } }));
        let one_re = conjunction(&doc! { "$or": [{ "a": re("^a", "") }, { "a": re("^a", "") }] });
        assert_eq!(one_re.leaves[0].op, Op::Regex);
        // Vertical tab and form feed are not skipped under `x`.
        assert_eq!(
            regex_prefix(&bson::Regex { pattern: "^a\u{b}b".into(), options: "x".into() }).unwrap().0,
            "a\u{b}b"
        );
        let ne = &conjunction(&doc! { "a": { "$ne": 5 } }).leaves[0];
        assert_eq!(ne.as_filter(), doc! { "a": { "$not": { "$eq": 5 } } });
    }

    /// A quantifier that may follow (also after a comment) makes the last
    /// character optional; an escape other than a literal one (a class,
    /// a word boundary) ends the prefix.
    #[test]
    fn regex_prefixes_never_claim_an_optional_character() {
        let prefix = |p: &str, o: &str| regex_prefix(&bson::Regex { pattern: p.into(), options: o.into() });
        assert_eq!(prefix("^abc", ""), Some(("abc".into(), true)));
        assert_eq!(prefix("^https{0,1}:", ""), Some(("http".into(), false)));
        assert_eq!(prefix("^ab(?#c)?", ""), Some(("a".into(), false)));
        assert_eq!(prefix("^ab#c\n?", "x"), Some(("a".into(), false)));
        assert_eq!(prefix("^a b c", "x"), Some(("abc".into(), true)));
        assert_eq!(prefix("^abc\\>", ""), Some(("abc".into(), false)));
        assert_eq!(prefix("^\\<abc", ""), Some(("".into(), false)));
        assert_eq!(prefix("^a\\.b", ""), Some(("a.b".into(), true)));
        assert_eq!(prefix("^ab(c)?", ""), Some(("ab".into(), false)));
        assert_eq!(prefix("^ab", "i"), None);
        assert_eq!(prefix("^ab", "u"), None);
        assert_eq!(prefix("^ab", "m"), None);
        assert_eq!(prefix("\\Aab", "m"), Some(("ab".into(), true)));
    }

    #[test]
    fn nan_ranges_and_regex_flags() {
        let nan = Bson::Decimal128("NaN".parse().unwrap());
        assert!(conjunction(&doc! { "a": { "$lte": nan.clone() } }).leaves.is_empty());
        let re = Bson::RegularExpression(bson::Regex { pattern: "abc".into(), options: "xi".into() });
        let leaf = &conjunction(&doc! { "a": re }).leaves[0];
        assert_eq!(intervals(leaf)[1].shown(false), "[/abc/ix, /abc/ix]");
    }

    /// The one-pass intersection agrees with intersecting every pair.
    #[test]
    fn intersection_is_every_overlap() {
        let list = |v: &[(i32, bool, i32, bool)]| -> Vec<Interval> {
            v.iter()
                .map(|&(l, li, h, hi)| Interval {
                    low: Bson::Int32(l),
                    low_inclusive: li,
                    high: Bson::Int32(h),
                    high_inclusive: hi,
                })
                .collect()
        };
        let a = list(&[(0, true, 3, false), (3, true, 5, true), (7, false, 9, true)]);
        let b = list(&[(1, true, 3, true), (4, false, 8, false), (9, true, 12, true)]);
        let mut every = Vec::new();
        for x in &a {
            for y in &b {
                every.extend(x.intersect(y));
            }
        }
        assert_eq!(intersect(&a, &b), union(every));
        let shown: Vec<String> = intersect(&a, &b).iter().map(|i| i.shown(false)).collect();
        assert_eq!(shown, vec!["[1, 3]", "(4, 5]", "(7, 8)", "[9, 9]"]);
        assert!(any_contains(&intersect(&a, &b), &Bson::Int32(3)));
        assert!(!any_contains(&intersect(&a, &b), &Bson::Int32(4)));
        assert!(any_contains(&intersect(&a, &b), &Bson::Double(4.5)));
        assert!(!any_contains(&intersect(&a, &b), &Bson::Int32(8)));
    }

    #[test]
    fn intervals_are_type_bracketed_and_shown_as_mongod_shows_them() {
        let leaf = |op, v| Leaf { path: "a".into(), op, value: v, group: None };
        let gt = intervals(&leaf(Op::Gt, Bson::Int32(1)));
        let lt = intervals(&leaf(Op::Lt, Bson::Int32(3)));
        assert_eq!(gt[0].shown(false), "(1, inf.0]");
        assert_eq!(lt[0].shown(false), "[-inf.0, 3)");
        assert_eq!(intersect(&gt, &lt)[0].shown(false), "(1, 3)");
        assert_eq!(Interval::all().shown(false), "[MinKey, MaxKey]");
        assert_eq!(intervals(&leaf(Op::Eq, Bson::String("a".into())))[0].shown(false), "[\"a\", \"a\"]");
        assert_eq!(intervals(&leaf(Op::Gte, Bson::Int32(28)))[0].shown(true), "[inf.0, 28]");
        let within = intervals(&leaf(Op::In, bson::bson!([3, 1, 3])));
        assert_eq!(within.iter().map(|i| i.shown(false)).collect::<Vec<_>>(), vec!["[1, 1]", "[3, 3]"]);
        assert!(intersect(&intervals(&leaf(Op::Gt, Bson::Int32(5))), &lt).is_empty());
    }

    /// English at strength 2: case folds, accents do not.
    fn s2() -> std::sync::Arc<crate::Collation> {
        crate::Collation::parse(Some(&bson::bson!({ "locale": "en", "strength": 2 }))).unwrap().unwrap()
    }

    fn on_s2(op: Op, v: Bson) -> Vec<Interval> {
        let l = Leaf { path: "a".into(), op, value: v, group: None };
        intervals_under(&l, Some(&*s2()))
    }

    #[test]
    fn a_collated_index_is_bounded_by_sort_keys() {
        let key = |s: &str| KeyCollation::key_of(&*s2(), &Bson::String(s.into()));
        assert_eq!(on_s2(Op::Eq, "ANN".into()), vec![Interval::point(key("ann"))]);
        // `$in` points in sort-key order, equal ones merged.
        let within = on_s2(Op::In, bson::bson!(["b", "A", "a", 3]));
        assert_eq!(within, vec![Interval::point(Bson::Int32(3)), Interval::point(key("a")), Interval::point(key("b"))]);
        // Below a string: from the empty string's key, the least.
        let below = on_s2(Op::Lt, "b".into());
        assert_eq!((below[0].low.clone(), below[0].high.clone()), (key(""), key("b")));
        // A complement of the mapped values: "a" before "B" under it.
        let outside = on_s2(Op::Nin, bson::bson!(["a", "B"]));
        assert_eq!(outside.len(), 3, "{outside:?}");
        assert_eq!((outside[1].low.clone(), outside[1].high.clone()), (key("a"), key("b")));
        // A regex prefix says nothing of sort keys: all strings, inexact.
        let re = Bson::RegularExpression(bson::Regex { pattern: "^ab".into(), options: String::new() });
        let shown: Vec<String> = on_s2(Op::Regex, re.clone()).iter().map(|i| i.shown(false)).collect();
        assert_eq!(shown, vec!["[\"01\", {})", "[/^ab/, /^ab/]"]);
        let l = Leaf { path: "a".into(), op: Op::Regex, value: re, group: None };
        assert!(l.exact_on(false) && !l.exact_on(true));
        // Which leaves compare strings.
        let leaf = |op: Op, v: Bson| Leaf { path: "a".into(), op, value: v, group: None };
        assert!(leaf(Op::Eq, "x".into()).collatable() && leaf(Op::Gt, bson::bson!({ "a": 1 })).collatable());
        assert!(leaf(Op::In, bson::bson!([1, "x"])).collatable() && !leaf(Op::In, bson::bson!([1, 2])).collatable());
        assert!(!leaf(Op::Gt, Bson::Int32(1)).collatable() && !leaf(Op::Type, "string".into()).collatable());
    }
}
