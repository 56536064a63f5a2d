//! MongoDB wire messages: the header, OP_MSG (body and document-sequence
//! sections, optional CRC-32C checksum), legacy OP_QUERY (which drivers use
//! for their first `hello`), and the replies (OP_MSG, OP_REPLY).
//!
//! Invariants:
//! 1. Parsing never panics and never reads past the message: every length
//!    is checked against what is left before it is used.
//! 2. A message is parsed whole or refused whole ([`WireError`]); nothing
//!    half-parsed reaches a command.

use crate::limits::*;
use bson::Document;
use std::sync::Arc;

pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_COMPRESSED: i32 = 2012;
pub const OP_MSG: i32 = 2013;

/// OP_MSG flag bits.
pub const CHECKSUM_PRESENT: u32 = 1;
pub const MORE_TO_COME: u32 = 1 << 1;
pub const EXHAUST_ALLOWED: u32 = 1 << 16;
/// Bits 0..16 must be understood by the receiver.
const REQUIRED_BITS: u32 = 0xffff;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("message length {0} is outside 16..={max}", max = message_size_max_bytes)]
    BadLength(i64),
    #[error("unsupported op code {0}")]
    UnsupportedOpCode(i32),
    #[error("message truncated: {0}")]
    Truncated(&'static str),
    #[error("unknown required OP_MSG flag bits {0:#x}")]
    UnknownFlags(u32),
    #[error("OP_MSG checksum mismatch: computed {computed:#010x}, message says {stated:#010x}")]
    Checksum { computed: u32, stated: u32 },
    #[error("OP_MSG has {0} body sections; exactly one is required")]
    BodyCount(usize),
    #[error("unknown OP_MSG section kind {0}")]
    SectionKind(u8),
    #[error("invalid BSON: {0}")]
    InvalidBson(String),
    #[error("BSON document of {0} bytes is larger than the maximum of {max}", max = bson_object_internal_max_bytes)]
    DocumentTooLarge(usize),
    #[error("OP_MSG sequence identifier is not a valid C string")]
    BadIdentifier,
    #[error("OP_COMPRESSED: {0}")]
    Compression(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub length: usize,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl Header {
    /// Parse and check the 16 header bytes.
    pub fn parse(b: &[u8; header_bytes]) -> Result<Header, WireError> {
        let length = i32::from_le_bytes(b[0..4].try_into().unwrap());
        if length < header_bytes as i32 || length as usize > message_size_max_bytes {
            return Err(WireError::BadLength(length.into()));
        }
        Ok(Header {
            length: length as usize,
            request_id: i32::from_le_bytes(b[4..8].try_into().unwrap()),
            response_to: i32::from_le_bytes(b[8..12].try_into().unwrap()),
            op_code: i32::from_le_bytes(b[12..16].try_into().unwrap()),
        })
    }
}

/// An OP_MSG: its flags, its body, and its document sequences (e.g. the
/// `documents` of an insert sent as a kind-1 section).
#[derive(Debug, Clone, PartialEq)]
pub struct OpMsg {
    pub flags: u32,
    pub body: Arc<Document>,
    pub sequences: Vec<(String, Vec<Document>)>,
}

/// A legacy OP_QUERY, accepted for the handshake only.
#[derive(Debug, Clone, PartialEq)]
pub struct OpQuery {
    pub flags: u32,
    pub collection: String,
    pub skip: i32,
    pub to_return: i32,
    pub query: Document,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Msg(OpMsg),
    Query(OpQuery),
}

/// A cursor over a message body that refuses to read past it.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated(what));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn cstring(&mut self) -> Result<String, WireError> {
        let end = self.b.iter().position(|&c| c == 0).ok_or(WireError::BadIdentifier)?;
        let s = std::str::from_utf8(&self.b[..end]).map_err(|_| WireError::BadIdentifier)?.to_string();
        self.b = &self.b[end + 1..];
        Ok(s)
    }

    /// One BSON document: its length prefix bounds it.
    fn document(&mut self) -> Result<Document, WireError> {
        if self.b.len() < 4 {
            return Err(WireError::Truncated("document length"));
        }
        let len = i32::from_le_bytes(self.b[..4].try_into().unwrap());
        if len < 5 || len as usize > self.b.len() {
            return Err(WireError::InvalidBson(format!("document length {len} does not fit the message")));
        }
        if len as usize > bson_object_internal_max_bytes {
            return Err(WireError::DocumentTooLarge(len as usize));
        }
        parse_document(self.take(len as usize, "document")?)
    }
}

