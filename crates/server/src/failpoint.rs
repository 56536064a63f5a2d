//! `configureFailPoint` with mongod's `failCommand` fail point: a test
//! command, there only when the server starts with `--setParameter
//! enableTestCommands=1` (as mongod's). Drivers' test suites and the
//! specification tests use it to make chosen commands fail: with an
//! error code, a closed connection, a delay, or a write concern error
//! added to a command that ran.
//!
//! Modes: `"alwaysOn"`, `"off"`, `{times: n}` (the next n matching
//! commands), `{skip: n}` (all but the next n), `{activationProbability:
//! p}` (each matching command with probability p). Data: `failCommands`
//! (command names, required), `errorCode`, `closeConnection`,
//! `writeConcernError`, `errorLabels`, `blockConnection` with
//! `blockTimeMS`, `appName` (only that client's connections), and
//! `failInternalCommands` (accepted; we have no internal clients).
//!
//! Also mongod's `hangIndexBuildDuringCollectionScanPhaseBeforeInsertion`
//! (`alwaysOn` or `off`): index builds wait, past their first chunk of
//! documents, while it is on (tests use it to see a build in
//! `currentOp`).

use crate::error::CommandError;
use crate::transactions::{labels_for, Part};
use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use query::update::integral;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What a matching command meets.
#[derive(Debug, Clone, Default)]
pub struct Action {
    pub close_connection: bool,
    pub error_code: Option<i32>,
    pub error_labels: Option<Vec<Bson>>,
    pub write_concern_error: Option<Document>,
    pub block: Option<Duration>,
}

/// Codes a retryable write is retried on (the retryable writes
/// specification's list): mongod labels them `RetryableWriteError`.
const RETRYABLE_CODES: &[i32] = &[6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436];

/// The "not primary" and "shutting down" codes (the SDAM specification's
/// state change errors), whose replies carry the `topologyVersion`.
pub const STATE_CHANGE_CODES: &[i32] = &[91, 189, 10058, 10107, 11600, 11602, 13435, 13436];

/// A command's name with hello's aliases as one.
fn canonical(name: &str) -> &str {
    match name {
        "isMaster" | "ismaster" => "hello",
        other => other,
    }
}

impl Action {
    /// The labels for an error with `code` on `cmd` (`write_concern`: a
    /// write concern error): the given ones, else mongod's inside a
    /// transaction (`transactions::labels_for`), else
    /// `RetryableWriteError` for a retryable code on a retryable write.
    fn labels(&self, code: i32, cmd: &Document, write_concern: bool) -> Option<Vec<Bson>> {
        if let Some(labels) = &self.error_labels {
            return Some(labels.clone());
        }
        if cmd.get_bool("autocommit") == Ok(false) {
            let part = match cmd.keys().next().map(String::as_str) {
                Some("commitTransaction") => Part::Commit,
                Some("abortTransaction") => Part::Abort,
                _ => Part::Statement,
            };
            let labels = labels_for(code, part, write_concern);
            return (!labels.is_empty()).then(|| labels.into_iter().map(Bson::from).collect());
        }
        let retryable_write = cmd.contains_key("txnNumber") && !cmd.contains_key("autocommit");
        (retryable_write && RETRYABLE_CODES.contains(&code)).then(|| vec![Bson::from("RetryableWriteError")])
    }

    /// The reply of command `cmd` failed by `errorCode`.
    pub fn error_reply(&self, code: i32, cmd: &Document) -> Document {
        let mut e = CommandError::with_code(code, "Failing command due to 'failCommand' failpoint").to_document();
        if let Some(labels) = self.labels(code, cmd, false) {
            e.insert("errorLabels", labels);
        }
        e
    }

    /// Add the write concern error (and its labels) to the reply of
    /// command `cmd`, which ran.
    pub fn amend(&self, reply: &mut Document, cmd: &Document) {
        if let Some(wce) = &self.write_concern_error {
            reply.insert("writeConcernError", wce.clone());
            let code = wce.get("code").and_then(integral).and_then(|c| i32::try_from(c).ok()).unwrap_or(0);
            if let Some(labels) = self.labels(code, cmd, true) {
                reply.insert("errorLabels", labels);
            }
        }
    }

    /// Whether the fail point does anything to a command (mongod's fires
    /// only then).
    fn acts(&self) -> bool {
        self.close_connection || self.error_code.is_some() || self.write_concern_error.is_some() || self.block.is_some()
    }
}

#[derive(Debug)]
enum Mode {
    AlwaysOn,
    Times(u64),
    Skip(u64),
    /// Fires for a matching command with this probability.
    Random(f64),
}

#[derive(Debug)]
struct FailCommand {
    mode: Mode,
    commands: Vec<String>,
    app_name: Option<String>,
    action: Action,
}

