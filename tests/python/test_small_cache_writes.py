"""Concurrent writes to indexed collections under a cache much smaller
than the data: a write the cache rolls back to free old versions is
retried, never reported to the client (the W3 workload in small)."""

import threading

from pymongo import UpdateOne

from conftest import Server

FIELDS = "abcdefghij"
DOCS = 8000


def test_concurrent_indexed_writes_under_a_small_cache_all_succeed(datadir):
    s = Server(datadir / "db", extra=("--cache-mib", "8"))
    client = s.client()
    errors = []

    def load(c):
        coll = client.test[f"c{c}"]
        try:
            for pair in range(0, len(FIELDS), 2):
                coll.create_index([(FIELDS[pair], 1), (FIELDS[pair + 1], 1)])
            for first in range(0, DOCS, 500):
                coll.insert_many([{"_id": i, "pad": "p" * 300, **{f: (i * 7919 + n * 31) % 1009
                                                                   for n, f in enumerate(FIELDS)}}
                                  for i in range(first, first + 500)])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    def update(t):
        coll = client.test[f"c{t % 3}"]
        try:
            for _ in range(15):
                coll.update_many({"_id": {"$mod": [100, t]}}, {"$inc": {"a": 1}})
            coll.bulk_write([UpdateOne({"_id": i}, {"$inc": {"b": 1}}) for i in range(t, DOCS, 50)])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    for phase, work in ((range(3), load), (range(5), update)):
        threads = [threading.Thread(target=work, args=(n,)) for n in phase]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], errors[:3]
    for c in range(3):
        assert client.test[f"c{c}"].count_documents({}) == DOCS
        assert client.test.command("validate", f"c{c}")["valid"] is True
    # The cache did roll writes back (and they were retried).
    assert client.admin.command("serverStatus")["arbordb"]["txn_cache_aborts"] > 0
    # Thread t (and t + 3 on the same collection) added 15 to `a` of its ids.
    doc = client.test.c0.find_one({"_id": 100})
    assert doc["a"] == (100 * 7919) % 1009 + 15
    assert s.stop() == 0
