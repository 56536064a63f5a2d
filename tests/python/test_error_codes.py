"""Error codes and code names as mongod reports them, for errors an audit
against mongod's sources found we reported with other codes."""

import pytest
from pymongo.errors import OperationFailure, WriteError


@pytest.fixture
def coll(client):
    client.test.codes.insert_one({"_id": 1, "a": [1, 2], "b": {"c": 1}})
    return client.test.codes


def code_of(call):
    with pytest.raises((OperationFailure, WriteError)) as e:
        call()
    return e.value.code, e.value.details.get("codeName")


def test_query_update_and_projection_codes(coll):
    assert code_of(lambda: coll.find_one({"a": {"$type": True}})) == (14, "TypeMismatch")
    assert code_of(lambda: coll.update_one({"_id": 1}, {"$addToSet": {"a": {"$each": 3}}}))[0] == 14
    assert code_of(lambda: coll.find_one({"a": 1, "b.c": 1}, {"a.$": 1, "b.$": 1}))[0] == 31276
    assert code_of(lambda: coll.find_one({}, {"a": {"$elemMatch": 1}}))[0] == 31274
    assert code_of(lambda: coll.find_one({}, {"b.c": {"$elemMatch": {"x": 1}}}))[0] == 31275
    assert code_of(lambda: coll.find_one({}, {"$x": 1}))[0] == 16410
    assert coll.find_one() == {"_id": 1, "a": [1, 2], "b": {"c": 1}}


def test_aggregation_codes(coll):
    agg = lambda p: list(coll.aggregate(p))  # noqa: E731
    assert code_of(lambda: agg([{"$project": {"v": {"x": 1, "$y": 2}}}]))[0] == 16410
    assert code_of(lambda: agg([{"$replaceRoot": 1}]))[0] == 40229
    assert code_of(lambda: agg([{"$skip": -1}]))[0] == 5107200
    assert code_of(lambda: agg([{"$limit": "x"}]))[0] == 5107201
    assert code_of(lambda: agg([{"$count": "a.b"}]))[0] == 40160
    assert code_of(lambda: agg([{"$unset": []}]))[0] == 31119
    assert code_of(lambda: agg([{"$frob": 1}])) == (40324, "Location40324")
    assert code_of(lambda: agg([{"$project": {"v": {"$frob": 1}}}])) == (168, "InvalidPipelineOperator")