#[derive(Default)]
pub struct FailPoints {
    /// Set while `failCommand` is on: the hot path checks only this.
    armed: AtomicBool,
    fail_command: Mutex<Option<FailCommand>>,
    /// Times the fail point has fired (a running total, as mongod's).
    entered: AtomicU64,
    /// `hangIndexBuildDuringCollectionScanPhaseBeforeInsertion` is on.
    hang_index_build: AtomicBool,
    /// `maxTimeAlwaysTimeOut`: how many more commands with a `maxTimeMS`
    /// time out at once (`u64::MAX`: always; 0: off).
    max_time_always: AtomicU64,
}

/// The fail point that makes every command with a `maxTimeMS` time out.
const MAX_TIME_ALWAYS_TIME_OUT: &str = "maxTimeAlwaysTimeOut";

/// The fail point that holds index builds in their collection scan.
const HANG_INDEX_BUILD: &str = "hangIndexBuildDuringCollectionScanPhaseBeforeInsertion";

fn bad(message: impl Into<String>) -> CommandError {
    CommandError::bad_value(message)
}

impl FailPoints {
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Whether a command with a `maxTimeMS` times out at once (and counts
    /// one firing of `maxTimeAlwaysTimeOut`).
    pub fn times_out(&self, cmd: &Document) -> bool {
        let limited = cmd.get("maxTimeMS").and_then(integral).is_some_and(|n| n > 0);
        if !limited {
            return false;
        }
        let taken = self.max_time_always.fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| match left {
            0 => None,
            u64::MAX => Some(u64::MAX),
            n => Some(n - 1),
        });
        taken.is_ok()
    }

    /// Whether index builds are to wait in their collection scan.
    pub fn hangs_index_builds(&self) -> bool {
        self.hang_index_build.load(Ordering::Acquire)
    }

