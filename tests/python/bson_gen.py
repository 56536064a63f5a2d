"""BSON built by hand, element by element, and random documents of every
BSON type with random `$`-prefixed and dotted keys.

Built by hand so that nothing on the client side reinterprets or reorders
anything: a document is a list of (key, element bytes), and what the server
returns is compared with the bytes we sent.
"""

import random
import struct


def cstring(text):
    return text.encode() + b"\x00"


def string(text):
    data = text.encode() + b"\x00"
    return struct.pack("<i", len(data)) + data


def document(elements):
    """A document from [(key, (type byte, payload bytes))]."""
    body = b"".join(bytes([t]) + cstring(k) + payload for k, (t, payload) in elements)
    return struct.pack("<i", 4 + len(body) + 1) + body + b"\x00"


def array(values):
    return document([(str(i), v) for i, v in enumerate(values)])


def doc_value(elements):
    return (0x03, document(elements))


def array_value(values):
    return (0x04, array(values))


def int32(n):
    return (0x10, struct.pack("<i", n))


def int64(n):
    return (0x12, struct.pack("<q", n))


def str_value(text):
    return (0x02, string(text))


# ----------------------------------------------------------------- random

KEY_ALPHABET = "abcxyz_$.09é"
DOLLAR_KEYS = ["$numberLong", "$oid", "$numberDecimal", "$numberInt", "$numberDouble", "$minKey", "$maxKey",
               "$undefined", "$symbol", "$code", "$scope", "$timestamp", "$regularExpression", "$regex",
               "$options", "$uuid", "$dbPointer", "$binary", "$type", "$date", "$ref", "$id", "$db", "$foo",
               "$set", "$inc", "$"]


class Gen:
    """Random BSON values from a seed; every BSON type appears."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def key(self, dollar_ok=True):
        r = self.r
        if dollar_ok and r.random() < 0.3:
            return r.choice(DOLLAR_KEYS)
        n = r.randint(1, 6)
        k = "".join(r.choice(KEY_ALPHABET) for _ in range(n))
        if not dollar_ok:
            k = k.lstrip("$") or "k"
        return k

    def keys(self, n, dollar_ok=True, taken=()):
        out, seen = [], set(taken)
        while len(out) < n:
            k = self.key(dollar_ok)
            if k not in seen:
                seen.add(k)
                out.append(k)
        return out

    def scalar(self):
        r = self.r
        kind = r.randrange(20)
        if kind == 0:
            return (0x01, struct.pack("<d", r.choice([0.0, -0.0, 1.5, float("inf"), float("-inf"),
                                                      float("nan"), r.uniform(-1e300, 1e300)])))
        if kind == 1:
            return str_value(r.choice(["", "x", "{\"$numberLong\": \"5\"}", "ü€😀"]))
        if kind == 2:
            sub = r.choice([0x00, 0x01, 0x03, 0x04, 0x05, 0x06, 0x07, 0x80])
            data = bytes(r.randrange(256) for _ in range(r.choice([0, 3, 16])))
            if sub == 0x04:
                data = bytes(r.randrange(256) for _ in range(16))
            return (0x05, struct.pack("<i", len(data)) + bytes([sub]) + data)
        if kind == 3:
            data = bytes(r.randrange(256) for _ in range(5))  # the old binary subtype, inner length first
            payload = struct.pack("<i", len(data)) + data
            return (0x05, struct.pack("<i", len(payload)) + b"\x02" + payload)
        if kind == 4:
            return (0x06, b"")  # undefined
        if kind == 5:
            return (0x07, bytes(r.randrange(256) for _ in range(12)))
        if kind == 6:
            return (0x08, bytes([r.randrange(2)]))
        if kind == 7:
            return (0x09, struct.pack("<q", r.randrange(-2**63, 2**63)))
        if kind == 8:
            return (0x0A, b"")
        if kind == 9:
            opts = "".join(r.sample("imsux", r.randint(0, 3)))
            return (0x0B, cstring(r.choice(["a.c", "^x$", ""])) + cstring(opts))
        if kind == 10:
            return (0x0C, string("db.coll") + bytes(r.randrange(256) for _ in range(12)))
        if kind == 11:
            return (0x0D, string("function() {}"))
        if kind == 12:
            return (0x0E, string(r.choice(["sym", "$numberLong"])))
        if kind == 13:
            code, scope = string("x"), self.document(depth=2, dollar_ok=True)
            body = code + scope
            return (0x0F, struct.pack("<i", 4 + len(body)) + body)
        if kind == 14:
            return int32(r.randrange(-2**31, 2**31))
        if kind == 15:
            # Never Timestamp(0, 0): mongod fills it in at the top level.
            return (0x11, struct.pack("<Q", r.randrange(1, 2**64)))
        if kind == 16:
            return int64(r.randrange(-2**63, 2**63))
        if kind == 17:
            return (0x13, bytes(r.randrange(256) for _ in range(16)))
        if kind == 18:
            return (0xFF, b"")
        return (0x7F, b"")

    def value(self, depth):
        r = self.r
        if depth > 0 and r.random() < 0.25:
            return doc_value(self.elements(depth - 1, dollar_ok=True))
        if depth > 0 and r.random() < 0.15:
            return array_value([self.value(depth - 1) for _ in range(r.randint(0, 3))])
        return self.scalar()

    def elements(self, depth, dollar_ok=True, n=None, taken=()):
        n = self.r.randint(0, 4) if n is None else n
        return [(k, self.value(depth)) for k in self.keys(n, dollar_ok, taken)]

    def document(self, depth, dollar_ok=True):
        return document(self.elements(depth, dollar_ok))
