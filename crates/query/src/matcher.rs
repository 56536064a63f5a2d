//! The filter language: parse a filter document into an expression tree,
//! then match documents with MongoDB's semantics, including its array
//! rules for dotted paths.
//!
//! So far: implicit equality, `$eq $ne $gt $gte $lt $lte $in $nin $exists
//! $type $size $all $mod $and $or $nor $not $comment`. Other operators are refused as unknown
//! (with MongoDB's code and message) until they are built.
//!
//! Array rules: a path step into an array looks into each element (and a
//! numeric step may also index the array); a comparison matches if any
//! value the path reaches matches, where an array reached at the end of the
//! path offers both itself and its elements. Comparisons only compare
//! values of the same canonical type ("type bracketing"); `null` equality
//! also matches a missing field.

use bson::{Bson, Document};
use doc::compare::{canonical_type, compare};
use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct FilterError {
    /// MongoDB's error code (2 BadValue for most parse errors).
    pub code: i32,
    pub message: String,
}

fn bad_value(message: impl Into<String>) -> FilterError {
    FilterError { code: 2, message: message.into() }
}

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
    True,
}

/// A parsed filter, ready to match documents.
#[derive(Debug, Clone)]
pub struct Filter {
    root: Expr,
}

impl Filter {
    pub fn parse(filter: &Document) -> Result<Filter, FilterError> {
        Ok(Filter { root: parse_document(filter)? })
    }

    pub fn matches(&self, doc: &Document) -> bool {
        eval(&self.root, doc)
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

fn parse_document(filter: &Document) -> Result<Expr, FilterError> {
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
                        Bson::Document(d) => subs.push(parse_document(d)?),
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
            k if k.starts_with('$') => return Err(bad_value(format!("unknown top level operator: {k}"))),
            path => parse_condition(path, value)?,
        });
    }
    Ok(if all.len() == 1 { all.pop().unwrap() } else { Expr::And(all) })
}

fn is_operator_document(v: &Bson) -> Option<&Document> {
    match v {
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => Some(d),
        _ => None,
    }
}

fn parse_condition(path: &str, value: &Bson) -> Result<Expr, FilterError> {
    let Some(ops) = is_operator_document(value) else {
        return Ok(Expr::Compare(path.to_string(), Cmp::Eq, value.clone()));
    };
    let mut all = Vec::new();
    for (op, arg) in ops {
        all.push(parse_operator(path, op, arg)?);
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
            let e = Expr::In(p, items.clone());
            if op == "$in" {
                e
            } else {
                Expr::Not(Box::new(e))
            }
        }
        "$exists" => Expr::Exists(p, truthy(arg)),
        "$type" => {
            let items = match arg {
                Bson::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            Expr::Type(p, items.iter().map(type_code).collect::<Result<_, _>>()?)
        }
        "$size" => match doc::compare::number(arg) {
            Some(doc::compare::Number::Int(n)) if n >= 0 => Expr::Size(p, n as usize),
            Some(doc::compare::Number::Float(f)) if f >= 0.0 && f.fract() == 0.0 => Expr::Size(p, f as usize),
            Some(doc::compare::Number::Int(_) | doc::compare::Number::Float(_)) => {
                return Err(bad_value("$size may not be negative or fractional"))
            }
            None => return Err(bad_value("$size needs a number")),
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
            let int = |v: &Bson, what: &str| match doc::compare::number(v) {
                Some(doc::compare::Number::Int(i)) => Ok(i),
                Some(doc::compare::Number::Float(f)) if f.is_finite() => Ok(f.trunc() as i64),
                _ => Err(bad_value(format!("malformed mod, {what} not a number"))),
            };
            let divisor = int(&items[0], "divisor")?;
            if divisor == 0 {
                return Err(bad_value("divisor cannot be 0"));
            }
            Expr::Mod(p, divisor, int(&items[1], "remainder")?)
        }
        "$not" => match arg {
            Bson::Document(d) if is_operator_document(arg).is_some() => {
                Expr::Not(Box::new(parse_condition(path, &Bson::Document(d.clone()))?))
            }
            Bson::Document(_) => return Err(bad_value("$not cannot be empty")),
            _ => return Err(bad_value("$not needs a regex or a document")),
        },
        other => return Err(bad_value(format!("unknown operator: {other}"))),
    })
}

