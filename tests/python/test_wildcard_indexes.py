"""Wildcard indexes (`$**`, `path.$**`, `wildcardProjection`): keys for
every leaf path as mongod makes them, one scan per queried path with
`$_path` pinned, mongod's refusals, explain in mongod's shape, multikey
paths kept across a restart, and every plan answering as a collection
scan."""

import random
import signal

import pytest
from pymongo.errors import OperationFailure

from conftest import Server


def winning(cursor):
    plan = cursor.explain()["queryPlanner"]["winningPlan"]
    out = [plan]
    while "inputStage" in out[-1]:
        out.append(out[-1]["inputStage"])
    return out


def ixscan(cursor):
    found = [s for s in winning(cursor) if s["stage"] == "IXSCAN"]
    return found[0] if found else None


def test_a_wildcard_index_reads_each_queried_path(client):
    c = client.test.products
    c.insert_many([
        {"_id": 1, "attrs": {"color": "red", "size": 10}, "tags": ["a", "b"]},
        {"_id": 2, "attrs": {"color": "blue", "dims": {"w": 3, "h": 4}}, "tags": []},
        {"_id": 3, "attrs": {"color": ["red", "green"]}, "name": "x"},
        {"_id": 4, "other": 1},
    ])
    assert c.create_index([("$**", 1)]) == "$**_1"
    assert list(c.list_indexes())[1] == {"v": 2, "key": {"$**": 1}, "name": "$**_1"}

    q = c.find({"attrs.color": "red"})
    assert sorted(d["_id"] for d in q) == [1, 3]
    scan = ixscan(c.find({"attrs.color": "red"}))
    assert scan["keyPattern"] == {"$_path": 1, "attrs.color": 1}
    assert scan["indexName"] == "$**_1"
    assert scan["indexBounds"] == {"$_path": ['["attrs.color", "attrs.color"]'], "attrs.color": ['["red", "red"]']}
    assert scan["isMultiKey"] is True and scan["multiKeyPaths"] == {"$_path": [], "attrs.color": ["attrs.color"]}

    assert [d["_id"] for d in c.find({"attrs.dims.w": {"$gt": 2}})] == [2]
    scan = ixscan(c.find({"attrs.dims.w": {"$gt": 2}}))
    assert scan["isMultiKey"] is False and scan["indexBounds"]["attrs.dims.w"] == ["(2, inf.0]"]
    # `$exists` reads every path below too, and every value.
    assert sorted(d["_id"] for d in c.find({"attrs.dims": {"$exists": True}})) == [2]
    scan = ixscan(c.find({"attrs.dims": {"$exists": True}}))
    assert scan["indexBounds"] == {"$_path": ['["attrs.dims", "attrs.dims"]', '["attrs.dims.", "attrs.dims/")'],
                                   "attrs.dims": ["[MinKey, MaxKey]"]}
    # Empty arrays are `undefined` keys; equality to [] finds them.
    assert [d["_id"] for d in c.find({"tags": []})] == [2]
    assert ixscan(c.find({"tags": []})) is not None
    # Predicates a missing field could satisfy do not use it.
    for f in ({"name": None}, {"name": {"$exists": False}}, {"name": {"$ne": "x"}}, {"attrs": {"color": "blue"}}):
        assert ixscan(c.find(f)) is None, f
    assert sorted(d["_id"] for d in c.find({"name": {"$ne": "x"}})) == [1, 2, 4]
    # Several paths: one candidate each, the rest on FETCH.
    both = c.find({"attrs.color": "red", "attrs.size": 10})
    assert [d["_id"] for d in both] == [1]
    plan = c.find({"attrs.color": "red", "attrs.size": 10}).explain()["queryPlanner"]
    assert len(plan["rejectedPlans"]) == 1
    assert c.count_documents({"attrs.size": {"$gte": 10}}) == 1


