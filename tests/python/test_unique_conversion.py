"""`collMod` converting an index to unique (`prepareUnique`, then `unique:
true`, checked with `dryRun`) and back (`forceNonUnique`), as MongoDB's
manual walks through it, with mongod's errors; concurrent writers of one
new key while `prepareUnique` is set; the conversion surviving a kill."""

import signal
import threading

import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import Server


def coll_mod(db, **index):
    return own(db.command("collMod", "apples", index=index))


def own(reply):
    """A reply without the gossip every reply carries."""
    return {k: v for k, v in reply.items() if k not in ("$clusterTime", "operationTime")}


def test_the_manuals_conversion_to_unique(client):
    db = client.test
    db.apples.insert_many([{"_id": i, "type": t, "quantity": q} for i, (t, q) in enumerate(
        [("Delicious", 12), ("Macintosh", 13), ("Delicious", 13), ("Fuji", 15), ("Washington", 10)])])
    db.apples.create_index("type")
    # Not in one step.
    with pytest.raises(OperationFailure) as e:
        coll_mod(db, keyPattern={"type": 1}, unique=True)
    assert e.value.code == 72
    assert e.value.details["errmsg"] == \
        "Cannot make index unique with 'prepareUnique=false'. Run collMod to set it first."

    r = coll_mod(db, keyPattern={"type": 1}, prepareUnique=True)
    assert (r["prepareUnique_old"], r["prepareUnique_new"]) == (False, True)
    assert list(db.apples.list_indexes())[1]["prepareUnique"] is True
    with pytest.raises(DuplicateKeyError) as e:
        db.apples.insert_one({"type": "Delicious", "quantity": 20})
    assert e.value.details["errmsg"] == \
        'E11000 duplicate key error collection: test.apples index: type_1 dup key: { type: "Delicious" }'
    with pytest.raises(DuplicateKeyError):
        db.apples.update_one({"_id": 1}, {"$set": {"type": "Fuji"}})
    db.apples.insert_one({"_id": 9, "type": "Gala"})  # a new key is fine
    db.apples.update_one({"_id": 9}, {"$set": {"quantity": 3}})  # so is keeping one's own

    for dry_run in (True, False):
        with pytest.raises(OperationFailure) as e:
            db.command("collMod", "apples", index={"keyPattern": {"type": 1}, "unique": True}, dryRun=dry_run)
        assert e.value.code == 359 and e.value.details["codeName"] == "CannotConvertIndexToUnique"
        assert e.value.details["errmsg"] == ("Cannot convert the index to unique. Please resolve conflicting "
                                             "documents before running collMod again.")
        assert e.value.details["violations"] == [{"ids": [0, 2]}]
    assert "unique" not in list(db.apples.list_indexes())[1]
    # A refused conversion changes nothing else asked with it.
    with pytest.raises(OperationFailure) as e:
        coll_mod(db, name="type_1", unique=True, hidden=True)
    assert e.value.code == 359 and "hidden" not in list(db.apples.list_indexes())[1]

    db.apples.delete_one({"_id": 2})
    assert own(db.command("collMod", "apples", index={"keyPattern": {"type": 1}, "unique": True}, dryRun=True)) == \
        {"ok": 1.0}
    assert "unique" not in list(db.apples.list_indexes())[1]
    r = coll_mod(db, keyPattern={"type": 1}, unique=True)
    assert r == {"unique_new": True, "ok": 1.0}
    shown = list(db.apples.list_indexes())[1]
    assert shown["unique"] is True and "prepareUnique" not in shown
    with pytest.raises(DuplicateKeyError):
        db.apples.insert_one({"type": "Fuji"})
    assert db.apples.find_one({"type": "Fuji"}, {"_id": 1}) == {"_id": 3}
    assert db.command("validate", "apples")["valid"] is True
    # Again: nothing to do.
    assert coll_mod(db, name="type_1", unique=True) == {"ok": 1.0}

    # And back.
    r = coll_mod(db, name="type_1", forceNonUnique=True)
    assert r == {"forceNonUnique_new": True, "ok": 1.0}
    assert "unique" not in list(db.apples.list_indexes())[1]
    db.apples.insert_one({"type": "Fuji"})
    assert db.apples.count_documents({"type": "Fuji"}) == 2
    assert db.command("validate", "apples")["valid"] is True


