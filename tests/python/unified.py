"""A runner for MongoDB's unified test format, the part the CRUD tests use,
driven by pymongo against the real server.

Written for ArborDB from the format's specification (mongodb/specifications,
source/unified-test-format). The spec test files themselves are never copied
into this repository (their licence is CC BY-NC-SA): they are read at run time
from ../shared/spec-tests (see that folder's README.md), or from the folder
ARBORDB_SPEC_TESTS names.

What is implemented: entities (client with command monitoring, database,
collection, session), initialData, the collection/database/client
operations of the CRUD files, the session operations and `session`
arguments of the transactions and sessions files, failPoint and
targetedFailPoint, the testRunner assertions those files use,
expectResult with the special operators $$exists, $$type,
$$unsetOrMatches, $$matchesEntity and $$sessionLsid, expectError,
expectEvents for command events, and outcome. Anything else a file asks for raises
`Unsupported`, which fails the test with the name of the missing piece.

Each test runs on a clean server: every user database is dropped first
(test files use fixed database names, which the expected events check).
"""

import datetime
import os
import re
import uuid
from pathlib import Path

import pymongo
from bson import json_util
from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.errors import BSONError
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from pymongo import monitoring
from pymongo.client_session import ClientSession, TransactionOptions
from pymongo.errors import (
    BulkWriteError,
    ClientBulkWriteException,
    OperationFailure,
    PyMongoError,
)
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import (
    Nearest,
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
)
from pymongo.results import (
    BulkWriteResult,
    ClientBulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)
from pymongo.write_concern import WriteConcern

ROOT = Path(__file__).resolve().parents[2]
SPEC_ROOT = Path(os.environ.get("ARBORDB_SPEC_TESTS", ROOT.parent / "shared" / "spec-tests"))

# Every client the tests make gives up on a reply after this long: a server
# that hangs fails the test instead of stalling the run.
SOCKET_TIMEOUT_MS = 10_000

# Test clients check the server this often (the driver's default is 10 s).
HEARTBEAT_MS = 500

# Newest schema version whose CRUD files this runner reads (spec: a runner
# must refuse files with a newer minor version of the same major).
SCHEMA_VERSION = (1, 21)

# What the runner tells runOnRequirements about the deployment besides what
# the server reports: not serverless, no authentication, no CSFLE.
SERVERLESS = False
AUTH = False
CSFLE = False

# Commands the spec says test runners never observe.
SENSITIVE_COMMANDS = {
    "authenticate", "saslstart", "saslcontinue", "getnonce", "createuser",
    "updateuser", "copydbgetnonce", "copydbsaslstart", "copydb",
}

_MISSING = object()  # an absent field, distinct from a null one


class Unsupported(Exception):
    """The test needs a part of the unified format this runner lacks."""


class SpecError(Exception):
    """The test file is malformed (or the runner misreads it)."""


# ---------------------------------------------------------------- loading


def load_spec_file(path):
    """Parse a test file as Extended JSON (relaxed or canonical)."""
    return json_util.loads(Path(path).read_text())


