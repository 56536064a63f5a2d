"""Retryable writes: a write sent again with the same lsid and txnNumber
(what a driver does after a network error) answers what it answered the
first time, with `retriedStmtIds`, and writes nothing again — also after
kill -9 and restart. Commands go over a raw socket so the test, not the
driver, picks lsid and txnNumber."""

import signal
import socket
import threading
import uuid

import bson
import pymongo
import pytest
from bson import Binary, Int64

from conftest import Server
from test_handshake import op_msg, recv_reply


def session():
    return {"id": Binary(uuid.uuid4().bytes, 4)}


class Raw:
    """One connection sending OP_MSG commands."""

    def __init__(self, server):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)

    def __call__(self, cmd, db="test"):
        self.sock.sendall(op_msg({**cmd, "$db": db}))
        return recv_reply(self.sock)[1]

    def close(self):
        self.sock.close()


@pytest.fixture
def raw(server):
    r = Raw(server)
    yield r
    r.close()


def retryable(cmd, lsid, txn):
    return {**cmd, "lsid": lsid, "txnNumber": Int64(txn)}


def test_a_retried_insert_answers_from_its_record_and_inserts_nothing(raw, client):
    lsid = session()
    cmd = retryable({"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}, lsid, 1)
    first = raw(cmd)
    assert first["n"] == 2 and "retriedStmtIds" not in first
    again = raw(cmd)
    assert again["ok"] == 1.0 and again["n"] == 2 and "writeErrors" not in again
    assert again["retriedStmtIds"] == [0, 1]
    assert client.test.c.count_documents({}) == 2
    # Without a txnNumber the same insert is a new write: duplicates.
    plain = raw({"insert": "c", "documents": [{"_id": 1}], "lsid": lsid})
    assert plain["writeErrors"][0]["code"] == 11000


def test_a_retried_insert_runs_only_the_statements_that_did_not_commit(raw, client):
    client.test.c.insert_one({"_id": 99})
    lsid = session()
    cmd = retryable({"insert": "c", "documents": [{"_id": 1}, {"_id": 99}, {"_id": 3}], "ordered": True}, lsid, 1)
    first = raw(cmd)
    assert first["n"] == 1 and first["writeErrors"][0]["index"] == 1
    client.test.c.delete_one({"_id": 99})
    again = raw(cmd)
    # Statement 0 is answered from its record; 1 and 2 run now.
    assert again["n"] == 3 and "writeErrors" not in again
    assert again["retriedStmtIds"] == [0]
    assert sorted(d["_id"] for d in client.test.c.find()) == [1, 3, 99]


def test_a_retried_update_is_applied_once(raw, client):
    client.test.c.insert_one({"_id": 1, "x": 0})
    cmd = retryable({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}}]}, session(), 7)
    first = raw(cmd)
    assert (first["n"], first["nModified"]) == (1, 1)
    again = raw(cmd)
    assert (again["n"], again["nModified"], again["retriedStmtIds"]) == (1, 1, [0])
    assert client.test.c.find_one({"_id": 1})["x"] == 1


def test_a_retried_in_place_set_is_applied_once(raw, client):
    # A $set of an existing top-level field takes the in-place path (no
    # document built); its retry still answers from its record.
    client.test.c.insert_one({"_id": 1, "x": "old", "y": 2})
    cmd = retryable({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"x": "new"}}}]}, session(), 3)
    first = raw(cmd)
    assert (first["n"], first["nModified"]) == (1, 1)
    client.test.c.update_one({"_id": 1}, {"$set": {"x": "other"}})
    again = raw(cmd)
    assert (again["n"], again["nModified"], again["retriedStmtIds"]) == (1, 1, [0])
    assert client.test.c.find_one({"_id": 1}) == {"_id": 1, "x": "other", "y": 2}


def test_a_retried_upsert_reports_the_same_generated_id(raw, client):
    cmd = retryable({"update": "c", "updates": [{"q": {"k": "u"}, "u": {"$inc": {"x": 1}}, "upsert": True}]}, session(), 1)
    first = raw(cmd)
    again = raw(cmd)
    assert first["upserted"] == again["upserted"]
    assert isinstance(first["upserted"][0]["_id"], bson.ObjectId)
    assert again["retriedStmtIds"] == [0]
    docs = list(client.test.c.find())
    assert docs == [{"_id": first["upserted"][0]["_id"], "k": "u", "x": 1}]


