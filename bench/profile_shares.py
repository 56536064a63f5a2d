#!/usr/bin/env python3
"""Shares of CPU samples in a collapsed-stack profile (inferno/FlameGraph
"folded" format: `frame;frame;... count` per line), for the eviction
profile of issue 3.

- eviction: stacks through `Tree::evict_in` (the clock walk and everything
  it calls).
- reconciliation: stacks through `Tree::write_dirty` under eviction or a
  checkpoint (`Engine::write_checkpoint`): building page images and writing them.
- key building in reconciliation: reconciliation stacks that materialize
  keys by decoding a page (`decode_node`, `visit_cells`, `decode_cells`);
  reported apart, byte copies (`copy_from_slice`, `to_vec`): copying key
  and value bytes into the new image, the floor of writing one.
- key decoding anywhere: `decode_node` in any stack (pages read back after
  eviction), for comparison.

Usage: python3 bench/profile_shares.py PROFILE.folded  (prints JSON)
"""

import json
import sys

KEY_BUILDING = ("decode_node", "visit_cells", "decode_cells")
BYTE_COPIES = ("copy_from_slice", "to_vec")


def main(path):
    total = evict = recon = recon_keys = recon_copies = decode_any = 0
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        total += n
        in_evict = any("evict_in" in f for f in frames)
        in_ckpt = any("write_checkpoint" in f for f in frames)
        if in_evict:
            evict += n
        if any("write_dirty" in f for f in frames) and (in_evict or in_ckpt):
            recon += n
            if any(k in f for f in frames for k in KEY_BUILDING):
                recon_keys += n
            elif any(k in f for f in frames for k in BYTE_COPIES):
                recon_copies += n
        if any("decode_node" in f for f in frames):
            decode_any += n
    pct = lambda x: round(100.0 * x / max(total, 1), 2)
    print(json.dumps({
        "samples": total,
        "eviction_percent": pct(evict),
        "reconciliation_percent": pct(recon),
        "key_building_in_reconciliation_percent": pct(recon_keys),
        "key_building_share_of_reconciliation_percent": round(100.0 * recon_keys / max(recon, 1), 2),
        "byte_copies_in_reconciliation_percent": pct(recon_copies),
        "page_decoding_anywhere_percent": pct(decode_any),
    }, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
