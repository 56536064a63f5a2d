#!/usr/bin/env python3
"""Where the server's CPU goes during YCSB U (bench/profile-update.sh), from
a collapsed-stack profile (`frame;frame;... count` per line):

- threads: the share of samples per thread name;
- own_time: each sample's own (innermost) frame put in one category, so the
  categories add up to 100;
- through: the share of samples whose stack passes through each step of an
  update (inclusive; they overlap);
- top_own_frames: the frames with the most samples of their own.

Usage: python3 bench/update_shares.py PROFILE.folded  (prints JSON)
"""

import collections
import json
import sys

# The innermost frame's category: the first whose substrings match.
OWN = [
    ("kernel: context switches and wake-ups", ("finish_task_switch", "__schedule", "schedule", "_raw_spin_unlock_irq",
                                                "try_to_wake_up", "futex_", "ep_poll", "__wake_up", "select_task_rq")),
    ("kernel: block I/O and fsync (virtio notify)", ("iowrite", "ext4", "jbd2", "blk_", "virtqueue", "submit_bio",
                                                     "filemap", "file_write_wait", "__filemap")),
    ("kernel: TCP loopback", ("tcp_", "ip_", "__dev_queue_xmit", "loopback", "skb", "sock_", "net_rx",
                              "__netif", "process_backlog", "softirq")),
    ("kernel: other", ("entry_SYSCALL", "syscall", "__x64_sys", "do_sys", "copy_user", "rep_movs", "clear_user",
                       "native_", "__rcu", "irq")),
    ("allocator (mimalloc)", ("mi_", "_mi_")),
    ("memcpy / memcmp / memset", ("memcpy", "memcmp", "memmove", "memset")),
    ("storage engine", ("storage::",)),
    ("documents and catalog (doc)", ("doc::",)),
    ("query (filters, updates)", ("query::",)),
    ("bson crate", ("bson::",)),
    ("server (commands, wire, durability)", ("server::",)),
    ("tokio runtime", ("tokio::",)),
    ("atomics, Arc and Bytes refcounts", ("atomic", "Arc<", "bytes::bytes")),
]

# Steps of an update, by a frame the stack passes through.
THROUGH = [
    ("update command (all of it)", "server::commands::update::update"),
    ("  find the document by _id", "find_raw_by_id"),
    ("  build and commit the updated document (general path)", "server::exec::modify::update_document"),
    ("  commit (claims, apply, journal write and wait)", "storage::txn::Txn::commit"),
    ("    journal write, and the fsync wait where the commit runs it", "storage::journal::Journal::lead"),
    ("    tree apply (leaf and path copies)", "storage::engine::Engine::apply_ops"),
    ("request read and parse", "server::net::wire::"),
    ("durability wait (group commit)", "server::durability::Durability::wait"),
    ("fsync (lone writer or sync thread)", "fdatasync"),
    ("reply send", "tcp_sendmsg"),
]


def main(path):
    total = 0
    threads, own, top, through = (collections.Counter() for _ in range(4))
    for line in open(path, encoding="utf-8", errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        threads[frames[0]] += n
        leaf = frames[-1]
        top[leaf[:120]] += n
        # Kernel categories match kernel symbols only (no `::` in them).
        kernel = "::" not in leaf
        own[next((c for c, keys in OWN if (kernel or not c.startswith("kernel")) and any(k in leaf for k in keys)),
                 "other")] += n
        for step, key in THROUGH:
            if any(key in f for f in frames):
                through[step] += n
    pct = lambda x: round(100.0 * x / max(total, 1), 1)
    print(json.dumps({
        "threads_percent": {t: pct(c) for t, c in threads.most_common()},
        "own_time_percent": {c: pct(n) for c, n in own.most_common()},
        "through_percent": {s: pct(through[s]) for s, _ in THROUGH},
        "top_own_frames_percent": {f: pct(c) for f, c in top.most_common(25)},
    }, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
