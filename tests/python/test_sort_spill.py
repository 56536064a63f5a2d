"""A blocking sort over its memory limit spills sorted runs to disk and
merges them (allowDiskUse, on by default as in MongoDB 6.0+), or fails with
292 when disk use is refused. The limit is MongoDB's server parameter
internalQueryMaxBlockingSortMemoryUsageBytes, lowered here so a small
collection spills."""

import random

import pymongo
import pytest
from pymongo.errors import OperationFailure

DEFAULT_LIMIT = 100 * 1024 * 1024
SMALL_LIMIT = 64 * 1024


def spills(client):
    return client.admin.command("serverStatus")["metrics"]["query"]["sort"]["spillToDisk"]


def set_limit(client, n):
    return client.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=n)["was"]


@pytest.fixture
def coll(client):
    rng = random.Random(7)
    docs = [{"_id": i, "k": rng.randrange(500), "g": i % 7, "arr": [i % 11, i % 13, i % 17],
             "pad": "x" * rng.randrange(50, 300)} for i in range(3000)]
    rng.shuffle(docs)
    client.test.c.insert_many(docs)
    return client.test.c


QUERIES = [
    ({}, {"sort": [("k", 1), ("_id", 1)]}),
    ({}, {"sort": [("g", -1), ("k", 1), ("_id", -1)], "skip": 13, "limit": 1500}),
    ({"k": {"$gte": 100}}, {"sort": [("pad", 1), ("_id", 1)], "limit": 2500, "batch_size": 40}),
    ({"arr": {"$gte": 12}}, {"sort": [("k", -1), ("_id", 1)], "projection": {"arr.$": 1, "k": 1}}),
    ({}, {"sort": [("arr", 1), ("_id", 1)], "skip": 2990}),
]


@pytest.mark.parametrize("filter, options", QUERIES)
def test_a_spilled_sort_answers_as_the_in_memory_one(client, coll, filter, options):
    expected = list(coll.find(filter, **options))
    assert spills(client) == 0
    assert set_limit(client, SMALL_LIMIT) == DEFAULT_LIMIT
    got = list(coll.find(filter, **options))
    assert spills(client) > 1
    assert got == expected and len(got) > 0


