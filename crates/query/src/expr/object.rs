//! Object operators: `$mergeObjects` (null and missing skipped),
//! `$getField`, `$setField` and `$unsetField` (a field of any name, dots
//! and `$` included, named by a constant string).

use super::{eval_all, parse_args, parse_node, Env, Node, Scope};
use crate::error::{err, FilterError};
use crate::types::type_name;
use bson::{Bson, Document};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Op {
    MergeObjects,
    /// `$getField` of this field; the argument is the input.
    GetField(String),
    /// `$setField` of this field; the arguments are the input and the
    /// value (`$$REMOVE`, missing, for `$unsetField`).
    SetField(String),
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let parsed = match name {
        "$mergeObjects" => parse_args(arg, scope).map(|args| (Op::MergeObjects, args)),
        "$getField" | "$setField" | "$unsetField" => parse_field_op(name, arg, scope),
        _ => return None,
    };
    Some(parsed.map(|(op, args)| Node::Op(super::Op::Object(op), args)))
}

/// `$getField`, `$setField` or `$unsetField`: `{field, input[, value]}`,
/// or (`$getField`) the field alone, of the current document.
fn parse_field_op(name: &str, arg: &Bson, scope: &Scope) -> Result<(Op, Vec<Node>), FilterError> {
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
            let field =
                d.get("field").ok_or_else(|| err(4161103, format!("{name} requires 'field' to be specified")))?;
            (field, d.get("input"), d.get("value"))
        }
        other => (other, None, None),
    };
    let field = match parse_node(field, scope)? {
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
        Some(i) => parse_node(i, scope)?,
        None if name == "$getField" => Node::Var("CURRENT".into(), Vec::new()),
        None => return Err(err(4161109, format!("{name} requires 'input' to be specified"))),
    };
    Ok(match name {
        "$getField" => (Op::GetField(field), vec![input]),
        "$unsetField" => (Op::SetField(field), vec![input, Node::Missing]),
        _ => {
            let Some(value) = value else {
                return Err(err(4161110, "$setField requires 'value' to be specified"));
            };
            (Op::SetField(field), vec![input, parse_node(value, scope)?])
        }
    })
}

pub(super) fn eval(op: &Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    Ok(match op {
        Op::MergeObjects => {
            let mut out = Document::new();
            for v in eval_all(args, env)? {
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
            Some(Bson::Document(out))
        }
        Op::GetField(field) => match args[0].eval(env)? {
            Some(Bson::Document(d)) => d.get(field).cloned(),
            None | Some(Bson::Null | Bson::Undefined) => None,
            Some(other) => {
                return Err(err(
                    3041705,
                    format!("$getField requires 'input' to evaluate to type Object, but got {}", type_name(&other)),
                ))
            }
        },
        Op::SetField(field) => match args[0].eval(env)? {
            Some(Bson::Document(mut d)) => {
                match args[1].eval(env)? {
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
    })
}