/// A `$type` argument as a BSON type number; "number" is -2 here.
fn type_code(v: &Bson) -> Result<i32, FilterError> {
    const NAMES: &[(&str, i32)] = &[
        ("double", 1),
        ("string", 2),
        ("object", 3),
        ("array", 4),
        ("binData", 5),
        ("undefined", 6),
        ("objectId", 7),
        ("bool", 8),
        ("date", 9),
        ("null", 10),
        ("regex", 11),
        ("dbPointer", 12),
        ("javascript", 13),
        ("symbol", 14),
        ("javascriptWithScope", 15),
        ("int", 16),
        ("timestamp", 17),
        ("long", 18),
        ("decimal", 19),
        ("minKey", -1),
        ("maxKey", 127),
        ("number", -2),
    ];
    match v {
        Bson::String(s) => NAMES
            .iter()
            .find(|(n, _)| n == s)
            .map(|(_, c)| *c)
            .ok_or_else(|| bad_value(format!("Unknown type name alias: {s}"))),
        other => match doc::compare::number(other) {
            Some(doc::compare::Number::Int(i)) if NAMES.iter().any(|(_, c)| i64::from(*c) == i && *c != -2) => {
                Ok(i as i32)
            }
            Some(doc::compare::Number::Float(f)) if NAMES.iter().any(|(_, c)| f64::from(*c) == f && *c != -2) => {
                Ok(f as i32)
            }
            Some(_) => Err(bad_value(format!("Invalid numerical type code: {other}"))),
            None => Err(bad_value("type must be represented as a number or a string")),
        },
    }
}

fn has_type(v: &Bson, codes: &[i32]) -> bool {
    let code = match v {
        Bson::Double(_) => 1,
        Bson::String(_) => 2,
        Bson::Document(_) => 3,
        Bson::Array(_) => 4,
        Bson::Binary(_) => 5,
        Bson::Undefined => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Null => 10,
        Bson::RegularExpression(_) => 11,
        Bson::DbPointer(_) => 12,
        Bson::JavaScriptCode(_) => 13,
        Bson::Symbol(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::Int32(_) => 16,
        Bson::Timestamp(_) => 17,
        Bson::Int64(_) => 18,
        Bson::Decimal128(_) => 19,
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
    };
    codes.iter().any(|c| *c == code || (*c == -2 && matches!(code, 1 | 16 | 18 | 19)))
}

/// MongoDB's truthiness for `$exists` arguments.
fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        _ => true,
    }
}

