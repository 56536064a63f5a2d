"""Write-optimized indexes (issue 22): chosen per index with MongoDB's own
per-index storage option, shown by listIndexes, explain and collStats,
refused where uniqueness would need a read of the index, and answering
exactly as a B+tree index does through memtable freezes, merges and a
restart."""

import random

import pytest
from pymongo.errors import OperationFailure

from conftest import Server

WO = {"arbordb": {"format": "write-optimized"}}


def ixscan(plan):
    stage = plan["queryPlanner"]["winningPlan"]
    while stage["stage"] != "IXSCAN":
        stage = stage["inputStage"]
    return stage


def test_listindexes_explain_and_collstats_show_the_format(client):
    c = client.test.wo
    c.create_index("uri", storageEngine=WO)
    c.create_index("n")
    c.insert_many([{"_id": i, "n": i, "uri": [f"u{i}", f"u{i + 1}"]} for i in range(50)])
    specs = {ix["name"]: ix for ix in c.list_indexes()}
    assert specs["uri_1"]["storageEngine"] == WO
    assert "storageEngine" not in specs["n_1"]
    wo = ixscan(client.test.command("explain", {"find": "wo", "filter": {"uri": "u7"}}))
    assert (wo["indexName"], wo["storageFormat"]) == ("uri_1", "write-optimized")
    bt = ixscan(client.test.command("explain", {"find": "wo", "filter": {"n": 7}}))
    assert bt["indexName"] == "n_1" and "storageFormat" not in bt
    details = client.test.command("collStats", "wo")["indexDetails"]
    assert details["n_1"] == {"arbordb": {"format": "btree"}}
    uri = details["uri_1"]["arbordb"]
    assert uri["format"] == "write-optimized" and uri["runs"] == len(uri["runBytes"]) >= 1
    assert uri["runBytes"][0] > 0, uri  # the memtable holds the 100 entries
    assert sorted(d["_id"] for d in c.find({"uri": "u7"})) == [6, 7]


@pytest.mark.parametrize(
    "options, code",
    [
        ({"storageEngine": WO, "unique": True}, 67),
        ({"storageEngine": WO, "prepareUnique": True}, 67),
        ({"storageEngine": 5}, 14),
        ({"storageEngine": {"wiredTiger": {}}}, 72),
        ({"storageEngine": {"arbordb": 1}}, 2),
        ({"storageEngine": {"arbordb": {"format": "lsm"}}}, 72),
        ({"storageEngine": {"arbordb": {"format": 1}}}, 72),
        ({"storageEngine": {"arbordb": {"compressor": "zstd"}}}, 72),
    ],
)
def test_bad_storage_options_are_refused_and_change_nothing(client, options, code):
    c = client.test.bad
    c.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as e:
        c.create_index("a", **options)
    assert e.value.code == code, e.value.details
    assert [ix["name"] for ix in c.list_indexes()] == ["_id_"]


def test_a_write_optimized_index_cannot_be_made_unique(client):
    c = client.test.cm
    c.create_index("a", storageEngine=WO)
    c.insert_one({"a": 1})
    for change in [{"prepareUnique": True}, {"unique": True}]:
        with pytest.raises(OperationFailure) as e:
            client.test.command("collMod", "cm", index={"name": "a_1", **change})
        assert e.value.code == 72, e.value.details
    spec = next(ix for ix in c.list_indexes() if ix["name"] == "a_1")
    assert "unique" not in spec and "prepareUnique" not in spec
    # The B+tree format stays available for unique indexes.
    c.create_index("b", unique=True, storageEngine={"arbordb": {"format": "btree"}})


def document(rng, i):
    return {"_id": i, "ts": i, "uri": [f"https://example.com/{rng.randrange(3000):05d}" for _ in range(rng.randrange(0, 12))]}


QUERIES = [
    lambda rng: {"uri": f"https://example.com/{rng.randrange(3000):05d}"},
    lambda rng: {"uri": {"$in": [f"https://example.com/{rng.randrange(3000):05d}" for _ in range(3)]}},
    lambda rng: {"uri": {"$gte": f"https://example.com/{rng.randrange(3000):05d}", "$lt": f"https://example.com/{rng.randrange(3000):05d}"}},
    lambda rng: {"uri": {"$elemMatch": {"$gt": f"https://example.com/{rng.randrange(3000):05d}", "$lt": "https://example.com/2"}}},
]


def check_same(client, rng, rounds):
    """Every query answers on the write-optimized index as on a B+tree one
    (and through it: explain says so), both ways of sorting."""
    for _ in range(rounds):
        flt = rng.choice(QUERIES)(rng)
        for direction in (1, -1):
            got = [d["_id"] for d in client.test.wo.find(flt).sort([("uri", direction), ("_id", 1)])]
            want = [d["_id"] for d in client.test.bt.find(flt).sort([("uri", direction), ("_id", 1)])]
            assert got == want, (flt, direction)
        assert client.test.wo.count_documents(flt) == client.test.bt.count_documents(flt), flt
        plan = client.test.command("explain", {"find": "wo", "filter": flt})
        assert ixscan(plan)["storageFormat"] == "write-optimized", flt


