"""Index commands: listIndexes, createIndexes and dropIndexes over the
`_id` index and secondary indexes (ascending and descending, compound,
dotted, unique, sparse, hidden), with mongod's errors; unique keys and
parallel arrays refused on every write; a crash during a build."""

import datetime
import random
import signal
import threading
import time

import bson

import pytest
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

from conftest import Server

ID_INDEX = {"v": 2, "key": {"_id": 1}, "name": "_id_"}


def test_list_indexes_shows_the_id_index(client):
    client.test.c.insert_one({"_id": 1})
    assert list(client.test.c.list_indexes()) == [ID_INDEX]
    assert client.test.c.index_information() == {"_id_": {"v": 2, "key": [("_id", 1)]}}
    r = client.test.command({"listIndexes": "c", "cursor": {"batchSize": 0}})
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["ns"] == "test.$cmd.listIndexes.c"
    more = client.test.command({"getMore": r["cursor"]["id"], "collection": "$cmd.listIndexes.c"})
    assert more["cursor"]["nextBatch"] == [ID_INDEX] and more["cursor"]["id"] == 0


@pytest.mark.parametrize("name, code", [("missing", 26), ("view", 166)])
def test_list_indexes_of_a_missing_collection_or_a_view_fails(client, name, code):
    client.test.create_collection("view", viewOn="c", pipeline=[])
    # (pymongo's list_indexes turns NamespaceNotFound into no indexes.)
    with pytest.raises(OperationFailure) as e:
        client.test.command({"listIndexes": name})
    assert e.value.code == code


def test_creating_the_id_index_is_a_no_op_that_may_create_the_collection(client):
    assert client.test.fresh.create_index([("_id", ASCENDING)]) == "_id_1"  # the name pymongo generates
    assert "fresh" in client.test.list_collection_names()
    r = client.test.command({"createIndexes": "fresh", "indexes": [{"key": {"_id": 1}, "name": "_id_"}]})
    assert r == {**r, "numIndexesBefore": 1, "numIndexesAfter": 1, "note": "all indexes already exist", "ok": 1.0}
    assert "createdCollectionAutomatically" not in r


@pytest.mark.parametrize("indexes, code", [
    ([{"key": {"_id": 1}, "name": "_id_", "unique": True}], 238),
    ([{"key": {"x": "text"}, "name": "x_text"}], 238),
    ([{"key": {"x": "hashed", "y": "hashed"}, "name": "xy"}], 67),
    ([{"key": {"x": "hashed"}, "name": "xh", "unique": True}], 16764),
    ([{"key": {"x": 1}, "name": "x_1", "partialFilterExpression": {"x": {"$ne": 1}}}], 67),
    ([{"key": {"x": 1}, "name": "x_1", "partialFilterExpression": {"x": 1}, "sparse": True}], 67),
    ([{"key": {"x": 1}, "name": "x_1", "partialFilterExpression": 5}], 14),
    ([{"key": {"x": 1}, "name": "x_1"}, {"key": {"y": 0}, "name": "y_0"}], 67),
    ([{"key": {}, "name": "e"}], 67),
    ([{"key": {"x": "nope"}, "name": "x"}], 67),
    ([{"key": {"x": 1}, "name": "x", "bogus": 1}], 197),
    ([{"key": {"x": 1}}], 9),
    ([{"name": "nokey"}], 9),
    ([], 2),
    ("x", 14),
])
def test_other_indexes_are_refused_and_create_nothing(client, indexes, code):
    with pytest.raises(OperationFailure) as e:
        client.test.command({"createIndexes": "none", "indexes": indexes})
    assert e.value.code == code, e.value.details
    assert "none" not in client.test.list_collection_names()


def test_drop_indexes_keeps_the_id_index(client):
    client.test.d.insert_one({"_id": 1})
    client.test.d.drop_indexes()
    assert list(client.test.d.list_indexes()) == [ID_INDEX]
    for index, code in [("_id_", 72), ("x_1", 27), ({"x": 1}, 27), (5, 14), (["x_1"], 27)]:
        with pytest.raises(OperationFailure) as e:
            client.test.command({"dropIndexes": "d", "index": index})
        assert e.value.code == code, index
    with pytest.raises(OperationFailure) as e:
        client.test.command({"dropIndexes": "missing", "index": "*"})
    assert e.value.code == 26


def test_secondary_indexes_are_created_listed_and_dropped(client):
    c = client.test.people
    c.insert_many([{"_id": i, "a": i % 3, "b": {"c": -i}} for i in range(10)])
    assert c.create_index([("a", ASCENDING), ("b.c", DESCENDING)]) == "a_1_b.c_-1"
    r = client.test.command({"createIndexes": "people", "indexes": [
        {"key": {"b.c": 1}, "name": "bc", "unique": True, "sparse": 1, "background": True}]})
    assert {k: r[k] for k in ("numIndexesBefore", "numIndexesAfter", "ok")} == {
        "numIndexesBefore": 2, "numIndexesAfter": 3, "ok": 1.0}
    assert "note" not in r
    assert list(c.list_indexes()) == [
        ID_INDEX,
        {"v": 2, "key": {"a": 1, "b.c": -1}, "name": "a_1_b.c_-1"},
        {"v": 2, "key": {"b.c": 1}, "name": "bc", "unique": True, "sparse": True},
    ]
    # The same spec again is a no-op; a conflicting one names the conflict.
    r = client.test.command({"createIndexes": "people", "indexes": [{"key": {"b.c": 1}, "name": "bc", "unique": True, "sparse": True}]})
    assert r == {**r, "numIndexesBefore": 3, "numIndexesAfter": 3, "note": "all indexes already exist", "ok": 1.0}
    for spec, code in [({"key": {"a": 1, "b.c": -1}, "name": "other"}, 85),
                       ({"key": {"z": 1}, "name": "bc"}, 86),
                       ({"key": {"b.c": 1}, "name": "bc"}, 85)]:
        with pytest.raises(OperationFailure) as e:
            client.test.command({"createIndexes": "people", "indexes": [spec]})
        assert e.value.code == code, spec
    assert len(list(c.list_indexes())) == 3
    # Drop by key pattern, by name, then all but _id.
    assert client.test.command({"dropIndexes": "people", "index": {"a": 1, "b.c": -1}})["nIndexesWas"] == 3
    c.create_index("z")
    assert client.test.command({"dropIndexes": "people", "index": ["z_1"]})["nIndexesWas"] == 3
    c.create_index("z")
    assert client.test.command({"dropIndexes": "people", "index": "*"})["nIndexesWas"] == 3
    assert list(c.list_indexes()) == [ID_INDEX]


def test_a_collection_holds_at_most_64_indexes(client):
    c = client.test.many
    for i in range(63):
        c.create_index(f"f{i}")
    with pytest.raises(OperationFailure) as e:
        c.create_index("one_too_many")
    assert e.value.code == 67
    assert "too many indexes for test.many" in str(e.value)
    assert len(list(c.list_indexes())) == 64


def test_unique_indexes_refuse_duplicates_on_every_write(client):
    c = client.test.u
    c.insert_many([{"_id": 1, "email": "a@x"}, {"_id": 2, "email": "b@x"}])
    c.create_index("email", unique=True)
    with pytest.raises(DuplicateKeyError) as e:
        c.insert_one({"_id": 3, "email": "a@x"})
    assert e.value.details["keyPattern"] == {"email": 1}
    assert e.value.details["keyValue"] == {"email": "a@x"}
    assert e.value.details["errmsg"] == "E11000 duplicate key error collection: test.u index: email_1 dup key: { email: \"a@x\" }"
    with pytest.raises(DuplicateKeyError):
        c.update_one({"_id": 2}, {"$set": {"email": "a@x"}})
    with pytest.raises(DuplicateKeyError):
        c.find_one_and_update({"_id": 2}, {"$set": {"email": "a@x"}})
    with pytest.raises(BulkWriteError) as e:
        c.insert_many([{"_id": 4, "email": "c@x"}, {"_id": 5, "email": "c@x"}, {"_id": 6, "email": "d@x"}], ordered=False)
    assert [w["index"] for w in e.value.details["writeErrors"]] == [1]
    assert sorted(d["email"] for d in c.find()) == ["a@x", "b@x", "c@x", "d@x"]
    # Missing fields are all null: a second one is a duplicate too.
    c.insert_one({"_id": 7})
    with pytest.raises(DuplicateKeyError):
        c.insert_one({"_id": 8})
    # A build over duplicates fails and leaves nothing.
    client.test.v.insert_many([{"k": 1}, {"k": 1}])
    with pytest.raises(OperationFailure) as e:
        client.test.v.create_index("k", unique=True)
    assert e.value.code == 11000
    assert [i["name"] for i in client.test.v.list_indexes()] == ["_id_"]


def test_parallel_arrays_are_refused_everywhere_and_write_nothing(client):
    c = client.test.demo
    c.create_index([("field1", 1), ("field2", 1)])
    c.insert_one({"_id": 0, "field1": [0, 5], "field2": "x"})
    with pytest.raises(WriteError) as e:
        c.insert_one({"_id": 3, "field1": [0, 5], "field2": ["x", "y", "z"]})
    assert e.value.code == 171
    assert e.value.details["errmsg"] == "cannot index parallel arrays [field2] [field1]"
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 0}, {"$set": {"field2": ["a"]}})
    assert e.value.code == 171
    assert list(c.find()) == [{"_id": 0, "field1": [0, 5], "field2": "x"}]
    client.test.other.insert_one({"a": [1], "b": [2]})
    with pytest.raises(OperationFailure) as e:
        client.test.other.create_index([("a", 1), ("b", 1)])
    assert e.value.code == 171
    assert [i["name"] for i in client.test.other.list_indexes()] == ["_id_"]


