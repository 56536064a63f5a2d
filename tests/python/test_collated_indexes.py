"""Indexes with a collation: keys compared under the index's collation, a
query using the index for strings only when its own collation matches,
the collection's default inherited, unique keys under the collation,
partial filters evaluated under it, and the catalog keeping it across a
restart."""

import random
import signal

import pytest
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import Server

EN2 = {"locale": "en", "strength": 2}
EN2_FULL = {"locale": "en", "caseLevel": False, "caseFirst": "off", "strength": 2, "numericOrdering": False,
            "alternate": "non-ignorable", "maxVariable": "punct", "normalization": False, "backwards": False,
            "version": "57.1"}


def stages(plan):
    """Every stage of a winning plan, top first."""
    out = [plan]
    for key in ("inputStage", "inputStages"):
        child = plan.get(key)
        for c in child if isinstance(child, list) else [child] if child else []:
            out += stages(c)
    return out


def winning(cursor):
    return stages(cursor.explain()["queryPlanner"]["winningPlan"])


def ixscan(cursor):
    found = [s for s in winning(cursor) if s["stage"] == "IXSCAN"]
    return found[0] if found else None


def test_a_collated_index_answers_queries_of_its_collation(client):
    c = client.test.people
    c.insert_many([{"_id": i, "name": n} for i, n in enumerate(["Ann", "ANN", "ann", "Bob", "bob", "Åsa", 7])])
    c.create_index("name", name="name_en2", collation=EN2)
    [ix] = [i for i in c.list_indexes() if i["name"] == "name_en2"]
    assert ix == {"v": 2, "key": {"name": 1}, "name": "name_en2", "collation": EN2_FULL}

    under = Collation(locale="en", strength=2)
    found = c.find({"name": "ann"}).collation(under)
    assert sorted(d["_id"] for d in found) == [0, 1, 2]
    scan = ixscan(c.find({"name": "ann"}).collation(under))
    assert scan["indexName"] == "name_en2" and scan["collation"] == EN2_FULL
    # Exact under the index's collation: nothing left for FETCH.
    assert all("filter" not in s for s in winning(c.find({"name": "ann"}).collation(under)))
    assert c.count_documents({"name": "BOB"}, collation=under) == 2

    # A binary query cannot use it for strings, but can for numbers.
    assert [d["_id"] for d in c.find({"name": "ann"})] == [2]
    assert ixscan(c.find({"name": "ann"})) is None
    assert ixscan(c.find({"name": {"$gt": 5}}))["indexName"] == "name_en2"
    assert [d["_id"] for d in c.find({"name": {"$gt": 5}})] == [6]

    # The index gives the collation's order, without a blocking sort.
    ordered = c.find({"name": {"$type": "string"}}, {"_id": 0}).sort("name", 1).collation(under)
    names = [d["name"] for d in ordered]
    assert [n.lower() for n in names] == ["ann", "ann", "ann", "åsa", "bob", "bob"]
    plan = winning(c.find({"name": {"$type": "string"}}).sort("name", 1).collation(under))
    assert not any(s["stage"] == "SORT" for s in plan)
    # Never covered: the index holds sort keys, not the strings.
    plan = winning(c.find({"name": "ann"}, {"_id": 0, "name": 1}).collation(under))
    assert any(s["stage"] == "FETCH" for s in plan)
    assert sorted(d["name"] for d in c.find({"name": "ann"}, {"_id": 0, "name": 1}).collation(under)) == \
        ["ANN", "Ann", "ann"]

    # A regex compares binary, so it reads every string of the index.
    regex = c.find({"name": {"$regex": "^an"}}).collation(under)
    assert [d["_id"] for d in regex] == [2]
    bounds = ixscan(c.find({"name": {"$regex": "^an"}}).collation(under))["indexBounds"]["name"]
    # (From the empty string's sort key, the least of all.)
    assert bounds == ['["01", {})', '[/^an/, /^an/]']


