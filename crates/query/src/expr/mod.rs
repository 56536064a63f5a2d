//! Aggregation expressions, a first core: parse a value into a tree of
//! nodes, then evaluate it on a document. This file holds the language
//! itself — field paths (`"$a.b"`), variables (`$$ROOT`, `$$CURRENT`,
//! `$$NOW`, `$$REMOVE`, a command's `let`), literals (`$literal`),
//! expression objects and arrays — and the two dispatches that hand an
//! operator to its family: by name when parsing (`parse_operator`), by
//! family when evaluating (`Node::eval`). Used by `$expr` in filters, by
//! projections, pipelines and pipeline-style updates; the full
//! aggregation language comes with its own issue.
//!
//! One file per operator family, each with one `parse` and one `eval`:
//! `comparison.rs`, `boolean.rs`, `conditional.rs`, `arithmetic.rs`
//! (its numbers in `number.rs`), `string.rs`, `array.rs`, `object.rs`,
//! `conversion.rs` and `variables.rs` (`$let`). An operator no family
//! knows is refused at parse time with 168 (InvalidPipelineOperator),
//! never ignored.
//!
//! Invariants:
//! 1. A value is `Option<Bson>`: `None` is a missing field, which compares
//!    below null (so `{$eq: ["$nope", null]}` is false, as in MongoDB) and
//!    is left out of objects.
//! 2. Evaluation reads only the document, the variables in scope and the
//!    evaluation context it is handed (`context.rs`: the collation strings
//!    compare through).
//! 3. Each operator name belongs to one family, so the order families are
//!    asked in does not matter.

mod arithmetic;
mod array;
mod boolean;
mod comparison;
mod conditional;
mod conversion;
mod number;
mod object;
mod string;
mod variables;

use crate::context::EvalContext;
use crate::error::{err, FilterError};
use bson::{Bson, Document};

pub use crate::types::truthy;

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
    /// An operator and its arguments, as its family parsed them.
    Op(Op, Vec<Node>),
}

/// An operator, by family.
#[derive(Debug, Clone)]
enum Op {
    Comparison(comparison::Op),
    Boolean(boolean::Op),
    Conditional(conditional::Op),
    Arithmetic(arithmetic::Op),
    String(string::Op),
    Array(array::Op),
    Object(object::Op),
    Conversion(conversion::Op),
    Variables(variables::Op),
}

/// A family's parser: `None` when the operator is not one of its own.
type ParseFamily = fn(&str, &Bson, &Scope) -> Option<Result<Node, FilterError>>;

const FAMILIES: [ParseFamily; 9] = [
    comparison::parse,
    boolean::parse,
    conditional::parse,
    arithmetic::parse,
    string::parse,
    array::parse,
    object::parse,
    conversion::parse,
    variables::parse,
];

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
            variables::check_name(name)?;
            let value = Expression(parse_node(v, &scope)?).eval(&Document::new())?;
            scope.constants.push((name.clone(), value.unwrap_or(Bson::Null)));
        }
        Ok(scope)
    }
}

impl Expression {
    pub fn parse(v: &Bson, scope: &Scope) -> Result<Expression, FilterError> {
        parse_node(v, scope).map(Expression)
    }

    /// The value for `doc` (`None`: missing), strings compared binary.
    pub fn eval(&self, doc: &Document) -> Result<Option<Bson>, FilterError> {
        self.eval_in(doc, &EvalContext::new(None))
    }

    /// The value for `doc`, strings compared as `cx` says.
    pub(crate) fn eval_in(&self, doc: &Document, cx: &EvalContext) -> Result<Option<Bson>, FilterError> {
        self.0.eval(&Env { root: doc, current: None, vars: Vec::new(), cx })
    }