    /// `{configureFailPoint: "failCommand", mode, data}`; replies with the
    /// times the fail point fired under its previous setting.
    pub fn configure(&self, cmd: &Document) -> Result<Document, CommandError> {
        let name = match cmd.get("configureFailPoint") {
            Some(Bson::String(n)) => n.as_str(),
            _ => return Err(CommandError::type_mismatch("configureFailPoint takes the fail point's name")),
        };
        if name == HANG_INDEX_BUILD {
            let on = match cmd.get("mode") {
                Some(Bson::String(m)) if m == "alwaysOn" => true,
                Some(Bson::String(m)) if m == "off" => false,
                _ => return Err(bad(format!("{HANG_INDEX_BUILD} takes the mode 'alwaysOn' or 'off'"))),
            };
            let was = self.hang_index_build.swap(on, Ordering::AcqRel);
            return Ok(doc! { "count": i64::from(was), "ok": 1.0 });
        }
        if name == MAX_TIME_ALWAYS_TIME_OUT {
            let left = match cmd.get("mode") {
                Some(Bson::String(m)) if m == "alwaysOn" => u64::MAX,
                Some(Bson::String(m)) if m == "off" => 0,
                Some(Bson::Document(m)) if m.len() == 1 && m.contains_key("times") => {
                    integral(m.get("times").expect("checked"))
                        .filter(|n| *n >= 0)
                        .map(|n| n as u64)
                        .ok_or_else(|| bad("'times' must be a non-negative integer"))?
                }
                _ => return Err(bad("'mode' must be one of 'off', 'alwaysOn' and 'times'")),
            };
            let was = self.max_time_always.swap(left, Ordering::AcqRel);
            return Ok(doc! { "count": i64::from(was != 0), "ok": 1.0 });
        }
        if name != "failCommand" {
            return Err(bad(format!(
                "Cannot find failpoint: {name} (only failCommand, {MAX_TIME_ALWAYS_TIME_OUT} and {HANG_INDEX_BUILD} \
                 are supported)"
            )));
        }
        let mode = match cmd.get("mode") {
            Some(Bson::String(m)) if m == "off" => None,
            Some(Bson::String(m)) if m == "alwaysOn" => Some(Mode::AlwaysOn),
            Some(Bson::Document(m)) if m.len() == 1 && m.contains_key("activationProbability") => {
                Some(Mode::Random(activation_probability(m.get("activationProbability").expect("checked"))?))
            }
            Some(Bson::Document(m)) if m.len() == 1 => {
                let (k, v) = m.iter().next().expect("one field");
                let n = integral(v)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad(format!("'{k}' must be a non-negative integer")))?;
                match k.as_str() {
                    "times" if n == 0 => None,
                    "times" => Some(Mode::Times(n as u64)),
                    "skip" => Some(Mode::Skip(n as u64)),
                    _ => return Err(bad(MODES)),
                }
            }
            _ => return Err(bad(MODES)),
        };
        let setting = match mode {
            None => None,
            Some(mode) => Some(Self::parse_data(mode, cmd.get("data"))?),
        };
        let mut current = self.fail_command.lock();
        self.armed.store(setting.is_some(), Ordering::Release);
        *current = setting;
        let count = self.entered.load(Ordering::Acquire);
        Ok(doc! { "count": count as i64, "ok": 1.0 })
    }

    fn parse_data(mode: Mode, data: Option<&Bson>) -> Result<FailCommand, CommandError> {
        let data = match data {
            Some(Bson::Document(d)) => d,
            _ => return Err(bad("failCommand needs a 'data' document")),
        };
        let commands = match data.get("failCommands") {
            Some(Bson::Array(names)) => names
                .iter()
                .map(|n| n.as_str().map(str::to_string).ok_or_else(|| bad("'failCommands' holds command names")))
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(bad("failCommand needs 'data.failCommands', an array of command names")),
        };
        let mut action = Action::default();
        let mut app_name = None;
        let mut block = false;
        let mut block_ms = None;
        for (k, v) in data {
            match (k.as_str(), v) {
                ("failCommands" | "failInternalCommands", _) => {}
                ("errorCode", v) => {
                    let code = integral(v).and_then(|c| i32::try_from(c).ok());
                    action.error_code = Some(code.ok_or_else(|| bad("'errorCode' must be an integer"))?);
                }
                ("closeConnection", Bson::Boolean(b)) => action.close_connection = *b,
                ("writeConcernError", Bson::Document(w)) => action.write_concern_error = Some(w.clone()),
                ("errorLabels", Bson::Array(labels)) => action.error_labels = Some(labels.clone()),
                ("blockConnection", Bson::Boolean(b)) => block = *b,
                ("blockTimeMS", v) => {
                    block_ms = Some(
                        integral(v)
                            .filter(|n| *n >= 0)
                            .ok_or_else(|| bad("'blockTimeMS' must be a non-negative integer"))?,
                    )
                }
                ("appName", Bson::String(a)) => app_name = Some(a.clone()),
                (other, _) => return Err(bad(format!("failCommand: bad or unsupported data field '{other}'"))),
            }
        }
        if block {
            let ms = block_ms.ok_or_else(|| bad("'blockConnection' needs 'blockTimeMS'"))?;
            action.block = Some(Duration::from_millis(ms as u64));
        }
        Ok(FailCommand { mode, commands, app_name, action })
    }

    /// The action for `command` about to run on a connection of client
    /// `app_name`, when the fail point fires for it (counting it).
    pub fn check(&self, command: &str, app_name: Option<&str>) -> Option<Action> {
        if !self.is_armed() || command == "configureFailPoint" {
            return None;
        }
        let mut current = self.fail_command.lock();
        let fc = current.as_mut()?;
        if !fc.action.acts() || !fc.commands.iter().any(|c| canonical(c) == canonical(command)) {
            return None;
        }
        if fc.app_name.as_deref().is_some_and(|want| app_name != Some(want)) {
            return None;
        }
        let action = fc.action.clone();
        match &mut fc.mode {
            Mode::AlwaysOn => {}
            Mode::Skip(n) if *n > 0 => {
                *n -= 1;
                return None;
            }
            Mode::Skip(_) => {}
            Mode::Random(p) => {
                if (crate::exec::cursors::rand_u64() as f64 / u64::MAX as f64) >= *p {
                    return None;
                }
            }
            Mode::Times(n) => {
                *n -= 1;
                if *n == 0 {
                    *current = None;
                    self.armed.store(false, Ordering::Release);
                }
            }
        }
        self.entered.fetch_add(1, Ordering::Relaxed);
        Some(action)
    }
}

/// The modes `failCommand` takes, as its refusal lists them.
const MODES: &str = "'mode' must be one of 'off', 'alwaysOn', 'times', 'skip' and 'activationProbability'";

