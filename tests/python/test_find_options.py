"""find's sort, projection, showRecordId, maxTimeMS, hint; distinct;
aggregate's $sort/$project and cursors; the $regex, $elemMatch and $bits
query operators."""

import re

import pytest
from bson import Binary, Int64
from pymongo.errors import OperationFailure


@pytest.fixture
def people(client):
    c = client.test.people
    c.insert_many(
        [
            {"_id": 1, "name": "ann", "age": 30, "tags": ["b", "z"], "addr": {"city": "Oslo", "zip": 1}},
            {"_id": 2, "name": "Bob", "age": 25, "tags": ["a"], "addr": {"city": "Rome", "zip": 2}},
            {"_id": 3, "name": "cy", "tags": [], "scores": [{"s": 5}, {"s": 9}]},
            {"_id": 4, "name": "dee", "age": 30.0, "tags": "m", "flags": 6},
        ]
    )
    return c


def ids(cursor):
    return [d["_id"] for d in cursor]


def test_sort(people):
    assert ids(people.find().sort("age", 1)) == [3, 2, 1, 4], "missing sorts as null, first"
    assert ids(people.find().sort([("age", -1), ("_id", -1)])) == [4, 1, 2, 3]
    assert ids(people.find().sort("tags", 1)) == [3, 2, 1, 4], "empty array first, then smallest element"
    assert ids(people.find().sort("tags", -1)) == [1, 4, 2, 3], "largest element descending"
    assert ids(people.find().sort("_id", -1).skip(1).limit(2)) == [3, 2]
    assert ids(people.find().sort("addr.city", -1).limit(1)) == [2]
    with pytest.raises(OperationFailure) as e:
        list(people.find().sort("age", 2))
    assert e.value.code == 15975


def test_sorted_cursor_batches(client):
    c = client.test.many
    c.insert_many([{"_id": i, "k": (i * 7) % 100} for i in range(100)])
    got = [d["k"] for d in c.find().sort("k", -1).batch_size(7)]
    assert got == sorted(((i * 7) % 100 for i in range(100)), reverse=True)


def test_projection(people):
    assert people.find_one({"_id": 1}, {"name": 1}) == {"_id": 1, "name": "ann"}
    assert people.find_one({"_id": 1}, {"name": 1, "_id": 0}) == {"name": "ann"}
    assert people.find_one({"_id": 1}, {"addr.city": 1}) == {"_id": 1, "addr": {"city": "Oslo"}}
    assert people.find_one({"_id": 1}, {"addr": 0, "tags": 0}) == {"_id": 1, "name": "ann", "age": 30}
    assert people.find_one({"_id": 3}, {"scores.s": 1, "_id": 0}) == {"scores": [{"s": 5}, {"s": 9}]}
    assert people.find_one({"_id": 3}, {"scores": {"$slice": 1}, "_id": 0, "name": 0, "tags": 0}) == {"scores": [{"s": 5}]}
    assert people.find_one({"_id": 3}, {"scores": {"$elemMatch": {"s": {"$gt": 6}}}}) == {"_id": 3, "scores": [{"s": 9}]}
    assert people.find_one({"scores.s": 9}, {"scores.$": 1}) == {"_id": 3, "scores": [{"s": 9}]}
    with pytest.raises(OperationFailure) as e:
        people.find_one({}, {"name": 1, "age": 0})
    assert e.value.code == 31254
    assert "Cannot do exclusion on field age in inclusion projection" in str(e.value)


def test_show_record_id(people):
    d = people.find_one({"_id": 2}, show_record_id=True)
    assert isinstance(d["$recordId"], int) and d["$recordId"] > 0
    raw = people.database.command("find", "people", filter={"_id": {"$gt": 0}}, showRecordId=True)
    rids = [d["$recordId"] for d in raw["cursor"]["firstBatch"]]
    assert rids == sorted(rids) and len(set(rids)) == 4


def test_max_time_ms(client):
    c = client.test.slow
    c.insert_many([{"_id": i, "pad": "x" * 1000} for i in range(20000)])
    with pytest.raises(OperationFailure) as e:
        list(c.find({"$nor": [{"pad": "y"}] * 50}).sort("pad", 1).max_time_ms(1))
    assert e.value.code == 50 and e.value.details["codeName"] == "MaxTimeMSExpired"
    with pytest.raises(OperationFailure):
        list(c.find().max_time_ms(-1))


def test_max_time_ms_bounds_a_scan_that_matches_nothing(client):
    """The deadline counts every document examined, not only those
    returned: a scan that never finds a match still stops at it."""
    c = client.test.slow
    c.insert_many([{"_id": i, "pad": "x" * 1000} for i in range(20000)])
    nothing = {"$nor": [{"pad": "y"}] * 50, "pad": "none"}
    for run in (
        lambda: list(c.find(nothing).max_time_ms(1)),
        lambda: list(c.find(nothing).sort("pad", 1).max_time_ms(1)),
        lambda: c.count_documents(nothing, maxTimeMS=1),
        lambda: c.database.command("count", "slow", query=nothing, maxTimeMS=1),
        lambda: c.distinct("pad", nothing, maxTimeMS=1),
    ):
        with pytest.raises(OperationFailure) as e:
            run()
        assert e.value.code == 50, e.value.details
    assert list(c.find(nothing)) == []


def test_hint_and_collation(people):
    assert len(list(people.find().hint("_id_"))) == 4
    assert len(list(people.find().hint([("$natural", 1)]))) == 4
    with pytest.raises(OperationFailure) as e:
        list(people.find().hint("nope_1"))
    assert e.value.code == 2 and "hint provided does not correspond to an existing index" in str(e.value)