def parse_version(text):
    """'4.2' -> (4, 2, 0); anything after the three numbers is ignored."""
    parts = [int(p) for p in text.split("-")[0].split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def format_version(v):
    return ".".join(str(x) for x in v)


class SpecCase:
    """One test of one file: what pytest parametrizes over."""

    def __init__(self, path, index, description):
        self.path = Path(path)
        self.index = index
        self.description = description

    @property
    def file(self):
        return self.path.name

    @property
    def key(self):
        """The name used in spec_expected_failures.txt and as the pytest id."""
        return f"{self.file}: {self.description}"


def collect(folder):
    """Every test of every *.json file in `folder`, in file order."""
    cases = []
    for path in sorted(Path(folder).glob("*.json")):
        for i, test in enumerate(load_spec_file(path)["tests"]):
            cases.append(SpecCase(path, i, test["description"]))
    return cases


def load_expected_failures(path):
    """Parse `file.json: test description  # reason` lines into {key: reason}.

    Blank lines and lines starting with '#' are comments. Every entry must
    give a reason.
    """
    expected = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, reason = line.partition("  # ")
        if not sep or not reason.strip():
            raise ValueError(f"{path}:{n}: expected 'file.json: description  # reason'")
        key = key.strip()
        if key in expected:
            raise ValueError(f"{path}:{n}: duplicate entry {key!r}")
        expected[key] = reason.strip()
    return expected


# ------------------------------------------------------- runOnRequirements


class ServerInfo:
    """What runOnRequirements are evaluated against, asked of the server once."""

    def __init__(self, client):
        self.client = client
        self.version = tuple(client.admin.command("buildInfo")["versionArray"][:3])
        hello = client.admin.command("hello")
        if hello.get("msg") == "isdbgrid":
            self.topology = "sharded"
        elif "serviceId" in hello:
            self.topology = "load-balanced"
        elif "setName" in hello:
            self.topology = "replicaset"
        else:
            self.topology = "single"
        self._parameters = {}

    def parameter(self, name):
        """A server parameter's value, or _MISSING if getParameter refuses it."""
        if name not in self._parameters:
            try:
                reply = self.client.admin.command({"getParameter": 1, name: 1})
                self._parameters[name] = reply.get(name, _MISSING)
            except OperationFailure:
                self._parameters[name] = _MISSING
        return self._parameters[name]

    def unmet(self, requirement):
        """Why one runOnRequirement object is not met (None if it is)."""
        r = requirement
        if "minServerVersion" in r and self.version < parse_version(r["minServerVersion"]):
            return f"needs server >= {r['minServerVersion']} (server is {format_version(self.version)})"
        if "maxServerVersion" in r and self.version > parse_version(r["maxServerVersion"]):
            return f"needs server <= {r['maxServerVersion']} (server is {format_version(self.version)})"
        if "topologies" in r:
            accepted = set(r["topologies"])
            if "sharded" in accepted:
                accepted.add("sharded-replicaset")
            if self.topology not in accepted:
                return f"needs topology {'/'.join(r['topologies'])} (server is {self.topology})"
        if r.get("serverless") == ("forbid" if SERVERLESS else "require"):
            return f"serverless: {r['serverless']}"
        if "auth" in r and r["auth"] != AUTH:
            return f"auth: {r['auth']}"
        if "authMechanism" in r:
            return f"authMechanism {r['authMechanism']} (no authentication)"
        if "csfle" in r and r["csfle"] != CSFLE:
            return f"csfle: {r['csfle']}"
        for name, want in r.get("serverParameters", {}).items():
            have = self.parameter(name)
            if have is _MISSING or not values_equal(want, have):
                return f"server parameter {name}={want!r} (server: {'unknown' if have is _MISSING else repr(have)})"
        known = {"minServerVersion", "maxServerVersion", "topologies", "serverless",
                 "auth", "authMechanism", "csfle", "serverParameters"}
        if set(r) - known:
            raise Unsupported(f"runOnRequirement fields {sorted(set(r) - known)}")
        return None

    def skip_reason(self, requirements):
        """None if any requirement is met, else why none is."""
        reasons = []
        for r in requirements:
            why = self.unmet(r)
            if why is None:
                return None
            reasons.append(why)
        return "runOnRequirements not met: " + "; or ".join(reasons)


# ---------------------------------------------------------------- matching

_TYPE_ALIASES = {
    "double", "string", "object", "array", "binData", "undefined", "objectId",
    "bool", "date", "null", "regex", "dbPointer", "javascript", "symbol",
    "javascriptWithScope", "int", "timestamp", "long", "decimal", "minKey", "maxKey",
}


def bson_type(value):
    """The $type alias of a decoded (or to-be-encoded) Python value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Int64):
        return "long"
    if isinstance(value, int):
        return "int" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Code):  # before str: Code is a str subclass
        return "javascript" if value.scope is None else "javascriptWithScope"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (dict, DBRef)):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, (bytes, Binary, uuid.UUID)):
        return "binData"
    if isinstance(value, ObjectId):
        return "objectId"
    if isinstance(value, datetime.datetime):
        return "date"
    if isinstance(value, (Regex, re.Pattern)):
        return "regex"
    if isinstance(value, Timestamp):
        return "timestamp"
    if isinstance(value, Decimal128):
        return "decimal"
    if isinstance(value, MinKey):
        return "minKey"
    if isinstance(value, MaxKey):
        return "maxKey"
    raise Unsupported(f"no BSON type known for {type(value).__name__}")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values_equal(expected, actual):
    """Scalar equality with the spec's flexible numerics (int, long, double
    compare by value; Decimal128 does not take part)."""
    if _is_number(expected) and _is_number(actual):
        return expected == actual
    return bson_type(expected) == bson_type(actual) and expected == actual


def _special(value):
    """The operator name if `value` is a {$$operator: argument} document."""
    if isinstance(value, dict) and len(value) == 1:
        (key,) = value
        if key.startswith("$$"):
            return key
    return None


def _show(value):
    return json_util.dumps(value) if value is not _MISSING else "<absent>"


class Matcher:
    """The spec's 'Evaluating Matches' over one test's entity map."""

    def __init__(self, entities, lsids=None):
        self.entities = entities
        # Session entity id -> its lsid, kept after the session ends.
        self.lsids = {} if lsids is None else lsids

    def match(self, expected, actual, root=True, path="result"):
        """Assert `actual` matches `expected`; root-level documents may have
        extra fields, nested ones may not."""
        op = _special(expected)
        if op is not None:
            self._operator(op, expected[op], actual, root, path)
            return
        if isinstance(expected, dict):
            if not isinstance(actual, dict):
                self._fail(path, expected, actual, "expected a document")
            for key, want in expected.items():
                sub = f"{path}.{key}"
                have = actual.get(key, _MISSING)
                key_op = _special(want)
                if key_op == "$$exists":
                    if want[key_op] != (have is not _MISSING):
                        self._fail(sub, want, have, "field presence differs")
                    continue
                if key_op == "$$unsetOrMatches" and have is _MISSING:
                    continue
                if have is _MISSING:
                    self._fail(sub, want, have, "field missing")
                self.match(want, have, root=False, path=sub)
            if not root:
                extra = [k for k in actual if k not in expected]
                if extra:
                    self._fail(path, expected, actual, f"unexpected fields {extra}")
            return
        if isinstance(expected, list):
            if not isinstance(actual, list):
                self._fail(path, expected, actual, "expected an array")
            if len(expected) != len(actual):
                self._fail(path, expected, actual, f"{len(actual)} elements, expected {len(expected)}")
            for i, (want, have) in enumerate(zip(expected, actual)):
                self.match(want, have, root=False, path=f"{path}[{i}]")
            return
        if actual is _MISSING or not values_equal(expected, actual):
            self._fail(path, expected, actual, "values differ")

    def match_documents(self, expected, actual, path="result"):
        """An iterable's documents (find, aggregate...): same count, each root-level."""
        if not isinstance(actual, list) or len(expected) != len(actual):
            self._fail(path, expected, actual, "document lists differ in length")
        for i, (want, have) in enumerate(zip(expected, actual)):
            self.match(want, have, root=True, path=f"{path}[{i}]")

    def _operator(self, op, arg, actual, root, path):
        if op == "$$unsetOrMatches":
            if actual is not _MISSING:
                self.match(arg, actual, root=root, path=path)
        elif op == "$$exists":
            if arg != (actual is not _MISSING):
                self._fail(path, {op: arg}, actual, "field presence differs")
        elif op == "$$type":
            names = [arg] if isinstance(arg, str) else arg
            unknown = set(names) - _TYPE_ALIASES - {"number"}
            if unknown:
                raise Unsupported(f"$$type aliases {sorted(unknown)}")
            if actual is _MISSING:
                self._fail(path, {op: arg}, actual, "field missing")
            have = bson_type(actual)
            if have not in names and not ("number" in names and have in ("int", "long", "double", "decimal")):
                self._fail(path, {op: arg}, actual, f"type is {have}")
        elif op == "$$sessionLsid":
            if arg not in self.lsids:
                raise SpecError(f"$$sessionLsid: no session {arg!r}")
            self.match(self.lsids[arg], actual, root=False, path=path)
        elif op == "$$matchesEntity":
            if arg not in self.entities:
                raise SpecError(f"$$matchesEntity: no entity {arg!r}")
            self.match(self.entities[arg], actual, root=root, path=path)
        else:
            raise Unsupported(f"special operator {op}")

    @staticmethod
    def _fail(path, expected, actual, why):
        raise AssertionError(f"{path}: {why}\n  expected: {_show(expected)}\n  actual:   {_show(actual)}")


