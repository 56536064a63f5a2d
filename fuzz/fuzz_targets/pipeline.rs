//! Aggregation: any BSON document as a pipeline (its `p` array, or the
//! document itself as one stage), run over sample documents with extreme
//! numbers, dates, strings and arrays. Parsing must refuse or accept
//! without panicking, and what parses must run (or fail) without
//! panicking: expressions, accumulators, `$sort`, `$group`, `$unwind`.
#![no_main]

use bson::{doc, Bson, Decimal128, Document};
use libfuzzer_sys::fuzz_target;
use query::{MemoryLimits, Pipeline};
use std::str::FromStr;

fn samples(spec: &Document) -> Vec<Document> {
    let dec = |s: &str| Bson::Decimal128(Decimal128::from_str(s).unwrap_or_else(|_| Decimal128::from_bytes([0; 16])));
    vec![
        doc! { "_id": 1, "a": 1, "b": [1, 2, { "c": "x" }], "d": { "e": [ { "f": 1.5 } ] }, "s": "héllo wörld" },
        doc! { "_id": 2, "a": i32::MAX, "b": i64::MIN, "c": f64::NAN, "d": f64::INFINITY, "e": -0.0, "n": null },
        doc! { "_id": 3, "a": dec("1E+6144"), "b": dec("-1E-6176"), "c": dec("NaN"), "d": dec("123.4500") },
        doc! { "_id": 4, "a": bson::DateTime::from_millis(i64::MAX), "b": bson::DateTime::from_millis(-62135596800001),
               "s": "", "arr": [], "nested": [[1, [2, [3]]], { "x": [] }] },
        doc! { "_id": 5, "a": -2147483648i32, "b": 9007199254740993i64, "s": "𝄞a\u{0}b", "t": bson::Timestamp { time: 1, increment: 2 } },
        spec.clone(),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = doc::bson_bytes::decode(data) else { return };
    let stages = match spec.get_array("p") {
        Ok(p) => p.clone(),
        Err(_) => vec![Bson::Document(spec.clone())],
    };
    let Ok(pipeline) = Pipeline::parse(&stages) else { return };
    // Small memory limits: `$sort` and `$group` refuse (no spilling here)
    // instead of growing.
    let pipeline = pipeline.with_memory_limits(Some(MemoryLimits { sort: 1 << 20, group: 1 << 20 }));
    let _ = pipeline.run(samples(&spec).into_iter());
});
