"""Differential test of index plans: random documents (scalars of mixed
types, arrays, nested arrays of documents, missing fields, null) and
random filters; every plan the planner can take — each index forced with
a hint, `$natural`, and the planner's own choice — returns the same
documents as the collection scan, before and after random updates and
deletes. The collection scan's matcher is itself checked against MongoDB's
answers by the CRUD suites.

Knobs: ARBORDB_INDEX_SEED (default 7), ARBORDB_INDEX_FILTERS (default 150)."""

import os
import random
import re

from pymongo.errors import WriteError

SEED = int(os.environ.get("ARBORDB_INDEX_SEED", "7"))
FILTERS = int(os.environ.get("ARBORDB_INDEX_FILTERS", "150"))

SCALARS = [0, 1, 2, 3, -1, 2.5, 1.0, float("nan"), "a", "b", "ab", "", True, False, None]
PATHS = ["a", "b", "c.x", "a.0", "c.0.x", "c"]
INDEXES = [[("a", 1)], [("a", -1), ("b", 1)], [("c.x", 1)], [("b", 1), ("c.x", -1)], [("a.0", 1)], [("c.0.x", -1)]]


def value(rng, depth=0):
    r = rng.random()
    if r < 0.55 or depth > 1:
        return rng.choice(SCALARS)
    if r < 0.8:
        return [value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {"x": value(rng, depth + 1)}


def document(rng, i):
    d = {"_id": i}
    for f in ["a", "b"]:
        if rng.random() < 0.85:
            d[f] = value(rng)
    r = rng.random()
    if r < 0.4:
        d["c"] = {"x": value(rng)}
    elif r < 0.7:
        d["c"] = [{"x": value(rng)} for _ in range(rng.randrange(0, 3))] + ([rng.choice(SCALARS)] if rng.random() < 0.3 else [])
    return d


def leaf(rng):
    path = rng.choice(PATHS)
    r = rng.random()
    v = rng.choice([s for s in SCALARS if s is not None])
    if r < 0.25:
        return {path: v}
    if r < 0.75:
        return {path: {rng.choice(["$gt", "$gte", "$lt", "$lte"]): v}}
    if r < 0.85:
        return {path: {"$in": rng.sample([s for s in SCALARS if s is not None], 3)}}
    return {path: rng.choice(OTHER_CONDITIONS + [{"$ne": v}, {"$nin": [v, rng.choice(SCALARS)]}])}


# Conditions with bounds of their own: negations, null and missing,
# regexes, arrays, `$elemMatch` (value and object form), `$type`.
OTHER_CONDITIONS = [
    {"$exists": True},
    {"$exists": False},
    None,
    {"$ne": None},
    {"$in": [None, 1]},
    re.compile("^a"),
    re.compile("^a", re.IGNORECASE),
    re.compile("b"),
    {"$in": [re.compile("^a"), 2]},
    [],
    [1, 2],
    {"$elemMatch": {"$gte": 1}},
    {"$elemMatch": {"$gt": 0, "$lt": 3}},
    {"$elemMatch": {"x": {"$gte": 1}}},
    {"$elemMatch": {"x": None}},
    {"$type": "number"},
    {"$type": "string"},
    {"$type": ["bool", "null"]},
    {"$type": "array"},
    {"$type": "object"},
    {"$type": "double"},
]


def a_filter(rng):
    leaves = [leaf(rng) for _ in range(rng.randrange(1, 4))]
    # An `$or` of leaves (an OR of index scans when each has one).
    if rng.random() < 0.25:
        leaves[0] = {"$or": [leaf(rng) for _ in range(rng.randrange(2, 4))]}
    return leaves[0] if len(leaves) == 1 else {"$and": leaves}


def ids(coll, flt, hint=None):
    cur = coll.find(flt, {"_id": 1})
    if hint is not None:
        cur = cur.hint(hint)
    return sorted(d["_id"] for d in cur)


def projected(coll, flt, projection, hint=None):
    """The projected documents, in a stable order (an index may cover)."""
    cur = coll.find(flt, projection)
    if hint is not None:
        cur = cur.hint(hint)
    return sorted(repr(d) for d in cur)


def check_plans(coll, rng, n):
    names = [i["name"] for i in coll.list_indexes() if i["name"] != "_id_"]
    assert len(names) == len(INDEXES)
    or_plans = 0
    for _ in range(n):
        flt = a_filter(rng)
        want = ids(coll, flt, [("$natural", 1)])
        assert ids(coll, flt) == want, flt
        if "$or" in str(flt):
            plan = coll.database.command("explain", {"find": coll.name, "filter": flt}, verbosity="queryPlanner")
            or_plans += "'OR'" in str(plan["queryPlanner"]["winningPlan"])
        for name in names:
            assert ids(coll, flt, name) == want, (flt, name)
        # Projections an index may cover (its fields only, no _id).
        for projection in [{"_id": 0, "a": 1}, {"_id": 0, "a": 1, "b": 1}, {"_id": 0, "c.x": 1}, {"_id": 0, "a.0": 1}]:
            want = projected(coll, flt, projection, [("$natural", 1)])
            assert projected(coll, flt, projection) == want, (flt, projection)
            for name in names:
                assert projected(coll, flt, projection, name) == want, (flt, projection, name)
    return or_plans


def test_every_index_plan_answers_as_the_collection_scan(client):
    rng = random.Random(SEED)
    coll = client.test.diff
    for keys in INDEXES:
        coll.create_index(keys)
    stored = 0
    for i in range(600):
        try:
            coll.insert_one(document(rng, i))
            stored += 1
        except WriteError as e:
            assert e.code == 171  # parallel arrays in a compound index
    assert stored > 300
    assert check_plans(coll, rng, FILTERS) > FILTERS // 50, "some filters were read as an OR of index scans"
    # Random writes, then again.
    for _ in range(300):
        i = rng.randrange(600)
        r = rng.random()
        try:
            if r < 0.4:
                coll.update_one({"_id": i}, {"$set": {rng.choice(["a", "b", "c.x"]): value(rng)}})
            elif r < 0.6:
                coll.update_many({"a": {"$gte": rng.choice([0, 1, 2])}}, {"$inc": {"n": 1}})
            elif r < 0.8:
                coll.delete_one({"_id": i})
            else:
                coll.replace_one({"_id": i}, document(rng, i), upsert=True)
        except WriteError as e:
            assert e.code in (171, 2, 28), e  # parallel arrays; a path through a scalar
    check_plans(coll, rng, FILTERS)


def test_forced_index_intersections_answer_as_the_collection_scan(client):
    """With mongod's `internalQueryForceIntersectionPlans` an index
    intersection (AND_SORTED of point scans) wins whenever the planner
    considers one: over the random documents (multikey and nested paths
    included), each such read returns what the collection scan does, and
    counts, distincts and writes through it too."""
    rng = random.Random(SEED + 3)
    coll = client.test.ixisect
    for keys in [[("a", 1)], [("b", 1)], [("c.x", 1)], [("a", 1), ("b", -1)]]:
        coll.create_index(keys)
    for i in range(500):
        try:
            coll.insert_one(document(rng, i))
        except WriteError as e:
            assert e.code == 171
    points = [s for s in SCALARS if s is not None] + [[1, 2], []]
    client.admin.command("setParameter", 1, internalQueryForceIntersectionPlans=True)
    try:
        intersected = 0
        for _ in range(FILTERS):
            paths = rng.sample(["a", "b", "c.x"], rng.randrange(2, 4))
            flt = {p: rng.choice(points) for p in paths}
            if rng.random() < 0.3:
                flt["$and"] = [leaf(rng)]
            want = ids(coll, flt, [("$natural", 1)])
            assert ids(coll, flt) == want, flt
            assert coll.count_documents(flt) == len(want), flt
            plan = client.test.command("explain", {"find": "ixisect", "filter": flt})
            intersected += "AND_SORTED" in str(plan["queryPlanner"]["winningPlan"])
        # (A shape planned before with an array value, which no point
        # bounds, may answer from the plan cache by one index.)
        assert intersected > FILTERS // 4, intersected
        # A write through an intersection changes each document once.
        flt = {"a": 1, "b": 2}
        want = ids(coll, flt, [("$natural", 1)])
        assert coll.update_many(flt, {"$inc": {"n": 1}}).matched_count == len(want)
        assert ids(coll, {"n": 1}) == want
    finally:
        client.admin.command("setParameter", 1, internalQueryForceIntersectionPlans=False)


def test_an_update_through_an_index_changes_each_document_once(client):
    """The Halloween problem: an update that moves keys ahead of the
    index scan it runs on must not meet the same document again."""
    coll = client.test.halloween
    coll.insert_many([{"_id": i, "a": i} for i in range(1000)])
    coll.create_index("a")
    r = coll.update_many({"a": {"$gte": 0}}, {"$inc": {"a": 1000}})
    assert (r.matched_count, r.modified_count) == (1000, 1000)
    assert sorted(d["a"] for d in coll.find()) == list(range(1000, 2000))
    plan = client.test.command("explain", {"find": "halloween", "filter": {"a": {"$gte": 0}}})
    assert plan["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN"


def test_covered_reads_answer_as_the_collection_scan(client):
    """Scalar fields only (missing, null and mixed types included), so the
    compound index stays non-multikey and covers projections of its
    fields: a missing field stays missing, not null."""
    rng = random.Random(SEED + 1)
    coll = client.test.covered
    docs = []
    for i in range(400):
        d = {"_id": i}
        for f in ["a", "b"]:
            if rng.random() < 0.8:
                d[f] = rng.choice(SCALARS)
        docs.append(d)
    coll.insert_many(docs)
    coll.create_index([("a", 1), ("b", -1)])
    covered_seen = 0
    for _ in range(FILTERS):
        flt = leaf(rng)
        if "a" not in flt:
            flt = {"a": flt.popitem()[1]}
        for projection in [{"_id": 0, "a": 1}, {"_id": 0, "a": 1, "b": 1}, {"_id": 0, "b": 1}]:
            want = projected(coll, flt, projection, [("$natural", 1)])
            assert projected(coll, flt, projection) == want, (flt, projection)
            assert projected(coll, flt, projection, "a_1_b_-1") == want, (flt, projection)
        plan = client.test.command("explain", {"find": "covered", "filter": flt, "projection": {"_id": 0, "a": 1, "b": 1}})
        covered_seen += plan["queryPlanner"]["winningPlan"]["stage"] == "PROJECTION_COVERED"
    assert covered_seen > FILTERS // 4, covered_seen


def test_index_sorts_answer_as_the_blocking_sort(client):
    """An index that gives a sort (forwards or backwards, after fields a
    filter pins to one value) returns what the blocking sort of a
    collection scan returns, with skip and limit. The `(x, y)` pairs are
    unique, so neither order has ties to break."""
    rng = random.Random(SEED)
    coll = client.test.sorted
    coll.create_index([("x", 1), ("y", -1)])
    docs = []
    for i in range(400):
        d = {"_id": i, "y": i}
        if rng.random() < 0.9:
            d["x"] = rng.choice([s for s in SCALARS if not (isinstance(s, float) and s != s)])
        docs.append(d)
    coll.insert_many(docs)
    sorts = [[("x", 1), ("y", -1)], [("x", -1), ("y", 1)]]
    filters = [{}, {"x": {"$gte": 1}}, {"x": {"$in": ["a", 2, None]}}, {"y": {"$lt": 100}}, {"x": {"$ne": 2}}]
    used_index = 0
    for _ in range(FILTERS // 3):
        flt = rng.choice(filters)
        order = rng.choice(sorts)
        if rng.random() < 0.3:
            flt, order = {"x": rng.choice([1, "a", None, True])}, [("y", rng.choice([1, -1]))]
        skip, limit = rng.choice([0, 0, 3]), rng.choice([0, 1, 7])
        want = [d["_id"] for d in coll.find(flt).sort(order).skip(skip).limit(limit).hint([("$natural", 1)])]
        got = [d["_id"] for d in coll.find(flt).sort(order).skip(skip).limit(limit)]
        assert got == want, (flt, order, skip, limit)
        plan = client.test.command("explain", {"find": "sorted", "filter": flt, "sort": dict(order)})
        if "SORT" not in str(plan["queryPlanner"]["winningPlan"]):
            used_index += 1
    assert used_index > FILTERS // 6, "the index gave most of these orders"


def test_parallel_array_and_write_optimized_index_plans_answer_as_the_collection_scan(client):
    """The same random documents and filters over the same key patterns,
    the compound ones taking parallel arrays (so no document is refused)
    and every index write-optimized: each plan returns what the collection
    scan does, before and after random writes."""
    rng = random.Random(SEED + 22)
    coll = client.test.diffparallel
    wo = {"arbordb": {"format": "write-optimized"}}
    for keys in INDEXES:
        coll.create_index(keys, storageEngine=wo, **({"parallelArrays": True} if len(keys) > 1 else {}))
    for i in range(600):
        coll.insert_one(document(rng, i))
    check_plans(coll, rng, FILTERS // 2)
    for _ in range(200):
        i = rng.randrange(600)
        try:
            if rng.random() < 0.5:
                coll.update_one({"_id": i}, {"$set": {rng.choice(["a", "b", "c.x"]): value(rng)}})
            else:
                coll.replace_one({"_id": i}, document(rng, i), upsert=True)
        except WriteError as e:
            assert e.code in (2, 28), e  # a path through a scalar
    check_plans(coll, rng, FILTERS // 2)
