//! Aggregation expressions, a first core: field paths (`"$a.b"`),
//! variables (`$$ROOT`, `$$CURRENT`, `$$NOW`, `$$REMOVE`, a command's
//! `let`, `$let`), literals, expression objects and arrays, and the
//! operators below. Used by `$expr` in filters and by pipeline-style
//! updates; the full aggregation language comes with its own issue.
//!
//! Operators: comparison (`$eq $ne $gt $gte $lt $lte $cmp`), boolean
//! (`$and $or $not`), conditional (`$cond $ifNull $switch`), arithmetic
//! (`$add $subtract $multiply $divide $mod $abs $ceil $floor $trunc $sqrt
//! $pow`), strings (`$concat $toLower $toUpper $strLenCP`), arrays
//! (`$size $arrayElemAt $in $isArray $concatArrays`), `$type`,
//! `$literal`, `$let`, `$mergeObjects`, `$getField`, `$setField`,
//! `$unsetField`. Anything else is refused at parse
//! time with 168 (InvalidPipelineOperator), never ignored.
//!
//! A value is `Option<Bson>`: `None` is a missing field, which compares
//! below null (so `{$eq: ["$nope", null]}` is false, as in MongoDB) and
//! is left out of objects.

use crate::matcher::FilterError;
use crate::update::type_name;
use bson::{Bson, Document};
use doc::decimal_math::{Dec, DoubleDigits, Integral};
use std::cmp::Ordering;

fn err(code: i32, message: impl Into<String>) -> FilterError {
    FilterError { code, message: message.into() }
}

/// A parsed expression.
#[derive(Debug, Clone)]
pub struct Expression(Node);

