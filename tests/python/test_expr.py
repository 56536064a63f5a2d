"""`$expr` and `let`: aggregation expressions in filters (find, count,
aggregate's $match, update, delete, findAndModify, bulkWrite), with
mongod's semantics for missing fields and its errors."""

import pytest
from pymongo.errors import OperationFailure, WriteError

DOCS = [
    {"_id": 1, "qty": 5, "price": 10, "name": "Lamp", "tags": ["a", "b"]},
    {"_id": 2, "qty": 0, "price": 3.5, "name": "desk", "tags": []},
    {"_id": 3, "qty": 7, "price": 1, "name": "Chair"},
    {"_id": 4, "name": "shelf", "qty": None},
]


@pytest.fixture
def coll(client):
    client.test.items.insert_many(DOCS)
    return client.test.items


def ids(cursor):
    return sorted(d["_id"] for d in cursor)


@pytest.mark.parametrize("expr, want", [
    ({"$gt": ["$qty", 4]}, [1, 3]),
    ({"$gt": [{"$multiply": ["$qty", "$price"]}, 20]}, [1]),
    ({"$eq": ["$qty", None]}, [4]),
    ({"$eq": ["$missing", None]}, []),
    ({"$lt": ["$missing", None]}, [1, 2, 3, 4]),
    ({"$and": [{"$gte": ["$price", 1]}, {"$lt": ["$price", 5]}]}, [2, 3]),
    ({"$or": ["$qty", {"$eq": ["$name", "desk"]}]}, [1, 2, 3]),
    ({"$not": ["$qty"]}, [2, 4]),
    ({"$eq": [{"$toLower": "$name"}, "lamp"]}, [1]),
    ({"$eq": [{"$concat": ["$name", "!"]}, "desk!"]}, [2]),
    ({"$eq": [{"$size": {"$ifNull": ["$tags", []]}}, 2]}, [1]),
    ({"$in": ["b", {"$ifNull": ["$tags", []]}]}, [1]),
    ({"$eq": [{"$cond": [{"$gt": ["$qty", 0]}, "in", "out"]}, "out"]}, [2, 4]),
    ({"$eq": [{"$type": "$price"}, "double"]}, [2]),
    ({"$eq": [{"$mod": ["$_id", 2]}, 0]}, [2, 4]),
    ({"$let": {"vars": {"total": {"$add": ["$qty", 1]}}, "in": {"$gt": ["$$total", 6]}}}, [3]),
    ({"$eq": ["$$ROOT.name", "Chair"]}, [3]),
    (True, [1, 2, 3, 4]),
    ("$qty", [1, 3]),
])
def test_expr_in_find_count_and_match(coll, expr, want):
    assert ids(coll.find({"$expr": expr})) == want
    assert coll.count_documents({"$expr": expr}) == len(want)
    assert ids(coll.aggregate([{"$match": {"$expr": expr}}])) == want


def test_let_variables_reach_expr_in_every_command(coll):
    assert ids(coll.find({"$expr": {"$gt": ["$qty", "$$min"]}}, let={"min": 4})) == [1, 3]
    assert coll.find_one_and_update({"$expr": {"$eq": ["$_id", "$$id"]}}, {"$set": {"seen": True}},
                                    let={"id": 3}, return_document=True)["seen"] is True
    # A missing price is below every number, as in mongod.
    r = coll.update_many({"$expr": {"$lt": ["$price", "$$cheap"]}}, {"$set": {"cheap": True}}, let={"cheap": 4})
    assert r.modified_count == 3 and ids(coll.find({"cheap": True})) == [2, 3, 4]
    assert coll.delete_one({"$expr": {"$eq": ["$name", "$$n"]}}, let={"n": "shelf"}).deleted_count == 1
    assert ids(coll.find()) == [1, 2, 3]
    # A let variable may itself be an expression (over no document).
    assert ids(coll.find({"$expr": {"$eq": ["$_id", "$$two"]}}, let={"two": {"$add": [1, 1]}})) == [2]


@pytest.mark.parametrize("filter, let, code", [
    ({"$expr": {"$eq": ["$_id", "$$nope"]}}, None, 17276),
    ({"$expr": {"$frob": [1]}}, None, 168),
    ({"$expr": {"$eq": [1]}}, None, 16020),
    ({"$expr": {"$eq": [1, 2], "$gt": [1, 2]}}, None, 15983),
    ({"tags": {"$elemMatch": {"$expr": {"$eq": [1, 1]}}}}, None, 2),
    ({"$expr": True}, {"Bad": 1}, 9),
    ({"$expr": True}, {"_x": 1}, 9),
    ({"$expr": True}, {"a-b": 1}, 9),
])
def test_bad_expressions_are_refused_before_reading(coll, filter, let, code):
    with pytest.raises(OperationFailure) as e:
        list(coll.find(filter, let=let) if let else coll.find(filter))
    assert e.value.code == code, e.value.details


def test_variable_names_are_checked_as_mongod_checks_them(coll):
    for name, message in [("Bad", "'Bad' starts with an invalid character for a user variable name"),
                          ("a-b", "'a-b' contains an invalid character for a variable name: '-'")]:
        with pytest.raises(OperationFailure) as e:
            list(coll.find({"$expr": True}, let={name: 1}))
        assert (e.value.code, e.value.details["errmsg"]) == (9, message)
    assert ids(coll.find({"$expr": {"$eq": ["$_id", "$$aB_9"]}}, let={"aB_9": 1})) == [1]


def test_an_error_while_evaluating_fails_the_command_and_writes_nothing(coll):
    with pytest.raises(OperationFailure) as e:
        list(coll.find({"$expr": {"$gt": [{"$add": ["$qty", "$name"]}, 0]}}))
    assert e.value.code == 16554
    with pytest.raises(WriteError) as e:
        coll.update_many({"$expr": {"$gt": [{"$divide": ["$price", "$qty"]}, 0]}}, {"$set": {"x": 1}})
    assert e.value.code == 2 and "divide by zero" in str(e.value)
    # The scan stopped at the error; documents before it in record order
    # were updated, as in mongod (no transaction around a multi-update).
    assert coll.count_documents({"x": 1}) <= 1
    with pytest.raises(WriteError) as e:
        coll.delete_many({"$expr": {"$size": "$name"}})
    assert e.value.code == 17124
    assert coll.count_documents({}) == 4
