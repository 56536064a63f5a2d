//! Sessions: the fields a command carries about its session (`lsid`,
//! `txnNumber`, `autocommit`, `startTransaction`), checked as mongod does,
//! and retryable writes.
//!
//! Multi-document transactions (`autocommit: false`) are refused with
//! IllegalOperation until they are built, rather than run statement by
//! statement.
//!
//! A write command with `lsid` and `txnNumber` (and no `autocommit`) is a
//! retryable write. It checks its session out (one command per session at
//! a time, as mongod does), then each statement either runs, writing a
//! statement record in its own storage transaction
//! ([`doc::sessions`]), or, if that record exists, answers what it
//! answered the first time without writing again; the reply then lists
//! those statements in `retriedStmtIds`. A txnNumber below the session's
//! newest is refused with TransactionTooOld.
//!
//! Every command with an `lsid` also marks its session used in the local
//! session cache (mongod's logical session cache): `$listLocalSessions`
//! lists it, `startSession` adds one, `endSessions` / `killSessions` /
//! `killAllSessions` forget them (the kills also close their cursors), and
//! sessions unused for `logicalSessionTimeoutMinutes` expire.
//!
//! Invariants:
//! 1. A session is checked out by at most one command at a time, so a
//!    statement cannot run twice concurrently under one txnNumber.
//! 2. A retried statement's reply waits for the journal like the first
//!    one (`acknowledge`), so it never acknowledges a write that is not
//!    yet durable.

use crate::args::wrong_type;

use crate::error::CommandError;

use crate::server::Shared;

use bson::{spec::BinarySubtype, Bson, Document};

use doc::sessions::{Record, SessionId, Sessions};

use parking_lot::Mutex;

use query::type_name;

use std::collections::HashMap;

use std::sync::Arc;

use std::time::{Duration, Instant};

/// The session fields of a command.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SessionFields {
    pub lsid: Option<SessionId>,
    pub txn_number: Option<i64>,
    pub autocommit: Option<bool>,
    pub start_transaction: Option<bool>,
}

/// Whether a `{user, db}` (both strings; `path` names them in errors) is
/// the empty user, whose every session is without authentication.
pub(crate) fn is_empty_user(user: &Document, path: &str) -> Result<bool, CommandError> {
    let field = |f: &str| match user.get(f) {
        Some(Bson::String(s)) => Ok(s.is_empty()),
        None => Err(CommandError::missing_required_field(format!(
            "BSON field '{path}.{f}' is missing but a required field"
        ))),
        Some(other) => Err(wrong_type(&format!("{path}.{f}"), other, "string")),
    };
    Ok(field("user")? & field("db")?)
}

/// A session id field (`path` names it in errors): a 16-byte UUID.
pub(crate) fn session_id(path: &str, v: Option<&Bson>) -> Result<SessionId, CommandError> {
    match v {
        None => {
            Err(CommandError::missing_required_field(format!("BSON field '{path}' is missing but a required field")))
        }
        Some(Bson::Binary(b)) if b.subtype != BinarySubtype::Uuid => Err(CommandError::type_mismatch(format!(
            "BSON field '{path}' is the wrong binData type '{}', expected type 'UUID'",
            subtype_name(b.subtype)
        ))),
        Some(Bson::Binary(b)) => b
            .bytes
            .as_slice()
            .try_into()
            .map_err(|_| CommandError::invalid_uuid("uuid must be a 16-byte binary field with UUID (4) subtype")),
        Some(other) => Err(wrong_type(path, other, "binData")),
    }
}

/// The array a session command takes (`{endSessions: [...]}`), each
/// element an object.
pub(crate) fn session_list<'c>(name: &str, cmd: &'c Document) -> Result<Vec<&'c Document>, CommandError> {
    let wrong = |v: &Bson, expected: &str| wrong_type(&format!("{name}.{name}"), v, expected);
    match cmd.get(name) {
        Some(Bson::Array(list)) => list
            .iter()
            .map(|v| match v {
                Bson::Document(d) => Ok(d),
                other => Err(wrong(other, "object")),
            })
            .collect(),
        Some(other) => Err(wrong(other, "array")),
        None => Ok(Vec::new()),
    }
}

