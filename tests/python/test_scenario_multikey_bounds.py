"""`../shared/scenarios/multikey-bounds.md`, step by step through pymongo,
with the server restarted between steps so the multikey metadata is
shown to survive (it is read back from the catalog, not kept in memory)."""

import pytest
from pymongo.errors import OperationFailure, WriteError

from conftest import Server

RANGE = {"field1": {"$gt": 1, "$lt": 3}}


def explain(db, filter, hint=None, verbosity="executionStats"):
    """The explain of `db.demo.find(filter)` (pymongo's Cursor.explain
    takes no verbosity)."""
    find = {"find": "demo", "filter": filter}
    if hint:
        find["hint"] = hint
    return db.command("explain", find, verbosity=verbosity)


def stages(explain):
    """The executed FETCH stage and its IXSCAN."""
    fetch = explain["executionStats"]["executionStages"]
    assert fetch["stage"] == "FETCH"
    return fetch, fetch["inputStage"]


@pytest.fixture
def restarting(datadir):
    """A client whose `restart()` kills the server cleanly and starts it again."""
    class Session:
        def __init__(self):
            self.server = Server(datadir / "db")
            self.client = self.server.client()

        def restart(self):
            self.client.close()
            assert self.server.stop() == 0
            self.server = Server(datadir / "db")
            self.client = self.server.client()
            return self.client.test

    s = Session()
    yield s
    s.client.close()
    assert s.server.stop() == 0


def test_multikey_bounds_scenario(restarting):
    db = restarting.client.test
    assert db.demo.create_index([("field1", 1), ("field2", 1)]) == "field1_1_field2_1"
    db.demo.insert_one({"_id": 0, "field1": 2, "field2": "y"})
    e = explain(db, RANGE)
    fetch, ixscan = stages(e)
    assert e["executionStats"]["nReturned"] == 1
    assert e["executionStats"]["totalKeysExamined"] == 1
    assert e["executionStats"]["totalDocsExamined"] == 1
    assert {k: ixscan[k] for k in ("keyPattern", "indexName", "isMultiKey", "multiKeyPaths", "isUnique",
                                   "isSparse", "isPartial", "indexVersion", "direction", "indexBounds",
                                   "keysExamined", "seeks", "dupsTested", "dupsDropped")} == {
        "keyPattern": {"field1": 1, "field2": 1}, "indexName": "field1_1_field2_1", "isMultiKey": False,
        "multiKeyPaths": {"field1": [], "field2": []}, "isUnique": False, "isSparse": False,
        "isPartial": False, "indexVersion": 2, "direction": "forward",
        "indexBounds": {"field1": ["(1, 3)"], "field2": ["[MinKey, MaxKey]"]},
        "keysExamined": 1, "seeks": 1, "dupsTested": 0, "dupsDropped": 0}
    assert "filter" not in fetch
    planned = e["queryPlanner"]["winningPlan"]
    assert planned["stage"] == "FETCH" and planned["inputStage"]["stage"] == "IXSCAN"
    assert "keysExamined" not in planned["inputStage"], "queryPlanner shows the plan, not its run"

    # Step 2: an array in the second field.
    db.demo.insert_one({"_id": 1, "field1": 2, "field2": ["x", "y", "z"]})
    db = restarting.restart()
    e = explain(db, RANGE)
    fetch, ixscan = stages(e)
    assert (e["executionStats"]["nReturned"], e["executionStats"]["totalKeysExamined"],
            e["executionStats"]["totalDocsExamined"]) == (2, 4, 2)
    assert ixscan["isMultiKey"] is True
    assert ixscan["multiKeyPaths"] == {"field1": [], "field2": ["field2"]}
    assert ixscan["indexBounds"] == {"field1": ["(1, 3)"], "field2": ["[MinKey, MaxKey]"]}
    assert (ixscan["dupsTested"], ixscan["dupsDropped"]) == (4, 2)
    assert "filter" not in fetch

    # Step 3: an array in the first field.
    db.demo.insert_one({"_id": 2, "field1": [0, 5], "field2": "x"})
    db = restarting.restart()
    assert sorted(d["_id"] for d in db.demo.find(RANGE)) == [0, 1, 2]
    e = explain(db, RANGE)
    fetch, ixscan = stages(e)
    assert (e["executionStats"]["nReturned"], e["executionStats"]["totalKeysExamined"],
            e["executionStats"]["totalDocsExamined"]) == (3, 5, 3)
    assert ixscan["multiKeyPaths"] == {"field1": ["field1"], "field2": ["field2"]}
    assert ixscan["indexBounds"] == {"field1": ["[-inf.0, 3)"], "field2": ["[MinKey, MaxKey]"]}
    assert fetch["filter"] == {"field1": {"$gt": 1}}
    assert (ixscan["dupsTested"], ixscan["dupsDropped"]) == (5, 2)
    assert list(db.demo.find({"field1": {"$elemMatch": {"$gt": 1, "$lt": 3}}})) == []

    # Step 4: parallel arrays are refused, and nothing is written.
    with pytest.raises(WriteError) as err:
        db.demo.insert_one({"_id": 3, "field1": [0, 5], "field2": ["x", "y", "z"]})
    assert err.value.code == 171
    assert err.value.details["errmsg"] == "cannot index parallel arrays [field2] [field1]"
    assert db.demo.count_documents({}) == 3
    db.other.insert_one({"_id": 3, "field1": [0, 5], "field2": ["x", "y", "z"]})
    with pytest.raises(OperationFailure) as err:
        db.other.create_index([("field1", 1), ("field2", 1)])
    assert err.value.code == 171
    assert err.value.details["errmsg"] == "cannot index parallel arrays [field2] [field1]"

    # Step 5: nested paths.
    db.demo.create_index([("obj.sub1", 1), ("obj.sub2", 1)])
    db.demo.insert_one({"_id": 4, "obj": {"sub1": [1, 2, 3], "sub2": "x"}})
    db = restarting.restart()
    nested = {"obj.sub1": {"$gt": 1}, "obj.sub2": {"$lt": 3}}
    _, ixscan = stages(explain(db, nested))
    assert ixscan["isMultiKey"] is True
    assert ixscan["multiKeyPaths"] == {"obj.sub1": ["obj.sub1"], "obj.sub2": []}
    assert ixscan["indexBounds"] == {"obj.sub1": ["(1, inf.0]"], "obj.sub2": ["[-inf.0, 3)"]}

    db.demo.insert_one({"_id": 5, "obj": [{"sub1": [1, 2, 3], "sub2": "x"}]})
    db = restarting.restart()
    fetch, ixscan = stages(explain(db, nested))
    assert ixscan["multiKeyPaths"] == {"obj.sub1": ["obj", "obj.sub1"], "obj.sub2": ["obj"]}
    assert ixscan["indexBounds"] == {"obj.sub1": ["(1, inf.0]"], "obj.sub2": ["[MinKey, MaxKey]"]}
    assert fetch["filter"] == {"obj.sub2": {"$lt": 3}}
    # Within one `$elemMatch` on the shared prefix, both fields get bounds.
    elem = {"obj": {"$elemMatch": {"sub1": {"$gt": 1}, "sub2": {"$lt": 3}}}}
    fetch, ixscan = stages(explain(db, elem))
    assert ixscan["indexBounds"] == {"obj.sub1": ["(1, inf.0]"], "obj.sub2": ["[-inf.0, 3)"]}
    assert fetch["filter"] == elem
    db.demo.insert_one({"_id": 6, "obj": [{"sub1": [0, 7], "sub2": 2}, {"sub1": 9, "sub2": "y"}]})
    assert [d["_id"] for d in db.demo.find(elem)] == [6]


