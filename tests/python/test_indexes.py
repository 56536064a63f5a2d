"""Index commands over the `_id` index every collection has: listIndexes,
createIndexes (the `_id` index only; a secondary index answers
NotImplemented rather than pretending) and dropIndexes."""

import pytest
from pymongo import ASCENDING
from pymongo.errors import OperationFailure

ID_INDEX = {"v": 2, "key": {"_id": 1}, "name": "_id_"}


def test_list_indexes_shows_the_id_index(client):
    client.test.c.insert_one({"_id": 1})
    assert list(client.test.c.list_indexes()) == [ID_INDEX]
    assert client.test.c.index_information() == {"_id_": {"v": 2, "key": [("_id", 1)]}}
    r = client.test.command({"listIndexes": "c", "cursor": {"batchSize": 0}})
    assert r["cursor"]["firstBatch"] == [] and r["cursor"]["ns"] == "test.$cmd.listIndexes.c"
    more = client.test.command({"getMore": r["cursor"]["id"], "collection": "$cmd.listIndexes.c"})
    assert more["cursor"]["nextBatch"] == [ID_INDEX] and more["cursor"]["id"] == 0


@pytest.mark.parametrize("name, code", [("missing", 26), ("view", 166)])
def test_list_indexes_of_a_missing_collection_or_a_view_fails(client, name, code):
    client.test.create_collection("view", viewOn="c", pipeline=[])
    # (pymongo's list_indexes turns NamespaceNotFound into no indexes.)
    with pytest.raises(OperationFailure) as e:
        client.test.command({"listIndexes": name})
    assert e.value.code == code


def test_creating_the_id_index_is_a_no_op_that_may_create_the_collection(client):
    assert client.test.fresh.create_index([("_id", ASCENDING)]) == "_id_1"  # the name pymongo generates
    assert "fresh" in client.test.list_collection_names()
    r = client.test.command({"createIndexes": "fresh", "indexes": [{"key": {"_id": 1}, "name": "_id_"}]})
    assert r == {**r, "numIndexesBefore": 1, "numIndexesAfter": 1, "note": "all indexes already exist", "ok": 1.0}
    assert "createdCollectionAutomatically" not in r


@pytest.mark.parametrize("indexes, code", [
    ([{"key": {"x": 1}, "name": "x_1"}], 238),
    ([{"key": {"_id": 1}, "name": "_id_", "unique": True}], 238),
    ([{"key": {"_id": "hashed"}, "name": "_id_hashed"}], 238),
    ([{"name": "nokey"}], 9),
    ([], 2),
    ("x", 14),
])
def test_other_indexes_are_refused_and_create_nothing(client, indexes, code):
    with pytest.raises(OperationFailure) as e:
        client.test.command({"createIndexes": "none", "indexes": indexes})
    assert e.value.code == code, e.value.details
    assert "none" not in client.test.list_collection_names()


def test_drop_indexes_keeps_the_id_index(client):
    client.test.d.insert_one({"_id": 1})
    client.test.d.drop_indexes()
    assert list(client.test.d.list_indexes()) == [ID_INDEX]
    for index, code in [("_id_", 72), ("x_1", 27), ({"x": 1}, 27), (5, 14)]:
        with pytest.raises(OperationFailure) as e:
            client.test.command({"dropIndexes": "d", "index": index})
        assert e.value.code == code, index
    with pytest.raises(OperationFailure) as e:
        client.test.command({"dropIndexes": "missing", "index": "*"})
    assert e.value.code == 26