/// The documents of `{$listLocalSessions: spec}`: the cached sessions of
/// the users `spec` names (`{}`: the caller's; `{allUsers: true}`; `{users:
/// [{user, db}, ...]}`). Without authentication every session is the
/// empty user's, the caller's own.
pub(crate) fn list_local_sessions(shared: &Shared, spec: &Bson) -> Result<Vec<Document>, CommandError> {
    const STAGE: &str = "$listLocalSessions";
    let Bson::Document(spec) = spec else {
        return Err(CommandError::type_mismatch(format!(
            "{STAGE} options must be specified in an object, but found: {}",
            type_name(spec)
        )));
    };
    // `users` named: how many, and whether the empty user is among them.
    let (mut all_users, mut users, mut names_empty_user) = (false, 0, false);
    for (key, value) in spec {
        match (key.as_str(), value) {
            ("allUsers", Bson::Boolean(b)) => all_users = *b,
            ("allUsers", other) => return Err(wrong_type("$listLocalSessions.allUsers", other, "bool")),
            ("users", Bson::Array(list)) => {
                for (i, user) in list.iter().enumerate() {
                    let Bson::Document(user) = user else {
                        return Err(wrong_type(&format!("{STAGE}.users.{i}"), user, "object"));
                    };
                    names_empty_user |= is_empty_user(user, &format!("{STAGE}.users"))?;
                    users += 1;
                }
            }
            ("users", other) => return Err(wrong_type("$listLocalSessions.users", other, "array")),
            (other, _) => {
                return Err(CommandError::unknown_parameter(format!(
                    "BSON field '{STAGE}.{other}' is an unknown field."
                )))
            }
        }
    }
    if all_users && users > 0 {
        return Err(CommandError::with_code(
            12,
            format!("{STAGE} may not specify {{allUsers:true}} and {{users:[...]}} at the same time"),
        ));
    }
    let mine = all_users || users == 0 || names_empty_user;
    Ok(if mine { shared.sessions.local_sessions() } else { Vec::new() })
}

/// mongod's name for a binary subtype.
fn subtype_name(s: BinarySubtype) -> String {
    match s {
        BinarySubtype::Generic => "general".into(),
        BinarySubtype::Function => "function".into(),
        BinarySubtype::BinaryOld => "binary(old)".into(),
        BinarySubtype::UuidOld => "UUID(old)".into(),
        BinarySubtype::Uuid => "UUID".into(),
        BinarySubtype::Md5 => "MD5".into(),
        BinarySubtype::Encrypted => "encrypt".into(),
        BinarySubtype::Column => "column".into(),
        BinarySubtype::Sensitive => "sensitive".into(),
        BinarySubtype::UserDefined(_) => "user".into(),
        other => format!("{}", u8::from(other)),
    }
}

const RETRYABLE_WRITES: &[&str] = &["insert", "update", "delete", "findAndModify", "findandmodify", "bulkWrite"];

/// The commands a multi-document transaction may run: mongod 8.0's.
const IN_TRANSACTION: &[&str] = &[
    "find",
    "getMore",
    "killCursors",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "aggregate",
    "distinct",
    "bulkWrite",
    "create",
    "createIndexes",
    "commitTransaction",
    "abortTransaction",
];

/// Read and check a command's session fields, in mongod's order.
pub(crate) fn session_fields(name: &str, cmd: &Document) -> Result<SessionFields, CommandError> {
    let mut f = SessionFields::default();
    match cmd.get("lsid") {
        None => {}
        Some(Bson::Document(lsid)) => f.lsid = Some(session_id("OperationSessionInfo.lsid.id", lsid.get("id"))?),
        Some(other) => return Err(wrong_type("OperationSessionInfo.lsid", other, "object")),
    }
    match cmd.get("txnNumber") {
        None => {}
        Some(Bson::Int64(n)) => f.txn_number = Some(*n),
        Some(other) => return Err(wrong_type("OperationSessionInfo.txnNumber", other, "long")),
    }
    for (field, slot) in [("autocommit", &mut f.autocommit), ("startTransaction", &mut f.start_transaction)] {
        match cmd.get(field) {
            None => {}
            Some(Bson::Boolean(b)) => *slot = Some(*b),
            Some(other) => return Err(wrong_type(&format!("OperationSessionInfo.{field}"), other, "bool")),
        }
    }
    let invalid = |m: &str| Err(CommandError::invalid_options(m));
    if f.lsid.is_none() && f.txn_number.is_some() {
        return invalid("Transaction number requires a session ID to also be specified");
    }
    if f.txn_number.is_some_and(|n| n < 0) {
        return invalid("Transaction number cannot be negative");
    }
    if f.txn_number.is_none() && f.autocommit.is_some() {
        return invalid("'autocommit' field requires a transaction number to also be specified");
    }
    if f.autocommit == Some(true) {
        return invalid("Specifying autocommit=true is not allowed.");
    }
    if f.autocommit.is_none() && f.start_transaction.is_some() {
        return invalid("'startTransaction' field requires 'autocommit' field to also be specified");
    }
    if f.start_transaction == Some(false) {
        return invalid("Specifying startTransaction=false is not allowed.");
    }
    if f.autocommit == Some(false) && !IN_TRANSACTION.contains(&name) {
        let why = match name {
            "count" => ". Please see http://dochub.mongodb.org/core/transaction-count for a recommended alternative.",
            _ => ".",
        };
        return Err(CommandError::operation_not_supported_in_transaction(format!(
            "Cannot run '{name}' in a multi-document transaction{why}"
        )));
    }
    if f.txn_number.is_some() && f.autocommit.is_none() && !RETRYABLE_WRITES.contains(&name) {
        return Err(CommandError::not_a_retryable_write_command(format!(
            "txnNumber may only be provided for multi-document transactions and retryable write commands. \
             autocommit:false was not provided, and {name} is not a retryable write command."
        )));
    }
    Ok(f)
}

