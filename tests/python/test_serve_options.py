"""`arbordb serve` options: a mongod.conf-shaped --config file, --logpath
with JSON lines, flags winning over the file, bad options refused."""

import json
import subprocess
import time

import pymongo

from conftest import BIN, free_port


def wait_ping(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=500") as c:
                return c.admin.command("ping")
        except pymongo.errors.PyMongoError:
            assert proc.poll() is None, "server exited"
            assert time.monotonic() < deadline, "server did not answer"


def test_config_file_and_logpath(datadir):
    port = free_port()
    log = datadir / "server.log"
    conf = datadir / "arbordb.conf"
    conf.write_text(
        f"net:\n  port: {port}\n  bindIp: 127.0.0.1\n"
        f"storage:\n  dbPath: {datadir / 'fromconf'}\n  arbordb:\n    cacheSizeMiB: 32\n"
        f"systemLog:\n  destination: file\n  path: {log}\n"
    )
    proc = subprocess.Popen([str(BIN), "serve", "--config", str(conf)])
    try:
        wait_ping(port, proc)
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
            opts = c.admin.command("getCmdLineOpts")
            assert opts["parsed"]["storage"]["dbPath"] == str(datadir / "fromconf")
            status = c.admin.command("serverStatus")
            assert status["arbordb"]["cache_capacity_bytes"] == 32 << 20
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    lines = [json.loads(l) for l in log.read_text().splitlines() if l.strip()]
    messages = [l["fields"]["message"] for l in lines]
    assert "waiting for connections" in messages and "shutting down" in messages
    assert (datadir / "fromconf").is_dir()


def test_flags_win_over_the_config_file(datadir):
    port = free_port()
    conf = datadir / "arbordb.conf"
    conf.write_text(f"net:\n  port: 1\nstorage:\n  dbPath: {datadir / 'conf'}\n")
    proc = subprocess.Popen([str(BIN), "serve", "--config", str(conf), "--port", str(port), "--dbpath", str(datadir / "flag")])
    try:
        wait_ping(port, proc)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert (datadir / "flag").is_dir() and not (datadir / "conf").exists()


def test_unknown_config_options_are_refused(datadir):
    conf = datadir / "arbordb.conf"
    conf.write_text("net:\n  prot: 27017\n")
    r = subprocess.run([str(BIN), "serve", "--config", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "Unrecognized option: net.prot" in r.stderr


def test_a_port_in_use_is_a_clear_error(server, datadir):
    r = subprocess.run(
        [str(BIN), "serve", "--port", str(server.port), "--dbpath", str(datadir / "other")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode != 0
    assert "in use" in r.stderr.lower()
