//! The access-path seam: how a read reaches its documents, decided from the
//! parsed request alone. Every read asks here — `find`, `count`,
//! `distinct`, `aggregate` (from its leading `$match`), the update and
//! delete statements (update, delete, findAndModify, bulkWrite) and the
//! point-read fast path — and carries out the answer in
//! `server/exec/access.rs`.
//!
//! Today there are two paths: the `_id` index for a filter that pins one
//! `_id` ([`AccessPath::IdPoint`]) and the collection scan. Secondary index
//! scans, index unions (`$or`) and intersections are further variants of
//! [`AccessPath`], chosen here from the indexes a [`ReadShape`] will list.
//!
//! Invariants:
//! 1. Pure: no I/O, no catalog; the caller states what it knows about the
//!    collection in the [`ReadShape`].
//! 2. Any path returns exactly the documents a collection scan filtered by
//!    the same filter would (the executor still applies the filter); a path
//!    only narrows which documents are looked at.

use bson::{Bson, Document};

/// What the planner needs to know about one read.
#[derive(Debug, Clone, Copy)]
pub struct ReadShape<'a> {
    pub filter: &'a Document,
    /// The read's collation compares strings as the collection's `_id`
    /// index does (both binary, or the same collation).
    pub id_index_collation_matches: bool,
    /// A tailable cursor follows the collection's natural order.
    pub tailable: bool,
}

/// How to reach the documents of a read.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessPath<'a> {
    /// At most one document: the `_id` index entry of this value.
    IdPoint(&'a Bson),
    /// Every document, in natural order (reversed when `reverse`; the
    /// caller sets it from a `$natural` order: the planner does not take
    /// one yet, as a `{_id: v}` read is answered by the index either way).
    CollScan { reverse: bool },
}

/// Choose the access path of `shape`.
pub fn plan<'a>(shape: &ReadShape<'a>) -> AccessPath<'a> {
    let scan = AccessPath::CollScan { reverse: false };
    if shape.tailable {
        return scan;
    }
    match crate::Filter::id_equality(shape.filter) {
        // The index finds a string `_id` only under its own collation.
        Some(id) if shape.id_index_collation_matches || !holds_string(id) => AccessPath::IdPoint(id),
        _ => scan,
    }
}

fn holds_string(v: &Bson) -> bool {
    match v {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(d) => d.values().any(holds_string),
        Bson::Array(items) => items.iter().any(holds_string),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn check(filter: Document, matches: bool, tailable: bool) -> String {
        let shape = ReadShape { filter: &filter, id_index_collation_matches: matches, tailable };
        format!("{:?}", plan(&shape))
    }

    #[test]
    fn an_id_equality_is_a_point_read() {
        assert_eq!(check(doc! { "_id": 5 }, true, false), "IdPoint(Int32(5))");
        assert_eq!(check(doc! { "_id": "a" }, true, false), "IdPoint(String(\"a\"))");
        assert_eq!(check(doc! { "_id": 1.5 }, false, false), "IdPoint(Double(1.5))");
    }

    #[test]
    fn anything_else_scans() {
        assert_eq!(check(doc! { "_id": { "$gt": 5 } }, true, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": 5, "a": 1 }, true, false), "CollScan { reverse: false }");
        // A document `_id` is matched by a scan (`Filter::id_equality`).
        assert_eq!(check(doc! { "_id": { "x": 1 } }, true, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": 5 }, true, true), "CollScan { reverse: false }");
    }

    /// Under another collation than the index's, a string `_id` may equal
    /// keys the index holds apart (or the reverse): scan.
    #[test]
    fn a_string_id_under_another_collation_scans() {
        assert_eq!(check(doc! { "_id": "a" }, false, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": ["a"] }, false, false), "CollScan { reverse: false }");
        assert_eq!(check(doc! { "_id": 1 }, false, false), "IdPoint(Int32(1))");
    }
}