fn eval(e: &Expr, doc: &Document) -> bool {
    match e {
        Expr::True => true,
        Expr::And(subs) => subs.iter().all(|s| eval(s, doc)),
        Expr::Or(subs) => subs.iter().any(|s| eval(s, doc)),
        Expr::Nor(subs) => !subs.iter().any(|s| eval(s, doc)),
        Expr::Not(sub) => !eval(sub, doc),
        Expr::Compare(path, cmp, target) => {
            let mut found = false;
            let mut missing = false;
            walk(doc, path, &mut |v| match v {
                Some(v) => found |= compares(v, *cmp, target),
                None => missing = true,
            });
            found || (missing && matches!(target, Bson::Null) && matches!(cmp, Cmp::Eq | Cmp::Gte | Cmp::Lte))
        }
        Expr::In(path, items) => items.iter().any(|t| eval(&Expr::Compare(path.clone(), Cmp::Eq, t.clone()), doc)),
        Expr::Type(path, codes) => {
            let mut found = false;
            walk(doc, path, &mut |v| {
                if let Some(v) = v {
                    found |= has_type(v, codes)
                        || matches!(v, Bson::Array(items) if items.iter().any(|i| has_type(i, codes)));
                }
            });
            found
        }
        Expr::Size(path, n) => {
            let mut found = false;
            walk(doc, path, &mut |v| found |= matches!(v, Some(Bson::Array(items)) if items.len() == *n));
            found
        }
        Expr::Mod(path, divisor, remainder) => {
            let mut found = false;
            let check = |v: &Bson| match doc::compare::number(v) {
                Some(doc::compare::Number::Int(i)) => i.wrapping_rem(*divisor) == *remainder,
                Some(doc::compare::Number::Float(f)) if f.is_finite() => {
                    (f.trunc() as i64).wrapping_rem(*divisor) == *remainder
                }
                _ => false,
            };
            walk(doc, path, &mut |v| match v {
                Some(Bson::Array(items)) => found |= items.iter().any(check),
                Some(v) => found |= check(v),
                None => {}
            });
            found
        }
        Expr::Exists(path, want) => {
            let mut exists = false;
            walk(doc, path, &mut |v| exists |= v.is_some());
            exists == *want
        }
    }
}

/// Does `v` (a value the path reached) satisfy `cmp target`? An array also
/// offers each of its elements.
fn compares(v: &Bson, cmp: Cmp, target: &Bson) -> bool {
    if compare_one(v, cmp, target) {
        return true;
    }
    match v {
        Bson::Array(items) => items.iter().any(|item| compare_one(item, cmp, target)),
        _ => false,
    }
}

fn compare_one(v: &Bson, cmp: Cmp, target: &Bson) -> bool {
    // Type bracketing: only same-type values compare, MinKey and MaxKey
    // bracket everything.
    let bracketed = canonical_type(v) == canonical_type(target) || matches!(target, Bson::MinKey | Bson::MaxKey);
    if !bracketed {
        return false;
    }
    let o = compare(v, target);
    match cmp {
        Cmp::Eq => o == Ordering::Equal,
        Cmp::Gt => o == Ordering::Greater,
        Cmp::Gte => o != Ordering::Less,
        Cmp::Lt => o == Ordering::Less,
        Cmp::Lte => o != Ordering::Greater,
    }
}

/// Call `f` with every value `path` reaches in `doc` (`None` where a step
/// finds nothing), following MongoDB's array rules.
fn walk(doc: &Document, path: &str, f: &mut dyn FnMut(Option<&Bson>)) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    walk_value(doc.get(head), rest, f);
}

fn walk_value(v: Option<&Bson>, rest: Option<&str>, f: &mut dyn FnMut(Option<&Bson>)) {
    let Some(rest) = rest else {
        f(v);
        return;
    };
    match v {
        Some(Bson::Document(d)) => walk(d, rest, f),
        Some(Bson::Array(items)) => {
            let (head, tail) = match rest.split_once('.') {
                Some((h, t)) => (h, Some(t)),
                None => (rest, None),
            };
            // A numeric step may index the array...
            if let Ok(i) = head.parse::<usize>() {
                if let Some(item) = items.get(i) {
                    walk_value(Some(item), tail, f);
                }
            }
            // ...and the path also applies to each embedded document.
            let mut any = false;
            for item in items {
                if let Bson::Document(d) = item {
                    any = true;
                    walk(d, rest, f);
                }
            }
            if !any && head.parse::<usize>().is_err() {
                f(None);
            }
        }
        _ => f(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

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
    fn id_equality_is_recognised() {
        assert_eq!(Filter::id_equality(&doc! { "_id": 5 }), Some(&Bson::Int32(5)));
        assert_eq!(Filter::id_equality(&doc! { "_id": { "$gt": 5 } }), None);
        assert_eq!(Filter::id_equality(&doc! { "_id": 5, "a": 1 }), None);
    }
}
