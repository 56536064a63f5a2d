"""Capped collections: `create` with capped/size/max (mongod's checks and
messages), the oldest documents deleted by the insert that passes a limit,
natural (insertion) order, collStats/listCollections, restart, and
tailable cursors (awaitData waits for inserts; a cursor whose position was
deleted dies with CappedPositionLost)."""

import threading
import time

import pytest
from bson import Int64
from pymongo import CursorType
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from conftest import Server


def try_next(cursor):
    """The next document of a tailable cursor, or None at its end."""
    try:
        return next(cursor)
    except StopIteration:
        return None


@pytest.mark.parametrize(
    "options, code, errmsg",
    [
        ({"capped": True, "size": 0}, 51024, "BSON field 'size' value must be >= 1, actual value '0'"),
        ({"capped": True, "size": -500}, 51024, "BSON field 'size' value must be >= 1, actual value '-500'"),
        ({"capped": True}, 72, "the 'size' field is required when 'capped' is true"),
        ({"capped": True, "max": 500}, 72, "the 'size' field is required when 'capped' is true"),
        ({"capped": True, "size": "foo"}, 14,
         "BSON field 'create.size' is the wrong type 'string', expected types '[long, int, decimal, double']"),
        ({"capped": True, "size": 500, "max": "foo"}, 14,
         "BSON field 'create.max' is the wrong type 'string', expected types '[long, int, decimal, double']"),
        ({"capped": "foo"}, 14,
         "BSON field 'create.capped' is the wrong type 'string', expected types '[bool, long, int, decimal, double']"),
        ({"size": 4096}, 72, "the 'capped' field needs to be true when either the 'size' or 'max' fields are present"),
    ],
)
def test_bad_capped_options_are_refused_as_mongod_refuses_them(client, options, code, errmsg):
    with pytest.raises(OperationFailure) as e:
        client.test.command("create", "c", **options)
    assert (e.value.code, e.value.details["errmsg"]) == (code, errmsg)
    assert "c" not in client.test.list_collection_names()


def test_the_size_limit_keeps_the_newest_documents_in_insertion_order(client):
    client.test.create_collection("log", capped=True, size=4096)
    log = client.test.log
    for i in range(100):
        log.insert_one({"_id": i, "msg": "x" * 80})
    docs = list(log.find())
    ids = [d["_id"] for d in docs]
    assert ids == list(range(100 - len(ids), 100)), "the newest, oldest first"
    stats = client.test.command("collStats", "log")
    assert stats["size"] <= 4096 < stats["size"] + 110
    assert (stats["capped"], stats["maxSize"], stats["max"]) == (True, 4096, 2**31 - 1)
    assert stats["count"] == len(ids)


def test_the_max_limit_counts_documents_and_options_are_listed(client):
    client.test.command("create", "log", capped=1, size=1_000_000.0, max=5)
    opts = client.test.log.options()
    assert opts == {"capped": True, "size": 1_000_000, "max": 5}
    client.test.log.insert_many([{"_id": i} for i in range(12)])
    assert [d["_id"] for d in client.test.log.find()] == [7, 8, 9, 10, 11]
    assert client.test.command("collStats", "log")["max"] == 5


def test_a_document_larger_than_the_collection_is_refused(client):
    client.test.create_collection("log", capped=True, size=1000)
    client.test.log.insert_one({"_id": 1})
    with pytest.raises(WriteError) as e:
        client.test.log.insert_one({"_id": 2, "big": "y" * 2000})
    assert (e.value.code, e.value.details["errmsg"]) == (2, "object to insert exceeds cappedMaxSize")
    with pytest.raises(BulkWriteError) as e:
        client.test.log.insert_many([{"_id": 3}, {"_id": 4, "big": "y" * 2000}, {"_id": 5}], ordered=False)
    assert [w["index"] for w in e.value.details["writeErrors"]] == [1]
    assert [d["_id"] for d in client.test.log.find()] == [1, 3, 5]


def test_deletes_and_updates_are_allowed_and_counted(client):
    client.test.create_collection("log", capped=True, size=100_000, max=4)
    log = client.test.log
    log.insert_many([{"_id": i} for i in range(4)])
    log.delete_one({"_id": 1})
    log.update_one({"_id": 2}, {"$set": {"grown": "z" * 500}})
    log.insert_many([{"_id": 4}, {"_id": 5}])
    # 4 documents at most: the delete made room for one, so only _id 0 went.
    assert [d["_id"] for d in log.find()] == [2, 3, 4, 5]


