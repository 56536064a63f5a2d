//! Boolean operators: `$and` and `$or` (short-circuiting, so later
//! arguments are not evaluated once the answer is known) and `$not`, over
//! truthiness (`types::truthy`).

use super::{parse_args, parse_exactly, Env, Node, Scope};
use crate::error::FilterError;
use crate::types::truthy;
use bson::Bson;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    And,
    Or,
    Not,
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let (op, args) = match name {
        "$and" => (Op::And, parse_args(arg, scope)),
        "$or" => (Op::Or, parse_args(arg, scope)),
        "$not" => (Op::Not, parse_exactly(name, 1, arg, scope)),
        _ => return None,
    };
    Some(args.map(|args| Node::Op(super::Op::Boolean(op), args)))
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    let answer = match op {
        Op::And => {
            for n in args {
                if !truthy(&n.eval(env)?) {
                    return Ok(Some(Bson::Boolean(false)));
                }
            }
            true
        }
        Op::Or => {
            for n in args {
                if truthy(&n.eval(env)?) {
                    return Ok(Some(Bson::Boolean(true)));
                }
            }
            false
        }
        Op::Not => !truthy(&args[0].eval(env)?),
    };
    Ok(Some(Bson::Boolean(answer)))
}
