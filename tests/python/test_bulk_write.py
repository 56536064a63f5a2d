"""The `bulkWrite` command of MongoDB 8.0 (pymongo's `MongoClient.bulk_write`)
and `collMod`.

`bulkWrite` runs inserts, updates and deletes across namespaces and answers
per operation through a cursor; a malformed command writes nothing; a
retried one (same lsid and txnNumber) applies each operation once."""

import signal

import pytest
from bson import Int64
from pymongo import DeleteMany, DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import ClientBulkWriteException, OperationFailure

from conftest import Server
from test_retryable_writes import Raw, raw, retryable, session  # noqa: F401 (fixture)


def bulk(ops, *ns, **opts):
    return {"bulkWrite": 1, "ops": ops, "nsInfo": [{"ns": n} for n in ns], **opts}


def test_mixed_operations_across_collections_report_each_result(client):
    client.test.a.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}, {"_id": 3, "x": 3}])
    r = client.bulk_write([
        InsertOne({"_id": 10}, namespace="test.b"),
        UpdateOne({"_id": 1}, {"$inc": {"x": 10}}, namespace="test.a"),
        UpdateMany({"x": {"$gte": 2}}, {"$set": {"big": True}}, namespace="test.a"),
        UpdateOne({"_id": 99}, {"$set": {"x": 99}}, upsert=True, namespace="test.a"),
        ReplaceOne({"_id": 10}, {"y": 1}, namespace="test.b"),
        UpdateOne({"_id": 2}, {"$set": {"x": 2}}, namespace="test.a"),
        DeleteOne({"_id": 3}, namespace="test.a"),
        DeleteMany({"x": {"$lt": 0}}, namespace="test.a"),
    ], verbose_results=True)
    assert (r.inserted_count, r.matched_count, r.modified_count, r.upserted_count, r.deleted_count) == (1, 6, 5, 1, 1)
    assert r.update_results[3].upserted_id == 99
    assert r.update_results[2].matched_count == 3 and r.update_results[2].modified_count == 3
    assert r.update_results[5].matched_count == 1 and r.update_results[5].modified_count == 0
    assert r.delete_results[7].deleted_count == 0
    assert sorted(d["_id"] for d in client.test.a.find()) == [1, 2, 99]
    assert client.test.a.find_one({"_id": 1}) == {"_id": 1, "x": 11, "big": True}
    assert client.test.b.find_one() == {"_id": 10, "y": 1}


def test_the_reply_has_mongods_shape(client):
    r = client.admin.command(bulk([
        {"insert": 0, "document": {"_id": 1}},
        {"update": 0, "filter": {"_id": 2}, "updateMods": {"$set": {"a": 1}}, "upsert": True},
        {"delete": 0, "filter": {"_id": 1}, "multi": False},
    ], "test.c"))
    assert r["cursor"] == {"firstBatch": [
        {"ok": 1.0, "idx": 0, "n": 1},
        {"ok": 1.0, "idx": 1, "n": 1, "nModified": 0, "upserted": {"_id": 2}},
        {"ok": 1.0, "idx": 2, "n": 1},
    ], "id": 0, "ns": "admin.$cmd.bulkWrite"}
    assert {k: r[k] for k in ("nErrors", "nInserted", "nMatched", "nModified", "nUpserted", "nDeleted")} == \
        {"nErrors": 0, "nInserted": 1, "nMatched": 0, "nModified": 0, "nUpserted": 1, "nDeleted": 1}
    # errorsOnly: only the failures are listed.
    r = client.admin.command(bulk([{"insert": 0, "document": {"_id": 5}}, {"insert": 0, "document": {"_id": 5}}],
                                  "test.c", errorsOnly=True))
    assert [e["idx"] for e in r["cursor"]["firstBatch"]] == [1] and r["nInserted"] == 1 and r["nErrors"] == 1


def test_ordered_stops_at_the_first_error_and_unordered_goes_on(client):
    with pytest.raises(ClientBulkWriteException) as e:
        client.bulk_write([InsertOne({"_id": 1}, namespace="test.o"), InsertOne({"_id": 1}, namespace="test.o"),
                           InsertOne({"_id": 2}, namespace="test.o")])
    err = e.value.write_errors[0]
    assert (err["idx"], err["code"], err["keyPattern"], err["keyValue"]) == (1, 11000, {"_id": 1}, {"_id": 1})
    assert err["errmsg"].startswith("E11000 duplicate key error collection: test.o index: _id_")
    assert sorted(d["_id"] for d in client.test.o.find()) == [1]
    with pytest.raises(ClientBulkWriteException) as e:
        client.bulk_write([InsertOne({"_id": 1}, namespace="test.u"), InsertOne({"_id": 1}, namespace="test.u"),
                           InsertOne({"_id": 2}, namespace="test.u")], ordered=False)
    assert [w["idx"] for w in e.value.write_errors] == [1]
    assert e.value.partial_result.inserted_count == 2
    assert sorted(d["_id"] for d in client.test.u.find()) == [1, 2]


