"""The BSON corpus (MongoDB's bson-corpus spec tests) through the server.

The corpus is read at run time from ../shared/spec-tests/bson-corpus/tests
(never copied here: its licence is CC BY-NC-SA).

- Every `valid` case: its canonical_bson is inserted as raw bytes and read
  back as raw bytes (RawBSONDocument both ways, so pymongo re-encodes
  nothing). The server adds an ObjectId `_id` in front when the document has
  none, as mongod does; apart from that the bytes must come back unchanged,
  as mongod stores documents unchanged (it accepts top-level `$`-prefixed and
  dotted field names on insert since 5.0, and the deprecated types).
- Every `decodeErrors` case: the bad bytes are sent as the document of an
  insert in a hand-built OP_MSG, once inside the command document (section
  kind 0) and once as a document sequence (section kind 1, as drivers send
  inserts). The server must answer ok: 0 or close the connection, keep
  serving new connections, and leave the collection as it was.

parseErrors cases are about Extended JSON parsing, which the server never
does: they are not run.
"""

import json
import socket
import struct
from pathlib import Path

import bson
import pytest
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.raw_bson import RawBSONDocument

import unified

CORPUS_DIR = unified.SPEC_ROOT / "bson-corpus" / "tests"

if not CORPUS_DIR.is_dir():
    pytest.skip(f"BSON corpus not found at {CORPUS_DIR} (see ../shared/spec-tests/README.md)",
                allow_module_level=True)

# Raw documents both ways; DATETIME_AUTO so that pymongo can still look
# inside a document whose dates are outside Python's range.
RAW = CodecOptions(document_class=RawBSONDocument, datetime_conversion=DatetimeConversion.DATETIME_AUTO)

OP_MSG = 2013
ID_HEADER = b"\x07_id\x00"  # an ObjectId element named _id
ID_ELEMENT_LEN = len(ID_HEADER) + 12


def _cases(kind):
    params = []
    for path in sorted(CORPUS_DIR.glob("*.json")):
        for i, case in enumerate(json.loads(path.read_text()).get(kind, [])):
            params.append(pytest.param(path.name, i, case, id=f"{path.name}#{i}: {case['description']}"))
    return params


@pytest.fixture(scope="module")
def raw_client(module_server):
    client = module_server.client(socketTimeoutMS=unified.SOCKET_TIMEOUT_MS)
    yield client
    client.close()


@pytest.mark.parametrize(("file", "index", "case"), _cases("valid"))
def test_valid_round_trip(file, index, case, raw_client, record_property):
    record_property("spec_summary", ("bson-corpus valid", file))
    canonical = bytes.fromhex(case["canonical_bson"])
    # One collection per case: nothing else in it to find.
    coll = raw_client.corpus.get_collection(f"{Path(file).stem}_{index}", codec_options=RAW)
    coll.insert_one(RawBSONDocument(canonical, RAW))
    docs = list(coll.find())
    assert len(docs) == 1, f"{len(docs)} documents back"
    back = docs[0].raw
    assert struct.unpack_from("<i", back)[0] == len(back), "length prefix differs from the document's size"
    shown = f"sent     {canonical.hex()}\nreturned {back.hex()}"
    if "_id" in RawBSONDocument(canonical, RAW):
        # The corpus documents that have an _id have it first, where mongod keeps it.
        assert back == canonical, shown
    else:
        assert back[4:4 + len(ID_HEADER)] == ID_HEADER, f"no ObjectId _id in front\n{shown}"
        assert back[4 + ID_ELEMENT_LEN:] == canonical[4:], shown


# ------------------------------------------------------------ decodeErrors


def _cstring(text):
    return text.encode() + b"\x00"


def _string(text):
    data = text.encode() + b"\x00"
    return struct.pack("<i", len(data)) + data


def _document(elements):
    """A BSON document around already-encoded elements."""
    return struct.pack("<i", 4 + len(elements) + 1) + elements + b"\x00"


def _element(type_byte, key, value):
    return bytes([type_byte]) + _cstring(key) + value


def _insert_kind0(bad):
    """OP_MSG sections: {insert: "c", documents: [<bad>], $db: "x"} in one body."""
    documents = _document(_element(0x03, "0", bad))
    body = _document(_element(0x02, "insert", _string("c")) + _element(0x04, "documents", documents)
                     + _element(0x02, "$db", _string("x")))
    return b"\x00" + body


def _insert_kind1(bad):
    """OP_MSG sections: body {insert: "c", $db: "x"} + document sequence "documents": <bad>."""
    body = _document(_element(0x02, "insert", _string("c")) + _element(0x02, "$db", _string("x")))
    identifier = _cstring("documents")
    sequence = struct.pack("<i", 4 + len(identifier) + len(bad)) + identifier + bad
    return b"\x00" + body + b"\x01" + sequence


def _ping():
    return b"\x00" + bson.encode({"ping": 1, "$db": "admin"})


def _exchange(port, sections):
    """Send one OP_MSG on a new connection. Returns the reply document, or
    None if the server closed the connection instead of answering."""
    message = struct.pack("<I", 0) + sections
    header = struct.pack("<iiii", 16 + len(message), 1, 0, OP_MSG)
    with socket.create_connection(("127.0.0.1", port), timeout=unified.SOCKET_TIMEOUT_MS / 1000) as s:
        try:
            s.sendall(header + message)
        except (BrokenPipeError, ConnectionResetError):
            return None
        head = _recv_up_to(s, 16)
        if not head:
            return None
        assert len(head) == 16, "connection closed in the middle of a reply header"
        length, _, response_to, op_code = struct.unpack("<iiii", head)
        rest = _recv_up_to(s, length - 16)
        assert len(rest) == length - 16, "connection closed in the middle of a reply"
    assert (response_to, op_code) == (1, OP_MSG), f"reply header {response_to, op_code}"
    assert rest[4] == 0, "reply does not start with a body section"
    return bson.decode(rest[5:])


def _recv_up_to(s, n):
    """n bytes, or fewer if the server closes the connection first."""
    data = b""
    while len(data) < n:
        try:
            chunk = s.recv(n - len(data))
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


SENTINEL = {"_id": 1, "sentinel": "the only document of x.c"}


@pytest.fixture(scope="module")
def target(raw_client):
    """x.c, holding one known document the bad inserts must leave alone."""
    coll = raw_client.x.get_collection("c", codec_options=RAW)
    coll.insert_one(RawBSONDocument(bson.encode(SENTINEL), RAW))
    return coll


@pytest.mark.parametrize("kind", ["kind0", "kind1"])
@pytest.mark.parametrize(("file", "index", "case"), _cases("decodeErrors"))
def test_decode_error_refused(file, index, case, kind, module_server, target, record_property):
    record_property("spec_summary", ("bson-corpus decodeErrors", file))
    bad = bytes.fromhex(case["bson"])
    sections = _insert_kind0(bad) if kind == "kind0" else _insert_kind1(bad)
    reply = _exchange(module_server.port, sections)
    if reply is not None:
        assert reply.get("ok") == 0, f"bad document accepted: {reply}"
    # Still serving, and nothing changed.
    assert _exchange(module_server.port, _ping()).get("ok") == 1
    assert [d.raw for d in target.find()] == [bson.encode(SENTINEL)]
