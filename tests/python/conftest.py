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

    def __init__(self, dbpath, port=None, extra=()):
        self.dbpath = Path(dbpath)
        self.port = port or free_port()
        self.log = self.dbpath.parent / f"{self.dbpath.name}-{self.port}.log"
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "--dbpath", str(self.dbpath), "--port", str(self.port), *extra],
            stderr=open(self.log, "ab"),
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


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()
