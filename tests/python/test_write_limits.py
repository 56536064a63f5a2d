"""What a driver's own test suite found: a command may be larger than a
stored document (16 MiB + 16 KiB), a document past 16 MiB fails its own
statement only, and a write concern a one-member replica set cannot
satisfy answers with a writeConcernError (the write is done), as mongod."""

import bson
import pymongo
import pytest
from pymongo.errors import BulkWriteError, WriteConcernError
from pymongo.write_concern import WriteConcern

MAX = 16 * 1024 * 1024


def sized(n, _id=1):
    """A document of exactly `n` bytes: {_id, s: "x" * k}."""
    base = len(bson.encode({"_id": _id, "s": ""}))
    return {"_id": _id, "s": "x" * (n - base)}


def test_a_replacement_just_under_16_mib_is_taken(client):
    c = client.test.c
    c.insert_one({"_id": 1})
    big = sized(MAX - 32)
    assert len(bson.encode(big)) == MAX - 32
    assert c.replace_one({"_id": 1}, big).modified_count == 1
    assert len(c.find_one({"_id": 1})["s"]) == len(big["s"])
    c.insert_one(sized(MAX, _id=2))  # exactly the limit
    assert c.count_documents({}) == 2


@pytest.mark.parametrize("ordered", [True, False])
def test_a_document_over_16_mib_fails_its_statement_only(client, ordered):
    c = client.test.c
    docs = [{"_id": 0}, sized(MAX + 1, _id=1), {"_id": 2}]
    with pytest.raises(BulkWriteError) as e:
        c.insert_many(docs, ordered=ordered)
    errors = e.value.details["writeErrors"]
    assert [(w["index"], w["code"]) for w in errors] == [(1, 2)]
    assert "object to insert too large" in errors[0]["errmsg"]
    assert sorted(d["_id"] for d in c.find()) == ([0] if ordered else [0, 2])


def test_unsatisfiable_write_concerns_answer_with_a_write_concern_error(client):
    db = client.test
    w2 = db.get_collection("c", write_concern=WriteConcern(w=2))
    with pytest.raises(WriteConcernError) as e:
        w2.insert_one({"_id": 1})
    assert e.value.details["code"] == 100 and e.value.details["codeName"] == "UnsatisfiableWriteConcern"
    assert db.c.find_one() == {"_id": 1}  # the write was done
    reply = db.command("insert", "c", documents=[{"_id": 2}], writeConcern={"w": "dc-east"})
    assert reply["n"] == 1 and reply["writeConcernError"]["code"] == 79
    reply = db.command("create", "d", writeConcern={"w": 3})
    assert reply["writeConcernError"]["code"] == 100 and "d" in db.list_collection_names()
    for fine in ({"w": 1}, {"w": "majority"}, {"w": 0}, {"j": True}):
        assert "writeConcernError" not in db.command("insert", "c", documents=[{}], writeConcern=fine)