def test_an_interrupted_build_is_dropped_cleanly_on_restart(datadir):
    s = Server(datadir / "db")
    c = s.client()
    c.test.big.insert_many([{"_id": i, "a": i, "pad": "x" * 200} for i in range(60000)])
    done = threading.Event()

    def build():
        try:
            c.test.big.create_index("a")
        except Exception:
            pass
        done.set()

    threading.Thread(target=build, daemon=True).start()
    # Kill once the build has begun (its progress is in the log).
    for _ in range(400):
        if "index build: progress" in s.log.read_text() or done.is_set():
            break
        threading.Event().wait(0.01)
    assert not done.is_set(), "the build finished before it could be interrupted; make the collection larger"
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    c = s.client()
    assert [i["name"] for i in c.test.big.list_indexes()] == ["_id_"]
    assert c.test.big.count_documents({}) == 60000
    # Built again from nothing, it holds every document.
    c.test.big.create_index("a")
    assert [i["name"] for i in c.test.big.list_indexes()] == ["_id_", "a_1"]
    assert s.stop() == 0


def test_keys_of_any_size_up_to_the_document_limit(client):
    """No key size limit (mongod since 4.2): long `_id`s and long indexed
    values, including ones that share their first kilobytes."""
    c = client.test.big_keys
    prefix = "p" * 9000
    long_ids = [prefix + "a", prefix + "b", "q" * 3_000_000]
    c.insert_many([{"_id": i, "s": i} for i in long_ids])
    for i in long_ids:
        assert c.find_one({"_id": i})["s"] == i
    c.create_index("s", unique=True)
    with pytest.raises(DuplicateKeyError):
        c.insert_one({"_id": 1, "s": prefix + "a"})
    c.insert_one({"_id": 2, "s": prefix + "c"})
    assert [d["_id"] for d in c.find({"s": prefix + "b"})] == [prefix + "b"]
    assert sorted(len(d["s"]) for d in c.find({"s": {"$gt": prefix + "a", "$lt": prefix + "c"}})) == [9001]
    assert c.count_documents({"s": {"$gte": prefix}}) == 4
    c.update_one({"_id": 2}, {"$set": {"s": "a-short"}})
    assert [d["_id"] for d in c.find({"s": "a-short"}).hint("s_1")] == [2]
    assert c.delete_one({"_id": prefix + "a"}).deleted_count == 1
    assert c.count_documents({"s": {"$gte": prefix}}) == 2


def test_validate_counts_every_index_key(client):
    c = client.test.val
    c.insert_many([{"_id": i, "a": [i, i + 1], "b": i % 2} for i in range(50)])
    c.create_index("a")
    c.create_index([("b", 1), ("a", -1)])
    c.delete_many({"b": 1})
    r = client.test.command("validate", "val", full=True)
    assert r["valid"] is True and r["errors"] == [] and r["ns"] == "test.val"
    assert r["nrecords"] == 25 and r["nIndexes"] == 3
    assert r["keysPerIndex"] == {"_id_": 25, "a_1": 50, "b_1_a_-1": 50}
    assert r["indexDetails"]["a_1"] == {"valid": True}
    assert r["missingIndexEntries"] == [] and r["extraIndexEntries"] == []
    with pytest.raises(OperationFailure) as e:
        client.test.command("validate", "nothere")
    assert e.value.code == 26


def test_stats_count_and_size_every_index(client):
    c = client.test.sized
    c.insert_many([{"_id": i, "a": i} for i in range(2000)])
    c.create_index("a")
    s = client.test.command("collStats", "sized")
    assert s["nindexes"] == 2 and set(s["indexSizes"]) == {"_id_", "a_1"}
    assert s["totalIndexSize"] == sum(s["indexSizes"].values())
    d = client.test.command("dbStats")
    assert d["indexes"] == 2


def test_partial_indexes_hold_and_constrain_only_matching_documents(client):
    c = client.test.partial
    c.insert_many([{"_id": i, "email": f"u{i % 5}", "active": i % 2 == 0} for i in range(20)])
    # Unique among the active ones only (the inactive repeat their emails).
    with pytest.raises(OperationFailure):
        c.create_index("email", unique=True)
    c.insert_many([{"_id": 100 + i, "email": f"solo{i}", "active": True} for i in range(3)])
    c.delete_many({"active": True, "_id": {"$gte": 10, "$lt": 100}})
    c.create_index("email", unique=True, partialFilterExpression={"active": True}, name="active_email")
    assert list(c.list_indexes())[1]["partialFilterExpression"] == {"active": True}
    c.insert_one({"_id": 200, "email": "u1", "active": False})
    with pytest.raises(DuplicateKeyError):
        c.insert_one({"_id": 201, "email": "u0", "active": True})
    v = client.test.command("validate", "partial")
    assert v["valid"] and v["keysPerIndex"]["active_email"] == c.count_documents({"active": True})
    # Used unhinted only when the query implies the filter.
    plan = lambda f: client.test.command("explain", {"find": "partial", "filter": f})["queryPlanner"]["winningPlan"]
    assert plan({"email": "u0", "active": True})["inputStage"]["isPartial"] is True
    assert plan({"email": "u0"})["stage"] == "COLLSCAN"
    assert sorted(d["_id"] for d in c.find({"email": "u1"})) == [1, 6, 11, 200]
    # Hinted, it sees only what it holds.
    assert sorted(d["_id"] for d in c.find({"email": "u1"}).hint("active_email")) == [6]
    # An update moving a document out of the filter takes its key out.
    c.update_one({"_id": 100}, {"$set": {"active": False}})
    c.insert_one({"_id": 202, "email": "solo0", "active": True})
    assert client.test.command("validate", "partial")["valid"]


