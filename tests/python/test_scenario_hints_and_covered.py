"""`../shared/scenarios/hints-and-covered.md` through pymongo: the planner's
choice, covered queries, hint(), and sparse indexes."""

import pytest
from pymongo.errors import OperationFailure

PEOPLE = [
    {"_id": 1, "name": "Alice", "age": 30},
    {"_id": 2, "name": "Bob"},
    {"_id": 3, "name": "Charlie", "age": None},
    {"_id": 4, "name": "Dave", "age": 35, "status": "active"},
    {"_id": 5, "name": "Eve", "age": 28, "status": "inactive"},
]
QUERY = {"age": {"$gte": 28}}
PROJECTION = {"_id": 0, "age": 1, "name": 1}


def explain(db, hint=None, **extra):
    find = {"find": "demo", "filter": QUERY, "projection": PROJECTION, **extra}
    if hint:
        find["hint"] = hint
    return db.command("explain", find, verbosity="executionStats")


def chain(stage):
    """Stage names from the top down."""
    out = []
    while stage:
        out.append(stage["stage"])
        stage = stage.get("inputStage")
    return out


def ixscan(stage):
    while stage["stage"] != "IXSCAN":
        stage = stage["inputStage"]
    return stage


@pytest.fixture
def db(client):
    client.test.demo.insert_many(PEOPLE)
    return client.test


def test_sort_puts_missing_before_null(db):
    assert [d["name"] for d in db.demo.find().sort("age", 1)] == ["Bob", "Charlie", "Eve", "Alice", "Dave"]


def test_the_planner_scans_then_uses_an_index_then_a_covering_one(db):
    want = [{"name": "Alice", "age": 30}, {"name": "Dave", "age": 35}, {"name": "Eve", "age": 28}]
    assert list(db.demo.find(QUERY, PROJECTION)) == want
    e = explain(db)
    stats = e["executionStats"]
    assert chain(stats["executionStages"]) == ["PROJECTION_SIMPLE", "COLLSCAN"]
    assert stats["executionStages"]["inputStage"]["filter"] == {"age": {"$gte": 28}}
    assert stats["executionStages"]["transformBy"] == PROJECTION
    assert (stats["nReturned"], stats["totalKeysExamined"], stats["totalDocsExamined"]) == (3, 0, 5)

    db.demo.create_index("age", name="idx_age")
    e = explain(db)
    stats = e["executionStats"]
    assert chain(stats["executionStages"]) == ["PROJECTION_SIMPLE", "FETCH", "IXSCAN"]
    assert ixscan(stats["executionStages"])["indexBounds"] == {"age": ["[28, inf.0]"]}
    assert (stats["totalKeysExamined"], stats["totalDocsExamined"]) == (3, 3)

    db.demo.create_index([("age", 1), ("name", 1)], name="idx_age_name")
    e = explain(db)
    stats = e["executionStats"]
    assert chain(stats["executionStages"]) == ["PROJECTION_COVERED", "IXSCAN"]
    scan = ixscan(stats["executionStages"])
    assert scan["indexName"] == "idx_age_name"
    assert scan["indexBounds"] == {"age": ["[28, inf.0]"], "name": ["[MinKey, MaxKey]"]}
    assert (stats["totalKeysExamined"], stats["totalDocsExamined"]) == (3, 0)
    rejected = e["queryPlanner"]["rejectedPlans"]
    assert [ixscan(p)["indexName"] for p in rejected] == ["idx_age"]
    assert e["queryPlanner"]["winningPlan"]["isCached"] is False
    # The race's choice is cached for the shape, whatever the values.
    again = db.command("explain", {"find": "demo", "filter": {"age": {"$gte": 30}}, "projection": PROJECTION})
    assert again["queryPlanner"]["winningPlan"]["isCached"] is True
    assert ixscan(again["queryPlanner"]["winningPlan"])["indexName"] == "idx_age_name"
    db.command("planCacheClear", "demo")
    again = db.command("explain", {"find": "demo", "filter": {"age": {"$gte": 30}}, "projection": PROJECTION})
    assert again["queryPlanner"]["winningPlan"]["isCached"] is False
    assert sorted(db.demo.find(QUERY, PROJECTION), key=lambda d: d["age"]) == sorted(want, key=lambda d: d["age"])

    # hint() forces the index, by name or key pattern.
    for hint in ["idx_age", [("age", 1)]]:
        e = explain(db, hint if isinstance(hint, str) else dict(hint))
        assert chain(e["executionStats"]["executionStages"]) == ["PROJECTION_SIMPLE", "FETCH", "IXSCAN"]
        assert ixscan(e["executionStats"]["executionStages"])["indexName"] == "idx_age"
    with pytest.raises(OperationFailure) as err:
        list(db.demo.find(QUERY).hint("nope"))
    assert err.value.code == 2
    assert "hint provided does not correspond to an existing index" in str(err.value)


def test_a_sparse_index_hinted_omits_documents_without_the_field(db):
    db.demo.create_index("age", sparse=True, name="age_sparse")
    names = [d["name"] for d in db.demo.find().hint("age_sparse").sort("age", 1)]
    assert names == ["Charlie", "Eve", "Alice", "Dave"]
    # Unhinted, the planner never takes it for a query that would lose Bob.
    assert [d["name"] for d in db.demo.find().sort("age", 1)] == ["Bob", "Charlie", "Eve", "Alice", "Dave"]


def test_max_with_a_hint_stops_the_scan(db):
    db.demo.create_index("age", name="idx_age")
    got = list(db.demo.find(QUERY, PROJECTION).hint("idx_age").max([("age", 31)]))
    assert got == [{"name": "Eve", "age": 28}, {"name": "Alice", "age": 30}]
    e = explain(db, "idx_age", max={"age": 31})
    stats = e["executionStats"]
    assert (stats["totalKeysExamined"], stats["totalDocsExamined"]) == (4, 4)
    assert stats["executionStages"]["inputStage"]["filter"] == {"age": {"$gte": 28}}
    # (pymongo refuses it before sending; the server's own answer:)
    with pytest.raises(OperationFailure) as err:
        db.command({"find": "demo", "filter": QUERY, "max": {"age": 31}})
    assert err.value.code == 51173
    with pytest.raises(OperationFailure) as err:
        list(db.demo.find(QUERY).hint("idx_age").max([("name", 31)]))
    assert err.value.code == 51174
    with pytest.raises(OperationFailure) as err:
        list(db.demo.find(QUERY).hint("idx_age").min([("age", 40)]).max([("age", 31)]))
    assert err.value.code == 51175


def test_a_partial_index_is_used_only_when_the_filter_implies_it(db):
    db.demo.create_index("age", partialFilterExpression={"status": "active"}, name="age_active_partial")
    e = db.command("explain", {"find": "demo", "filter": {"age": {"$gte": 30}, "status": "active"}})
    assert ixscan(e["queryPlanner"]["winningPlan"])["isPartial"] is True
    assert [d["name"] for d in db.demo.find({"age": {"$gte": 30}, "status": "active"})] == ["Dave"]
    e = db.command("explain", {"find": "demo", "filter": {"age": {"$gte": 30}}})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"