def test_subtree_and_projection_choose_the_paths(client):
    c = client.test.t
    c.insert_many([{"_id": 1, "a": {"x": 1}, "b": {"x": 1}}, {"_id": 2, "a": {"x": 2}, "b": {"y": 2}}])
    c.create_index([("a.$**", 1)])
    assert ixscan(c.find({"a.x": 1}))["indexName"] == "a.$**_1"
    assert ixscan(c.find({"b.x": 1})) is None
    c.create_index([("$**", 1)], name="only_b_y", wildcardProjection={"b.y": 1})
    assert ixscan(c.find({"b.y": 2}))["indexName"] == "only_b_y"
    assert ixscan(c.find({"b.x": 1})) is None
    c.create_index([("$**", -1)], name="not_a", wildcardProjection={"a": 0})
    assert ixscan(c.find({"b.x": 1}))["indexName"] == "not_a"
    assert ixscan(c.find({"b.x": 1}))["keyPattern"] == {"$_path": 1, "b.x": -1}
    # The wildcard index leaves `_id` out: the `_id` index answers.
    assert ixscan(c.find({"_id": {"$gt": 0}}))["indexName"] == "_id_"
    assert [d["_id"] for d in c.find({"b.x": 1}).hint("not_a")] == [1]
    shown = {i["name"]: i for i in c.list_indexes()}
    assert shown["only_b_y"]["wildcardProjection"] == {"b.y": 1}


def test_arrays_above_the_held_paths_make_them_multikey(client):
    """An array met on the way to a held path makes the paths below it
    multikey, so two predicates on one are not intersected."""
    c = client.test.m
    c.create_index([("$**", 1)], wildcardProjection={"a.b": 1})
    c.create_index([("x.y.$**", 1)])
    c.insert_many([{"_id": 1, "a": [{"b": 1}, {"b": 5}]}, {"_id": 2, "x": {"y": [{"z": 1}, {"z": 5}]}}])
    assert [d["_id"] for d in c.find({"a.b": {"$gt": 2, "$lt": 4}})] == [1]
    assert ixscan(c.find({"a.b": {"$gt": 2, "$lt": 4}}))["multiKeyPaths"] == {"$_path": [], "a.b": ["a"]}
    assert [d["_id"] for d in c.find({"x.y.z": {"$gt": 2, "$lt": 4}})] == [2]
    # A path with something below it left out: `$exists` does not use it.
    c.create_index([("$**", 1)], name="not_a_b", wildcardProjection={"a.b": 0})
    c.insert_one({"_id": 3, "a": {"b": 1}})
    assert sorted(d["_id"] for d in c.find({"a": {"$exists": True}})) == [1, 3]
    with pytest.raises(OperationFailure) as e:
        list(c.find({"a": {"$exists": True}}).hint("not_a_b"))
    assert e.value.code == 291


