//! String operators: `$concat` (null if any argument is null or
//! missing), `$toLower` and `$toUpper` (ASCII only, as mongod's; numbers
//! become their text, null and missing the empty string) and `$strLenCP`
//! (code points).

use super::{eval_all, parse_args, parse_exactly, Env, Node, Scope};
use crate::error::{err, FilterError};
use crate::types::type_name;
use bson::Bson;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Concat,
    ToLower,
    ToUpper,
    StrLenCp,
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let (op, args) = match name {
        "$concat" => (Op::Concat, parse_args(arg, scope)),
        "$toLower" => (Op::ToLower, parse_exactly(name, 1, arg, scope)),
        "$toUpper" => (Op::ToUpper, parse_exactly(name, 1, arg, scope)),
        "$strLenCP" => (Op::StrLenCp, parse_exactly(name, 1, arg, scope)),
        _ => return None,
    };
    Some(args.map(|args| Node::Op(super::Op::String(op), args)))
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    Ok(Some(match op {
        Op::Concat => {
            let mut out = String::new();
            for v in eval_all(args, env)? {
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
            let s = text_of(args[0].eval(env)?)?;
            // ASCII only, as mongod's $toLower/$toUpper.
            Bson::String(if op == Op::ToLower { s.to_ascii_lowercase() } else { s.to_ascii_uppercase() })
        }
        Op::StrLenCp => match args[0].eval(env)? {
            Some(Bson::String(s)) => Bson::Int32(s.chars().count() as i32),
            other => {
                let t = other.as_ref().map_or("missing", type_name);
                return Err(err(34471, format!("$strLenCP requires a string argument, found: {t}")));
            }
        },
    }))
}

/// `$toLower`'s and `$toUpper`'s argument as text.
fn text_of(v: Option<Bson>) -> Result<String, FilterError> {
    Ok(match v {
        None | Some(Bson::Null | Bson::Undefined) => String::new(),
        Some(Bson::String(s)) => s,
        Some(Bson::Double(d)) => d.to_string(),
        Some(Bson::Int32(i)) => i.to_string(),
        Some(Bson::Int64(i)) => i.to_string(),
        Some(other) => return Err(err(16007, format!("can't convert from BSON type {} to String", type_name(&other)))),
    })
}
