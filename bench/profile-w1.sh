#!/usr/bin/env bash
# CPU profile of W1's write-optimized variant (issue 22): the server's
# threads while a driver inserts documents with 100-element arrays into a
# multikey index in the write-optimized format.
#
# Usage: bench/profile-w1.sh [DOCS] [CACHE_MIB]   (defaults 60000, 16)
#
# Writes /tmp/arbordb-w1.perf and prints, per server thread, the symbols
# taking the most samples (self) and the inclusive share of the insert
# path's stages (perf report --children).
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${1:-60000}
cache=${2:-16}
cargo build --release -p arbordb -p arbordb-bench
perf record -F 299 --call-graph dwarf,16384 -o /tmp/arbordb-w1.perf -- \
    ./target/release/arbordb-bench w1 --docs "$docs" --variants wo --arbordb-cache-mib "$cache" \
    --lookups 100 --out /tmp/arbordb-w1-profile.json
# (perf keeps 15 characters of a thread name)
for comm in arbordb-net arbordb-merge arbordb-merge-l arbordb-evict arbordb-checkpo arbordb-sync; do
    echo "== $comm: self"
    perf report -i /tmp/arbordb-w1.perf --stdio --no-children --comm "$comm" --sort sym \
        --percent-limit 1.5 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
done
echo "== server threads: inclusive"
perf report -i /tmp/arbordb-w1.perf --stdio --children --sort comm,sym --percent-limit 2 2>/dev/null \
    | grep -E '^ +[0-9]' | grep -E 'arbordb' | head -60 || true