#[derive(Debug, Clone)]
enum Node {
    Const(Bson),
    /// A path from `$$CURRENT` (`"$a.b"`).
    Path(Vec<String>),
    /// `$$name` (a `$let` variable, `ROOT` or `CURRENT`) and a path in it.
    Var(String, Vec<String>),
    /// `$$REMOVE`: missing.
    Missing,
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    Op(Op, Vec<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Switch(Vec<(Node, Node)>, Option<Box<Node>>),
    Let(Vec<(String, Node)>, Box<Node>),
    /// `$getField`: a field of any name (dots and `$` included).
    GetField(String, Box<Node>),
    /// `$setField` (or `$unsetField`, value `Missing`).
    SetField(String, Box<Node>, Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Cmp(Ordering, bool),
    CmpOrder,
    Ne,
    And,
    Or,
    Not,
    IfNull,
    Add,
    Subtract,
    Multiply,
    Divide,
    Mod,
    Abs,
    Ceil,
    Floor,
    Trunc,
    Round,
    Sqrt,
    Pow,
    Concat,
    ToLower,
    ToUpper,
    StrLenCp,
    Size,
    ArrayElemAt,
    In,
    IsArray,
    IsNumber,
    ConcatArrays,
    Type,
    MergeObjects,
}

/// Names in scope while parsing: the command's `let` constants and the
/// variables of enclosing `$let`s.
#[derive(Default, Clone)]
pub struct Scope {
    constants: Vec<(String, Bson)>,
    bound: Vec<String>,
}

impl Scope {
    /// A command's `let`: each value an expression over no document.
    pub fn with_let(vars: Option<&Document>) -> Result<Scope, FilterError> {
        match vars {
            Some(vars) => Scope::default().with_constants(vars),
            None => Ok(Scope::default()),
        }
    }

    /// This scope and `vars` (an update statement's `c`), each value an
    /// expression over no document.
    pub fn with_constants(&self, vars: &Document) -> Result<Scope, FilterError> {
        let mut scope = self.clone();
        for (name, v) in vars {
            check_var_name(name)?;
            let e = parse(v, &scope)?;
            let value = e.eval(&Env { root: &Document::new(), current: None, vars: Vec::new() })?;
            scope.constants.push((name.clone(), value.unwrap_or(Bson::Null)));
        }
        Ok(scope)
    }
}

/// A user variable's name, checked as mongod checks one it defines:
/// FailedToParse (9) for an empty name, a first character that is ASCII
/// but not a lowercase letter, or any other ASCII character outside
/// `[A-Za-z0-9_]`.
fn check_var_name(name: &str) -> Result<(), FilterError> {
    let Some(first) = name.chars().next() else {
        return Err(err(9, "empty variable names are not allowed"));
    };
    if first.is_ascii() && !first.is_ascii_lowercase() {
        return Err(err(9, format!("'{name}' starts with an invalid character for a user variable name")));
    }
    match name.chars().skip(1).find(|c| c.is_ascii() && !c.is_ascii_alphanumeric() && *c != '_') {
        Some(c) => Err(err(9, format!("'{name}' contains an invalid character for a variable name: '{c}'"))),
        None => Ok(()),
    }
}

impl Expression {
    pub fn parse(v: &Bson, scope: &Scope) -> Result<Expression, FilterError> {
        parse(v, scope).map(Expression)
    }

    /// The value for `doc` (`None`: missing).
    pub fn eval(&self, doc: &Document) -> Result<Option<Bson>, FilterError> {
        self.0.eval(&Env { root: doc, current: None, vars: Vec::new() })
    }

    /// A top-level field name's expression in `$set`/`$addFields`: an
    /// object there merges into the field, so callers see objects.
    pub fn as_object(&self) -> Option<Vec<(&str, Expression)>> {
        match &self.0 {
            Node::Object(fields) => Some(fields.iter().map(|(k, n)| (k.as_str(), Expression(n.clone()))).collect()),
            _ => None,
        }
    }
}

/// Truthiness: false, null, missing, undefined and zero are false.
pub fn truthy(v: &Option<Bson>) -> bool {
    match v {
        None | Some(Bson::Null | Bson::Undefined | Bson::Boolean(false)) => false,
        Some(Bson::Int32(0) | Bson::Int64(0)) => false,
        Some(Bson::Double(d)) => *d != 0.0,
        Some(v @ Bson::Decimal128(_)) => !matches!(
            Dec::from_bson(v, DoubleDigits::ThirtyFour),
            Some(Dec::Finite { ref digits, .. }) if digits.iter().all(|d| *d == 0)
        ),
        Some(_) => true,
    }
}

/// The most parts a field path may have, as mongod's `FieldPath`.
pub const FIELD_PATH_PARTS_MAX: usize = 200;

pub(crate) fn parse_path(s: &str) -> Result<Vec<String>, FilterError> {
    if s.split('.').count() > FIELD_PATH_PARTS_MAX {
        return Err(err(15, "FieldPath is too long"));
    }
    if s.is_empty() {
        return Err(err(16872, "'$' by itself is not a valid FieldPath"));
    }
    let parts: Vec<String> = s.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(err(15998, "FieldPath field names may not be empty strings."));
    }
    if s.contains('\0') {
        return Err(err(16411, "FieldPath field names may not contain '\\0'."));
    }
    // A DBRef's fields are the `$` names a path may name (mongod's
    // FieldPath::kAllowedDollarPrefixedFields, less its internal ones).
    if parts.iter().any(|p| p.starts_with('$') && !matches!(p.as_str(), "$id" | "$ref" | "$db")) {
        return Err(err(
            16410,
            format!("FieldPath field names may not start with '$'. Consider using $getField or $setField. (in '{s}')"),
        ));
    }
    Ok(parts)
}

fn parse(v: &Bson, scope: &Scope) -> Result<Node, FilterError> {
    match v {
        Bson::String(s) if s.starts_with("$$") => {
            let (name, rest) = match s[2..].split_once('.') {
                Some((n, r)) => (n, parse_path(r)?),
                None => (&s[2..], Vec::new()),
            };
            if let Some((_, value)) = scope.constants.iter().rev().find(|(n, _)| n == name) {
                if !scope.bound.iter().any(|b| b == name) {
                    return Ok(match walk(Some(value), &rest) {
                        Some(v) => Node::Const(v),
                        None => Node::Missing,
                    });
                }
            }
            match name {
                "ROOT" | "CURRENT" => Ok(Node::Var(name.to_string(), rest)),
                "REMOVE" => Ok(Node::Missing),
                "NOW" => Ok(Node::Const(Bson::DateTime(bson::DateTime::now()))),
                _ if scope.bound.iter().any(|b| b == name) => Ok(Node::Var(name.to_string(), rest)),
                _ => Err(err(17276, format!("Use of undefined variable: {name}"))),
            }
        }
        Bson::String(s) if s.starts_with('$') => Ok(Node::Path(parse_path(&s[1..])?)),
        Bson::Array(items) => Ok(Node::Array(items.iter().map(|i| parse(i, scope)).collect::<Result<_, _>>()?)),
        Bson::Document(d) => match d.keys().next() {
            Some(k) if k.starts_with('$') => {
                if d.len() != 1 {
                    return Err(err(
                        15983,
                        format!(
                            "an expression specification must contain exactly one field, the name of the expression. Found {} fields in {d}",
                            d.len()
                        ),
                    ));
                }
                parse_operator(k, d.get(k).expect("the key"), scope)
            }
            _ => {
                let mut fields = Vec::new();
                for (k, v) in d {
                    if k.starts_with('$') {
                        return Err(err(
                            16410,
                            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
                        ));
                    }
                    if k.contains('.') {
                        return Err(err(16412, format!("FieldPath field names may not contain '.'. Found: '{k}'")));
                    }
                    fields.push((k.clone(), parse(v, scope)?));
                }
                Ok(Node::Object(fields))
            }
        },
        other => Ok(Node::Const(other.clone())),
    }
}

fn args(arg: &Bson) -> Vec<Bson> {
    match arg {
        Bson::Array(items) => items.clone(),
        other => vec![other.clone()],
    }
}

fn parse_operator(name: &str, arg: &Bson, scope: &Scope) -> Result<Node, FilterError> {
    let list =
        |scope: &Scope| -> Result<Vec<Node>, FilterError> { args(arg).iter().map(|a| parse(a, scope)).collect() };
    let exactly = |n: usize, nodes: Vec<Node>| -> Result<Vec<Node>, FilterError> {
        if nodes.len() != n {
            return Err(err(
                16020,
                format!("Expression {name} takes exactly {n} arguments. {} were passed in.", nodes.len()),
            ));
        }
        Ok(nodes)
    };
    let op = match name {
        "$literal" => return Ok(Node::Const(arg.clone())),
        "$eq" => Op::Cmp(Ordering::Equal, true),
        "$ne" => Op::Ne,
        "$gt" => Op::Cmp(Ordering::Greater, false),
        "$gte" => Op::Cmp(Ordering::Greater, true),
        "$lt" => Op::Cmp(Ordering::Less, false),
        "$lte" => Op::Cmp(Ordering::Less, true),
        "$cmp" => Op::CmpOrder,
        "$and" => Op::And,
        "$or" => Op::Or,
        "$not" => Op::Not,
        "$ifNull" => Op::IfNull,
        "$add" => Op::Add,
        "$subtract" => Op::Subtract,
        "$multiply" => Op::Multiply,
        "$divide" => Op::Divide,
        "$mod" => Op::Mod,
        "$abs" => Op::Abs,
        "$ceil" => Op::Ceil,
        "$floor" => Op::Floor,
        "$trunc" => Op::Trunc,
        "$round" => Op::Round,
        "$sqrt" => Op::Sqrt,
        "$pow" => Op::Pow,
        "$concat" => Op::Concat,
        "$toLower" => Op::ToLower,
        "$toUpper" => Op::ToUpper,
        "$strLenCP" => Op::StrLenCp,
        "$size" => Op::Size,
        "$arrayElemAt" => Op::ArrayElemAt,
        "$in" => Op::In,
        "$isArray" => Op::IsArray,
        "$isNumber" => Op::IsNumber,
        "$concatArrays" => Op::ConcatArrays,
        "$type" => Op::Type,
        "$mergeObjects" => Op::MergeObjects,
        "$cond" => {
            let (c, t, e) = match arg {
                Bson::Document(d) => {
                    for k in d.keys() {
                        if !matches!(k.as_str(), "if" | "then" | "else") {
                            return Err(err(17083, format!("Unrecognized parameter to $cond: {k}")));
                        }
                    }
                    let get = |k: &str, code: i32| {
                        d.get(k).ok_or_else(|| err(code, format!("Missing '{k}' parameter to $cond")))
                    };
                    (
                        parse(get("if", 17080)?, scope)?,
                        parse(get("then", 17081)?, scope)?,
                        parse(get("else", 17082)?, scope)?,
                    )
                }
                _ => {
                    let mut n = exactly(3, list(scope)?)?;
                    let e = n.pop().unwrap();
                    let t = n.pop().unwrap();
                    (n.pop().unwrap(), t, e)
                }
            };
            return Ok(Node::Cond(Box::new(c), Box::new(t), Box::new(e)));
        }
        "$switch" => {
            let Bson::Document(d) = arg else {
                return Err(err(
                    40060,
                    format!("$switch requires an object as an argument, found: {}", type_name(arg)),
                ));
            };
            let mut branches = Vec::new();
            let mut default = None;
            for (k, v) in d {
                match k.as_str() {
                    "branches" => {
                        let Bson::Array(items) = v else {
                            return Err(err(
                                40061,
                                format!("$switch expected an array for 'branches', found: {}", type_name(v)),
                            ));
                        };
                        for b in items {
                            let Bson::Document(b) = b else {
                                return Err(err(
                                    40062,
                                    format!("$switch expected each branch to be an object, found: {}", type_name(b)),
                                ));
                            };
                            let Some(case) = b.get("case") else {
                                return Err(err(40064, "$switch requires each branch have a 'case' expression"));
                            };
                            let Some(then) = b.get("then") else {
                                return Err(err(40065, "$switch requires each branch have a 'then' expression."));
                            };
                            branches.push((parse(case, scope)?, parse(then, scope)?));
                        }
                    }
                    "default" => default = Some(Box::new(parse(v, scope)?)),
                    other => return Err(err(40067, format!("$switch found an unknown argument: {other}"))),
                }
            }
            if branches.is_empty() {
                return Err(err(40068, "$switch requires at least one branch."));
            }
            return Ok(Node::Switch(branches, default));
        }
        "$getField" | "$setField" | "$unsetField" => {
            let (field, input, value) = match arg {
                Bson::Document(d) if name != "$getField" || d.contains_key("field") => {
                    for k in d.keys() {
                        let known = match name {
                            "$setField" => matches!(k.as_str(), "field" | "input" | "value"),
                            _ => matches!(k.as_str(), "field" | "input"),
                        };
                        if !known {
                            return Err(err(4161102, format!("{name} found an unknown argument: {k}")));
                        }
                    }
                    let field = d
                        .get("field")
                        .ok_or_else(|| err(4161103, format!("{name} requires 'field' to be specified")))?;
                    (field, d.get("input"), d.get("value"))
                }
                other => (other, None, None),
            };
            let field = match parse(field, scope)? {
                // A name BSON cannot store; refused as a field path's would be.
                Node::Const(Bson::String(f)) if f.contains('\0') => {
                    return Err(err(16411, "FieldPath field names may not contain '\\0'."))
                }
                Node::Const(Bson::String(f)) => f,
                _ => {
                    return Err(err(
                        4161106,
                        format!("{name} requires 'field' to evaluate to a constant, but got a non-constant argument"),
                    ))
                }
            };
            let input = match input {
                Some(i) => parse(i, scope)?,
                None if name == "$getField" => Node::Var("CURRENT".into(), Vec::new()),
                None => return Err(err(4161109, format!("{name} requires 'input' to be specified"))),
            };
            return Ok(match name {
                "$getField" => Node::GetField(field, Box::new(input)),
                "$unsetField" => Node::SetField(field, Box::new(input), Box::new(Node::Missing)),
                _ => {
                    let Some(value) = value else {
                        return Err(err(4161110, "$setField requires 'value' to be specified"));
                    };
                    Node::SetField(field, Box::new(input), Box::new(parse(value, scope)?))
                }
            });
        }
        "$let" => {
            let Bson::Document(d) = arg else {
                return Err(err(16874, "$let only supports an object as its argument"));
            };
            let Some(Bson::Document(vars)) = d.get("vars") else {
                return Err(err(16876, "Missing 'vars' parameter to $let"));
            };
            let Some(body) = d.get("in") else {
                return Err(err(16877, "Missing 'in' parameter to $let"));
            };
            let mut inner = scope.clone();
            let mut bound = Vec::new();
            for (k, v) in vars {
                // CURRENT is the one system variable a $let may rebind
                // (field paths then read from it), as in mongod.
                if k != "CURRENT" {
                    check_var_name(k)?;
                    inner.bound.push(k.clone());
                }
                bound.push((k.clone(), parse(v, scope)?));
            }
            return Ok(Node::Let(bound, Box::new(parse(body, &inner)?)));
        }
        other => return Err(err(168, format!("Unrecognized expression '{other}'"))),
    };
    let nodes = list(scope)?;
    let nodes = match op {
        Op::Cmp(..)
        | Op::CmpOrder
        | Op::Ne
        | Op::Subtract
        | Op::Divide
        | Op::Mod
        | Op::Pow
        | Op::ArrayElemAt
        | Op::In => exactly(2, nodes)?,
        Op::Not
        | Op::Abs
        | Op::Ceil
        | Op::Floor
        | Op::Sqrt
        | Op::ToLower
        | Op::ToUpper
        | Op::StrLenCp
        | Op::Size
        | Op::IsArray
        | Op::IsNumber
        | Op::Type => exactly(1, nodes)?,
        Op::Trunc | Op::Round if nodes.is_empty() || nodes.len() > 2 => {
            return Err(err(
                28667,
                format!(
                    "Expression {name} takes at least 1 arguments, and at most 2, but {} were passed in.",
                    nodes.len()
                ),
            ))
        }
        Op::IfNull if nodes.len() < 2 => {
            return Err(err(
                1257300,
                "$ifNull needs at least two arguments, had: ".to_string() + &nodes.len().to_string(),
            ))
        }
        _ => nodes,
    };
    Ok(Node::Op(op, nodes))
}

struct Env<'a> {
    root: &'a Document,
    /// `$$CURRENT` when not the root.
    current: Option<&'a Bson>,
    vars: Vec<(String, Option<Bson>)>,
}

