//! A document as a read found it: the record's bytes, decoded only when
//! something needs the whole document, and then once. A read that returns
//! documents as they are stored copies the bytes into its reply and never
//! builds a [`Document`]; a filter naming a few top-level fields decodes
//! only those ([`Stored::fields`]).
//!
//! Invariants:
//! 1. `bytes`, when present, are exactly a record as stored, which the
//!    write that stored it encoded from a [`Document`] (so they hold no
//!    duplicate keys); the page checksum vouches for them since.
//! 2. The decoded document, once made, is `bson_bytes::decode(bytes)`; a
//!    document handed in whole ([`Stored::owned`]) has no bytes.
//! 3. A partial decode keeps each field it keeps with the value and at the
//!    place a whole decode gives it.

use std::borrow::Cow;
use std::cell::OnceCell;

use bson::Document;
use storage::Bytes;

use crate::bson_bytes::{decode, decode_fields, encoded_len, DecodeError};

/// A stored document's bytes, or a document made elsewhere (a pipeline's
/// output, a projection), with its decoded form made on first use.
pub struct Stored {
    bytes: Option<Bytes>,
    decoded: OnceCell<Document>,
}

impl Stored {
    /// The record `bytes` as read from storage (invariant 1).
    pub fn read(bytes: Bytes) -> Stored {
        Stored { bytes: Some(bytes), decoded: OnceCell::new() }
    }

    /// A document that has no stored bytes.
    pub fn owned(doc: Document) -> Stored {
        Stored { bytes: None, decoded: OnceCell::from(doc) }
    }

    /// The stored bytes, if the document came from storage.
    pub fn bytes(&self) -> Option<&[u8]> {
        self.bytes.as_deref()
    }

    /// The document, decoded on first use.
    pub fn document(&self) -> Result<&Document, DecodeError> {
        if let Some(d) = self.decoded.get() {
            return Ok(d);
        }
        let bytes = self.bytes.as_ref().expect("a Stored has bytes or a document (invariant 2)");
        let doc = decode(bytes)?;
        Ok(self.decoded.get_or_init(|| doc))
    }

    /// The document if it is decoded already (or was handed in whole).
    pub fn decoded(&self) -> Option<&Document> {
        self.decoded.get()
    }

    /// The document, owned.
    pub fn into_document(self) -> Result<Document, DecodeError> {
        self.document()?;
        Ok(self.decoded.into_inner().expect("decoded above"))
    }

    /// The top-level fields `names` lists, as a whole decode would give
    /// them (invariant 3); the whole document when it is decoded already.
    pub fn fields(&self, names: &[String]) -> Result<Cow<'_, Document>, DecodeError> {
        match (self.decoded.get(), &self.bytes) {
            (Some(d), _) => Ok(Cow::Borrowed(d)),
            (None, Some(bytes)) => Ok(Cow::Owned(decode_fields(bytes, names)?)),
            (None, None) => unreachable!("a Stored has bytes or a document (invariant 2)"),
        }
    }

    /// The document's BSON size.
    pub fn size(&self) -> usize {
        match (&self.bytes, self.decoded.get()) {
            (Some(b), _) => b.len(),
            (None, Some(d)) => encoded_len(d),
            (None, None) => unreachable!("a Stored has bytes or a document (invariant 2)"),
        }
    }

    /// Hold bytes of its own, not a slice of a page's: for documents kept
    /// a while (a sort's buffer, a cursor between batches), which would
    /// otherwise keep whole pages in memory outside the cache's count.
    pub fn detach(&mut self) {
        if let Some(b) = &mut self.bytes {
            *b = Bytes::copy_from_slice(b);
        }
    }
}

impl From<Document> for Stored {
    fn from(doc: Document) -> Stored {
        Stored::owned(doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson_bytes::encode;
    use bson::doc;

    fn stored(d: &Document) -> Stored {
        Stored::read(Bytes::from(encode(d).unwrap()))
    }

    #[test]
    fn a_partial_decode_keeps_what_a_whole_decode_gives_in_its_place() {
        let d = doc! { "_id": 1, "s": "x".repeat(900), "a": { "b": [1, 2] }, "k": 7i64, "z": null };
        let s = stored(&d);
        let part = s.fields(&["k".to_string(), "a".to_string(), "missing".to_string()]).unwrap();
        assert_eq!(*part, doc! { "a": { "b": [1, 2] }, "k": 7i64 });
        assert!(s.decoded.get().is_none(), "a partial decode does not decode the whole");
        assert_eq!(s.document().unwrap(), &d);
        assert_eq!(*s.fields(&["k".to_string()]).unwrap(), d, "decoded already: the whole document");
        assert_eq!(s.size(), encode(&d).unwrap().len());
    }

    #[test]
    fn owned_documents_have_no_bytes_and_detaching_copies_them() {
        let d = doc! { "a": 1 };
        let owned = Stored::owned(d.clone());
        assert!(owned.bytes().is_none());
        assert_eq!(owned.size(), encode(&d).unwrap().len());
        let page = Bytes::from(encode(&doc! { "x": 1, "a": 1 }).unwrap());
        let mut kept = Stored::read(page.slice(..));
        kept.detach();
        assert_eq!(kept.bytes(), Some(&page[..]));
        assert_ne!(kept.bytes().unwrap().as_ptr(), page.as_ptr(), "its own copy");
        assert_eq!(kept.into_document().unwrap(), doc! { "x": 1, "a": 1 });
    }

    #[test]
    fn malformed_bytes_are_an_error_not_a_panic() {
        let s = Stored::read(Bytes::from_static(&[9, 0, 0, 0, 0x10, b'a', 0, 1, 0]));
        assert!(s.document().is_err());
        assert!(s.fields(&["a".to_string()]).is_err());
    }
}
