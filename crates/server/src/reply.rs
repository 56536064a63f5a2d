//! A command's reply: a document, or BSON already written. A cursor's
//! batch of stored documents is written as the bytes that were read
//! (`exec/cursors.rs` `cursor_reply`), so a read that returns documents as
//! they are stored never decodes them.
//!
//! Invariant: a `Bytes` reply is one whole, well-formed BSON document
//! (`doc::bson_bytes::Writer` wrote it).

use bson::raw::RawDocument;
use bson::{Bson, Document};

pub enum Reply {
    Doc(Document),
    Bytes(Vec<u8>),
}

impl From<Document> for Reply {
    fn from(d: Document) -> Reply {
        Reply::Doc(d)
    }
}

impl Reply {
    /// Add the field `key` at the end (a field the reply does not have).
    pub fn append(&mut self, key: &str, value: Bson) {
        match self {
            Reply::Doc(d) => {
                d.insert(key, value);
            }
            Reply::Bytes(b) => doc::bson_bytes::append_field(b, key, &value).expect("reply field names hold no NUL"),
        }
    }

    /// The reply as a document (decoding a written one: for the rare paths
    /// that amend a reply, and tests).
    pub fn into_document(self) -> Document {
        match self {
            Reply::Doc(d) => d,
            Reply::Bytes(b) => doc::bson_bytes::decode(&b).expect("a written reply decodes (invariant)"),
        }
    }

    /// A cursor reply's cursor id and whether its batch is empty.
    pub fn cursor(&self) -> Option<(i64, bool)> {
        match self {
            Reply::Doc(d) => {
                let c = d.get_document("cursor").ok()?;
                let batch = c.get_array("firstBatch").or_else(|_| c.get_array("nextBatch")).ok()?;
                Some((c.get_i64("id").ok()?, batch.is_empty()))
            }
            Reply::Bytes(b) => {
                let c = RawDocument::from_bytes(b).ok()?.get_document("cursor").ok()?;
                let batch = c.get_array("firstBatch").or_else(|_| c.get_array("nextBatch")).ok()?;
                Some((c.get_i64("id").ok()?, batch.into_iter().next().is_none()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn both_forms_answer_alike() {
        let d = doc! { "cursor": { "nextBatch": [{ "a": 1 }], "id": 7i64, "ns": "db.c" }, "ok": 1.0 };
        let mut written = Reply::Bytes(doc::bson_bytes::encode(&d).unwrap());
        let mut plain = Reply::Doc(d);
        assert_eq!(written.cursor(), Some((7, false)));
        assert_eq!(plain.cursor(), Some((7, false)));
        written.append("operationTime", Bson::Int32(3));
        plain.append("operationTime", Bson::Int32(3));
        assert_eq!(written.into_document(), plain.into_document());
        let empty = Reply::Doc(doc! { "cursor": { "firstBatch": [], "id": 0i64 } });
        assert_eq!(empty.cursor(), Some((0, true)));
        assert_eq!(Reply::Doc(doc! { "ok": 1 }).cursor(), None);
    }
}
