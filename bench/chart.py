#!/usr/bin/env python3
"""Draw a grouped bar chart of ops/s from the JSON written by
`arbordb-bench engine`, `arbordb-bench ycsb` or `arbordb-bench tpcb`, or
for `arbordb-bench w1` a line chart of documents inserted per second
against documents inserted, one line per variant (log-scale y axis).

Engine bench: one group of bars per (workload, threads, batch) row, one bar
per engine, log-scale y axis (batch-1 writes and batched writes differ by
orders of magnitude). YCSB: one group per (workload, client tasks), one bar
per system (ArborDB, PostgreSQL, and the no-work driver ceiling when it
ran), linear y axis. Each bar is labelled with its ops/s.

Usage: python3 bench/chart.py RESULTS.json [OUT.png]
(default OUT: RESULTS with .png in place of .json)

Without matplotlib it prints how to install it and exits 0, so it never
breaks a script that runs the benchmark.
"""

import json
import sys
from pathlib import Path


def groups_of(results):
    """Group keys in first-seen order, the series (engines or systems), and
    ops/s per (key, series)."""
    order, engines, ops = [], [], {}
    for r in results:
        if "system" in r:  # bench ycsb
            r = {**r, "engine": r["system"]}
            key = (r["workload"].upper(), r["threads"])
        else:
            key = (r["workload"], r["threads"], r["batch_ops_per_commit"])
        if key not in order:
            order.append(key)
        if r["engine"] not in engines:
            engines.append(r["engine"])
        ops[(key, r["engine"])] = r["ops_per_sec"]
    return order, engines, ops


def label(key):
    if len(key) == 2:
        workload, tasks = key
        return f"{workload}\n{tasks} task{'s' if tasks != 1 else ''}"
    workload, threads, batch = key
    batch = "read" if batch is None else f"b{batch}"
    return f"{workload}\nt{threads} {batch}"


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else src.with_suffix(".png")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("chart.py: matplotlib is not installed; no chart drawn "
              "(pip install matplotlib, then run this again)")
        return 0

    doc = json.loads(src.read_text())
    if doc.get("benchmark", "").startswith("w1"):
        return w1_chart(plt, doc, out)
    order, engines, ops = groups_of(doc["results"])
    width = 0.8 / max(len(engines), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(order)), 5.5))
    for i, engine in enumerate(engines):
        xs = [g + (i - (len(engines) - 1) / 2) * width for g in range(len(order))]
        ys = [ops.get((key, engine), 0) for key in order]
        bars = ax.bar(xs, ys, width, label=engine)
        for bar, y in zip(bars, ys):
            if y > 0:
                ax.annotate(f"{y:,.0f}", (bar.get_x() + bar.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=6, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels([label(k) for k in order], fontsize=7)
    if "benchmark" in doc and doc["benchmark"].startswith("ycsb"):
        ax.set_ylabel("ops/s")
        ax.margins(y=0.12)
        ax.set_title(
            f"YCSB (W2) through the network: {doc.get('records', '?'):,} records, "
            f"{doc.get('seconds_per_workload', '?')} s per run, {doc.get('machine_cpus', '?')} CPUs, "
            f"{doc.get('time', '')}",
            fontsize=9)
    elif doc.get("benchmark", "").startswith("tpcb"):
        ax.set_ylabel("transactions/s")
        ax.margins(y=0.12)
        ax.set_title(
            f"TPC-B (W4): scale {doc.get('scale', '?')}, {doc.get('seconds_per_run', '?')} s per run, "
            f"{doc.get('machine_cpus', '?')} CPUs, {doc.get('time', '')} (single: until applied)",
            fontsize=9)
    else:
        ax.set_yscale("log")
        ax.set_ylabel("ops/s (log scale)")
        config = doc.get("config", {})
        machine = doc.get("machine", {})
        ax.set_title(
            f"ArborDB engine bench (W6): {config.get('num', '?'):,} keys, "
            f"{config.get('durability', '?')}, {machine.get('cpus', '?')} CPUs, "
            f"commit {str(doc.get('commit'))[:12]}",
            fontsize=9)
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    print(f"chart written to {out}")
    return 0


def w1_chart(plt, doc, out):
    """Inserts per second over the run, one line per variant."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r in doc["results"]:
        points = [(p["docs"], p["docs_per_sec"]) for p in r["timeline"]]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker=".", label=f"{r['system']} {r['variant']} "
                    f"(exit {r['exit_velocity_docs_per_sec']:,.1f} docs/s)")
    ax.set_yscale("log")
    ax.set_xlabel("documents inserted")
    ax.set_ylabel("documents/s (log scale)")
    ax.set_title(
        f"W1 multikey insert: {doc.get('uris_per_doc', '?')} array elements per document, batches of "
        f"{doc.get('batch', '?')}, ArborDB cache {doc.get('arbordb_cache_mib', '?')} MiB "
        f"(direct I/O: {doc.get('arbordb_direct_io')}), {doc.get('time', '')}",
        fontsize=8)
    ax.legend()
    ax.grid(which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    print(f"chart written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
