//! `count` and `distinct`.

use crate::args::count_option;
use crate::args::filter_of;
use crate::args::namespace;
use crate::args::CommandResult;
use crate::error::CommandError;
use crate::exec::call::Call;
use crate::exec::ctx::Ctx;
use crate::exec::deadline::Deadline;
use crate::exec::scan::check_hint;
use crate::exec::scan::collation_of;
use crate::exec::scan::scan_hits;
use crate::limits::*;
use bson::{doc, Bson, Document};
/// A document's BSON size.
pub(crate) use doc::bson_bytes::encoded_len;
use doc::compare::compare;
use query::Collation;
use std::collections::BTreeSet;
use std::sync::Arc;

pub fn count(shared: &Ctx<'_>, call: &Call, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?.killable(shared);
    let ns = namespace(cmd, "count")?;
    let (filter_doc, filter) = filter_of(cmd, "query", &query::expr::Scope::default())?;
    check_hint(shared, &ns, cmd)?;
    let filter = filter.with_collation(collation_of(shared, &ns, cmd)?);
    let skip = count_option(cmd, "skip")?.unwrap_or(0);
    if skip < 0 {
        return Err(CommandError::bad_value("skip value is negative in count query"));
    }
    let limit = count_option(cmd, "limit")?.unwrap_or(0).unsigned_abs() as usize;
    let mut n = 0usize;
    for hit in scan_hits(shared, &ns, (&filter_doc, &filter), cmd.get("hint"), &deadline, &call.op) {
        hit?;
        deadline.check()?;
        n += 1;
    }
    let mut n = n.saturating_sub(skip as usize);
    if limit > 0 {
        n = n.min(limit);
    }
    Ok(doc! { "n": n as i64, "ok": 1.0 })
}

pub fn distinct(shared: &Ctx<'_>, call: &Call, cmd: &Document) -> CommandResult {
    let deadline = Deadline::of(cmd)?.killable(shared);
    let ns = namespace(cmd, "distinct")?;
    let key = match cmd.get("key") {
        Some(Bson::String(k)) => k.clone(),
        Some(other) => return Err(crate::args::wrong_type("distinct.key", other, "string")),
        None => return Err(CommandError::failed_to_parse("BSON field 'distinct.key' is missing but a required field")),
    };
    if key.is_empty() {
        return Err(CommandError::invalid_distinct_key("FieldPath cannot be constructed with empty string"));
    }
    if key.split('.').any(str::is_empty) {
        return Err(CommandError::with_code(15998, "FieldPath field names may not be empty strings."));
    }
    if key.starts_with('$') {
        return Err(CommandError::with_code(16410, "FieldPath field names may not start with '$'."));
    }
    let (filter_doc, filter) = filter_of(cmd, "query", &query::expr::Scope::default())?;
    check_hint(shared, &ns, cmd)?;
    let collation = collation_of(shared, &ns, cmd)?;
    let filter = filter.with_collation(collation.clone());
    // Values equal by MongoDB's comparison (1 and 1.0; under a collation,
    // "a" and "A" at strength 2) count once, the first one met.
    let mut values: BTreeSet<Ordered> = BTreeSet::new();
    for hit in scan_hits(shared, &ns, (&filter_doc, &filter), cmd.get("hint"), &deadline, &call.op) {
        let hit = hit?;
        deadline.check()?;
        let d = hit.doc.document().map_err(doc::catalog::DocError::from)?;
        query::matcher::values_at(d, &key, &mut |v| {
            let value = Ordered(v.clone(), collation.clone());
            if !values.contains(&value) {
                values.insert(value);
            }
        });
    }
    let values: Vec<Bson> = values.into_iter().map(|o| o.0).collect();
    let reply = doc! { "values": values, "ok": 1.0 };
    if encoded_len(&reply) > bson_object_size_max_bytes {
        return Err(CommandError::with_code(17217, "distinct too big, 16mb cap"));
    }
    Ok(reply)
}

/// A value ordered by MongoDB's comparison, strings through its collation.
pub(crate) struct Ordered(pub(crate) Bson, Option<Arc<Collation>>);

impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match &self.1 {
            Some(c) => c.compare(&self.0, &other.0),
            None => compare(&self.0, &other.0),
        }
    }
}
