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


def test_the_id_index_keeps_the_collection_default_collation(datadir):
    from conftest import Server
    from pymongo.errors import BulkWriteError, DuplicateKeyError

    s = Server(datadir / "db")
    try:
        with s.client() as c:
            c.test.create_collection("ci", collation=Collation(locale="en", strength=2))
            ci = c.test.ci
            ci.insert_one({"_id": "ann", "n": 1})
            with pytest.raises(DuplicateKeyError) as e:
                ci.insert_one({"_id": "ANN"})
            assert e.value.code == 11000
            msg = e.value.details["errmsg"]
            assert msg.startswith('E11000 duplicate key error collection: test.ci index: _id_ collation: '
                                  '{ locale: "en", caseLevel: false, caseFirst: "off", strength: 2,'), msg
            assert ' dup key: { _id: "0x' in msg
            assert e.value.details["keyValue"] == {"_id": "ANN"}
            assert e.value.details["collation"]["strength"] == 2
            with pytest.raises(BulkWriteError) as e:
                ci.insert_many([{"_id": "bob"}, {"_id": "BOB"}, {"_id": "Ann"}, {"_id": "cy"}], ordered=False)
            assert [w["index"] for w in e.value.details["writeErrors"]] == [1, 2]
            assert sorted(d["_id"] for d in ci.find()) == ["ann", "bob", "cy"]
            # Numbers are as in any `_id` index: 1 and 1.0 are one key.
            ci.insert_one({"_id": 1})
            with pytest.raises(DuplicateKeyError):
                ci.insert_one({"_id": 1.0})
            # Lookups by `_id` go through the index under the default collation ...
            assert ci.find_one({"_id": "ANN"}) == {"_id": "ann", "n": 1}
            assert ci.find_one({"_id": "ANN"}, {"n": 1}) == {"_id": "ann", "n": 1}
            # ... and scan under another one.
            assert ci.find_one({"_id": "ANN"}, collation=Collation(locale="simple")) is None
            assert ci.update_one({"_id": "BOB"}, {"$set": {"x": 1}}).modified_count == 1
            r = ci.update_one({"_id": "CY"}, {"$set": {"y": 1}}, upsert=True)
            assert (r.matched_count, r.upserted_id) == (1, None)
            assert ci.find_one_and_update({"_id": "Bob"}, {"$inc": {"x": 1}}, return_document=True)["x"] == 2
            idx = list(ci.list_indexes())
            assert idx[0]["name"] == "_id_" and idx[0]["collation"]["locale"] == "en"
            info = next(c.test.list_collections(filter={"name": "ci"}))
            assert info["idIndex"]["collation"]["strength"] == 2
            c.test.plain.insert_one({"_id": "ann"})
            c.test.plain.insert_one({"_id": "ANN"})
            assert "collation" not in list(c.test.plain.list_indexes())[0]
        assert s.stop() == 0
        s = Server(datadir / "db", port=s.port)
        with s.client() as c:
            with pytest.raises(DuplicateKeyError):
                c.test.ci.insert_one({"_id": "Cy"})
            assert c.test.ci.delete_one({"_id": "ANN"}).deleted_count == 1
            assert [d["_id"] for d in c.test.ci.find({}, {"_id": 1}).sort("_id", 1)] == [1, "bob", "cy"]
            c.test.ci.insert_one({"_id": "Ann"})  # the key went with the document
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


def test_group_keys_and_min_max_accumulators_use_the_collation(coll):
    pipeline = [{"$match": {"_id": {"$lte": 6}}}, {"$group": {"_id": "$w", "n": {"$sum": 1}}}]
    binary = {d["_id"]: d["n"] for d in coll.aggregate(pipeline)}
    assert binary == {"apple": 1, "Apple": 1, "APPLE": 1, "ápple": 1, "banana": 1, "Banana": 1}
    groups = sorted(d["n"] for d in coll.aggregate(pipeline, collation=EN2))
    assert groups == [1, 2, 3], "apple x3, ápple, banana x2"
    groups = sorted(d["n"] for d in coll.aggregate(pipeline, collation=EN1))
    assert groups == [2, 4]
    # A compound key: strings inside documents compare through it too.
    compound = [{"$group": {"_id": {"w": "$w"}, "n": {"$sum": 1}}}]
    ones = [d for d in coll.aggregate([{"$match": {"_id": {"$in": [1, 2, 3]}}}] + compound, collation=EN2)]
    assert len(ones) == 1 and ones[0]["n"] == 3 and ones[0]["_id"]["w"].lower() == "apple"
    # $max of "banana" and "Apple": byte order puts "b" last, English too;
    # "a10" against "a9": bytes say "a9", numericOrdering says "a10".
    mm = [{"$match": {"_id": {"$in": [7, 8]}}}, {"$group": {"_id": None, "hi": {"$max": "$w"}, "lo": {"$min": "$w"}}}]
    assert list(coll.aggregate(mm))[0] == {"_id": None, "hi": "a9", "lo": "a10"}
    numeric = Collation(locale="en", numericOrdering=True)
    assert list(coll.aggregate(mm, collation=numeric))[0] == {"_id": None, "hi": "a10", "lo": "a9"}


