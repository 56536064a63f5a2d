"""Aggregation expressions in `aggregate`: `$group` keys and accumulator
arguments, `$addFields`/`$set`, `$replaceRoot`/`$replaceWith`, `let`,
and errors met while evaluating."""

import pytest
from bson import Decimal128, Int64
from pymongo.errors import OperationFailure


@pytest.fixture
def sales(client):
    client.test.sales.insert_many([
        {"_id": 1, "item": "a", "price": 10, "qty": 2, "region": {"name": "north"}},
        {"_id": 2, "item": "b", "price": 20, "qty": 1, "region": {"name": "south"}},
        {"_id": 3, "item": "a", "price": 10, "qty": 5, "region": {"name": "south"}},
    ])
    return client.test.sales


def test_group_by_expressions(sales):
    out = list(sales.aggregate([
        {"$group": {"_id": {"item": "$item", "big": {"$gte": ["$qty", 2]}},
                    "revenue": {"$sum": {"$multiply": ["$price", "$qty"]}}, "n": {"$sum": 1}}},
        {"$sort": {"_id.item": 1, "_id.big": 1}},
    ]))
    assert out == [
        {"_id": {"item": "a", "big": True}, "revenue": 70, "n": 2},
        {"_id": {"item": "b", "big": False}, "revenue": 20, "n": 1},
    ]


def test_add_fields_set_and_replace_root(sales):
    out = list(sales.aggregate([
        {"$addFields": {"total": {"$multiply": ["$price", "$qty"]}}},
        {"$set": {"region.big": {"$gt": ["$total", 30]}}},
        {"$match": {"region.big": True}},
        {"$replaceWith": {"$mergeObjects": ["$region", {"id": "$_id"}]}},
    ]))
    assert out == [{"name": "south", "big": True, "id": 3}]
    out = list(sales.aggregate([{"$replaceRoot": {"newRoot": "$region"}}, {"$group": {"_id": "$name"}},
                                {"$sort": {"_id": 1}}]))
    assert out == [{"_id": "north"}, {"_id": "south"}]


def test_let_reaches_every_stage(sales):
    out = list(sales.aggregate([
        {"$match": {"$expr": {"$eq": ["$item", "$$wanted"]}}},
        {"$set": {"scaled": {"$multiply": ["$qty", "$$factor"]}}},
        {"$group": {"_id": None, "s": {"$sum": "$scaled"}}},
    ], let={"wanted": "a", "factor": 10}))
    assert out == [{"_id": None, "s": 70}]


@pytest.mark.parametrize("pipeline, code", [
    ([{"$group": {"_id": {"$add": ["$item", 1]}}}], 16554),
    ([{"$set": {"x": {"$divide": ["$price", 0]}}}], 2),
    ([{"$replaceWith": "$item"}], 40228),
    ([{"$match": {"$expr": {"$size": "$item"}}}], 17124),
    ([{"$group": {"_id": "$$nope"}}], 17276),
])
def test_errors_fail_the_aggregate(sales, pipeline, code):
    with pytest.raises(OperationFailure) as e:
        list(sales.aggregate(pipeline))
    assert e.value.code == code, e.value.details


def test_project_computes_fields_in_aggregate_and_find(sales):
    out = list(sales.aggregate([
        {"$project": {"_id": 0, "item": 1, "total": {"$multiply": ["$price", "$qty"]}, "where": "$region.name",
                      "tag": {"$concat": ["$item", "-", {"$toUpper": "$region.name"}]}}},
        {"$sort": {"total": -1, "item": 1}},
    ]))
    assert out == [
        {"item": "a", "total": 50, "where": "south", "tag": "a-SOUTH"},
        {"item": "a", "total": 20, "where": "north", "tag": "a-NORTH"},
        {"item": "b", "total": 20, "where": "south", "tag": "b-SOUTH"},
    ]
    # find projections take expressions too (MongoDB 4.4+).
    doc = sales.find_one({"_id": 1}, {"double": {"$multiply": ["$qty", 2]}, "root": "$$ROOT.item"})
    assert doc == {"_id": 1, "double": 4, "root": "a"}
    with pytest.raises(OperationFailure) as e:
        sales.find_one({"_id": 1}, {"bad": {"$add": ["$item", 1]}})
    assert e.value.code == 16554


def test_sum_and_avg_add_as_mongod_does(client):
    from bson.int64 import Int64
    c = client.test.sums
    c.insert_many([{"g": "tenth", "v": 0.1} for _ in range(10)] + [{"g": "long", "v": Int64(5)}, {"g": "long", "v": 2}])
    out = {d["_id"]: d for d in c.aggregate([{"$group": {"_id": "$g", "s": {"$sum": "$v"}, "a": {"$avg": "$v"}}}])}
    assert out["tenth"]["s"] == 1.0 and out["tenth"]["a"] == 0.1
    assert out["long"]["s"] == 7 and type(out["long"]["s"]) is Int64


