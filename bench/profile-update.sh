#!/usr/bin/env bash
# CPU profile of the server during YCSB U (update only) through the Rust
# driver (issue 21, part 1): where an update's server CPU goes.
#
#   bench/profile-update.sh [TASKS ...]     (default: 1 8)
#
# For each client task count: starts `arbordb-bench ycsb --workloads u
# --skip-peer` (100,000 records), attaches `perf record` to the server once
# the workload runs, and writes bench/results/update-t<TASKS>-run.json (the
# bench's own figures, perf attached), update-t<TASKS>.folded (not kept in
# git), update-t<TASKS>-flamegraph.svg and update-t<TASKS>-shares.json
# (from bench/update_shares.py).
#
# Needs perf and inferno (`cargo install inferno`).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results
mkdir -p "$out"
cargo build --release -p arbordb -p arbordb-bench
for tasks in "${@:-1 8}"; do
  for t in $tasks; do
    log=$(mktemp)
    ./target/release/arbordb-bench ycsb --skip-peer --records 100000 --workloads u --threads "$t" \
      --seconds 40 --sample-seconds 0 --out "$out/update-t$t-run.json" 2>"$log" &
    bench=$!
    until grep -q "load: 100000 records in" "$log"; do
      kill -0 "$bench" 2>/dev/null || { cat "$log"; exit 1; }
      sleep 1
    done
    sleep 5
    pid=$(pgrep -P "$bench" -f "arbordb serve")
    perf record -F 499 --call-graph dwarf,16384 -p "$pid" -o /tmp/arbordb-update.perf -- sleep 25 2>/dev/null
    wait "$bench"
    rm -f "$log"
    perf script -i /tmp/arbordb-update.perf 2>/dev/null | inferno-collapse-perf > "$out/update-t$t.folded"
    inferno-flamegraph --title "ArborDB server: YCSB U (update only), $t client tasks" \
      < "$out/update-t$t.folded" > "$out/update-t$t-flamegraph.svg"
    python3 bench/update_shares.py "$out/update-t$t.folded" | tee "$out/update-t$t-shares.json"
  done
done
