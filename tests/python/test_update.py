"""update, findAndModify and the update operators through pymongo, with
MongoDB's results and error codes; kill -9 durability of updates."""

import signal
import threading

import pytest
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from conftest import Server


def test_update_one_many_and_counts(client):
    c = client.test.up
    c.insert_many([{"_id": i, "g": i % 3, "n": i} for i in range(9)])
    r = c.update_many({"g": 1}, {"$inc": {"n": 100}})
    assert (r.matched_count, r.modified_count) == (3, 3)
    assert sorted(d["n"] for d in c.find({"g": 1})) == [101, 104, 107]
    r = c.update_one({"g": 2}, {"$set": {"tag": "x"}})
    assert (r.matched_count, r.modified_count) == (1, 1)
    assert c.count_documents({"tag": "x"}) == 1
    # Setting a field to the value it has matches but does not modify.
    r = c.update_one({"_id": 0}, {"$set": {"n": 0}})
    assert (r.matched_count, r.modified_count) == (1, 0)
    r = c.update_many({"g": 9}, {"$set": {"x": 1}})
    assert (r.matched_count, r.modified_count, r.upserted_id) == (0, 0, None)


def test_operators_end_to_end(client):
    c = client.test.ops
    c.insert_one({"_id": 1, "a": 5, "arr": [3, 1], "old": "v", "nested": {"k": 1}})
    c.update_one(
        {"_id": 1},
        {
            "$mul": {"a": 2},
            "$push": {"arr": {"$each": [2], "$sort": 1}},
            "$rename": {"old": "new"},
            "$unset": {"nested.k": ""},
            "$min": {"lo": 7},
            "$max": {"hi": 7},
            "$currentDate": {"when": True},
            "$addToSet": {"set": {"$each": [1, 1, 2]}},
        },
    )
    d = c.find_one({"_id": 1})
    when = d.pop("when")
    assert d == {"_id": 1, "a": 10, "arr": [1, 2, 3], "nested": {}, "hi": 7, "lo": 7, "new": "v", "set": [1, 2]}
    assert when.year >= 2024
    c.update_one({"_id": 1}, {"$pop": {"arr": -1}, "$pull": {"set": 2}, "$pullAll": {"x": []}})
    d = c.find_one({"_id": 1}, {"arr": 1, "set": 1})
    assert d == {"_id": 1, "arr": [2, 3], "set": [1]}


def test_new_fields_are_created_in_lexicographic_order(client):
    c = client.test.order
    c.insert_one({"_id": 1})
    c.update_one({"_id": 1}, {"$set": {"b": 1, "a": 1, "c.z": 1, "c.y": 1}})
    assert list(c.find_one({"_id": 1})) == ["_id", "a", "b", "c"]
    assert list(c.find_one({"_id": 1})["c"]) == ["y", "z"]


def test_positional_and_array_filters(client):
    c = client.test.pos
    c.insert_one({"_id": 1, "grades": [80, 85, 90], "items": [{"q": 1}, {"q": 5}, {"q": 9}]})
    c.update_one({"_id": 1, "grades": 85}, {"$set": {"grades.$": 86}})
    assert c.find_one({"_id": 1})["grades"] == [80, 86, 90]
    c.update_one({"_id": 1}, {"$inc": {"items.$[].q": 1}})
    assert [i["q"] for i in c.find_one({"_id": 1})["items"]] == [2, 6, 10]
    c.update_one({"_id": 1}, {"$set": {"items.$[big].big": True}}, array_filters=[{"big.q": {"$gt": 5}}])
    assert [i.get("big") for i in c.find_one({"_id": 1})["items"]] == [None, True, True]
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, {"$set": {"grades.$": 1}})
    assert e.value.code == 2
    assert "positional operator did not find the match" in str(e.value)
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, {"$set": {"a.$[x]": 1}})
    assert e.value.code == 2
    assert "No array filter found for identifier 'x'" in str(e.value)
    for bad in [{"$expr": {"$gt": ["$x", 1]}}, {"x": 1, "$expr": True}, {"$or": [{"x": 1}, {"$expr": True}]}]:
        with pytest.raises(WriteError) as e:
            c.update_one({"_id": 1}, {"$set": {"items.$[x].q": 0}}, array_filters=[bad])
        assert e.value.code == 224, bad
        assert "$expr is not allowed in this context" in str(e.value)
    assert [i["q"] for i in c.find_one({"_id": 1})["items"]] == [2, 6, 10]


