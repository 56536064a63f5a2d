//! The query language: any BSON document as a filter, an update and a
//! projection. Parsing must refuse or accept without panicking, and what
//! parses must evaluate on sample documents without panicking.
#![no_main]

use bson::doc;
use libfuzzer_sys::fuzz_target;
use query::{Filter, Projection, Sort, Update};

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = doc::bson_bytes::decode(data) else { return };
    let samples = [
        doc! { "_id": 1, "a": 1, "b": [1, 2, { "c": "x" }], "d": { "e": [ { "f": 1.5 } ] } },
        doc! { "_id": 2, "a": [[1], []], "s": "hello", "n": null, "bits": 255i64 },
        spec.clone(),
    ];
    if let Ok(f) = Filter::parse(&spec) {
        for d in &samples {
            let _ = f.matches_at(d);
        }
    }
    if let Ok(u) = Update::parse(&spec, &[]) {
        for d in &samples {
            let _ = u.apply(d, Some(0), false);
        }
        let _ = u.upsert_document(&spec);
    }
    if let Ok(p) = Projection::parse(&spec) {
        for d in &samples {
            let _ = p.apply(d, Some(1));
        }
    }
    if let Ok(s) = Sort::parse(&spec) {
        let mut docs = samples.to_vec();
        s.sort(&mut docs);
    }
});