/// Parse one whole BSON document (exactly `bytes`), checking its nesting,
/// as the client wrote it (no Extended JSON is interpreted: `doc::bson_bytes`).
pub fn parse_document(bytes: &[u8]) -> Result<Document, WireError> {
    doc::bson_bytes::decode_with_depth(bytes, bson_depth_max).map_err(|e| WireError::InvalidBson(e.to_string()))
}

/// Parse the message after its header (`body` is `header.length - 16` bytes).
pub fn parse(header: &Header, body: &[u8]) -> Result<Request, WireError> {
    assert_eq!(body.len() + header_bytes, header.length, "caller reads exactly the message");
    match header.op_code {
        OP_MSG => parse_msg(header, body).map(Request::Msg),
        OP_QUERY => parse_query(body).map(Request::Query),
        other => Err(WireError::UnsupportedOpCode(other)),
    }
}

fn parse_msg(header: &Header, body: &[u8]) -> Result<OpMsg, WireError> {
    let mut r = Reader { b: body };
    let flags = r.u32("flag bits")?;
    let unknown = flags & REQUIRED_BITS & !(CHECKSUM_PRESENT | MORE_TO_COME);
    if unknown != 0 {
        return Err(WireError::UnknownFlags(unknown));
    }
    if flags & CHECKSUM_PRESENT != 0 {
        if r.b.len() < 4 {
            return Err(WireError::Truncated("checksum"));
        }
        let (sections, sum) = r.b.split_at(r.b.len() - 4);
        let stated = u32::from_le_bytes(sum.try_into().unwrap());
        let mut digest = crc32c::crc32c(&header_bytes_of(header));
        digest = crc32c::crc32c_append(digest, &body[..4]);
        let computed = crc32c::crc32c_append(digest, sections);
        if computed != stated {
            return Err(WireError::Checksum { computed, stated });
        }
        r.b = sections;
    }
    let mut bodies = Vec::new();
    let mut sequences = Vec::new();
    while !r.b.is_empty() {
        let kind = r.take(1, "section kind")?[0];
        match kind {
            0 => bodies.push(r.document()?),
            1 => {
                let size = r.i32("sequence size")?;
                if size < 4 {
                    return Err(WireError::Truncated("document sequence"));
                }
                let mut seq = Reader { b: r.take(size as usize - 4, "document sequence")? };
                let id = seq.cstring()?;
                let mut docs = Vec::new();
                while !seq.b.is_empty() {
                    docs.push(seq.document()?);
                }
                sequences.push((id, docs));
            }
            k => return Err(WireError::SectionKind(k)),
        }
    }
    if bodies.len() != 1 {
        return Err(WireError::BodyCount(bodies.len()));
    }
    Ok(OpMsg { flags, body: bodies.pop().unwrap().into(), sequences })
}

fn header_bytes_of(h: &Header) -> [u8; header_bytes] {
    let mut b = [0u8; header_bytes];
    b[0..4].copy_from_slice(&(h.length as i32).to_le_bytes());
    b[4..8].copy_from_slice(&h.request_id.to_le_bytes());
    b[8..12].copy_from_slice(&h.response_to.to_le_bytes());
    b[12..16].copy_from_slice(&h.op_code.to_le_bytes());
    b
}