/// A path through documents; through arrays, the array of each element's
/// value (missing ones left out), as MongoDB's field paths read.
fn walk(v: Option<&Bson>, path: &[String]) -> Option<Bson> {
    let Some((head, rest)) = path.split_first() else { return v.cloned() };
    match v? {
        Bson::Document(d) => walk(d.get(head), rest),
        // Into the documents of an array; nested arrays are skipped, as
        // mongod's field paths skip them.
        Bson::Array(items) => Some(Bson::Array(
            items
                .iter()
                .filter_map(|i| match i {
                    Bson::Document(_) => walk(Some(i), path),
                    _ => None,
                })
                .collect(),
        )),
        _ => None,
    }
}

/// A number for arithmetic.
#[derive(Clone, Copy)]
enum Num {
    Int(i32),
    Long(i64),
    Double(f64),
}

fn num(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(Num::Int(*i)),
        Bson::Int64(i) => Some(Num::Long(*i)),
        Bson::Double(d) => Some(Num::Double(*d)),
        _ => None,
    }
}

/// A number of any numeric type, decimals included.
fn is_number(v: &Bson) -> bool {
    num(v).is_some() || matches!(v, Bson::Decimal128(_))
}

fn f64_of(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Long(i) => i as f64,
        Num::Double(d) => d,
    }
}

