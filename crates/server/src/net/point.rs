//! The point-read fast path: a `find` of exactly `{_id: <value>}` that asks
//! for nothing else (what drivers send for `find_one({_id: …})`, and YCSB's
//! read) is answered from the raw message bytes and the stored document
//! bytes, without building a `Document` for the command, the stored record
//! or the reply.
//!
//! Invariants:
//! 1. The fast path answers only what the general `find` would answer with
//!    the same bytes: one section, no flags, the known fields below, a
//!    scalar `_id`, a batch that closes the cursor. Anything else (including
//!    anything malformed) returns `None`, and the general path — which owns
//!    every error message — runs on the same message.
//! 2. It reads the whole command, bounded in depth, before it answers, so
//!    it accepts nothing the general parser would refuse.

use crate::commands::cluster_time_fields;
use crate::net::wire;
use crate::net::wire::Header;
use crate::server::Shared;
use bson::raw::{RawArrayBuf, RawBsonRef, RawDocument, RawDocumentBuf};
use bson::Bson;
use doc::catalog::Namespace;
use query::plan::{AccessPath, ReadShape};
use std::sync::atomic::Ordering;

/// The deepest command the fast path accepts (`$clusterTime.signature.hash`).
const DEPTH_MAX: usize = 3;

/// The reply message to an OP_MSG `find` by `_id`, or `None` when the
/// general path must answer it.
pub fn find_by_id(shared: &Shared, header: &Header, body: &[u8]) -> Option<Vec<u8>> {
    if header.op_code != wire::OP_MSG || body.len() < 5 || body[..4] != [0, 0, 0, 0] || body[4] != 0 {
        return None;
    }
    let cmd = RawDocument::from_bytes(&body[5..]).ok()?;
    if cmd.as_bytes().len() != body.len() - 5 {
        return None;
    }
    let mut elements = cmd.into_iter();
    let (first, coll) = elements.next()?.ok()?;
    let (RawBsonRef::String(coll), "find") = (coll, first) else { return None };
    let started = std::time::Instant::now();
    // Whatever the limit and singleBatch, at most one document matches and
    // the first batch (up to 101 by default) ends the cursor.
    let (mut db, mut id, mut lsid) = (None, None, None);
    for element in elements {
        let (key, value) = element.ok()?;
        match (key, value) {
            ("filter", RawBsonRef::Document(filter)) => id = Some(id_of(filter)?),
            ("limit", RawBsonRef::Int32(n)) if n >= 1 => {}
            ("limit", RawBsonRef::Int64(n)) if n >= 1 => {}
            ("singleBatch", RawBsonRef::Boolean(_)) => {}
            ("$db", RawBsonRef::String(d)) => db = Some(d),
            // A well-formed session id (anything else is the general
            // path's error to report, `session.rs`).
            ("lsid", RawBsonRef::Document(session)) => lsid = Some(session_id(session)?),
            // Gossip fields the general path ignores too.
            ("$clusterTime" | "$readPreference", RawBsonRef::Document(_)) => {}
            _ => return None,
        }
    }
    // Invariant 2, once the command looks like a point read (any other
    // `find` leaves at its first unexpected field above).
    if !depth_within(&mut cmd.into_iter().map(|e| e.map(|(_, v)| v)), DEPTH_MAX) {
        return None;
    }
    // A profiled read writes its entry on the general path.
    if shared.profiler.any() {
        return None;
    }
    let ns = Namespace::new(db?, coll).ok()?;
    let coll = shared.catalog.get(&ns).filter(|c| c.view_on().is_none())?;
    // The planner decides, as for every read: with no `collation` in the
    // command the collection's default applies, which its `_id` index
    // applies too unless the collection was made before it did.
    let filter = bson::doc! { "_id": id? };
    let id_index_collation_matches = !coll.options.contains_key("collation") || coll.id_collation().is_some();
    // A `{_id: v}` filter is a point read whatever the other indexes.
    let shape = ReadShape {
        filter: &filter,
        id_index_collation_matches,
        tailable: false,
        indexes: &[],
        hint: query::plan::Hint::None,
        projection: None,
        min_max: None,
        sort: None,
    };
    let AccessPath::IdPoint(id) = query::plan::plan(&shape) else { return None };
    let found = coll.find_raw_by_id(shared.catalog.engine(), id).ok()?;
    crate::exec::access::note_point_access(&coll);
    if let Some(lsid) = lsid {
        shared.sessions.vivify(lsid).ok()?;
    }
    shared.opcounters.command.fetch_add(1, Ordering::Relaxed);
    shared.opcounters.query.fetch_add(1, Ordering::Relaxed);
    shared.opcounters.point_reads.fetch_add(1, Ordering::Relaxed);
    let mut batch = RawArrayBuf::new();
    let n = i64::from(found.is_some());
    if let Some((_, bytes)) = found {
        batch.push(RawDocumentBuf::from_bytes(bytes.to_vec()).ok()?);
    }
    let mut cursor = RawDocumentBuf::new();
    cursor.append("firstBatch", batch);
    cursor.append("id", 0i64);
    cursor.append("ns", ns.to_string());
    let mut reply = RawDocumentBuf::new();
    reply.append("cursor", cursor);
    reply.append("ok", 1.0);
    for (key, value) in cluster_time_fields(crate::commands::cluster_time(shared), None) {
        reply.append(key, bson::RawBson::try_from(value).ok()?);
    }
    // As every command, logged when slow (decoded only then).
    let took = started.elapsed();
    if crate::commands::is_slow(shared, took) {
        if let Ok(cmd) = doc::bson_bytes::decode(cmd.as_bytes()) {
            let metrics = bson::doc! {
                "keysExamined": n, "docsExamined": n, "nreturned": n, "writeConflicts": 0_i64, "numYield": 0_i64,
                "planSummary": "EXPRESS_IDHACK",
            };
            crate::profiler::log_slow(&cmd, &metrics, took, None);
        }
    }
    Some(wire::encode_msg_raw(shared.request_id(), header.request_id, 0, reply.as_bytes()))
}

