"""Collections and documents through pymongo: create, drop, list,
insert (ordered and unordered, duplicate keys), find with filters, batches
and cursors, count, restart persistence and kill -9 durability."""

import signal

import pytest
from bson import ObjectId
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from conftest import Server


def test_insert_and_find(client):
    c = client.test.people
    r = c.insert_one({"name": "ann", "age": 30})
    assert isinstance(r.inserted_id, ObjectId)
    c.insert_many([{"_id": 1, "name": "bob", "age": 25}, {"_id": 2, "name": "cy", "age": 35, "tags": ["a", "b"]}])
    assert c.find_one({"_id": 1}) == {"_id": 1, "name": "bob", "age": 25}
    assert sorted(d["name"] for d in c.find({"age": {"$gte": 30}})) == ["ann", "cy"]
    assert [d["name"] for d in c.find({"tags": "b"})] == ["cy"]
    assert [d["name"] for d in c.find({"$or": [{"age": 25}, {"name": "cy"}]})] == ["bob", "cy"]
    assert c.find_one({"name": "nobody"}) is None
    # _id goes first, as MongoDB stores it.
    c.insert_one({"x": 1, "_id": "late"})
    assert list(c.find_one({"_id": "late"}).keys()) == ["_id", "x"]


def test_duplicate_keys(client):
    c = client.test.dups
    c.insert_one({"_id": 7})
    with pytest.raises(DuplicateKeyError) as e:
        c.insert_one({"_id": 7.0})
    d = e.value.details
    assert d["code"] == 11000
    assert d["keyPattern"] == {"_id": 1} and d["keyValue"] == {"_id": 7.0}
    assert d["errmsg"].startswith("E11000 duplicate key error collection: test.dups index: _id_ dup key:")


def test_ordered_and_unordered_inserts_report_per_document_errors(client):
    c = client.test.batch
    c.insert_one({"_id": 2})
    with pytest.raises(BulkWriteError) as e:
        c.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3}], ordered=True)
    assert e.value.details["nInserted"] == 1
    assert [w["index"] for w in e.value.details["writeErrors"]] == [1]
    with pytest.raises(BulkWriteError) as e:
        c.insert_many([{"_id": 4}, {"_id": 2}, {"_id": 5}], ordered=False)
    assert e.value.details["nInserted"] == 2
    assert sorted(d["_id"] for d in c.find()) == [1, 2, 4, 5]  # the ordered batch stopped at its error


def test_cursors_batches_skip_limit(client):
    c = client.test.many
    c.insert_many([{"_id": i, "even": i % 2 == 0} for i in range(1000)])
    assert [d["_id"] for d in c.find()] == list(range(1000))
    assert [d["_id"] for d in c.find({"even": True}, batch_size=7)] == list(range(0, 1000, 2))
    assert [d["_id"] for d in c.find(skip=990)] == list(range(990, 1000))
    assert [d["_id"] for d in c.find(limit=3, skip=5)] == [5, 6, 7]
    assert len(list(c.find().limit(150).batch_size(10))) == 150
    raw = client.test.command("find", "many", batchSize=2)
    cursor_id = raw["cursor"]["id"]
    assert cursor_id != 0 and len(raw["cursor"]["firstBatch"]) == 2
    more = client.test.command("getMore", cursor_id, collection="many", batchSize=3)
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [2, 3, 4]
    killed = client.test.command("killCursors", "many", cursors=[cursor_id])
    assert killed["cursorsKilled"] == [cursor_id]
    with pytest.raises(OperationFailure) as e:
        client.test.command("getMore", cursor_id, collection="many")
    assert e.value.code == 43
    single = client.test.command("find", "many", batchSize=2, singleBatch=True)
    assert single["cursor"]["id"] == 0


def test_count_and_count_documents(client):
    c = client.test.counted
    c.insert_many([{"v": i} for i in range(20)])
    assert client.test.command("count", "counted", query={"v": {"$lt": 5}})["n"] == 5
    assert client.test.command("count", "counted", skip=15)["n"] == 5


def test_collections_and_databases(client):
    db = client.catalogtest
    db.create_collection("a")
    db.b.insert_one({})
    with pytest.raises(OperationFailure) as e:
        db.command("create", "a")
    assert e.value.code == 48 and e.value.details["codeName"] == "NamespaceExists"
    assert sorted(db.list_collection_names()) == ["a", "b"]
    info = list(db.list_collections(filter={"name": "a"}))
    assert info[0]["name"] == "a" and info[0]["type"] == "collection"
    assert "catalogtest" in client.list_database_names()
    db.drop_collection("a")
    db.drop_collection("never-existed")  # no error since MongoDB 7.0
    assert db.list_collection_names() == ["b"]
    client.drop_database("catalogtest")
    assert "catalogtest" not in client.list_database_names()


