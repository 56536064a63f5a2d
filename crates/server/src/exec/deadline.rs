//! `maxTimeMS`: a command's deadline, and whether `killOp` ended it.

use crate::args::type_name;
use crate::error::CommandError;
use bson::{Bson, Document};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A command's `maxTimeMS` deadline; with [`Deadline::killable`], also
/// the flag `killOp` sets, so the loops that check the deadline stop a
/// killed read too.
#[derive(Clone)]
pub(crate) struct Deadline(pub(crate) Option<Instant>, Option<Arc<AtomicBool>>);

/// The deadline of whichever command reads a cursor's pipeline now: the
/// pipeline's input checks it for each document it takes (so stages that
/// hold back or drop their input still stop at `maxTimeMS` or `killOp`),
/// and each `getMore` sets its own.
pub(crate) struct SharedDeadline(parking_lot::Mutex<Deadline>);

impl SharedDeadline {
    pub fn new(deadline: &Deadline) -> Arc<SharedDeadline> {
        Arc::new(SharedDeadline(parking_lot::Mutex::new(deadline.clone())))
    }

    /// The command now reading is bounded by `deadline`.
    pub fn set(&self, deadline: &Deadline) {
        *self.0.lock() = deadline.clone();
    }

    pub fn check(&self) -> Result<(), CommandError> {
        self.0.lock().check()
    }
}

impl Deadline {
    pub fn of(cmd: &Document) -> Result<Deadline, CommandError> {
        let ms = match cmd.get("maxTimeMS") {
            None | Some(Bson::Null) => return Ok(Deadline::none()),
            Some(Bson::Int32(i)) => i64::from(*i),
            Some(Bson::Int64(i)) => *i,
            Some(Bson::Double(d)) if d.fract() == 0.0 => *d as i64,
            Some(other) => {
                return Err(CommandError::bad_value(format!("maxTimeMS must be a number, not {}", type_name(other))))
            }
        };
        if !(0..=i64::from(i32::MAX)).contains(&ms) {
            return Err(CommandError::bad_value(format!("{ms} value for maxTimeMS is out of range [0, 2147483647]")));
        }
        Ok(Deadline::at((ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64))))
    }

    /// Until `when` (`None`: no time limit).
    pub fn at(when: Option<Instant>) -> Deadline {
        Deadline(when, None)
    }

    /// Stopped as well when the command's operation is killed (the flag
    /// of its `Ctx`, outside transactions).
    pub fn killable(mut self, ctx: &crate::exec::ctx::Ctx<'_>) -> Deadline {
        self.1 = ctx.conflicts.killed.clone();
        self
    }

    /// Time left before the deadline, if there is one.
    pub fn left(&self) -> Option<Duration> {
        self.0.map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// No deadline.
    pub fn none() -> Deadline {
        Deadline(None, None)
    }

    pub fn check(&self) -> Result<(), CommandError> {
        if self.1.as_ref().is_some_and(|k| k.load(Ordering::Relaxed)) {
            return Err(CommandError::with_code(11601, "operation was interrupted"));
        }
        match self.0 {
            Some(t) if Instant::now() >= t => Err(CommandError::max_time_ms_expired("operation exceeded time limit")),
            _ => Ok(()),
        }
    }
}