def test_limits_hold_across_restart_and_concurrent_inserts(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.create_collection("log", capped=True, size=1_000_000, max=50)
        c.test.log.insert_many([{"_id": i} for i in range(30)])
    assert s.stop() == 0
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            def writer(base):
                for i in range(40):
                    c.test.log.insert_one({"_id": base + i, "w": base})
            threads = [threading.Thread(target=writer, args=(1000 * (k + 1),)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            docs = list(c.test.log.find())
            assert len(docs) == 50 and c.test.command("collStats", "log")["count"] == 50
            # Per writer, what is left is its newest, in its order.
            for k in range(4):
                mine = [d["_id"] for d in docs if d.get("w") == 1000 * (k + 1)]
                assert mine == list(range(1000 * (k + 1) + 40 - len(mine), 1000 * (k + 1) + 40))
    finally:
        assert s.stop() == 0


def test_a_tailable_cursor_sees_later_inserts(client):
    client.test.create_collection("log", capped=True, size=100_000)
    log = client.test.log
    log.insert_many([{"_id": i} for i in range(3)])
    cursor = log.find(cursor_type=CursorType.TAILABLE)
    assert [next(cursor)["_id"] for _ in range(3)] == [0, 1, 2]
    assert try_next(cursor) is None and cursor.alive
    log.insert_many([{"_id": 3}, {"_id": 4}])
    assert [try_next(cursor)["_id"], try_next(cursor)["_id"]] == [3, 4]
    cursor.close()


def test_an_await_data_get_more_waits_for_an_insert_and_does_not_spin(client):
    client.test.create_collection("log", capped=True, size=100_000)
    log = client.test.log
    log.insert_one({"_id": 0})
    cursor = log.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(800)
    assert next(cursor)["_id"] == 0
    getmores = lambda: client.admin.command("serverStatus")["opcounters"]["getmore"]  # noqa: E731
    before = getmores()
    started = time.monotonic()
    assert try_next(cursor) is None
    waited = time.monotonic() - started
    assert 0.7 < waited < 3, waited
    assert getmores() - before <= 2
    # The insert wakes the wait well before its 800 ms run out.
    threading.Timer(0.1, lambda: log.insert_one({"_id": 1})).start()
    started = time.monotonic()
    got = try_next(cursor)
    assert got == {"_id": 1} and time.monotonic() - started < 0.7
    cursor.close()


def test_tailable_errors(client):
    client.test.plain.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        list(client.test.plain.find(cursor_type=CursorType.TAILABLE))
    assert e.value.code == 2 and "tailable cursor requested on non capped collection" in e.value.details["errmsg"]
    with pytest.raises(OperationFailure) as e:
        client.test.command("find", "plain", awaitData=True)
    assert e.value.code == 9


def test_a_tailable_cursor_whose_position_was_deleted_dies(client):
    client.test.create_collection("log", capped=True, size=100_000, max=3)
    log = client.test.log
    log.insert_many([{"_id": i} for i in range(3)])
    reply = client.test.command("find", "log", tailable=True, batchSize=1)
    cursor_id = reply["cursor"]["id"]
    assert reply["cursor"]["firstBatch"] == [{"_id": 0}] and cursor_id != 0
    log.insert_many([{"_id": i} for i in range(3, 10)])
    with pytest.raises(OperationFailure) as e:
        client.test.command("getMore", Int64(cursor_id), collection="log")
    assert e.value.code == 136 and e.value.details["codeName"] == "CappedPositionLost"


@pytest.mark.parametrize("capped", [True, False])
def test_natural_order_backwards_returns_the_newest_first(client, capped):
    if capped:
        client.test.create_collection("c", capped=True, size=100_000)
    client.test.c.insert_many([{"_id": i, "k": i % 3} for i in range(600)])
    c = client.test.c
    newest_first = list(range(599, -1, -1))
    assert [d["_id"] for d in c.find(sort=[("$natural", -1)])] == newest_first
    assert [d["_id"] for d in c.find(hint=[("$natural", -1)], batch_size=50)] == newest_first
    assert [d["_id"] for d in c.find({"k": 1}, sort=[("$natural", -1)], skip=5, limit=3)] == [583, 580, 577]
    assert [d["_id"] for d in c.find(sort=[("$natural", 1)], limit=3)] == [0, 1, 2]
    if capped:
        with pytest.raises(OperationFailure) as e:
            list(c.find(cursor_type=CursorType.TAILABLE, sort=[("$natural", -1)]))
        assert e.value.code == 2


def test_a_tailable_cursor_that_finds_nothing_dies_at_once(client):
    client.test.create_collection("log", capped=True, size=100_000)
    for coll in ["log", "missing"]:
        reply = client.test.command("find", coll, tailable=True)
        assert reply["cursor"]["id"] == 0 and reply["cursor"]["firstBatch"] == []


@pytest.mark.parametrize("then", ["drop", "drop and recreate", "rename"])
def test_a_tailable_cursor_dies_with_its_collection(client, then):
    client.test.create_collection("log", capped=True, size=100_000)
    client.test.log.insert_many([{"_id": i} for i in range(3)])
    reply = client.test.command("find", "log", tailable=True, batchSize=1)
    cursor_id = reply["cursor"]["id"]
    if then == "rename":
        client.test.log.rename("log2")
    else:
        client.test.log.drop()
    if then == "drop and recreate":
        client.test.create_collection("log", capped=True, size=100_000)
        client.test.log.insert_many([{"_id": i} for i in range(10)])
    with pytest.raises(OperationFailure) as e:
        client.test.command("getMore", Int64(cursor_id), collection="log")
    assert e.value.code == 175 and e.value.details["codeName"] == "QueryPlanKilled"


def test_a_renamed_capped_collection_keeps_its_limits(client):
    client.test.create_collection("log", capped=True, size=100_000, max=3)
    client.test.log.insert_many([{"_id": i} for i in range(3)])
    client.admin.command("renameCollection", "test.log", to="test.log2")
    client.test.log2.insert_many([{"_id": i} for i in range(3, 6)])
    assert [d["_id"] for d in client.test.log2.find()] == [3, 4, 5]
    assert client.test.command("collStats", "log2")["count"] == 3
