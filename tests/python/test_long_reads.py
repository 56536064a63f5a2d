"""A read that scans runs without holding up the other connections of its
network thread: the server gives the thread's other work to another
thread meanwhile (`block_in_place`). With one network thread, a `ping`
sent while a long scan runs answers before the scan does, and a kill of
the session whose `getMore` is scanning ends that cursor."""

import threading
import time

import pytest

from pymongo.errors import OperationFailure

from conftest import Server


def fill(c):
    """300,000 documents: a scan of them all takes a few hundred ms."""
    batch = [{"x": i, "pad": "p" * 100} for i in range(20_000)]
    for _ in range(15):
        c.test.big.insert_many([dict(d) for d in batch])


@pytest.fixture
def one_worker(datadir):
    s = Server(datadir / "db", env={"TOKIO_WORKER_THREADS": "1"})
    yield s
    assert s.stop() == 0


# A collection scan, an index scan whose FETCH filter rejects every
# document, and one whose bounds answer the filter but whose key range
# (closed on its first field) holds every key (`find` hands the thread
# off once its plan shows it may read more than a first batch). The
# first two filters' `$expr` decodes every document examined whole, so
# that the scan is slow enough to watch.
NONE = {"$expr": {"$eq": ["$pad", "none"]}}
SCANS = {
    "collscan": (None, NONE),
    "ixscan": ("x", {"x": {"$gte": 0}, **NONE}),
    "compound": ([("x", 1), ("pad", 1)], {"x": {"$gte": 0}, "pad": "none"}),
}


@pytest.mark.parametrize("scan", sorted(SCANS))
def test_a_ping_answers_while_a_scan_runs_on_the_only_network_thread(one_worker, scan):
    index, query = SCANS[scan]
    c = one_worker.client()
    fill(c)
    if index:
        c.test.big.create_index(index)
    scanner = one_worker.client()
    plan = scanner.test.big.find(query).explain()["queryPlanner"]["winningPlan"]
    assert ("IXSCAN" if index else "COLLSCAN") in str(plan), plan
    scanner.test.big.find_one(query)  # connect and warm up
    c.admin.command("ping")
    done = {}

    def scan():
        began = time.monotonic()
        assert scanner.test.big.find_one(query) is None
        done["scan"] = time.monotonic() - began

    t = threading.Thread(target=scan)
    t.start()
    # Ping all along the scan: some ping is sent while it runs.
    worst, pings = 0.0, 0
    while t.is_alive():
        began = time.monotonic()
        c.admin.command("ping")
        worst, pings = max(worst, time.monotonic() - began), pings + 1
    t.join()
    assert done["scan"] > 0.1, "the scan was too quick to show anything"
    assert pings >= 2
    # Held behind the scan, a ping would wait for most of it.
    assert worst < done["scan"] / 2, (worst, done["scan"])


def test_a_session_killed_during_its_get_more_loses_the_cursor(one_worker):
    c = one_worker.client()
    c.test.big.insert_one({"x": "first"})
    fill(c)
    c.test.big.insert_one({"x": "last"})
    reader = one_worker.client()
    outcome = {}
    with reader.start_session() as s:
        # The first document matches at once; the getMore scans to the end
        # (the `$expr` decodes each document whole, so it is slow enough to kill).
        both = {"x": {"$in": ["first", "last"]}, "$expr": {"$in": ["$x", ["first", "last"]]}}
        cursor = reader.test.big.find(both, batch_size=1, session=s)
        assert next(cursor)["x"] == "first"

        def more():
            began = time.monotonic()
            try:
                outcome["doc"] = next(cursor)
            except OperationFailure as e:
                outcome["code"] = e.code
            outcome["took"] = time.monotonic() - began

        t = threading.Thread(target=more)
        t.start()
        # Kill once the getMore runs (however late its thread starts).
        deadline = time.monotonic() + 10
        running = []
        while not running and time.monotonic() < deadline:
            pipeline = [{"$currentOp": {"allUsers": True}}, {"$match": {"op": "getmore", "ns": "test.big"}}]
            running = list(c.admin.aggregate(pipeline))
        assert running, "the getMore never showed in $currentOp"
        time.sleep(0.05)
        c.admin.command("killSessions", [s.session_id])
        t.join()
    assert outcome["took"] > 0.1, ("the getMore was too quick to show anything", outcome)
    assert outcome.get("code") == 237, outcome