def test_replacement(client):
    c = client.test.repl
    c.insert_one({"_id": 1, "a": 1, "b": 2})
    r = c.replace_one({"a": 1}, {"c": 3})
    assert r.modified_count == 1
    assert c.find_one({"_id": 1}) == {"_id": 1, "c": 3}
    with pytest.raises(WriteError) as e:
        c.replace_one({"_id": 1}, {"_id": 2, "c": 3})
    assert e.value.code == 66
    assert "_id: 2" in str(e.value)


def test_multi_replacement_is_a_write_error(client):
    reply = client.test.command("update", "repl2", updates=[{"q": {}, "u": {"c": 1}, "multi": True}])
    assert reply["n"] == 0
    assert reply["writeErrors"][0]["code"] == 9
    assert reply["writeErrors"][0]["errmsg"] == "multi update is not supported for replacement-style update"


def test_upserts(client):
    c = client.test.ups
    r = c.update_one({"k": "a", "n": {"$gt": 5}}, {"$set": {"v": 1}, "$setOnInsert": {"created": True}}, upsert=True)
    assert r.upserted_id is not None and r.matched_count == 0
    assert c.find_one({"k": "a"}, {"_id": 0}) == {"k": "a", "v": 1, "created": True}
    r = c.update_one({"k": "a"}, {"$set": {"v": 2}, "$setOnInsert": {"created": False}}, upsert=True)
    assert r.upserted_id is None and r.modified_count == 1
    assert c.find_one({"k": "a"}, {"_id": 0}) == {"k": "a", "v": 2, "created": True}
    r = c.replace_one({"_id": 42}, {"x": 1}, upsert=True)
    assert r.upserted_id == 42
    assert c.find_one({"_id": 42}) == {"_id": 42, "x": 1}
    reply = client.test.command(
        "update", "ups", updates=[{"q": {"_id": 7}, "u": {"$inc": {"n": 1}}, "upsert": True}, {"q": {"_id": 7}, "u": {"$inc": {"n": 1}}, "upsert": True}]
    )
    assert reply["n"] == 2 and reply["nModified"] == 1
    assert reply["upserted"] == [{"index": 0, "_id": 7}]
    assert c.find_one({"_id": 7}) == {"_id": 7, "n": 2}
    # An upsert into a collection that does not exist creates it.
    client.test.fresh.update_one({"_id": 1}, {"$set": {"a": 1}}, upsert=True)
    assert "fresh" in client.test.list_collection_names()


@pytest.mark.parametrize(
    "update,code",
    [
        ({"$set": {"a": 1}, "$inc": {"a": 1}}, 40),
        ({"$set": {"a.b": 1, "a": 1}}, 40),
        ({"$frob": {"a": 1}}, 9),
        ({"$set": 1}, 9),
        ({"$inc": {"a": "x"}}, 14),
        ({"$inc": {"s": 1}}, 14),
        ({"$set": {"s.x": 1}}, 28),
        ({"$set": {"_id": 2}}, 66),
        ({"$set": {"a..b": 1}}, 56),
        ({"$pop": {"arr": 2}}, 9),
        ({"$push": {"s": 1}}, 2),
        ({"$rename": {"a": "a"}}, 2),
    ],
)
def test_update_errors(client, update, code):
    c = client.test.errs
    c.delete_many({})
    c.insert_one({"_id": 1, "s": "str", "arr": [1]})
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, update)
    assert e.value.code == code, e.value.details
    assert c.find_one({"_id": 1}) == {"_id": 1, "s": "str", "arr": [1]}, "a failed update changes nothing"