fn bson_of(n: Num) -> Bson {
    match n {
        Num::Int(i) => Bson::Int32(i),
        Num::Long(i) => Bson::Int64(i),
        Num::Double(d) => Bson::Double(d),
    }
}

/// `a op b` with MongoDB's widening: int, then long on overflow, then
/// double.
fn arith(a: Num, b: Num, int: fn(i64, i64) -> Option<i64>, float: fn(f64, f64) -> f64) -> Num {
    match (a, b) {
        (Num::Double(_), _) | (_, Num::Double(_)) => Num::Double(float(f64_of(a), f64_of(b))),
        (Num::Int(x), Num::Int(y)) => match int(x.into(), y.into()) {
            Some(r) if i32::try_from(r).is_ok() => Num::Int(r as i32),
            Some(r) => Num::Long(r),
            None => Num::Double(float(x as f64, y as f64)),
        },
        _ => {
            let (x, y) = (long(a), long(b));
            match int(x, y) {
                Some(r) => Num::Long(r),
                None => Num::Double(float(x as f64, y as f64)),
            }
        }
    }
}

fn long(n: Num) -> i64 {
    match n {
        Num::Int(i) => i.into(),
        Num::Long(i) => i,
        Num::Double(d) => d as i64,
    }
}

/// A number as a decimal operand: a double keeps 15 digits, as mongod's
/// expressions convert it.
fn to_dec(v: &Bson) -> Dec {
    Dec::from_bson(v, DoubleDigits::Fifteen).unwrap_or(Dec::NaN)
}

/// `$round` and `$trunc`: `v` to `place` decimal places (0 when not
/// given; -20 to 100), as mongod computes them. A double goes through a
/// 34-digit decimal and back; an integer is kept (places ≥ 0) or rounded
/// to a multiple of a power of ten, an int growing into a long; 51080
/// when that overflows a long.
fn round_or_trunc(
    name: &str,
    mode: Integral,
    v: Option<Bson>,
    place: Option<Option<Bson>>,
) -> Result<Option<Bson>, FilterError> {
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let v = v.expect("not missing");
    if !is_number(&v) {
        return Err(err(51081, format!("{name} only supports numeric types, not {}", type_name(&v))));
    }
    let places = match place {
        None => 0,
        Some(p) if nullish(&p) => return Ok(Some(Bson::Null)),
        Some(p) => {
            let p = p.expect("not missing");
            let (n, integral) = match &p {
                Bson::Int32(i) => (i64::from(*i), true),
                Bson::Int64(i) => (*i, true),
                Bson::Double(d) if d.is_finite() && d.abs() < 9.2e18 => (*d as i64, d.fract() == 0.0),
                Bson::Decimal128(_) => {
                    let d = to_dec(&p);
                    let whole = d.to_integral(Integral::Trunc).to_f64();
                    if !whole.is_finite() || whole.abs() >= 9.2e18 {
                        return Err(err(31109, format!("Can't coerce out of range value {p} to long")));
                    }
                    // Whole when nothing is left dividing by 1, exactly.
                    let one = Dec::Finite { negative: false, digits: vec![1], exp: 0 };
                    let fraction = d.rem(&one);
                    (whole as i64, matches!(fraction, Some(Dec::Finite { ref digits, .. }) if digits.is_empty()))
                }
                Bson::Double(d) => return Err(err(31109, format!("Can't coerce out of range value {d} to long"))),
                other => return Err(err(16004, format!("can't convert from BSON type {} to long", type_name(other)))),
            };
            if !integral {
                return Err(err(51082, format!("precision argument to  {name} must be a integral value")));
            }
            if !(-20..=100).contains(&n) {
                return Err(err(
                    51083,
                    format!("cannot apply {name} with precision value {n} value must be in [-20, 100]"),
                ));
            }
            n
        }
    };
    let exp = -(places as i32);
    Ok(Some(match &v {
        Bson::Decimal128(_) => to_dec(&v).quantize(exp, mode).to_bson(),
        Bson::Double(d) if !d.is_finite() => v,
        Bson::Double(_) => {
            let x = Dec::from_bson(&v, DoubleDigits::ThirtyFour).expect("a double");
            Bson::Double(x.quantize(exp, mode).to_f64())
        }
        _ if places >= 0 => v,
        _ => {
            let n = long(num(&v).expect("a number"));
            let rounded = Dec::from_bson(&Bson::Int64(n), DoubleDigits::Fifteen).expect("a long").quantize(exp, mode);
            let out = match &rounded {
                Dec::Finite { negative, digits, exp } => {
                    let magnitude =
                        digits.iter().fold(0i128, |acc, &d| acc * 10 + i128::from(d)) * 10i128.pow(*exp as u32);
                    i64::try_from(if *negative { -magnitude } else { magnitude }).ok()
                }
                _ => None,
            };
            let Some(out) = out else {
                return Err(err(
                    51080,
                    format!(
                        "invalid conversion from Decimal128 result in {name} resulting from arguments: [{n}, {places}]"
                    ),
                ));
            };
            match (&v, i32::try_from(out)) {
                (Bson::Int32(_), Ok(i)) => Bson::Int32(i),
                _ => Bson::Int64(out),
            }
        }
    }))
}

/// Missing, null or undefined: what most operators answer null for.
fn nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null | Bson::Undefined))
}

fn decimal_unsupported(name: &str) -> FilterError {
    err(238, format!("{name} with Decimal128 operands is not supported yet"))
}

