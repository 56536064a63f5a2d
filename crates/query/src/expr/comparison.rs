//! Comparison operators: `$eq $ne $gt $gte $lt $lte $cmp`, in MongoDB's
//! order over any two values (missing below everything, strings through
//! the evaluation context's collation). [`order`] is also `$in`'s
//! equality.

use super::{eval_all, parse_exactly, Env, Node, Scope};
use crate::context::EvalContext;
use crate::error::FilterError;
use bson::Bson;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    /// `$eq $gt $gte $lt $lte`: the order wanted, and whether equal is
    /// also wanted.
    Cmp(Ordering, bool),
    Ne,
    /// `$cmp`: -1, 0 or 1.
    Order,
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let op = match name {
        "$eq" => Op::Cmp(Ordering::Equal, true),
        "$ne" => Op::Ne,
        "$gt" => Op::Cmp(Ordering::Greater, false),
        "$gte" => Op::Cmp(Ordering::Greater, true),
        "$lt" => Op::Cmp(Ordering::Less, false),
        "$lte" => Op::Cmp(Ordering::Less, true),
        "$cmp" => Op::Order,
        _ => return None,
    };
    Some(parse_exactly(name, 2, arg, scope).map(|args| Node::Op(super::Op::Comparison(op), args)))
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    let v = eval_all(args, env)?;
    let o = order(&v[0], &v[1], env.cx);
    Ok(Some(match op {
        Op::Cmp(want, or_equal) => {
            Bson::Boolean(o == want && want != Ordering::Equal || or_equal && o == Ordering::Equal)
        }
        Op::Ne => Bson::Boolean(o != Ordering::Equal),
        Op::Order => Bson::Int32(match o {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }),
    }))
}

/// The order of two values; missing is below every value.
pub(super) fn order(a: &Option<Bson>, b: &Option<Bson>, cx: &EvalContext) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => cx.compare(x, y),
    }
}
