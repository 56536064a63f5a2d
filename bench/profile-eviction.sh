#!/usr/bin/env bash
# CPU profile of an update-heavy engine run with eviction constantly active
# (issue 3): ArborDB only, a 4 MiB cache under ~35 MiB of data, random
# fills and overwrites in batches of 10 on two threads.
#
# Writes bench/results/eviction-profile.folded (collapsed stacks),
# bench/results/eviction-flamegraph.svg and bench/results/eviction-profile.json
# (the shares, from bench/profile_shares.py).
#
# Needs perf and inferno (`cargo install inferno`).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results
mkdir -p "$out"
cargo build --release -p arbordb-bench
perf record -F 499 --call-graph dwarf,32768 -o /tmp/arbordb-eviction.perf -- \
    ./target/release/arbordb-bench engine --engines arbordb --num 300000 --num-sync 30000 \
    --threads 2 --batch 10 --cache-mib 4 --reads 100000 --out "$out/eviction-run.json"
perf script -i /tmp/arbordb-eviction.perf 2>/dev/null | inferno-collapse-perf > "$out/eviction-profile.folded"
inferno-flamegraph --title "ArborDB: update-heavy run, 4 MiB cache, eviction active" \
    < "$out/eviction-profile.folded" > "$out/eviction-flamegraph.svg"
python3 bench/profile_shares.py "$out/eviction-profile.folded" | tee "$out/eviction-profile.json"