/// A session's state while the server remembers it.
#[derive(Default)]
struct Live {
    /// The newest txnNumber seen (records only keep those that wrote).
    newest: Option<i64>,
    /// `newest` accounts for the stored records (read once per session).
    loaded: bool,
    last_used: Option<Instant>,
}

/// Every session's statement records and check-outs.
pub struct SessionCatalog {
    store: Sessions,
    live: Mutex<HashMap<SessionId, Live>>,
    /// Per session, the turn a connection's task awaits before it runs a
    /// retryable write (`take_turn`): one command per session at a time,
    /// and no network thread ever blocks on it.
    turns: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// The local session cache: every session a command named, with when
    /// it was last used.
    local: Mutex<HashMap<SessionId, bson::DateTime>>,
}

/// The most sessions the cache holds (mongod's `maxSessions` default).
const MAX_LOCAL_SESSIONS: usize = 1_000_000;

/// The user digest of every session without authentication: SHA-256 of
/// the empty string (mongod's `kNoAuthDigest`).
const NO_AUTH_DIGEST: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41,
    0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// The session of a command that will check one out: a retryable write
/// (`txnNumber` and a well-formed `lsid`).
pub fn retryable_session(cmd: &Document) -> Option<SessionId> {
    cmd.get("txnNumber")?;
    match cmd.get_document("lsid").ok()?.get("id")? {
        Bson::Binary(b) if b.subtype == BinarySubtype::Uuid => b.bytes.as_slice().try_into().ok(),
        _ => None,
    }
}

/// How long a session lives unused (`logicalSessionTimeoutMinutes`).
fn session_timeout() -> Duration {
    Duration::from_secs(crate::limits::session_timeout_minutes as u64 * 60)
}

impl SessionCatalog {
    pub fn open(engine: &storage::Engine) -> Result<SessionCatalog, doc::catalog::DocError> {
        Ok(SessionCatalog {
            store: Sessions::open(engine)?,
            live: Mutex::default(),
            turns: Mutex::default(),
            local: Mutex::default(),
        })
    }

    /// Mark a session used now (mongod's `vivify`); a new one fails with
    /// TooManyLogicalSessions when the cache is full.
    pub fn vivify(&self, lsid: SessionId) -> Result<(), CommandError> {
        let mut local = self.local.lock();
        let now = bson::DateTime::now();
        if let Some(last_use) = local.get_mut(&lsid) {
            *last_use = now;
            return Ok(());
        }
        if local.len() >= MAX_LOCAL_SESSIONS {
            return Err(CommandError::with_code(
                261,
                format!(
                    "Unable to add session into the cache because the number of active sessions is too high: {}",
                    local.len()
                ),
            ));
        }
        local.insert(lsid, now);
        Ok(())
    }

    /// Forget sessions (`endSessions`).
    pub fn forget(&self, ids: &[SessionId]) {
        let mut local = self.local.lock();
        for id in ids {
            local.remove(id);
        }
    }

