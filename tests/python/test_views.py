"""Views: `create` with viewOn and pipeline; reads (find, count, distinct,
aggregate, getMore) run the view's pipeline over its collection (through
views on views); writes and storage commands fail with
CommandNotSupportedOnView; listCollections and dbStats show them; they
persist across restart."""

import pytest
from pymongo.errors import OperationFailure, WriteError

from conftest import Server

@pytest.fixture
def db(client):
    db = client.test
    db.items.insert_many([{"_id": i, "qty": i % 5, "kind": "ab"[i % 2], "secret": i} for i in range(40)])
    db.command("create", "stock", viewOn="items", pipeline=[{"$match": {"qty": {"$gt": 0}}},
                                                            {"$project": {"qty": 1, "kind": 1}}])
    return db


def test_find_on_a_view_runs_its_pipeline(db):
    docs = list(db.stock.find())
    assert len(docs) == 32 and all(set(d) == {"_id", "qty", "kind"} and d["qty"] > 0 for d in docs)
    assert [d["_id"] for d in docs] == [i for i in range(40) if i % 5]
    got = list(db.stock.find({"kind": "a"}, {"qty": 1}, sort=[("qty", -1), ("_id", 1)], skip=2, limit=4))
    want = sorted(({"_id": i, "qty": i % 5} for i in range(40) if i % 5 and i % 2 == 0),
                  key=lambda d: (-d["qty"], d["_id"]))[2:6]
    assert got == want
    assert db.stock.find_one({"_id": 3}) == {"_id": 3, "qty": 3, "kind": "b"}
    assert db.stock.find_one({"_id": 5}) is None  # filtered out by the view
    cursor = db.stock.find(batch_size=5)
    assert len(list(cursor)) == 32


def test_an_unsorted_view_read_is_not_a_blocking_sort(client, db):
    # Far below the view's size: only a sort may hit this limit.
    client.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=100)
    docs = list(db.stock.find(skip=3, limit=5, allow_disk_use=False))
    assert [d["_id"] for d in docs] == [i for i in range(40) if i % 5][3:8]
    with pytest.raises(OperationFailure) as e:
        list(db.stock.find(sort=[("qty", 1)], allow_disk_use=False))
    assert e.value.code == 292


