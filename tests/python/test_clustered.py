"""Clustered collections (`create` with `clusteredIndex: {key: {_id: 1},
unique: true}`): natural order is `_id` order, the clustered index is the
only `_id` index listed, it cannot be dropped, and `expireAfterSeconds`
deletes documents whose `_id` is an old enough date. Errors as mongod's."""

import datetime
import time

import pytest
from bson import Int64, ObjectId
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import Server

SPEC = {"key": {"_id": 1}, "unique": True}


def create(db, name, **options):
    return db.command("create", name, **options)


def test_natural_order_is_id_order(client):
    db = client.test
    create(db, "c", clusteredIndex={**SPEC, "name": "test index"})
    ids = [5, "b", 1, 3.5, "a", Int64(2), {"x": 1}, ObjectId("000000000000000000000001")]
    db.c.insert_many([{"_id": i, "n": n} for n, i in enumerate(ids)])
    want = [1, Int64(2), 3.5, 5, "a", "b", {"x": 1}, ObjectId("000000000000000000000001")]
    assert [d["_id"] for d in db.c.find()] == want
    assert [d["_id"] for d in db.c.find(batch_size=2)] == want, "getMore resumes at the _id position"
    assert [d["_id"] for d in db.c.find().sort("$natural", -1)] == want[::-1]
    assert [d["_id"] for d in db.c.find(hint=[("$natural", -1)], batch_size=3)] == want[::-1]
    assert [d["_id"] for d in db.c.aggregate([{"$project": {"n": 1}}], batchSize=3)] == want
    # A single update or delete takes the first match in natural order.
    db.c.update_one({"n": {"$gte": 0}}, {"$set": {"first": True}})
    assert db.c.find_one({"first": True})["_id"] == 1
    db.c.delete_one({})
    assert db.c.find_one()["_id"] == Int64(2)
    # Numbers that compare equal are one _id.
    with pytest.raises(DuplicateKeyError) as e:
        db.c.insert_one({"_id": 5.0})
    assert e.value.details["errmsg"] == "E11000 duplicate key error collection: test.c dup key: { _id: 5.0 }"


def test_a_hint_names_the_clustered_index_by_its_own_name(client):
    db = client.test
    create(db, "c", clusteredIndex={**SPEC, "name": "by id"})
    db.c.insert_many([{"_id": i, "n": i % 2} for i in range(6)])
    assert [d["_id"] for d in db.c.find({"n": 1}, hint="by id")] == [1, 3, 5]
    assert [d["_id"] for d in db.c.find({"n": 1}, hint=[("_id", 1)])] == [1, 3, 5]
    assert db.c.count_documents({"n": 0}, hint="by id") == 3
    assert [d["_id"] for d in db.c.aggregate([{"$match": {"n": 0}}], hint="by id")] == [0, 2, 4]
    assert db.c.update_many({"n": 0}, {"$set": {"m": 1}}, hint="by id").modified_count == 3
    assert db.c.delete_one({"n": 1}, hint="by id").deleted_count == 1
    assert db.c.find_one_and_update({"_id": 3}, {"$set": {"m": 2}}, hint="by id")["_id"] == 3
    # The default name is not this collection's index; nor is {_id: -1}.
    for hint in ["_id_", [("_id", -1)], "other"]:
        with pytest.raises(OperationFailure) as e:
            list(db.c.find(hint=hint))
        assert e.value.code == 2, hint
        assert "hint provided does not correspond to an existing index" in e.value.details["errmsg"]
    # A view's reads take the hint of the collection under it.
    db.command("create", "v", viewOn="c", pipeline=[{"$match": {"n": 0}}])
    assert [d["_id"] for d in db.v.find({}, hint="by id")] == [0, 2, 4]
    assert db.v.count_documents({}, hint="by id") == 3
    with pytest.raises(OperationFailure) as e:
        list(db.v.find({}, hint="_id_"))
    assert e.value.code == 2
    # An ordinary collection's _id index is "_id_".
    db.plain.insert_one({"_id": 1})
    assert db.plain.find_one({}, hint="_id_") == {"_id": 1}
    with pytest.raises(OperationFailure) as e:
        db.plain.find_one({}, hint="by id")
    assert e.value.code == 2


