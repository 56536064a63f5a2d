"""A read that scans runs without holding up the other connections of its
network thread: the server gives the thread's other work to another
thread meanwhile (`block_in_place`). With one network thread, a `ping`
sent while a long scan runs answers before the scan does."""

import threading
import time

import pytest

from conftest import Server


@pytest.fixture
def one_worker(datadir):
    s = Server(datadir / "db", env={"TOKIO_WORKER_THREADS": "1"})
    yield s
    assert s.stop() == 0


def test_a_ping_answers_while_a_scan_runs_on_the_only_network_thread(one_worker):
    c = one_worker.client()
    batch = [{"x": i, "pad": "p" * 100} for i in range(20_000)]
    for _ in range(15):
        c.test.big.insert_many([dict(d) for d in batch])
    scanner = one_worker.client()
    scanner.test.big.find_one({"x": -1})  # connect and warm up
    done = {}

    def scan():
        assert scanner.test.big.find_one({"x": -1}) is None
        done["scan"] = time.monotonic()

    t = threading.Thread(target=scan)
    started = time.monotonic()
    t.start()
    time.sleep(0.01)
    c.admin.command("ping")
    done["ping"] = time.monotonic()
    t.join()
    # Only meaningful if the scans outlast the ping's round trip by far.
    assert done["scan"] - started > 0.1, "the scan was too quick to show anything"
    assert done["ping"] < done["scan"]
