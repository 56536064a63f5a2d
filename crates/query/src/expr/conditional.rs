//! Conditional operators: `$cond` (array or `{if, then, else}` form),
//! `$ifNull` (the first argument neither null nor missing, else the last)
//! and `$switch`. Only the branch taken is evaluated.

use super::{nullish, parse_args, parse_exactly, parse_node, Env, Node, Scope};
use crate::error::{err, FilterError};
use crate::types::{truthy, type_name};
use bson::{Bson, Document};

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    /// Arguments: if, then, else.
    Cond,
    /// At least two arguments.
    IfNull,
    /// Arguments: each branch's case and then, and the default last when
    /// there is one.
    Switch { default: bool },
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let parsed = match name {
        "$cond" => parse_cond(arg, scope).map(|args| (Op::Cond, args)),
        "$ifNull" => parse_if_null(arg, scope).map(|args| (Op::IfNull, args)),
        "$switch" => parse_switch(arg, scope),
        _ => return None,
    };
    Some(parsed.map(|(op, args)| Node::Op(super::Op::Conditional(op), args)))
}

fn parse_cond(arg: &Bson, scope: &Scope) -> Result<Vec<Node>, FilterError> {
    let Bson::Document(d) = arg else {
        return parse_exactly("$cond", 3, arg, scope);
    };
    for k in d.keys() {
        if !matches!(k.as_str(), "if" | "then" | "else") {
            return Err(err(17083, format!("Unrecognized parameter to $cond: {k}")));
        }
    }
    let mut args = Vec::new();
    for (k, code) in [("if", 17080), ("then", 17081), ("else", 17082)] {
        let v = d.get(k).ok_or_else(|| err(code, format!("Missing '{k}' parameter to $cond")))?;
        args.push(parse_node(v, scope)?);
    }
    Ok(args)
}

fn parse_if_null(arg: &Bson, scope: &Scope) -> Result<Vec<Node>, FilterError> {
    let args = parse_args(arg, scope)?;
    if args.len() < 2 {
        return Err(err(1257300, "$ifNull needs at least two arguments, had: ".to_string() + &args.len().to_string()));
    }
    Ok(args)
}

fn parse_switch(arg: &Bson, scope: &Scope) -> Result<(Op, Vec<Node>), FilterError> {
    let Bson::Document(d) = arg else {
        return Err(err(40060, format!("$switch requires an object as an argument, found: {}", type_name(arg))));
    };
    let mut args = Vec::new();
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
                    args.extend(parse_branch(b, scope)?);
                }
            }
            "default" => default = Some(parse_node(v, scope)?),
            other => return Err(err(40067, format!("$switch found an unknown argument: {other}"))),
        }
    }
    if args.is_empty() {
        return Err(err(40068, "$switch requires at least one branch."));
    }
    let op = Op::Switch { default: default.is_some() };
    args.extend(default);
    Ok((op, args))
}

/// A `$switch` branch: its case and its then.
fn parse_branch(b: &Document, scope: &Scope) -> Result<[Node; 2], FilterError> {
    let Some(case) = b.get("case") else {
        return Err(err(40064, "$switch requires each branch have a 'case' expression"));
    };
    let Some(then) = b.get("then") else {
        return Err(err(40065, "$switch requires each branch have a 'then' expression."));
    };
    Ok([parse_node(case, scope)?, parse_node(then, scope)?])
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    match op {
        Op::Cond => match truthy(&args[0].eval(env)?) {
            true => args[1].eval(env),
            false => args[2].eval(env),
        },
        Op::IfNull => {
            let (last, firsts) = args.split_last().expect("at least two");
            for n in firsts {
                let v = n.eval(env)?;
                if !nullish(&v) {
                    return Ok(v);
                }
            }
            last.eval(env)
        }
        Op::Switch { default } => {
            let (branches, default) = match default {
                true => {
                    let (d, branches) = args.split_last().expect("the default");
                    (branches, Some(d))
                }
                false => (args, None),
            };
            for branch in branches.chunks(2) {
                if truthy(&branch[0].eval(env)?) {
                    return branch[1].eval(env);
                }
            }
            match default {
                Some(d) => d.eval(env),
                None => Err(err(
                    40066,
                    "$switch could not find a matching branch for an input, and no default was specified.",
                )),
            }
        }
    }
}
