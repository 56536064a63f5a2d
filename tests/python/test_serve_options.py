"""`arbordb serve` options: a mongod.conf-shaped --config file, --logpath
with JSON lines, flags winning over the file, bad options refused."""

import json
import os
import subprocess
import time

import pymongo
import pytest

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


def serve(datadir, name, *flags):
    port = free_port()
    proc = subprocess.Popen([str(BIN), "serve", "--port", str(port), "--dbpath", str(datadir / name), *flags])
    try:
        wait_ping(port, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return port, proc


def punch_supported(directory):
    """Whether the file system under `directory` punches holes."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    probe = directory / "punch-probe"
    with open(probe, "wb") as f:
        f.write(b"x" * 65536)
        f.flush()
        # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
        ok = libc.fallocate(f.fileno(), 0x01 | 0x02, 0, 8192) == 0
    os.remove(probe)
    return ok


def test_punch_every_blocks_releases_freed_blocks_or_never(datadir):
    if not punch_supported(datadir):
        pytest.skip("this file system does not punch holes")
    punched = {}
    for every in ("1", "0"):
        port, proc = serve(datadir, f"punch{every}", "--punch-every-blocks", every)
        try:
            with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
                c.db.c.insert_many([{"_id": i, "s": str(i) * 200} for i in range(1000)])
                for round in range(3):
                    c.admin.command("fsync")
                    c.db.c.update_many({}, {"$set": {"round": round}})
                c.admin.command("fsync")
                punched[every] = c.admin.command("serverStatus")["arbordb"]["blocks_punched"]
        finally:
            stop(proc)
    assert punched["1"] > 0 and punched["0"] == 0, punched


def stop(proc):
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def test_block_compressor_and_bytes_written_by_file_kind(datadir):
    port, proc = serve(datadir, "none", "--block-compressor", "none")
    try:
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
            c.db.c.insert_many([{"_id": i, "s": "abc" * 300} for i in range(2000)])
            c.admin.command("fsync")
            plain = c.admin.command("serverStatus")["arbordb"]
            assert c.db.command("collStats", "c")["arbordb"] == {"blockCompressor": "none"}
            assert plain["leaf_block_bytes_written"] >= plain["leaf_image_bytes"] > 2000 * 900
            assert plain["directIO"] is False
    finally:
        stop(proc)
    port, proc = serve(datadir, "zstd", "--block-compressor", "zstd", "--punch-every-blocks", "0")
    try:
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
            c.db.c.insert_many([{"_id": i, "s": "abc" * 300} for i in range(2000)])
            before = c.admin.command("serverStatus")["arbordb"]
            reply = c.admin.command("fsync")
            assert (reply["numFiles"], reply["ok"]) == (1, 1.0)
            after = c.admin.command("serverStatus")["arbordb"]
            assert after["checkpoints"] == before["checkpoints"] + 1
            assert c.db.command("collStats", "c")["arbordb"] == {"blockCompressor": "zstd"}
            io = after["io"]
            by_file, by_page = io["bytesWrittenByFileKind"], io["bytesWrittenByPageKind"]
            assert by_file["collection"] > 2000 * 100, by_file
            assert 0 < by_file["index"] < by_file["collection"], by_file
            assert by_file["metadata"] > 0 and by_file["journal"] > 2000 * 900, by_file
            assert by_page["journal"] == by_file["journal"]
            tables = by_file["collection"] + by_file["index"] + by_file["metadata"]
            assert sum(v for k, v in by_page.items() if k != "journal") == tables, (by_page, by_file)
            # The repeated text compresses: its leaves take under a third of
            # their images' bytes, where stored plain they took at least all.
            assert 3 * after["leaf_block_bytes_written"] < after["leaf_image_bytes"], after
            assert after["blocks_punched"] == 0
            for kind in ("collection", "index", "metadata"):
                assert io["files"][kind] and all((datadir / "zstd" / f).is_file() for f in io["files"][kind]), io
            assert io["files"]["journal"] == ["journal"]
            with pytest.raises(pymongo.errors.OperationFailure) as e:
                c.admin.command("fsync", lock=True)
            assert e.value.code == 115
            with pytest.raises(pymongo.errors.OperationFailure) as e:
                c.db.command("fsync")
            assert e.value.code == 13
    finally:
        stop(proc)
    # A table keeps the compressor it was made with; new ones take the option's.
    port, proc = serve(datadir, "zstd")
    try:
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
            c.db.d.insert_one({})
            assert c.db.command("collStats", "c")["arbordb"] == {"blockCompressor": "zstd"}
            assert c.db.command("collStats", "d")["arbordb"] == {"blockCompressor": "snappy"}
            assert c.db.c.count_documents({"s": "abc" * 300}) == 2000
    finally:
        stop(proc)


def open_flags(pid):
    """The open(2) flags of each file process `pid` holds open, by path."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                line = next(l for l in f if l.startswith("flags:"))
        except (OSError, StopIteration):
            continue
        out[path] = int(line.split()[1], 8)
    return out


def test_direct_io_reads_evicted_pages_back_after_a_restart(datadir):
    """--direct-io: data files bypass the page cache; with a cache of 4 MiB
    (the data is about 7 MB) documents read back after a restart come from
    the device."""
    docs = [{"_id": i, "k": i % 97, "s": f"{i:08d}" * 100} for i in range(8000)]
    port, proc = serve(datadir, "direct", "--direct-io", "--cache-mib", "4")
    try:
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
            c.db.c.create_index("k")
            c.db.c.insert_many(docs)
            assert c.admin.command("serverStatus")["arbordb"]["directIO"] is True
        # Every data file the server holds open is opened with O_DIRECT,
        # the journal without.
        flags = open_flags(proc.pid)
        data = [f for path, f in flags.items() if path.endswith(".adb")]
        journal = [f for path, f in flags.items() if path.endswith(".jnl")]
        assert len(data) >= 3 and journal, flags
        direct = os.O_DIRECT
        assert all(f & direct for f in data) and not any(f & direct for f in journal), flags
    finally:
        stop(proc)
    port, proc = serve(datadir, "direct", "--direct-io", "--cache-mib", "4")
    try:
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{port}") as c:
            assert list(c.db.c.find().sort("_id", 1)) == docs
            assert [d["_id"] for d in c.db.c.find({"k": 5}).sort("_id", 1)] == list(range(5, 8000, 97))
            status = c.admin.command("serverStatus")["arbordb"]
            assert status["directIO"] is True and status["leaf_pages_read"] > 100, status
    finally:
        stop(proc)
