//! Index bounds as MongoDB builds them: the filter's top-level `$and`
//! flattened into leaf predicates in canonical order, each indexable leaf
//! turned into an ordered list of intervals (type-bracketed: `$gt: 1`
//! covers numbers only), intervals on one field intersected only where
//! the field is not multikey, and the leaves the bounds do not answer
//! exactly left for the FETCH stage's filter.
//!
//! Invariant: every document the filter matches has an index key inside
//! the bounds (bounds only narrow what is read; the executor still
//! applies the whole filter).

use bson::{Bson, Document};
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
}

/// The comparison operators bounds are built from, in MongoDB's
/// canonical order of match types (EQ, LTE, LT, GT, GTE, then `$in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Eq,
    Lte,
    Lt,
    Gt,
    Gte,
    In,
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
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Op::Eq => "$eq",
            Op::Lte => "$lte",
            Op::Lt => "$lt",
            Op::Gt => "$gt",
            Op::Gte => "$gte",
            Op::In => "$in",
        }
    }
}

impl Leaf {
    /// The leaf as a filter document, as explain shows a FETCH filter.
    pub fn as_filter(&self) -> Document {
        let mut cond = Document::new();
        cond.insert(self.op.name(), self.value.clone());
        let mut d = Document::new();
        d.insert(self.path.clone(), cond);
        d
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
}

/// Split `filter` into its conjunction.
pub fn conjunction(filter: &Document) -> Conjunction {
    let mut out = Conjunction::default();
    flatten(filter, &mut out);
    out.leaves.sort_by(|a, b| a.op.cmp(&b.op).then_with(|| a.path.cmp(&b.path)));
    out
}

fn flatten(filter: &Document, out: &mut Conjunction) {
    for (key, value) in filter {
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
                for (op, v) in cond {
                    match Op::of(op).filter(|_| indexable(v, op == "$in")) {
                        Some(op) => out.leaves.push(Leaf { path: key.clone(), op, value: v.clone() }),
                        None => {
                            let mut c = Document::new();
                            c.insert(op.clone(), v.clone());
                            let mut d = Document::new();
                            d.insert(key.clone(), c);
                            out.others.push(d);
                        }
                    }
                }
            }
            v if indexable(v, false) => out.leaves.push(Leaf { path: key.clone(), op: Op::Eq, value: v.clone() }),
            _ => other(),
        }
    }
}

/// Values whose bounds this planner builds: scalars (not arrays,
/// documents, regexes, null, undefined or MinKey/MaxKey, whose matching
/// needs more than one interval or none); `$in` takes an array of them.
fn indexable(v: &Bson, is_in: bool) -> bool {
    match v {
        Bson::Array(items) if is_in => !items.is_empty() && items.iter().all(|i| indexable(i, false)),
        Bson::Array(_)
        | Bson::Document(_)
        | Bson::RegularExpression(_)
        | Bson::Null
        | Bson::Undefined
        | Bson::MinKey
        | Bson::MaxKey
        | Bson::JavaScriptCodeWithScope(_) => false,
        Bson::Double(d) => !d.is_nan(),
        _ => !is_in,
    }
}

/// The intervals of one leaf.
pub fn intervals(leaf: &Leaf) -> Vec<Interval> {
    let v = &leaf.value;
    let (min, max) = type_bracket(v);
    match leaf.op {
        Op::Eq => vec![Interval::point(v.clone())],
        Op::In => {
            let Bson::Array(items) = v else { return vec![Interval::all()] };
            let mut points: Vec<Bson> = items.clone();
            points.sort_by(compare);
            points.dedup_by(|a, b| compare(a, b).is_eq());
            points.into_iter().map(Interval::point).collect()
        }
        Op::Gt => vec![Interval { low: v.clone(), low_inclusive: false, high: max.0, high_inclusive: max.1 }],
        Op::Gte => vec![Interval { low: v.clone(), low_inclusive: true, high: max.0, high_inclusive: max.1 }],
        Op::Lt => vec![Interval { low: min.0, low_inclusive: min.1, high: v.clone(), high_inclusive: false }],
        Op::Lte => vec![Interval { low: min.0, low_inclusive: min.1, high: v.clone(), high_inclusive: true }],
    }
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

/// Intersect two ordered interval lists.
pub fn intersect(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            if let Some(i) = x.intersect(y) {
                out.push(i);
            }
        }
    }
    out.sort_by(|p, q| compare(&p.low, &q.low));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn leaves_come_in_canonical_order() {
        let c = conjunction(&doc! { "b": 1, "a": { "$gt": 1, "$lt": 3 }, "$or": [{ "x": 1 }] });
        let ops: Vec<(String, Op)> = c.leaves.iter().map(|l| (l.path.clone(), l.op)).collect();
        assert_eq!(ops, vec![("b".into(), Op::Eq), ("a".into(), Op::Lt), ("a".into(), Op::Gt)]);
        assert_eq!(c.others, vec![doc! { "$or": [{ "x": 1 }] }]);
    }

    #[test]
    fn intervals_are_type_bracketed_and_shown_as_mongod_shows_them() {
        let leaf = |op, v| Leaf { path: "a".into(), op, value: v };
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
}
