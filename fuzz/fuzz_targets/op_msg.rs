//! The wire frame parser: header, OP_COMPRESSED, OP_MSG sections and
//! checksum, OP_QUERY. Any input must give a request or an error, never a
//! panic, a hang or an out-of-bounds read; a parsed body round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use server::limits::header_bytes;
use server::net::wire::{self, Header};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<{ header_bytes }>() else { return };
    let Ok(mut header) = Header::parse(head) else { return };
    // The server reads exactly `length` bytes; feed what the input has.
    header.length = body.len() + header_bytes;
    if header.op_code == wire::OP_COMPRESSED {
        if let Ok((op_code, inner, _)) = server::net::compression::decompress(body) {
            let inner_header = Header { op_code, length: inner.len() + header_bytes, ..header };
            let _ = wire::parse(&inner_header, &inner);
        }
        return;
    }
    if let Ok(wire::Request::Msg(msg)) = wire::parse(&header, body) {
        // What parses writes back and reads again as the same document
        // (doc::bson_bytes, invariant 4).
        // Bytes compared, not documents: NaN is not equal to itself.
        let bytes = doc::bson_bytes::encode(&msg.body).expect("a decoded document encodes");
        let again = doc::bson_bytes::decode(&bytes).expect("its own bytes decode");
        assert_eq!(doc::bson_bytes::encode(&again).expect("encodes"), bytes);
    }
});
