#!/usr/bin/env bash
# CPU profile of the server during SmallBank (W5) over the wire, serializable
# transactions through the Rust driver (issue 21, part 1): where a
# transaction's server CPU goes.
#
#   bench/profile-smallbank.sh [CLIENTS ...]     (default: 1 8)
#
# For each client count: starts `arbordb-bench smallbank-wire --isolation
# serializable --seconds 30`, attaches `perf record` to the server once the
# run is under way, and writes bench/results/smallbank-t<CLIENTS>-run.json
# (the bench's own figures, perf attached), smallbank-t<CLIENTS>.folded (not
# kept in git), smallbank-t<CLIENTS>-flamegraph.svg and
# smallbank-t<CLIENTS>-shares.json (bench/update_shares.py: its own-time
# categories hold for any command; its "through" steps name an update's).
#
# Needs perf and inferno (`cargo install inferno`).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results
mkdir -p "$out"
cargo build --release -p arbordb -p arbordb-bench
for clients in ${@:-1 8}; do
  ./target/release/arbordb-bench smallbank-wire --isolation serializable --clients "$clients" --seconds 30 \
    --out "$out/smallbank-t$clients-run.json" >/dev/null &
  bench=$!
  pid=""
  until [ -n "$pid" ]; do
    kill -0 "$bench" 2>/dev/null || { echo "the bench ended before its server started"; exit 1; }
    sleep 0.5
    pid=$(pgrep -P "$bench" -f "arbordb serve" || true)
  done
  sleep 8 # the customers are loaded and the clients running
  perf record -F 499 --call-graph dwarf,16384 -p "$pid" -o /tmp/arbordb-smallbank.perf -- sleep 15 2>/dev/null
  wait "$bench"
  perf script -i /tmp/arbordb-smallbank.perf 2>/dev/null | inferno-collapse-perf > "$out/smallbank-t$clients.folded"
  inferno-flamegraph --title "ArborDB server: SmallBank over the wire, serializable, $clients clients" \
    < "$out/smallbank-t$clients.folded" > "$out/smallbank-t$clients-flamegraph.svg"
  python3 bench/update_shares.py "$out/smallbank-t$clients.folded" | tee "$out/smallbank-t$clients-shares.json"
done