    /// Add the top-level fields of the document the expression reads to
    /// `reads`, or make it `None` when it reads the whole document
    /// (`$$ROOT`, `$$CURRENT`).
    pub fn top_fields(&self, reads: &mut Option<Vec<String>>) {
        self.0.top_fields(reads)
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

fn parse_node(v: &Bson, scope: &Scope) -> Result<Node, FilterError> {
    match v {
        Bson::String(s) if s.starts_with("$$") => parse_variable(&s[2..], scope),
        Bson::String(s) if s.starts_with('$') => Ok(Node::Path(parse_path(&s[1..])?)),
        Bson::Array(items) => Ok(Node::Array(items.iter().map(|i| parse_node(i, scope)).collect::<Result<_, _>>()?)),
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
            _ => parse_object(d, scope),
        },
        other => Ok(Node::Const(other.clone())),
    }
}

/// `$$name` or `$$name.path`: a constant of the command's `let` is its
/// value here; `ROOT`, `CURRENT` and `$let`'s are read when evaluating.
fn parse_variable(s: &str, scope: &Scope) -> Result<Node, FilterError> {
    let (name, rest) = match s.split_once('.') {
        Some((n, r)) => (n, parse_path(r)?),
        None => (s, Vec::new()),
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

/// An expression object: `{a: <expression>, ...}`.
fn parse_object(d: &Document, scope: &Scope) -> Result<Node, FilterError> {
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
        fields.push((k.clone(), parse_node(v, scope)?));
    }
    Ok(Node::Object(fields))
}

/// `{<name>: <arg>}`: the operator's family parses it.
fn parse_operator(name: &str, arg: &Bson, scope: &Scope) -> Result<Node, FilterError> {
    if name == "$literal" {
        return Ok(Node::Const(arg.clone()));
    }
    for parse_family in FAMILIES {
        if let Some(node) = parse_family(name, arg, scope) {
            return node;
        }
    }
    Err(err(168, format!("Unrecognized expression '{name}'")))
}

/// An operator's arguments: each element of an array, or the one value.
fn parse_args(arg: &Bson, scope: &Scope) -> Result<Vec<Node>, FilterError> {
    match arg {
        Bson::Array(items) => items.iter().map(|a| parse_node(a, scope)).collect(),
        other => Ok(vec![parse_node(other, scope)?]),
    }
}

/// [`parse_args`], which must be `n` arguments.
fn parse_exactly(name: &str, n: usize, arg: &Bson, scope: &Scope) -> Result<Vec<Node>, FilterError> {
    let args = parse_args(arg, scope)?;
    if args.len() != n {
        return Err(err(
            16020,
            format!("Expression {name} takes exactly {n} arguments. {} were passed in.", args.len()),
        ));
    }
    Ok(args)
}

/// What an expression is evaluated with.
struct Env<'a> {
    root: &'a Document,
    /// `$$CURRENT` when not the root.
    current: Option<&'a Bson>,
    vars: Vec<(String, Option<Bson>)>,
    cx: &'a EvalContext<'a>,
}

impl Node {
    fn top_fields(&self, reads: &mut Option<Vec<String>>) {
        let first = match self {
            Node::Const(_) | Node::Missing => return,
            Node::Path(p) => p.first(),
            Node::Var(name, p) if name == "ROOT" || name == "CURRENT" => match p.first() {
                Some(first) => Some(first),
                None => {
                    *reads = None;
                    return;
                }
            },
            // A `$let` variable: its value comes from the nodes bound to it.
            Node::Var(..) => return,
            Node::Object(fields) => return fields.iter().for_each(|(_, n)| n.top_fields(reads)),
            Node::Array(items) | Node::Op(_, items) => return items.iter().for_each(|n| n.top_fields(reads)),
        };
        if let Some(first) = first {
            crate::reads::note(reads, first);
        }
    }

    fn eval(&self, env: &Env) -> Result<Option<Bson>, FilterError> {
        Ok(match self {
            Node::Const(v) => Some(v.clone()),
            Node::Missing => None,
            Node::Path(p) => match env.current {
                Some(c) => walk(Some(c), p),
                None => walk_doc(env.root, p),
            },
            Node::Var(name, p) => read_variable(name, p, env),
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
            Node::Op(op, args) => return eval_operator(op, args, env),
        })
    }
}

fn eval_operator(op: &Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    match op {
        Op::Comparison(op) => comparison::eval(*op, args, env),
        Op::Boolean(op) => boolean::eval(*op, args, env),
        Op::Conditional(op) => conditional::eval(*op, args, env),
        Op::Arithmetic(op) => arithmetic::eval(*op, args, env),
        Op::String(op) => string::eval(*op, args, env),
        Op::Array(op) => array::eval(*op, args, env),
        Op::Object(op) => object::eval(op, args, env),
        Op::Conversion(op) => conversion::eval(*op, args, env),
        Op::Variables(op) => variables::eval(op, args, env),
    }
}

/// `$$ROOT`, `$$CURRENT` or a `$let` variable, and a path in it.
fn read_variable(name: &str, p: &[String], env: &Env) -> Option<Bson> {
    match name {
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
    }
}

/// Every argument's value, in order.
fn eval_all(args: &[Node], env: &Env) -> Result<Vec<Option<Bson>>, FilterError> {
    args.iter().map(|n| n.eval(env)).collect()
}

/// Missing, null or undefined: what most operators answer null for.
fn nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null | Bson::Undefined))
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

fn walk_doc(d: &Document, p: &[String]) -> Option<Bson> {
    let (head, rest) = p.split_first()?;
    walk(d.get(head), rest)
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
    fn every_operator_belongs_to_one_family() {
        let names = [
            "$eq",
            "$ne",
            "$gt",
            "$gte",
            "$lt",
            "$lte",
            "$cmp",
            "$and",
            "$or",
            "$not",
            "$cond",
            "$ifNull",
            "$switch",
            "$add",
            "$subtract",
            "$multiply",
            "$divide",
            "$mod",
            "$abs",
            "$ceil",
            "$floor",
            "$trunc",
            "$round",
            "$sqrt",
            "$pow",
            "$concat",
            "$toLower",
            "$toUpper",
            "$strLenCP",
            "$size",
            "$arrayElemAt",
            "$in",
            "$isArray",
            "$concatArrays",
            "$mergeObjects",
            "$getField",
            "$setField",
            "$unsetField",
            "$type",
            "$isNumber",
            "$let",
        ];
        for name in names {
            let families = FAMILIES.iter().filter(|parse| parse(name, &Bson::Null, &Scope::default()).is_some());
            assert_eq!(families.count(), 1, "{name}");
        }
        assert!(FAMILIES.iter().all(|parse| parse("$frob", &Bson::Null, &Scope::default()).is_none()));
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
