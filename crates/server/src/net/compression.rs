//! OP_COMPRESSED: snappy, zstd and zlib (and noop), negotiated in `hello`.
//!
//! A compressed message is `[header][original op code][uncompressed size]
//! [compressor id][compressed bytes]`. We answer a compressed request with
//! a reply compressed the same way, as mongod does.
//!
//! Invariant: decompression never produces more than the size the message
//! states, and that size is bounded by `message_size_max_bytes`.

use crate::limits::*;
use crate::net::wire::WireError;
use crate::net::wire::OP_COMPRESSED;
use std::io::Read;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    Noop,
    Snappy,
    Zlib,
    Zstd,
}

impl Compressor {
    pub fn from_id(id: u8) -> Option<Compressor> {
        Some(match id {
            0 => Compressor::Noop,
            1 => Compressor::Snappy,
            2 => Compressor::Zlib,
            3 => Compressor::Zstd,
            _ => return None,
        })
    }

    pub fn id(self) -> u8 {
        match self {
            Compressor::Noop => 0,
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }

    /// The names `hello` negotiates (noop is never named).
    pub fn from_name(name: &str) -> Option<Compressor> {
        Some(match name {
            "snappy" => Compressor::Snappy,
            "zlib" => Compressor::Zlib,
            "zstd" => Compressor::Zstd,
            _ => return None,
        })
    }

    fn compress(self, data: &[u8]) -> Vec<u8> {
        match self {
            Compressor::Noop => data.to_vec(),
            Compressor::Snappy => snap::raw::Encoder::new().compress_vec(data).expect("snappy compresses any input"),
            Compressor::Zlib => {
                use std::io::Write;
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).expect("writing to a Vec cannot fail");
                e.finish().expect("writing to a Vec cannot fail")
            }
            Compressor::Zstd => zstd::bulk::compress(data, 1).expect("zstd compresses any input"),
        }
    }

    fn decompress(self, data: &[u8], size: usize) -> Result<Vec<u8>, WireError> {
        let bad = |e: String| WireError::Compression(format!("{self:?}: {e}"));
        let out = match self {
            Compressor::Noop => data.to_vec(),
            Compressor::Snappy => {
                let n = snap::raw::decompress_len(data).map_err(|e| bad(e.to_string()))?;
                if n != size {
                    return Err(bad(format!("decompresses to {n} bytes, the message says {size}")));
                }
                snap::raw::Decoder::new().decompress_vec(data).map_err(|e| bad(e.to_string()))?
            }
            Compressor::Zlib => {
                let mut out = Vec::with_capacity(size);
                flate2::read::ZlibDecoder::new(data)
                    .take(size as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| bad(e.to_string()))?;
                out
            }
            Compressor::Zstd => zstd::bulk::decompress(data, size).map_err(|e| bad(e.to_string()))?,
        };
        if out.len() != size {
            return Err(bad(format!("decompressed {} bytes, the message says {size}", out.len())));
        }
        Ok(out)
    }
}

/// The client's compressors we support, in the client's order.
pub fn negotiate(client: &[String]) -> Vec<String> {
    client.iter().filter(|n| Compressor::from_name(n).is_some()).cloned().collect()
}

/// Unwrap an OP_COMPRESSED body: (original op code, the uncompressed
/// message body, the compressor).
pub fn decompress(body: &[u8]) -> Result<(i32, Vec<u8>, Compressor), WireError> {
    if body.len() < 9 {
        return Err(WireError::Truncated("OP_COMPRESSED header"));
    }
    let op = i32::from_le_bytes(body[0..4].try_into().unwrap());
    let size = i32::from_le_bytes(body[4..8].try_into().unwrap());
    if size < 0 || size as usize > message_size_max_bytes - header_bytes {
        return Err(WireError::Compression(format!("uncompressed size {size} is out of range")));
    }
    if op == OP_COMPRESSED {
        return Err(WireError::Compression("a compressed message cannot hold another".into()));
    }
    let c = Compressor::from_id(body[8])
        .ok_or_else(|| WireError::Compression(format!("unknown compressor id {}", body[8])))?;
    let out = c.decompress(&body[9..], size as usize)?;
    Ok((op, out, c))
}

/// Wrap an encoded message (header included) as OP_COMPRESSED with `c`.
pub fn compress(message: &[u8], c: Compressor) -> Vec<u8> {
    assert!(message.len() >= header_bytes, "a whole message");
    let (head, body) = message.split_at(header_bytes);
    let packed = c.compress(body);
    let mut out = Vec::with_capacity(header_bytes + 9 + packed.len());
    out.extend_from_slice(&((header_bytes + 9 + packed.len()) as i32).to_le_bytes());
    out.extend_from_slice(&head[4..12]); // request id, response to
    out.extend_from_slice(&OP_COMPRESSED.to_le_bytes());
    out.extend_from_slice(&head[12..16]); // original op code
    out.extend_from_slice(&(body.len() as i32).to_le_bytes());
    out.push(c.id());
    out.extend_from_slice(&packed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::wire::{encode_msg, Header, OP_MSG};
    use bson::doc;

    #[test]
    fn every_compressor_round_trips_a_message() {
        let msg = encode_msg(3, 1, &doc! { "ping": 1, "pad": "x".repeat(1000) });
        for c in [Compressor::Noop, Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let packed = compress(&msg, c);
            let h = Header::parse(packed[..16].try_into().unwrap()).unwrap();
            assert_eq!((h.op_code, h.length, h.request_id), (OP_COMPRESSED, packed.len(), 3));
            let (op, body, used) = decompress(&packed[16..]).unwrap();
            assert_eq!((op, used), (OP_MSG, c));
            assert_eq!(body, msg[16..]);
        }
    }

    #[test]
    fn lying_or_garbage_compressed_messages_are_refused() {
        let msg = encode_msg(3, 1, &doc! { "ping": 1 });
        for c in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let mut packed = compress(&msg, c);
            // Claim one byte more than the real size.
            let size = i32::from_le_bytes(packed[20..24].try_into().unwrap()) + 1;
            packed[20..24].copy_from_slice(&size.to_le_bytes());
            assert!(decompress(&packed[16..]).is_err(), "{c:?} accepted a wrong size");
            let mut garbage = compress(&msg, c);
            let n = garbage.len();
            for b in &mut garbage[25..n] {
                *b ^= 0x5a;
            }
            assert!(decompress(&garbage[16..]).is_err(), "{c:?} accepted garbage");
        }
        assert!(decompress(&[1, 2, 3]).is_err());
        let mut huge = compress(&msg, Compressor::Zstd);
        huge[20..24].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(decompress(&huge[16..]).is_err());
        let mut unknown = compress(&msg, Compressor::Zstd);
        unknown[24] = 9;
        assert!(decompress(&unknown[16..]).is_err());
    }

    #[test]
    fn negotiation_keeps_the_clients_order() {
        let client: Vec<String> = ["zstd", "lz4", "snappy"].iter().map(|s| s.to_string()).collect();
        assert_eq!(negotiate(&client), vec!["zstd".to_string(), "snappy".to_string()]);
    }
}