def test_a_retried_delete_deletes_once(raw, client):
    client.test.c.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 1}])
    cmd = retryable({"delete": "c", "deletes": [{"q": {"k": 1}, "limit": 1}]}, session(), 1)
    assert raw(cmd)["n"] == 1
    again = raw(cmd)
    assert (again["n"], again["retriedStmtIds"]) == (1, [0])
    assert client.test.c.count_documents({}) == 1


@pytest.mark.parametrize("new", [True, False])
def test_a_retried_find_and_modify_returns_the_first_answer(raw, client, new):
    client.test.c.insert_one({"_id": 1, "x": 0})
    cmd = retryable({"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"x": 1}}, "new": new}, session(), 3)
    first = raw(cmd)
    again = raw(cmd)
    assert first["value"] == {"_id": 1, "x": 1 if new else 0}
    assert again["value"] == first["value"]
    assert again["lastErrorObject"] == first["lastErrorObject"]
    assert again["retriedStmtId"] == 0 and "retriedStmtId" not in first
    assert client.test.c.find_one({"_id": 1})["x"] == 1


def test_a_retried_find_and_modify_remove_and_upsert(raw, client):
    client.test.c.insert_one({"_id": 1})
    lsid = session()
    remove = retryable({"findAndModify": "c", "query": {"_id": 1}, "remove": True}, lsid, 1)
    assert raw(remove)["value"] == {"_id": 1}
    again = raw(remove)
    assert again["value"] == {"_id": 1} and again["lastErrorObject"] == {"n": 1}
    upsert = retryable({"findAndModify": "c", "query": {"k": 2}, "update": {"$set": {"y": 1}}, "upsert": True,
                        "new": True}, lsid, 2)
    first = raw(upsert)
    again = raw(upsert)
    assert again["value"] == first["value"] and again["lastErrorObject"]["upserted"] == first["value"]["_id"]
    assert client.test.c.count_documents({}) == 1


def test_a_new_txn_number_runs_again_and_an_older_one_is_refused(raw, client):
    client.test.c.insert_one({"_id": 1, "x": 0})
    lsid = session()
    inc = {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}}]}
    raw(retryable(inc, lsid, 5))
    assert "retriedStmtIds" not in raw(retryable(inc, lsid, 6))
    assert client.test.c.find_one({"_id": 1})["x"] == 2
    old = raw(retryable(inc, lsid, 5))
    assert old["ok"] == 0 and old["code"] == 225 and old["codeName"] == "TransactionTooOld"
    sid = str(uuid.UUID(bytes=lsid["id"]))
    assert old["errmsg"] == (
        f"Retryable write with txnNumber 5 is prohibited on session {sid} - "
        "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU= because a newer retryable write with txnNumber 6 has "
        "already started on this session."
    )
    # A txnNumber that wrote nothing still counts as started.
    miss = {"update": "c", "updates": [{"q": {"_id": "none"}, "u": {"$set": {"y": 1}}}]}
    assert raw(retryable(miss, lsid, 9))["n"] == 0
    assert raw(retryable(inc, lsid, 8))["code"] == 225
    assert client.test.c.find_one({"_id": 1})["x"] == 2


def test_multi_statements_cannot_be_retryable(raw, client):
    client.test.c.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 1}])
    lsid = session()
    r = raw(retryable({"update": "c", "updates": [{"q": {}, "u": {"$set": {"y": 1}}, "multi": True}]}, lsid, 1))
    err = r["writeErrors"][0]
    assert (err["code"], err["errmsg"]) == (72, "Cannot use (or request) retryable writes with multi=true")
    r = raw(retryable({"delete": "c", "deletes": [{"q": {"k": 1}, "limit": 0}]}, lsid, 2))
    err = r["writeErrors"][0]
    assert (err["code"], err["errmsg"]) == (72, "Cannot use (or request) retryable writes with limit=0")
    assert client.test.c.count_documents({"y": 1}) == 0 and client.test.c.count_documents({}) == 2


