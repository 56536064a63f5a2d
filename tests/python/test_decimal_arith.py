"""Decimal128 arithmetic as mongod does it: $inc / $mul and the $sum / $avg
accumulators give Decimal128 results when a decimal takes part, rounded
half to even to 34 digits with IEEE's exponents (1.10 + 2.2 is 3.30); a
double operand becomes a decimal of 15 digits in updates (0.1 adds
0.100000000000000) and of 34 digits in $sum's non-decimal total."""

import math

from bson import Decimal128, Int64

D = Decimal128


def after(c, update, start, **kw):
    c.delete_many({})
    c.insert_one({"_id": 1, **start})
    c.update_one({"_id": 1}, update, **kw)
    return c.find_one({"_id": 1})


def test_inc_and_mul_with_decimals(client):
    c = client.test.c
    assert after(c, {"$inc": {"v": D("2.2")}}, {"v": D("1.10")})["v"] == D("3.30")
    assert after(c, {"$inc": {"v": D("0.5")}}, {"v": 1})["v"] == D("1.5")
    assert after(c, {"$inc": {"v": D("0.5")}}, {"v": Int64(2**62)})["v"] == D("4611686018427387904.5")
    assert after(c, {"$inc": {"v": 0.1}}, {"v": D("1")})["v"] == D("1.100000000000000")
    assert after(c, {"$inc": {"v": D("-1.10")}}, {"v": D("1.1")})["v"] == D("0.00")
    assert after(c, {"$mul": {"v": 2}}, {"v": D("1.10")})["v"] == D("2.20")
    assert after(c, {"$mul": {"v": D("3")}}, {"v": 0.5})["v"] == D("1.500000000000000")
    assert after(c, {"$mul": {"v": D("1E+6000")}}, {"v": D("1E+6000")})["v"] == D("Infinity")
    big = D("9999999999999999999999999999999999")
    assert after(c, {"$inc": {"v": D("1")}}, {"v": big})["v"] == D("1.000000000000000000000000000000000E+34")
    assert after(c, {"$inc": {"v": D("-Infinity")}}, {"v": D("Infinity")})["v"].to_decimal().is_nan()


def test_missing_fields_take_the_operand_or_its_zero(client):
    c = client.test.c
    assert after(c, {"$inc": {"v": D("2.50")}}, {})["v"] == D("2.50")
    assert after(c, {"$mul": {"v": D("2.5")}}, {})["v"] == D("0.0")
    negative_zero = after(c, {"$mul": {"v": -2.5}}, {})["v"]
    assert negative_zero == 0.0 and math.copysign(1, negative_zero) == -1
    assert math.isnan(after(c, {"$mul": {"v": float("nan")}}, {})["v"])
    assert type(after(c, {"$mul": {"v": Int64(7)}}, {})["v"]) is Int64


def test_an_upsert_and_an_unchanged_value(client):
    c = client.test.c
    r = c.update_one({"_id": 9}, {"$inc": {"v": D("1.0")}}, upsert=True)
    assert r.upserted_id == 9
    c.update_one({"_id": 9}, {"$inc": {"v": D("0.25")}})
    assert c.find_one({"_id": 9})["v"] == D("1.25")
    # Adding zero at a lower exponent changes the representation: a write.
    r = c.update_one({"_id": 9}, {"$inc": {"v": D("0.000")}})
    assert r.modified_count == 1 and c.find_one({"_id": 9})["v"] == D("1.250")
    # Adding a zero that keeps the bytes is a no-op, as mongod's.
    r = c.update_one({"_id": 9}, {"$inc": {"v": D("0")}})
    assert r.modified_count == 0


def test_sum_and_avg_turn_decimal_when_a_decimal_takes_part(client):
    c = client.test.c
    c.insert_many([
        {"k": "a", "v": D("1.5")},
        {"k": "a", "v": 2},
        {"k": "a", "v": 0.25},
        {"k": "b", "v": D("0.1")},
        {"k": "b", "v": 0.1},
        {"k": "c", "v": 1},
        {"k": "c", "v": 2},
        {"k": "d", "v": D("1")},
        {"k": "d", "v": D("2")},
        {"k": "d", "v": "not a number"},
    ])
    out = {
        d["_id"]: d
        for d in c.aggregate([
            {"$group": {"_id": "$k", "s": {"$sum": "$v"}, "a": {"$avg": "$v"}}},
        ])
    }
    assert out["a"]["s"] == D("3.75") and out["a"]["a"] == D("1.25")
    # The double 0.1 joins with its 34-digit value.
    assert out["b"]["s"] == D("0.2000000000000000055511151231257827")
    assert out["c"]["s"] == 3 and type(out["c"]["s"]) is int and out["c"]["a"] == 1.5
    assert out["d"]["s"] == D("3") and out["d"]["a"] == D("1.5")