def test_elem_match_intersects_bounds_again(client):
    db = client.test
    db.demo.create_index([("field1", 1), ("field2", 1)])
    db.demo.insert_many([{"_id": 0, "field1": 2}, {"_id": 2, "field1": [0, 5]}, {"_id": 3, "field1": [9, 2]}])
    query = {"field1": {"$elemMatch": {"$gt": 1, "$lt": 3}}}
    e = explain(db, query)
    fetch, ixscan = stages(e)
    assert ixscan["indexBounds"]["field1"] == ["(1, 3)"]
    assert fetch["filter"] == query
    assert e["executionStats"]["nReturned"] == 1
    assert [d["_id"] for d in db.demo.find(query)] == [3]


def test_explain_of_count_distinct_and_writes_shows_the_index_plan(client):
    db = client.test
    db.demo.create_index([("field1", 1), ("field2", 1)])
    db.demo.insert_many([{"_id": i, "field1": i % 4, "field2": "x"} for i in range(12)])

    def plan(cmd, verbosity="executionStats"):
        return db.command("explain", cmd, verbosity=verbosity)

    e = plan({"count": "demo", "query": {"field1": 2}})
    assert e["queryPlanner"]["winningPlan"]["stage"] == "COUNT"
    assert e["queryPlanner"]["winningPlan"]["inputStage"]["inputStage"]["stage"] == "IXSCAN"
    assert e["executionStats"]["totalKeysExamined"] == 3
    e = plan({"distinct": "demo", "key": "field2", "query": {"field1": {"$gte": 3}}})
    assert "IXSCAN" in str(e["queryPlanner"]["winningPlan"])
    e = plan({"update": "demo", "updates": [{"q": {"field1": 1}, "u": {"$set": {"y": 1}}, "multi": True}]})
    stages = e["executionStats"]["executionStages"]
    assert stages["stage"] == "UPDATE" and stages["nMatched"] == 3 and stages["nWouldModify"] == 3
    assert stages["inputStage"]["stage"] == "FETCH"
    e = plan({"delete": "demo", "deletes": [{"q": {"field1": 0}, "limit": 0}]})
    assert e["executionStats"]["executionStages"]["stage"] == "DELETE"
    assert e["executionStats"]["executionStages"]["nWouldDelete"] == 3
    e = plan({"findAndModify": "demo", "query": {"field1": 3}, "remove": True}, "queryPlanner")
    assert e["queryPlanner"]["winningPlan"]["stage"] == "DELETE"
    assert db.demo.count_documents({}) == 12 and db.demo.count_documents({"y": 1}) == 0, "explain writes nothing"