@pytest.mark.parametrize(
    "extra, code, errmsg",
    [
        ({"lsid": "x"}, 14, "BSON field 'OperationSessionInfo.lsid' is the wrong type 'string', expected type 'object'"),
        ({"lsid": {}}, 40414, "BSON field 'OperationSessionInfo.lsid.id' is missing but a required field"),
        ({"lsid": {"id": "x"}}, 14,
         "BSON field 'OperationSessionInfo.lsid.id' is the wrong type 'string', expected type 'binData'"),
        ({"lsid": {"id": Binary(b"", 1)}}, 14,
         "BSON field 'OperationSessionInfo.lsid.id' is the wrong binData type 'function', expected type 'UUID'"),
        ({"lsid": {"id": Binary(b"", 4)}}, 207, "uuid must be a 16-byte binary field with UUID (4) subtype"),
        ({"txnNumber": Int64(1)}, 72, "Transaction number requires a session ID to also be specified"),
        ({"lsid": session(), "txnNumber": Int64(-1)}, 72, "Transaction number cannot be negative"),
        ({"lsid": session(), "autocommit": False}, 72,
         "'autocommit' field requires a transaction number to also be specified"),
        ({"lsid": session(), "txnNumber": Int64(1), "autocommit": True}, 72,
         "Specifying autocommit=true is not allowed."),
    ],
)
def test_bad_session_fields_are_refused_and_write_nothing(raw, client, extra, code, errmsg):
    r = raw({"insert": "c", "documents": [{"_id": 1}], **extra})
    assert (r["ok"], r["code"], r["errmsg"]) == (0.0, code, errmsg)
    assert client.test.c.count_documents({}) == 0


def test_txn_number_on_a_read_is_refused(raw):
    r = raw({"find": "c", "lsid": session(), "txnNumber": Int64(1)})
    assert (r["code"], r["codeName"]) == (50768, "NotARetryableWriteCommand")
    assert r["errmsg"] == (
        "txnNumber may only be provided for multi-document transactions and retryable write commands. "
        "autocommit:false was not provided, and find is not a retryable write command."
    )


def test_concurrent_retries_of_one_statement_apply_it_once(server, client):
    client.test.c.insert_one({"_id": 1, "x": 0})
    cmd = retryable({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}}]}, session(), 1)
    replies = []

    def send():
        r = Raw(server)
        replies.append(r(cmd))
        r.close()

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r["n"] == 1 for r in replies)
    assert sum("retriedStmtIds" in r for r in replies) == 7
    assert client.test.c.find_one({"_id": 1})["x"] == 1


def test_an_acknowledged_retryable_write_is_answered_from_its_record_after_kill_9(datadir):
    s = Server(datadir / "db")
    raw = Raw(s)
    lsid = session()
    with s.client() as c:
        c.test.c.insert_one({"_id": 1, "x": 0})
    inc = retryable({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}}]}, lsid, 4)
    ins = retryable({"insert": "d", "documents": [{"_id": i} for i in range(600)]}, lsid, 5)
    assert raw(inc)["nModified"] == 1
    assert raw(ins)["n"] == 600
    raw.close()
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db", port=s.port)
    raw = Raw(s)
    try:
        again = raw(ins)
        assert again["n"] == 600 and again["retriedStmtIds"] == list(range(600))
        # txnNumber 5 replaced 4's records: 4 is now too old.
        assert raw(inc)["code"] == 225
        with s.client() as c:
            assert c.test.c.find_one({"_id": 1})["x"] == 1
            assert c.test.d.count_documents({}) == 600
    finally:
        raw.close()
        assert s.stop() == 0


@pytest.mark.parametrize("lsid, code", [({}, 40414), ({"id": Binary(b"", 1)}, 14), ({"id": Binary(b"ab", 4)}, 207)])
def test_a_point_read_with_a_bad_session_gets_the_general_error(raw, client, lsid, code):
    # {_id: v} finds take the fast path (point.rs), which must not answer these.
    client.test.c.insert_one({"_id": 1})
    r = raw({"find": "c", "filter": {"_id": 1}, "lsid": lsid})
    assert (r["ok"], r["code"]) == (0.0, code)
    assert raw({"find": "c", "filter": {"_id": 1}, "lsid": session()})["cursor"]["firstBatch"] == [{"_id": 1}]