def test_decimal_prices_add_multiply_and_subtract(client):
    from bson.decimal128 import Decimal128
    c = client.test.prices
    c.insert_one({"_id": 1, "price": Decimal128("19.99"), "qty": 3, "discount": Decimal128("5.00")})
    out = c.find_one({}, {"total": {"$subtract": [{"$multiply": ["$price", "$qty"]}, "$discount"]},
                          "plus_tax": {"$add": ["$price", Decimal128("1.60")]}})
    assert out == {"_id": 1, "total": Decimal128("54.97"), "plus_tax": Decimal128("21.59")}
    per = c.find_one({}, {"_id": 0, "each": {"$divide": ["$discount", 3]}, "floor": {"$floor": "$price"},
                          "ceil": {"$ceil": "$price"}})
    assert per == {"each": Decimal128("1.666666666666666666666666666666667"), "floor": Decimal128("19"),
                   "ceil": Decimal128("20")}
    with pytest.raises(OperationFailure) as e:
        c.find_one({}, {"x": {"$divide": ["$price", Decimal128("0")]}})
    assert e.value.code == 2


ROUND_TRUNC = [
    # One argument.
    ({"$trunc": Int64(4)}, Int64(4)),
    ({"$trunc": -2.0}, -2.0),
    ({"$trunc": 0.9}, 0.0),
    ({"$trunc": -1.2}, -1.0),
    ({"$trunc": Decimal128("-1.6")}, Decimal128("-1")),
    ({"$trunc": None}, None),
    ({"$round": Int64(4)}, Int64(4)),
    ({"$round": 0.9}, 1.0),
    ({"$round": -1.2}, -1.0),
    ({"$round": 2.5}, 2.0),
    ({"$round": 3.5}, 4.0),
    ({"$round": Decimal128("-1.6")}, Decimal128("-2")),
    ({"$round": float("inf")}, float("inf")),
    # A place.
    ({"$trunc": [1.298, 1]}, 1.2),
    ({"$trunc": [23.298, -1]}, 20.0),
    ({"$trunc": [Decimal128("1.298"), 1]}, Decimal128("1.2")),
    ({"$trunc": [Decimal128("23.298"), -1]}, Decimal128("2E+1")),
    ({"$trunc": [1.298, 100]}, 1.298),
    ({"$trunc": [Decimal128("1.298912343250054252245154325"), Int64(20)]}, Decimal128("1.29891234325005425224")),
    ({"$trunc": [Decimal128("1.298"), Decimal128("100")]}, Decimal128("1.298000000000000000000000000000000")),
    ({"$round": [1.298, 1]}, 1.3),
    ({"$round": [2.567, 2]}, 2.57),
    ({"$round": [23.298, -1]}, 20.0),
    ({"$round": [Decimal128("23.298"), -1]}, Decimal128("2E+1")),
    ({"$round": [Decimal128("1.298912343250054252245154325"), Int64(20)]}, Decimal128("1.29891234325005425225")),
    ({"$round": [1234, -2]}, 1200),
    ({"$round": [1250, -2]}, 1200),
    ({"$round": [Int64(1350), -2]}, Int64(1400)),
    ({"$round": [2147483647, -1]}, Int64(2147483650)),
    ({"$round": [Decimal128("Infinity"), 0]}, Decimal128("Infinity")),
    ({"$round": [5, None]}, None),
    # Decimal $mod and $sqrt.
    ({"$mod": [Decimal128("7.5"), 2]}, Decimal128("1.5")),
    ({"$mod": [Decimal128("-7.5"), 2]}, Decimal128("-1.5")),
    ({"$mod": [10, Decimal128("3.0")]}, Decimal128("1.0")),
    ({"$sqrt": Decimal128("4.00")}, Decimal128("2.0")),
    ({"$sqrt": Decimal128("2")}, Decimal128("1.414213562373095048801688724209698")),
]


@pytest.mark.parametrize("expr, want", ROUND_TRUNC)
def test_round_trunc_mod_and_sqrt_as_mongod(client, expr, want):
    c = client.test.r
    c.insert_one({"_id": 1})
    got = c.find_one({}, {"_id": 0, "r": expr})["r"]
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("expr, code", [
    ({"$round": [Int64(9223372036854775806), -1]}, 51080),
    ({"$trunc": [1, 2, 3]}, 28667),
    ({"$round": [1, 2, 3]}, 28667),
    ({"$round": "string"}, 51081),
    ({"$trunc": "string"}, 51081),
    ({"$round": [1, Int64(101)]}, 51083),
    ({"$round": [1, -21]}, 51083),
    ({"$trunc": [1, Decimal128("101")]}, 51083),
    ({"$round": [1, Decimal128("1.4")]}, 51082),
    ({"$round": [1, Decimal128("1.0000000000000000001")]}, 51082),
    ({"$trunc": [1, 10.5]}, 51082),
    ({"$round": [1, "2"]}, 16004),
    ({"$mod": [Decimal128("1"), Decimal128("0")]}, 16610),
    ({"$sqrt": Decimal128("-1")}, 28714),
])
def test_round_and_trunc_errors(client, expr, code):
    c = client.test.r
    c.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$project": {"a": expr}}]))
    assert e.value.code == code
    if code == 51083:
        assert e.value.details["errmsg"].startswith("cannot apply $") and "value must be in [-20, 100]" in \
            e.value.details["errmsg"]