fn parse_query(body: &[u8]) -> Result<OpQuery, WireError> {
    let mut r = Reader { b: body };
    let flags = r.u32("flags")?;
    let collection = r.cstring()?;
    let skip = r.i32("numberToSkip")?;
    let to_return = r.i32("numberToReturn")?;
    let query = r.document()?;
    // An optional field selector may follow; the handshake has none we use.
    Ok(OpQuery { flags, collection, skip, to_return, query })
}

/// An OP_MSG reply holding `doc`.
pub fn encode_msg(request_id: i32, response_to: i32, doc: &Document) -> Vec<u8> {
    encode_msg_flags(request_id, response_to, 0, doc)
}

/// An OP_MSG reply with flag bits (e.g. `MORE_TO_COME` in an exhaust stream).
pub fn encode_msg_flags(request_id: i32, response_to: i32, flags: u32, doc: &Document) -> Vec<u8> {
    let mut out = frame(request_id, response_to, OP_MSG);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    write_reply_document(&mut out, doc);
    finish(out)
}

/// A reply's document; one that BSON cannot hold (a field name with a null
/// byte, built by an expression) becomes an error reply instead.
fn write_reply_document(out: &mut Vec<u8>, doc: &Document) {
    let bytes = doc::bson_bytes::encode(doc).unwrap_or_else(|e| {
        let error = crate::error::CommandError::bad_value(e.to_string()).to_document();
        doc::bson_bytes::encode(&error).expect("an error reply encodes")
    });
    out.extend_from_slice(&bytes);
}

/// An OP_MSG holding a command's reply, with flag bits.
pub fn encode_msg_reply(request_id: i32, response_to: i32, flags: u32, reply: &crate::reply::Reply) -> Vec<u8> {
    match reply {
        crate::reply::Reply::Doc(d) => encode_msg_flags(request_id, response_to, flags, d),
        crate::reply::Reply::Bytes(b) => encode_msg_raw(request_id, response_to, flags, b),
    }
}

/// An OP_MSG reply holding the already encoded document `doc`.
pub fn encode_msg_raw(request_id: i32, response_to: i32, flags: u32, doc: &[u8]) -> Vec<u8> {
    let mut out = frame(request_id, response_to, OP_MSG);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    out.extend_from_slice(doc);
    finish(out)
}

/// An OP_REPLY holding `doc` (the answer to a legacy OP_QUERY).
pub fn encode_reply(request_id: i32, response_to: i32, doc: &Document) -> Vec<u8> {
    let mut out = frame(request_id, response_to, OP_REPLY);
    out.extend_from_slice(&0u32.to_le_bytes()); // responseFlags
    out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
    out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    write_reply_document(&mut out, doc);
    finish(out)
}