def exactly_equal(expected, actual):
    """The outcome comparison: same fields (any order), same BSON types, same
    values; no special operators, no flexible numerics."""
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and set(expected) == set(actual)
                and all(exactly_equal(v, actual[k]) for k, v in expected.items()))
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(exactly_equal(e, a) for e, a in zip(expected, actual)))
    return bson_type(expected) == bson_type(actual) and expected == actual


# ---------------------------------------------------------- result documents


def result_document(result):
    """The CRUD spec's result model of a pymongo result, as a document."""
    if isinstance(result, InsertOneResult):
        doc = {"insertedId": result.inserted_id}
    elif isinstance(result, InsertManyResult):
        doc = {"insertedIds": {str(i): v for i, v in enumerate(result.inserted_ids)}}
    elif not result.acknowledged:
        return {"acknowledged": False}
    elif isinstance(result, UpdateResult):
        doc = _update_result(result)
    elif isinstance(result, DeleteResult):
        doc = {"deletedCount": result.deleted_count}
    elif isinstance(result, BulkWriteResult):
        doc = {
            "insertedCount": result.inserted_count,
            "matchedCount": result.matched_count,
            "modifiedCount": result.modified_count,
            "deletedCount": result.deleted_count,
            "upsertedCount": result.upserted_count,
            "upsertedIds": {str(i): v for i, v in result.upserted_ids.items()},
        }
    elif isinstance(result, ClientBulkWriteResult):
        doc = _client_bulk_result(result)
    else:
        raise Unsupported(f"result type {type(result).__name__}")
    if not result.acknowledged:
        doc["acknowledged"] = False
    return doc


def _update_result(result):
    doc = {
        "matchedCount": result.matched_count,
        "modifiedCount": result.modified_count,
        "upsertedCount": 1 if result.did_upsert else 0,
    }
    if result.did_upsert:
        doc["upsertedId"] = result.upserted_id
    return doc


def _client_bulk_result(result):
    doc = {
        "insertedCount": result.inserted_count,
        "upsertedCount": result.upserted_count,
        "matchedCount": result.matched_count,
        "modifiedCount": result.modified_count,
        "deletedCount": result.deleted_count,
    }
    if result.has_verbose_results:
        doc["insertResults"] = {str(i): {"insertedId": r.inserted_id} for i, r in result.insert_results.items()}
        # A client bulk write's UpdateResult has no upsertedCount (spec:
        # crud/bulk-write.md, "UpdateResult").
        doc["updateResults"] = {
            str(i): {k: v for k, v in _update_result(r).items() if k != "upsertedCount"}
            for i, r in result.update_results.items()
        }
        doc["deleteResults"] = {str(i): {"deletedCount": r.deleted_count} for i, r in result.delete_results.items()}
    return doc


def _bulk_error_result(details):
    """The partial BulkWriteResult inside a BulkWriteError's details."""
    return {
        "insertedCount": details["nInserted"],
        "matchedCount": details["nMatched"],
        "modifiedCount": details["nModified"],
        "deletedCount": details["nRemoved"],
        "upsertedCount": details["nUpserted"],
        "upsertedIds": {str(u["index"]): u["_id"] for u in details.get("upserted", [])},
    }


# ------------------------------------------------------------------ errors

# Exceptions an operation may raise that count as its outcome; anything else
# escaping an operation is a bug in the runner and fails the test as such.
OPERATION_ERRORS = (PyMongoError, BSONError, TypeError, ValueError)


def is_client_error(exc):
    """True if the error did not come from a server reply (validation,
    network...)."""
    if isinstance(exc, ClientBulkWriteException):
        return isinstance(exc.error, Exception) and is_client_error(exc.error)
    return not isinstance(exc, OperationFailure)


def _server_errors(exc):
    """The server error documents an error carries: the reply for a command
    error; every write error and write concern error for a bulk write."""
    if isinstance(exc, ClientBulkWriteException):
        error = exc.error
        if isinstance(error, dict):
            return [error]
        return _server_errors(error) if isinstance(error, Exception) else []
    if isinstance(exc, BulkWriteError):
        return list(exc.details.get("writeErrors", [])) + list(exc.details.get("writeConcernErrors", []))
    if isinstance(exc, OperationFailure):
        return [exc.details or {"code": exc.code, "errmsg": str(exc)}]
    return []


