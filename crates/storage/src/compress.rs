//! Block compression of leaf pages, as WiredTiger's `block_compressor`: a
//! table option ([`Compressor`], default snappy). A leaf image is stored
//! compressed when that makes it smaller; internal pages, overflow values
//! and extent lists are stored as they are.
//!
//! A compressed payload is `[raw_len u32][compressed bytes]`; the block
//! header names the codec (`block.rs`), and the block checksum covers the
//! compressed bytes, so a torn or flipped block fails its checksum before
//! it is decompressed.
//!
//! Invariant: a payload that does not decompress to exactly `raw_len`
//! bytes, or claims more than a block may hold, is corruption; it is never
//! returned, and decompressing never allocates more than `raw_len`.

use crate::error::{Result, StorageError};
use crate::limits::block_size_max_bytes;
use std::path::Path;

/// How a table stores its leaf pages on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compressor {
    None,
    #[default]
    Snappy,
    Zstd,
}

impl std::str::FromStr for Compressor {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Compressor::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown block compressor {s:?} (none, snappy, zstd)"))
    }
}

/// zstd's level: its default, the balance WiredTiger's zstd also uses.
const ZSTD_LEVEL: i32 = 3;

impl Compressor {
    /// The codec byte of a block header (0: stored as is).
    pub fn to_u8(self) -> u8 {
        match self {
            Compressor::None => 0,
            Compressor::Snappy => 1,
            Compressor::Zstd => 2,
        }
    }

    pub fn from_u8(v: u8) -> Option<Compressor> {
        Some(match v {
            0 => Compressor::None,
            1 => Compressor::Snappy,
            2 => Compressor::Zstd,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Compressor::None => "none",
            Compressor::Snappy => "snappy",
            Compressor::Zstd => "zstd",
        }
    }

    pub const ALL: [Compressor; 3] = [Compressor::None, Compressor::Snappy, Compressor::Zstd];

    /// `payload` compressed (`[raw_len u32][bytes]`), or `None` when that
    /// would not make it smaller (or this is `Compressor::None`).
    pub fn compress(self, payload: &[u8]) -> Option<Vec<u8>> {
        let raw_len = u32::try_from(payload.len()).ok()?;
        let body = match self {
            Compressor::None => return None,
            Compressor::Snappy => snap::raw::Encoder::new().compress_vec(payload).ok()?,
            Compressor::Zstd => zstd::bulk::compress(payload, ZSTD_LEVEL).ok()?,
        };
        if body.len() + 4 >= payload.len() {
            return None;
        }
        let mut out = Vec::with_capacity(4 + body.len());
        out.extend_from_slice(&raw_len.to_le_bytes());
        out.extend_from_slice(&body);
        Some(out)
    }

    /// The payload a compressed block holds; `path` and `offset` name the
    /// block in a corruption error.
    pub fn decompress(self, stored: &[u8], path: &Path, offset: u64) -> Result<Vec<u8>> {
        let bad = |detail: String| StorageError::corruption(path, offset, detail);
        let (Some(len), Some(body)) = (stored.get(..4), stored.get(4..)) else {
            return Err(bad("compressed page shorter than its length prefix".into()));
        };
        let raw_len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        if raw_len as u64 > block_size_max_bytes {
            return Err(bad(format!("compressed page claims {raw_len} bytes, more than a block holds")));
        }
        let out = match self {
            Compressor::None => return Err(bad("a stored page marked compressed with no codec".into())),
            Compressor::Snappy => {
                let claimed = snap::raw::decompress_len(body).map_err(|e| bad(format!("snappy: {e}")))?;
                if claimed != raw_len {
                    return Err(bad(format!("snappy page holds {claimed} bytes, its prefix says {raw_len}")));
                }
                let mut out = vec![0u8; raw_len];
                let n =
                    snap::raw::Decoder::new().decompress(body, &mut out).map_err(|e| bad(format!("snappy: {e}")))?;
                out.truncate(n);
                out
            }
            Compressor::Zstd => zstd::bulk::decompress(body, raw_len).map_err(|e| bad(format!("zstd: {e}")))?,
        };
        if out.len() != raw_len {
            return Err(bad(format!("compressed page decompressed to {} bytes, its prefix says {raw_len}", out.len())));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Vec<u8> {
        (0..20_000u32).flat_map(|i| format!("key{:06}value{}", i / 3, i % 7).into_bytes()).take(30_000).collect()
    }

    #[test]
    fn round_trip_and_refusal_of_bad_input() {
        let path = Path::new("t.arb");
        for c in [Compressor::Snappy, Compressor::Zstd] {
            let raw = page();
            let stored = c.compress(&raw).expect("a repetitive page compresses");
            assert!(stored.len() < raw.len() / 2, "{}: {} -> {}", c.name(), raw.len(), stored.len());
            assert_eq!(c.decompress(&stored, path, 4096).unwrap(), raw);
            // A wrong length prefix, a cut body, garbage: corruption, never a panic.
            let mut wrong_len = stored.clone();
            wrong_len[0] ^= 1;
            assert!(matches!(c.decompress(&wrong_len, path, 4096), Err(StorageError::Corruption { .. })));
            assert!(matches!(
                c.decompress(&stored[..stored.len() / 2], path, 4096),
                Err(StorageError::Corruption { .. })
            ));
            assert!(matches!(c.decompress(&[1, 0, 0], path, 4096), Err(StorageError::Corruption { .. })));
            let mut huge = stored.clone();
            huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(matches!(c.decompress(&huge, path, 4096), Err(StorageError::Corruption { .. })));
            let garbage: Vec<u8> = [100u8, 0, 0, 0].into_iter().chain((0..200u8).map(|b| b.wrapping_mul(37))).collect();
            assert!(c.decompress(&garbage, path, 4096).is_err());
        }
        // Incompressible bytes stay as they are.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect();
        assert_eq!(Compressor::Snappy.compress(&noise), None);
        assert_eq!(Compressor::None.compress(&page()), None);
    }
}
