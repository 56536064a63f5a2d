"""`$unwind` and `$isNumber`, and the first part of the acceptance
scenario `aggregation-arguments.md` (an array is an argument list)."""

import pytest
from pymongo.errors import OperationFailure


def project(db, expr):
    return list(db.dual.aggregate([{"$project": {"_id": 0, "r": expr}}]))


def test_scenario_an_array_is_an_argument_list(client):
    db = client.test
    db.dual.insert_one({"dummy": "x"})
    assert project(db, {"$isNumber": [42]}) == [{"r": True}]
    assert project(db, {"$isNumber": 42}) == [{"r": True}]
    assert project(db, {"$isArray": [42]}) == [{"r": False}]
    assert project(db, {"$isArray": [[42]]}) == [{"r": True}]
    assert project(db, {"$isArray": {"$literal": [42]}}) == [{"r": True}]
    assert project(db, {"$isNumber": {"$literal": [42]}}) == [{"r": False}]
    with pytest.raises(OperationFailure) as e:
        project(db, {"$isArray": [42, 42]})
    assert e.value.code == 16020
    assert e.value.details["errmsg"] == "Expression $isArray takes exactly 1 arguments. 2 were passed in."
    db.arrays.insert_one({"field": [42]})
    out = list(db.arrays.aggregate([{"$project": {"_id": 0, "field": 1,
                                                  "n": {"$isNumber": "$field"}, "a": {"$isArray": "$field"}}}]))
    assert out == [{"field": [42], "n": False, "a": True}]


def test_is_number_over_every_numeric_type(client):
    from bson import Decimal128, Int64
    db = client.test
    db.nums.insert_many([{"_id": i, "v": v} for i, v in
                         enumerate([1, Int64(2), 2.5, Decimal128("3.1"), "4", None, [1], {"a": 1}])])
    out = [d["n"] for d in db.nums.aggregate([{"$sort": {"_id": 1}}, {"$project": {"n": {"$isNumber": "$v"}}}])]
    assert out == [True, True, True, True, False, False, False, False]
    assert [d["n"] for d in db.nums.aggregate([{"$match": {"_id": 0}}, {"$project": {"n": {"$isNumber": "$nope"}}}])] == [False]


@pytest.fixture
def inventory(client):
    client.test.inv.insert_many([
        {"_id": 1, "item": "ABC", "sizes": ["S", "M", "L"]},
        {"_id": 2, "item": "EFG", "sizes": []},
        {"_id": 3, "item": "IJK", "sizes": "M"},
        {"_id": 4, "item": "LMN"},
        {"_id": 5, "item": "XYZ", "sizes": None},
        {"_id": 6, "item": "NST", "spec": {"colors": ["red", "blue"]}},
    ])
    return client.test.inv


def test_unwind_gives_one_document_per_element(inventory):
    out = list(inventory.aggregate([{"$unwind": "$sizes"}, {"$sort": {"_id": 1}}]))
    assert out == [
        {"_id": 1, "item": "ABC", "sizes": "S"},
        {"_id": 1, "item": "ABC", "sizes": "M"},
        {"_id": 1, "item": "ABC", "sizes": "L"},
        {"_id": 3, "item": "IJK", "sizes": "M"},
    ]
    # Dotted paths through embedded documents; the field keeps its place.
    out = list(inventory.aggregate([{"$unwind": {"path": "$spec.colors", "includeArrayIndex": "i"}}]))
    assert out == [
        {"_id": 6, "item": "NST", "spec": {"colors": "red"}, "i": 0},
        {"_id": 6, "item": "NST", "spec": {"colors": "blue"}, "i": 1},
    ]
    assert [type(d["i"]).__name__ for d in out] == ["Int64", "Int64"], "NumberLong, as mongod"


def test_preserve_null_and_empty_arrays_and_the_index(inventory):
    out = list(inventory.aggregate([
        {"$match": {"_id": {"$lte": 5}}},
        {"$unwind": {"path": "$sizes", "preserveNullAndEmptyArrays": True, "includeArrayIndex": "at"}},
        {"$sort": {"_id": 1, "at": 1}},
    ]))
    assert out == [
        {"_id": 1, "item": "ABC", "sizes": "S", "at": 0},
        {"_id": 1, "item": "ABC", "sizes": "M", "at": 1},
        {"_id": 1, "item": "ABC", "sizes": "L", "at": 2},
        {"_id": 2, "item": "EFG", "at": None},
        {"_id": 3, "item": "IJK", "sizes": "M", "at": None},
        {"_id": 4, "item": "LMN", "at": None},
        {"_id": 5, "item": "XYZ", "sizes": None, "at": None},
    ]
    # Then grouped back: a common $unwind / $group round trip.
    counts = {d["_id"]: d["n"] for d in inventory.aggregate([
        {"$unwind": "$sizes"}, {"$group": {"_id": "$sizes", "n": {"$sum": 1}}}])}
    assert counts == {"S": 1, "M": 2, "L": 1}


@pytest.mark.parametrize("spec,code,message", [
    (1, 15981, "expected either a string or an object as specification for $unwind stage, got int"),
    ({}, 28812, "no path specified to $unwind stage"),
    ("", 28812, "no path specified to $unwind stage"),
    ("sizes", 28818, "path option to $unwind stage should be prefixed with a '$': sizes"),
    ({"path": 1}, 28808, "expected a string as the path for $unwind stage, got int"),
    ({"path": "$a", "preserveNullAndEmptyArrays": 1}, 28809,
     "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got int"),
    ({"path": "$a", "includeArrayIndex": ""}, 28810,
     "expected a non-empty string for the includeArrayIndex  option to $unwind stage, got string"),
    ({"path": "$a", "includeArrayIndex": "$i"}, 28822,
     "includeArrayIndex option to $unwind stage should not be prefixed with a '$': $i"),
    ({"bogus": 1, "path": "$a"}, 28811, "unrecognized option to $unwind stage: bogus"),
])
def test_bad_unwind_specs(inventory, spec, code, message):
    with pytest.raises(OperationFailure) as e:
        list(inventory.aggregate([{"$unwind": spec}]))
    assert e.value.code == code
    assert e.value.details["errmsg"] == message
