"""The handshake and administration commands, and bad input on the wire,
through pymongo and raw sockets against the real server."""

import signal
import socket
import struct

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure

OP_REPLY, OP_QUERY, OP_MSG = 1, 2004, 2013


def test_ping(client):
    assert client.admin.command("ping")["ok"] == 1.0


def test_hello_answers_as_a_one_member_replica_set_primary(client, server):
    h = client.admin.command("hello")
    me = f"127.0.0.1:{server.port}"
    assert h["isWritablePrimary"] is True
    assert h["secondary"] is False
    assert h["setName"] == "arbordb"
    assert h["hosts"] == [me] and h["primary"] == me and h["me"] == me
    assert h["maxBsonObjectSize"] == 16 * 1024 * 1024
    assert h["maxMessageSizeBytes"] == 48_000_000
    assert h["maxWriteBatchSize"] == 100_000
    assert h["logicalSessionTimeoutMinutes"] == 30
    assert (h["minWireVersion"], h["maxWireVersion"]) == (0, 25)
    assert "clusterTime" in h["$clusterTime"] and "operationTime" in h
    legacy = client.admin.command("isMaster")
    assert legacy["ismaster"] is True and "isWritablePrimary" not in legacy


def test_the_driver_sees_a_writable_replica_set(client):
    client.admin.command("ping")
    desc = client.topology_description
    assert desc.topology_type_name == "ReplicaSetWithPrimary"
    assert client.primary is not None


def test_sessions_are_accepted(client):
    with client.start_session() as s:
        assert client.admin.command("ping", session=s)["ok"] == 1.0
    assert client.admin.command("endSessions", [])["ok"] == 1.0


def test_build_info_and_friends(client, server):
    b = client.admin.command("buildInfo")
    assert b["version"] == "8.0.0" and b["versionArray"] == [8, 0, 0, 0]
    assert client.admin.command("whatsmyuri")["you"].startswith("127.0.0.1:")
    assert client.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == []
    assert "hello" in client.admin.command("listCommands")["commands"]
    assert client.admin.command("hostInfo")["system"]["numCores"] >= 1
    opts = client.admin.command("getCmdLineOpts")
    assert opts["parsed"]["net"]["port"] == server.port
    assert opts["parsed"]["storage"]["dbPath"] == str(server.dbpath)


def test_get_and_set_parameter(client):
    p = client.admin.command("getParameter", 1, featureCompatibilityVersion=1)
    assert p["featureCompatibilityVersion"] == {"version": "8.0"}
    assert "maxBSONDepth" in client.admin.command("getParameter", "*")
    with pytest.raises(OperationFailure) as e:
        client.admin.command("getParameter", 1, noSuchParameter=1)
    assert e.value.code == 72
    with pytest.raises(OperationFailure) as e:
        client.admin.command("setParameter", 1, noSuchParameter=1)
    assert e.value.code == 40415
    assert "unrecognized parameter" in str(e.value)


def test_server_status(client):
    s = client.admin.command("serverStatus")
    assert s["connections"]["current"] >= 1
    assert s["opcounters"]["command"] >= 1
    assert "writeConflicts" in s["metrics"]["operation"]
    assert s["storageEngine"]["name"] == "arbordb"
    assert "cache_capacity_bytes" in s["arbordb"]


def test_unknown_command(client):
    with pytest.raises(OperationFailure) as e:
        client.admin.command("frobnicate")
    assert e.value.code == 59
    assert e.value.details["codeName"] == "CommandNotFound"
    assert e.value.details["errmsg"] == "no such command: 'frobnicate'"


# --- raw wire messages ---------------------------------------------------


def frame(op, body, request_id=1):
    return struct.pack("<iiii", 16 + len(body), request_id, 0, op) + body


def op_msg(doc, flags=0):
    return frame(OP_MSG, struct.pack("<I", flags) + b"\x00" + bson.encode(doc))


def op_query(doc, ns=b"admin.$cmd"):
    return frame(OP_QUERY, struct.pack("<I", 0) + ns + b"\x00" + struct.pack("<ii", 0, -1) + bson.encode(doc))


