//! `delete`.

use crate::args::ack_of;
use crate::args::bool_option;
use crate::args::check_fields;
use crate::args::count_option;
use crate::args::namespace;
use crate::args::scope_of;
use crate::args::statements;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::modify::delete_one_spec;
use crate::exec::views::check_not_view;
use crate::exec::write::acknowledge;
use crate::exec::write::write_reply;
use crate::exec::write::Outcome;
use crate::net::wire::OpMsg;
use crate::session::{Retry, StmtLog};
use std::sync::atomic::Ordering;

pub fn delete(shared: &Ctx<'_>, call: &Call, msg: &OpMsg) -> CommandResult {
    let cmd = &*msg.body;
    let ns = namespace(cmd, "delete")?;
    let specs = statements(msg, "delete", "deletes")?;
    // The shape of every statement is checked before any runs, as
    // MongoDB's command parser does; query errors are per statement.
    check_fields(cmd, "delete", &["deletes", "ordered"], false)?;
    for spec in &specs {
        check_fields(spec, "delete.deletes", &["q", "limit", "collation", "hint"], true)?;
        query::Collation::parse(spec.get("collation"))?;
        if !spec.contains_key("q") {
            return Err(CommandError::failed_to_parse("BSON field 'delete.deletes.q' is missing but a required field"));
        }
        let limit = count_option(spec, "limit")?.unwrap_or(0);
        if limit != 0 && limit != 1 {
            return Err(CommandError::failed_to_parse(format!(
                "The limit field in delete objects must be 0 or 1. Got {limit}"
            )));
        }
    }
    // In a transaction the first failure ends the command, as mongod's.
    let ordered = bool_option(cmd, "ordered", "delete", true)? || shared.txn().is_some();
    let ack = ack_of(cmd)?;
    check_not_view(shared, &ns)?;
    crate::exec::write::check_writable(&ns)?;
    let scope = scope_of(cmd)?;
    let mut retry = Retry::begin(shared, cmd)?;
    let mut reply = write_reply(&specs, ordered, false, |index, spec| {
        shared.opcounters.delete.fetch_add(1, Ordering::Relaxed);
        let log = match retry.as_mut() {
            None => None,
            Some(_) if count_option(spec, "limit")?.unwrap_or(0) == 0 => {
                return Err(CommandError::invalid_options("Cannot use (or request) retryable writes with limit=0"));
            }
            Some(r) => match r.answered(index) {
                Some(answer) => return Ok(Outcome { n: answer.get_i64("n").unwrap_or(1), ..Outcome::default() }),
                None => Some(StmtLog::new(r, index)),
            },
        };
        Ok(Outcome { n: delete_one_spec(shared, &ns, spec, &scope, log.as_ref(), &call.op)?, ..Outcome::default() })
    })?;
    if let Some(retry) = retry {
        retry.finish_reply(&mut reply);
    }
    acknowledge(shared, Some(call), ack, reply)
}