impl Node {
    fn eval(&self, env: &Env) -> Result<Option<Bson>, FilterError> {
        Ok(match self {
            Node::Const(v) => Some(v.clone()),
            Node::Missing => None,
            Node::Path(p) => match env.current {
                Some(c) => walk(Some(c), p),
                None => walk_doc(env.root, p),
            },
            Node::Var(name, p) => match name.as_str() {
                "ROOT" => match p.is_empty() {
                    true => Some(Bson::Document(env.root.clone())),
                    false => walk_doc(env.root, p),
                },
                "CURRENT" => match env.current {
                    Some(c) => walk(Some(c), p),
                    None if p.is_empty() => Some(Bson::Document(env.root.clone())),
                    None => walk_doc(env.root, p),
                },
                _ => {
                    let v = env.vars.iter().rev().find(|(n, _)| n == name).and_then(|(_, v)| v.as_ref());
                    walk(v, p)
                }
            },
            Node::Object(fields) => {
                let mut out = Document::new();
                for (k, n) in fields {
                    if let Some(v) = n.eval(env)? {
                        out.insert(k.clone(), v);
                    }
                }
                Some(Bson::Document(out))
            }
            Node::Array(items) => {
                let mut out = Vec::new();
                for n in items {
                    out.push(n.eval(env)?.unwrap_or(Bson::Null));
                }
                Some(Bson::Array(out))
            }
            Node::Cond(c, t, e) => match truthy(&c.eval(env)?) {
                true => t.eval(env)?,
                false => e.eval(env)?,
            },
            Node::Switch(branches, default) => {
                for (case, then) in branches {
                    if truthy(&case.eval(env)?) {
                        return then.eval(env);
                    }
                }
                match default {
                    Some(d) => d.eval(env)?,
                    None => {
                        return Err(err(
                            40066,
                            "$switch could not find a matching branch for an input, and no default was specified.",
                        ))
                    }
                }
            }
            Node::Let(bound, body) => {
                // Every value is computed in the outer scope first.
                let mut values = Vec::new();
                let mut current = None;
                for (k, n) in bound {
                    let v = n.eval(env)?;
                    match k.as_str() {
                        "CURRENT" => current = Some(v.unwrap_or(Bson::Null)),
                        _ => values.push((k.clone(), v)),
                    }
                }
                let mut vars = env.vars.clone();
                vars.extend(values);
                body.eval(&Env { root: env.root, current: current.as_ref().or(env.current), vars })?
            }
            Node::GetField(field, input) => match input.eval(env)? {
                Some(Bson::Document(d)) => d.get(field).cloned(),
                None | Some(Bson::Null | Bson::Undefined) => None,
                Some(other) => {
                    return Err(err(
                        3041705,
                        format!("$getField requires 'input' to evaluate to type Object, but got {}", type_name(&other)),
                    ))
                }
            },
            Node::SetField(field, input, value) => match input.eval(env)? {
                Some(Bson::Document(mut d)) => {
                    match value.eval(env)? {
                        Some(v) => {
                            d.insert(field.clone(), v);
                        }
                        None => {
                            d.remove(field);
                        }
                    }
                    Some(Bson::Document(d))
                }
                None | Some(Bson::Null | Bson::Undefined) => Some(Bson::Null),
                Some(other) => {
                    return Err(err(
                        4161105,
                        format!("$setField requires 'input' to evaluate to type Object, but got {}", type_name(&other)),
                    ))
                }
            },
            Node::Op(op, nodes) => eval_op(*op, nodes, env)?,
        })
    }
}

fn walk_doc(d: &Document, p: &[String]) -> Option<Bson> {
    let (head, rest) = p.split_first()?;
    walk(d.get(head), rest)
}