def test_refusing_disk_use_fails_with_292_and_the_parameter_can_refuse_it_by_default(client, coll):
    set_limit(client, SMALL_LIMIT)
    with pytest.raises(OperationFailure) as e:
        list(coll.find({}, sort=[("k", 1)], allow_disk_use=False))
    assert e.value.code == 292 and e.value.details["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed"
    assert e.value.details["errmsg"] == (
        "Executor error during find command :: caused by :: Sort exceeded memory limit of 65536 bytes, "
        "but did not opt in to external sorting."
    )
    was = client.admin.command("setParameter", 1, allowDiskUseByDefault=False)["was"]
    assert was is True
    with pytest.raises(OperationFailure) as e:
        list(coll.find({}, sort=[("k", 1)]))
    assert e.value.code == 292
    # Asking for it still works.
    assert len(list(coll.find({}, sort=[("k", 1)], allow_disk_use=True))) == 3000
    assert spills(client) > 0


def test_a_spilled_cursor_leaves_no_files_and_can_be_killed(server, client, coll):
    set_limit(client, SMALL_LIMIT)
    cursor = coll.find({}, sort=[("k", 1)], batch_size=10)
    first = [next(cursor) for _ in range(25)]
    assert [d["k"] for d in first] == sorted(d["k"] for d in first)
    tmp = server.dbpath / "_tmp"
    assert tmp.is_dir() and list(tmp.iterdir()) == []  # runs are unlinked files
    cursor.close()
    with pytest.raises(OperationFailure) as e:
        client.test.command("getMore", cursor.cursor_id or 1, collection="c")
    assert e.value.code == 43


def test_sort_parameters_are_reported_and_checked(client):
    got = client.admin.command("getParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=1,
                               allowDiskUseByDefault=1)
    assert got["internalQueryMaxBlockingSortMemoryUsageBytes"] == DEFAULT_LIMIT
    assert got["allowDiskUseByDefault"] is True
    for bad in [0, -5, "big", 2**40]:
        with pytest.raises(OperationFailure) as e:
            set_limit(client, bad)
        assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        client.admin.command("setParameter", 1, allowDiskUseByDefault=False, noSuchParameter=1)
    assert e.value.code == 40415
    got = client.admin.command("getParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=1,
                               allowDiskUseByDefault=1)
    assert (got["internalQueryMaxBlockingSortMemoryUsageBytes"], got["allowDiskUseByDefault"]) == (DEFAULT_LIMIT, True)


def test_aggregate_sort_and_group_keep_to_the_limits_without_allow_disk_use(client):
    c = client.test.aggmem
    c.insert_many([{"_id": i, "k": i % 3, "pad": "x" * 200} for i in range(200)])
    client.admin.command({"setParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": 10_000,
                          "internalDocumentSourceGroupMaxMemoryBytes": 10_000})
    try:
        params = client.admin.command({"getParameter": 1, "internalDocumentSourceGroupMaxMemoryBytes": 1})
        assert params["internalDocumentSourceGroupMaxMemoryBytes"] == 10_000
        sort = [{"$sort": {"pad": 1, "_id": -1}}]
        push = [{"$group": {"_id": None, "all": {"$push": "$pad"}}}]
        for pipeline, message in [(sort, "Sort exceeded memory limit of 10000 bytes"),
                                  (push, "Exceeded memory limit for $group")]:
            with pytest.raises(OperationFailure) as e:
                list(c.aggregate(pipeline, allowDiskUse=False))
            assert e.value.code == 292 and e.value.details["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed"
            assert message in e.value.details["errmsg"]
        # Allowed (explicitly or by default), they run; so does a small $group.
        assert [d["_id"] for d in c.aggregate(sort, allowDiskUse=True)][:2] == [199, 198]
        assert [d["_id"] for d in c.aggregate(sort)][:2] == [199, 198]
        # A $sort then $limit holds only the top k, as mongod's: no limit hit.
        top = [{"$sort": {"pad": 1, "_id": -1}}, {"$limit": 3}]
        assert [d["_id"] for d in c.aggregate(top, allowDiskUse=False)] == [199, 198, 197]
        assert len(list(c.aggregate(push))[0]["all"]) == 200
        counts = {d["_id"]: d["n"] for d in c.aggregate([{"$group": {"_id": "$k", "n": {"$sum": 1}}}],
                                                       allowDiskUse=False)}
        assert counts == {0: 67, 1: 67, 2: 66}
        # allowDiskUseByDefault off: no allowDiskUse means none.
        client.admin.command({"setParameter": 1, "allowDiskUseByDefault": False})
        with pytest.raises(OperationFailure) as e:
            list(c.aggregate(sort))
        assert e.value.code == 292
    finally:
        client.admin.command({"setParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": 100 * 1024 * 1024,
                              "internalDocumentSourceGroupMaxMemoryBytes": 100 * 1024 * 1024,
                              "allowDiskUseByDefault": True})


def group_spills(client):
    return client.admin.command("serverStatus")["metrics"]["query"]["group"]


AGG_PIPELINES = [
    [{"$sort": {"k": 1, "_id": -1}}],
    [{"$match": {"g": {"$ne": 3}}}, {"$sort": {"pad": -1, "_id": 1}}, {"$limit": 1200}, {"$project": {"pad": 0}}],
    [{"$group": {"_id": "$k", "n": {"$sum": 1}, "ids": {"$push": "$_id"}, "first": {"$first": "$_id"},
                 "last": {"$last": "$_id"}, "avg": {"$avg": "$g"}, "max": {"$max": "$pad"}}},
     {"$sort": {"_id": 1}}],
    [{"$group": {"_id": None, "pads": {"$push": "$pad"}, "total": {"$sum": "$k"}}}],
]


@pytest.mark.parametrize("pipeline", AGG_PIPELINES)
def test_aggregate_sort_and_group_spill_with_allow_disk_use(client, coll, pipeline):
    expected = list(coll.aggregate(pipeline))
    before_sort, before_group = spills(client), group_spills(client)
    assert (before_sort, before_group["spills"]) == (0, 0)
    client.admin.command({"setParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": SMALL_LIMIT,
                          "internalDocumentSourceGroupMaxMemoryBytes": SMALL_LIMIT})
    try:
        with pytest.raises(OperationFailure) as e:
            list(coll.aggregate(pipeline, allowDiskUse=False))
        assert e.value.code == 292
        got = list(coll.aggregate(pipeline, allowDiskUse=True, batchSize=50))
        assert got == expected and len(got) > 0
        after = group_spills(client)
        if "$group" in pipeline[0]:
            assert after["spills"] > 1 and after["spilledRecords"] > 0 and after["spilledDataStorageSize"] > 0
        else:
            assert spills(client) > 1
    finally:
        client.admin.command({"setParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": DEFAULT_LIMIT,
                              "internalDocumentSourceGroupMaxMemoryBytes": DEFAULT_LIMIT})


def test_an_aggregate_cursor_produces_its_output_as_it_is_read(client):
    """The first batch comes before the pipeline has read the collection:
    an expression failing on a later document fails the getMore that
    reaches it, as in mongod (before, the whole aggregate failed)."""
    c = client.test.stream
    c.insert_many([{"_id": i, "d": 0 if i == 500 else 2} for i in range(1000)])
    pipeline = [{"$match": {"_id": {"$gte": 0}}}, {"$project": {"q": {"$divide": [10, "$d"]}}}]
    cursor = c.aggregate(pipeline, batchSize=100)
    first = [next(cursor) for _ in range(100)]
    assert first == [{"_id": i, "q": 5.0} for i in range(100)]
    with pytest.raises(OperationFailure) as e:
        list(cursor)
    assert e.value.code == 2 and "can't $divide by zero" in e.value.details["errmsg"]
    # Dropping the collection kills a cursor still reading it.
    cursor = c.aggregate([{"$match": {"d": 2}}], batchSize=10)
    assert len([next(cursor) for _ in range(10)]) == 10
    c.drop()
    with pytest.raises(OperationFailure) as e:
        list(cursor)
    assert e.value.code == 175 and e.value.details["codeName"] == "QueryPlanKilled"


def test_an_aggregate_cursor_outlives_a_coll_mod_and_keeps_its_time_limit(client):
    c = client.test.big
    c.insert_many([{"_id": i, "rare": i in (0, 149_999)} for i in range(150_000)])
    cursor = c.aggregate([{"$match": {"rare": {"$ne": None}}}], batchSize=10)
    assert len([next(cursor) for _ in range(10)]) == 10
    client.test.command("collMod", "big", validator={"rare": {"$exists": True}})
    assert len(list(cursor)) == 149_990, "a collMod does not kill the cursor"
    # maxTimeMS bounds the cursor's work across its getMores, as mongod's:
    # the first batch is the first document, the next needs a whole scan.
    reply = client.test.command("aggregate", "big", pipeline=[{"$match": {"rare": True}}],
                                cursor={"batchSize": 1}, maxTimeMS=40)
    assert reply["cursor"]["firstBatch"] == [{"_id": 0, "rare": True}]
    with pytest.raises(OperationFailure) as e:
        client.test.command("getMore", reply["cursor"]["id"], collection="big")
    assert e.value.code == 50
    with pytest.raises(OperationFailure) as e:
        client.test.command("getMore", reply["cursor"]["id"], collection="big")
    assert e.value.code == 43, "the expired cursor is gone"


@pytest.mark.parametrize("skip, limit", [(0, 1), (0, 5), (3, 7), (100, 700), (0, 2999)])
@pytest.mark.parametrize("desc", [False, True])
def test_a_sort_with_a_limit_keeps_the_best_as_a_model_says(client, coll, skip, limit, desc):
    """A blocking sort with a limit passes over a document that cannot be
    among the best without decoding it; what it returns agrees with a
    model sorting every document (in memory, and spilled)."""
    docs = list(coll.find())
    sign = -1 if desc else 1
    model = sorted(docs, key=lambda d: (sign * d["k"], d["_id"]))[skip:skip + limit]
    direction = pymongo.DESCENDING if desc else pymongo.ASCENDING
    sort = [("k", direction), ("_id", pymongo.ASCENDING)]
    assert list(coll.find(sort=sort, skip=skip, limit=limit)) == model
    projected = list(coll.find({}, {"k": 1}, sort=sort, skip=skip, limit=limit))
    assert projected == [{"_id": d["_id"], "k": d["k"]} for d in model]
    was = set_limit(client, SMALL_LIMIT)
    try:
        assert list(coll.find(sort=sort, skip=skip, limit=limit)) == model
    finally:
        set_limit(client, was)