def test_an_operation_error_is_its_own_entry(client):
    client.test.create_collection("v", viewOn="w", pipeline=[])
    client.test.create_collection("val", validator={"x": {"$type": "int"}})
    r = client.admin.command(bulk([
        {"insert": 0, "document": {"_id": 1}},
        {"insert": 1, "document": {"_id": 1, "x": "no"}},
        {"update": 2, "filter": {}, "updateMods": {"$set": {"_id": 5}}},
        {"insert": 3, "document": {"_id": 2}},
        {"update": 2, "filter": {}, "updateMods": {"$bad": {"a": 1}}},
        {"update": 2, "filter": {}, "updateMods": {"x": 1}, "multi": True},
    ], "test.v", "test.val", "test.z", "test.system.profile", ordered=False))
    entries = r["cursor"]["firstBatch"]
    assert [(e["idx"], e["ok"], e.get("code")) for e in entries] == \
        [(0, 0.0, 166), (1, 0.0, 121), (2, 1.0, None), (3, 0.0, 73), (4, 0.0, 9), (5, 0.0, 9)]
    assert entries[0]["codeName"] == "CommandNotSupportedOnView"
    assert r["nErrors"] == 5
    # bypassDocumentValidation lets the document in.
    r = client.admin.command(bulk([{"insert": 0, "document": {"_id": 1, "x": "no"}}], "test.val",
                                  bypassDocumentValidation=True))
    assert r["nInserted"] == 1