def test_unique_under_a_collation_and_min_max(client):
    c = client.test.users
    c.create_index("login", unique=True, collation=EN2)
    c.insert_one({"_id": 1, "login": "Zoe"})
    with pytest.raises(DuplicateKeyError) as e:
        c.insert_one({"_id": 2, "login": "ZOE"})
    msg = e.value.details["errmsg"]
    assert msg.startswith("E11000 duplicate key error collection: test.users index: login_1 collation: { locale: \"en\"")
    assert "dup key: { login: \"0x" in msg
    assert e.value.details["keyPattern"] == {"login": 1} and e.value.details["collation"] == EN2_FULL
    assert c.count_documents({}) == 1
    c.insert_one({"_id": 3, "login": "zoé"})  # accents differ at strength 2
    with pytest.raises(DuplicateKeyError):
        c.update_one({"_id": 3}, {"$set": {"login": "zOE"}})
    # min/max take values as the index compares them.
    found = c.find().min([("login", "ZOE")]).max([("login", "zz")]).hint("login_1").collation(Collation(**EN2))
    assert sorted(d["_id"] for d in found) == [1, 3]
    # Under another collation a string bound means nothing to the index.
    with pytest.raises(OperationFailure) as e:
        list(c.find().min([("login", "ZOE")]).hint("login_1"))
    assert e.value.code == 51174 and "The index chosen is not compatible with min/max" in str(e.value)
    assert [d["_id"] for d in c.find().min([("login", 5)]).hint("login_1")] == [1, 3]


def test_the_collections_default_and_several_indexes_of_one_key(client):
    db = client.test
    db.create_collection("cities", collation=EN2)
    c = db.cities
    c.insert_many([{"_id": 1, "city": "Paris"}, {"_id": 2, "city": "PARIS"}, {"_id": 3, "city": "Lyon"}])
    assert c.create_index("city") == "city_1"
    c.create_index("city", name="city_binary", collation={"locale": "simple"})
    shown = {i["name"]: i for i in c.list_indexes()}
    assert shown["city_1"]["collation"] == EN2_FULL and "collation" not in shown["city_binary"]
    # The default applies to the query, so the inherited index serves it.
    assert ixscan(c.find({"city": "paris"}))["indexName"] == "city_1"
    assert sorted(d["_id"] for d in c.find({"city": "paris"})) == [1, 2]
    # Under the simple collation the binary index serves.
    simple = Collation(locale="simple")
    assert ixscan(c.find({"city": "PARIS"}).collation(simple))["indexName"] == "city_binary"
    assert [d["_id"] for d in c.find({"city": "PARIS"}).collation(simple)] == [2]

    with pytest.raises(OperationFailure) as e:
        db.command("dropIndexes", "cities", index={"city": 1})
    assert e.value.code == 181 and e.value.details["codeName"] == "AmbiguousIndexKeyPattern"
    assert e.value.details["errmsg"].startswith("2 indexes found for key: { city: 1 }, identify by name instead.")
    with pytest.raises(OperationFailure) as e:
        list(c.find({"city": "x"}).hint([("city", 1)]))
    assert e.value.code == 27 and "Hint matched multiple indexes, must hint by index name" in str(e.value)

    # Equivalent (same key and collation) under another name: refused.
    with pytest.raises(OperationFailure) as e:
        c.create_index("city", name="again", collation=EN2)
    assert e.value.code == 85 and e.value.details["errmsg"] == "Index already exists with a different name: city_1"
    with pytest.raises(OperationFailure) as e:
        c.create_index("city", name="again", collation=EN2, unique=True)
    assert e.value.code == 85
    assert e.value.details["errmsg"].startswith("An equivalent index already exists with a different name and options.")
    with pytest.raises(OperationFailure) as e:
        c.create_index("city", name="city_1", collation={"locale": "fr"})
    assert e.value.code == 86
    c.drop_index("city_binary")
    assert [i["name"] for i in c.list_indexes()] == ["_id_", "city_1"]


def test_the_id_index_spec_a_restore_sends_back(client):
    db = client.test
    db.create_collection("coll", collation=EN2)
    [id_index] = db.coll.list_indexes()
    assert id_index["collation"] == EN2_FULL
    # The spec as listed is the index already there.
    r = db.command("createIndexes", "coll", indexes=[dict(id_index)])
    assert r["note"] == "all indexes already exist" and r["numIndexesAfter"] == 1
    for other in ({"locale": "fr"}, {"locale": "simple"}):
        with pytest.raises(OperationFailure) as e:
            db.command("createIndexes", "coll", indexes=[{"key": {"_id": 1}, "name": "_id_", "collation": other}])
        assert e.value.code == 67
        assert e.value.details["errmsg"] == "_id index must have the collection default collation"
    r = db.command("createIndexes", "plain", indexes=[{"key": {"_id": 1}, "name": "_id_",
                                                       "collation": {"locale": "simple"}}])
    assert r["createdCollectionAutomatically"] is True


