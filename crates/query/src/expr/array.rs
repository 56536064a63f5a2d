//! Array operators: `$size`, `$arrayElemAt` (negative indexes count from
//! the end; out of range is missing), `$in` (equality as `comparison.rs`
//! orders, so through the collation), `$isArray` and `$concatArrays`
//! (null if any argument is null or missing).

use super::comparison::order;
use super::number::{num, Num};
use super::{eval_all, nullish, parse_args, parse_exactly, Env, Node, Scope};
use crate::error::{err, FilterError};
use crate::types::type_name;
use bson::Bson;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Size,
    ArrayElemAt,
    In,
    IsArray,
    ConcatArrays,
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let (op, args) = match name {
        "$size" => (Op::Size, parse_exactly(name, 1, arg, scope)),
        "$arrayElemAt" => (Op::ArrayElemAt, parse_exactly(name, 2, arg, scope)),
        "$in" => (Op::In, parse_exactly(name, 2, arg, scope)),
        "$isArray" => (Op::IsArray, parse_exactly(name, 1, arg, scope)),
        "$concatArrays" => (Op::ConcatArrays, parse_args(arg, scope)),
        _ => return None,
    };
    Some(args.map(|args| Node::Op(super::Op::Array(op), args)))
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    Ok(Some(match op {
        Op::Size => match args[0].eval(env)? {
            Some(Bson::Array(a)) => Bson::Int32(a.len() as i32),
            other => {
                let t = other.as_ref().map_or("missing", type_name);
                return Err(err(17124, format!("The argument to $size must be an array. Type of argument: {t}")));
            }
        },
        Op::IsArray => Bson::Boolean(matches!(args[0].eval(env)?, Some(Bson::Array(_)))),
        Op::ArrayElemAt => return elem_at(&eval_all(args, env)?),
        Op::In => {
            let v = eval_all(args, env)?;
            let Some(Bson::Array(items)) = &v[1] else {
                let t = v[1].as_ref().map_or("missing", type_name);
                return Err(err(40081, format!("$in requires an array as a second argument, found: {t}")));
            };
            Bson::Boolean(items.iter().any(|i| order(&Some(i.clone()), &v[0], env.cx) == Ordering::Equal))
        }
        Op::ConcatArrays => {
            let mut out = Vec::new();
            for v in eval_all(args, env)? {
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
    }))
}

/// `$arrayElemAt` of an array and an index.
fn elem_at(v: &[Option<Bson>]) -> Result<Option<Bson>, FilterError> {
    if nullish(&v[0]) || nullish(&v[1]) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = &v[0] else {
        return Err(err(
            28689,
            format!("$arrayElemAt's first argument must be an array, but is {}", type_name(v[0].as_ref().unwrap())),
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
    Ok(Some(items[i as usize].clone()))
}