def test_concurrent_inserts_of_one_unique_key_store_it_once(client):
    c = client.test.race
    c.create_index("k", unique=True)
    outcomes = []

    def insert(i):
        try:
            c.insert_one({"_id": i, "k": "same"})
            outcomes.append("ok")
        except DuplicateKeyError:
            outcomes.append("dup")

    for round_ in range(20):
        c.delete_many({})
        outcomes.clear()
        threads = [threading.Thread(target=insert, args=(round_ * 10 + t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["dup", "dup", "dup", "ok"], outcomes
        assert c.count_documents({"k": "same"}) == 1
    assert client.test.command("validate", "race")["valid"]


def test_a_covered_read_returns_the_stored_type(client):
    c = client.test.types
    c.create_index("a")
    c.insert_one({"_id": 1, "a": 1})
    c.update_one({"_id": 1}, {"$set": {"a": 1.0}})
    got = c.find_one({"a": 1}, {"_id": 0, "a": 1})
    assert got == {"a": 1.0} and isinstance(got["a"], float)


def test_reserved_names_hidden_hints_and_dollar_fields(client):
    c = client.test.rules
    c.insert_one({"a": 1})
    for spec, code in [({"key": {"a": 1}, "name": "_id_"}, 197),
                       ({"key": {"a.$b": 1}, "name": "x"}, 67),
                       ({"key": {f"f{i}": 1 for i in range(33)}, "name": "wide"}, 13103)]:
        with pytest.raises(OperationFailure) as e:
            client.test.command({"createIndexes": "rules", "indexes": [spec]})
        assert e.value.code == code, spec
    client.test.command({"createIndexes": "rules", "indexes": [{"key": {"a": 1}, "name": "a_1", "hidden": True}]})
    with pytest.raises(OperationFailure) as e:
        list(c.find({"a": 1}).hint("a_1"))
    assert e.value.code == 2
    plan = client.test.command("explain", {"find": "rules", "filter": {"a": 1}})
    assert plan["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"


def test_out_keeps_the_target_indexes(client):
    db = client.test
    db.src.insert_many([{"_id": i, "k": i % 3} for i in range(6)])
    db.dst.insert_one({"_id": 0, "k": 100})
    db.dst.create_index("k")
    list(db.src.aggregate([{"$match": {"_id": {"$lt": 3}}}, {"$out": "dst"}]))
    assert [i["name"] for i in db.dst.list_indexes()] == ["_id_", "k_1"]
    assert db.command("validate", "dst")["keysPerIndex"] == {"_id_": 3, "k_1": 3}
    db.dst.drop_index("k_1")
    db.dst.create_index("k", unique=True)
    with pytest.raises(OperationFailure) as e:
        list(db.src.aggregate([{"$out": "dst"}]))
    assert e.value.code == 11000
    assert db.dst.count_documents({}) == 3, "a failed $out leaves the target as it was"


def test_concurrent_identical_index_builds_both_succeed(client):
    c = client.test.twice
    c.insert_many([{"_id": i, "a": i} for i in range(20000)])
    errors = []

    def build():
        try:
            c.create_index("a")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [i["name"] for i in c.list_indexes()] == ["_id_", "a_1"]


def wait_ttl_passes(client, n):
    start = client.admin.command("serverStatus")["metrics"]["ttl"]["passes"]
    deadline = time.monotonic() + 20
    while client.admin.command("serverStatus")["metrics"]["ttl"]["passes"] < start + n:
        assert time.monotonic() < deadline, "the TTL monitor makes passes"
        time.sleep(0.2)


def test_a_ttl_index_expires_old_dates_and_collmod_changes_it(client):
    db = client.test
    old = datetime.datetime(2001, 1, 1)
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    soon = now + datetime.timedelta(days=1)
    db.sessions.insert_many([
        {"_id": 1, "at": old}, {"_id": 2, "at": now}, {"_id": 3, "at": [soon, old]},
        {"_id": 4, "at": "2001-01-01"}, {"_id": 5}, {"_id": 6, "at": [soon]},
    ])
    db.sessions.create_index("at", expireAfterSeconds=3600)
    assert list(db.sessions.list_indexes())[1]["expireAfterSeconds"] == 3600
    client.admin.command("setParameter", 1, ttlMonitorSleepSecs=1)
    wait_ttl_passes(client, 2)
    assert sorted(d["_id"] for d in db.sessions.find()) == [2, 4, 5, 6]
    # collMod: hide it, then expire everything a second old.
    r = db.command("collMod", "sessions", index={"name": "at_1", "hidden": True})
    assert (r["hidden_old"], r["hidden_new"]) == (False, True)
    assert list(db.sessions.list_indexes())[1]["hidden"] is True
    plan = db.command("explain", {"find": "sessions", "filter": {"at": {"$lt": soon}}})
    assert plan["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"
    r = db.command("collMod", "sessions", index={"keyPattern": {"at": 1}, "expireAfterSeconds": 0, "hidden": False})
    assert (r["expireAfterSeconds_old"], r["expireAfterSeconds_new"]) == (3600, 0)
    assert "hidden" not in list(db.sessions.list_indexes())[1]
    time.sleep(1.1)
    wait_ttl_passes(client, 2)
    assert sorted(d["_id"] for d in db.sessions.find()) == [4, 5, 6]
    for index, code in [({"name": "nope", "hidden": True}, 27), ({"name": "at_1"}, 72),
                        ({"name": "at_1", "expireAfterSeconds": -1}, 67)]:
        with pytest.raises(OperationFailure) as e:
            db.command("collMod", "sessions", index=index)
        assert e.value.code == code, index
    for spec, code in [({"key": {"a": 1, "b": 1}, "name": "ab", "expireAfterSeconds": 5}, 67),
                       ({"key": {"a": 1}, "name": "a", "expireAfterSeconds": "5"}, 67)]:
        with pytest.raises(OperationFailure) as e:
            db.command({"createIndexes": "sessions", "indexes": [spec]})
        assert e.value.code == code, spec


def test_ttl_and_collmod_edge_cases(client):
    db = client.test
    db.create_collection("capped", capped=True, size=4096)
    with pytest.raises(OperationFailure) as e:
        db.capped.create_index("at", expireAfterSeconds=5)
    assert e.value.code == 67
    db.plain.insert_one({"at": 1})
    db.plain.create_index("at", expireAfterSeconds=bson.Decimal128("60"))
    assert list(db.plain.list_indexes())[1]["expireAfterSeconds"] == 60
    with pytest.raises(OperationFailure) as e:
        db.plain.create_index("b", expireAfterSeconds="soon")
    assert e.value.code == 67
    # A collMod that fails on another option changes the index neither.
    with pytest.raises(OperationFailure):
        db.command("collMod", "plain", index={"name": "at_1", "hidden": True}, validator={"$bogus": 1})
    assert "hidden" not in list(db.plain.list_indexes())[1]
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "plain", index={"keyPattern": {"_id": 1}, "hidden": True})
    assert e.value.code == 2


def test_index_stats_count_the_reads_each_index_serves(client):
    c = client.test.stats_of
    c.insert_many([{"_id": i, "a": i, "b": i % 3} for i in range(30)])
    c.create_index("a")
    c.create_index("b")
    for _ in range(3):
        list(c.find({"a": {"$gte": 10}}).hint("a_1"))
    c.count_documents({"b": 1})
    c.find_one({"_id": 4})
    list(c.find({"_id": {"$in": [1, 2]}}))
    stats = {s["name"]: s for s in c.aggregate([{"$indexStats": {}}])}
    assert set(stats) == {"_id_", "a_1", "b_1"}
    assert stats["a_1"]["accesses"]["ops"] == 3 and stats["b_1"]["accesses"]["ops"] == 1
    # The `_id` index: a point read and a range of it.
    assert stats["_id_"]["accesses"]["ops"] == 2 and stats["_id_"]["key"] == {"_id": 1}
    assert stats["_id_"]["spec"] == {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    assert stats["a_1"]["key"] == {"a": 1} and stats["a_1"]["spec"]["name"] == "a_1"
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$indexStats": {"x": 1}}]))
    assert e.value.code == 28803


def test_an_index_gives_the_sort_and_stops_at_the_limit(client):
    db = client.test
    db.s.create_index([("a", 1), ("b", -1)])
    db.s.insert_many([{"_id": i, "a": i % 5, "b": i} for i in range(100)])

    def executed(find):
        e = db.command("explain", {"find": "s", **find}, verbosity="executionStats")
        return e["queryPlanner"]["winningPlan"], e["executionStats"]

    # No predicate on the index: a whole-index scan gives the order.
    plan, stats = executed({"filter": {}, "sort": {"a": 1, "b": -1}, "limit": 3})
    assert plan["stage"] == "LIMIT" and plan["limitAmount"] == 3
    ixscan = plan["inputStage"]["inputStage"]
    assert ixscan["stage"] == "IXSCAN" and ixscan["direction"] == "forward"
    assert ixscan["indexBounds"] == {"a": ["[MinKey, MaxKey]"], "b": ["[MaxKey, MinKey]"]}
    assert (stats["totalKeysExamined"], stats["totalDocsExamined"], stats["nReturned"]) == (3, 3, 3)
    assert [d["_id"] for d in db.s.find({}).sort([("a", 1), ("b", -1)]).limit(3)] == [95, 90, 85]

    # Backwards, after a field pinned to one value.
    plan, stats = executed({"filter": {"a": 2}, "sort": {"b": 1}, "limit": 2})
    ixscan = plan["inputStage"]["inputStage"]
    assert ixscan["direction"] == "backward"
    assert ixscan["indexBounds"] == {"a": ["[2, 2]"], "b": ["[MinKey, MaxKey]"]}
    assert stats["totalKeysExamined"] == 2
    assert [d["_id"] for d in db.s.find({"a": 2}).sort("b", 1).limit(2)] == [2, 7]

    # Covered: the projection sits between the scan and the limit.
    plan, stats = executed({"filter": {}, "sort": {"a": -1, "b": 1}, "projection": {"_id": 0, "a": 1}, "limit": 2})
    assert plan["stage"] == "LIMIT" and plan["inputStage"]["stage"] == "PROJECTION_COVERED"
    assert stats["totalDocsExamined"] == 0

    # An order the index cannot give: a blocking SORT.
    plan, _ = executed({"filter": {"a": {"$gt": 2}}, "sort": {"b": 1}})
    assert plan["stage"] == "SORT"
    # Nor under another collation than the index's.
    plan, _ = executed({"filter": {}, "sort": {"a": 1, "b": -1}, "collation": {"locale": "fr"}})
    assert plan["stage"] == "SORT"


def test_long_keys_sharing_their_stored_bytes_still_sort_in_order(client):
    """Keys past 4 KiB are stored cut, with a digest: the ones sharing
    their first 4 KiB sit in digest order, and an index-provided sort
    puts them back in key order."""
    db = client.test
    db.long.create_index("s")
    stem = "x" * 5000
    values = [stem + tail for tail in ["d", "a", "c", "b", "ab", ""]] + ["short", "y" * 5000]
    db.long.insert_many([{"_id": i, "s": v} for i, v in enumerate(values)])
    for direction in (1, -1):
        want = [d["_id"] for d in db.long.find().sort("s", direction).hint([("$natural", 1)])]
        plan = db.long.find().sort("s", direction).explain()["queryPlanner"]["winningPlan"]
        assert "SORT" not in str(plan)
        assert [d["_id"] for d in db.long.find().sort("s", direction)] == want
        assert [d["_id"] for d in db.long.find().sort("s", direction).limit(3)] == want[:3]


def test_range_ends_at_the_stored_key_length_keep_their_bounds(client):
    """A range end one byte past the 4 KiB a stored key keeps is cut to
    it, which widens the range: a key of exactly that length must still
    be checked against an exclusive bound (ascending and descending,
    single-field and compound), as the collection scan answers."""
    db = client.test
    db.edge.create_index("s")
    db.edge.create_index([("s", DESCENDING)])
    db.edge.create_index([("a", 1), ("s", 1)])
    # Strings whose KeyStrings are a few bytes either side of 4096.
    docs = [{"_id": n, "a": 5, "s": "q" * n} for n in range(4085, 4100)]
    db.edge.insert_many(docs)
    for n in range(4085, 4100):
        value = "q" * n
        for flt in (
            {"s": {"$gt": value}},
            {"s": {"$lt": value}},
            {"a": 5, "s": {"$gt": value}},
            {"a": 5, "s": {"$lte": value}},
        ):
            want = sorted(d["_id"] for d in db.edge.find(flt).hint([("$natural", 1)]))
            assert want == sorted(d["_id"] for d in db.edge.find(flt)), flt
            for index in ("s_1", "s_-1", "a_1_s_1"):
                if "a" in flt and index != "a_1_s_1":
                    continue
                got = sorted(d["_id"] for d in db.edge.find(flt).hint(index))
                assert got == want, (n, flt, index)
                # The bounds answer the filter: the scan fetches only
                # documents it returns.
                stats = db.command(
                    "explain", {"find": "edge", "filter": flt, "hint": index}, verbosity="executionStats"
                )["executionStats"]
                assert stats["totalDocsExamined"] == stats["nReturned"] == len(want), (n, flt, index, stats)


def test_an_or_reads_each_branch_by_its_index(client):
    db = client.test
    db.o.create_index("a")
    db.o.create_index("b")
    db.o.insert_many([{"_id": i, "a": i % 10, "b": i % 7, "c": i} for i in range(200)])

    def executed(flt):
        e = db.command("explain", {"find": "o", "filter": flt}, verbosity="executionStats")
        return e["queryPlanner"], e["executionStats"]

    # Rooted: SUBPLAN, FETCH over OR over one IXSCAN per branch; the
    # records both branches hold are dropped once.
    flt = {"$or": [{"a": 1}, {"b": 2}]}
    planner, stats = executed(flt)
    fetch = planner["winningPlan"]["inputStage"]
    assert planner["winningPlan"]["stage"] == "SUBPLAN" and fetch["stage"] == "FETCH" and "filter" not in fetch
    branches = fetch["inputStage"]["inputStages"]
    assert [b["indexName"] for b in branches] == ["a_1", "b_1"]
    assert [b["indexBounds"] for b in branches] == [{"a": ["[1, 1]"]}, {"b": ["[2, 2]"]}]
    want = sorted(d["_id"] for d in db.o.find(flt).hint([("$natural", 1)]))
    assert sorted(d["_id"] for d in db.o.find(flt)) == want
    or_stage = stats["executionStages"]["inputStage"]["inputStage"]
    assert (or_stage["dupsTested"], or_stage["dupsDropped"]) == (20 + 29, 49 - len(want))
    assert (stats["nReturned"], stats["totalKeysExamined"], stats["totalDocsExamined"]) == (len(want), 49, len(want))

    # Equalities on one path are one `$in`.
    planner, _ = executed({"$or": [{"a": 5}, {"a": 1}, {"a": {"$in": [5, 7]}}]})
    assert planner["parsedQuery"] == {"a": {"$in": [1, 5, 7]}}
    assert planner["winningPlan"]["inputStage"]["indexBounds"] == {"a": ["[1, 1]", "[5, 5]", "[7, 7]"]}

    # Contained in an `$and`: FETCH keeps the whole filter.
    flt = {"c": {"$gt": 5}, "$or": [{"a": 1}, {"b": {"$gt": 5}}]}
    planner, stats = executed(flt)
    assert planner["winningPlan"]["stage"] == "FETCH" and planner["winningPlan"]["inputStage"]["stage"] == "OR"
    assert stats["nReturned"] == db.o.count_documents(flt) == len(list(db.o.find(flt).hint([("$natural", 1)])))

    # A branch no index serves: the collection is scanned.
    planner, _ = executed({"$or": [{"a": 1}, {"c": 2}]})
    assert planner["winningPlan"]["stage"] == "COLLSCAN"


def test_a_sorted_read_over_hundreds_of_long_keys_sharing_their_stored_bytes(client):
    """More long keys sharing their first 4 KiB than one chunk of a scan
    reads: the run is held across chunks and released in key order."""
    db = client.test
    db.longs.create_index("s")
    stem = "x" * 4500
    rng = random.Random(3)
    tails = rng.sample(range(100000), 600)
    db.longs.insert_many([{"_id": i, "s": f"{stem}{t:06d}"} for i, t in enumerate(tails)])
    db.longs.insert_one({"_id": -1, "s": "a"})
    for direction in (1, -1):
        want = [d["_id"] for d in db.longs.find({}, {"_id": 1}).sort("s", direction).hint([("$natural", 1)])]
        assert [d["_id"] for d in db.longs.find({}, {"_id": 1}).sort("s", direction)] == want
        assert [d["_id"] for d in db.longs.find({}, {"_id": 1}).sort("s", direction).limit(5)] == want[:5]


def test_aggregate_reads_through_the_planner_and_explains(client):
    db = client.test
    db.ag.create_index([("a", 1), ("b", 1)])
    db.ag.insert_many([{"_id": i, "a": i % 10, "b": i, "c": "x" * (i % 3)} for i in range(300)])

    def same(pipeline):
        got = list(db.ag.aggregate(pipeline))
        want = list(db.ag.aggregate(pipeline, hint={"$natural": 1}))
        assert got == want, pipeline
        return got

    # The `$sort` comes from the index, and the `$limit` stops the read.
    top = [{"$match": {"a": {"$gte": 7}}}, {"$sort": {"a": -1, "b": -1}}, {"$limit": 4}]
    assert [d["_id"] for d in same(top)] == [299, 289, 279, 269]
    e = db.command("explain", {"aggregate": "ag", "pipeline": top, "cursor": {}}, verbosity="executionStats")
    plan = e["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "LIMIT" and plan["inputStage"]["inputStage"]["direction"] == "backward"
    assert e["executionStats"]["totalKeysExamined"] == 4
    # Covered: only the index's fields are read.
    covered = [{"$match": {"a": 3}}, {"$sort": {"b": 1}}, {"$project": {"_id": 0, "a": 1, "b": 1}}]
    assert same(covered)[:2] == [{"a": 3, "b": 3}, {"a": 3, "b": 13}]
    e = db.command("explain", {"aggregate": "ag", "pipeline": covered, "cursor": {}}, verbosity="executionStats")
    assert e["queryPlanner"]["winningPlan"]["stage"] == "PROJECTION_COVERED"
    assert e["executionStats"]["totalDocsExamined"] == 0
    # Another order, its field outside the index: fetched, sorted.
    fetched = [{"$match": {"a": 3}}, {"$sort": {"c": 1, "b": 1}}, {"$project": {"_id": 0, "a": 1, "b": 1}}]
    assert same(fetched)[0] == {"a": 3, "b": 3}
    # Other stages: the read is the first stage, `$cursor`.
    grouped = [{"$match": {"a": {"$in": [1, 2]}}}, {"$group": {"_id": "$a", "n": {"$sum": 1}}}]
    assert sorted((d["_id"], d["n"]) for d in same(grouped)) == [(1, 30), (2, 30)]
    e = db.command("explain", {"aggregate": "ag", "pipeline": grouped, "cursor": {}}, verbosity="queryPlanner")
    assert [next(iter(s)) for s in e["stages"]] == ["$cursor", "$group"]
    assert e["stages"][0]["$cursor"]["queryPlanner"]["winningPlan"]["inputStage"]["indexBounds"]["a"] == [
        "[1, 1]",
        "[2, 2]",
    ]
    # `aggregate` with `explain: true` answers the plan.
    e = db.command("aggregate", "ag", pipeline=[{"$match": {"a": 5}}], explain=True)
    assert e["queryPlanner"]["winningPlan"]["stage"] == "FETCH"


def test_explain_of_an_aggregate_runs_it_and_counts_each_stage(client):
    """At executionStats mongod runs the whole pipeline over its read, as
    the aggregate would (a later `$limit` stops the read), and shows each
    stage with what it returned and its time; `$sort` absorbs the `$limit`
    after it, `$unwind` and `$out` show their long forms, and a `$out`
    writes nothing."""
    db = client.test
    db.ag.create_index("a")
    db.ag.insert_many([{"_id": i, "a": i % 3, "arr": [i, i + 1]} for i in range(30)])

    def explained(pipeline, verbosity="executionStats"):
        return db.command("explain", {"aggregate": "ag", "pipeline": pipeline, "cursor": {}}, verbosity=verbosity)

    def figures(e):
        return [(next(iter(s)), s.get("nReturned")) for s in e["stages"]]

    grouped = [{"$match": {"a": {"$in": [1, 2]}}}, {"$group": {"_id": "$a", "n": {"$sum": 1}}},
               {"$sort": {"_id": -1}}, {"$limit": 1}]
    assert list(db.ag.aggregate(grouped)) == [{"_id": 2, "n": 10}]
    e = explained(grouped)
    assert figures(e) == [("$cursor", 20), ("$group", 2), ("$sort", 1)]
    assert e["stages"][2]["$sort"] == {"sortKey": {"_id": -1}, "limit": 1}
    assert all(isinstance(s["executionTimeMillisEstimate"], int) for s in e["stages"])
    assert e["stages"][0]["$cursor"]["executionStats"]["totalKeysExamined"] == 20
    # At queryPlanner nothing runs: no figures.
    assert figures(explained(grouped, "queryPlanner")) == [("$cursor", None), ("$group", None), ("$sort", None)]
    # A `$limit` after an `$unwind` stops the read once it has enough.
    unwound = [{"$match": {"a": 1}}, {"$unwind": "$arr"}, {"$limit": 3}]
    assert len(list(db.ag.aggregate(unwound))) == 3
    e = explained(unwound)
    assert figures(e) == [("$cursor", 2), ("$unwind", 3), ("$limit", 3)]
    assert e["stages"][1]["$unwind"] == {"path": "$arr"}
    assert e["stages"][0]["$cursor"]["executionStats"]["totalDocsExamined"] == 2
    # A `$match` after another stage shows its parsed query.
    later = [{"$unwind": "$arr"}, {"$match": {"arr": {"$gt": 28}}}]
    assert figures(explained(later)) == [("$cursor", 30), ("$unwind", 60), ("$match", 3)]
    assert explained(later)["stages"][2]["$match"] == {"arr": {"$gt": 28}}
    # `$out`: run, nothing written, its target in full.
    e = explained([{"$match": {"a": 0}}, {"$out": "written"}])
    assert e["stages"][1] == {"$out": {"coll": "written", "db": "test"}, "nReturned": 0,
                              "executionTimeMillisEstimate": e["stages"][1]["executionTimeMillisEstimate"]}
    assert e["stages"][0]["nReturned"] == 10
    assert "written" not in db.list_collection_names()
    # A stage that fails fails the explain as it fails the aggregate.
    failing = [{"$match": {"a": 1}}, {"$group": {"_id": {"$divide": [1, 0]}}}]
    with pytest.raises(OperationFailure) as agg:
        list(db.ag.aggregate(failing))
    with pytest.raises(OperationFailure) as exp:
        explained(failing)
    assert exp.value.code == agg.value.code
    # The read's blocking sort is held to the aggregate's memory limit.
    client.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=200)
    try:
        big_sort = [{"$sort": {"arr": 1}}, {"$group": {"_id": "$a"}}]
        with pytest.raises(OperationFailure) as agg:
            list(db.ag.aggregate(big_sort, allowDiskUse=False))
        with pytest.raises(OperationFailure) as exp:
            db.command("explain", {"aggregate": "ag", "pipeline": big_sort, "cursor": {}, "allowDiskUse": False},
                       verbosity="executionStats")
        assert agg.value.code == exp.value.code == 292
    finally:
        client.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=104857600)


def test_an_or_and_an_intersection_race_the_single_index_plans(client):
    """A contained `$or` whose branches are indexed is raced against the
    index of the predicate beside it, and wins when its branches are the
    selective ones; two pinned single-field indexes also offer an
    intersection (AND_SORTED), which loses the race, as in mongod, unless
    `internalQueryForceIntersectionPlans` makes it win."""
    db = client.test
    db.orr.insert_many([{"_id": i, "a": i % 100, "b": i % 50, "c": 1} for i in range(1000)])
    for field in ["a", "b", "c"]:
        db.orr.create_index(field)

    def brief(p):
        if "inputStages" in p:
            return p["stage"] + "[" + ",".join(brief(x) for x in p["inputStages"]) + "]"
        if "inputStage" in p:
            return p["stage"] + ">" + brief(p["inputStage"])
        return p["stage"] + (f"({p['indexName']})" if "indexName" in p else "")

    contained = {"c": 1, "$or": [{"a": 3}, {"b": 7}]}
    want = sorted(d["_id"] for d in db.orr.find(contained).hint([("$natural", 1)]))
    assert sorted(d["_id"] for d in db.orr.find(contained)) == want and len(want) == 30
    e = db.orr.find(contained).explain()
    assert brief(e["queryPlanner"]["winningPlan"]) == "FETCH>OR[IXSCAN(a_1),IXSCAN(b_1)]"
    assert [brief(p) for p in e["queryPlanner"]["rejectedPlans"]] == ["FETCH>IXSCAN(c_1)"]
    # The `$or` first in canonical order; the branches answer it exactly.
    assert e["queryPlanner"]["parsedQuery"] == {"$and": [{"$or": [{"a": {"$eq": 3}}, {"b": {"$eq": 7}}]},
                                                         {"c": {"$eq": 1}}]}
    assert e["queryPlanner"]["winningPlan"]["filter"] == {"c": {"$eq": 1}}
    assert e["executionStats"]["totalKeysExamined"] == 30
    # The OR's win is cached for the shape, as mongod caches it.
    again = db.orr.find({"c": 1, "$or": [{"a": 5}, {"b": 9}]}).explain()["queryPlanner"]["winningPlan"]
    assert again["isCached"] is True and brief(again) == "FETCH>OR[IXSCAN(a_1),IXSCAN(b_1)]"
    cached = [p["cachedPlan"] for p in db.orr.aggregate([{"$planCacheStats": {}}])]
    assert {"stage": "FETCH", "inputStage": {"stage": "OR", "inputStages": [
        {"stage": "IXSCAN", "keyPattern": {"a": 1}, "indexName": "a_1"},
        {"stage": "IXSCAN", "keyPattern": {"b": 1}, "indexName": "b_1"}]}} in cached

    both = {"a": 3, "b": 3}
    want = sorted(d["_id"] for d in db.orr.find(both).hint([("$natural", 1)]))
    e = db.orr.find(both).explain()
    assert brief(e["queryPlanner"]["winningPlan"]) == "FETCH>IXSCAN(a_1)"
    assert "FETCH>AND_SORTED[IXSCAN(a_1),IXSCAN(b_1)]" in [brief(p) for p in e["queryPlanner"]["rejectedPlans"]]
    client.admin.command("setParameter", 1, internalQueryForceIntersectionPlans=True)
    try:
        db.command("planCacheClear", "orr")
        assert sorted(d["_id"] for d in db.orr.find(both)) == want and len(want) == 10
        e = db.orr.find(both).explain()
        stages = e["executionStats"]["executionStages"]
        assert brief(stages) == "FETCH>AND_SORTED[IXSCAN(a_1),IXSCAN(b_1)]"
        assert "filter" not in stages and stages["nReturned"] == 10
        and_sorted = stages["inputStage"]
        # a=3: ids 3, 103, ..., 903; b=3: ids 3, 53, 103, ..., 953. Each b
        # id between two a ids fails; once a ends, b is read no further.
        assert [s["keysExamined"] for s in and_sorted["inputStages"]] == [10, 19]
        assert (and_sorted["failedAnd_0"], and_sorted["failedAnd_1"]) == (0, 9)
        assert e["executionStats"]["totalDocsExamined"] == 10
    finally:
        client.admin.command("setParameter", 1, internalQueryForceIntersectionPlans=False)
    assert client.admin.command("getParameter", 1, internalQueryPlannerEnableIndexIntersection=1)[
        "internalQueryPlannerEnableIndexIntersection"] is True
    client.admin.command("setParameter", 1, internalQueryPlannerEnableIndexIntersection=False)
    try:
        e = db.orr.find({"a": 3, "b": 3, "c": 1}).explain()
        assert not any("AND_SORTED" in brief(p) for p in e["queryPlanner"]["rejectedPlans"])
    finally:
        client.admin.command("setParameter", 1, internalQueryPlannerEnableIndexIntersection=True)


def test_slow_queries_are_logged_with_their_plan_summary(server):
    """A command that runs longer than `slowms` (the `profile` command's;
    -1 logs every one) leaves mongod's "Slow query" line (id 51803) with
    its namespace, command and `planSummary`."""
    import json

    client = server.client()
    db = client.test
    db.slow.insert_many([{"_id": i, "a": i % 10, "b": i} for i in range(100)])
    db.slow.create_index("a")
    db.slow.create_index([("b", -1), ("a", 1)])
    settings = db.command("profile", -1)
    assert {k: settings[k] for k in ["was", "slowms", "sampleRate", "ok"]} == {
        "was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}
    assert db.command("profile", 0, slowms=-1)["slowms"] == 100
    assert db.command("profile", -1)["slowms"] == -1
    list(db.slow.find({"a": 3}))
    list(db.slow.find({"b": {"$gt": 90}}).sort("b", -1))
    db.slow.count_documents({"x": 1})
    db.slow.find_one({"_id": 5})
    db.slow.update_many({"a": 4}, {"$inc": {"n": 1}})
    list(db.slow.aggregate([{"$match": {"a": 1, "b": 1}}, {"$group": {"_id": "$a"}}]))
    assert len(list(db.slow.find({}, batch_size=40))) == 100
    db.command("profile", 0, slowms=100)

    def slow_lines():
        lines = [json.loads(line) for line in server.log.read_text().splitlines() if '"Slow query"' in line]
        return [line["fields"] for line in lines]

    summaries = [(f["ns"], f.get("planSummary")) for f in slow_lines() if f["ns"] == "test.slow"]
    for want in [("test.slow", "IXSCAN { a: 1 }"), ("test.slow", "IXSCAN { b: -1, a: 1 }"),
                 ("test.slow", "COLLSCAN"), ("test.slow", "EXPRESS_IDHACK")]:
        assert want in summaries, (want, summaries)
    update = [f for f in slow_lines() if '"update"' in f["command"]]
    assert update and update[0]["planSummary"] == "IXSCAN { a: 1 }" and update[0]["id"] == 51803
    # The line carries the profiler's metrics: what the reads examined.
    assert (update[0]["keysExamined"], update[0]["docsExamined"], update[0]["nMatched"]) == (10, 10, 10)
    (point,) = [f for f in slow_lines() if f.get("planSummary") == "EXPRESS_IDHACK"]
    assert (point["keysExamined"], point["docsExamined"], point["nreturned"]) == (1, 1, 1)
    scans = [f for f in slow_lines() if f.get("planSummary") == "COLLSCAN" and "\"x\"" in f["command"]]
    assert scans and scans[0]["docsExamined"] == 100 and scans[0]["keysExamined"] == 0
    assert all(isinstance(f["durationMillis"], int) for f in slow_lines())
    # A getMore is logged under its collection's namespace.
    get_mores = [f["ns"] for f in slow_lines() if f["command"].startswith('{"getMore"')]
    assert get_mores and set(get_mores) == {"test.slow"}, get_mores
    # Back at 100 ms, a quick command leaves no line.
    before = len(slow_lines())
    db.slow.find_one({"a": 2})
    assert len(slow_lines()) == before
    # Another level only reads, and `slowms`/`sampleRate` apply at any
    # level, as mongod's.
    assert db.command("profile", 7)["slowms"] == 100
    assert db.command("profile", -1, slowms=250, sampleRate=0.5)["sampleRate"] == 1.0
    assert (db.command("profile", -1)["slowms"], db.command("profile", -1)["sampleRate"]) == (250, 0.5)
    db.command("profile", 0, slowms=100, sampleRate=1.0)
    client.close()


def test_current_op_shows_a_build_and_its_progress(datadir):
    """A build held by mongod's fail point past its first chunk shows in
    `currentOp` with `progress: {done, total}`; released, it finishes and
    is gone from the list."""
    from conftest import Server

    server = Server(datadir / "ops", extra=("--setParameter", "enableTestCommands=1"))
    client = server.client()
    hang = "hangIndexBuildDuringCollectionScanPhaseBeforeInsertion"
    try:
        db = client.test
        db.big.insert_many([{"_id": i, "a": i % 97} for i in range(2000)])
        client.admin.command("configureFailPoint", hang, mode="alwaysOn")
        errors = []

        def build():
            try:
                db.big.create_index("a")
            except Exception as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=build)
        t.start()
        deadline = time.time() + 30
        ops = []
        # Listed as it starts; held once its first chunk is in.
        while time.time() < deadline and not (ops and ops[0]["progress"]["done"] > 0):
            # The build (the createIndexes command waiting on it is listed too).
            ops = client.admin.command({"currentOp": True, "command.createIndexes": {"$exists": True},
                                        "progress": {"$exists": True}})["inprog"]
            time.sleep(0.02)
        assert len(ops) == 1
        op = ops[0]
        assert op["ns"] == "test.big" and op["op"] == "command" and op["active"] is True
        assert op["command"]["createIndexes"] == "big" and op["command"]["indexes"][0]["name"] == "a_1"
        assert 0 < op["progress"]["done"] < op["progress"]["total"] == 2000
        assert op["msg"].startswith("Index Build: scanning collection")
        # Filtered out, and refused outside admin.
        assert client.admin.command({"currentOp": True, "ns": "test.other"})["inprog"] == []
        with pytest.raises(OperationFailure) as err:
            db.command("currentOp")
        assert err.value.code == 13
        client.admin.command("configureFailPoint", hang, mode="off")
        t.join(30)
        hang = None
        assert not t.is_alive() and errors == []
        # Only the currentOp command itself is left (mongod lists it too).
        assert [o["command"].get("currentOp") for o in client.admin.command("currentOp")["inprog"]] == [1]
        assert db.big.find({"a": 5}).explain()["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "a_1"
    finally:
        if hang:
            client.admin.command("configureFailPoint", hang, mode="off")
        server.stop()


def test_plan_cache_stats_list_the_cached_choices(client):
    db = client.test
    db.pc.create_index("a")
    db.pc.create_index([("a", 1), ("b", 1)])
    db.pc.insert_many([{"_id": i, "a": i % 5, "b": i} for i in range(200)])
    assert list(db.pc.aggregate([{"$planCacheStats": {}}])) == []
    # Raced (two candidates), then cached.
    list(db.pc.find({"a": 3, "b": {"$gt": 10}}))
    entries = list(db.pc.aggregate([{"$planCacheStats": {}}]))
    assert len(entries) == 1
    entry = entries[0]
    assert entry["createdFromQuery"]["query"] == {"$and": [{"a": {"$eq": 3}}, {"b": {"$gt": 10}}]}
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1_b_1"
    assert entry["isActive"] is True and entry["works"] > 0
    planner = db.pc.find({"a": 1, "b": {"$gt": 50}}).explain()["queryPlanner"]
    assert planner["winningPlan"]["isCached"] is True
    assert (planner["queryHash"], planner["planCacheKey"]) == (entry["queryHash"], entry["planCacheKey"])
    assert len(planner["queryHash"]) == 8
    # Another shape, another entry; planCacheClear forgets them.
    list(db.pc.find({"a": 3}))
    assert len(list(db.pc.aggregate([{"$planCacheStats": {}}]))) == 2
    db.command("planCacheClear", "pc")
    assert list(db.pc.aggregate([{"$planCacheStats": {}}])) == []
    with pytest.raises(OperationFailure) as err:
        list(db.pc.aggregate([{"$planCacheStats": 1}]))
    assert err.value.code == 9


def test_a_cached_plan_that_degrades_is_replanned(client):
    """The cache keeps the index a race chose for a shape; a read of that
    shape for which it works ten times its trial before matching a
    trial's worth of documents is planned again within the read: the
    entry is replaced by the new winner's."""
    db = client.test
    db.rp.create_index("a")
    db.rp.create_index("b")
    # a = 0 for most documents, b unique.
    db.rp.insert_many([{"_id": i, "a": 0 if i >= 100 else i, "b": i} for i in range(5000)])
    # Selective on a: the race picks a_1 and caches it.
    list(db.rp.find({"a": 7, "b": {"$gte": 0}}))
    [entry] = list(db.rp.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    # Same shape, but a matches 4900 documents and b one: the cached a_1
    # reads thousands of keys for one document.
    assert [d["_id"] for d in db.rp.find({"a": 0, "b": {"$gte": 4999}})] == [4999]
    [entry] = list(db.rp.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "b_1"
    planner = db.rp.find({"a": 0, "b": {"$gte": 4999}}).explain()["queryPlanner"]
    assert planner["winningPlan"]["isCached"] is True
    assert planner["winningPlan"]["inputStage"]["indexName"] == "b_1"
    # Replanned before answering: every document, in every batch size,
    # with a skip, and none twice.
    list(db.rp.find({"a": 7, "b": {"$gte": 0}}))  # a_1 cached again
    [entry] = list(db.rp.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    flt = {"a": 0, "b": {"$gte": 4000}}
    got = [d["_id"] for d in db.rp.find(flt).batch_size(7).skip(3)]
    assert got == [d["_id"] for d in db.rp.find(flt).hint([("$natural", 1)])][3:]
    [entry] = list(db.rp.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "b_1"


def test_a_cached_plan_is_watched_only_through_its_first_batch(client):
    """Once a first batch is answered the read goes on by its plan: a
    small first batch ends the watch, and later batches return every
    document even where the plan works far past its trial."""
    db = client.test
    db.rw.create_index("a")
    db.rw.create_index("b")
    # a = 0 from 100 on; b matches `$gte: 0` for 100..109 and past 4900.
    db.rw.insert_many(
        [{"_id": i, "a": 0 if i >= 100 else i, "b": i if i < 110 or i > 4900 else -1} for i in range(5000)]
    )
    list(db.rw.find({"a": 7, "b": {"$gte": 0}}))
    [entry] = list(db.rw.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    flt = {"a": 0, "b": {"$gte": 0}}
    want = sorted(d["_id"] for d in db.rw.find(flt).hint([("$natural", 1)]))
    assert len(want) == 110
    for batch in (1, 5):
        assert sorted(d["_id"] for d in db.rw.find(flt).batch_size(batch)) == want, batch
    # An empty first batch (pymongo's batch_size(0) sends none) reads
    # nothing before the watch ends.
    first = db.command("find", "rw", filter=flt, batchSize=0)["cursor"]
    assert first["firstBatch"] == [] and first["id"] != 0
    got, cursor_id = [], first["id"]
    while cursor_id:
        more = db.command("getMore", cursor_id, collection="rw", batchSize=7)["cursor"]
        got += [d["_id"] for d in more["nextBatch"]]
        cursor_id = more["id"]
    assert sorted(got) == want
    [entry] = list(db.rw.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    # Degraded while skipping (before any batch): replanned, and the
    # read by the new plan skips as many.
    first = db.command("find", "rw", filter=flt, skip=50, batchSize=0)["cursor"]
    got, cursor_id = [], first["id"]
    while cursor_id:
        more = db.command("getMore", cursor_id, collection="rw")["cursor"]
        got += [d["_id"] for d in more["nextBatch"]]
        cursor_id = more["id"]
    assert len(got) == len(set(got)) == len(want) - 50 and set(got) <= set(want)
    [entry] = list(db.rw.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "b_1"
    list(db.rw.find({"a": 7, "b": {"$gte": 0}}).hint("a_1"))
    db.command("planCacheClear", "rw")
    list(db.rw.find({"a": 7, "b": {"$gte": 0}}))
    [entry] = list(db.rw.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    # A first batch of the default size works past the budget: replanned;
    # `$indexStats` counts the read once, for the index it kept.
    def accesses():
        return {s["name"]: s["accesses"]["ops"] for s in db.rw.aggregate([{"$indexStats": {}}])}

    before = accesses()
    assert sorted(d["_id"] for d in db.rw.find(flt)) == want
    [entry] = list(db.rw.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "b_1"
    after = accesses()
    assert (after["a_1"] - before["a_1"], after["b_1"] - before["b_1"]) == (0, 1), (before, after)


def test_a_sorted_cached_plan_that_degrades_is_replanned_into_a_blocking_sort(client):
    """The cached plan gave the sort; the plan that replaces it within the
    read does not, so the read sorts its documents itself."""
    db = client.test
    db.rs.create_index("a")
    db.rs.create_index("b")
    # b follows a but for the last ten documents, whose b runs backwards.
    db.rs.insert_many([{"_id": i, "a": i, "b": i if i < 4990 else 10000 - i} for i in range(5000)])
    list(db.rs.find({"a": {"$gte": 4995}, "b": {"$gte": 0}}).sort("a", 1))
    [entry] = list(db.rs.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    flt = {"a": {"$gte": 0}, "b": {"$gte": 4990}}
    assert [d["_id"] for d in db.rs.find(flt).sort("a", 1)] == list(range(4990, 5000))
    [entry] = list(db.rs.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "b_1"

    # A read with a blocking sort goes by the cached (raced) plan too.
    def accesses():
        return {s["name"]: s["accesses"]["ops"] for s in db.rs.aggregate([{"$indexStats": {}}])}

    before = accesses()
    assert [d["_id"] for d in db.rs.find(flt).sort("a", 1).limit(3)] == [4990, 4991, 4992]
    after = accesses()
    assert (after["a_1"] - before["a_1"], after["b_1"] - before["b_1"]) == (0, 1), (before, after)


def test_a_cached_plan_under_a_blocking_sort_is_watched_too(client):
    db = client.test
    db.rb.create_index("a")
    db.rb.create_index("b")
    db.rb.insert_many([{"_id": i, "a": 0 if i >= 100 else i, "b": i, "c": -i} for i in range(5000)])
    list(db.rb.find({"a": 7, "b": {"$gte": 0}}).sort("c", 1))
    [entry] = list(db.rb.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "a_1"
    got = [d["_id"] for d in db.rb.find({"a": 0, "b": {"$gte": 4990}}).sort("c", 1)]
    assert got == list(range(4999, 4989, -1))
    [entry] = list(db.rb.aggregate([{"$planCacheStats": {}}]))
    assert entry["cachedPlan"]["inputStage"]["indexName"] == "b_1"


def test_a_blocking_sort_over_a_covered_plan(client):
    """A raced plan may cover the projection while a SORT orders it: only
    when the index holds the sort's fields too."""
    db = client.test
    db.cs.create_index([("a", 1), ("b", 1)])
    db.cs.insert_many([{"_id": i, "a": i % 7, "b": (i * 5) % 11, "c": -i} for i in range(200)])
    for projection, sort in (({"b": 1, "_id": 0}, [("b", 1)]), ({"a": 1, "_id": 0}, [("c", 1)])):
        flt = {"a": {"$gt": 0}}
        want = list(db.cs.find(flt, projection).sort(sort).hint([("$natural", 1)]))
        assert list(db.cs.find(flt, projection).sort(sort)) == want, (projection, sort)


def test_review_cases_for_covered_reads_and_explain_of_aggregate(client):
    db = client.test
    db.rc.create_index("a")
    db.rc.insert_many([{"_id": 0, "a": 0, "b": 10}, {"_id": 1, "a": 1, "b": 30}, {"_id": 2, "a": 2, "b": 20}])
    # A `$sort` after the leading one needs fields the index lacks.
    later_sort = [
        {"$match": {"a": {"$gte": 0}}},
        {"$sort": {"a": 1}},
        {"$limit": 3},
        {"$sort": {"b": -1}},
        {"$project": {"_id": 0, "a": 1}},
    ]
    assert list(db.rc.aggregate(later_sort)) == [{"a": 1}, {"a": 2}, {"a": 0}]
    # A numeric path is never covered: the key is an array element.
    db.pos.create_index("a.0")
    db.pos.insert_one({"_id": 1, "a": [5, 6]})
    want = list(db.pos.find({"a.0": {"$gt": 0}}, {"_id": 0, "a.0": 1}).hint([("$natural", 1)]))
    assert list(db.pos.find({"a.0": {"$gt": 0}}, {"_id": 0, "a.0": 1})) == want
    assert list(db.pos.aggregate([{"$match": {"a.0": {"$gt": 0}}}, {"$project": {"_id": 0, "a.0": 1}}])) == want
    # explain: true never runs a pipeline, writes included.
    with pytest.raises(OperationFailure):
        db.command({"aggregate": 1, "pipeline": [{"$documents": [{"x": 1}]}, {"$out": "written"}], "explain": True})
    assert "written" not in db.list_collection_names()
    e = db.command("aggregate", "rc", pipeline=[{"$match": {"a": 1}}, {"$out": "written"}], explain=True)
    assert [next(iter(s)) for s in e["stages"]] == ["$cursor", "$out"]
    assert "written" not in db.list_collection_names()
    db.command("create", "rcview", viewOn="rc", pipeline=[{"$match": {"a": {"$gt": 0}}}])
    # A view's reads explain as the aggregate on the collection under it.
    for inner in [{"aggregate": "rcview", "pipeline": [], "cursor": {}}, {"find": "rcview", "filter": {}}]:
        planner = db.command("explain", inner)["queryPlanner"]
        assert planner["namespace"] == "test.rc" and planner["parsedQuery"] == {"a": {"$gt": 0}}
    # `$planCacheStats` lists only entries that still hold.
    db.rc.create_index([("a", 1), ("b", 1)])
    list(db.rc.find({"a": 1, "b": {"$gt": 0}}))
    assert len(list(db.rc.aggregate([{"$planCacheStats": {}}]))) == 1
    db.rc.drop_index("a_1")
    assert list(db.rc.aggregate([{"$planCacheStats": {}}])) == []


def test_hashed_indexes_answer_equalities_with_mongods_hashes(client):
    db = client.test
    assert db.h.create_index([("a", "hashed")]) == "a_hashed"
    spec = [i for i in db.h.list_indexes() if i["name"] == "a_hashed"][0]
    assert spec["key"] == {"a": "hashed"}
    db.h.insert_many([{"_id": i, "a": i % 50} for i in range(500)] + [{"_id": 1000, "a": "abc"}, {"_id": 1001}])
    # 42's hash is mongod's: -944302157085130861 (its hasher_test.cpp).
    e = db.command("explain", {"find": "h", "filter": {"a": 42}}, verbosity="executionStats")
    fetch = e["queryPlanner"]["winningPlan"]
    assert fetch["stage"] == "FETCH" and fetch["filter"] == {"a": {"$eq": 42}}
    assert fetch["inputStage"]["indexBounds"] == {"a": ["[-944302157085130861, -944302157085130861]"]}
    assert e["executionStats"]["nReturned"] == 10 and e["executionStats"]["totalKeysExamined"] == 10
    assert sorted(d["_id"] for d in db.h.find({"a": 42})) == [42 + 50 * k for k in range(10)]
    # 42.5 hashes as 42 (numbers squash to integers): fetched, then refused.
    assert list(db.h.find({"a": 42.5})) == []
    assert sorted(d["_id"] for d in db.h.find({"a": {"$in": ["abc", 7]}})) == [7 + 50 * k for k in range(10)] + [1000]
    # null: the missing field's key.
    assert [d["_id"] for d in db.h.find({"a": None})] == [1001]
    # Ranges cannot use it; nor sorts.
    plan = db.h.find({"a": {"$gt": 45}}).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "COLLSCAN"
    plan = db.h.find({"a": 3}).sort("a", 1).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "SORT"
    # Arrays are refused (and nothing is written), as is uniqueness.
    with pytest.raises(WriteError) as err:
        db.h.insert_one({"_id": 2000, "a": [1, 2]})
    assert err.value.code == 16766
    assert err.value.details["errmsg"] == "hashed indexes do not currently support array values. Found array at path: a"
    assert db.h.count_documents({"_id": 2000}) == 0
    with pytest.raises(OperationFailure) as err:
        db.h2.create_index([("a", "hashed")], unique=True)
    assert err.value.code == 16764
    db.h3.insert_one({"a": {"b": [1]}})
    with pytest.raises(OperationFailure) as err:
        db.h3.create_index([("a.b", "hashed")])
    assert err.value.code == 16766
    # Compound: an equality on each field pins both.
    db.h.create_index([("b", 1), ("a", "hashed")])
    db.h.update_many({}, [{"$set": {"b": {"$mod": ["$_id", 3]}}}])
    want = sorted(d["_id"] for d in db.h.find({"b": 1, "a": 42}).hint([("$natural", 1)]))
    assert sorted(d["_id"] for d in db.h.find({"b": 1, "a": 42}).hint("b_1_a_hashed")) == want
    assert db.command("validate", "h")["valid"] is True
    # Under another collation the hashes do not apply: a hint scans it all.
    db.hc.create_index([("s", "hashed")])
    db.hc.insert_one({"_id": 1, "s": "ABC"})
    en2 = {"locale": "en", "strength": 2}
    assert [d["_id"] for d in db.hc.find({"s": "abc"}).collation(en2).hint("s_hashed")] == [1]
    # Zero is zero whatever its exponent.
    db.hc.insert_one({"_id": 2, "s": bson.Decimal128("0E+50")})
    assert [d["_id"] for d in db.hc.find({"s": 0}).hint("s_hashed")] == [2]


def test_a_partial_index_on_a_type_serves_queries_of_that_type(client):
    db = client.test
    db.pt.create_index("email", partialFilterExpression={"email": {"$type": "string"}})
    db.pt.insert_many([{"_id": 1, "email": "a@x"}, {"_id": 2, "email": 5}])
    plan = db.pt.find({"email": {"$type": "string", "$eq": "a@x"}}).explain()["queryPlanner"]["winningPlan"]
    assert plan["inputStage"]["indexName"] == "email_1"
    assert [d["_id"] for d in db.pt.find({"email": {"$type": "string", "$eq": "a@x"}})] == [1]


def test_an_index_that_turns_multikey_under_an_open_cursor_filters_again(client):
    """A plan whose every key read was a match (a `$ne` complement on an
    index without arrays) returns what it reads unfiltered, but only
    while the index holds no arrays: a document that makes it multikey
    while the cursor is open is filtered (it holds 3, so `$ne: 3` fails
    although its key 500 lies in the bounds)."""
    c = client.test.c
    c.create_index("k")
    c.insert_many([{"_id": i, "k": i} for i in range(10)])
    cursor = c.find({"k": {"$ne": 3}}).sort("k", 1).batch_size(2)
    first = [next(cursor)["_id"], next(cursor)["_id"]]
    assert first == [0, 1]
    c.insert_one({"_id": "both", "k": [3, 500]})
    rest = [d["_id"] for d in cursor]
    assert rest == [2, 4, 5, 6, 7, 8, 9]
    plan = c.find({"k": {"$ne": 3}}).sort("k", 1).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "FETCH" and plan["inputStage"]["isMultiKey"] is True
    assert [d["_id"] for d in c.find({"k": {"$ne": 3}}).sort("k", 1)] == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_a_document_changed_under_an_open_index_cursor_is_filtered(client):
    """An index scan reads keys ahead of the documents it fetches (here
    all ten keys of its one range at once): a document updated since its
    key was read is checked against the filter again (it no longer
    matches `$gte: 0`), although every key in the bounds is of a match."""
    c = client.test.c
    c.create_index("k")
    c.insert_many([{"_id": i, "k": i} for i in range(10)])
    cursor = c.find({"k": {"$gte": 0}}).sort("k", 1).batch_size(2)
    assert [next(cursor)["_id"], next(cursor)["_id"]] == [0, 1]
    c.update_one({"_id": 5}, {"$set": {"k": -1}})
    assert [d["_id"] for d in cursor] == [2, 3, 4, 6, 7, 8, 9]


def test_show_record_id_over_an_index_scan_names_the_record(client):
    c = client.test.c
    c.create_index("k")
    c.insert_many([{"_id": i, "k": 10 - i} for i in range(5)])
    natural = {d["_id"]: d["$recordId"] for d in c.find({}, show_record_id=True, hint=[("$natural", 1)])}
    by_index = {d["_id"]: d["$recordId"] for d in c.find({"k": {"$gte": 7}}, show_record_id=True)}
    assert c.find({"k": {"$gte": 7}}).explain()["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN"
    assert by_index == {i: natural[i] for i in range(4)}
    assert len(set(natural.values())) == 5


def test_ranges_in_and_order_of_id_read_the_id_index(client):
    """`_id` ranges, `$in` and `_id` order read the `_id` index (FETCH over
    IXSCAN of `_id_`, as mongod plans them), never scanning the
    collection; the answers are a collection scan's."""
    db = client.test
    db.ids.insert_many([{"_id": i, "a": i % 10} for i in range(1000)])

    def plan(cursor):
        e = cursor.explain()
        return e["queryPlanner"]["winningPlan"], e["executionStats"]

    def scanned(filter, **kw):
        return list(db.ids.find(filter, **kw).hint([("$natural", 1)]))

    p, stats = plan(db.ids.find({"_id": {"$in": [900, 5, 7, 5000]}}))
    assert p["stage"] == "FETCH" and p["inputStage"]["stage"] == "IXSCAN"
    ix = p["inputStage"]
    assert (ix["indexName"], ix["keyPattern"], ix["isUnique"], ix["isMultiKey"]) == ("_id_", {"_id": 1}, True, False)
    assert ix["indexBounds"] == {"_id": ["[5, 5]", "[7, 7]", "[900, 900]", "[5000, 5000]"]}
    assert (stats["totalKeysExamined"], stats["totalDocsExamined"], stats["nReturned"]) == (3, 3, 3)
    assert list(db.ids.find({"_id": {"$in": [900, 5, 7, 5000]}})) == [{"_id": i, "a": i % 10} for i in (5, 7, 900)]

    p, stats = plan(db.ids.find({"_id": {"$gt": 990}}))
    assert p["inputStage"]["indexBounds"] == {"_id": ["(990, inf.0]"]}
    assert (stats["totalKeysExamined"], stats["totalDocsExamined"]) == (9, 9)
    for f in [{"_id": {"$gt": 990}}, {"_id": {"$gte": 10, "$lt": 20}, "a": 3}, {"_id": {"$lte": 3}}]:
        assert list(db.ids.find(f)) == scanned(f), f
    # `_id` order from the index, backward for a descending sort.
    p, _ = plan(db.ids.find().sort("_id", -1).limit(3))
    assert p["stage"] == "LIMIT" and p["inputStage"]["inputStage"]["direction"] == "backward"
    assert [d["_id"] for d in db.ids.find().sort("_id", -1).limit(3)] == [999, 998, 997]
    # Only `_id` projected: covered, as mongod's.
    p, stats = plan(db.ids.find({"_id": {"$gt": 995}}, {"_id": 1}))
    assert p["stage"] == "PROJECTION_COVERED" and stats["totalDocsExamined"] == 0
    assert list(db.ids.find({"_id": {"$gt": 995}}, {"_id": 1})) == [{"_id": i} for i in range(996, 1000)]
    # A hint names it; updates and deletes read it too.
    assert plan(db.ids.find({"a": 1}).hint({"_id": 1}))[0]["inputStage"]["indexName"] == "_id_"
    update = db.command("explain", {"update": "ids", "updates": [{"q": {"_id": {"$in": [1, 2]}}, "u": {"$set": {"b": 1}}, "multi": True}]})
    assert update["queryPlanner"]["winningPlan"]["inputStage"]["inputStage"]["indexName"] == "_id_"
    assert db.ids.update_many({"_id": {"$in": [1, 2]}}, {"$set": {"b": 1}}).modified_count == 2
    assert db.ids.delete_many({"_id": {"$gte": 995}}).deleted_count == 5
    assert [d["_id"] for d in db.ids.find({"b": 1})] == [1, 2] and db.ids.count_documents({}) == 995
    # In a transaction the range sees the transaction's own writes.
    with client.start_session() as s:
        s.start_transaction()
        db.ids.insert_one({"_id": 2000, "a": 0}, session=s)
        assert [d["_id"] for d in db.ids.find({"_id": {"$gte": 990}}, session=s)] == [990, 991, 992, 993, 994, 2000]
        s.abort_transaction()


def test_id_ranges_keep_long_ids_and_collations_right(client):
    """`_id`s past the index's inline key length (stored cut, with a
    digest) are checked and ordered by their value; under another
    collation than the collection's, a string range does not read the
    `_id` index (its keys are the collation's)."""
    db = client.test
    long = "x" * 5000
    db.long.insert_many([{"_id": long + s} for s in ["b", "a", "d", "c"]] + [{"_id": "y"}, {"_id": "w"}])
    f = {"_id": {"$gt": long + "a", "$lt": "y"}}
    assert [d["_id"][-1] for d in db.long.find(f).sort("_id", 1)] == ["b", "c", "d"]
    assert [d["_id"][-1] for d in db.long.find(f).sort("_id", -1)] == ["d", "c", "b"]
    assert db.long.find(f).explain()["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "_id_"
    assert sorted(d["_id"][-1] for d in db.long.find({"_id": {"$gte": "x"}})) == ["a", "b", "c", "d", "y"]

    ci = {"locale": "en", "strength": 2}
    db.create_collection("ci", collation=ci)
    db.ci.insert_many([{"_id": s} for s in ["a", "B", "c", "D", "B" + long, "b" + long + "a"]])
    f = {"_id": {"$gte": "b", "$lte": "c"}}
    e = db.ci.find(f).explain()["queryPlanner"]["winningPlan"]
    assert e["inputStage"]["indexName"] == "_id_"
    assert sorted(d["_id"] for d in db.ci.find(f)) == sorted(["B", "c", "B" + long, "b" + long + "a"])
    # Long ones (their collation keys stored cut) in the collation's order.
    assert [d["_id"][:1] + str(len(d["_id"])) for d in db.ci.find(f).sort("_id", 1)] == ["B1", "B5001", "b5002", "c1"]
    simple = {"locale": "simple"}
    e = db.ci.find(f, collation=simple).explain()["queryPlanner"]["winningPlan"]
    assert e["stage"] == "COLLSCAN"
    assert sorted(d["_id"] for d in db.ci.find(f, collation=simple)) == ["b" + long + "a", "c"]