def test_a_view_has_its_own_default_collation(client):
    db = client.test
    db.create_collection("people", collation=EN2)
    db.people.insert_many([{"_id": 1, "n": "ann"}, {"_id": 2, "n": "ANN"}, {"_id": 3, "n": "bob"}])
    # No collation given: the view is simple, whatever its collection's.
    db.command({"create": "plain", "viewOn": "people", "pipeline": []})
    assert ids(db.plain.find({"n": "ann"})) == [1]
    assert ids(db.people.find({"n": "ann"})) == [1, 2]
    assert "collation" not in db.command("listCollections", filter={"name": "plain"})["cursor"]["firstBatch"][0]["options"]
    assert ids(db.plain.find({"n": "ann"}, collation=Collation(locale="simple"))) == [1]
    # A collated view: every read uses it, its own stages included.
    db.command({"create": "folded", "viewOn": "people", "pipeline": [{"$match": {"n": {"$ne": "BOB"}}}],
                "collation": {"locale": "en_US", "strength": 2}})
    spec = db.command("listCollections", filter={"name": "folded"})["cursor"]["firstBatch"][0]["options"]["collation"]
    assert spec["locale"] == "en_US" and spec["strength"] == 2
    assert ids(db.folded.find()) == [1, 2], "the view's $match compared through its collation"
    assert ids(db.folded.find({"n": "Ann"})) == [1, 2]
    assert db.folded.count_documents({"n": "ANN"}) == 2
    assert db.folded.distinct("n") in (["ann"], ["ANN"])
    assert sorted(d["n"] for d in db.folded.aggregate([{"$group": {"_id": "$n", "n": {"$sum": 1}}}])) == [2]
    assert ids(db.folded.find({"n": "ann"}, collation=EN2)) == [1, 2], "the same collation may be given"
    # Overriding a view's collation is refused, for every read command.
    for call in (
        lambda: list(db.folded.find({}, collation=Collation(locale="fr"))),
        lambda: list(db.folded.find({}, collation=Collation(locale="simple"))),
        lambda: db.folded.count_documents({}, collation=Collation(locale="fr")),
        lambda: db.folded.distinct("n", collation=Collation(locale="fr")),
        lambda: list(db.folded.aggregate([], collation=Collation(locale="fr"))),
        lambda: list(db.plain.find({}, collation=Collation(locale="en"))),
    ):
        with pytest.raises(OperationFailure) as e:
            call()
        assert e.value.code == 167 and e.value.details["codeName"] == "OptionNotSupportedOnView"
        assert "Cannot override a view's default collation" in e.value.details["errmsg"]
    # A view over a view needs the same collation; so does collMod.
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "over", "viewOn": "folded", "collation": {"locale": "fr"}})
    assert e.value.code == 167
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "over", "viewOn": "folded"})
    assert e.value.code == 167
    assert "over" not in db.list_collection_names()
    db.command({"create": "over", "viewOn": "folded", "collation": {"locale": "en_US", "strength": 2}})
    assert ids(db.over.find({"n": "aNN"})) == [1, 2]
    with pytest.raises(OperationFailure) as e:
        db.command({"collMod": "plain", "viewOn": "folded", "pipeline": []})
    assert e.value.code == 167
    assert ids(db.plain.find({"n": "ann"})) == [1], "the refused collMod changed nothing"
    # The views that read a view bind it too: "over" reads "folded", so a
    # "folded" made again must keep its collation.
    db.drop_collection("folded")
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "folded", "viewOn": "people"})
    assert e.value.code == 167 and "over" in e.value.details["errmsg"]
    db.command({"create": "folded", "viewOn": "people", "collation": {"locale": "en_US", "strength": 2}})
    assert ids(db.over.find({"n": "aNN"})) == [1, 2]


def test_merge_into_a_collated_collection_keeps_the_stored_id(client):
    db = client.test
    db.create_collection("target", collation=Collation(locale="en", strength=2))
    db.target.insert_one({"_id": "ann", "n": 1})
    db.src.insert_one({"_id": "ANN", "n": 2})
    with pytest.raises(OperationFailure) as e:
        list(db.src.aggregate([{"$merge": {"into": "target", "whenMatched": "replace"}}]))
    assert e.value.code == 66
    assert db.target.find_one() == {"_id": "ann", "n": 1}