def recv_reply(sock):
    head = recv_exact(sock, 16)
    length, _, _, op = struct.unpack("<iiii", head)
    body = recv_exact(sock, length - 16)
    if op == OP_MSG:
        return op, bson.decode(body[5:])
    assert op == OP_REPLY
    return op, bson.decode(body[20:])


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def connect(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return s


def closed(sock):
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_legacy_op_query_handshake(server):
    with connect(server) as s:
        s.sendall(op_query({"isMaster": 1}))
        op, reply = recv_reply(s)
        assert op == OP_REPLY and reply["ismaster"] is True
        s.sendall(op_query({"find": "c"}, ns=b"test.$cmd"))
        op, reply = recv_reply(s)
        assert reply["code"] == 352 and reply["codeName"] == "UnsupportedOpQueryCommand"


@pytest.mark.parametrize(
    "message, why",
    [
        (struct.pack("<iiii", 5, 1, 0, OP_MSG), "length below the header"),
        (struct.pack("<iiii", 60_000_000, 1, 0, OP_MSG), "length above maxMessageSizeBytes"),
        (frame(2010, b"\x00" * 8), "removed op code"),
        (frame(OP_MSG, struct.pack("<I", 1 << 5) + b"\x00" + bson.encode({"ping": 1})), "unknown required flag"),
        (frame(OP_MSG, struct.pack("<I", 1) + b"\x00" + bson.encode({"ping": 1}) + b"\x00\x00\x00\x00"), "bad checksum"),
        (frame(OP_MSG, struct.pack("<I", 0) + b"\x09" + bson.encode({"ping": 1})), "unknown section kind"),
    ],
)
def test_malformed_frames_close_the_connection_and_nothing_else(server, message, why):
    with connect(server) as s:
        s.sendall(message)
        assert closed(s), why
    with server.client() as c:
        assert c.admin.command("ping")["ok"] == 1.0


def test_invalid_bson_gets_an_error_reply(server):
    bad = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
    bad[4] = 0x55  # not a BSON type
    with connect(server) as s:
        s.sendall(frame(OP_MSG, struct.pack("<I", 0) + b"\x00" + bytes(bad)))
        _, reply = recv_reply(s)
        assert reply["ok"] == 0 and reply["code"] == 22 and reply["codeName"] == "InvalidBSON"
        # The connection is still usable.
        s.sendall(op_msg({"ping": 1, "$db": "admin"}))
        assert recv_reply(s)[1]["ok"] == 1.0


def test_too_deep_nesting_is_refused(server):
    doc = {"x": 1}
    for _ in range(150):
        doc = {"x": doc}
    with connect(server) as s:
        s.sendall(op_msg({"ping": 1, "$db": "admin", "deep": doc}))
        _, reply = recv_reply(s)
        assert reply["code"] == 22 and "nesting depth" in reply["errmsg"]


def test_more_to_come_gets_no_reply(server):
    with connect(server) as s:
        s.sendall(op_msg({"ping": 1, "$db": "admin"}, flags=2))
        s.sendall(op_msg({"ping": 1, "$db": "admin"}))
        _, reply = recv_reply(s)
        assert reply["ok"] == 1.0
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(1)


# --- shutdown ------------------------------------------------------------


def test_shutdown_command_stops_the_server_cleanly(datadir):
    from conftest import Server

    srv = Server(datadir / "db")
    c = srv.client()
    try:
        c.admin.command("shutdown")
    except pymongo.errors.AutoReconnect:
        pass  # mongod closes the connection; we may answer first
    assert srv.proc.wait(timeout=30) == 0
    assert "engine closed with a checkpoint" in srv.log.read_text()
    c.close()
    # The data directory opens again.
    again = Server(datadir / "db")
    with again.client() as c2:
        assert c2.admin.command("ping")["ok"] == 1.0
    assert again.stop(signal.SIGINT) == 0


# --- compression -----------------------------------------------------------


@pytest.mark.parametrize("name", ["snappy", "zlib", "zstd"])
def test_compressed_messages_round_trip(server, name):
    with server.client(compressors=name) as c:
        assert c.admin.command("ping")["ok"] == 1.0
        status = c.admin.command("serverStatus")
    used = status["network"]["compression"][name]
    assert used["decompressor"]["bytesIn"] > 0 and used["decompressor"]["bytesOut"] > 0
    assert used["compressor"]["bytesIn"] > 0 and used["compressor"]["bytesOut"] > 0


def test_hello_negotiates_compressors_in_the_clients_order(client):
    h = client.admin.command("hello", compression=["lz4", "zstd", "zlib"])
    assert h["compression"] == ["zstd", "zlib"]


def test_a_compressed_frame_with_a_lying_size_closes_the_connection(server):
    import zlib

    inner = struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    packed = zlib.compress(inner)
    body = struct.pack("<iiB", OP_MSG, len(inner) + 7, 2) + packed
    with connect(server) as s:
        s.sendall(frame(2012, body))
        assert closed(s)
    with server.client() as c:
        assert c.admin.command("ping")["ok"] == 1.0


# --- awaitable hello (the drivers' streaming monitor) ------------------------


def recv_frame(sock):
    """One OP_MSG reply: (request id, response to, flags, document)."""
    head = recv_exact(sock, 16)
    length, request_id, response_to, op = struct.unpack("<iiii", head)
    assert op == OP_MSG
    body = recv_exact(sock, length - 16)
    (flags,) = struct.unpack("<I", body[:4])
    return request_id, response_to, flags, bson.decode(body[5:])


def topology_version(client):
    return client.admin.command("hello")["topologyVersion"]


@pytest.mark.parametrize("name", ["hello", "isMaster", "ismaster"])
def test_awaitable_hello_waits_for_max_await_time(client, name):
    import time

    tv = topology_version(client)
    assert isinstance(tv["processId"], bson.ObjectId) and isinstance(tv["counter"], bson.Int64)
    began = time.monotonic()
    reply = client.admin.command({name: 1, "topologyVersion": tv, "maxAwaitTimeMS": 600})
    waited = time.monotonic() - began
    assert waited >= 0.5, waited
    assert reply["topologyVersion"] == tv
    # maxAwaitTimeMS 0 answers at once.
    assert client.admin.command({name: 1, "topologyVersion": tv, "maxAwaitTimeMS": 0})["ok"] == 1.0


def test_awaitable_hello_answers_at_once_for_another_process(client):
    import time

    tv = topology_version(client)
    began = time.monotonic()
    other = {"processId": bson.ObjectId(), "counter": bson.Int64(tv["counter"] + 1)}
    client.admin.command({"hello": 1, "topologyVersion": other, "maxAwaitTimeMS": 5000})
    assert time.monotonic() - began < 2.0


@pytest.mark.parametrize(
    "fields, code, message",
    [
        ({"topologyVersion": "tv", "maxAwaitTimeMS": 0}, 10065, "expected an object"),
        ({"topologyVersion": {"processId": "pid1", "counter": bson.Int64(0)}, "maxAwaitTimeMS": 0}, 14,
         "BSON field 'hello.topologyVersion.processId' is the wrong type 'string', expected type 'objectId'"),
        ({"topologyVersion": {"processId": "<pid>", "counter": 0}, "maxAwaitTimeMS": 0}, 14,
         "BSON field 'hello.topologyVersion.counter' is the wrong type 'int', expected type 'long'"),
        ({"topologyVersion": {"processId": "<pid>"}, "maxAwaitTimeMS": 0}, 40414,
         "BSON field 'hello.topologyVersion.counter' is missing but a required field"),
        ({"topologyVersion": {"counter": bson.Int64(0)}, "maxAwaitTimeMS": 0}, 40414,
         "BSON field 'hello.topologyVersion.processId' is missing but a required field"),
        ({"topologyVersion": {"processId": "<pid>", "counter": bson.Int64(0), "x": 1}, "maxAwaitTimeMS": 0}, 40415,
         "BSON field 'hello.topologyVersion.x' is an unknown field."),
        ({"topologyVersion": {"processId": "<pid>", "counter": bson.Int64(-1)}, "maxAwaitTimeMS": 0}, 31372,
         "topologyVersion must have a non-negative counter"),
        ({"topologyVersion": {"processId": "<pid>", "counter": bson.Int64(1)}, "maxAwaitTimeMS": 0}, 31382,
         "Received a topology version with counter: 1 which is greater than the server topology version counter: 0"),
        ({"topologyVersion": "<tv>"}, 31368, "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'"),
        ({"maxAwaitTimeMS": 0}, 31368, "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'"),
        ({"topologyVersion": "<tv>", "maxAwaitTimeMS": "x"}, 14,
         "BSON field 'hello.maxAwaitTimeMS' is the wrong type 'string', expected types '[long, int, decimal, double']"),
        ({"topologyVersion": "<tv>", "maxAwaitTimeMS": -1}, 31373, "maxAwaitTimeMS must be a non-negative integer"),
    ],
)
def test_awaitable_hello_errors(client, fields, code, message):
    tv = topology_version(client)
    if fields.get("topologyVersion") == "<tv>":
        fields["topologyVersion"] = tv
    elif isinstance(fields.get("topologyVersion"), dict) and fields["topologyVersion"].get("processId") == "<pid>":
        fields["topologyVersion"]["processId"] = tv["processId"]
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"hello": 1, **fields})
    assert e.value.code == code
    assert message in e.value.details["errmsg"]
    assert e.value.details["codeName"] == ("TypeMismatch" if code == 14 else f"Location{code}")