/// The `_id` of a filter that is exactly `{_id: <scalar>}` (as
/// `Filter::id_equality` decides for a decoded filter).
fn id_of(filter: &RawDocument) -> Option<Bson> {
    let mut elements = filter.into_iter();
    let (key, value) = elements.next()?.ok()?;
    if key != "_id" || elements.next().is_some() {
        return None;
    }
    match value {
        RawBsonRef::Document(_) | RawBsonRef::Array(_) | RawBsonRef::RegularExpression(_) => None,
        RawBsonRef::JavaScriptCodeWithScope(_) | RawBsonRef::DbPointer(_) => None,
        v => Bson::try_from(v.to_raw_bson()).ok(),
    }
}

/// Walks every value (which checks it is well formed) and whether none
/// nests deeper than `max` levels.
fn depth_within<'a>(values: &mut dyn Iterator<Item = bson::raw::Result<RawBsonRef<'a>>>, max: usize) -> bool {
    if max == 0 {
        return false;
    }
    for value in values {
        let within = match value {
            Ok(RawBsonRef::Document(inner)) => depth_within(&mut inner.into_iter().map(|e| e.map(|(_, v)| v)), max - 1),
            Ok(RawBsonRef::Array(inner)) => depth_within(&mut inner.into_iter(), max - 1),
            Ok(_) => true,
            Err(_) => false,
        };
        if !within {
            return false;
        }
    }
    true
}

/// The session id of an `lsid` as `session::session_fields` accepts it:
/// `id` a 16-byte UUID.
fn session_id(lsid: &bson::RawDocument) -> Option<doc::sessions::SessionId> {
    match lsid.get("id") {
        Ok(Some(RawBsonRef::Binary(b))) if b.subtype == bson::spec::BinarySubtype::Uuid => b.bytes.try_into().ok(),
        _ => None,
    }
}
