//! `startSession`, `endSessions`, `killSessions`, `killAllSessions`.

use crate::error::CommandError;
use crate::exec::ctx::Ctx;
use crate::session::{is_empty_user, session_id, session_list};
use bson::Document;
use doc::sessions::SessionId;

/// `startSession`: a new session, in the local cache.
pub(crate) fn start_session(shared: &Ctx<'_>) -> Result<Document, CommandError> {
    let id = bson::Uuid::new();
    shared.sessions.vivify(id.bytes())?;
    Ok(bson::doc! {
        "id": { "id": id },
        "timeoutMinutes": crate::limits::session_timeout_minutes,
        "ok": 1.0,
    })
}

/// `endSessions` forgets the sessions named (at once, where mongod drops
/// them at its next refresh); `killSessions` and `killAllSessions` close
/// the cursors of the sessions named (an empty list: every session's),
/// which stay listed, as mongod's.
pub(crate) fn end_sessions(shared: &Ctx<'_>, name: &str, cmd: &Document) -> Result<Document, CommandError> {
    let list = session_list(name, cmd)?;
    let ids: Option<Vec<SessionId>> = match name {
        "killAllSessions" => {
            let mut all = list.is_empty();
            for user in &list {
                all |= is_empty_user(user, "KillAllSessionsUser")?;
            }
            if all {
                None
            } else {
                Some(Vec::new())
            }
        }
        _ => {
            let ids = list
                .iter()
                .map(|d| session_id("LogicalSessionFromClient.id", d.get("id")))
                .collect::<Result<Vec<_>, _>>()?;
            match name == "killSessions" && ids.is_empty() {
                true => None,
                false => Some(ids),
            }
        }
    };
    match name {
        "endSessions" => shared.sessions.forget(ids.as_deref().unwrap_or_default()),
        _ => shared.cursors.kill_sessions(ids.as_deref()),
    }
    // Either way their open transactions abort.
    let ended = match name {
        "endSessions" => shared.transactions.forget(Some(ids.as_deref().unwrap_or_default())),
        _ => shared.transactions.forget(ids.as_deref()),
    };
    for txn in ended {
        crate::transactions::discard(shared, txn);
    }
    Ok(bson::doc! { "ok": 1.0 })
}