def test_show_record_id_gives_the_id_key_as_bindata(client):
    """A clustered collection's record id is its _id's key (mongod: the
    KeyString of _id), shown as BinData subtype 0; it orders as _id does."""
    db = client.test
    create(db, "c", clusteredIndex=SPEC)
    db.c.insert_many([{"_id": i} for i in [3, "a", 1, 2.5]])
    docs = list(db.c.find({}, {"_id": 0}, show_record_id=True, batch_size=2))
    ids = [d["$recordId"] for d in docs]
    assert all(type(i) is bytes for i in ids), ids
    assert ids == sorted(ids) and len(set(ids)) == 4, "keys order as the _id values do"
    assert [d for d in docs if set(d) != {"$recordId"}] == [], "the projection still applies"
    # The same _id has the same record id after an update.
    db.c.update_one({"_id": 3}, {"$set": {"x": 1}})
    assert db.c.find_one({"_id": 3}, show_record_id=True)["$recordId"] == ids[2]
    # An ordinary collection's record id is a long.
    db.plain.insert_one({"_id": 1})
    assert type(db.plain.find_one({}, show_record_id=True)["$recordId"]) is Int64


def test_listing_shows_the_clustered_index_only(client):
    db = client.test
    create(db, "c", clusteredIndex={**SPEC, "name": "test index"})
    [info] = db.list_collections(filter={"name": "c"})
    assert info["options"] == {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "test index", "unique": True}}
    assert "idIndex" not in info
    assert list(db.c.list_indexes()) == [
        {"v": 2, "key": {"_id": 1}, "name": "test index", "unique": True, "clustered": True}]
    create(db, "ttl", clusteredIndex=SPEC, expireAfterSeconds=5)
    [info] = db.list_collections(filter={"name": "ttl"})
    assert info["options"] == {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True},
                               "expireAfterSeconds": Int64(5)}
    assert type(info["options"]["expireAfterSeconds"]) is Int64
    assert list(db.ttl.list_indexes())[0]["expireAfterSeconds"] == 5
    # clusteredIndex: false is an ordinary collection.
    create(db, "plain", clusteredIndex=False)
    [info] = db.list_collections(filter={"name": "plain"})
    assert info["options"] == {} and info["idIndex"]["name"] == "_id_"


def test_the_clustered_index_stays(client):
    db = client.test
    create(db, "c", clusteredIndex=SPEC)
    db.c.create_index([("_id", 1)])
    db.command("createIndexes", "c", indexes=[list(db.c.list_indexes())[0]])
    for index in ["_id_", {"_id": 1}, ["_id_"]]:
        with pytest.raises(OperationFailure) as e:
            db.command("dropIndexes", "c", index=index)
        assert e.value.code == 5979800 and e.value.details["errmsg"] == "It is illegal to drop the clusteredIndex"
    db.command("dropIndexes", "c", index="*")
    assert len(list(db.c.list_indexes())) == 1
    # Its _id index is part of its storage, as mongod's clustered index.
    db.c.insert_many([{"_id": i, "pad": "x" * 100} for i in range(2000)])
    stats = db.command("collStats", "c")
    assert (stats["nindexes"], stats["indexSizes"], stats["totalIndexSize"]) == (1, {}, 0)
    assert stats["totalSize"] == stats["storageSize"]