def write(client, rng, n):
    """The same random inserts, updates and deletes on both collections."""
    for _ in range(n):
        i = rng.randrange(4000)
        r = rng.random()
        for coll in (client.test.wo, client.test.bt):
            state = random.Random(i * 7919 + n)
            if r < 0.5:
                coll.replace_one({"_id": i}, document(state, i), upsert=True)
            elif r < 0.8:
                coll.update_one({"_id": i}, {"$push": {"uri": f"https://example.com/{state.randrange(3000):05d}"}})
            else:
                coll.delete_one({"_id": i})


def test_answers_as_a_btree_index_through_freezes_merges_and_a_restart(datadir):
    """A 64 KiB memtable freezes every few hundred entries, so the index
    lives in many runs, merged in the background; after a restart the
    runs come back from the manifest."""
    extra = ("--memtable-kib", "64", "--cache-mib", "16")
    rng = random.Random(22)
    server = Server(datadir / "db", extra=extra)
    try:
        with server.client() as client:
            client.test.wo.create_index("uri", storageEngine=WO)
            client.test.bt.create_index("uri")
            docs = [document(rng, i) for i in range(3000)]
            client.test.wo.insert_many(docs)
            client.test.bt.insert_many(docs)
            check_same(client, rng, 60)
            write(client, rng, 600)
            check_same(client, rng, 60)
            status = client.admin.command("serverStatus")["arbordb"]
            assert status["memtables_frozen"] > 20 and status["runs_merged"] > 3, status
            runs = client.test.command("collStats", "wo")["indexDetails"]["uri_1"]["arbordb"]["runs"]
            assert 1 < runs < 16, runs
    finally:
        assert server.stop() == 0
    server = Server(datadir / "db", extra=extra)
    try:
        with server.client() as client:
            spec = next(ix for ix in client.test.wo.list_indexes() if ix["name"] == "uri_1")
            assert spec["storageEngine"] == WO
            check_same(client, rng, 60)
            write(client, rng, 300)
            check_same(client, rng, 30)
            assert client.test.command("validate", "wo")["valid"] is True
    finally:
        assert server.stop() == 0


def test_parallel_arrays_give_tight_bounds_on_both_fields(client):
    """`parallelArrays: true` (our extension): a compound index over two
    arrays holds every pair of their elements, so `{a, b}` gets point
    bounds on both; without it, 171 as MongoDB; past the cap of keys per
    document, our own error, and nothing written."""
    c = client.test.par
    c.create_index([("a", 1), ("b", 1)], parallelArrays=True)
    spec = next(ix for ix in c.list_indexes() if ix["name"] == "a_1_b_1")
    assert spec["parallelArrays"] is True
    c.insert_many([{"_id": 1, "a": [1, 2], "b": [3, 4]}, {"_id": 2, "a": [2], "b": [5]}, {"_id": 3, "a": 1, "b": 4}])
    assert sorted(d["_id"] for d in c.find({"a": 2, "b": 3})) == [1]
    assert sorted(d["_id"] for d in c.find({"a": 1, "b": {"$gte": 4}})) == [1, 3]
    plan = client.test.command("explain", {"find": "par", "filter": {"a": 2, "b": 3}}, verbosity="executionStats")
    scan = ixscan(plan)
    assert scan["indexBounds"] == {"a": ["[2, 2]"], "b": ["[3, 3]"]}, scan
    assert scan["isMultiKey"] is True and scan["multiKeyPaths"] == {"a": ["a"], "b": ["b"]}
    assert plan["executionStats"]["totalKeysExamined"] == 1
    # Past the cap: 101 x 100 pairs.
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"_id": 4, "a": list(range(101)), "b": list(range(100))})
    assert e.value.code == 22000001 and "more than 10000 keys" in e.value.details["errmsg"], e.value.details
    assert c.count_documents({}) == 3 and c.find_one({"_id": 4}) is None
    # Without the option: MongoDB's refusal.
    other = client.test.nopar
    other.create_index([("a", 1), ("b", 1)])
    with pytest.raises(OperationFailure) as e:
        other.insert_one({"a": [1, 2], "b": [3, 4]})
    assert e.value.code == 171
    # Only for compound, non-unique, non-hashed indexes.
    for keys, extra in [([("a", 1)], {}), ([("a", 1), ("b", 1)], {"unique": True}), ([("a", "hashed"), ("b", 1)], {})]:
        with pytest.raises(OperationFailure) as e:
            client.test.bad2.create_index(keys, parallelArrays=True, **extra)
        assert e.value.code == 67, e.value.details