def test_bad_input_is_refused(client):
    c = client.test.bad
    with pytest.raises(OperationFailure) as e:
        c.find_one({"a": {"$frob": 1}})
    assert e.value.code == 2 and "unknown operator: $frob" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"_id": [1, 2]})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        client.test.command("find", "bad", skip=-1)
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        client.test.command("insert", "a$b", documents=[{}])
    assert e.value.code == 73


def test_data_survives_a_clean_restart(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.keep.insert_many([{"_id": i} for i in range(100)])
    assert s.stop() == 0
    s = Server(datadir / "db")
    with s.client() as c:
        assert len(list(c.test.keep.find())) == 100
        c.test.keep.insert_one({"_id": 100})
    assert s.stop() == 0


def test_acknowledged_inserts_survive_kill_9(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        for i in range(200):
            c.test.durable.insert_one({"_id": i, "payload": "x" * 100})
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    with s.client() as c:
        assert sorted(d["_id"] for d in c.test.durable.find()) == list(range(200))
    assert s.stop() == 0


def test_delete(client):
    c = client.test.deletes
    c.insert_many([{"_id": i, "g": i % 3} for i in range(30)])
    assert c.delete_one({"g": 1}).deleted_count == 1
    assert c.delete_many({"g": 1}).deleted_count == 9
    assert c.delete_one({"_id": 0}).deleted_count == 1
    assert c.delete_one({"_id": 0}).deleted_count == 0
    assert c.delete_many({"nothing": 1}).deleted_count == 0
    assert sorted(d["_id"] for d in c.find()) == [i for i in range(1, 30) if i % 3 != 1]
    # The _id index entry went with the document.
    c.insert_one({"_id": 0, "back": True})
    assert c.find_one({"_id": 0}) == {"_id": 0, "back": True}
    with pytest.raises(OperationFailure) as e:
        client.test.command("delete", "deletes", deletes=[{"q": {}, "limit": 2}])
    assert "limit field in delete objects must be 0 or 1" in str(e.value)
    assert client.test.deletes_missing.delete_many({}).deleted_count == 0
    assert c.delete_many({}).deleted_count == 20
    assert c.find_one() is None


def test_deletes_survive_kill_9(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.d.insert_many([{"_id": i} for i in range(50)])
        assert c.test.d.delete_many({"_id": {"$lt": 25}}).deleted_count == 25
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    with s.client() as c:
        assert sorted(d["_id"] for d in c.test.d.find()) == list(range(25, 50))
    assert s.stop() == 0


def test_a_bad_delete_query_is_a_write_error(client):
    r = client.test.command("delete", "x", deletes=[{"q": {"a": {"$frob": 1}}, "limit": 0}])
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 2


def test_count_documents_and_estimated_count(client):
    c = client.test.agg
    c.insert_many([{"team": "x" if i % 4 == 0 else "y", "v": i} for i in range(40)])
    assert c.count_documents({}) == 40
    assert c.count_documents({"team": "x"}) == 10
    assert c.count_documents({"team": "y"}, skip=5, limit=10) == 10
    assert c.count_documents({"nothing": 1}) == 0
    assert c.estimated_document_count() == 40
    assert client.test.never.count_documents({}) == 0


def test_aggregate_group(client):
    c = client.test.grouped
    c.insert_many([{"team": t, "v": v} for t, v in [("a", 1), ("a", 2), ("b", 5), ("b", 7.5), ("c", None)]])
    out = {d["_id"]: d for d in c.aggregate([{"$group": {"_id": "$team", "sum": {"$sum": "$v"}, "n": {"$sum": 1},
                                                         "max": {"$max": "$v"}, "vals": {"$push": "$v"}}}])}
    assert out["a"] == {"_id": "a", "sum": 3, "n": 2, "max": 2, "vals": [1, 2]}
    assert out["b"]["sum"] == 12.5 and out["c"]["max"] is None
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$frob": {}}]))
    assert e.value.code == 40324


def test_type_size_all_mod_operators(client):
    c = client.test.ops
    c.insert_many([{"_id": 1, "a": [1, 2, 3]}, {"_id": 2, "a": "x"}, {"_id": 3, "a": [2, "y"]}, {"_id": 4, "a": 7}])
    assert [d["_id"] for d in c.find({"a": {"$type": "string"}})] == [2, 3]
    assert [d["_id"] for d in c.find({"a": {"$size": 2}})] == [3]
    assert [d["_id"] for d in c.find({"a": {"$all": [2, 3]}})] == [1]
    assert [d["_id"] for d in c.find({"a": {"$mod": [3, 1]}})] == [1, 4]
    with pytest.raises(OperationFailure) as e:
        c.find_one({"a": {"$type": "frob"}})
    assert e.value.code == 2 and "Unknown type name alias: frob" in str(e.value)