def test_update_error_messages_match_mongodb(client):
    c = client.test.msgs
    c.insert_one({"_id": 1, "s": "str"})
    cases = [
        ({"$set": {"a": 1}, "$inc": {"a": 1}}, "Updating the path 'a' would create a conflict at 'a'"),
        ({"$inc": {"s": 1}}, "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 's' of non-numeric type string"),
        ({"$set": {"s.x": 1}}, "Cannot create field 'x' in element {s: \"str\"}"),
        ({"$set": {"_id": 5}}, "Performing an update on the path '_id' would modify the immutable field '_id'"),
    ]
    for update, message in cases:
        with pytest.raises(WriteError) as e:
            c.update_one({"_id": 1}, update)
        assert e.value.details["errmsg"] == message


def test_ordered_bulk_update_stops_at_first_error(client):
    c = client.test.bulk
    c.insert_many([{"_id": i, "n": 0} for i in range(3)])
    with pytest.raises(BulkWriteError) as e:
        c.bulk_write([UpdateOne({"_id": 0}, {"$inc": {"n": 1}}), UpdateOne({"_id": 1}, {"$inc": {"n": "x"}}), UpdateOne({"_id": 2}, {"$inc": {"n": 1}})])
    assert e.value.details["nModified"] == 1
    assert [w["index"] for w in e.value.details["writeErrors"]] == [1]
    assert [d["n"] for d in c.find().sort("_id", 1)] == [1, 0, 0]
    with pytest.raises(BulkWriteError) as e:
        c.bulk_write(
            [UpdateOne({"_id": 0}, {"$inc": {"n": 1}}), UpdateOne({"_id": 1}, {"$inc": {"n": "x"}}), UpdateOne({"_id": 2}, {"$inc": {"n": 1}})],
            ordered=False,
        )
    assert e.value.details["nModified"] == 2
    assert [d["n"] for d in c.find().sort("_id", 1)] == [2, 0, 1]


def test_concurrent_increments_are_not_lost(server):
    with server.client() as c:
        c.test.counter.insert_one({"_id": 1, "n": 0})

    def work():
        with server.client() as c:
            for _ in range(100):
                c.test.counter.update_one({"_id": 1}, {"$inc": {"n": 1}})

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with server.client() as c:
        assert c.test.counter.find_one({"_id": 1})["n"] == 400


def test_concurrent_upserts_of_one_id_all_count(server):
    """Losing an upsert race on the same _id turns into an update."""

    def work():
        with server.client() as c:
            for _ in range(50):
                c.test.race.update_one({"_id": "k"}, {"$inc": {"n": 1}}, upsert=True)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with server.client() as c:
        assert c.test.race.find_one({"_id": "k"})["n"] == 200


