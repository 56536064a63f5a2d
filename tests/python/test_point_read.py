"""The point-read fast path (crates/server/src/point.rs): a find of exactly
{_id: value} answers from the stored bytes. Each case runs twice, once as
drivers send it (fast path) and once with a `comment`, which the fast path
does not take, so the general find answers; both replies must carry the
same bytes."""

import datetime

import pytest
from bson import Int64, ObjectId, SON
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.errors import OperationFailure

RAW = CodecOptions(document_class=RawBSONDocument)
OID = ObjectId("0123456789abcdef01234567")
WHEN = datetime.datetime(2024, 5, 1, 12, 0, 0)


@pytest.fixture
def coll(client):
    c = client.test.points
    c.insert_many(
        [
            {"_id": 1, "v": "int", "nested": {"a": [1, {"b": 2}]}},
            {"_id": "k", "v": "string"},
            {"_id": OID, "v": "oid"},
            {"_id": None, "v": "null"},
            {"_id": WHEN, "v": "date"},
            {"_id": 2.5, "v": "double"},
        ]
    )
    return c


def run_both(db, fields):
    """The reply without and with a comment (general path), as raw BSON."""
    before = status(db)[1]
    fast = db.command(SON(fields), codec_options=RAW)
    assert status(db)[1] in (before, before + 1)
    general = db.command(SON(fields + [("comment", "take the general path")]), codec_options=RAW)
    return fast, general


def same_cursor(db, fields):
    fast, general = run_both(db, fields)
    assert fast["ok"] == general["ok"] == 1.0
    assert fast["cursor"].raw == general["cursor"].raw
    return fast["cursor"]


@pytest.mark.parametrize("key", [1, 1.0, Int64(1), "k", OID, None, WHEN, 2.5, 999, "absent"])
def test_point_reads_match_the_general_find(coll, key):
    for extra in ([], [("limit", 1), ("singleBatch", True)], [("limit", Int64(5))], [("singleBatch", False)]):
        cursor = same_cursor(coll.database, [("find", "points"), ("filter", {"_id": key})] + extra)
        assert cursor["id"] == 0
        assert cursor["ns"] == "test.points"
        batch = list(cursor["firstBatch"])
        expected = coll.find_one({"_id": key, "v": {"$exists": True}})
        assert len(batch) == (0 if expected is None else 1)
        if expected is not None:
            assert batch[0]["v"] == expected["v"]


def test_the_stored_bytes_come_back_unchanged(coll):
    raw = coll.with_options(codec_options=RAW).find_one({"_id": 1})
    assert raw["nested"]["a"][1]["b"] == 2
    assert list(raw.keys()) == ["_id", "v", "nested"]


def test_a_missing_collection_answers_an_empty_batch(client):
    cursor = same_cursor(client.test, [("find", "nothing_here"), ("filter", {"_id": 1})])
    assert list(cursor["firstBatch"]) == []


@pytest.mark.parametrize(
    "fields, code",
    [
        ([("limit", "x")], 14),
        ([("limit", -1)], 2),
        ([("unknownField", 1)], 40415),
    ],
)
def test_bad_options_get_the_general_errors(coll, fields, code):
    cmd = [("find", "points"), ("filter", {"_id": 1})] + fields
    for variant in (cmd, cmd + [("comment", "general")]):
        with pytest.raises(OperationFailure) as e:
            coll.database.command(SON(variant))
        assert e.value.code == code


def test_other_shapes_still_answer(coll):
    db = coll.database
    # Not a point read: operators, a second field, batchSize 0.
    assert [d["_id"] for d in db.command({"find": "points", "filter": {"_id": {"$in": [1, "k"]}}})["cursor"]["firstBatch"]] == [1, "k"]
    assert db.command({"find": "points", "filter": {"_id": 1, "v": "int"}})["cursor"]["firstBatch"][0]["v"] == "int"
    reply = db.command(SON([("find", "points"), ("filter", {"_id": 1}), ("batchSize", 0)]))
    assert reply["cursor"]["firstBatch"] == []
    assert reply["cursor"]["id"] != 0, "batchSize 0 leaves the cursor open"


def status(db):
    s = db.command("serverStatus")
    return s["opcounters"]["query"], s["arbordb"]["pointReadsFastPath"]


def test_drivers_point_reads_take_the_fast_path(coll):
    db = coll.database
    queries, fast = status(db)
    for key in (1, "k", OID, 404):
        coll.find_one({"_id": key})
    list(coll.find({"_id": 1}))
    assert status(db) == (queries + 5, fast + 5), "each counts as a query, and each was a fast point read"
    coll.find_one({"_id": 1}, {"v": 1})
    list(coll.find({"_id": 1}).skip(0).comment("x"))
    assert status(db) == (queries + 7, fast + 5), "a projection or a comment takes the general path"
