//! A data set ten times the cache, in a process of its own so its peak
//! resident set (VmHWM) is the engine's: load, random reads and updates,
//! random inserts (leaves read back from disk split), checkpoint, reopen
//! and check every key. The peak must stay within the
//! cache size plus the documented overhead (ARCHITECTURE.md, "Cache"):
//! `peak RSS <= baseline + 1.5 x cache + 16 MiB`, where the baseline is the
//! process before the engine opens, the 1.5 covers the estimate's error and
//! the bursts over the trigger, and 16 MiB covers the journal buffer,
//! allocator slack and key-version tables.

use std::process::Command;

const MIB: u64 = 1024 * 1024;

#[test]
fn peak_memory_stays_within_the_cache_for_ten_times_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let cache = 16 * MIB;
    // ~105 bytes a key on disk: a little over 10x the cache.
    let keys = 1_600_000u64;
    let out = Command::new(env!("CARGO_BIN_EXE_cache_rss"))
        .arg(dir.path())
        .arg(cache.to_string())
        .arg(keys.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let get = |name: &str| -> u64 {
        let i = fields.iter().position(|f| *f == name).unwrap_or_else(|| panic!("no {name} in {line}"));
        fields[i + 1].parse().unwrap()
    };
    let (baseline, peak) = (get("rss_baseline_kib") * 1024, get("rss_peak_kib") * 1024);
    let (meter_peak, data, evicted) = (get("meter_peak_bytes"), get("data_bytes"), get("evicted"));
    eprintln!(
        "cache {} MiB, data {} MiB on disk ({:.1}x), peak RSS {} MiB over a baseline of {} MiB, cache meter peak {} MiB, {evicted} pages evicted",
        cache / MIB,
        data / MIB,
        data as f64 / cache as f64,
        (peak - baseline) / MIB,
        baseline / MIB,
        meter_peak / MIB
    );
    assert!(data >= 10 * cache, "the data set ({data} bytes) is not ten times the cache");
    assert!(evicted > 0);
    let bound = baseline + cache * 3 / 2 + 16 * MIB;
    assert!(peak <= bound, "peak RSS {peak} over the bound {bound}");
}
