//! `readConcern`: the one parser of the field every read may carry, with
//! mongod's checks (`repl/read_concern_args.cpp`), and where a read at
//! level `"snapshot"` outside a transaction reads.
//!
//! On this one-member replica set every committed write is majority
//! committed, so `local`, `majority`, `linearizable` and `available` read
//! the newest committed data (`afterClusterTime` never has to wait: every
//! acknowledged write is visible, so it is never refused; a future
//! `atClusterTime` is). `snapshot` outside a
//! transaction reads one snapshot for the whole command and its
//! `getMore`s: the newest, or `atClusterTime`'s while the server keeps it
//! ([`crate::snapshots`]). `serializable`, ArborDB's level, applies to
//! transactions only (`transactions.rs`).

use crate::args::wrong_type;
use crate::error::CommandError;
use crate::server::Shared;
use bson::{Bson, Document, Timestamp};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Level {
    Local,
    Majority,
    Linearizable,
    Available,
    Snapshot,
    Serializable,
}

/// A command's `readConcern`, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadConcern {
    pub level: Option<Level>,
    pub at_cluster_time: Option<Timestamp>,
    pub after_cluster_time: Option<Timestamp>,
}

/// The commands that read at level `"snapshot"` outside a transaction
/// (mongod 5.0's; a `getMore` continues its cursor's snapshot).
const SNAPSHOT_READS: &[&str] = &["find", "aggregate", "distinct"];

/// The `readConcern` of `cmd` (`None`: absent or null).
pub fn parse(cmd: &Document) -> Result<Option<ReadConcern>, CommandError> {
    let rc = match cmd.get("readConcern") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(rc)) => rc,
        Some(other) => return Err(wrong_type("readConcern", other, "object")),
    };
    let mut out = ReadConcern::default();
    for (key, value) in rc {
        match (key.as_str(), value) {
            ("level", Bson::String(level)) => out.level = Some(level_of(level)?),
            ("level", other) => return Err(wrong_type("readConcern.level", other, "string")),
            ("atClusterTime", Bson::Timestamp(t)) => out.at_cluster_time = Some(*t),
            ("afterClusterTime", Bson::Timestamp(t)) => out.after_cluster_time = Some(*t),
            ("atClusterTime" | "afterClusterTime", other) => {
                return Err(wrong_type(&format!("readConcern.{key}"), other, "timestamp"))
            }
            // Drivers and mongos may pass these through; they change nothing here.
            ("provenance" | "afterOpTime" | "allowTransactionTableSnapshot", _) => {}
            _ => {
                return Err(CommandError::with_code(
                    40415,
                    format!("BSON field 'readConcern.{key}' is an unknown field."),
                ))
            }
        }
    }
    check(&out)?;
    Ok(Some(out))
}

fn level_of(level: &str) -> Result<Level, CommandError> {
    Ok(match level {
        "local" => Level::Local,
        "majority" => Level::Majority,
        "linearizable" => Level::Linearizable,
        "available" => Level::Available,
        "snapshot" => Level::Snapshot,
        "serializable" => Level::Serializable,
        other => {
            return Err(CommandError::bad_value(format!(
                "Enumeration value '{other}' for field 'readConcern.level' is not a valid value."
            )))
        }
    })
}

/// mongod's checks of the fields together.
fn check(rc: &ReadConcern) -> Result<(), CommandError> {
    if let Some(at) = rc.at_cluster_time {
        if rc.level != Some(Level::Snapshot) {
            return Err(CommandError::invalid_options(
                "atClusterTime field can be set only if level is equal to snapshot",
            ));
        }
        if (at.time, at.increment) == (0, 0) {
            return Err(CommandError::invalid_options("atClusterTime cannot be a null timestamp"));
        }
        if rc.after_cluster_time.is_some() {
            return Err(CommandError::invalid_options(
                "Specifying a timestamp for readConcern snapshot in a causally consistent session is not allowed",
            ));
        }
    }
    if rc.after_cluster_time.is_some() && matches!(rc.level, Some(Level::Linearizable | Level::Available)) {
        return Err(CommandError::invalid_options(
            "afterClusterTime field can be set only if level is equal to majority, local, or snapshot",
        ));
    }
    Ok(())
}

/// How a command outside a transaction reads: the newest committed data,
/// or at a snapshot (`Some(ts)`: `atClusterTime`'s engine timestamp,
/// `None`: the newest, kept for later reads at its time).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outside {
    Latest,
    Snapshot(Option<(u64, Timestamp)>),
}

/// Where command `name` (outside a transaction) reads, given its
/// `readConcern`; refuses what mongod refuses there. `afterClusterTime`
/// is always satisfied: every acknowledged write is visible (a time ahead
/// of ours comes from an earlier process whose clock ran ahead, which
/// `cluster_epoch` cannot rule out, and is not refused).
pub fn outside_transaction(shared: &Shared, name: &str, rc: Option<&ReadConcern>) -> Result<Outside, CommandError> {
    let Some(rc) = rc else { return Ok(Outside::Latest) };
    match rc.level {
        Some(Level::Serializable) => Err(CommandError::invalid_options(
            "readConcern level 'serializable' applies to multi-document transactions only",
        )),
        // A cursor reads the snapshot it was opened on (drivers repeat
        // the session's readConcern on its getMores).
        Some(Level::Snapshot) if name == "getMore" => Ok(Outside::Latest),
        Some(Level::Snapshot) if !SNAPSHOT_READS.contains(&name) => Err(CommandError::invalid_options(format!(
            "Command {name} does not support {{ readConcern: {{ level: \"snapshot\" }} }} :: caused by :: read \
             concern not supported"
        ))),
        Some(Level::Snapshot) => match rc.at_cluster_time {
            None => Ok(Outside::Snapshot(None)),
            Some(at) => {
                not_ahead(shared, "atClusterTime", at)?;
                let ts = engine_ts_of(shared, at).ok_or_else(|| crate::snapshots::too_old(at))?;
                Ok(Outside::Snapshot(Some((ts, at))))
            }
        },
        _ => Ok(Outside::Latest),
    }
}

/// An `atClusterTime` the server has not reached yet is refused (mongod's
/// wait for it could only end in a timeout on one member).
pub(crate) fn not_ahead(shared: &Shared, field: &str, t: Timestamp) -> Result<(), CommandError> {
    let now = crate::commands::cluster_time(shared);
    if (t.time, t.increment) > (now.time, now.increment) {
        return Err(CommandError::invalid_options(format!(
            "readConcern {field} value must not be greater than the current clusterTime. Requested clusterTime: {}; \
             current clusterTime: {}",
            shown(t),
            shown(now)
        )));
    }
    Ok(())
}

/// A cluster time as mongod's messages show it.
pub(crate) fn shown(t: Timestamp) -> String {
    format!("{{ ts: Timestamp({}, {}) }}", t.time, t.increment)
}

/// The engine timestamp a cluster time stands for (the inverse of
/// `commands::cluster_time_of`); `None` before this process started.
pub fn engine_ts_of(shared: &Shared, t: Timestamp) -> Option<u64> {
    let high = t.time.checked_sub(shared.cluster_epoch)?;
    Some((u64::from(high) << 32) | u64::from(t.increment))
}