    /// The cached sessions as `$listLocalSessions` shows them: `{_id: {id,
    /// uid}, lastUse}`.
    pub fn local_sessions(&self) -> Vec<Document> {
        // Copied out, so the documents are built without holding the lock
        // every command with a session takes.
        let local: Vec<(SessionId, bson::DateTime)> = self.local.lock().iter().map(|(id, t)| (*id, *t)).collect();
        local
            .iter()
            .map(|(id, last_use)| {
                bson::doc! {
                    "_id": {
                        "id": bson::Binary { subtype: BinarySubtype::Uuid, bytes: id.to_vec() },
                        "uid": bson::Binary { subtype: BinarySubtype::Generic, bytes: NO_AUTH_DIGEST.to_vec() },
                    },
                    "lastUse": *last_use,
                }
            })
            .collect()
    }

    /// Wait, without blocking a thread, until no other command of the
    /// session runs; the guard holds the turn.
    pub async fn take_turn(&self, lsid: SessionId) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = self.turns.lock().entry(lsid).or_default().clone();
        turn.lock_owned().await
    }

    /// The session's newest txnNumber and whether that accounts for the
    /// stored records. The caller holds the session's turn (`take_turn`,
    /// taken in `server.rs` for every command `retryable_session` names).
    fn check_out(&self, lsid: SessionId) -> (Option<i64>, bool) {
        let mut live = self.live.lock();
        let s = live.entry(lsid).or_default();
        (s.newest, s.loaded)
    }

    fn check_in(&self, lsid: SessionId, newest: Option<i64>, loaded: bool) {
        let mut live = self.live.lock();
        let s = live.entry(lsid).or_default();
        s.newest = s.newest.max(newest);
        s.loaded |= loaded;
        s.last_used = Some(Instant::now());
    }

    /// The session's newest txnNumber (of a retryable write or a
    /// transaction), its stored records read once.
    pub(crate) fn newest_txn_number(
        &self,
        engine: &storage::Engine,
        lsid: SessionId,
    ) -> Result<Option<i64>, CommandError> {
        let (newest, loaded) = self.check_out(lsid);
        if loaded {
            return Ok(newest);
        }
        let stored = self.store.latest_txn_number(engine, &lsid)?;
        self.check_in(lsid, stored, true);
        Ok(newest.max(stored))
    }

    /// A transaction `n` began on the session: retryable writes below it
    /// are too old.
    pub(crate) fn note_txn_number(&self, lsid: SessionId, n: i64) {
        self.check_in(lsid, Some(n), false);
    }

    /// The commit record of the session's transaction `n`, written by the
    /// storage transaction that commits it.
    pub(crate) fn commit_stamp(&self, lsid: SessionId, n: i64) -> doc::sessions::Record<'_> {
        const IDS: &[i32] = &[doc::sessions::TXN_COMMIT_STMT];
        self.store.record(lsid, n, IDS, Document::new()).expect("an empty outcome encodes")
    }

    /// Whether the session's transaction `n` committed (its record).
    pub(crate) fn committed(&self, engine: &storage::Engine, lsid: SessionId, n: i64) -> Result<bool, CommandError> {
        Ok(self.store.committed(engine, &lsid, n)?)
    }

    /// Forget sessions unused for the session timeout, and their records.
    pub fn reap(&self, engine: &storage::Engine) -> Result<usize, doc::catalog::DocError> {
        // A turn someone holds or awaits keeps its session.
        let mut turns = self.turns.lock();
        turns.retain(|_, t| Arc::strong_count(t) > 1);
        self.live
            .lock()
            .retain(|id, s| turns.contains_key(id) || s.last_used.is_some_and(|t| t.elapsed() < session_timeout()));
        drop(turns);
        let now = bson::DateTime::now().timestamp_millis();
        let expired = now - session_timeout().as_millis() as i64;
        self.local.lock().retain(|_, last_use| last_use.timestamp_millis() >= expired);
        self.store.reap(engine, now - session_timeout().as_millis() as i64)
    }
}

/// The string mongod prints for a session: its id, and the SHA-256 of its
/// user's name, base64 (no authentication: the empty name).
pub(crate) fn session_string(lsid: &SessionId) -> String {
    let h: String = lsid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{} - 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A retryable write command in progress, its session checked out.
pub(crate) struct Retry<'a> {
    sessions: &'a SessionCatalog,
    lsid: SessionId,
    txn_number: i64,
    /// The session's newest txnNumber, given back at check-in.
    newest: Option<i64>,
    loaded: bool,
    /// Statement ids: `stmtIds[i]`, or `stmtId + i` (from 0).
    stmt_ids: Option<Vec<i32>>,
    first: i32,
    executed: HashMap<i32, Document>,
    /// Statements answered from their records, in order.
    pub retried: Vec<i32>,
}