def test_hints_of_a_wildcard_index_from_every_command(client):
    db = client.test
    db.u.insert_many([{"_id": i, "a": i} for i in range(5)])
    db.u.create_index([("$**", 1)])
    assert db.u.update_one({"a": 3}, {"$set": {"x": 1}}, hint="$**_1").modified_count == 1
    assert db.u.delete_one({"a": 4}, hint="$**_1").deleted_count == 1
    assert list(db.u.aggregate([{"$match": {"a": 3}}], hint="$**_1")) == [{"_id": 3, "a": 3, "x": 1}]
    assert db.u.find({"a": 3}).hint("$**_1").explain()["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN"
    assert db.u.count_documents({"a": {"$gte": 1}}, hint="$**_1") == 3
    with pytest.raises(OperationFailure) as e:
        db.u.update_one({}, {"$set": {"x": 2}}, hint="$**_1")
    assert e.value.code == 291
    # No unique or TTL through collMod either.
    for index in ({"name": "$**_1", "prepareUnique": True}, {"name": "$**_1", "expireAfterSeconds": 5}):
        with pytest.raises(OperationFailure) as e:
            db.command("collMod", "u", index=index)
        assert e.value.code == 72, index


@pytest.mark.parametrize("spec, code", [
    ({"key": {"$**": 1}, "name": "w", "prepareUnique": True}, 67),
    ({"key": {"$**": 1}, "name": "w", "unique": True}, 67),
    ({"key": {"$**": 1}, "name": "w", "sparse": True}, 67),
    ({"key": {"$**": 1}, "name": "w", "expireAfterSeconds": 5}, 67),
    ({"key": {"$**": "hashed"}, "name": "w"}, 67),
    ({"key": {"$**": 0}, "name": "w"}, 67),
    ({"key": {"a.$**": 1}, "name": "w", "wildcardProjection": {"a": 1}}, 9),
    ({"key": {"$**": 1}, "name": "w", "wildcardProjection": {}}, 9),
    ({"key": {"$**": 1}, "name": "w", "wildcardProjection": 5}, 14),
    ({"key": {"$**": 1}, "name": "w", "wildcardProjection": {"a": 1, "b": 0}}, 31254),
    ({"key": {"a": 1}, "name": "w", "wildcardProjection": {"a": 1}}, 2),
    ({"key": {"$**": 1, "b": 1}, "name": "w", "wildcardProjection": {"a": 1}}, 238),
])
def test_bad_wildcard_specs_are_refused(client, spec, code):
    with pytest.raises(OperationFailure) as e:
        client.test.command("createIndexes", "c", indexes=[spec])
    assert e.value.code == code, e.value.details


def test_hints_and_min_max_on_a_wildcard_index(client):
    c = client.test.h
    c.insert_many([{"_id": i, "a": i} for i in range(5)])
    c.create_index([("$**", 1)])
    assert [d["_id"] for d in c.find({"a": {"$lt": 2}}).hint("$**_1")] == [0, 1]
    assert [d["_id"] for d in c.find({"a": {"$lt": 2}}).hint([("$**", 1)])] == [0, 1]
    with pytest.raises(OperationFailure) as e:
        list(c.find({}).hint("$**_1"))
    assert e.value.code == 291
    with pytest.raises(OperationFailure) as e:
        list(c.find().min([("$**", 1)]).hint("$**_1"))
    assert e.value.code == 51174


PATHS = ["a", "a.b", "a.c", "d"]


def random_value(r, depth=0):
    roll = r.random()
    if roll < 0.45:
        return r.choice([1, 2, 3, 2.5, "x", "y", "", None, True])
    if roll < 0.6 and depth < 2:
        return {r.choice(["b", "c"]): random_value(r, depth + 1)}
    if roll < 0.75 and depth < 2:
        return [random_value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return r.choice([{}, [], [[1, 2]], {"b": [1, {"c": 2}]}])


def random_filter(r):
    p = r.choice(PATHS)
    v = r.choice([1, 2, 3, 2.5, "x", "y", ""])
    return r.choice([
        {p: v}, {p: {"$gt": v}}, {p: {"$lte": v}}, {p: {"$in": [v, 2]}}, {p: {"$exists": True}},
        {p: {"$type": "number"}}, {p: {"$type": "object"}}, {p: {"$regex": "^x"}}, {p: {}}, {p: []},
        {p: {"$elemMatch": {"$gt": 1}}}, {p: v, r.choice(PATHS): {"$exists": True}},
        {"$or": [{p: v}, {r.choice(PATHS): {"$gte": 2}}]},
    ])


def test_every_wildcard_plan_answers_as_a_scan(datadir):
    s = Server(datadir / "db")
    c = s.client().test.w
    r = random.Random(22)
    c.insert_many([{"_id": i, "a": random_value(r), "d": random_value(r)} for i in range(500)])
    c.create_index([("$**", 1)])
    c.create_index([("a.$**", 1)])
    c.create_index([("$**", 1)], name="a_b", wildcardProjection={"a.b": 1, "d": 1})
    c.create_index([("$**", 1)], name="not_a_c", wildcardProjection={"a.c": 0})

    def check(rounds):
        for _ in range(rounds):
            f = random_filter(r)
            want = sorted(d["_id"] for d in c.find(f).hint([("$natural", 1)]))
            assert sorted(d["_id"] for d in c.find(f)) == want, f
            for hint in ("$**_1", "a.$**_1", "a_b", "not_a_c"):
                try:
                    got = sorted(d["_id"] for d in c.find(f).hint(hint))
                except OperationFailure as e:
                    assert e.code == 291, (f, hint)
                    continue
                assert got == want, (f, hint)

    check(200)
    for i in range(0, 500, 5):
        c.update_one({"_id": i}, {"$set": {"a": random_value(r)}})
    c.delete_many({"_id": {"$in": list(range(0, 500, 9))}})
    assert s.client().test.command("validate", "w", full=True)["valid"] is True
    paths_before = ixscan(c.find({"a.b": 1}))["multiKeyPaths"]
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    c = s.client().test.w
    assert ixscan(c.find({"a.b": 1}))["multiKeyPaths"] == paths_before
    check(100)
    assert s.client().test.command("validate", "w", full=True)["valid"] is True
    assert s.stop() == 0
