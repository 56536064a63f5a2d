"""Documents come back byte for byte as they were sent (issue 25).

Subdocuments whose keys look like Extended JSON ({$numberLong: "5"},
{$binary: ..., $type: ...}, ...) are ordinary subdocuments to mongod: it
stores them, matches them and returns them unchanged. Every write path and
every aggregation stage that carries a document is tried with every Extended
JSON wrapper at several depths, and the bytes read back (RawBSONDocument, so
pymongo decodes nothing) are compared with the bytes sent.
"""

import os
import random
import re
import subprocess

import bson
import pytest
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.raw_bson import RawBSONDocument
from pymongo import InsertOne, ReplaceOne, ReturnDocument, UpdateOne
from pymongo.errors import OperationFailure, WriteError

import bson_gen
from conftest import BIN, Server

# Raw documents both ways; DATETIME_AUTO so pymongo can look inside a
# document whose dates are outside Python's range.
RAW = CodecOptions(document_class=RawBSONDocument, datetime_conversion=DatetimeConversion.DATETIME_AUTO)

SHAPES = {
    "numberLong": {"$numberLong": "5"},
    "oid": {"$oid": "5f1d7e1e2b5c0a3b4c5d6e7f"},
    "numberDecimal": {"$numberDecimal": "1.5"},
    "numberInt": {"$numberInt": "7"},
    "numberDouble": {"$numberDouble": "1.0"},
    "minKey": {"$minKey": 1},
    "maxKey": {"$maxKey": 1},
    "undefined": {"$undefined": True},
    "symbol": {"$symbol": "s"},
    "code": {"$code": "x"},
    "codeWithScope": {"$code": "x", "$scope": {"a": 1}},
    "timestamp": {"$timestamp": {"t": 1, "i": 2}},
    "regularExpression": {"$regularExpression": {"pattern": "a", "options": "i"}},
    "legacyRegex": {"$regex": "a", "$options": "i"},
    "uuid": {"$uuid": "00112233-4455-6677-8899-aabbccddeeff"},
    "dbPointer": {"$dbPointer": {"$ref": "a.b", "$id": {"$oid": "5f1d7e1e2b5c0a3b4c5d6e7f"}}},
    "binary": {"$binary": {"base64": "aGVsbG8=", "subType": "00"}},
    "legacyBinary": {"$binary": "aGVsbG8=", "$type": "00"},
    "date": {"$date": "2020-01-01T00:00:00Z"},
    "dateNumberLong": {"$date": {"$numberLong": "1"}},
    "dbref": {"$ref": "a", "$id": 1},
    "foo": {"$foo": 1},
}

# Where the shape sits in the document.
DEPTHS = {
    "field": lambda s: {"v": s},
    "nested": lambda s: {"v": {"x": s}},
    "in array": lambda s: {"v": [s]},
    "deep": lambda s: {"v": [1, {"x": [s, {"y": s}]}]},
}


def cases():
    """(label, _id, the document's fields but _id) for every shape and depth."""
    out, i = [], 0
    for shape_name, shape in SHAPES.items():
        for depth_name, place in DEPTHS.items():
            out.append((f"{shape_name} {depth_name}", i, place(shape)))
            i += 1
        # At the top level too: $-prefixed top-level names are allowed on insert.
        out.append((f"{shape_name} top level", i, dict(shape)))
        i += 1
    return out


def raw_doc(data):
    return RawBSONDocument(data, RAW)


def with_id(i, fields):
    return {"_id": i, **fields}


def encoded(d):
    return bson.encode(d)


@pytest.fixture
def db(client):
    return client.get_database("sent", codec_options=RAW)


def check_all(coll, expected, label=""):
    """Every document of `coll`, by _id, is byte for byte `expected[_id]`."""
    got = {d["_id"]: d.raw for d in coll.find({}).sort("_id", 1)}
    bad = [f"{label}{expected_label} (_id {i}):\n  sent     {want.hex()}\n  returned {got.get(i, b'').hex()}"
           for i, (expected_label, want) in expected.items() if got.get(i) != want]
    assert not bad, f"{len(bad)} of {len(expected)} documents changed:\n" + "\n".join(bad[:8])
    assert len(got) == len(expected)


def expected_of(docs):
    return {i: (label, encoded(with_id(i, f))) for label, i, f in docs}