/// mongod's check of `{activationProbability: p}`: a number from 0 to 1.
fn activation_probability(v: &Bson) -> Result<f64, CommandError> {
    let p = match v {
        Bson::Double(d) => *d,
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => *i as f64,
        _ => {
            return Err(CommandError::type_mismatch(
                "the 'activationProbability' option of 'mode' must be a double between 0 and 1",
            ))
        }
    };
    match (0.0..=1.0).contains(&p) {
        true => Ok(p),
        false => Err(bad(format!("activationProbability must be between 0.0 and 1.0; found {p}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_fires_that_often_for_the_named_commands_only() {
        let fp = FailPoints::default();
        let cmd = doc! { "configureFailPoint": "failCommand", "mode": { "times": 2 },
        "data": { "failCommands": ["insert"], "errorCode": 8 } };
        assert_eq!(fp.configure(&cmd).unwrap().get_i64("count").unwrap(), 0);
        assert!(fp.check("find", None).is_none());
        assert_eq!(fp.check("insert", None).unwrap().error_code, Some(8));
        assert!(fp.check("insert", None).is_some());
        assert!(fp.check("insert", None).is_none(), "spent after two");
        assert!(!fp.is_armed());
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        assert_eq!(fp.configure(&off).unwrap().get_i64("count").unwrap(), 2, "a running total");
        // Labels alone do nothing: it never fires.
        let labels = doc! { "configureFailPoint": "failCommand", "mode": "alwaysOn",
        "data": { "failCommands": ["insert"], "errorLabels": ["X"] } };
        fp.configure(&labels).unwrap();
        assert!(fp.check("insert", None).is_none());
        // hello's aliases are one command; configureFailPoint is exempt.
        let hello = doc! { "configureFailPoint": "failCommand", "mode": "alwaysOn",
        "data": { "failCommands": ["isMaster", "configureFailPoint"], "closeConnection": true } };
        fp.configure(&hello).unwrap();
        assert!(fp.check("hello", None).is_some());
        assert!(fp.check("configureFailPoint", None).is_none());
    }

    #[test]
    fn retryable_codes_on_retryable_writes_get_the_label() {
        let action = Action { error_code: Some(10107), ..Action::default() };
        let write = doc! { "insert": "c", "txnNumber": 1i64 };
        let labels = action.error_reply(10107, &write).get_array("errorLabels").unwrap().clone();
        assert_eq!(labels, vec![Bson::from("RetryableWriteError")]);
        assert!(action.error_reply(10107, &doc! { "insert": "c" }).get("errorLabels").is_none());
        assert!(action.error_reply(2, &write).get("errorLabels").is_none());
        let given = Action { error_labels: Some(vec![Bson::from("Mine")]), ..action };
        assert_eq!(given.error_reply(10107, &write).get_array("errorLabels").unwrap(), &vec![Bson::from("Mine")]);
    }

    #[test]
    fn skip_app_name_and_bad_settings() {
        let fp = FailPoints::default();
        let cmd = doc! { "configureFailPoint": "failCommand", "mode": { "skip": 1 },
        "data": { "failCommands": ["count"], "closeConnection": true, "appName": "me" } };
        fp.configure(&cmd).unwrap();
        assert!(fp.check("count", Some("other")).is_none());
        assert!(fp.check("count", Some("me")).is_none(), "skipped once");
        assert!(fp.check("count", Some("me")).unwrap().close_connection);
        assert!(fp.check("count", Some("me")).is_some(), "then always");
        for bad in [
            doc! { "configureFailPoint": "failCommand", "mode": "sometimes", "data": { "failCommands": ["x"] } },
            doc! { "configureFailPoint": "failCommand", "mode": { "times": -1 }, "data": { "failCommands": ["x"] } },
            doc! { "configureFailPoint": "failCommand", "mode": "alwaysOn" },
            doc! { "configureFailPoint": "failCommand", "mode": "alwaysOn", "data": { "failCommands": ["x"], "blockConnection": true } },
            doc! { "configureFailPoint": "nope", "mode": "off" },
        ] {
            assert!(fp.configure(&bad).is_err(), "{bad}");
        }
        assert!(fp.check("count", Some("me")).is_some(), "a refused setting changed nothing");
    }

    #[test]
    fn activation_probability_fires_that_share_of_the_time() {
        let fp = FailPoints::default();
        let at = |p: Bson| {
            doc! { "configureFailPoint": "failCommand", "mode": { "activationProbability": p },
            "data": { "failCommands": ["find"], "errorCode": 2 } }
        };
        fp.configure(&at(Bson::Double(0.5))).unwrap();
        let fired = (0..2000).filter(|_| fp.check("find", None).is_some()).count();
        assert!((800..1200).contains(&fired), "about half of 2,000: {fired}");
        assert!(fp.is_armed(), "still on");
        fp.configure(&at(Bson::Int32(1))).unwrap();
        assert!((0..100).all(|_| fp.check("find", None).is_some()));
        fp.configure(&at(Bson::Double(0.0))).unwrap();
        assert!((0..100).all(|_| fp.check("find", None).is_none()));
        let refused = |p: Bson| fp.configure(&at(p)).unwrap_err();
        assert_eq!(refused(Bson::Double(1.5)).code, 2);
        assert_eq!(refused(Bson::Double(1.5)).errmsg, "activationProbability must be between 0.0 and 1.0; found 1.5");
        assert_eq!(refused(Bson::Double(-0.1)).code, 2);
        assert_eq!(refused(Bson::String("half".into())).code, 14);
    }
}
