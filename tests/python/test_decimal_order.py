"""Decimal128 compares exactly with the other number types, as in MongoDB:
NumberDecimal("0.1") is not the double 0.1 (whose value is
0.1000000000000000055...), but equals NumberDecimal("0.10")."""

import pytest
from bson import Decimal128, Int64
from pymongo.errors import DuplicateKeyError


def test_decimals_match_and_sort_by_exact_value(client):
    c = client.test.c
    c.insert_many([
        {"_id": 1, "v": Decimal128("0.1")},
        {"_id": 2, "v": 0.1},
        {"_id": 3, "v": Decimal128("0.10")},
        {"_id": 4, "v": 1},
        {"_id": 5, "v": Decimal128("1.000")},
        {"_id": 6, "v": Decimal128("9223372036854775808")},
        {"_id": 7, "v": Int64(2**63 - 1)},
        {"_id": 8, "v": Decimal128("-Infinity")},
        {"_id": 9, "v": Decimal128("NaN")},
    ])
    ids = lambda f: sorted(d["_id"] for d in c.find(f))  # noqa: E731
    assert ids({"v": Decimal128("0.1")}) == [1, 3]
    assert ids({"v": 0.1}) == [2]
    assert ids({"v": {"$gt": 0.1, "$lt": 2}}) == [4, 5]
    assert ids({"v": {"$gte": Decimal128("0.1"), "$lt": 0.1}}) == [1, 3]
    assert ids({"v": 1}) == [4, 5]
    assert ids({"v": {"$gt": Int64(2**63 - 1)}}) == [6]
    assert ids({"v": {"$in": [Decimal128("1"), 0.1]}}) == [2, 4, 5]
    order = [d["_id"] for d in c.find(sort=[("v", 1), ("_id", 1)])]
    assert order == [9, 8, 1, 3, 2, 4, 5, 7, 6]


def test_decimal_ids_are_keys_equal_to_the_same_number_of_any_type(client):
    c = client.test.c
    c.insert_one({"_id": Decimal128("1.0"), "t": "decimal"})
    with pytest.raises(DuplicateKeyError) as e:
        c.insert_one({"_id": 1})
    assert e.value.code == 11000
    with pytest.raises(DuplicateKeyError):
        c.insert_one({"_id": 1.0})
    c.insert_many([
        {"_id": Decimal128("0.1")},
        {"_id": 0.1},
        {"_id": Decimal128("-Infinity")},
        {"_id": Decimal128("NaN")},
        {"_id": Decimal128("1E+400")},
    ])
    # Point reads by any equal number find the one document.
    assert c.find_one({"_id": 1})["t"] == "decimal"
    assert c.find_one({"_id": Int64(1)})["_id"] == Decimal128("1.0")
    assert c.find_one({"_id": Decimal128("0.10")})["_id"] == Decimal128("0.1")
    assert c.find_one({"_id": 0.1})["_id"] == 0.1
    order = [d["_id"] for d in c.find(sort=[("_id", 1)])]
    assert order == [
        Decimal128("NaN"), Decimal128("-Infinity"), Decimal128("0.1"), 0.1,
        Decimal128("1.0"), Decimal128("1E+400"),
    ]
    c.delete_one({"_id": 1})
    assert c.find_one({"_id": Decimal128("1")}) is None