impl<'a> Retry<'a> {
    /// The retryable write `cmd` is, if it is one: checks its session out
    /// and reads which of its statements already ran.
    pub fn begin(shared: &'a Shared, cmd: &Document) -> Result<Option<Retry<'a>>, CommandError> {
        let name = cmd.keys().next().map_or("", String::as_str);
        let f = session_fields(name, cmd)?;
        let (Some(lsid), Some(txn_number), None) = (f.lsid, f.txn_number, f.autocommit) else { return Ok(None) };
        let sessions = &shared.sessions;
        let (newest, loaded) = sessions.check_out(lsid);
        let mut retry = Retry {
            sessions,
            lsid,
            txn_number,
            newest,
            loaded,
            stmt_ids: None,
            first: 0,
            executed: HashMap::new(),
            retried: Vec::new(),
        };
        // From here on, dropping `retry` checks the session back in.
        let engine = shared.catalog.engine();
        if !loaded {
            retry.newest = retry.newest.max(sessions.store.latest_txn_number(engine, &lsid)?);
            retry.loaded = true;
        }
        let newest = retry.newest;
        if let Some(newest) = newest.filter(|&n| n > txn_number) {
            return Err(CommandError::transaction_too_old(format!(
                "Retryable write with txnNumber {txn_number} is prohibited on session {} because a newer retryable \
                 write with txnNumber {newest} has already started on this session.",
                session_string(&lsid)
            )));
        }
        if newest == Some(txn_number) {
            // The same txnNumber again: a retry.
            retry.executed = sessions.store.executed(engine, &lsid, txn_number)?;
        }
        retry.newest = Some(txn_number);
        match cmd.get("stmtIds") {
            Some(Bson::Array(ids)) => {
                retry.stmt_ids = Some(
                    ids.iter()
                        .map(|v| match v {
                            Bson::Int32(i) => Ok(*i),
                            other => Err(wrong_type("stmtIds", other, "int")),
                        })
                        .collect::<Result<_, _>>()?,
                )
            }
            None => {}
            Some(other) => return Err(wrong_type("stmtIds", other, "array")),
        }
        match cmd.get("stmtId") {
            Some(Bson::Int32(i)) => retry.first = *i,
            None => {}
            Some(other) => return Err(wrong_type("stmtId", other, "int")),
        }
        Ok(Some(retry))
    }

    /// Statement `i`'s id.
    pub fn stmt_id(&self, i: usize) -> i32 {
        match &self.stmt_ids {
            Some(ids) if i < ids.len() => ids[i],
            _ => self.first.wrapping_add(i as i32),
        }
    }

    /// What statement `i` answered when it ran, if it did; counts it as
    /// retried.
    pub fn answered(&mut self, i: usize) -> Option<Document> {
        let id = self.stmt_id(i);
        let answer = self.executed.get(&id).cloned()?;
        self.retried.push(id);
        Some(answer)
    }

    /// The record of statements `stmt_ids` answering `outcome`, to write
    /// with them.
    pub fn record<'r>(&'r self, stmt_ids: &'r [i32], outcome: Document) -> Result<Record<'r>, CommandError> {
        Ok(self.sessions.store.record(self.lsid, self.txn_number, stmt_ids, outcome)?)
    }

    /// Add `retriedStmtIds` to a write command's reply (before `ok`).
    pub fn finish_reply(&self, reply: &mut Document) {
        if self.retried.is_empty() {
            return;
        }
        let ok = reply.remove("ok");
        reply.insert("retriedStmtIds", self.retried.clone());
        if let Some(ok) = ok {
            reply.insert("ok", ok);
        }
    }
}

impl Drop for Retry<'_> {
    fn drop(&mut self) {
        self.sessions.check_in(self.lsid, self.newest, self.loaded);
    }
}

/// One statement of a retryable write: what records it.
pub(crate) struct StmtLog<'a> {
    retry: &'a Retry<'a>,
    id: [i32; 1],
}