@pytest.mark.parametrize("options, code, message", [
    ({"clusteredIndex": {"key": {"_id": 1}, "unique": False}}, 5979700,
     "The clusteredIndex option requires unique: true to be specified"),
    ({"clusteredIndex": {"key": {"a": 1}, "unique": True}}, 197,
     "The clusteredIndex option is only supported for key: {_id: 1}"),
    ({"clusteredIndex": {"key": {"_id": -1}, "unique": True}}, 197, None),
    ({"clusteredIndex": {"key": {"_id": 1.5}, "unique": True}}, 197, None),
    ({"clusteredIndex": {"key": {"_id": 1}}}, 40414, "BSON field 'create.unique' is missing but a required field"),
    ({"clusteredIndex": {"key": {"_id": 1}, "unique": True, "randField": 1}}, 40415,
     "BSON field 'create.randField' is an unknown field."),
    ({"clusteredIndex": {"key": {"_id": 1}, "unique": True, "v": 12345}}, 5979704,
     'Invalid clusteredIndex specification { v: 12345, key: { _id: 1 }, name: "_id_", unique: true }; '
     "cannot create a clusteredIndex with v=12345"),
    ({"clusteredIndex": True}, 5979703, None),
    ({"clusteredIndex": "yes"}, 14, None),
    ({"clusteredIndex": SPEC, "capped": True, "size": 1000}, 6049200, None),
    ({"clusteredIndex": SPEC, "capped": True}, 6127800, None),
    ({"clusteredIndex": SPEC, "viewOn": "x", "pipeline": []}, 6026500,
     "The 'clusteredIndex' option is not supported with views"),
    ({"expireAfterSeconds": 10}, 72,
     "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' option is "
     "specified"),
    ({"clusteredIndex": False, "expireAfterSeconds": 10}, 72,
     "'expireAfterSeconds' can be used only for clustered collections or timeseries collections"),
    ({"clusteredIndex": SPEC, "expireAfterSeconds": -1}, 72,
     "TTL index 'expireAfterSeconds' option cannot be less than 0"),
    ({"clusteredIndex": SPEC, "expireAfterSeconds": "soon"}, 14, None),
])
def test_create_checks_as_mongod(client, options, code, message):
    with pytest.raises(OperationFailure) as e:
        create(client.test, "bad", **options)
    assert e.value.code == code
    if message:
        assert e.value.details["errmsg"] == message
    assert "bad" not in client.test.list_collection_names()


def test_ttl_deletes_old_date_ids_only(client):
    db = client.test
    create(db, "events", clusteredIndex=SPEC, expireAfterSeconds=60)
    old = datetime.datetime(2001, 1, 1)
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    db.events.insert_many([
        {"_id": old}, {"_id": now}, {"_id": datetime.datetime(1960, 1, 1)},
        {"_id": ObjectId.from_datetime(old)}, {"_id": 7}, {"_id": "2001-01-01"},
    ])
    assert client.admin.command("getParameter", 1, ttlMonitorSleepSecs=1)["ttlMonitorSleepSecs"] == 60
    client.admin.command("setParameter", 1, ttlMonitorSleepSecs=1)

    def wait_passes(n):
        start = client.admin.command("serverStatus")["metrics"]["ttl"]["passes"]
        deadline = time.monotonic() + 20
        while client.admin.command("serverStatus")["metrics"]["ttl"]["passes"] < start + n:
            assert time.monotonic() < deadline, "the TTL monitor makes passes"
            time.sleep(0.2)

    wait_passes(2)
    left = [d["_id"] for d in db.events.find()]
    assert old not in left and len(left) == 5, left
    assert client.admin.command("serverStatus")["metrics"]["ttl"]["deletedDocuments"] == 1
    # Switched off, old dates stay.
    db.command("collMod", "events", expireAfterSeconds="off")
    assert "expireAfterSeconds" not in db.events.options()
    db.events.insert_one({"_id": old})
    wait_passes(2)
    assert db.events.find_one({"_id": old}) is not None
    db.command("collMod", "events", expireAfterSeconds=0)
    wait_passes(2)
    assert db.events.find_one({"_id": old}) is None
    for value, code in [("never", 72), (-5, 72)]:
        with pytest.raises(OperationFailure) as e:
            db.command("collMod", "events", expireAfterSeconds=value)
        assert e.value.code == code
    db.create_collection("plain")
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "plain", expireAfterSeconds=5)
    assert e.value.details["errmsg"] == "'expireAfterSeconds' option is only supported on collections clustered by _id"


def test_clustered_order_survives_a_restart(datadir):
    s = Server(datadir / "db")
    c = s.client()
    create(c.test, "c", clusteredIndex=SPEC)
    c.test.c.insert_many([{"_id": i} for i in [3, 1, 2]])
    c.close()
    assert s.stop() == 0
    s = Server(datadir / "db")
    c = s.client()
    assert [d["_id"] for d in c.test.c.find()] == [1, 2, 3]
    assert list(c.test.c.list_indexes())[0]["clustered"] is True
    c.close()
    assert s.stop() == 0
