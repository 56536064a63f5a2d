"""Boolean command options read as mongod's parser reads them (IDL
`safeBool`): a number counts (non-zero is true), any other type is a
TypeMismatch that changes nothing."""

import pytest
from bson import Decimal128, Int64
from pymongo.errors import OperationFailure


def expected_message(path, type_name):
    # mongod's own spelling, closing quote inside the bracket.
    return f"BSON field '{path}' is the wrong type '{type_name}', expected types '[bool, long, int, decimal, double']"


@pytest.fixture
def db(client):
    d = client.test
    d.c.insert_many([{"_id": i, "n": 0} for i in range(5)])
    return d


@pytest.mark.parametrize("true", [1, Int64(2), 0.5, Decimal128("1"), True])
def test_numbers_count_as_true(db, true):
    first = db.command({"find": "c", "batchSize": 2, "singleBatch": true})
    assert first["cursor"]["id"] == 0 and len(first["cursor"]["firstBatch"]) == 2
    r = db.command({"update": "c", "updates": [{"q": {}, "u": {"$inc": {"n": 1}}, "multi": true}]})
    assert r["nModified"] == 5
    r = db.command({"update": "c", "updates": [{"q": {"_id": 9}, "u": {"$set": {"n": 9}}, "upsert": true}]})
    assert r["upserted"][0]["_id"] == 9
    r = db.command({"findAndModify": "c", "query": {"_id": 0}, "update": {"$inc": {"n": 1}}, "new": true})
    assert r["value"]["n"] == 2
    names = db.command({"listCollections": 1, "nameOnly": true})["cursor"]["firstBatch"]
    assert names == [{"name": "c", "type": "collection"}]


@pytest.mark.parametrize("false", [0, Int64(0), 0.0, Decimal128("0E+3"), False, None])
def test_zero_and_null_count_as_false(db, false):
    first = db.command({"find": "c", "batchSize": 2, "singleBatch": false})
    assert first["cursor"]["id"] != 0
    r = db.command({"update": "c", "updates": [{"q": {}, "u": {"$inc": {"n": 1}}, "multi": false}]})
    assert r["nModified"] == 1
    # ordered: 0 goes on past a duplicate key.
    r = db.command({"insert": "d", "documents": [{"_id": 1}, {"_id": 1}, {"_id": 2}], "ordered": false})
    ordered_false = false is not None
    assert r["n"] == (2 if ordered_false else 1)


@pytest.mark.parametrize(
    "command, path",
    [
        ({"find": "c", "singleBatch": "yes"}, "find.singleBatch"),
        ({"find": "c", "allowDiskUse": "yes"}, "find.allowDiskUse"),
        ({"find": "c", "showRecordId": "yes"}, "find.showRecordId"),
        ({"update": "c", "updates": [{"q": {}, "u": {"$set": {"n": 7}}, "multi": "yes"}]}, "update.updates.multi"),
        ({"update": "c", "updates": [{"q": {"_id": 8}, "u": {"$set": {"n": 7}}, "upsert": "yes"}]},
         "update.updates.upsert"),
        ({"update": "c", "updates": [{"q": {}, "u": {"$set": {"n": 7}}}], "ordered": "yes"}, "update.ordered"),
        ({"insert": "new", "documents": [{"_id": 1}], "ordered": "yes"}, "insert.ordered"),
        ({"delete": "c", "deletes": [{"q": {}, "limit": 0}], "ordered": "yes"}, "delete.ordered"),
        ({"findAndModify": "c", "query": {}, "update": {"$set": {"n": 7}}, "new": "yes"}, "findAndModify.new"),
        ({"findAndModify": "c", "query": {}, "remove": "yes"}, "findAndModify.remove"),
        ({"listCollections": 1, "nameOnly": "yes"}, "listCollections.nameOnly"),
    ],
)
def test_other_types_are_refused_and_change_nothing(db, command, path):
    before = list(db.c.find().sort("_id", 1))
    with pytest.raises(OperationFailure) as e:
        db.command(command)
    assert e.value.code == 14 and e.value.details["codeName"] == "TypeMismatch"
    assert e.value.details["errmsg"] == expected_message(path, "string")
    assert list(db.c.find().sort("_id", 1)) == before
    assert "new" not in db.list_collection_names()