fn eval_op(op: Op, nodes: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    let vals = |env: &Env| -> Result<Vec<Option<Bson>>, FilterError> { nodes.iter().map(|n| n.eval(env)).collect() };
    let order = |a: &Option<Bson>, b: &Option<Bson>| match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => crate::collation::collated(x, y),
    };
    Ok(Some(match op {
        Op::Cmp(want, or_equal) => {
            let v = vals(env)?;
            let o = order(&v[0], &v[1]);
            Bson::Boolean(o == want && want != Ordering::Equal || or_equal && o == Ordering::Equal)
        }
        Op::Ne => {
            let v = vals(env)?;
            Bson::Boolean(order(&v[0], &v[1]) != Ordering::Equal)
        }
        Op::CmpOrder => {
            let v = vals(env)?;
            Bson::Int32(match order(&v[0], &v[1]) {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            })
        }
        Op::And => {
            for n in nodes {
                if !truthy(&n.eval(env)?) {
                    return Ok(Some(Bson::Boolean(false)));
                }
            }
            Bson::Boolean(true)
        }
        Op::Or => {
            for n in nodes {
                if truthy(&n.eval(env)?) {
                    return Ok(Some(Bson::Boolean(true)));
                }
            }
            Bson::Boolean(false)
        }
        Op::Not => Bson::Boolean(!truthy(&nodes[0].eval(env)?)),
        Op::IfNull => {
            let (last, firsts) = nodes.split_last().expect("at least two");
            for n in firsts {
                let v = n.eval(env)?;
                if !nullish(&v) {
                    return Ok(v);
                }
            }
            return last.eval(env);
        }
        Op::Add | Op::Multiply => {
            let name = if op == Op::Add { "$add" } else { "$multiply" };
            let mut acc = Num::Int(if op == Op::Add { 0 } else { 1 });
            let mut date: Option<i64> = None;
            // Once a decimal comes, the total is a decimal.
            let mut decimal: Option<Dec> = None;
            for v in vals(env)? {
                let v = match v {
                    None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(v) => v,
                };
                match (&v, op) {
                    (Bson::DateTime(d), Op::Add) => {
                        if date.is_some() {
                            return Err(err(16612, "only one date allowed in an $add expression"));
                        }
                        date = Some(d.timestamp_millis());
                    }
                    _ => {
                        if !is_number(&v) {
                            let what = if op == Op::Add { "numeric or date types" } else { "numeric types" };
                            let code = if op == Op::Add { 16554 } else { 16555 };
                            return Err(err(code, format!("{name} only supports {what}, not {}", type_name(&v))));
                        }
                        if decimal.is_some() || matches!(v, Bson::Decimal128(_)) {
                            let total = decimal.take().unwrap_or_else(|| to_dec(&bson_of(acc)));
                            let operand = to_dec(&v);
                            decimal = Some(if op == Op::Add { total.add(&operand) } else { total.mul(&operand) });
                            continue;
                        }
                        let n = num(&v).expect("a number, not a decimal");
                        acc = match op {
                            Op::Add => arith(acc, n, i64::checked_add, |a, b| a + b),
                            _ => arith(acc, n, i64::checked_mul, |a, b| a * b),
                        };
                    }
                }
            }
            match (date, decimal) {
                (Some(_), Some(_)) => return Err(decimal_unsupported("$add of a date")),
                (None, Some(total)) => total.to_bson(),
                (Some(ms), None) => {
                    let add = match acc {
                        Num::Double(d) => d.round() as i64,
                        other => long(other),
                    };
                    Bson::DateTime(bson::DateTime::from_millis(ms.wrapping_add(add)))
                }
                (None, None) => bson_of(acc),
            }
        }
        Op::Subtract | Op::Divide | Op::Mod | Op::Pow => {
            let v = vals(env)?;
            let (a, b) = match (&v[0], &v[1]) {
                (x, y) if nullish(x) || nullish(y) => return Ok(Some(Bson::Null)),
                (Some(a), Some(b)) => (a.clone(), b.clone()),
                _ => unreachable!("nullish covers missing"),
            };
            let name = match op {
                Op::Subtract => "$subtract",
                Op::Divide => "$divide",
                Op::Mod => "$mod",
                _ => "$pow",
            };
            if matches!(a, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
                if op == Op::Subtract && is_number(&a) && is_number(&b) {
                    return Ok(Some(to_dec(&a).add(&to_dec(&b).neg()).to_bson()));
                }
                if op == Op::Mod && is_number(&a) && is_number(&b) {
                    return match to_dec(&a).rem(&to_dec(&b)) {
                        Some(r) => Ok(Some(r.to_bson())),
                        None => Err(err(16610, "can't $mod by zero")),
                    };
                }
                if op == Op::Divide && is_number(&a) && is_number(&b) {
                    return match to_dec(&a).div(&to_dec(&b)) {
                        Some(q) => Ok(Some(q.to_bson())),
                        None => Err(err(2, "can't $divide by zero")),
                    };
                }
                // A date with a decimal, and the other operators' decimals.
                if is_number(&a) && is_number(&b) || matches!(a, Bson::DateTime(_)) || matches!(b, Bson::DateTime(_)) {
                    return Err(decimal_unsupported(name));
                }
            }
            if op == Op::Subtract {
                match (&a, &b) {
                    (Bson::DateTime(x), Bson::DateTime(y)) => {
                        return Ok(Some(Bson::Int64(x.timestamp_millis().wrapping_sub(y.timestamp_millis()))))
                    }
                    (Bson::DateTime(x), _) if num(&b).is_some() => {
                        let ms = match num(&b).unwrap() {
                            Num::Double(d) => d.round() as i64,
                            other => long(other),
                        };
                        return Ok(Some(Bson::DateTime(bson::DateTime::from_millis(
                            x.timestamp_millis().wrapping_sub(ms),
                        ))));
                    }
                    _ => {}
                }
            }
            let (Some(x), Some(y)) = (num(&a), num(&b)) else {
                let code = match op {
                    Op::Subtract => 16556,
                    Op::Divide => 16609,
                    Op::Mod => 16611,
                    _ => 28762,
                };
                return Err(err(
                    code,
                    format!("{name} only supports numeric types, not {} and {}", type_name(&a), type_name(&b)),
                ));
            };
            match op {
                Op::Subtract => bson_of(arith(x, y, i64::checked_sub, |a, b| a - b)),
                Op::Divide => {
                    if f64_of(y) == 0.0 {
                        return Err(err(2, "can't $divide by zero"));
                    }
                    Bson::Double(f64_of(x) / f64_of(y))
                }
                Op::Mod => {
                    if f64_of(y) == 0.0 {
                        return Err(err(16610, "can't $mod by zero"));
                    }
                    bson_of(arith(x, y, i64::checked_rem, |a, b| a % b))
                }
                _ => match (x, y) {
                    (Num::Double(_), _) | (_, Num::Double(_)) => Bson::Double(f64_of(x).powf(f64_of(y))),
                    _ => {
                        let (base, exp) = (long(x), long(y));
                        if exp < 0 {
                            if base == 0 {
                                return Err(err(28764, "$pow cannot take a base of 0 and a negative exponent"));
                            }
                            Bson::Double((base as f64).powf(exp as f64))
                        } else {
                            // An int result only from two ints; a long in,
                            // a long out (if it fits).
                            let ints = matches!((x, y), (Num::Int(_), Num::Int(_)));
                            match u32::try_from(exp).ok().and_then(|e| base.checked_pow(e)) {
                                Some(r) if ints && i32::try_from(r).is_ok() => Bson::Int32(r as i32),
                                Some(r) => Bson::Int64(r),
                                None => Bson::Double((base as f64).powf(exp as f64)),
                            }
                        }
                    }
                },
            }
        }
        Op::Trunc | Op::Round => {
            let v = nodes[0].eval(env)?;
            let place = nodes.get(1).map(|p| p.eval(env)).transpose()?;
            match op {
                Op::Trunc => return round_or_trunc("$trunc", Integral::Trunc, v, place),
                _ => return round_or_trunc("$round", Integral::HalfEven, v, place),
            }
        }
        Op::Abs | Op::Ceil | Op::Floor | Op::Sqrt => {
            let v = nodes[0].eval(env)?;
            let name = match op {
                Op::Abs => "$abs",
                Op::Ceil => "$ceil",
                Op::Floor => "$floor",
                Op::Trunc => "$trunc",
                _ => "$sqrt",
            };
            if nullish(&v) {
                return Ok(Some(Bson::Null));
            }
            let v = v.expect("not missing");
            if matches!(v, Bson::Decimal128(_)) {
                let x = to_dec(&v);
                let out = match op {
                    Op::Abs => x.abs(),
                    Op::Ceil => x.to_integral(Integral::Ceil),
                    Op::Floor => x.to_integral(Integral::Floor),
                    _ => match x.sqrt() {
                        Some(root) => root,
                        None => return Err(err(28714, "$sqrt's argument must be greater than or equal to 0")),
                    },
                };
                return Ok(Some(out.to_bson()));
            }
            let Some(n) = num(&v) else {
                return Err(err(28765, format!("{name} only supports numeric types, not {}", type_name(&v))));
            };
            match (op, n) {
                (Op::Abs, Num::Int(i)) => match i.checked_abs() {
                    Some(a) => Bson::Int32(a),
                    None => Bson::Int64(-(i as i64)),
                },
                (Op::Abs, Num::Long(i)) => match i.checked_abs() {
                    Some(a) => Bson::Int64(a),
                    None => return Err(err(28680, "can't take $abs of long long min")),
                },
                (Op::Abs, Num::Double(d)) => Bson::Double(d.abs()),
                (Op::Sqrt, n) => {
                    let f = f64_of(n);
                    if f < 0.0 {
                        return Err(err(28714, "$sqrt's argument must be greater than or equal to 0"));
                    }
                    Bson::Double(f.sqrt())
                }
                (_, Num::Double(d)) => Bson::Double(match op {
                    Op::Ceil => d.ceil(),
                    _ => d.floor(),
                }),
                (_, n) => bson_of(n),
            }
        }
        Op::Concat => {
            let mut out = String::new();
            for v in vals(env)? {
                match v {
                    None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::String(s)) => out.push_str(&s),
                    Some(other) => {
                        return Err(err(16702, format!("$concat only supports strings, not {}", type_name(&other))))
                    }
                }
            }
            Bson::String(out)
        }
        Op::ToLower | Op::ToUpper => {
            let s = match nodes[0].eval(env)? {
                None | Some(Bson::Null | Bson::Undefined) => String::new(),
                Some(Bson::String(s)) => s,
                Some(v @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => match v {
                    Bson::Double(d) => d.to_string(),
                    Bson::Int32(i) => i.to_string(),
                    Bson::Int64(i) => i.to_string(),
                    _ => unreachable!(),
                },
                Some(other) => {
                    return Err(err(16007, format!("can't convert from BSON type {} to String", type_name(&other))))
                }
            };
            // ASCII only, as mongod's $toLower/$toUpper.
            Bson::String(if op == Op::ToLower { s.to_ascii_lowercase() } else { s.to_ascii_uppercase() })
        }
        Op::StrLenCp => match nodes[0].eval(env)? {
            Some(Bson::String(s)) => Bson::Int32(s.chars().count() as i32),
            other => {
                let t = other.as_ref().map_or("missing", type_name);
                return Err(err(34471, format!("$strLenCP requires a string argument, found: {t}")));
            }
        },
        Op::Size => match nodes[0].eval(env)? {
            Some(Bson::Array(a)) => Bson::Int32(a.len() as i32),
            other => {
                let t = other.as_ref().map_or("missing", type_name);
                return Err(err(17124, format!("The argument to $size must be an array. Type of argument: {t}")));
            }
        },
        Op::IsArray => Bson::Boolean(matches!(nodes[0].eval(env)?, Some(Bson::Array(_)))),
        Op::IsNumber => Bson::Boolean(matches!(
            nodes[0].eval(env)?,
            Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
        )),
        Op::ArrayElemAt => {
            let v = vals(env)?;
            if nullish(&v[0]) || nullish(&v[1]) {
                return Ok(Some(Bson::Null));
            }
            let Some(Bson::Array(items)) = &v[0] else {
                return Err(err(
                    28689,
                    format!(
                        "$arrayElemAt's first argument must be an array, but is {}",
                        type_name(v[0].as_ref().unwrap())
                    ),
                ));
            };
            let idx = match v[1].as_ref().and_then(num) {
                Some(Num::Int(i)) => i as i64,
                Some(Num::Long(i)) => i,
                Some(Num::Double(d)) if d.fract() == 0.0 => d as i64,
                Some(Num::Double(d)) => {
                    return Err(err(
                        28691,
                        format!("$arrayElemAt's second argument must be representable as a 32-bit integer: {d}"),
                    ))
                }
                _ => {
                    return Err(err(
                        28690,
                        format!(
                            "$arrayElemAt's second argument must be a numeric value, but is {}",
                            type_name(v[1].as_ref().unwrap())
                        ),
                    ))
                }
            };
            let i = if idx < 0 { items.len() as i64 + idx } else { idx };
            if i < 0 || i >= items.len() as i64 {
                return Ok(None);
            }
            items[i as usize].clone()
        }
        Op::In => {
            let v = vals(env)?;
            let Some(Bson::Array(items)) = &v[1] else {
                let t = v[1].as_ref().map_or("missing", type_name);
                return Err(err(40081, format!("$in requires an array as a second argument, found: {t}")));
            };
            Bson::Boolean(items.iter().any(|i| order(&Some(i.clone()), &v[0]) == Ordering::Equal))
        }
        Op::ConcatArrays => {
            let mut out = Vec::new();
            for v in vals(env)? {
                match v {
                    None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(a)) => out.extend(a),
                    Some(other) => {
                        return Err(err(
                            28664,
                            format!("$concatArrays only supports arrays, not {}", type_name(&other)),
                        ))
                    }
                }
            }
            Bson::Array(out)
        }
        Op::Type => Bson::String(match nodes[0].eval(env)? {
            None => "missing".to_string(),
            Some(v) => type_name(&v).to_string(),
        }),
        Op::MergeObjects => {
            let mut out = Document::new();
            for v in vals(env)? {
                match v {
                    None | Some(Bson::Null | Bson::Undefined) => {}
                    Some(Bson::Document(d)) => out.extend(d),
                    Some(other) => {
                        return Err(err(
                            40400,
                            format!(
                                "$mergeObjects requires object inputs, but input {other} is of type {}",
                                type_name(&other)
                            ),
                        ))
                    }
                }
            }
            Bson::Document(out)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn eval(e: Bson, d: Document) -> Result<Option<Bson>, FilterError> {
        Expression::parse(&e, &Scope::default())?.eval(&d)
    }

    #[test]
    fn add_multiply_subtract_and_abs_take_decimals() {
        let dec = |s: &str| Bson::Decimal128(s.parse().unwrap());
        let d = doc! { "p": dec("1.10"), "q": 2 };
        let run = |e: Bson| eval(e, d.clone()).unwrap().unwrap();
        // A double joins as 15 digits, as mongod converts it.
        assert_eq!(run(bson::bson!({ "$add": ["$p", 2.2] })), dec("3.30000000000000"));
        assert_eq!(run(bson::bson!({ "$add": [1, "$p", "$q"] })), dec("4.10"));
        assert_eq!(run(bson::bson!({ "$multiply": ["$p", "$q"] })), dec("2.20"));
        assert_eq!(run(bson::bson!({ "$subtract": [5, "$p"] })), dec("3.90"));
        assert_eq!(run(bson::bson!({ "$abs": { "$subtract": ["$p", 3] } })), dec("1.90"));
        assert_eq!(run(bson::bson!({ "$add": ["$p", null] })), Bson::Null);
        assert_eq!(eval(bson::bson!({ "$add": ["$p", "x"] }), d.clone()).unwrap_err().code, 16554);
        assert_eq!(run(bson::bson!({ "$divide": ["$p", 4] })), dec("0.275"));
        assert_eq!(run(bson::bson!({ "$floor": { "$multiply": ["$p", -1] } })), dec("-2"));
        assert_eq!(run(bson::bson!({ "$ceil": "$p" })), dec("2"));
        assert_eq!(run(bson::bson!({ "$trunc": "$p" })), dec("1"));
        assert_eq!(eval(bson::bson!({ "$divide": [1, { "$multiply": ["$p", 0] }] }), d.clone()).unwrap_err().code, 2);
        assert_eq!(run(bson::bson!({ "$mod": ["$p", 2] })), dec("1.10"));
        assert_eq!(run(bson::bson!({ "$round": ["$p", 1] })), dec("1.1"));
        assert_eq!(run(bson::bson!({ "$sqrt": { "$multiply": ["$p", "$p"] } })), dec("1.10"));
        assert_eq!(eval(bson::bson!({ "$pow": ["$p", 2] }), d).unwrap_err().code, 238);
    }

    #[test]
    fn paths_variables_and_missing() {
        let d = doc! { "a": { "b": 2 }, "arr": [{ "x": 1 }, { "y": 2 }, { "x": 3 }] };
        assert_eq!(eval(Bson::String("$a.b".into()), d.clone()).unwrap(), Some(Bson::Int32(2)));
        assert_eq!(eval(Bson::String("$arr.x".into()), d.clone()).unwrap(), Some(bson::bson!([1, 3])));
        assert_eq!(eval(Bson::String("$nope".into()), d.clone()).unwrap(), None);
        assert_eq!(eval(bson::bson!({ "$eq": ["$nope", null] }), d.clone()).unwrap(), Some(Bson::Boolean(false)));
        assert_eq!(eval(bson::bson!({ "$lt": ["$nope", null] }), d.clone()).unwrap(), Some(Bson::Boolean(true)));
        assert_eq!(eval(Bson::String("$$ROOT.a".into()), d.clone()).unwrap(), Some(Bson::Document(doc! { "b": 2 })));
        let e = bson::bson!({ "$let": { "vars": { "v": "$a.b" }, "in": { "$multiply": ["$$v", 10] } } });
        assert_eq!(eval(e, d.clone()).unwrap(), Some(Bson::Int32(20)));
        // Rebinding CURRENT moves field paths; ROOT stays.
        let e = bson::bson!({ "$let": { "vars": { "CURRENT": "$a", "v": "$a.b" },
                                         "in": ["$b", "$$CURRENT.b", "$$ROOT.a.b", "$$v"] } });
        assert_eq!(eval(e, d.clone()).unwrap(), Some(bson::bson!([2, 2, 2, 2])));
        let e = bson::bson!({ "$let": { "vars": { "ROOT": 1 }, "in": 1 } });
        assert_eq!(eval(e, d.clone()).unwrap_err().code, 9);
        assert_eq!(eval(Bson::String("$$undefined".into()), d).unwrap_err().code, 17276);
    }

    #[test]
    fn arithmetic_widens_as_mongod_does() {
        let d = doc! {};
        let zero: bson::Decimal128 = "0E-10".parse().unwrap();
        let tiny: bson::Decimal128 = "1E-6000".parse().unwrap();
        assert!(!truthy(&Some(Bson::Decimal128(zero))) && truthy(&Some(Bson::Decimal128(tiny))));
        assert_eq!(eval(bson::bson!({ "$add": [1, 2] }), d.clone()).unwrap(), Some(Bson::Int32(3)));
        assert_eq!(eval(bson::bson!({ "$add": [i32::MAX, 1] }), d.clone()).unwrap(), Some(Bson::Int64(1 << 31)));
        assert_eq!(
            eval(bson::bson!({ "$add": [i64::MAX, 1i64] }), d.clone()).unwrap(),
            Some(Bson::Double(9.223372036854776e18))
        );
        assert_eq!(eval(bson::bson!({ "$add": [1, 0.5] }), d.clone()).unwrap(), Some(Bson::Double(1.5)));
        assert_eq!(eval(bson::bson!({ "$add": [1, null] }), d.clone()).unwrap(), Some(Bson::Null));
        assert_eq!(eval(bson::bson!({ "$divide": [1, 2] }), d.clone()).unwrap(), Some(Bson::Double(0.5)));
        assert_eq!(eval(bson::bson!({ "$mod": [7, 3] }), d.clone()).unwrap(), Some(Bson::Int32(1)));
        assert_eq!(eval(bson::bson!({ "$pow": [2, 10] }), d.clone()).unwrap(), Some(Bson::Int32(1024)));
        assert_eq!(eval(bson::bson!({ "$pow": [2, 3i64] }), d.clone()).unwrap(), Some(Bson::Int64(8)));
        assert_eq!(eval(bson::bson!({ "$arrayElemAt": [[1, 2], 0.5] }), d.clone()).unwrap_err().code, 28691);
        assert_eq!(eval(bson::bson!({ "$add": [1, "x"] }), d.clone()).unwrap_err().code, 16554);
        assert_eq!(eval(bson::bson!({ "$divide": [1, 0] }), d.clone()).unwrap_err().code, 2);
        assert_eq!(eval(bson::bson!({ "$eq": [1] }), d).unwrap_err().code, 16020);
    }

    #[test]
    fn conditionals_strings_arrays() {
        let d = doc! { "s": "Ab", "n": 0, "arr": [1, 2, 3] };
        assert_eq!(
            eval(bson::bson!({ "$cond": [{ "$gt": ["$n", 0] }, "pos", "non-pos"] }), d.clone()).unwrap(),
            Some(Bson::String("non-pos".into()))
        );
        assert_eq!(
            eval(bson::bson!({ "$ifNull": ["$x", null, "dflt"] }), d.clone()).unwrap(),
            Some(Bson::String("dflt".into()))
        );
        assert_eq!(
            eval(bson::bson!({ "$concat": ["$s", "-", { "$toUpper": "$s" }] }), d.clone()).unwrap(),
            Some(Bson::String("Ab-AB".into()))
        );
        assert_eq!(eval(bson::bson!({ "$size": "$arr" }), d.clone()).unwrap(), Some(Bson::Int32(3)));
        assert_eq!(eval(bson::bson!({ "$arrayElemAt": ["$arr", -1] }), d.clone()).unwrap(), Some(Bson::Int32(3)));
        assert_eq!(eval(bson::bson!({ "$in": [2, "$arr"] }), d.clone()).unwrap(), Some(Bson::Boolean(true)));
        let sw = bson::bson!({ "$switch": { "branches": [{ "case": { "$eq": ["$n", 1] }, "then": "one" }], "default": "other" } });
        assert_eq!(eval(sw, d.clone()).unwrap(), Some(Bson::String("other".into())));
        assert_eq!(
            eval(bson::bson!({ "a": "$n", "b": "$missing" }), d.clone()).unwrap(),
            Some(Bson::Document(doc! { "a": 0 }))
        );
        assert_eq!(eval(bson::bson!({ "$frob": 1 }), d).unwrap_err().code, 168);
    }
}