def check_error(expected, exc, matcher):
    """Assert an operation's error against an expectedError object."""
    known = {"isError", "isClientError", "errorContains", "errorCode", "errorCodeName",
             "errorLabelsContain", "errorLabelsOmit", "errorResponse", "expectResult",
             "writeErrors", "writeConcernErrors"}
    if set(expected) - known:
        raise Unsupported(f"expectError fields {sorted(set(expected) - known)}")
    # isError needs no check of its own: the caller has an error in hand.
    what = f"{type(exc).__name__}: {exc}"
    server = _server_errors(exc)
    if "isClientError" in expected:
        assert is_client_error(exc) == expected["isClientError"], (
            f"expected a {'client' if expected['isClientError'] else 'server'} error, got {what}")
    if "errorContains" in expected:
        needle = expected["errorContains"].lower()
        messages = [e.get("errmsg", "") for e in server] or [str(exc)]
        assert any(needle in m.lower() for m in messages), (
            f"no error message contains {expected['errorContains']!r}: {messages}")
    if "errorCode" in expected:
        codes = [e.get("code") for e in server]
        assert expected["errorCode"] in codes, f"expected error code {expected['errorCode']}, got {codes} ({what})"
    if "errorCodeName" in expected:
        names = [str(e.get("codeName", "")).lower() for e in server]
        assert expected["errorCodeName"].lower() in names, (
            f"expected codeName {expected['errorCodeName']}, got {names} ({what})")
    for label in expected.get("errorLabelsContain", []):
        assert isinstance(exc, PyMongoError) and exc.has_error_label(label), f"error lacks label {label}: {what}"
    for label in expected.get("errorLabelsOmit", []):
        assert not (isinstance(exc, PyMongoError) and exc.has_error_label(label)), f"error has label {label}: {what}"
    if "errorResponse" in expected:
        assert isinstance(exc, OperationFailure), f"no server response in {what}"
        # A client bulk write's top-level failure is its `error`.
        response = exc.details
        if isinstance(exc, ClientBulkWriteException) and isinstance(exc.error, OperationFailure):
            response = exc.error.details
        matcher.match(expected["errorResponse"], response, root=True, path="errorResponse")
    if "expectResult" in expected:
        if isinstance(exc, BulkWriteError):
            partial = _bulk_error_result(exc.details)
        elif isinstance(exc, ClientBulkWriteException):
            result = exc.partial_result
            partial = _client_bulk_result(result) if result is not None else _MISSING
        else:
            raise AssertionError(f"expected a result with the error, got {what}")
        matcher.match(expected["expectResult"], partial, root=True, path="expectError.expectResult")
    if "writeErrors" in expected:
        assert isinstance(exc, ClientBulkWriteException), f"expected client bulk write errors, got {what}"
        actual = {str(e["idx"]): e for e in exc.write_errors}
        assert set(actual) == set(expected["writeErrors"]), (
            f"write errors at {sorted(actual)}, expected at {sorted(expected['writeErrors'])}")
        for idx, want in expected["writeErrors"].items():
            matcher.match(want, actual[idx], root=True, path=f"writeErrors.{idx}")
    if "writeConcernErrors" in expected:
        assert isinstance(exc, ClientBulkWriteException), f"expected client bulk write errors, got {what}"
        actual = list(exc.write_concern_errors)
        assert len(actual) == len(expected["writeConcernErrors"]), f"write concern errors: {actual}"
        for i, (want, have) in enumerate(zip(expected["writeConcernErrors"], actual)):
            # The format's `message` is the server's (and pymongo's) `errmsg`.
            have = {**have, "message": have["errmsg"]} if "errmsg" in have else have
            matcher.match(want, have, root=True, path=f"writeConcernErrors[{i}]")


# ------------------------------------------------------ command monitoring


class EventRecorder(monitoring.CommandListener):
    """The command events of one client entity, as observeEvents asks."""

    NAMES = {"commandStartedEvent", "commandSucceededEvent", "commandFailedEvent"}

    def __init__(self, observe, ignore):
        unknown = set(observe) - self.NAMES
        if unknown:
            raise Unsupported(f"observeEvents {sorted(unknown)}")
        self.observe = set(observe)
        self.ignore = {"configurefailpoint", *SENSITIVE_COMMANDS, *(c.lower() for c in ignore)}
        self.events = []
        self.recording = True

    def _record(self, kind, event):
        if self.recording and kind in self.observe and event.command_name.lower() not in self.ignore:
            self.events.append((kind, event))

    def started(self, event):
        self._record("commandStartedEvent", event)

    def succeeded(self, event):
        self._record("commandSucceededEvent", event)

    def failed(self, event):
        self._record("commandFailedEvent", event)


def check_events(expected, recorder, matcher, client_id):
    """Assert one expectedEventsForClient object against what was recorded."""
    if expected.get("eventType", "command") != "command":
        raise Unsupported(f"eventType {expected['eventType']}")
    want, have = expected["events"], recorder.events
    shown = "\n".join(f"    {kind} {e.command_name}" for kind, e in have)
    if expected.get("ignoreExtraEvents", False):
        assert len(have) >= len(want), f"{client_id}: {len(have)} events, expected at least {len(want)}:\n{shown}"
    else:
        assert len(have) == len(want), f"{client_id}: {len(have)} events, expected {len(want)}:\n{shown}"
    for i, (spec, (kind, event)) in enumerate(zip(want, have)):
        ((want_kind, fields),) = spec.items()
        path = f"{client_id}.events[{i}]"
        assert kind == want_kind, f"{path}: got {kind} for {event.command_name}, expected {want_kind}"
        unknown = set(fields) - {"command", "reply", "commandName", "databaseName"}
        if unknown:
            raise Unsupported(f"{want_kind} fields {sorted(unknown)}")
        if "commandName" in fields:
            assert event.command_name == fields["commandName"], (
                f"{path}: command {event.command_name}, expected {fields['commandName']}")
        if "databaseName" in fields:
            assert event.database_name == fields["databaseName"], (
                f"{path}: database {event.database_name}, expected {fields['databaseName']}")
        if "command" in fields:
            matcher.match(fields["command"], dict(event.command), root=True, path=f"{path}.command")
        if "reply" in fields:
            matcher.match(fields["reply"], dict(event.reply), root=True, path=f"{path}.reply")


# ---------------------------------------------------------------- options


