"""Aggregation stages that write ($out, $merge) and database-level
aggregates ($documents)."""

import signal

import pytest
from pymongo.errors import OperationFailure

from conftest import Server


@pytest.fixture
def src(client):
    client.test.src.insert_many([{"_id": i, "x": i * 10, "g": i % 2} for i in range(1, 6)])
    return client.test.src


def test_out_replaces_the_target_and_keeps_its_options(client, src):
    client.test.create_collection("target", validator={"x": {"$type": "int"}})
    client.test.target.insert_one({"_id": 99, "x": 1})
    r = list(src.aggregate([{"$match": {"g": 1}}, {"$set": {"x": {"$add": ["$x", 1]}}}, {"$out": "target"}]))
    assert r == []
    assert list(client.test.target.find().sort("_id", 1)) == [{"_id": 1, "x": 11, "g": 1}, {"_id": 3, "x": 31, "g": 1},
                                                               {"_id": 5, "x": 51, "g": 1}]
    assert client.test.target.options() == {"validator": {"x": {"$type": "int"}}}
    # Into a new collection of another database, named as {db, coll}.
    list(src.aggregate([{"$group": {"_id": "$g", "n": {"$sum": 1}}}, {"$out": {"db": "other", "coll": "counts"}}]))
    assert sorted((d["_id"], d["n"]) for d in client.other.counts.find()) == [(0, 2), (1, 3)]
    assert not [n for n in client.test.list_collection_names() if n.startswith("tmp.")]


def test_a_failed_out_leaves_the_target_as_it_was(client, src):
    client.test.keep.insert_one({"_id": "old"})
    with pytest.raises(OperationFailure) as e:
        list(src.aggregate([{"$project": {"_id": "$g"}}, {"$out": "keep"}]))
    assert e.value.code == 11000
    assert list(client.test.keep.find()) == [{"_id": "old"}]
    assert not [n for n in client.test.list_collection_names() if n.startswith("tmp.")]


@pytest.mark.parametrize("pipeline, code", [
    ([{"$out": "a"}, {"$match": {}}], 40601),
    ([{"$merge": {"into": "a", "on": "x"}}], 51183),
    ([{"$merge": {"into": "a", "whenMatched": "sometimes"}}], 2),
    ([{"$out": 5}], 16990),
])
def test_bad_write_stages_are_refused(src, pipeline, code):
    with pytest.raises(OperationFailure) as e:
        list(src.aggregate(pipeline))
    assert e.value.code == code, e.value.details


def test_out_refuses_capped_collections_and_views(client, src):
    client.test.create_collection("capped", capped=True, size=4096)
    client.test.create_collection("view", viewOn="src", pipeline=[])
    for target, code in [("capped", 17152), ("view", 166)]:
        with pytest.raises(OperationFailure) as e:
            list(src.aggregate([{"$out": target}]))
        assert e.value.code == code


def test_merge_modes(client, src):
    t = client.test.m
    t.insert_many([{"_id": 1, "x": 0, "keep": True}, {"_id": 2, "x": 0}])
    list(src.aggregate([{"$match": {"_id": {"$lte": 3}}}, {"$project": {"x": 1}}, {"$merge": "m"}]))
    assert list(t.find().sort("_id", 1)) == [{"_id": 1, "x": 10, "keep": True}, {"_id": 2, "x": 20},
                                              {"_id": 3, "x": 30}]
    list(src.aggregate([{"$match": {"_id": 1}}, {"$merge": {"into": "m", "whenMatched": "replace"}}]))
    assert t.find_one({"_id": 1}) == {"_id": 1, "x": 10, "g": 1}
    list(src.aggregate([{"$match": {"_id": {"$in": [2, 4]}}},
                        {"$merge": {"into": "m", "whenMatched": "keepExisting", "whenNotMatched": "discard"}}]))
    assert t.count_documents({}) == 3 and t.find_one({"_id": 2}) == {"_id": 2, "x": 20}
    list(src.aggregate([{"$match": {"_id": 3}},
                        {"$merge": {"into": "m", "whenMatched": [{"$set": {"x": {"$add": ["$x", "$$new.x"]}}}]}}]))
    assert t.find_one({"_id": 3})["x"] == 60
    with pytest.raises(OperationFailure) as e:
        list(src.aggregate([{"$match": {"_id": 1}}, {"$merge": {"into": "m", "whenMatched": "fail"}}]))
    assert e.value.code == 11000 and e.value.details["keyValue"] == {"_id": 1}
    with pytest.raises(OperationFailure) as e:
        list(src.aggregate([{"$match": {"_id": 5}}, {"$merge": {"into": "m", "whenNotMatched": "fail"}}]))
    assert e.value.code == 13113


def test_database_level_aggregate_starts_from_documents(client):
    out = list(client.test.aggregate([{"$documents": [{"a": 1}, {"a": 2}, {"a": 3}]}, {"$match": {"a": {"$gte": 2}}},
                                      {"$set": {"b": {"$multiply": ["$a", 2]}}}]))
    assert out == [{"a": 2, "b": 4}, {"a": 3, "b": 6}]
    list(client.test.aggregate([{"$documents": [{"_id": 1}, {"_id": 2}]}, {"$out": "from_docs"}]))
    assert client.test.from_docs.count_documents({}) == 2
    with pytest.raises(OperationFailure) as e:
        list(client.test.aggregate([{"$match": {}}]))
    assert e.value.code == 73
    with pytest.raises(OperationFailure) as e:
        client.test.command({"aggregate": 2, "pipeline": [], "cursor": {}})
    assert e.value.code == 9


def test_out_results_survive_kill_9(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.src.insert_many([{"_id": i} for i in range(100)])
        list(c.test.src.aggregate([{"$match": {"_id": {"$lt": 40}}}, {"$out": "dst"}]))
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            assert c.test.dst.count_documents({}) == 40
            assert not [n for n in c.test.list_collection_names() if n.startswith("tmp.")]
    finally:
        assert s.stop() == 0


def test_a_left_over_out_temporary_collection_is_dropped_at_start(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        # What a $out cut short by a crash leaves behind.
        c.test["tmp.agg_out.0000000000000001"].insert_one({"_id": 1})
        c.test.kept.insert_one({"_id": 1})
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            assert c.test.list_collection_names() == ["kept"]
    finally:
        assert s.stop() == 0