fn frame(request_id: i32, response_to: i32, op_code: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&response_to.to_le_bytes());
    out.extend_from_slice(&op_code.to_le_bytes());
    out
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let len = out.len() as i32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn split(msg: &[u8]) -> (Header, &[u8]) {
        let h = Header::parse(msg[..16].try_into().unwrap()).unwrap();
        (h, &msg[16..])
    }

    #[test]
    fn an_op_msg_round_trips() {
        let d = doc! { "ping": 1, "$db": "admin" };
        let msg = encode_msg(7, 3, &d);
        let (h, body) = split(&msg);
        assert_eq!((h.request_id, h.response_to, h.op_code, h.length), (7, 3, OP_MSG, msg.len()));
        assert_eq!(parse(&h, body).unwrap(), Request::Msg(OpMsg { flags: 0, body: d.into(), sequences: vec![] }));
    }

    fn msg_with(flags: u32, sections: &[u8], checksum: bool) -> Vec<u8> {
        let mut m = frame(1, 0, OP_MSG);
        m.extend_from_slice(&flags.to_le_bytes());
        m.extend_from_slice(sections);
        if checksum {
            let len = (m.len() + 4) as i32;
            m[0..4].copy_from_slice(&len.to_le_bytes());
            let sum = crc32c::crc32c(&m);
            m.extend_from_slice(&sum.to_le_bytes());
            m
        } else {
            finish(m)
        }
    }

    fn body_section(d: &Document) -> Vec<u8> {
        let mut s = vec![0u8];
        s.extend(doc::bson_bytes::encode(d).unwrap());
        s
    }

    #[test]
    fn document_sequences_and_checksums_parse() {
        let mut sections = body_section(&doc! { "insert": "c", "$db": "test" });
        let docs = [doc! { "_id": 1 }, doc! { "_id": 2 }];
        let mut seq = b"documents\0".to_vec();
        for d in &docs {
            seq.extend(doc::bson_bytes::encode(d).unwrap());
        }
        sections.push(1);
        sections.extend_from_slice(&((seq.len() + 4) as i32).to_le_bytes());
        sections.extend_from_slice(&seq);
        let m = msg_with(CHECKSUM_PRESENT, &sections, true);
        let (h, body) = split(&m);
        let Request::Msg(msg) = parse(&h, body).unwrap() else { panic!() };
        assert_eq!(msg.sequences, vec![("documents".to_string(), docs.to_vec())]);
        // One flipped bit fails the checksum.
        let mut bad = m.clone();
        bad[25] ^= 1;
        let (h, body) = split(&bad);
        assert!(matches!(parse(&h, body), Err(WireError::Checksum { .. })));
    }

    #[test]
    fn malformed_messages_are_refused() {
        let ok = body_section(&doc! { "ping": 1 });
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (msg_with(1 << 5, &ok, false), "unknown required flag"),
            (msg_with(0, &[], false), "no body"),
            (msg_with(0, &[ok.clone(), ok.clone()].concat(), false), "two bodies"),
            (msg_with(0, &[7, 0, 0, 0], false), "unknown section kind"),
            (msg_with(0, &ok[..ok.len() - 1], false), "truncated document"),
            (msg_with(0, &[0, 5, 0, 0, 0, 1], false), "bad terminator"),
            (msg_with(0, &[0, 0xff, 0xff, 0xff, 0x7f, 0], false), "huge length"),
            (msg_with(0, &[1, 2, 0, 0, 0], false), "sequence shorter than its size"),
            (msg_with(CHECKSUM_PRESENT, &ok, false), "checksum flag without checksum bytes that match"),
        ];
        for (m, what) in cases {
            let (h, body) = split(&m);
            assert!(parse(&h, body).is_err(), "{what} was accepted");
        }
        assert!(Header::parse(&[4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 7, 0, 0]).is_err());
        assert!(Header::parse(&[0, 0, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 7, 0, 0]).is_err());
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |levels: usize| {
            let mut d = doc! { "x": { "$numberLong": "5" } };
            for _ in 2..levels {
                d = doc! { "x": d };
            }
            let mut bytes = Vec::new();
            bytes.extend(doc::bson_bytes::encode(&d).unwrap());
            bytes
        };
        assert!(parse_document(&nested(bson_depth_max)).is_ok());
        let too_deep = parse_document(&nested(bson_depth_max + 1));
        assert!(matches!(too_deep, Err(WireError::InvalidBson(m)) if m.contains("nesting")));
    }

    #[test]
    fn a_legacy_query_parses() {
        let mut m = frame(5, 0, OP_QUERY);
        m.extend_from_slice(&0u32.to_le_bytes());
        m.extend_from_slice(b"admin.$cmd\0");
        m.extend_from_slice(&0i32.to_le_bytes());
        m.extend_from_slice(&(-1i32).to_le_bytes());
        m.extend(doc::bson_bytes::encode(&doc! { "isMaster": 1 }).unwrap());
        let m = finish(m);
        let (h, body) = split(&m);
        let Request::Query(q) = parse(&h, body).unwrap() else { panic!() };
        assert_eq!((q.collection.as_str(), q.to_return), ("admin.$cmd", -1));
        assert_eq!(q.query, doc! { "isMaster": 1 });
    }
}