@pytest.mark.parametrize("cmd, db, code", [
    (bulk([{"insert": 0, "document": {}}], "test.m"), "test", 13),
    (bulk([{"insert": 0, "document": {}}], "test.m", fooField=1), "admin", 40415),
    ({"bulkWrite": 1, "nsInfo": [{"ns": "test.m"}]}, "admin", 40414),
    ({"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}]}, "admin", 40414),
    (bulk([{"insert": 0, "document": {}}, {"insert": 1, "document": {}}], "test.m"), "admin", 2),
    (bulk([{"insert": 0, "document": {}}, {"insert": "x", "document": {}}], "test.m"), "admin", 14),
    (bulk([{"insert": 0, "document": {}}, {"insert": 0, "document": "x"}], "test.m"), "admin", 14),
    (bulk([{"insert": 0, "document": {}}, {"insert": 0, "document": {}, "extra": 1}], "test.m"), "admin", 40415),
    (bulk([{"insert": 0, "document": {}}, {"upsert": 0, "filter": {}}], "test.m"), "admin", 9),
    (bulk([{"insert": 0, "document": {}}, {"update": 0, "filter": {}}], "test.m"), "admin", 40414),
    (bulk([{"insert": 0, "document": {}},
           {"update": 0, "filter": {}, "updateMods": {"$set": {"x": 1}}, "multi": "yes"}], "test.m"), "admin", 14),
    ({"bulkWrite": 1, "ops": "x", "nsInfo": [{"ns": "test.m"}]}, "admin", 14),
    ({"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": ["test.m"]}, "admin", 14),
    (bulk([{"insert": 0, "document": {}}], "test.m", cursor={"batchSize": -1}), "admin", 2),
])
def test_a_malformed_command_is_refused_and_writes_nothing(raw, client, cmd, db, code):  # noqa: F811
    reply = raw(cmd, db=db)
    assert (reply["ok"], reply["code"]) == (0.0, code), reply
    assert "m" not in client.test.list_collection_names()


def test_results_past_the_batch_size_come_by_get_more(client):
    r = client.admin.command(bulk([{"insert": 0, "document": {"k": i}} for i in range(7)], "test.g",
                                  cursor={"batchSize": 3}))
    assert [e["idx"] for e in r["cursor"]["firstBatch"]] == [0, 1, 2] and r["cursor"]["id"] != 0
    more = client.admin.command({"getMore": r["cursor"]["id"], "collection": "$cmd.bulkWrite"})
    assert [e["idx"] for e in more["cursor"]["nextBatch"]] == [3, 4, 5, 6] and more["cursor"]["id"] == 0
    # pymongo follows the cursor on its own.
    big = client.bulk_write([InsertOne({"k": i}, namespace="test.h") for i in range(300)], verbose_results=True)
    assert len(big.insert_results) == 300


def test_a_retried_bulk_write_applies_each_operation_once(raw, client):  # noqa: F811
    client.test.r.insert_one({"_id": 1, "n": 0})
    lsid = session()
    cmd = retryable(bulk([
        {"update": 0, "filter": {"_id": 1}, "updateMods": {"$inc": {"n": 1}}},
        {"insert": 1, "document": {"_id": 7}},
        {"delete": 1, "filter": {"_id": 7}},
        {"update": 1, "filter": {"_id": 8}, "updateMods": {"$set": {"a": 1}}, "upsert": True},
    ], "test.r", "test.s"), lsid, 3)
    first = raw(cmd, db="admin")
    assert first["ok"] == 1.0 and first["nErrors"] == 0 and "retriedStmtIds" not in first
    again = raw(cmd, db="admin")
    assert again["retriedStmtIds"] == [0, 1, 2, 3]
    assert again["cursor"]["firstBatch"] == first["cursor"]["firstBatch"]
    assert [again[k] for k in ("nInserted", "nMatched", "nUpserted", "nDeleted")] == [1, 1, 1, 1]
    assert client.test.r.find_one({"_id": 1})["n"] == 1
    assert list(client.test.s.find()) == [{"_id": 8, "a": 1}]
    # A multi operation cannot be retryable: that operation fails.
    multi = retryable(bulk([{"update": 0, "filter": {}, "updateMods": {"$set": {"b": 1}}, "multi": True}],
                           "test.r"), lsid, 4)
    r = raw(multi, db="admin")
    assert r["cursor"]["firstBatch"][0]["code"] == 72 and r["nErrors"] == 1


def test_an_acknowledged_bulk_write_survives_kill_9(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        r = c.bulk_write([InsertOne({"_id": i}, namespace="test.k") for i in range(50)]
                         + [UpdateOne({"_id": 0}, {"$set": {"done": True}}, namespace="test.k2", upsert=True)])
        assert r.inserted_count == 50 and r.upserted_count == 1
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            assert c.test.k.count_documents({}) == 50
            assert c.test.k2.find_one() == {"_id": 0, "done": True}
    finally:
        assert s.stop() == 0


def test_coll_mod_changes_the_validator_and_it_persists(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.create_collection("p")
        c.test.p.insert_one({"x": "text"})
        assert c.test.command({"collMod": "p", "validator": {"x": {"$type": "int"}}})["ok"] == 1.0
        with pytest.raises(OperationFailure) as e:
            c.test.p.insert_one({"x": "no"})
        assert e.value.code == 121
        options = c.test.p.options()
        assert options["validator"] == {"x": {"$type": "int"}}
    assert s.stop() == 0
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            with pytest.raises(OperationFailure):
                c.test.p.insert_one({"x": "still no"})
            c.test.command({"collMod": "p", "validationAction": "warn"})
            c.test.p.insert_one({"x": "now a warning"})
            c.test.command({"collMod": "p", "validationLevel": "off", "validationAction": "error"})
            c.test.p.insert_one({"x": "off"})
            assert c.test.p.count_documents({}) == 3
    finally:
        assert s.stop() == 0


def test_coll_mod_redefines_a_view(client):
    client.test.base.insert_many([{"_id": 1, "k": "a"}, {"_id": 2, "k": "b"}])
    client.test.create_collection("view", viewOn="base", pipeline=[{"$match": {"k": "a"}}])
    client.test.command({"collMod": "view", "pipeline": [{"$match": {"k": "b"}}]})
    assert [d["_id"] for d in client.test.view.find()] == [2]


@pytest.mark.parametrize("cmd, code", [
    ({"collMod": "missing", "validator": {}}, 26),
    ({"collMod": "plain", "viewOn": "x"}, 72),
    ({"collMod": "plain", "validator": {"$bogus": 1}}, 2),
    ({"collMod": "plain", "validationLevel": "sometimes"}, 2),
    ({"collMod": "plain", "validator": "x"}, 14),
    ({"collMod": "plain", "frob": 1}, 40415),
    ({"collMod": "plain", "index": {"name": "x_1", "hidden": True}}, 27),
    ({"collMod": "aview", "validator": {"a": 1}}, 72),
    ({"collMod": "aview", "viewOn": "aview"}, 5),
])
def test_coll_mod_refuses_bad_changes_and_changes_nothing(client, cmd, code):
    client.test.create_collection("plain", validator={"a": 1})
    client.test.create_collection("aview", viewOn="plain", pipeline=[])
    with pytest.raises(OperationFailure) as e:
        client.test.command(cmd)
    assert e.value.code == code, e.value.details
    assert client.test.plain.options() == {"validator": {"a": 1}}
    assert client.test.aview.options() == {"viewOn": "plain", "pipeline": []}
