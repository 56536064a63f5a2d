"""renameCollection, collStats, dbStats, $collStats, and writeConcern j."""

import pytest
from pymongo import WriteConcern
from pymongo.errors import OperationFailure

from conftest import Server


def test_rename_collection(client, datadir):
    a = client.test.a
    a.insert_many([{"_id": i} for i in range(10)])
    a.rename("b")
    assert "a" not in client.test.list_collection_names()
    assert client.test.b.count_documents({}) == 10
    client.test.c.insert_one({"_id": "x"})
    with pytest.raises(OperationFailure) as e:
        client.test.b.rename("c")
    assert e.value.code == 48 and e.value.details["codeName"] == "NamespaceExists"
    client.test.b.rename("c", dropTarget=True)
    assert client.test.c.count_documents({}) == 10
    # Across databases, and the old name is free again.
    client.admin.command("renameCollection", "test.c", to="other.moved")
    assert client.other.moved.find_one({"_id": 3}) == {"_id": 3}
    client.test.c.insert_one({"_id": "new"})
    assert list(client.test.c.find()) == [{"_id": "new"}]
    with pytest.raises(OperationFailure) as e:
        client.admin.command("renameCollection", "test.nope", to="test.z")
    assert e.value.code == 26
    with pytest.raises(OperationFailure) as e:
        client.test.command("renameCollection", "test.c", to="test.z")
    assert e.value.code == 13, "only on admin"


def test_rename_survives_restart(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.src.insert_many([{"_id": i} for i in range(5)])
        c.test.src.rename("dst")
        c.test.dst.insert_one({"_id": 5})
    assert s.stop() == 0
    s = Server(datadir / "db")
    with s.client() as c:
        assert c.test.list_collection_names() == ["dst"]
        assert sorted(d["_id"] for d in c.test.dst.find()) == list(range(6))
    assert s.stop() == 0


def test_coll_stats_db_stats_and_coll_stats_stage(client):
    c = client.test.sized
    c.insert_many([{"_id": i, "pad": "x" * 100} for i in range(100)])
    stats = client.test.command("collStats", "sized")
    assert stats["ns"] == "test.sized" and stats["count"] == 100
    assert stats["size"] == sum(len(__import__("bson").encode(d)) for d in c.find())
    assert stats["avgObjSize"] == stats["size"] // 100
    assert stats["nindexes"] == 1 and set(stats["indexSizes"]) == {"_id_"}
    assert stats["storageSize"] > 0
    assert client.test.command("collStats", "sized", scale=1024)["size"] == stats["size"] // 1024
    with pytest.raises(OperationFailure) as e:
        client.test.command("collStats", "missing")
    assert e.value.code == 26
    db = client.test.command("dbStats")
    assert db["db"] == "test" and db["collections"] == 1 and db["objects"] == 100
    assert db["dataSize"] == stats["size"] and db["indexes"] == 1
    [doc] = list(c.aggregate([{"$collStats": {"storageStats": {}, "count": {}}}]))
    assert doc["ns"] == "test.sized" and doc["count"] == 100
    assert doc["storageStats"]["count"] == 100 and doc["storageStats"]["size"] == stats["size"]


def journal_syncs(client):
    return client.admin.command("serverStatus")["arbordb"]["journal_syncs"]


def test_write_concern_j_false_acknowledges_before_the_fsync(client):
    fast = client.test.get_collection("wc", write_concern=WriteConcern(j=False))
    before = journal_syncs(client)
    for i in range(50):
        fast.insert_one({"_id": i})
    fast.update_many({}, {"$set": {"x": 1}})
    fast.delete_one({"_id": 0})
    assert journal_syncs(client) - before < 5, "j:false writes do not each wait for an fsync"
    durable = client.test.get_collection("wc", write_concern=WriteConcern(j=True))
    before = journal_syncs(client)
    for i in range(100, 110):
        durable.insert_one({"_id": i})
    assert journal_syncs(client) - before >= 10, "j:true (the default) waits for an fsync per write"
    assert fast.count_documents({}) == 59


def test_validators(client):
    db = client.test
    db.create_collection("checked", validator={"qty": {"$gte": 0}, "name": {"$type": "string"}})
    c = db.checked
    c.insert_one({"_id": 1, "qty": 5, "name": "a"})
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"_id": 2, "qty": -1, "name": "b"})
    assert e.value.code == 121 and e.value.details["errmsg"] == "Document failed validation"
    assert e.value.details["errInfo"]["failingDocumentId"] == 2
    with pytest.raises(OperationFailure) as e:
        c.update_one({"_id": 1}, {"$inc": {"qty": -10}})
    assert e.value.code == 121
    with pytest.raises(OperationFailure):
        c.update_one({"_id": 3}, {"$set": {"qty": -1}}, upsert=True)
    c.insert_one({"_id": 4, "qty": -4, "name": "ok"}, bypass_document_validation=True)
    assert sorted(d["_id"] for d in c.find()) == [1, 4]
    assert c.find_one({"_id": 1})["qty"] == 5, "a refused update changes nothing"
    db.create_collection("moderate", validator={"qty": {"$gte": 0}}, validationLevel="moderate")
    db.moderate.insert_one({"_id": 1, "qty": -1}, bypass_document_validation=True)
    # Documents that already failed are not checked under "moderate".
    assert db.moderate.update_one({"_id": 1}, {"$set": {"qty": -2}}).modified_count == 1
    db.create_collection("warned", validator={"qty": {"$gte": 0}}, validationAction="warn")
    db.warned.insert_one({"_id": 1, "qty": -1})
    with pytest.raises(OperationFailure) as e:
        db.create_collection("bad", validator={"qty": {"$frob": 0}})
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.create_collection("series", timeseries={"timeField": "t"})
    assert e.value.code == 72, "time series collections are refused, not ignored"
    with pytest.raises(OperationFailure) as e:
        db.command("create", "typo", cappd=True)
    assert e.value.code == 40415 and e.value.details["errmsg"] == "BSON field 'create.cappd' is an unknown field."
    assert "typo" not in db.list_collection_names()
    # Generic command fields are not create options.
    db.command("create", "stable", apiVersion="1", maxTimeMS=5000, readConcern={"level": "local"})
    assert db.stable.options() == {}


def test_admin_config_and_local_exist_and_each_start_is_logged(datadir):
    from conftest import Server

    s = Server(datadir / "db")
    with s.client() as c:
        assert {"admin", "config", "local"} <= set(c.list_database_names())
        assert c.config.list_collection_names() == ["system.sessions"]
        assert c.admin["system.version"].find_one() == {"_id": "featureCompatibilityVersion", "version": "8.0"}
        first = list(c.local.startup_log.find())
        assert len(first) == 1 and first[0]["pid"] == s.proc.pid
        assert first[0]["cmdLine"]["net"]["port"] == s.port
        assert c.local.startup_log.options() == {"capped": True, "size": 10 * 1024 * 1024}
    assert s.stop() == 0
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            log = list(c.local.startup_log.find())
            assert [d["_id"] for d in log[:1]] == [first[0]["_id"]] and len(log) == 2
            assert c.admin["system.version"].count_documents({}) == 1
    finally:
        assert s.stop() == 0