def test_count_distinct_and_aggregate_on_a_view(db):
    assert db.stock.count_documents({}) == 32
    assert db.stock.count_documents({"qty": 4}) == 8
    assert db.stock.estimated_document_count() == 32
    assert sorted(db.stock.distinct("qty")) == [1, 2, 3, 4]
    got = list(db.stock.aggregate([{"$group": {"_id": "$kind", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]))
    assert got == [{"_id": "a", "n": 16}, {"_id": "b", "n": 16}]


def test_a_view_on_a_view(db):
    db.command("create", "big", viewOn="stock", pipeline=[{"$match": {"qty": {"$gte": 3}}}])
    assert db.big.count_documents({}) == 16
    assert all(set(d) == {"_id", "qty", "kind"} for d in db.big.find())


def test_writes_and_storage_commands_on_a_view_fail_and_change_nothing(db):
    def view_error(e):
        return e.value.code == 166 and e.value.details["errmsg"] == "Namespace test.stock is a view, not a collection"

    for write in [lambda: db.stock.insert_one({"_id": 100}),
                  lambda: db.stock.update_one({"_id": 1}, {"$set": {"qty": 9}}),
                  lambda: db.stock.delete_one({"_id": 1}),
                  lambda: db.stock.find_one_and_update({"_id": 1}, {"$set": {"qty": 9}}),
                  lambda: db.command("collStats", "stock")]:
        with pytest.raises((OperationFailure, WriteError)) as e:
            write()
        assert view_error(e)
    assert db.items.count_documents({}) == 40 and db.items.find_one({"_id": 1})["qty"] == 1


def test_views_are_listed_counted_and_dropped(db):
    entries = {c["name"]: c for c in db.list_collections()}
    assert entries["stock"]["type"] == "view" and entries["stock"]["info"] == {"readOnly": True}
    assert entries["stock"]["options"]["viewOn"] == "items"
    assert "idIndex" not in entries["stock"] and entries["items"]["type"] == "collection"
    assert {c["name"]: c["type"] for c in db.list_collections(filter={"type": "view"})} == {"stock": "view"}
    stats = db.command("dbStats")
    assert (stats["views"], stats["collections"]) == (1, 1)
    db.stock.drop()
    assert db.list_collection_names() == ["items"]


@pytest.mark.parametrize(
    "options, code",
    [
        ({"viewOn": 5}, 14),
        ({"pipeline": []}, 2),
        ({"viewOn": "items", "pipeline": "x"}, 14),
        ({"viewOn": "items", "pipeline": [{"$frob": 1}]}, 40324),
        ({"viewOn": ""}, 2),
    ],
)
def test_bad_view_options_are_refused(db, options, code):
    with pytest.raises(OperationFailure) as e:
        db.command("create", "v", **options)
    assert e.value.code == code
    assert "v" not in db.list_collection_names()


def test_a_view_cycle_is_refused(db):
    db.command("create", "a", viewOn="b")
    with pytest.raises(OperationFailure) as e:
        db.command("create", "b", viewOn="a")
    assert e.value.code == 5 and e.value.details["codeName"] == "GraphContainsCycle"


def test_views_persist_across_restart(datadir):
    s = Server(datadir / "db")
    with s.client() as c:
        c.test.items.insert_many([{"_id": i, "qty": i} for i in range(5)])
        c.test.command("create", "stock", viewOn="items", pipeline=[{"$match": {"qty": {"$gt": 2}}}])
    assert s.stop() == 0
    s = Server(datadir / "db", port=s.port)
    try:
        with s.client() as c:
            assert [d["_id"] for d in c.test.stock.find()] == [3, 4]
    finally:
        assert s.stop() == 0


def test_a_find_on_a_view_produces_its_documents_as_it_is_read(client):
    """The first batch comes before the view's pipeline has read its
    collection: an expression failing on a later document fails the
    getMore that reaches it, as a mongod view read does."""
    db = client.test
    db.nums.insert_many([{"_id": i, "d": 0 if i == 700 else 2} for i in range(1000)])
    db.command("create", "ratios", viewOn="nums", pipeline=[{"$project": {"q": {"$divide": [10, "$d"]}}}])
    cursor = db.ratios.find({"q": 5}, skip=3, batch_size=100)
    first = [next(cursor) for _ in range(100)]
    assert first == [{"_id": i, "q": 5.0} for i in range(3, 103)]
    with pytest.raises(OperationFailure) as e:
        list(cursor)
    assert e.value.code == 2
    # Positional projection still sees the view filter's match position.
    db.arr.insert_many([{"_id": 1, "a": [1, 5, 9]}, {"_id": 2, "a": [7]}])
    db.command("create", "arrv", viewOn="arr", pipeline=[])
    assert list(db.arrv.find({"a": {"$gt": 6}}, {"a.$": 1})) == [{"_id": 1, "a": [9]}, {"_id": 2, "a": [7]}]
    # Dropping the collection under the view kills a cursor still reading it.
    cursor = db.ratios.find({}, limit=600, batch_size=10)
    assert len([next(cursor) for _ in range(10)]) == 10
    db.nums.drop()
    with pytest.raises(OperationFailure) as e:
        list(cursor)
    assert e.value.code == 175


def test_explain_of_a_read_of_a_view_explains_the_aggregate_it_becomes(client):
    """mongod turns a find on a view into an aggregate on the collection
    under it (the view's pipeline, then the find's filter, sort, skip,
    limit and projection as stages) and explains that."""
    db = client.test
    db.c.create_index("a")
    db.c.insert_many([{"_id": i, "a": i % 5, "b": i % 2} for i in range(20)])
    db.create_collection("plain", viewOn="c", pipeline=[])
    db.create_collection("odd", viewOn="c", pipeline=[{"$match": {"b": 1}}])
    plain = db.plain.find({"a": 2}).explain()
    assert plain["queryPlanner"]["namespace"] == "test.c"
    assert plain["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN"
    assert plain["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "a_1"
    assert plain["executionStats"]["nReturned"] == 4
    # The view's `$match` and the find's are one: the read answers all.
    odd = db.odd.find({"a": 3}).sort("a", 1).limit(2).explain()
    assert odd["queryPlanner"]["parsedQuery"] == {"$and": [{"a": {"$eq": 3}}, {"b": {"$eq": 1}}]}
    assert odd["executionStats"]["nReturned"] == 2 and "stages" not in odd
    # Past a stage the read cannot answer, the rest are stages: the
    # `$sort` absorbs the `$limit` after it; each shows its figures.
    # (A `$match` on a field the `$addFields` makes cannot move before it.)
    db.create_collection("tagged", viewOn="c", pipeline=[{"$match": {"b": 1}}, {"$addFields": {"t": "$a"}}])
    tagged = db.tagged.find({"t": 3}).sort("t", 1).limit(2).explain()
    cursor = tagged["stages"][0]["$cursor"]
    assert cursor["queryPlanner"]["namespace"] == "test.c"
    assert cursor["queryPlanner"]["parsedQuery"] == {"b": {"$eq": 1}}
    assert [list(s)[0] for s in tagged["stages"][1:]] == ["$addFields", "$match", "$sort"]
    assert tagged["stages"][3]["$sort"] == {"sortKey": {"t": 1}, "limit": 2}
    assert [s["nReturned"] for s in tagged["stages"]] == [10, 10, 2, 2]
    grouped = db.command("explain", {"aggregate": "odd", "pipeline": [{"$group": {"_id": "$a"}}], "cursor": {}},
                         verbosity="queryPlanner")
    assert grouped["stages"][0]["$cursor"]["queryPlanner"]["namespace"] == "test.c"
    assert list(grouped["stages"][1]) == ["$group"]
    # A count and a distinct explain as the aggregates they become; the
    # view's `$match` and the query's are one, planned together.
    counted = db.command("explain", {"count": "odd", "query": {"a": 3}}, verbosity="executionStats")
    cursor = counted["stages"][0]["$cursor"]
    assert cursor["queryPlanner"]["parsedQuery"] == {"$and": [{"a": {"$eq": 3}}, {"b": {"$eq": 1}}]}
    assert cursor["queryPlanner"]["winningPlan"]["inputStage"]["indexBounds"] == {"a": ["[3, 3]"]}
    assert cursor["executionStats"]["totalKeysExamined"] == 4
    assert counted["stages"][1:] == [
        {"$group": {"_id": {"$const": None}, "count": {"$sum": {"$const": 1}}}, "nReturned": 1,
         "executionTimeMillisEstimate": counted["stages"][1]["executionTimeMillisEstimate"]},
        {"$project": {"count": True, "_id": False}, "nReturned": 1,
         "executionTimeMillisEstimate": counted["stages"][2]["executionTimeMillisEstimate"]},
    ]
    assert db.command("count", "odd", query={"a": 3})["n"] == 2
    db.c.insert_one({"_id": 100, "a": 9, "b": 1, "d": [{"x": 1}, {"x": [2, [3]]}, {}]})
    distinct = db.command("explain", {"distinct": "odd", "key": "d.x"}, verbosity="executionStats")
    unwound = [{"$unwind": {"path": p, "preserveNullAndEmptyArrays": True}} for p in ["$d", "$d.x"]]
    assert [{k: v for k, v in s.items() if k[0] == "$"} for s in distinct["stages"][1:]] == unwound + [
        {"$group": {"_id": None, "distinct": {"$addToSet": "$d.x"}}}]
    assert distinct["stages"][-1]["nReturned"] == 1
    assert sorted(db.odd.distinct("d.x"), key=str) == [1, 2, [3]]
    # Writes are refused on a view, their explain too.
    for write in [{"update": "odd", "updates": [{"q": {}, "u": {"$set": {"z": 1}}}]},
                  {"delete": "odd", "deletes": [{"q": {}, "limit": 0}]},
                  {"findAndModify": "odd", "query": {}, "remove": True}]:
        with pytest.raises(OperationFailure) as e:
            db.command("explain", write)
        assert e.value.code == 166, write


def test_a_find_on_a_view_reads_by_index_and_explain_keeps_the_views_collation(client):
    db = client.test
    db.c.create_index("a")
    db.c.insert_many([{"_id": i, "a": i % 5, "s": "x" if i % 2 else "X"} for i in range(20)])
    db.create_collection("plain", viewOn="c", pipeline=[])

    def accesses():
        return {s["name"]: s["accesses"]["ops"] for s in db.c.aggregate([{"$indexStats": {}}])}["a_1"]

    before = accesses()
    assert sorted(d["_id"] for d in db.plain.find({"a": 2})) == [2, 7, 12, 17]
    assert accesses() == before + 1, "the find's filter is read through the index under the view"
    # A view's default collation is its own, not its collection's.
    db.create_collection("folded", viewOn="c", pipeline=[], collation={"locale": "en", "strength": 2})
    assert db.folded.count_documents({"s": "x"}) == 20
    planner = db.folded.find({"s": "x"}).explain()["queryPlanner"]
    assert planner["namespace"] == "test.c"
    assert db.folded.find({"s": "x"}).explain()["executionStats"]["nReturned"] == 20
    with pytest.raises(OperationFailure) as e:
        db.command("explain", {"find": "folded", "filter": {}, "collation": {"locale": "fr"}})
    assert e.value.code == 167
    for option in [{"min": {"a": 1}}, {"showRecordId": True}, {"returnKey": True}, {"sort": {"$natural": 1}}]:
        with pytest.raises(OperationFailure) as e:
            db.command("explain", {"find": "plain", "filter": {}, **option})
        assert e.value.code == 168, option