@pytest.mark.parametrize("index, dry_run, code", [
    ({"name": "type_1", "unique": False}, False, 2),
    ({"name": "type_1", "forceNonUnique": False}, False, 2),
    ({"name": "type_1", "unique": True, "forceNonUnique": True}, False, 72),
    ({"name": "type_1", "prepareUnique": False, "hidden": True}, False, 72),
    ({"name": "type_1", "prepareUnique": "yes"}, False, 14),
    ({"name": "type_1", "hidden": True}, True, 72),
    ({"name": "type_1", "unique": True, "hidden": True}, True, 72),
    ({"name": "type_1", "unique": True, "keyPattern": {"type": 1}}, False, 72),
])
def test_bad_conversions_are_refused(client, index, dry_run, code):
    db = client.test
    db.apples.insert_many([{"type": "a"}, {"type": "b"}])
    db.apples.create_index("type")
    coll_mod(db, name="type_1", prepareUnique=True)
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "apples", index=index, dryRun=dry_run)
    assert e.value.code == code
    assert list(db.apples.list_indexes())[1] == {"v": 2, "key": {"type": 1}, "name": "type_1", "prepareUnique": True}


def test_an_index_may_be_created_prepared(client):
    db = client.test
    db.apples.insert_many([{"type": "a"}, {"type": "a"}])
    db.apples.create_index("type", prepareUnique=True)
    assert list(db.apples.list_indexes())[1]["prepareUnique"] is True
    with pytest.raises(DuplicateKeyError):
        db.apples.insert_one({"type": "a"})


def test_with_two_indexes_of_one_key_the_name_is_needed(client):
    db = client.test
    db.apples.create_index("type")
    db.apples.create_index("type", name="type_fr", collation={"locale": "fr"})
    with pytest.raises(OperationFailure) as e:
        coll_mod(db, keyPattern={"type": 1}, hidden=True)
    assert e.value.code == 181
    assert e.value.details["errmsg"].startswith("index keyPattern { type: 1 } matches 2 indexes, must use index name.")


def test_concurrent_writers_of_one_new_key_store_it_once(client):
    db = client.test
    db.apples.create_index("type")
    coll_mod(db, name="type_1", prepareUnique=True)
    for round_ in range(30):
        barrier = threading.Barrier(4)
        results = []

        def insert(n):
            barrier.wait()
            try:
                db.apples.insert_one({"_id": f"{round_}-{n}", "type": f"k{round_}"})
                results.append("ok")
            except DuplicateKeyError:
                results.append("dup")

        threads = [threading.Thread(target=insert, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["dup", "dup", "dup", "ok"], results
    assert coll_mod(db, name="type_1", unique=True)["unique_new"] is True


def test_a_conversion_holds_after_a_kill(datadir):
    s = Server(datadir / "db")
    db = s.client().test
    db.apples.insert_many([{"_id": i, "type": i} for i in range(3000)])
    db.apples.create_index("type")
    coll_mod(db, name="type_1", prepareUnique=True)
    coll_mod(db, name="type_1", unique=True)
    s.stop(signal.SIGKILL)
    s = Server(datadir / "db")
    db = s.client().test
    assert list(db.apples.list_indexes())[1] == {"v": 2, "key": {"type": 1}, "name": "type_1", "unique": True}
    with pytest.raises(DuplicateKeyError):
        db.apples.insert_one({"type": 7})
    assert db.apples.find_one({"type": 2999})["_id"] == 2999
    assert db.command("validate", "apples", full=True)["valid"] is True
    assert s.stop() == 0