# ------------------------------------------------------------- write paths


def test_insert_one_and_insert_many(db):
    docs = cases()
    for label, i, f in docs[: len(docs) // 2]:
        db.one.insert_one(raw_doc(encoded(with_id(i, f))))
    db.one.insert_many([raw_doc(encoded(with_id(i, f))) for _, i, f in docs[len(docs) // 2:]])
    check_all(db.one, expected_of(docs))


def top_level(fields):
    return any(k.startswith("$") for k in fields)


def test_update_operators(db):
    docs = cases()
    db.c.insert_many([{"_id": i} for _, i, _ in docs])
    expected = {}
    for label, i, f in docs:
        if top_level(f):
            # Update operators may not name a top-level $ field: refused, unchanged.
            with pytest.raises(WriteError) as e:
                db.c.update_one({"_id": i}, {"$set": f})
            assert e.value.code == 52, label
            expected[i] = (label, encoded({"_id": i}))
        else:
            db.c.update_one({"_id": i}, {"$set": f})
            expected[i] = (label, encoded(with_id(i, f)))
    check_all(db.c, expected)


def test_replacement_and_pipeline_updates(db):
    # A replacement may have top-level $ names only as a DBRef; a pipeline may.
    docs = cases()
    db.r.insert_many([{"_id": i, "old": 1} for _, i, _ in docs])
    db.p.insert_many([{"_id": i} for _, i, _ in docs])
    replaced = {}
    for label, i, f in docs:
        if top_level(f):
            # $set may not name a $ field; $setField may (the manual's way).
            db.p.update_one({"_id": i}, [
                {"$replaceWith": {"$setField": {"field": {"$literal": k}, "value": {"$literal": v}, "input": "$$ROOT"}}}
                for k, v in f.items()])
        else:
            db.p.update_one({"_id": i}, [{"$set": {k: {"$literal": v} for k, v in f.items()}}])
        if top_level(f) and "$ref" not in f:
            with pytest.raises(WriteError) as e:
                db.r.replace_one({"_id": i}, raw_doc(encoded(with_id(i, {"x": 1, **f}))))
            assert e.value.code == 52, label
            replaced[i] = (label, encoded({"_id": i, "old": 1}))
        else:
            db.r.replace_one({"_id": i}, raw_doc(encoded(with_id(i, f))))
            replaced[i] = (label, encoded(with_id(i, f)))
    check_all(db.r, replaced, "replace: ")
    check_all(db.p, expected_of(docs), "pipeline: ")


def test_upserts(db):
    docs = [d for d in cases() if "top level" not in d[0]]
    for _, i, f in docs:
        db.rep.replace_one({"_id": i}, f, upsert=True)
        db.set.update_one({"_id": i}, {"$set": f}, upsert=True)
        db.soi.update_one({"_id": i}, {"$setOnInsert": f}, upsert=True)
    for name in ("rep", "set", "soi"):
        check_all(db[name], expected_of(docs), f"{name}: ")


def test_find_and_modify_returns_and_stores_as_sent(db):
    docs = [d for d in cases() if "top level" not in d[0]]
    db.fam.insert_many([{"_id": i} for _, i, _ in docs])
    bad = []
    for label, i, f in docs:
        want = encoded(with_id(i, f))
        if i % 2:
            back = db.fam.find_one_and_update({"_id": i}, {"$set": f}, return_document=ReturnDocument.AFTER)
        else:
            back = db.fam.find_one_and_replace({"_id": i}, f, return_document=ReturnDocument.AFTER)
        if back.raw != want:
            bad.append(label)
    assert not bad, f"findAndModify's reply changed: {bad}"
    check_all(db.fam, expected_of(docs))


def test_bulk_writes(client, db):
    docs = cases()
    ns = f"{db.name}.bw"
    models = [InsertOne(raw_doc(encoded(with_id(i, f))), namespace=ns) for _, i, f in docs]
    client.bulk_write(models)
    check_all(db.bw, expected_of(docs), "client.bulk_write: ")
    plain = [d for d in docs if "top level" not in d[0]]
    db.cbw.insert_many([{"_id": i} for _, i, _ in plain])
    db.cbw.bulk_write([UpdateOne({"_id": i}, {"$set": f}) if i % 2 else ReplaceOne({"_id": i}, f)
                       for _, i, f in plain])
    check_all(db.cbw, expected_of(plain), "collection.bulk_write: ")


# ------------------------------------------------------------- filters


def test_filter_values_match_the_subdocument_not_the_value_it_describes(db):
    for name, shape in SHAPES.items():
        coll = db[f"f_{name}"]
        coll.insert_many([{"_id": 1, "v": shape}, {"_id": 2, "v": [shape]}, {"_id": 3, "v": "other"}])
        got = [d["_id"] for d in coll.find({"v": {"$eq": shape}}).sort("_id", 1)]
        assert got == [1, 2], f"{name}: $eq matched {got}"
        got = [d["_id"] for d in coll.find({"v": {"$ne": shape}})]
        assert got == [3], f"{name}: $ne matched {got}"
        got = [d["_id"] for d in coll.find({"v": {"$elemMatch": {"$eq": shape}}})]
        assert got == [2], f"{name}: $elemMatch matched {got}"
    # The int64 5 and the subdocument {$numberLong: "5"} are different values.
    db.n.insert_many([{"_id": 1, "v": bson.Int64(5)}, {"_id": 2, "v": {"$numberLong": "5"}}])
    assert [d["_id"] for d in db.n.find({"v": {"$eq": {"$numberLong": "5"}}})] == [2]
    assert [d["_id"] for d in db.n.find({"v": bson.Int64(5)})] == [1]
    # Without $eq the subdocument is a document of operators, as in mongod.
    with pytest.raises(OperationFailure) as e:
        db.n.find_one({"v": {"$numberLong": "5"}})
    assert e.value.code == 2 and "unknown operator: $numberLong" in str(e.value)


# ------------------------------------------------------------- aggregation


def test_aggregation_stages_carry_documents_unchanged(client, db):
    docs = [d for d in cases() if "top level" not in d[0]]
    db.src.insert_many([raw_doc(encoded(with_id(i, f))) for _, i, f in docs])
    expected = expected_of(docs)
    bad = [f"$match {d['_id']}" for d in db.src.aggregate([{"$match": {}}]) if d.raw != expected[d["_id"]][1]]
    # Literal values placed by expression stages.
    for _, i, f in docs:
        lit = {k: {"$literal": v} for k, v in f.items()}
        want = encoded(with_id(i, f))
        match = {"$match": {"_id": i}}
        for stage in ({"$addFields": lit}, {"$set": lit}, {"$project": lit}):
            got = list(db.src.aggregate([match, {"$unset": "v"}, stage]))
            if [g.raw for g in got] != [want]:
                bad.append(f"{list(stage)[0]} {i}")
        got = list(db.src.aggregate([match, {"$replaceWith": {"$literal": with_id(i, f)}}]))
        if [g.raw for g in got] != [want]:
            bad.append(f"$replaceWith {i}")
        got = list(client.get_database("sent", codec_options=RAW).aggregate(
            [{"$documents": {"$literal": [with_id(i, f)]}}]))
        if [g.raw for g in got] != [want]:
            bad.append(f"$documents {i}")
    # $group keys are the values themselves.
    field_ids = [i for label, i, _ in docs if label.endswith(" field")]
    for name, shape in SHAPES.items():
        got = list(db.src.aggregate([{"$match": {"v": {"$eq": shape}, "_id": {"$in": field_ids}}},
                                     {"$group": {"_id": "$v"}}]))
        if [g.raw for g in got] != [encoded({"_id": shape})]:
            bad.append(f"$group {name}: {[bson.decode(g.raw) for g in got]}")
    assert not bad, "\n".join(bad[:10])
    # $out and $merge write them as they are.
    db.src.aggregate([{"$match": {}}, {"$out": "out"}])
    check_all(db.out, expected, "$out: ")
    db.src.aggregate([{"$match": {}}, {"$merge": {"into": "merged"}}])
    check_all(db.merged, expected, "$merge insert: ")
    db.src.aggregate([{"$match": {}}, {"$merge": {"into": "merged", "whenMatched": "replace"}}])
    check_all(db.merged, expected, "$merge replace: ")


# ------------------------------------------------------------- cursors, validators, restart, dump


def test_cursors_validators_restart_and_dump(datadir):
    server = Server(datadir / "db")
    docs = cases()
    expected = expected_of(docs)
    shape = SHAPES["legacyBinary"]
    validator = {"$and": [{"v": {"$ne": shape}}, {"w": {"$ne": SHAPES["numberLong"]}}]}
    try:
        c = server.client()
        db = c.get_database("sent", codec_options=RAW)
        db.batches.insert_many([raw_doc(v) for _, v in expected.values()])
        got = [d.raw for d in db.batches.find({}, batch_size=3).sort("_id", 1)]
        assert got == [v for _, v in expected.values()], "documents changed across getMore batches"
        db.create_collection("val", validator=validator)
        assert validator_of(db, "val") == encoded(validator)
        with pytest.raises(WriteError) as e:
            db.val.insert_one({"_id": 1, "w": {"$numberLong": "5"}})
        assert e.value.code == 121
        db.val.insert_one({"_id": 2, "v": {"$binary": "other", "$type": "00"}, "w": bson.Int64(5)})
        c.close()
    finally:
        assert server.stop() == 0
    # After a restart: records and catalog entries are read from storage.
    server = Server(datadir / "db")
    try:
        c = server.client()
        db = c.get_database("sent", codec_options=RAW)
        check_all(db.batches, expected, "after restart: ")
        assert validator_of(db, "val") == encoded(validator)
        with pytest.raises(WriteError):
            db.val.insert_one({"_id": 3, "v": shape})
        c.close()
    finally:
        assert server.stop() == 0
    tables = subprocess.run([str(BIN), "dump", "--dbpath", str(datadir / "db")], capture_output=True, text=True,
                            check=True).stdout
    shown = ""
    for table in re.findall(r'table "(c/\d+)"', tables):
        shown += subprocess.run([str(BIN), "dump", "--dbpath", str(datadir / "db"), "--table", table, "--bson"],
                                capture_output=True, text=True, check=True).stdout
    assert '"v":{"$numberLong":"5"}' in shown.replace(" ", ""), shown[:2000]
    assert '"v":{"$binary":"aGVsbG8=","$type":"00"}' in shown.replace(" ", "")
    catalog = subprocess.run([str(BIN), "dump", "--dbpath", str(datadir / "db"), "--table", "_catalog", "--bson"],
                             capture_output=True, text=True, check=True).stdout
    assert '{"v":{"$ne":{"$binary":"aGVsbG8=","$type":"00"}}}' in catalog.replace(" ", ""), catalog[:2000]


def validator_of(db, name):
    reply = db.command("listCollections", filter={"name": name}, codec_options=RAW)
    return reply["cursor"]["firstBatch"][0]["options"]["validator"].raw


# ------------------------------------------------------------- random documents


def test_random_documents_of_every_type_round_trip(db):
    """Random documents with every BSON type and random $-prefixed and dotted
    keys, inserted, replaced, updated and aggregated, come back byte for byte.
    ARBORDB_BSON_SEED replays a run; ARBORDB_BSON_DOCS sets how many."""
    seed = int(os.environ.get("ARBORDB_BSON_SEED", random.randrange(2**32)))
    n = int(os.environ.get("ARBORDB_BSON_DOCS", "150"))
    print(f"ARBORDB_BSON_SEED={seed}")
    gen = bson_gen.Gen(seed)
    coll = db.rand
    for i in range(n):
        id_el = ("_id", bson_gen.int32(i))
        inserted = bson_gen.document([id_el, *gen.elements(3, dollar_ok=True, taken=["_id"])])
        coll.insert_one(raw_doc(inserted))
        assert coll.find_one({"_id": i}).raw == inserted, f"seed {seed}: insert #{i} changed"
        # A replacement may not have top-level $ names (but nested ones).
        fields = gen.elements(3, dollar_ok=False, taken=["_id"])
        coll.replace_one({"_id": i}, raw_doc(bson_gen.document([id_el, *fields])))
        assert coll.find_one({"_id": i}).raw == bson_gen.document([id_el, *fields]), f"seed {seed}: replace #{i}"
        # $set of one field to a random value: replaced in place, or appended.
        key, value = gen.key(dollar_ok=False).replace(".", "_"), gen.value(3)
        update = bson_gen.document([("$set", bson_gen.doc_value([(key, value)]))])
        coll.update_one({"_id": i}, raw_doc(update))
        if any(k == key for k, _ in fields):
            fields = [(k, value if k == key else v) for k, v in fields]
        else:
            fields = [*fields, (key, value)]
        want = bson_gen.document([id_el, *fields])
        assert coll.find_one({"_id": i}).raw == want, f"seed {seed}: $set #{i} of {key!r}"
        got = [d.raw for d in coll.aggregate([{"$match": {"_id": i}}, {"$project": {"not_a_key": 0}}])]
        assert got == [want], f"seed {seed}: aggregate #{i}"


# ------------------------------------------------------------- $ and . in field names (MongoDB 5.0+)


def test_dollar_and_dotted_names_follow_mongod_rules(client):
    c = client.sent.names
    c.insert_one({"_id": 1, "$price": 5, "a.b": 1, "loc": {"$db": "x", "$inc": True}})
    # _id may not hold a $-prefixed field at any depth, nor be an array, regex or undefined.
    for bad, code, message in [
        ({"$a": 1}, 52, "_id fields may not contain '$'-prefixed fields: $a is not valid for storage."),
        ({"x": [{"$numberLong": "5"}]}, 52,
         "_id fields may not contain '$'-prefixed fields: $numberLong is not valid for storage."),
        ([1], 2, "The '_id' value cannot be of type array"),
        (bson.Regex("a"), 2, "The '_id' value cannot be of type regex"),
    ]:
        with pytest.raises(WriteError) as e:
            c.insert_one({"_id": bad})
        assert (e.value.code, e.value.details["errmsg"]) == (code, message)
    c.insert_one({"_id": {"$ref": "c", "$id": 1, "$db": "d"}})  # a DBRef is fine
    c.insert_one({"_id": {"a.b": 1}})  # so are dots
    # Replacements: no top-level $ name, but a DBRef in order; nested ones are fine.
    with pytest.raises(WriteError) as e:
        c.replace_one({"_id": 1}, {"x": 1, "$y": 2})
    assert e.value.code == 52
    assert e.value.details["errmsg"] == (
        "The dollar ($) prefixed field '$y' in '$y' is not allowed in the context of an update's replacement "
        "document. Consider using an aggregation pipeline with $replaceWith.")
    for bad, message in [
        ({"x": 1, "$id": 1, "$ref": "c"}, "Found $id field without a $ref before it, which is invalid."),
        ({"x": 1, "$ref": 5, "$id": 1}, "The DBRef $ref field must be a String, not a int"),
        ({"x": 1, "$ref": "c", "y": 1}, "The DBRef $ref field must be followed by a $id field"),
    ]:
        with pytest.raises(WriteError) as e:
            c.replace_one({"_id": 1}, bad)
        assert (e.value.code, e.value.details["errmsg"]) == (10, message)
    assert c.find_one({"_id": 1}) == {"_id": 1, "$price": 5, "a.b": 1, "loc": {"$db": "x", "$inc": True}}
    raw = c.with_options(codec_options=RAW)
    c.insert_one({"_id": 2})
    c.replace_one({"_id": 2}, {"x": 1, "$ref": "c", "$id": 2, "n": {"$y": 1}})
    assert raw.find_one({"_id": 2}).raw == encoded({"_id": 2, "x": 1, "$ref": "c", "$id": 2, "n": {"$y": 1}})
    c.replace_one({"_id": 1}, {"x": 1, "n": {"$y": 1, "a.b": 2}})
    # A replacement that matches nothing is not checked, as in mongod.
    assert c.replace_one({"_id": "none"}, {"x": 1, "$y": 2}).matched_count == 0
    # Update operators: no top-level $ path; below the top it is a name.
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, {"$set": {"$z": 1}})
    assert e.value.code == 52
    c.update_one({"_id": 1}, {"$set": {"n.$z": 3, "m": {"$w": 1}}})
    assert raw.find_one({"_id": 1})["n"].raw == encoded({"$y": 1, "a.b": 2, "$z": 3})
    # Pipelines set top-level $ and dotted names with $setField, read them with $getField.
    c.update_one({"_id": 1}, [{"$replaceWith": {"$setField": {
        "field": {"$literal": "$top"}, "value": {"$getField": "x"}, "input": "$$ROOT"}}}])
    assert c.find_one({"_id": 1}) == {"_id": 1, "x": 1, "n": {"$y": 1, "a.b": 2, "$z": 3}, "m": {"$w": 1}, "$top": 1}
    c.update_one({"_id": 1}, [{"$replaceWith": {"$setField": {"field": "a.b", "value": 7, "input": "$$ROOT"}}}])
    got = c.aggregate([{"$match": {"_id": 1}}, {"$project": {"v": {"$getField": "a.b"}, "t": {"$getField": {"$literal": "$top"}}}}])
    assert list(got) == [{"_id": 1, "v": 7, "t": 1}]
    c.update_one({"_id": 1}, [{"$set": {"x": 2}}])  # $top stays: a pipeline may keep top-level $ names
    assert c.find_one({"_id": 1})["$top"] == 1
    # A pipeline may not put a $ name inside _id.
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, [{"$set": {"_id": {"$literal": {"$q": 1}}}}])
    assert e.value.code == 52 and "'$q' in '_id.$q'" in e.value.details["errmsg"]
    # An upsert's new document follows the insert rules.
    c.update_one({"_id": 9}, {"$set": {"p.$q": 1}}, upsert=True)
    c.replace_one({"_id": 10}, {"p": {"$q": 1}}, upsert=True)
    assert c.find_one({"_id": 9}) == {"_id": 9, "p": {"$q": 1}}
    assert c.find_one({"_id": 10}) == {"_id": 10, "p": {"$q": 1}}
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": {"$eq": {"$a": 1}}}, {"$set": {"x": 1}}, upsert=True)
    assert e.value.details["errmsg"] == "_id fields may not contain '$'-prefixed fields: $a is not valid for storage."
    with pytest.raises(WriteError) as e:
        c.replace_one({"_id": {"$eq": [1]}}, {"x": 1}, upsert=True)
    assert (e.value.code, e.value.details["errmsg"]) == (53, "The '_id' value cannot be of type array")


def test_dbref_fields_are_path_components(client):
    c = client.sent.refs
    users = lambda i, db=None: bson.SON([("$ref", "users"), ("$id", i)] + ([("$db", db)] if db else []))  # noqa: E731
    c.insert_many([{"_id": 1, "owner": users(5)}, {"_id": 2, "owner": users(6, "d")},
                   {"_id": 3, "owners": [users(5)]}])

    def ids(q, **kw):
        return sorted(d["_id"] for d in c.find(q, **kw))

    assert ids({"owner.$id": 5}) == [1]
    assert ids({"owner.$ref": "users"}) == [1, 2]
    assert ids({"owner.$db": "d"}) == [2]
    assert ids({"owner": users(5)}) == [1]  # a DBRef is a value, not operators
    assert ids({"owner": {"$in": [users(6, "d")]}}) == [2]
    assert ids({"owners": {"$elemMatch": users(5)}}) == [3]
    assert ids({"owners": {"$elemMatch": {"$id": 5}}}) == [3]
    assert ids({"owners.$id": {"$gt": 4}}) == [3]
    assert [d["owner"] for d in c.find({"_id": 1}, {"owner.$id": 1, "_id": 0})] == [{"$id": 5}]
    assert [d["_id"] for d in c.find({"owner": {"$exists": True}}).sort("owner.$id", -1)] == [2, 1]
    got = list(c.aggregate([{"$match": {"owner": {"$exists": True}}}, {"$project": {"i": "$owner.$id"}},
                            {"$sort": {"i": 1}}]))
    assert got == [{"_id": 1, "i": 5}, {"_id": 2, "i": 6}]
    assert sorted(c.distinct("owner.$id")) == [5, 6]
    c.update_one({"_id": 1}, {"$set": {"owner.$id": 7}})
    assert c.find_one({"_id": 1})["owner"] == bson.DBRef("users", 7)
    # Other $ names in a path are still refused in expressions.
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$project": {"i": "$owner.$foo"}}]))
    assert e.value.code == 16410


def test_upserts_follow_insert_rules_and_replacements_check_the_new_id(client):
    c = client.sent.upsert_rules
    # The manual's example: an upsert that inserts may set a top-level $ field...
    c.update_one({"date": "2021-07-07"}, {"$set": {"phone": 25.17, "$hotel": 320.10}}, upsert=True)
    assert c.find_one({"date": "2021-07-07"}, {"_id": 0}) == {"date": "2021-07-07", "phone": 25.17, "$hotel": 320.10}
    # ...the same update matching that document fails, and changes nothing.
    with pytest.raises(WriteError) as e:
        c.update_one({"date": "2021-07-07"}, {"$set": {"phone": 1, "$hotel": 1}}, upsert=True)
    assert e.value.code == 52
    assert c.find_one({"date": "2021-07-07"})["phone"] == 25.17
    c.replace_one({"_id": "r"}, {"x": 1, "$y": 2}, upsert=True)
    assert c.find_one({"_id": "r"}) == {"_id": "r", "x": 1, "$y": 2}
    # A replacement's own _id is checked before it is compared with the stored one.
    c.insert_one({"_id": 0})
    with pytest.raises(WriteError) as e:
        c.replace_one({"_id": 0}, {"_id": {"a": {"$b": 1}}})
    assert e.value.code == 52 and "'$b' in '_id.a.$b'" in e.value.details["errmsg"]
    with pytest.raises(WriteError) as e:
        c.replace_one({"_id": 0}, {"_id": [1]})
    assert e.value.code == 53
    with pytest.raises(WriteError) as e:
        c.replace_one({"_id": 0}, {"_id": 1})
    assert e.value.code == 66


def test_merge_modes_check_names_as_their_updates_do(client):
    db = client.sent
    db.merge_src.insert_many([{"_id": 1, "$x": 1}])
    db.merge_dst.insert_many([{"_id": 1, "y": 1}])
    for mode, code in [("replace", 52), ("merge", 52)]:
        with pytest.raises(OperationFailure) as e:
            db.merge_src.aggregate([{"$merge": {"into": "merge_dst", "whenMatched": mode}}])
        assert e.value.code == code, mode
    with pytest.raises(OperationFailure) as e:
        db.merge_src.aggregate([{"$merge": {"into": "merge_dst", "whenMatched": [{"$set": {"_id": 2}}]}}])
    assert e.value.code == 66
    # A pipeline may set a top-level $ name.
    db.merge_src.aggregate([{"$merge": {"into": "merge_dst", "whenMatched": [
        {"$replaceWith": {"$setField": {"field": {"$literal": "$z"}, "value": 3, "input": "$$ROOT"}}}]}}])
    assert db.merge_dst.find_one({"_id": 1}) == {"_id": 1, "y": 1, "$z": 3}


def test_documents_deeper_than_mongod_stores_are_refused(client):
    c = client.sent.deep
    c.insert_one({"_id": 1, "a": 1})
    wrap = [{"$replaceWith": {"a": "$$ROOT"}}] * 200
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, wrap)
    assert e.value.code == 15
    with pytest.raises(OperationFailure) as e:
        c.aggregate([*wrap, {"$set": {"_id": 2}}, {"$out": "deep_out"}])
    assert e.value.code == 15
    # Nothing unreadable was stored: both collections scan.
    assert list(c.find({"a": 1})) == [{"_id": 1, "a": 1}]
    assert list(client.sent.deep_out.find({})) == []
    c.update_one({"_id": 1}, wrap[:170])  # 171 levels: stored and read back
    assert c.count_documents({}) == 1 and len(list(c.find({}))) == 1
    # Update operators reach the limit too: 20 more levels under the deepest path.
    deep = 1
    for _ in range(20):
        deep = {"d": deep}
    with pytest.raises(WriteError) as e:
        c.update_one({"_id": 1}, {"$set": {".".join(["a"] * 170) + ".x": deep}})
    assert (e.value.code, e.value.details["errmsg"]) == (15, "Document exceeds maximum nesting depth of 180")
    assert c.find_one({"_id": 1}, {"_id": 1}) == {"_id": 1}


def test_names_with_a_null_byte_are_refused_not_a_crash(client):
    c = client.sent.nul
    c.insert_one({"_id": 1})
    with client.start_session() as s:  # a retryable findAndModify records its answer
        with pytest.raises(OperationFailure) as e:
            c.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}, session=s,
                                  projection={"y": {"$setField": {"field": "a\x00b", "input": {}, "value": 1}}})
        assert e.value.code == 16411
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$count": "a\x00b"}]))
    assert e.value.code == 40159
    with pytest.raises(OperationFailure) as e:
        list(c.aggregate([{"$project": {"v": "$a\x00b"}}]))
    assert e.value.code == 16411
    assert c.find_one({"_id": 1}) == {"_id": 1}