def test_a_write_statement_hinting_no_index_fails_alone(client):
    """A hint naming no index is a planner error of its statement: the
    other statements of the command run (ordered: false), as in mongod."""
    db = client.test
    db.h.insert_many([{"_id": i} for i in range(4)])
    for command, statements in [
        ("delete", [{"q": {"_id": 0}, "limit": 1}, {"q": {"_id": 1}, "limit": 1, "hint": "nope_1"},
                    {"q": {"_id": 2}, "limit": 1, "hint": "_id_"}]),
        ("update", [{"q": {"_id": 3}, "u": {"$set": {"x": 1}}}, {"q": {}, "u": {"$set": {"y": 1}}, "hint": "nope_1"}]),
    ]:
        key = "deletes" if command == "delete" else "updates"
        reply = db.command(command, "h", **{key: statements}, ordered=False)
        assert reply["n"] == (2 if command == "delete" else 1), reply
        [error] = reply["writeErrors"]
        assert error["index"] == 1 and error["code"] == 2, error
        assert "hint provided does not correspond to an existing index" in error["errmsg"]
    assert list(db.h.find()) == [{"_id": 1}, {"_id": 3, "x": 1}]


def test_distinct(people):
    assert people.distinct("age") == [25, 30], "30 and 30.0 are one value"
    assert people.distinct("tags") == ["a", "b", "m", "z"]
    assert people.distinct("addr.city", {"age": {"$gte": 30}}) == ["Oslo"]
    assert people.distinct("nothing") == []
    with pytest.raises(OperationFailure) as e:
        people.database.command("distinct", "people", key="")
    assert e.value.code == 40352


def test_aggregate_sort_project_and_cursor(client):
    c = client.test.agg
    c.insert_many([{"_id": i, "g": i % 3, "v": i} for i in range(300)])
    out = list(c.aggregate([{"$match": {"g": 1}}, {"$sort": {"v": -1}}, {"$project": {"v": 1, "_id": 0}}], batchSize=10))
    assert [d["v"] for d in out] == list(range(298, 0, -3))
    assert list(c.aggregate([{"$sort": {"_id": 1}}, {"$limit": 1}, {"$unset": "g"}])) == [{"_id": 0, "v": 0}]
    raw = client.test.command("aggregate", "agg", pipeline=[], cursor={"batchSize": 5})
    assert len(raw["cursor"]["firstBatch"]) == 5 and raw["cursor"]["id"] != 0


def test_regex(people):
    assert ids(people.find({"name": {"$regex": "^b", "$options": "i"}})) == [2]
    assert ids(people.find({"name": re.compile("^[a-c]")})) == [1, 3]
    assert ids(people.find({"name": {"$in": [re.compile("e$"), "cy"]}})) == [3, 4]
    assert ids(people.find({"name": {"$not": re.compile("^[ab]")}})) == [2, 3, 4]
    assert ids(people.find({"name": {"$regex": "(.)\\1"}})) == [1, 4], "backreferences work (ann, dee)"
    with pytest.raises(OperationFailure) as e:
        list(people.find({"name": {"$regex": "a", "$options": "q"}}))
    assert e.value.code == 51108
    with pytest.raises(OperationFailure) as e:
        list(people.find({"name": {"$regex": "("}}))
    assert e.value.code == 51091


def test_elem_match_and_bits(people):
    assert ids(people.find({"scores": {"$elemMatch": {"s": {"$gt": 6, "$lt": 10}}}})) == [3]
    assert ids(people.find({"scores": {"$elemMatch": {"s": {"$gt": 9}}}})) == []
    assert ids(people.find({"flags": {"$bitsAllSet": [1, 2]}})) == [4]
    assert ids(people.find({"flags": {"$bitsAnyClear": 1}})) == [4]
    assert ids(people.find({"flags": {"$bitsAllClear": Binary(b"\x01")}})) == [4]
    assert ids(people.find({"flags": {"$bitsAnySet": Int64(8)}})) == []
    with pytest.raises(OperationFailure) as e:
        list(people.find({"$where": "this.a == 1"}))
    assert e.value.code == 2 and "no globalScriptEngine in $where parsing" in str(e.value)


@pytest.mark.parametrize("size,message", [
    (float("nan"), "Failed to parse $size. Expected an integer, but found NaN in: $size: nan.0"),
    (float("inf"), "Failed to parse $size. Cannot represent as a 64-bit integer: $size: inf.0"),
    (2.1, "Failed to parse $size. Expected an integer: $size: 2.1"),
    (-1, "Failed to parse $size. Expected a non-negative number in: $size: -1"),
    ({"$gt": 1}, "Failed to parse $size. Expected a number in: $size: { $gt: 1 }"),
])
def test_size_argument_errors_as_mongod(client, size, message):
    with pytest.raises(OperationFailure) as e:
        list(client.test.s.find({"v": {"$size": size}}))
    assert e.value.code == 2 and e.value.details["errmsg"] == message


def test_skip_and_limit_of_nan_or_infinity_as_mongod(client):
    client.test.s.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        list(client.test.s.aggregate([{"$limit": float("nan")}]))
    assert e.value.code == 5107201
    assert e.value.details["errmsg"] == \
        "invalid argument to $limit stage: Expected an integer, but found NaN in: $limit: nan.0"
    with pytest.raises(OperationFailure) as e:
        list(client.test.s.aggregate([{"$skip": float("-inf")}]))
    assert e.value.details["errmsg"] == \
        "invalid argument to $skip stage: Cannot represent as a 64-bit integer: $skip: -inf.0"
    assert list(client.test.s.aggregate([{"$skip": 0.0}, {"$limit": 2.0}])) == [{"_id": 1}]