_READ_PREFERENCES = {
    "primary": Primary, "primaryPreferred": PrimaryPreferred, "secondary": Secondary,
    "secondaryPreferred": SecondaryPreferred, "nearest": Nearest,
}


def read_preference(spec):
    cls = _READ_PREFERENCES[spec["mode"]]
    if cls is Primary:
        return Primary()
    if "hedge" in spec:
        raise Unsupported("readPreference hedge")
    return cls(tag_sets=spec.get("tagSets"), max_staleness=spec.get("maxStalenessSeconds", -1))


def write_concern(spec):
    return WriteConcern(w=spec.get("w"), wtimeout=spec.get("wtimeoutMS"), j=spec.get("journal"))


def collection_options(spec):
    """collectionOrDatabaseOptions as pymongo keyword arguments."""
    unknown = set(spec) - {"readConcern", "writeConcern", "readPreference"}
    if unknown:
        raise Unsupported(f"collection/database options {sorted(unknown)}")
    kw = {}
    if "readConcern" in spec:
        kw["read_concern"] = ReadConcern(spec["readConcern"]["level"])
    if "writeConcern" in spec:
        kw["write_concern"] = write_concern(spec["writeConcern"])
    if "readPreference" in spec:
        kw["read_preference"] = read_preference(spec["readPreference"])
    return kw


def transaction_options(spec):
    """startTransaction's arguments or defaultTransactionOptions, as pymongo's."""
    unknown = set(spec) - {"readConcern", "writeConcern", "readPreference", "maxCommitTimeMS"}
    if unknown:
        raise Unsupported(f"transaction options {sorted(unknown)}")
    kw = {}
    if "readConcern" in spec:
        kw["read_concern"] = ReadConcern(spec["readConcern"].get("level"))
    if "writeConcern" in spec:
        wc = spec["writeConcern"]
        kw["write_concern"] = wc if isinstance(wc, WriteConcern) else write_concern(wc)
    if "readPreference" in spec:
        kw["read_preference"] = read_preference(spec["readPreference"])
    if "maxCommitTimeMS" in spec:
        kw["max_commit_time_ms"] = spec["maxCommitTimeMS"]
    return kw


# -------------------------------------------------------------- operations


def _arguments(args, positional, keywords):
    """Split an operation's arguments into pymongo's positional and keyword
    arguments; `keywords` maps a spec argument name to pymongo's. An
    argument the operation does not know is an error, never dropped."""
    unknown = set(args) - set(positional) - set(keywords)
    if unknown:
        raise Unsupported(f"arguments {sorted(unknown)}")
    missing = [p for p in positional if p not in args]
    if missing:
        raise SpecError(f"missing required arguments {missing}")
    return [args[p] for p in positional], {keywords[k]: v for k, v in args.items() if k in keywords}


def _same(*names):
    """Arguments pymongo takes under their spec names: they become fields of
    the command."""
    return {n: n for n in names}


_WRITE_MODELS = {
    "insertOne": (pymongo.InsertOne, ["document"], {}),
    "updateOne": (pymongo.UpdateOne, ["filter", "update"], {
        "upsert": "upsert", "collation": "collation", "arrayFilters": "array_filters", "hint": "hint",
        "sort": "sort"}),
    "updateMany": (pymongo.UpdateMany, ["filter", "update"], {
        "upsert": "upsert", "collation": "collation", "arrayFilters": "array_filters", "hint": "hint"}),
    "replaceOne": (pymongo.ReplaceOne, ["filter", "replacement"], {
        "upsert": "upsert", "collation": "collation", "hint": "hint", "sort": "sort"}),
    "deleteOne": (pymongo.DeleteOne, ["filter"], {"collation": "collation", "hint": "hint"}),
    "deleteMany": (pymongo.DeleteMany, ["filter"], {"collation": "collation", "hint": "hint"}),
}


def write_model(spec, client_level):
    """A {insertOne: {...}} request of bulkWrite / clientBulkWrite as a pymongo model."""
    ((kind, args),) = spec.items()
    if kind not in _WRITE_MODELS:
        raise Unsupported(f"write model {kind}")
    cls, positional, keywords = _WRITE_MODELS[kind]
    if client_level:
        keywords = {**keywords, "namespace": "namespace"}
    pos, kw = _arguments(args, positional, keywords)
    return cls(*pos, **kw)


_RETURN_DOCUMENT = {"before": pymongo.ReturnDocument.BEFORE, "after": pymongo.ReturnDocument.AFTER}


def convert_argument(name, value):
    """Argument values that are objects in pymongo, not documents."""
    if name == "requests":
        return [write_model(r, client_level=False) for r in value]
    if name == "models":
        return [write_model(m, client_level=True) for m in value]
    if name == "returnDocument":
        return _RETURN_DOCUMENT[value.lower()]
    if name == "writeConcern":
        return write_concern(value)
    return value


def _count(coll, filter, session=None):
    # pymongo 4 has no Collection.count: send the count command the CRUD spec describes.
    return coll.database.command({"count": coll.name, "query": filter}, session=session)["n"]


def _create_collection(db, name, **kw):
    # check_exists=False: send only the create command, as the spec's createCollection does.
    db.create_collection(name, check_exists=False, **kw)


def _drop_collection(db, name):
    db.drop_collection(name)


def _modify_collection(db, name, **kw):
    return db.command({"collMod": name, **kw})


_FIND_ONE_AND = {
    "projection": "projection", "sort": "sort", "upsert": "upsert", "hint": "hint", "let": "let",
    "comment": "comment", "returnDocument": "return_document", "arrayFilters": "array_filters",
    **_same("collation", "bypassDocumentValidation", "maxTimeMS"),
}
_UPDATE = {
    "upsert": "upsert", "bypassDocumentValidation": "bypass_document_validation", "collation": "collation",
    "hint": "hint", "let": "let", "comment": "comment",
}

