"""Collations: locale-aware string comparison in filters, sorts, distinct,
updates, deletes, findAndModify, aggregate and bulkWrite, with mongod's
checks of the collation document."""

import pytest
from pymongo import DeleteMany, InsertOne
from pymongo.collation import Collation
from pymongo.errors import OperationFailure

EN2 = Collation(locale="en_US", strength=2)  # case-insensitive
EN1 = Collation(locale="en", strength=1)  # case- and accent-insensitive


@pytest.fixture
def coll(client):
    client.test.words.insert_many([
        {"_id": 1, "w": "apple"}, {"_id": 2, "w": "Apple"}, {"_id": 3, "w": "APPLE"},
        {"_id": 4, "w": "ápple"}, {"_id": 5, "w": "banana"}, {"_id": 6, "w": "Banana"},
        {"_id": 7, "w": "a10"}, {"_id": 8, "w": "a9"}, {"_id": 9, "w": 5},
    ])
    return client.test.words


def ids(cursor):
    return sorted(d["_id"] for d in cursor)


def test_strength_decides_what_is_equal(coll):
    assert ids(coll.find({"w": "apple"})) == [1]
    assert ids(coll.find({"w": "apple"}, collation=EN2)) == [1, 2, 3]
    assert ids(coll.find({"w": "apple"}, collation=EN1)) == [1, 2, 3, 4]
    assert ids(coll.find({"w": {"$in": ["BANANA", 5]}}, collation=EN2)) == [5, 6, 9]
    assert ids(coll.find({"w": {"$gt": "B", "$lt": "C"}}, collation=EN2)) == [5, 6]
    assert ids(coll.find({"w": "apple"}, collation=Collation(locale="simple"))) == [1]


def test_sort_follows_the_locale(coll):
    binary = [d["_id"] for d in coll.find({"_id": {"$in": [1, 2, 5, 6]}}).sort("w", 1)]
    assert binary == [2, 6, 1, 5]  # uppercase first, byte order
    english = [d["_id"] for d in coll.find({"_id": {"$in": [1, 2, 5, 6]}}, collation=Collation(locale="en"))
               .sort([("w", 1), ("_id", 1)])]
    assert english == [1, 2, 5, 6]  # lowercase before uppercase within a letter
    numeric = [d["w"] for d in coll.find({"_id": {"$in": [7, 8]}},
                                         collation=Collation(locale="en", numericOrdering=True)).sort("w", 1)]
    assert numeric == ["a9", "a10"]


def test_a_string_id_is_found_through_the_collation(client):
    client.test.ids.insert_one({"_id": "Key"})
    assert client.test.ids.find_one({"_id": "key"}) is None
    assert client.test.ids.find_one({"_id": "key"}, collation=EN2) == {"_id": "Key"}
    r = client.test.ids.update_one({"_id": "KEY"}, {"$set": {"x": 1}}, collation=EN2)
    assert r.modified_count == 1


def test_count_distinct_and_aggregate(coll):
    assert coll.count_documents({"w": "banana"}, collation=EN2) == 2
    assert sorted(coll.distinct("w", {"_id": {"$lte": 6}}, collation=EN1)) == ["apple", "banana"]
    out = list(coll.aggregate([{"$match": {"w": "APPLE"}}, {"$sort": {"_id": -1}}], collation=EN2))
    assert [d["_id"] for d in out] == [3, 2, 1]
    assert ids(coll.find({"$expr": {"$eq": ["$w", "BANANA"]}}, collation=EN2)) == [5, 6]


def test_writes_match_through_the_collation(coll):
    assert coll.update_many({"w": "apple"}, {"$set": {"fruit": True}}, collation=EN2).modified_count == 3
    doc = coll.find_one_and_update({"w": "BANANA"}, {"$set": {"seen": 1}}, sort=[("_id", -1)], collation=EN2)
    assert doc["_id"] == 6
    assert coll.delete_many({"w": "apple"}, collation=EN1).deleted_count == 4
    r = coll.database.client.bulk_write([DeleteMany({"w": "BANANA"}, namespace="test.words", collation=EN2),
                                         InsertOne({"_id": 10}, namespace="test.words")])
    assert r.deleted_count == 2
    assert ids(coll.find()) == [7, 8, 9, 10]


@pytest.mark.parametrize("collation, code", [
    ({"locale": "en", "strength": 9}, 2),
    ({"strength": 1}, 40414),
    ({"locale": "en", "frob": 1}, 40415),
    ({"locale": "simple", "strength": 1}, 51002),
    ({"locale": "en", "caseFirst": "sideways"}, 2),
    ({"locale": 5}, 2),
])
def test_bad_collations_are_refused_and_change_nothing(coll, collation, code):
    with pytest.raises(OperationFailure) as e:
        list(coll.find({}, collation=collation))
    assert e.value.code == code, e.value.details
    with pytest.raises(OperationFailure) as e:
        coll.update_many({}, {"$set": {"x": 1}}, collation=collation)
    assert e.value.code == code
    assert coll.count_documents({"x": 1}) == 0


def test_a_collection_default_collation_applies_unless_a_command_gives_one(datadir):
    from conftest import Server

    s = Server(datadir / "db")
    with s.client() as c:
        c.test.create_collection("ci", collation=Collation(locale="en", strength=2))
        c.test.ci.insert_many([{"_id": 1, "w": "Foo"}, {"_id": 2, "w": "foo"}, {"_id": 3, "w": "bar"}])
        assert c.test.ci.options()["collation"] == {
            "locale": "en", "caseLevel": False, "caseFirst": "off", "strength": 2, "numericOrdering": False,
            "alternate": "non-ignorable", "maxVariable": "punct", "normalization": False, "backwards": False,
            "version": "57.1"}
        assert ids(c.test.ci.find({"w": "FOO"})) == [1, 2]
        assert ids(c.test.ci.find({"w": "FOO"}, collation=Collation(locale="simple"))) == []
        assert c.test.ci.count_documents({"w": "foo"}) == 2
        assert c.test.ci.update_many({"w": "FOO"}, {"$set": {"x": 1}}).modified_count == 2
    assert s.stop() == 0
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            assert c.test.ci.delete_many({"w": "FOO"}).deleted_count == 2
            assert ids(c.test.ci.find()) == [3]
            c.test.create_collection("plain", collation=Collation(locale="simple"))
            assert "collation" not in c.test.plain.options()
    finally:
        assert s.stop() == 0


def test_update_operators_and_pipeline_expressions_use_the_collation(client):
    c = client.test.ops
    c.insert_one({"_id": 1, "tags": ["a", "b"], "s": "m", "w": "x"})
    c.update_one({"_id": 1}, {"$pull": {"tags": "A"}, "$addToSet": {"more": {"$each": ["Q", "q"]}}}, collation=EN2)
    assert c.find_one({"_id": 1})["tags"] == ["b"] and c.find_one({"_id": 1})["more"] == ["Q"]
    c.update_one({"_id": 1}, {"$max": {"s": "M"}}, collation=EN2)
    assert c.find_one({"_id": 1})["s"] == "m"  # equal under the collation: unchanged
    c.update_one({"_id": 1}, [{"$set": {"same": {"$eq": ["$w", "X"]}}}], collation=EN2)
    assert c.find_one({"_id": 1})["same"] is True
    out = list(c.aggregate([{"$project": {"e": {"$eq": ["$w", "X"]}}}], collation=EN2))
    assert out == [{"_id": 1, "e": True}]
