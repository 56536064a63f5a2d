//! Variables: `$let` (its values computed in the outer scope, then its
//! `in` evaluated with them bound; it may rebind `CURRENT`, moving field
//! paths) and the rule for the names a user may define. Reading `$$name`
//! is the language's own (`mod.rs`).

use super::{parse_node, Env, Node, Scope};
use crate::error::{err, FilterError};
use bson::Bson;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Op {
    /// `$let` binding these names: the arguments are their values, in
    /// order, then the `in` expression.
    Let(Vec<String>),
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    match name {
        "$let" => Some(parse_let(arg, scope)),
        _ => None,
    }
}

fn parse_let(arg: &Bson, scope: &Scope) -> Result<Node, FilterError> {
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
    let mut names = Vec::new();
    let mut args = Vec::new();
    for (k, v) in vars {
        // CURRENT is the one system variable a $let may rebind (field
        // paths then read from it), as in mongod.
        if k != "CURRENT" {
            check_name(k)?;
            inner.bound.push(k.clone());
        }
        names.push(k.clone());
        args.push(parse_node(v, scope)?);
    }
    args.push(parse_node(body, &inner)?);
    Ok(Node::Op(super::Op::Variables(Op::Let(names)), args))
}

pub(super) fn eval(op: &Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    let Op::Let(names) = op;
    let (body, values) = args.split_last().expect("the body");
    // Every value is computed in the outer scope first.
    let mut vars = env.vars.clone();
    let mut current = None;
    for (k, n) in names.iter().zip(values) {
        let v = n.eval(env)?;
        match k.as_str() {
            "CURRENT" => current = Some(v.unwrap_or(Bson::Null)),
            _ => vars.push((k.clone(), v)),
        }
    }
    body.eval(&Env { root: env.root, current: current.as_ref().or(env.current), vars, cx: env.cx })
}

/// A user variable's name, checked as mongod checks one it defines:
/// FailedToParse (9) for an empty name, a first character that is ASCII
/// but not a lowercase letter, or any other ASCII character outside
/// `[A-Za-z0-9_]`.
pub(super) fn check_name(name: &str) -> Result<(), FilterError> {
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
