#!/usr/bin/env bash
# Runs every test of the project. Installs what it needs first.
# Env: ARBORDB_CRASH_CYCLES (kill -9 cycles, default 100),
#      ARBORDB_FAULT_POINTS (injected I/O failure points, default 400),
#      PROPTEST_CASES (model-test cases, default 64 per property).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v cargo >/dev/null 2>&1; then
  echo "== installing Rust (rustup)"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== the server binary links no benchmark peer (they live in arbordb-bench)"
if cargo tree -p arbordb -e normal --prefix none | grep -E '^(redb|heed|mongodb|tokio-postgres|arbordb-testkit) '; then
  echo "arbordb links a benchmark-only crate"; exit 1
fi

echo "== unit, model, crash, fault and concurrency tests"
cargo test --workspace --quiet

echo "== driver tests: the real server through pymongo (tests/python)"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore pymongo pytest python-snappy zstandard 'backports.zstd; python_version < "3.14"'
cargo build --release --quiet -p arbordb
python3 -m pytest -q tests/python

echo "== fuzz smoke: OP_MSG frames, the query language and aggregation pipelines (cargo fuzz, fixed seed corpus and seed)"
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
for target in op_msg filter pipeline; do
  corpus=$(mktemp -d)
  cp fuzz/seeds/$target/* "$corpus"/
  if ! (cd fuzz && cargo +nightly fuzz run "$target" "$corpus" -- -seed=1 -runs=100000 -max_total_time=60 >"$corpus.log" 2>&1); then
    tail -n 60 "$corpus.log"
    exit 1
  fi
  echo "$target: $(grep -E '^Done' "$corpus.log")"
  rm -rf "$corpus" "$corpus.log"
done

echo "== engine benchmark smoke run (tiny scale; the real run is in README)"
out=$(mktemp -d)
cargo run --release --quiet -p arbordb-bench -- engine --num 5000 --num-sync 200 --dir "$out" --out "$out/smoke.json" >/dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['results'], 'no results'; print('bench smoke:', len(r['results']), 'rows')" "$out/smoke.json"
rm -rf "$out"

echo "== SmallBank smoke run (SI and serializable; fails on an SI violation or a serializable anomaly)"
out=$(mktemp -d)
cargo run --release --quiet -p arbordb-bench -- smallbank --customers 500 --hotspot 20 --seconds 1 --rounds 1 \
  --dir "$out" --out "$out/smallbank.json" >/dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert len(r['runs']) == 4; print('smallbank smoke:', [round(x, 2) for x in r['serializable_over_si_throughput'].values()])" "$out/smallbank.json"
rm -rf "$out"

echo "== multi-document transactions over the wire, history checked (brief; the long run is in README)"
cargo run --release --quiet -p arbordb-bench -- txn-check --clients 6 --seconds "${ARBORDB_TXN_WIRE_SECONDS:-3}"
echo "== SmallBank over the wire smoke run (fails on a serializable anomaly)"
cargo run --release --quiet -p arbordb-bench -- smallbank-wire --customers 300 --hotspot 30 --clients 4 --seconds 1 >/dev/null
echo "== TPC-B (W4) smoke run, both designs (fails unless the balances add up to history's deltas)"
cargo run --release --quiet -p arbordb-bench -- tpcb --clients 1,3 --seconds 1 --skip-peer >/dev/null

echo "== YCSB smoke run (ArborDB through the mongodb driver; the full run with PostgreSQL is in README)"
out=$(mktemp -d)
cargo run --release --quiet -p arbordb-bench -- ycsb --records 2000 --seconds 1 --threads 4 --skip-peer \
  --workloads u,c --arbordb-compressors none,zstd --arbordb-punch-every 0 --dir "$out" --out "$out/ycsb.json" >/dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; assert len(r) == 4 and all(x['ops'] > 0 for x in r); assert all(x['written']['file.journal_bytes_per_op'] > 1000 for x in r if x['workload'] == 'u'), r; print('ycsb smoke:', [(x['system'], x['workload'], round(x['ops_per_sec'])) for x in r])" "$out/ycsb.json"
rm -rf "$out"

echo "== index, W3 and W1 benchmark smoke runs (ArborDB only; the full runs with PostgreSQL are in README)"
out=$(mktemp -d)
cargo run --release --quiet -p arbordb-bench -- index --docs 2000 --seconds 1 --threads 2 --skip-peer \
  --out "$out/index.json" >/dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert len(r['results']) == 3 and all(x['queries'] > 0 for x in r['results']); print('index smoke:', [round(x['queries_per_sec']) for x in r['results']])" "$out/index.json"
cargo run --release --quiet -p arbordb-bench -- w3 --docs 1000 --collections 2 --threads 2 --seconds 1 \
  --arbordb-cache-mib 8 --skip-peer --out "$out/w3.json" >/dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['results'][0]['docs_updated'] > 0; print('w3 smoke:', round(r['results'][0]['docs_updated_per_sec']), 'documents updated/s')" "$out/w3.json"
cargo run --release --quiet -p arbordb-bench -- w1 --docs 500 --seconds 20 --variants btree,wo --arbordb-cache-mib 64 \
  --lookups 200 --out "$out/w1.json" >/dev/null
python3 -c "import json,sys; rs=json.load(open(sys.argv[1]))['results']; assert [r['variant'] for r in rs] == ['btree', 'wo'] and all(r['docs'] == 500 and r['direct_io'] and r['timeline'] and r['uri_index_bytes'] > 500 * 100 * 59 and r['lookup_quiet_mean_us'] > 0 for r in rs), rs; assert rs[0]['uri_index_runs'] is None and rs[1]['uri_index_runs'] >= 1, rs; print('w1 smoke:', [round(r['docs_per_sec']) for r in rs], 'documents/s')" "$out/w1.json"
rm -rf "$out"

echo "== all tests passed"