impl<'a> StmtLog<'a> {
    pub fn new(retry: &'a Retry<'a>, i: usize) -> StmtLog<'a> {
        StmtLog { retry, id: [retry.stmt_id(i)] }
    }

    /// The record of this statement answering `outcome`.
    pub fn record(&self, outcome: Document) -> Result<Record<'_>, CommandError> {
        self.retry.record(&self.id, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Binary};

    fn lsid() -> Bson {
        Bson::Binary(Binary { subtype: BinarySubtype::Uuid, bytes: vec![7; 16] })
    }

    #[test]
    fn session_fields_are_checked_as_mongod_checks_them() {
        let err = |name: &str, cmd: Document| session_fields(name, &cmd).unwrap_err();
        let e = err("find", doc! { "find": "c", "lsid": "x" });
        assert_eq!(
            (e.code, e.errmsg.as_str()),
            (14, "BSON field 'OperationSessionInfo.lsid' is the wrong type 'string', expected type 'object'")
        );
        let e = err("find", doc! { "find": "c", "lsid": {} });
        assert_eq!(e.code, 40414);
        let e = err(
            "find",
            doc! { "find": "c", "lsid": { "id": Binary { subtype: BinarySubtype::Function, bytes: vec![] } } },
        );
        assert_eq!(
            e.errmsg,
            "BSON field 'OperationSessionInfo.lsid.id' is the wrong binData type 'function', expected type 'UUID'"
        );
        let e =
            err("find", doc! { "find": "c", "lsid": { "id": Binary { subtype: BinarySubtype::Uuid, bytes: vec![] } } });
        assert_eq!((e.code, e.code_name.as_ref()), (207, "InvalidUUID"));
        let e = err("insert", doc! { "insert": "c", "txnNumber": 1i64 });
        assert_eq!((e.code, e.errmsg.as_str()), (72, "Transaction number requires a session ID to also be specified"));
        let e = err("insert", doc! { "insert": "c", "lsid": { "id": lsid() }, "txnNumber": -1i64 });
        assert_eq!(e.errmsg, "Transaction number cannot be negative");
        let e = err("insert", doc! { "insert": "c", "lsid": { "id": lsid() }, "txnNumber": 1 });
        assert_eq!(
            e.errmsg,
            "BSON field 'OperationSessionInfo.txnNumber' is the wrong type 'int', expected type 'long'"
        );
        let e = err("find", doc! { "find": "c", "lsid": { "id": lsid() }, "txnNumber": 1i64 });
        assert_eq!(e.code, 50768);
        assert!(e.errmsg.ends_with("and find is not a retryable write command."));
        let e = err("insert", doc! { "insert": "c", "lsid": { "id": lsid() }, "autocommit": false });
        assert_eq!(e.errmsg, "'autocommit' field requires a transaction number to also be specified");
        let e = err("insert", doc! { "insert": "c", "lsid": { "id": lsid() }, "txnNumber": 1i64, "autocommit": true });
        assert_eq!(e.errmsg, "Specifying autocommit=true is not allowed.");
        let f = session_fields(
            "insert",
            &doc! { "insert": "c", "lsid": { "id": lsid() }, "txnNumber": 1i64, "autocommit": false, "startTransaction": true },
        )
        .unwrap();
        assert_eq!((f.autocommit, f.start_transaction), (Some(false), Some(true)));
        let e =
            err("explain", doc! { "explain": {}, "lsid": { "id": lsid() }, "txnNumber": 1i64, "autocommit": false });
        assert_eq!((e.code, e.errmsg.as_str()), (263, "Cannot run 'explain' in a multi-document transaction."));
        let f = session_fields("update", &doc! { "update": "c", "lsid": { "id": lsid() }, "txnNumber": 3i64 }).unwrap();
        assert_eq!((f.lsid, f.txn_number), (Some([7; 16]), Some(3)));
    }

    #[tokio::test]
    async fn a_session_turn_is_held_until_released_and_a_wait_can_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let engine = storage::Engine::open(dir.path(), storage::Config::default()).unwrap();
        let sessions = SessionCatalog::open(&engine).unwrap();
        let held = sessions.take_turn([1; 16]).await;
        // Another session is not held up.
        let other = tokio::time::timeout(Duration::from_millis(500), sessions.take_turn([2; 16])).await;
        assert!(other.is_ok());
        let waiting = tokio::time::timeout(Duration::from_millis(30), sessions.take_turn([1; 16])).await;
        assert!(waiting.is_err(), "the turn is held");
        drop(held);
        let next = tokio::time::timeout(Duration::from_millis(500), sessions.take_turn([1; 16])).await;
        assert!(next.is_ok());
        drop(next);
        drop(engine);
    }

    #[test]
    fn sessions_print_as_mongod_prints_them() {
        let mut id = [0u8; 16];
        id[0] = 0xab;
        id[15] = 0x01;
        assert_eq!(
            session_string(&id),
            "ab000000-0000-0000-0000-000000000001 - 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
    }
}