def test_exhaust_hello_streams_one_reply_per_heartbeat(client, server):
    import time

    tv = topology_version(client)
    with connect(server) as s:
        request = {"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 300, "$db": "admin"}
        s.sendall(frame(OP_MSG, struct.pack("<I", 1 << 16) + b"\x00" + bson.encode(request), request_id=77))
        began = time.monotonic()
        response_to = 77
        for _ in range(3):
            request_id, to, flags, reply = recv_frame(s)
            assert flags & 2, "each streamed reply is flagged moreToCome"
            assert to == response_to, "each reply answers the one before it"
            assert reply["ok"] == 1.0 and reply["topologyVersion"] == tv
            response_to = request_id
        # Three replies, each after a 300 ms wait.
        assert time.monotonic() - began >= 0.8
    # Closing the stream leaves the server serving others.
    assert client.admin.command("ping")["ok"] == 1.0


def test_an_idle_driver_does_not_poll_in_a_loop(server):
    """pymongo's monitor streams awaitable hellos; a server that answered
    them at once would be polled continuously."""
    import time

    with server.client(heartbeatFrequencyMS=500) as c:
        c.admin.command("ping")
        before = c.admin.command("serverStatus")["opcounters"]["command"]
        time.sleep(2)
        after = c.admin.command("serverStatus")["opcounters"]["command"]
    # One streamed hello per heartbeat (4) plus the RTT monitor's (4) and
    # our serverStatus: far from the thousands of a busy loop.
    assert after - before < 20, after - before
