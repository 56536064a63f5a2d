#!/usr/bin/env python3
"""The device's floor for one durable commit: append a journal-sized record
to a preallocated file and fdatasync it, N times; prints p50 / mean / p99.

Usage: python3 bench/fsync_probe.py [DIR] [N]   (default: target/, 3000)
"""

import os
import statistics
import sys
import time

RECORD_BYTES = 1328  # a YCSB update's journal record (bench/results/ycsb.json)


def main(directory="target", n=3000):
    path = os.path.join(directory, "fsync-probe.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"\0" * (n * RECORD_BYTES + (1 << 20)))
        os.fsync(fd)
        record, lat = b"x" * RECORD_BYTES, []
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, record, i * RECORD_BYTES)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    us = lambda s: round(s * 1e6)
    print(f"pwrite + fdatasync of {RECORD_BYTES} bytes, {n} times: p50 {us(lat[n // 2])} µs, "
          f"mean {us(statistics.mean(lat))} µs, p99 {us(lat[int(n * 0.99)])} µs")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["target"]), *(int(a) for a in sys.argv[2:3]))
