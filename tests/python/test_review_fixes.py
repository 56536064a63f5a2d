"""Edge cases found in review: hostile paths and nesting are refused
cleanly, errors are not swallowed, collations and `let` reach everywhere
they should, malformed bulkWrite operations write nothing."""

import pytest
from pymongo.collation import Collation
from pymongo.errors import OperationFailure, WriteError

from test_retryable_writes import raw  # noqa: F401 (fixture)


def test_very_long_paths_are_refused_not_a_crash(client):
    c = client.test.paths
    c.insert_one({"_id": 1})
    long_path = ".".join(["a"] * 300)
    with pytest.raises((WriteError, OperationFailure)) as e:
        c.update_one({"_id": 1}, [{"$set": {long_path: 1}}])
    assert e.value.code == 15
    with pytest.raises((WriteError, OperationFailure)) as e:
        c.update_one({"_id": 1}, {"$set": {long_path: 1}})
    assert e.value.code == 9
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$project": {"v": "$" + long_path}}]))
    assert e.value.code == 15
    assert c.find_one() == {"_id": 1}


def test_a_pipeline_cannot_nest_a_document_without_bound(client):
    c = client.test.deep
    c.insert_one({"_id": 1, "a": 1})
    with pytest.raises((WriteError, OperationFailure)) as e:
        c.update_one({"_id": 1}, [{"$set": {"a": {"x": "$a"}}}] * 200)
    assert e.value.code == 15
    assert c.find_one() == {"_id": 1, "a": 1}


def test_skip_does_not_swallow_an_error(client):
    c = client.test.skip
    c.insert_many([{"_id": 1, "x": 0}, {"_id": 2, "x": 1}])
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$match": {"$expr": {"$divide": [1, "$x"]}}}, {"$skip": 1}]))
    assert e.value.code == 2


def test_field_paths_skip_nested_arrays(client):
    c = client.test.nested
    c.insert_one({"_id": 1, "a": [[{"b": 1}], {"b": 2}]})
    assert list(c.aggregate([{"$project": {"_id": 0, "v": "$a.b"}}])) == [{"v": [2]}]


def test_default_collation_reaches_point_reads_and_an_empty_collation_keeps_it(client):
    client.test.create_collection("ci", collation=Collation(locale="en", strength=2))
    c = client.test.ci
    c.insert_one({"_id": "a", "s": "x"})
    assert c.find_one({"_id": "A"}) == {"_id": "a", "s": "x"}
    assert c.find_one({"s": "X"}, collation={}) == {"_id": "a", "s": "x"}


def test_let_reaches_projections(client):
    c = client.test.proj
    c.insert_one({"_id": 1})
    assert c.find_one({}, {"v": "$$x"}, let={"x": 5}) == {"_id": 1, "v": 5}
    assert list(c.aggregate([{"$project": {"v": "$$x"}}], let={"x": 6})) == [{"_id": 1, "v": 6}]


def test_constants_need_a_pipeline_update(client):
    client.test.k.insert_one({"_id": 1})
    r = client.test.command({"update": "k", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "c": {"x": 1}}]})
    assert r["writeErrors"][0]["code"] == 51198
    assert client.test.k.find_one() == {"_id": 1}


@pytest.mark.parametrize("bad", [
    {"update": 0, "filter": {}, "updateMods": 5},
    {"update": 0, "filter": {}, "updateMods": {"$set": {"a": 1}}, "hint": 1},
    {"update": 0, "filter": {}, "updateMods": {"$set": {"a": 1}}, "arrayFilters": {}},
    {"delete": 0, "filter": {}, "collation": {"locale": "en", "strength": 9}},
])
def test_a_bulk_write_with_a_malformed_operation_writes_nothing(raw, client, bad):  # noqa: F811
    reply = raw({"bulkWrite": 1, "ops": [{"insert": 0, "document": {"_id": 1}}, bad], "nsInfo": [{"ns": "test.bw"}]},
                db="admin")
    assert reply["ok"] == 0.0, reply
    assert client.test.bw.count_documents({}) == 0