# Operation name -> (positional arguments, keyword map, function, result kind).
# Result kinds: "value" (compared as returned), "documents" (an iterable of
# root-level documents, fully iterated), "result" (a result model, compared
# as result_document gives it).
COLLECTION_OPERATIONS = {
    "listIndexes": ([], _same("batchSize"), lambda c, **k: list(c.list_indexes(**k)), "documents"),
    "aggregate": (["pipeline"], _same("batchSize", "allowDiskUse", "collation", "comment", "let", "hint",
                                     "maxTimeMS", "bypassDocumentValidation"),
                  lambda c, *a, **k: list(c.aggregate(*a, **k)), "documents"),
    "bulkWrite": (["requests"], {"ordered": "ordered", "bypassDocumentValidation": "bypass_document_validation",
                                 "comment": "comment", "let": "let"},
                  pymongo.collection.Collection.bulk_write, "result"),
    "count": (["filter"], {}, _count, "value"),
    "countDocuments": (["filter"], _same("comment", "skip", "limit", "hint", "collation", "maxTimeMS"),
                       pymongo.collection.Collection.count_documents, "value"),
    "createIndex": (["keys"], _same("unique", "name"),
                    lambda c, keys, **k: c.create_index(list(keys.items()), **k), "value"),
    "deleteMany": (["filter"], _same("collation", "hint", "comment", "let"),
                   pymongo.collection.Collection.delete_many, "result"),
    "deleteOne": (["filter"], _same("collation", "hint", "comment", "let"),
                  pymongo.collection.Collection.delete_one, "result"),
    "distinct": (["fieldName"], _same("filter", "comment", "hint", "collation", "maxTimeMS"),
                 pymongo.collection.Collection.distinct, "value"),
    "estimatedDocumentCount": ([], _same("comment", "maxTimeMS"),
                               pymongo.collection.Collection.estimated_document_count, "value"),
    "find": ([], {"filter": "filter", "sort": "sort", "projection": "projection", "skip": "skip",
                  "limit": "limit", "batchSize": "batch_size", "comment": "comment", "collation": "collation",
                  "hint": "hint", "allowDiskUse": "allow_disk_use", "let": "let", "maxTimeMS": "max_time_ms"},
             lambda c, **k: list(c.find(**k)), "documents"),
    "findOneAndDelete": (["filter"], _FIND_ONE_AND, pymongo.collection.Collection.find_one_and_delete, "value"),
    "findOneAndReplace": (["filter", "replacement"], _FIND_ONE_AND,
                          pymongo.collection.Collection.find_one_and_replace, "value"),
    "findOneAndUpdate": (["filter", "update"], _FIND_ONE_AND,
                         pymongo.collection.Collection.find_one_and_update, "value"),
    "insertMany": (["documents"], {"ordered": "ordered", "comment": "comment",
                                   "bypassDocumentValidation": "bypass_document_validation"},
                   pymongo.collection.Collection.insert_many, "result"),
    "insertOne": (["document"], {"comment": "comment", "bypassDocumentValidation": "bypass_document_validation"},
                  pymongo.collection.Collection.insert_one, "result"),
    "replaceOne": (["filter", "replacement"], {**_UPDATE, "sort": "sort"},
                   pymongo.collection.Collection.replace_one, "result"),
    "updateMany": (["filter", "update"], {**_UPDATE, "arrayFilters": "array_filters"},
                   pymongo.collection.Collection.update_many, "result"),
    "updateOne": (["filter", "update"], {**_UPDATE, "arrayFilters": "array_filters", "sort": "sort"},
                  pymongo.collection.Collection.update_one, "result"),
}

DATABASE_OPERATIONS = {
    "aggregate": (["pipeline"], _same("batchSize", "allowDiskUse", "collation", "comment", "let", "maxTimeMS",
                                     "bypassDocumentValidation"),
                  lambda d, *a, **k: list(d.aggregate(*a, **k)), "documents"),
    "createCollection": (["collection"], _same("viewOn", "pipeline", "capped", "size", "max", "validator",
                                                "collation", "clusteredIndex", "timeseries",
                                                "expireAfterSeconds"),
                         _create_collection, "value"),
    "dropCollection": (["collection"], {}, _drop_collection, "value"),
    "listCollections": ([], _same("filter", "batchSize"),
                        lambda d, **k: list(d.list_collections(**k)), "documents"),
    "listCollectionNames": ([], _same("filter"), pymongo.database.Database.list_collection_names, "value"),
    "modifyCollection": (["collection"], _same("validator", "validationLevel", "validationAction"),
                         _modify_collection, "value"),
    "runCommand": (["command", "commandName"], {"readPreference": "read_preference"},
                   lambda d, command, name, **k: d.command(
                       command, **{**k, **({"read_preference": read_preference(k["read_preference"])}
                                           if "read_preference" in k else {})}), "value"),
}

SESSION_OPERATIONS = {
    "startTransaction": ([], _same("readConcern", "writeConcern", "readPreference", "maxCommitTimeMS"),
                         lambda s, **k: s.start_transaction(**transaction_options(k)), "none"),
    "commitTransaction": ([], {}, ClientSession.commit_transaction, "none"),
    "abortTransaction": ([], {}, ClientSession.abort_transaction, "none"),
    "endSession": ([], {}, ClientSession.end_session, "none"),
    # pymongo keeps a snapshot session's time private (`_snapshot_time`).
    "getSnapshotTime": ([], {}, lambda s: s._snapshot_time, "value"),
}

CLIENT_OPERATIONS = {
    "listDatabases": ([], _same("filter"), lambda c, **k: list(c.list_databases(**k)), "documents"),
    "clientBulkWrite": (["models"], {
        "ordered": "ordered", "verboseResults": "verbose_results", "comment": "comment", "let": "let",
        "bypassDocumentValidation": "bypass_document_validation", "writeConcern": "write_concern"},
        pymongo.MongoClient.bulk_write, "result"),
}