def test_find_and_modify(client):
    c = client.test.fam
    c.insert_many([{"_id": i, "pri": i % 4, "state": "new"} for i in range(8)])
    d = c.find_one_and_update({"state": "new"}, {"$set": {"state": "taken"}}, sort=[("pri", -1), ("_id", 1)])
    assert d == {"_id": 3, "pri": 3, "state": "new"}, "the old document by default"
    d = c.find_one_and_update(
        {"state": "new"}, {"$set": {"state": "taken"}}, sort=[("pri", -1), ("_id", 1)], return_document=ReturnDocument.AFTER, projection={"state": 1, "_id": 0}
    )
    assert d == {"state": "taken"}
    assert c.find_one({"_id": 7})["state"] == "taken"
    d = c.find_one_and_replace({"_id": 0}, {"state": "replaced"}, return_document=ReturnDocument.AFTER)
    assert d == {"_id": 0, "state": "replaced"}
    d = c.find_one_and_delete({"pri": 1}, sort=[("_id", -1)])
    assert d["_id"] == 5 and c.count_documents({"_id": 5}) == 0
    assert c.find_one_and_delete({"pri": 99}) is None
    assert c.find_one_and_update({"pri": 99}, {"$set": {"x": 1}}) is None
    d = c.find_one_and_update({"_id": 100}, {"$set": {"x": 1}}, upsert=True, return_document=ReturnDocument.AFTER)
    assert d == {"_id": 100, "x": 1}
    raw = client.test.command("findAndModify", "fam", query={"_id": 101}, update={"$set": {"x": 1}}, upsert=True)
    assert raw["lastErrorObject"] == {"n": 1, "updatedExisting": False, "upserted": 101}
    assert raw["value"] is None
    for bad in [dict(remove=True, update={"$set": {"a": 1}}), dict(), dict(remove=True, new=True), dict(remove=True, upsert=True)]:
        with pytest.raises(OperationFailure) as e:
            client.test.command("findAndModify", "fam", query={}, **bad)
        assert e.value.code == 9, bad


def test_acknowledged_updates_survive_kill_9(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.d.insert_many([{"_id": i, "n": 0} for i in range(50)])
        for i in range(50):
            c.test.d.update_one({"_id": i}, {"$inc": {"n": i}})
        c.test.d.update_many({"_id": {"$lt": 10}}, {"$set": {"low": True}})
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    with s.client() as c:
        docs = list(c.test.d.find().sort("_id", 1))
        assert [d["n"] for d in docs] == list(range(50))
        assert [d["_id"] for d in docs if d.get("low")] == list(range(10))
    assert s.stop() == 0


def test_in_place_sets_keep_the_document_and_every_index_right(client):
    """`$set` of existing top-level fields to scalars takes the server's
    in-place path where it may (no validator, no secondary index, no cap,
    outside a transaction) and the general one elsewhere; each answers the
    same."""
    plain, indexed = client.test.inplace, client.test.inplace_ix
    indexed.create_index("b")
    for c in (plain, indexed):
        c.insert_many([{"_id": i, "a": i, "b": f"v{i}", "c": [i]} for i in range(5)])
        r = c.update_one({"_id": 1}, {"$set": {"b": "w", "a": 10.5}})
        assert (r.matched_count, r.modified_count) == (1, 1)
        assert list(c.find_one({"_id": 1}).items()) == [("_id", 1), ("a", 10.5), ("b", "w"), ("c", [1])]
        # The same values again: matched, not modified.
        r = c.update_one({"_id": 1}, {"$set": {"b": "w", "a": 10.5}})
        assert (r.matched_count, r.modified_count) == (1, 0)
        # A missing field is appended (the general path).
        c.update_one({"_id": 2}, {"$set": {"b": "x", "z": True}})
        assert list(c.find_one({"_id": 2})) == ["_id", "a", "b", "c", "z"]
        r = c.update_many({}, {"$set": {"b": "all"}})
        assert (r.matched_count, r.modified_count) == (5, 5)
        assert c.count_documents({"b": "all"}) == 5
    # The index followed every change.
    assert [d["_id"] for d in indexed.find({"b": "all"}).hint("b_1")] == [0, 1, 2, 3, 4]
    assert indexed.count_documents({"b": "w"}) == 0
    # A validator is checked.
    client.test.create_collection("inplace_v", validator={"a": {"$type": "int"}})
    v = client.test.inplace_v
    v.insert_one({"_id": 1, "a": 1})
    with pytest.raises(WriteError) as e:
        v.update_one({"_id": 1}, {"$set": {"a": "text"}})
    assert e.value.code == 121
    # In a transaction, committed and seen.
    with client.start_session() as s, s.start_transaction():
        plain.update_one({"_id": 3}, {"$set": {"a": 33}}, session=s)
    assert plain.find_one({"_id": 3})["a"] == 33
