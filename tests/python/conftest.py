"""Fixtures that start the real `arbordb serve` binary on a free port.

The binary is `target/release/arbordb` (test.sh builds it first), or the
path in ARBORDB_BIN.
"""

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pymongo
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("ARBORDB_BIN", ROOT / "target" / "release" / "arbordb"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process over one data directory."""

    def __init__(self, dbpath, port=None, extra=(), env=None):
        self.dbpath = Path(dbpath)
        self.port = port or free_port()
        self.log = self.dbpath.parent / f"{self.dbpath.name}-{self.port}.log"
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "--dbpath", str(self.dbpath), "--port", str(self.port), *extra],
            stderr=open(self.log, "ab"),
            env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.log.read_text()}")
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not start listening")
                time.sleep(0.05)

    @property
    def uri(self):
        return f"mongodb://127.0.0.1:{self.port}/?serverSelectionTimeoutMS=5000"

    def client(self, **kw):
        return pymongo.MongoClient(self.uri, **kw)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stop the process; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def datadir():
    with tempfile.TemporaryDirectory(prefix="arbordb-test-") as d:
        yield Path(d)


@pytest.fixture
def server(datadir):
    s = Server(datadir / "db")
    yield s
    code = s.stop()
    assert code == 0, f"server exit code {code}: {s.log.read_text()[-2000:]}"


@pytest.fixture(scope="module")
def module_server():
    """One server shared by every test of a module (the spec suites), with
    test commands on (`configureFailPoint`), as MongoDB's own suites run."""
    with tempfile.TemporaryDirectory(prefix="arbordb-test-") as d:
        s = Server(Path(d) / "db", extra=("--setParameter", "enableTestCommands=1"))
        yield s
        code = s.stop()
        assert code == 0, f"server exit code {code}: {s.log.read_text()[-2000:]}"


@pytest.fixture(scope="module")
def internal_client(module_server):
    """The spec suites' internal client (unified.py)."""
    import unified

    client = module_server.client(w="majority", socketTimeoutMS=unified.SOCKET_TIMEOUT_MS)
    yield client
    client.close()


@pytest.fixture(scope="module")
def server_info(internal_client):
    import unified

    return unified.ServerInfo(internal_client)


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()


# Outcome names of the per-file summary, from pytest's stats categories.
_SUMMARY_COLUMNS = {"passed": "pass", "failed": "fail", "error": "fail", "skipped": "skip",
                    "xfailed": "xfail", "xpassed": "XPASS"}


def pytest_terminal_summary(terminalreporter):
    """Per-file pass/fail/skip counts of the spec suites.

    A test takes part by recording the property `spec_summary` = (suite, file)
    (the spec tests do, with record_property). Failures win over other
    outcomes of the same test (e.g. a failed call and a teardown error).
    """
    outcome, group = {}, {}
    for category, column in _SUMMARY_COLUMNS.items():
        for report in terminalreporter.stats.get(category, []):
            props = dict(getattr(report, "user_properties", ()))
            if "spec_summary" not in props:
                continue
            group[report.nodeid] = props["spec_summary"]
            if outcome.get(report.nodeid) != "fail":
                outcome[report.nodeid] = column
    if not outcome:
        return
    columns = ["pass", "fail", "skip", "xfail", "XPASS"]
    suites = {}
    for nodeid, (suite, file) in group.items():
        counts = suites.setdefault(suite, {}).setdefault(file, dict.fromkeys(columns, 0))
        counts[outcome[nodeid]] += 1
    for suite, files in sorted(suites.items()):
        terminalreporter.write_sep("=", f"spec summary: {suite}")
        width = max(len(f) for f in files)
        terminalreporter.write_line(f"{'file':<{width}} " + " ".join(f"{c:>6}" for c in columns))
        total = dict.fromkeys(columns, 0)
        for file, counts in sorted(files.items()):
            terminalreporter.write_line(f"{file:<{width}} " + " ".join(f"{counts[c]:>6}" for c in columns))
            for c in columns:
                total[c] += counts[c]
        terminalreporter.write_line(f"{'TOTAL':<{width}} " + " ".join(f"{total[c]:>6}" for c in columns))
    unexpected = sorted(n for n, o in outcome.items() if o == "XPASS")
    if unexpected:
        terminalreporter.write_sep("=", "unexpected passes: remove them from spec_expected_failures.txt")
        for nodeid in unexpected:
            terminalreporter.write_line(nodeid)