@pytest.mark.parametrize("collation, code", [
    ("en", 14), ({"locale": "en", "strength": 9}, 2), ({"strength": 1}, 40414), ({"locale": "en", "x": 1}, 40415),
])
def test_bad_index_collations_are_refused(client, collation, code):
    with pytest.raises(OperationFailure) as e:
        client.test.command("createIndexes", "c", indexes=[{"key": {"a": 1}, "name": "a_1", "collation": collation}])
    assert e.value.code == code
    assert "c" not in client.test.list_collection_names() or \
        [i["name"] for i in client.test.c.list_indexes()] == ["_id_"]


def test_a_partial_filter_is_evaluated_under_the_index_collation(client):
    c = client.test.p
    c.create_index("name", name="late", collation=EN2, partialFilterExpression={"name": {"$gt": "m"}})
    # Binary, "Nina" < "m"; under the collation it is after it.
    c.insert_many([{"_id": 1, "name": "Nina"}, {"_id": 2, "name": "adam"}, {"_id": 3, "name": "zed"}])
    under = Collation(locale="en", strength=2)
    q = {"name": {"$gt": "m"}}
    assert ixscan(c.find(q).collation(under))["indexName"] == "late"
    assert sorted(d["_id"] for d in c.find(q).collation(under)) == [1, 3]
    # Another collation does not use it.
    assert ixscan(c.find(q)) is None
    assert client.test.command("validate", "p")["valid"] is True


NAMES = ["a", "A", "á", "Á", "b", "B", "ab", "Ab", "aB", "", "ä", "z", "Z", "é", "e", "E"]


def random_value(r):
    roll = r.random()
    if roll < 0.7:
        return r.choice(NAMES)
    if roll < 0.8:
        return r.choice([1, 2.5, None])
    if roll < 0.9:
        return [r.choice(NAMES), r.choice(NAMES)]
    return {"x": r.choice(NAMES)}


def random_filter(r):
    v = r.choice(NAMES)
    return r.choice([
        {"s": v}, {"s": {"$gt": v}}, {"s": {"$lte": v}}, {"s": {"$in": [v, r.choice(NAMES), 1]}},
        {"s": {"$ne": v}}, {"s": {"$nin": [v]}}, {"s": {"$regex": "^" + v}}, {"s": {"$gte": 1}},
        {"s": {"$type": "string"}}, {"s": {"$gt": v, "$lt": r.choice(NAMES)}}, {"s": [v, r.choice(NAMES)]},
        {"s": {"x": v}},
    ])


def test_every_plan_answers_as_a_scan_under_each_collation(datadir):
    """Random strings of mixed case and accents, random filters: the
    collated index (hinted) answers each query exactly as a collection
    scan under the query's collation, whether or not the collations
    match; the same after a restart."""
    s = Server(datadir / "db")
    c = s.client().test.words
    r = random.Random(19)
    c.insert_many([{"_id": i, "s": random_value(r)} for i in range(600)])
    c.create_index("s", name="s_en2", collation=EN2)
    c.create_index("s", name="s_fr1", collation={"locale": "fr", "strength": 1})
    c.create_index("s", name="s_bin")
    collations = [None, Collation(**EN2), Collation(locale="fr", strength=1)]

    def check(rounds):
        for _ in range(rounds):
            f = random_filter(r)
            col = r.choice(collations)
            want = sorted(d["_id"] for d in c.find(f, collation=col).hint([("$natural", 1)]))
            for hint in ("s_en2", "s_fr1", "s_bin"):
                got = sorted(d["_id"] for d in c.find(f, collation=col).hint(hint))
                assert got == want, (f, col and col.document, hint)
            unhinted = sorted(d["_id"] for d in c.find(f, collation=col))
            assert unhinted == want, (f, col and col.document)

    check(150)
    for i in range(0, 600, 7):
        c.update_one({"_id": i}, {"$set": {"s": random_value(r)}})
    c.delete_many({"_id": {"$in": list(range(0, 600, 11))}})
    assert s.client().test.command("validate", "words", full=True)["valid"] is True
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    c = s.client().test.words
    shown = {i["name"]: i.get("collation", {}).get("locale") for i in c.list_indexes()}
    assert shown == {"_id_": None, "s_en2": "en", "s_fr1": "fr", "s_bin": None}
    check(100)
    assert s.client().test.command("validate", "words", full=True)["valid"] is True
    assert s.stop() == 0