class Runner:
    """Runs one test of one file (spec: 'Executing a Test')."""

    def __init__(self, file_data, test, uri, internal, server):
        self.file = file_data
        self.test = test
        self.uri = uri
        self.internal = internal  # the internal MongoClient
        self.server = server      # ServerInfo
        self.entities = {}
        self.recorders = {}       # client id -> EventRecorder
        self.clients = []
        self.fail_points = []     # (client, fail point name) to switch off afterwards
        self.lsids = {}           # session id -> lsid (kept after the session ends)
        self.matcher = Matcher(self.entities, self.lsids)

    def skip_reason(self):
        """Why this test must be skipped, or None."""
        if "skipReason" in self.test:
            return f"skipReason: {self.test['skipReason']}"
        for requirements in (self.file.get("runOnRequirements"), self.test.get("runOnRequirements")):
            if requirements:
                why = self.server.skip_reason(requirements)
                if why:
                    return why
        return None

    def run(self):
        version = parse_version(self.file["schemaVersion"])
        if version[0] != SCHEMA_VERSION[0] or version[:2] > SCHEMA_VERSION:
            raise Unsupported(f"schemaVersion {self.file['schemaVersion']} (runner reads up to "
                              f"{format_version(SCHEMA_VERSION[:2])})")
        self._clean_databases()
        # No transaction of an earlier test may still hold a document.
        self.internal.admin.command("killAllSessions", [])
        for data in self.file.get("initialData", []):
            self._load(data)
        try:
            for spec in self.file.get("createEntities", []):
                self._create_entity(spec)
            for op in self.test["operations"]:
                self._operation(op)
            for recorder in self.recorders.values():
                recorder.recording = False
            for expected in self.test.get("expectEvents", []):
                check_events(expected, self.recorders[expected["client"]], self.matcher, expected["client"])
            for data in self.test.get("outcome", []):
                self._check_outcome(data)
        finally:
            self._disable_fail_points()
            for entity in self.entities.values():
                if isinstance(entity, ClientSession):
                    entity.end_session()
            for client in self.clients:
                client.close()

    # -- set-up and outcome, through the internal client

    def _clean_databases(self):
        """Drop every user database, so no test sees another's leftovers."""
        for name in self.internal.list_database_names():
            if name not in ("admin", "config", "local"):
                self.internal.drop_database(name)

    def _load(self, data):
        db = self.internal.get_database(data["databaseName"], write_concern=WriteConcern("majority"))
        db.drop_collection(data["collectionName"])
        if "createOptions" in data or not data["documents"]:
            db.create_collection(data["collectionName"], check_exists=False, **data.get("createOptions", {}))
        if data["documents"]:
            db[data["collectionName"]].insert_many(data["documents"])

    def _check_outcome(self, data):
        coll = self.internal.get_database(data["databaseName"]).get_collection(
            data["collectionName"], read_preference=Primary(), read_concern=ReadConcern("local"))
        actual = list(coll.find({}, sort=[("_id", 1)]))
        expected = data["documents"]
        assert exactly_equal(expected, actual), (
            f"outcome of {data['databaseName']}.{data['collectionName']} differs\n"
            f"  expected: {json_util.dumps(expected)}\n  actual:   {json_util.dumps(actual)}")

    # -- entities

    def _create_entity(self, spec):
        ((kind, args),) = spec.items()
        name = args["id"]
        if name in self.entities:
            raise SpecError(f"duplicate entity {name}")
        if kind == "client":
            known = {"id", "uriOptions", "observeEvents", "ignoreCommandMonitoringEvents", "useMultipleMongoses"}
            if set(args) - known:
                raise Unsupported(f"client entity fields {sorted(set(args) - known)}")
            listeners = []
            if "observeEvents" in args:
                recorder = EventRecorder(args["observeEvents"], args.get("ignoreCommandMonitoringEvents", []))
                self.recorders[name] = recorder
                listeners.append(recorder)
            # useMultipleMongoses only matters on sharded and load-balanced topologies.
            # A short heartbeat: after a state change error the driver finds
            # the server again within it (its awaitable hello waits that long).
            options = {"socketTimeoutMS": SOCKET_TIMEOUT_MS, "heartbeatFrequencyMS": HEARTBEAT_MS,
                       **args.get("uriOptions", {})}
            client = pymongo.MongoClient(self.uri, event_listeners=listeners, **options)
            self.clients.append(client)
            entity = client
        elif kind == "database":
            client = self._entity(args["client"], pymongo.MongoClient)
            entity = client.get_database(args["databaseName"], **collection_options(args.get("databaseOptions", {})))
        elif kind == "collection":
            db = self._entity(args["database"], pymongo.database.Database)
            entity = db.get_collection(args["collectionName"],
                                       **collection_options(args.get("collectionOptions", {})))
        elif kind == "session":
            client = self._entity(args["client"], pymongo.MongoClient)
            options = dict(args.get("sessionOptions", {}))
            kw = {}
            if "defaultTransactionOptions" in options:
                kw["default_transaction_options"] = TransactionOptions(
                    **transaction_options(options.pop("defaultTransactionOptions")))
            if "causalConsistency" in options:
                kw["causal_consistency"] = options.pop("causalConsistency")
            if "snapshot" in options:
                kw["snapshot"] = options.pop("snapshot")
            snapshot_time = options.pop("snapshotTime", None)
            if options:
                raise Unsupported(f"session options {sorted(options)}")
            entity = client.start_session(**kw)
            if snapshot_time is not None:
                # pymongo has no public option for it: set what its first
                # read would have recorded.
                entity._snapshot_time = self.entities[snapshot_time]
            self.lsids[name] = entity.session_id
        else:
            raise Unsupported(f"entity type {kind}")
        self.entities[name] = entity

    def _entity(self, name, cls):
        entity = self.entities[name]
        if not isinstance(entity, cls):
            raise SpecError(f"entity {name} is a {type(entity).__name__}, expected {cls.__name__}")
        return entity

    # -- operations

    def _operation(self, op):
        known = {"name", "object", "arguments", "expectResult", "expectError", "ignoreResultAndError",
                 "saveResultAsEntity"}
        if set(op) - known:
            raise Unsupported(f"operation fields {sorted(set(op) - known)}")
        args = dict(op.get("arguments", {}))
        if op["object"] == "testRunner":
            self._special_operation(op["name"], args)
            return
        # The CRUD spec: drivers do not send rawData to servers older than 8.2
        # (pymongo has no rawData at all, so on 8.2+ the argument stays unknown).
        if "rawData" in args and self.server.version < (8, 2, 0):
            del args["rawData"]

        target = self.entities[op["object"]]
        session = args.pop("session", None)
        if isinstance(target, ClientSession):
            table = SESSION_OPERATIONS
        elif isinstance(target, pymongo.collection.Collection):
            table = COLLECTION_OPERATIONS
        elif isinstance(target, pymongo.database.Database):
            table = DATABASE_OPERATIONS
        elif isinstance(target, pymongo.MongoClient):
            table = CLIENT_OPERATIONS
        else:
            raise Unsupported(f"operations on {type(target).__name__}")
        if op["name"] not in table:
            raise Unsupported(f"operation {op['name']} on {type(target).__name__}")
        positional, keywords, function, kind = table[op["name"]]
        pos, kw = _arguments({k: convert_argument(k, v) for k, v in args.items()}, positional, keywords)
        if session is not None:
            kw["session"] = self._entity(session, ClientSession)

        # Only the driver call itself is inside the try: what it raises is the
        # operation's outcome; errors of the runner stay errors.
        try:
            result, error = function(target, *pos, **kw), None
        except OPERATION_ERRORS as exc:
            result, error = None, exc

        where = f"{op['name']} on {op['object']}"
        if op.get("ignoreResultAndError"):
            return
        if "expectError" in op:
            if error is not None:
                check_error(op["expectError"], error, self.matcher)
                return
            raise AssertionError(f"{where}: expected an error, got {result!r}")
        if error is not None:
            replies = "".join(f"\n  server error: {json_util.dumps(e)}" for e in _server_errors(error))
            raise AssertionError(f"{where}: unexpected {type(error).__name__}: {error}{replies}") from error
        if kind == "result":
            result = result_document(result)
        if kind == "none" and "expectResult" in op:
            raise SpecError(f"{where}: a session operation has no result to expect")
        if "expectResult" in op:
            if kind == "documents":
                self.matcher.match_documents(op["expectResult"], result, path=where)
            else:
                self.matcher.match(op["expectResult"], result, root=True, path=where)
        if "saveResultAsEntity" in op:
            self.entities[op["saveResultAsEntity"]] = result

    def _special_operation(self, name, args):
        if name in ("failPoint", "targetedFailPoint"):
            # One server: a session's fail point goes to its client's server.
            if name == "failPoint":
                client = self._entity(args["client"], pymongo.MongoClient)
            else:
                client = self._entity(args["session"], ClientSession).client
            client.admin.command(args["failPoint"])
            self.fail_points.append((client, args["failPoint"]["configureFailPoint"]))
        elif name == "createEntities":
            for spec in args["entities"]:
                self._create_entity(spec)
        elif name in ("assertCollectionExists", "assertCollectionNotExists"):
            names = self.internal.get_database(args["databaseName"]).list_collection_names()
            exists = args["collectionName"] in names
            assert exists == (name == "assertCollectionExists"), f"{name}: {args} (collections: {names})"
        elif name == "assertSessionTransactionState":
            session = self._entity(args["session"], ClientSession)
            state = session._transaction.state  # pymongo keeps it private
            names = {1: "none", 2: "starting", 3: "in_progress", 4: "committed", 5: "committed",
                     6: "aborted"}
            assert names.get(state) == args["state"], f"transaction state {state}, expected {args['state']}"
        elif name in ("assertSessionDirty", "assertSessionNotDirty"):
            session = self._entity(args["session"], ClientSession)
            dirty = session._server_session.dirty  # pymongo keeps it private
            assert dirty == (name == "assertSessionDirty"), f"{name}: the session's dirty flag is {dirty}"
        elif name in ("assertSameLsidOnLastTwoCommands", "assertDifferentLsidOnLastTwoCommands"):
            started = [e for kind, e in self.recorders[args["client"]].events if kind == "commandStartedEvent"]
            assert len(started) >= 2, f"{name}: {len(started)} commands recorded"
            a, b = (e.command.get("lsid") for e in started[-2:])
            assert (a == b) == (name == "assertSameLsidOnLastTwoCommands"), f"{name}: {a} and {b}"
        elif name == "assertSessionUnpinned":
            # Only a mongos pins a session; one server never does.
            assert self._entity(args["session"], ClientSession)._pinned_address is None
        else:
            raise Unsupported(f"testRunner operation {name}")

    def _disable_fail_points(self):
        for client, name in self.fail_points:
            client.admin.command({"configureFailPoint": name, "mode": "off"})
        self.fail_points.clear()


# ------------------------------------------------------ pytest integration


def pytest_params(cases, expected_failures):
    """One pytest param per case; a listed one is a non-strict xfail."""
    import pytest

    params = []
    for case in cases:
        reason = expected_failures.get(case.key)
        marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
        params.append(pytest.param(case, id=case.key, marks=marks))
    return params


def run_case(case, uri, internal_client, server_info):
    """Run one case; returns why it is skipped, or None once it passed."""
    data = load_spec_file(case.path)
    runner = Runner(data, data["tests"][case.index], uri, internal_client, server_info)
    reason = runner.skip_reason()
    if reason is None:
        runner.run()
    return reason
