"""Pipeline-style updates (`u: [stages]`): $set/$addFields, $unset,
$project, $replaceRoot/$replaceWith, with expressions over the document,
`let` and a statement's constants (`c`); `_id` stays as it was."""

import pytest
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure, WriteError


@pytest.fixture
def coll(client):
    client.test.p.insert_many([
        {"_id": 1, "a": 2, "b": 3, "o": {"x": 1}, "arr": [{"k": 1}, {"k": 2}]},
        {"_id": 2, "a": 10, "b": 1, "tmp": True},
    ])
    return client.test.p


def test_set_computes_from_the_document(coll):
    r = coll.update_one({"_id": 1}, [{"$set": {"sum": {"$add": ["$a", "$b"]}, "o": {"y": "$a"}, "arr.seen": True}}])
    assert (r.matched_count, r.modified_count) == (1, 1)
    assert coll.find_one({"_id": 1}) == {
        "_id": 1, "a": 2, "b": 3, "o": {"x": 1, "y": 2},
        "arr": [{"k": 1, "seen": True}, {"k": 2, "seen": True}], "sum": 5,
    }


def test_stages_run_in_order_and_each_sees_the_previous(coll):
    coll.update_many({}, [
        {"$set": {"total": {"$multiply": ["$a", "$b"]}}},
        {"$set": {"big": {"$gt": ["$total", 8]}}},
        {"$unset": ["tmp", "o"]},
        {"$addFields": {"gone": "$$REMOVE", "arr": "$$REMOVE"}},
    ])
    assert list(coll.find().sort("_id", 1)) == [
        {"_id": 1, "a": 2, "b": 3, "total": 6, "big": False},
        {"_id": 2, "a": 10, "b": 1, "total": 10, "big": True},
    ]


def test_project_and_replace_keep_the_id(coll):
    coll.update_one({"_id": 1}, [{"$project": {"a": 1, "twice": {"$multiply": ["$a", 2]}}}])
    assert coll.find_one({"_id": 1}) == {"_id": 1, "a": 2, "twice": 4}
    coll.update_one({"_id": 2}, [{"$replaceWith": {"n": "$a"}}])
    assert coll.find_one({"_id": 2}) == {"_id": 2, "n": 10}
    coll.update_one({"_id": 2}, [{"$replaceRoot": {"newRoot": {"$mergeObjects": ["$$ROOT", {"m": 1}]}}}])
    assert coll.find_one({"_id": 2}) == {"_id": 2, "n": 10, "m": 1}


def test_an_unchanged_document_is_matched_not_modified(coll):
    r = coll.update_one({"_id": 1}, [{"$set": {"a": "$a"}}])
    assert (r.matched_count, r.modified_count) == (1, 0)


def test_upsert_and_find_one_and_update(coll):
    r = coll.update_one({"_id": 7, "k": "v"}, [{"$set": {"n": {"$concat": ["$k", "!"]}}}], upsert=True)
    assert r.upserted_id == 7
    assert coll.find_one({"_id": 7}) == {"_id": 7, "k": "v", "n": "v!"}
    doc = coll.find_one_and_update({"_id": 2}, [{"$set": {"a": {"$subtract": ["$a", 1]}}}],
                                   return_document=ReturnDocument.AFTER)
    assert doc["a"] == 9


def test_let_and_constants_are_variables(coll):
    coll.update_one({"$expr": {"$eq": ["$_id", "$$id"]}}, [{"$set": {"v": "$$val"}}], let={"id": 1, "val": "L"})
    assert coll.find_one({"_id": 1})["v"] == "L"
    r = coll.database.command({"update": "p", "updates": [
        {"q": {"_id": 2}, "u": [{"$set": {"v": "$$c1"}}], "c": {"c1": "C"}}]})
    assert r["nModified"] == 1 and coll.find_one({"_id": 2})["v"] == "C"


@pytest.mark.parametrize("update, code", [
    ([{"$set": {"_id": 5}}], 66),
    ([{"$replaceWith": {"_id": 9}}], 66),
    ([{"$group": {"_id": None}}], 72),
    ([{"$set": {"x": {"$frob": 1}}}], 168),
    ([{"$set": {"x": "$$nope"}}], 17276),
    ([{"$replaceWith": "$a"}], 40228),
    ([{"$set": {"x": {"$add": ["$a", "text"]}}}], 16554),
    ([{"$project": {"a": 1, "b": 0}}], 31254),
    (["$set"], 14),
])
def test_bad_pipelines_fail_the_statement_and_change_nothing(coll, update, code):
    before = list(coll.find().sort("_id", 1))
    with pytest.raises((WriteError, OperationFailure)) as e:
        coll.update_one({"_id": 1}, update)
    assert e.value.code == code, e.value.details
    assert list(coll.find().sort("_id", 1)) == before


def test_array_filters_are_refused_with_a_pipeline(coll):
    with pytest.raises((WriteError, OperationFailure)) as e:
        coll.update_one({"_id": 1}, [{"$set": {"a": 1}}], array_filters=[{"x.k": 1}])
    assert e.value.code == 9
