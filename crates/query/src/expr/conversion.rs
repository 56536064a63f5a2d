//! Type operators (mongod's "type expression operators", where `$convert`
//! and the `$to*` family will come too): `$type` (mongod's type name, or
//! "missing") and `$isNumber`.

use super::{parse_exactly, Env, Node, Scope};
use crate::error::FilterError;
use crate::types::type_name;
use bson::Bson;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Type,
    IsNumber,
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let op = match name {
        "$type" => Op::Type,
        "$isNumber" => Op::IsNumber,
        _ => return None,
    };
    Some(parse_exactly(name, 1, arg, scope).map(|args| Node::Op(super::Op::Conversion(op), args)))
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    let v = args[0].eval(env)?;
    Ok(Some(match op {
        Op::Type => Bson::String(match v {
            None => "missing".to_string(),
            Some(v) => type_name(&v).to_string(),
        }),
        Op::IsNumber => {
            Bson::Boolean(matches!(v, Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))))
        }
    }))
}
