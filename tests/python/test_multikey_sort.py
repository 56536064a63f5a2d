"""Sorts given by a multikey index, as mongod gives them: a multikey
field scanned whole orders each document by its lowest element
(backwards: its highest), which is the value a blocking sort orders it
by; a multikey field with narrower bounds gives no order (a SORT stage),
and one pinned to a value is passed over. Every sorted read is checked
against the same read with a blocking sort (`$natural` hinted)."""

import random

import pytest
from bson.min_key import MinKey

VALUES = [
    None, [], 3, "s", [1, 5], [[2], 0], [{"x": 3}, {"x": 1}], {"x": 2}, [{"x": 4}, {"y": 1}],
    [None], 2.5, [-1, "z"], [7, 7], [[]], [{"x": [6, 0]}], {"x": [9, -2]}, True, [False, 4],
    MinKey(), [MinKey(), 3],
]


def stages(plan):
    out = [plan["stage"]]
    for key in ("inputStage",):
        if key in plan:
            out += stages(plan[key])
    for child in plan.get("inputStages", []):
        out += stages(child)
    return out


@pytest.fixture
def docs(client):
    rnd = random.Random(7)
    c = client.test.mk
    rows = []
    for i in range(300):
        d = {"_id": i, "c": rnd.randrange(3)}
        if rnd.random() < 0.9:
            d["a"] = rnd.choice(VALUES)
        if rnd.random() < 0.5:
            d["b"] = rnd.choice([1, 2, [3, 1], None])
        rows.append(d)
    c.insert_many(rows)
    c.create_index([("a", 1), ("_id", 1)])
    c.create_index([("a.x", 1), ("_id", 1)])
    c.create_index([("c", 1), ("a", 1), ("_id", 1)])
    c.create_index([("b", 1), ("c", 1), ("_id", 1)])
    return c


@pytest.mark.parametrize(
    "flt, sort, hint, sorted_by_index",
    [
        ({}, [("a", 1), ("_id", 1)], None, True),
        ({}, [("a", -1), ("_id", -1)], None, True),
        ({}, [("a.x", 1), ("_id", 1)], None, True),
        ({}, [("a.x", -1), ("_id", -1)], None, True),
        ({"c": 1}, [("a", 1), ("_id", 1)], None, True),
        ({"c": 2}, [("a", -1), ("_id", -1)], None, True),
        # A multikey field pinned to one value is passed over.
        ({"b": 1}, [("c", 1), ("_id", 1)], None, True),
        # Bounds narrower than every key on a multikey field: no order
        # (unhinted, the index scanned whole may give it instead).
        ({"a": {"$gt": 2}}, [("a", 1), ("_id", 1)], "a_1__id_1", False),
        ({"a": {"$gt": 2}}, [("a", 1), ("_id", 1)], None, None),
        ({"b": 1}, [("b", 1), ("c", 1), ("_id", 1)], "b_1_c_1__id_1", False),
        # The sort may not name a multikey field pinned to a value.
        ({"c": 1, "a": 3}, [("a", 1), ("_id", 1)], "c_1_a_1__id_1", False),
    ],
)
def test_a_multikey_index_gives_a_sort_only_under_mongods_rule(docs, flt, sort, hint, sorted_by_index):
    def find():
        cursor = docs.find(flt).sort(sort)
        return cursor.hint(hint) if hint else cursor

    plan = find().explain()["queryPlanner"]["winningPlan"]
    if sorted_by_index is not None:
        assert ("SORT" not in stages(plan)) == sorted_by_index, plan
    want = [d["_id"] for d in docs.find(flt).sort(sort).hint([("$natural", 1)])]
    assert want, "the read finds something"
    assert [d["_id"] for d in find()] == want
    assert [d["_id"] for d in find().limit(7)] == want[:7]
    assert [d["_id"] for d in find().skip(5).limit(20)] == want[5:25]


def test_two_sort_fields_in_one_array_take_a_blocking_sort(client):
    """A document meets the scan at its lowest key as a whole; a sort
    orders by each field's own lowest value: two sort fields under one
    array are sorted by a SORT stage."""
    c = client.test.pair
    c.insert_many([{"_id": 1, "x": [{"a": 1, "b": 9}, {"a": 2, "b": 0}]}, {"_id": 2, "x": {"a": 1, "b": 5}}])
    c.create_index([("x.a", 1), ("x.b", 1)])
    sort = [("x.a", 1), ("x.b", 1)]
    plan = c.find().sort(sort).explain()["queryPlanner"]["winningPlan"]
    assert "SORT" in stages(plan), plan
    want = [d["_id"] for d in c.find().sort(sort).hint([("$natural", 1)])]
    assert [d["_id"] for d in c.find().sort(sort)] == want
    assert [d["_id"] for d in c.find().sort(sort).hint("x.a_1_x.b_1")] == want


def test_long_multikey_keys_give_each_document_at_its_lowest_key(client):
    """Keys past 4 KiB sharing their stored bytes are read in digest order
    and put back in key order before duplicates are dropped: a document
    comes at its lowest key."""
    c = client.test.longmk
    stem = "p" * 5000
    rows = [{"_id": i, "a": [stem + chr(90 - i), stem + chr(65 + i)]} for i in range(8)]
    rows += [{"_id": 10 + i, "a": stem + chr(72 + i)} for i in range(8)]
    c.insert_many(rows)
    c.create_index("a")
    for direction in (1, -1):
        plan = c.find().sort("a", direction).explain()["queryPlanner"]["winningPlan"]
        assert "SORT" not in stages(plan), plan
        want = [d["_id"] for d in c.find().sort("a", direction).hint([("$natural", 1)])]
        assert [d["_id"] for d in c.find().sort("a", direction)] == want
