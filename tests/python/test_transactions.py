"""Multi-document transactions through pymongo: snapshot reads that see
their own writes, commit and abort, the error codes and labels drivers
retry by, fail-on-conflict inside a transaction and wait-on-conflict
outside, the lifetime limit, sequences, write skew and phantoms under
snapshot and serializable isolation, and a commit retried after kill -9
(../shared/scenarios/conflicts-and-transactions.md)."""

import os
import signal
import threading
import time
import uuid

import pymongo
import pytest
from bson import Binary, Int64, Timestamp
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

from conftest import Server
from test_retryable_writes import Raw


def labels(e):
    return e.value.details.get("errorLabels", [])


def server_cpu(server):
    """The server process's user + system CPU seconds."""
    fields = open(f"/proc/{server.proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_transaction_sees_its_own_writes_and_commits_them_together(client):
    db, other = client.test, client.otherdb
    db.c.insert_one({"_id": 0, "n": 0})
    with client.start_session() as s:
        s.start_transaction()
        db.c.insert_one({"_id": 1}, session=s)
        db.c.update_one({"_id": 0}, {"$inc": {"n": 5}}, session=s)
        other.d.insert_many([{"_id": i} for i in range(3)], session=s)
        # Its own writes, through a point read, a scan and an aggregate.
        assert db.c.find_one({"_id": 0}, session=s) == {"_id": 0, "n": 5}
        assert sorted(d["_id"] for d in db.c.find({}, session=s)) == [0, 1]
        assert other.d.count_documents({}, session=s) == 3
        assert db.c.distinct("_id", session=s) == [0, 1]
        # Nothing outside yet.
        assert db.c.find_one({"_id": 0}) == {"_id": 0, "n": 0}
        assert other.d.count_documents({}) == 0
        s.commit_transaction()
    assert db.c.find_one({"_id": 0}) == {"_id": 0, "n": 5}
    assert other.d.count_documents({}) == 3


def test_a_snapshot_sees_nothing_committed_after_it_began(client):
    db = client.test
    db.c.insert_many([{"_id": i} for i in range(3)])
    with client.start_session() as s:
        s.start_transaction()
        assert db.c.count_documents({}, session=s) == 3
        db.c.insert_one({"_id": 99})
        db.c.delete_one({"_id": 0})
        assert sorted(d["_id"] for d in db.c.find({}, session=s)) == [0, 1, 2]
        assert db.c.find_one({"_id": 99}, session=s) is None
        s.commit_transaction()


def test_with_transaction_and_abort(client):
    db = client.test

    def work(s):
        db.c.insert_one({"_id": "a"}, session=s)
        db.c.find_one_and_update({"_id": "a"}, {"$set": {"x": 1}}, session=s)

    with client.start_session() as s:
        s.with_transaction(work)
    assert db.c.find_one({"_id": "a"}) == {"_id": "a", "x": 1}
    with client.start_session() as s:
        s.start_transaction()
        db.c.insert_many([{"_id": i} for i in range(5)], session=s)
        db.c.delete_one({"_id": "a"}, session=s)
        s.abort_transaction()
    assert list(db.c.find()) == [{"_id": "a", "x": 1}]


def test_a_cursor_reads_its_transaction_and_closes_with_it(client):
    db = client.test
    db.c.insert_many([{"_id": i} for i in range(10)])
    with client.start_session() as s:
        s.start_transaction()
        db.c.insert_one({"_id": 10}, session=s)
        cursor = db.c.find({}, session=s, batch_size=2)
        got = [next(cursor)["_id"] for _ in range(3)]
        db.c.insert_one({"_id": 11})  # outside: not seen by the getMores
        got += [d["_id"] for d in cursor]
        assert got == list(range(11))
        open_cursor = db.command("find", "c", batchSize=1, session=s)["cursor"]["id"]
        s.commit_transaction()
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", open_cursor, collection="c")
    assert e.value.code == 43


def raw_session():
    return {"id": Binary(uuid.uuid4().bytes, 4)}


class Failed(Exception):
    """An error reply of a raw command."""

    def __init__(self, reply):
        super().__init__(reply.get("errmsg"))
        self.code, self.details = reply.get("code"), reply


def test_transaction_errors_as_mongod(server, client):
    """Over a raw connection, so that the test picks lsid and txnNumber."""
    db = client.test
    db.c.insert_one({"_id": 1})
    lsid = raw_session()
    raw = Raw(server)

    def cmd(body, n, db="test", **extra):
        reply = raw({**body, "lsid": lsid, "txnNumber": Int64(n), "autocommit": False, **extra}, db=db)
        if reply["ok"] != 1.0:
            raise Failed(reply)
        return reply

    # A statement of a transaction that was never started.
    with pytest.raises(Failed) as e:
        cmd({"find": "c"}, 1)
    assert e.value.code == 251 and "TransientTransactionError" in labels(e)
    cmd({"find": "c"}, 2, startTransaction=True)
    # readConcern only on the first statement.
    with pytest.raises(Failed) as e:
        cmd({"find": "c"}, 2, readConcern={"level": "snapshot"})
    assert e.value.code == 72
    # count is refused inside a transaction.
    with pytest.raises(Failed) as e:
        cmd({"count": "c"}, 2)
    assert e.value.code == 263 and "Cannot run 'count' in a multi-document transaction" in str(e.value)
    # writeConcern only on commit and abort.
    with pytest.raises(Failed) as e:
        cmd({"insert": "c", "documents": [{"_id": 2}]}, 2, writeConcern={"w": 1})
    assert e.value.code == 72
    # An older transaction number.
    with pytest.raises(Failed) as e:
        cmd({"find": "c"}, 1, startTransaction=True)
    assert e.value.code == 225
    # A duplicate key fails the statement and aborts the transaction.
    reply = cmd({"insert": "c", "documents": [{"_id": 1}]}, 2)
    assert reply["writeErrors"][0]["code"] == 11000
    with pytest.raises(Failed) as e:
        cmd({"find": "c"}, 2)
    assert e.value.code == 251 and "TransientTransactionError" in labels(e)
    with pytest.raises(Failed) as e:
        cmd({"commitTransaction": 1}, 2, db="admin")
    assert e.value.code == 251
    # A committed transaction: a retried commit answers ok again.
    cmd({"insert": "c", "documents": [{"_id": 3}]}, 3, startTransaction=True)
    assert cmd({"commitTransaction": 1}, 3, db="admin")["ok"] == 1.0
    assert cmd({"commitTransaction": 1}, 3, db="admin")["ok"] == 1.0
    with pytest.raises(Failed) as e:
        cmd({"find": "c"}, 3)
    assert e.value.code == 256
    assert sorted(d["_id"] for d in db.c.find()) == [1, 3]
    raw.close()


def test_capped_collections_refuse_writes_in_a_transaction(client):
    client.test.create_collection("capped", capped=True, size=4096)
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            client.test.capped.insert_one({"x": 1}, session=s)
        assert e.value.code == 263
        s.abort_transaction()
    assert client.test.capped.count_documents({}) == 0


def test_fail_on_conflict_inside_wait_on_conflict_outside(server, client):
    """The scenario's first part: B's transaction fails at once with
    WriteConflict; B's update outside any transaction waits, at almost no
    CPU, until the lifetime limit aborts A; then it succeeds."""
    db = client.test
    client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=2)
    db.demo.insert_one({"_id": "x", "value": 0})
    conflicts_before = client.admin.command("serverStatus")["metrics"]["operation"]["writeConflicts"]
    session_a, session_b = client.start_session(), client.start_session()
    session_a.start_transaction()
    r = db.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=session_a)
    assert (r.matched_count, r.modified_count) == (1, 1)
    session_b.start_transaction()
    with pytest.raises(OperationFailure) as e:
        db.demo.update_one({"_id": "x"}, {"$inc": {"value": 4}}, session=session_b)
    assert (e.value.code, e.value.details["codeName"]) == (112, "WriteConflict")
    assert "TransientTransactionError" in labels(e)
    session_b.abort_transaction()
    started, cpu_before = time.monotonic(), server_cpu(server)
    r = db.demo.update_one({"_id": "x"}, {"$inc": {"value": 8}}, session=session_b)
    waited, cpu = time.monotonic() - started, server_cpu(server) - cpu_before
    assert r.modified_count == 1
    assert 1.0 < waited < 10, waited
    assert cpu < 0.3 * waited, f"{cpu:.3f} s of CPU while waiting {waited:.2f} s"
    with pytest.raises(OperationFailure) as e:
        session_a.commit_transaction()
    assert e.value.code == 251
    assert list(db.demo.find()) == [{"_id": "x", "value": 8}]
    grew = client.admin.command("serverStatus")["metrics"]["operation"]["writeConflicts"] - conflicts_before
    # B's transaction once, then every attempt of the waiting update (at
    # least the four quick ones and the backoff's sleeps over ~2 s).
    assert grew > 20, grew


def test_a_waiting_write_is_bounded_by_max_time_ms(client):
    db = client.test
    db.demo.insert_one({"_id": "x", "value": 0})
    with client.start_session() as s:
        s.start_transaction()
        db.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=s)
        started = time.monotonic()
        with pytest.raises(OperationFailure) as e:
            db.command("update", "demo", updates=[{"q": {"_id": "x"}, "u": {"$inc": {"value": 1}}}], maxTimeMS=300)
        assert e.value.code == 50
        assert 0.25 < time.monotonic() - started < 5
        s.abort_transaction()
    assert db.demo.find_one() == {"_id": "x", "value": 0}


def test_sequences_without_gaps_inside_transactions(client):
    db = client.test

    def next_value(s=None):
        return db.sequences.find_one_and_update(
            {"_id": "demo_id"}, {"$inc": {"seq": 1}}, upsert=True,
            return_document=pymongo.ReturnDocument.AFTER, session=s)

    assert next_value() == {"_id": "demo_id", "seq": 1}
    s1, s2 = client.start_session(), client.start_session()
    s1.start_transaction()
    s2.start_transaction()
    assert next_value(s1)["seq"] == 2
    with pytest.raises(OperationFailure) as e:
        next_value(s2)
    assert e.value.code == 112 and "TransientTransactionError" in labels(e)
    s2.abort_transaction()
    s1.commit_transaction()
    s2.start_transaction()
    assert next_value(s2)["seq"] == 3
    s2.commit_transaction()
    # Outside a transaction the number is taken at once: an aborted
    # transaction that used one leaves a gap.
    s1.start_transaction()
    db.orders.insert_one({"n": next_value()["seq"]}, session=s1)
    s1.abort_transaction()
    assert next_value()["seq"] == 5


def doctors_on_call(client, level, index):
    db = client.test
    db.oncall.drop()
    if index:
        db.oncall.create_index("shift")
    db.oncall.insert_many([{"_id": "alice", "shift": 1, "on": True}, {"_id": "bob", "shift": 1, "on": True}])
    sessions = [client.start_session(), client.start_session()]
    for s in sessions:
        s.start_transaction(read_concern=ReadConcern(level) if level else None)
    counts = [db.oncall.count_documents({"shift": 1, "on": True}, session=s) for s in sessions]
    outcomes = []
    for s, who, n in zip(sessions, ["alice", "bob"], counts):
        try:
            if n >= 2:
                db.oncall.update_one({"_id": who}, {"$set": {"on": False}}, session=s)
            s.commit_transaction()
            outcomes.append("committed")
        except OperationFailure as e:
            assert e.code == 112 and e.has_error_label("TransientTransactionError"), e.details
            assert "Serializable isolation refused this transaction" in str(e)
            outcomes.append("refused")
    return outcomes, db.oncall.count_documents({"on": True})


@pytest.mark.parametrize("index", [False, True], ids=["scan", "index"])
def test_write_skew_under_snapshot_isolation(client, index):
    assert doctors_on_call(client, None, index) == (["committed", "committed"], 0)
    assert doctors_on_call(client, "snapshot", index) == (["committed", "committed"], 0)


@pytest.mark.parametrize("index", [False, True], ids=["scan", "index"])
def test_write_skew_refused_under_serializable(client, index):
    assert doctors_on_call(client, "serializable", index) == (["committed", "refused"], 1)


def test_serializable_as_the_server_default_and_a_retry_that_keeps_the_invariant(client):
    client.admin.command("setParameter", 1, defaultTransactionIsolation="serializable")
    try:
        assert doctors_on_call(client, None, True) == (["committed", "refused"], 1)
        # The refused doctor retries: one doctor on call, so nothing to do.
        with client.start_session() as s:
            s.start_transaction()
            assert client.test.oncall.count_documents({"shift": 1, "on": True}, session=s) == 1
            s.commit_transaction()
    finally:
        client.admin.command("setParameter", 1, defaultTransactionIsolation="snapshot")


@pytest.mark.parametrize("index", [False, True], ids=["scan", "index"])
def test_the_phantom_is_refused_under_serializable(client, index):
    db = client.test
    if index:
        db.oncall.create_index("shift")
    db.oncall.insert_many([{"_id": "alice", "shift": 1}, {"_id": "x", "shift": 2}])
    t1, t2 = client.start_session(), client.start_session()
    t1.start_transaction(read_concern=ReadConcern("serializable"))
    t2.start_transaction(read_concern=ReadConcern("serializable"))
    assert len(list(db.oncall.find({"shift": 1}, session=t1))) == 1
    assert db.oncall.find_one({"_id": "x"}, session=t2) is not None
    db.oncall.insert_one({"_id": "carol", "shift": 1}, session=t2)
    t2.commit_transaction()
    with pytest.raises(OperationFailure) as e:
        db.oncall.update_one({"_id": "x"}, {"$set": {"seen": 1}}, session=t1)
        t1.commit_transaction()
    assert e.value.code == 112 and "TransientTransactionError" in labels(e)
    assert db.oncall.find_one({"_id": "x"}) == {"_id": "x", "shift": 2}


def test_the_same_phantom_commits_under_snapshot(client):
    db = client.test
    db.oncall.insert_many([{"_id": "alice", "shift": 1}, {"_id": "x", "shift": 2}])
    t1, t2 = client.start_session(), client.start_session()
    t1.start_transaction()
    t2.start_transaction()
    list(db.oncall.find({"shift": 1}, session=t1))
    db.oncall.find_one({"_id": "x"}, session=t2)
    db.oncall.insert_one({"_id": "carol", "shift": 1}, session=t2)
    t2.commit_transaction()
    db.oncall.update_one({"_id": "x"}, {"$set": {"seen": 1}}, session=t1)
    t1.commit_transaction()
    assert db.oncall.find_one({"_id": "x"}) == {"_id": "x", "shift": 2, "seen": 1}


def test_kill_9_keeps_committed_transactions_whole_and_drops_the_rest(datadir):
    server = Server(datadir / "db")
    raw = Raw(server)
    lsid, open_lsid = raw_session(), raw_session()

    def cmd(body, session, db="test", **extra):
        reply = raw({**body, "lsid": session, "txnNumber": Int64(1), "autocommit": False, **extra}, db=db)
        assert reply["ok"] == 1.0, reply
        return reply

    cmd({"insert": "c", "documents": [{"_id": i} for i in range(50)]}, lsid, startTransaction=True)
    cmd({"insert": "d", "documents": [{"_id": "one"}]}, lsid, db="other")
    cmd({"commitTransaction": 1}, lsid, db="admin")
    # Open, never committed: absent after the crash.
    cmd({"insert": "c", "documents": [{"_id": i} for i in range(50, 80)]}, open_lsid, startTransaction=True)
    raw.close()
    server.stop(signal.SIGKILL)
    server = Server(datadir / "db", port=server.port)
    client, raw = server.client(), Raw(server)
    try:
        assert sorted(d["_id"] for d in client.test.c.find()) == list(range(50))
        assert client.other.d.count_documents({}) == 1
        # The retried commit answers as the first did.
        cmd({"commitTransaction": 1}, lsid, db="admin")
        reply = raw({"commitTransaction": 1, "lsid": open_lsid, "txnNumber": Int64(1), "autocommit": False},
                    db="admin")
        assert reply["code"] == 251, reply
    finally:
        raw.close()
        client.close()
        assert server.stop() == 0


def test_concurrent_transfers_keep_the_total(client):
    """Transfers between accounts in transactions from several threads,
    each retried by with_transaction: the total never changes, and every
    snapshot a reader takes sums to it."""
    db = client.test
    db.accounts.insert_many([{"_id": i, "balance": 100} for i in range(8)])
    errors, sums = [], []

    def transfer(seed):
        import random
        rng = random.Random(seed)
        with client.start_session() as s:
            for _ in range(25):
                a, b = rng.sample(range(8), 2)

                def move(s):
                    db.accounts.update_one({"_id": a}, {"$inc": {"balance": -5}}, session=s)
                    db.accounts.update_one({"_id": b}, {"$inc": {"balance": 5}}, session=s)

                try:
                    s.with_transaction(move)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)

    def audit():
        with client.start_session() as s:
            for _ in range(20):
                s.start_transaction()
                sums.append(sum(d["balance"] for d in db.accounts.find({}, session=s)))
                s.commit_transaction()

    threads = [threading.Thread(target=transfer, args=(i,)) for i in range(4)] + [threading.Thread(target=audit)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(d["balance"] for d in db.accounts.find()) == 800
    assert sums and set(sums) == {800}


def test_out_and_merge_are_refused_inside_a_transaction(client):
    db = client.test
    db.c.insert_one({"_id": 1})
    with client.start_session() as s:
        for stage in ({"$out": "o"}, {"$merge": {"into": "m"}}):
            s.start_transaction()
            with pytest.raises(OperationFailure) as e:
                list(db.c.aggregate([stage], session=s))
            assert e.value.code == 263 and "cannot be used in a transaction" in str(e.value)
            s.abort_transaction()
    assert set(db.list_collection_names()) == {"c"}


def test_a_cursor_is_read_only_in_its_own_transaction(client):
    db = client.test
    db.c.insert_many([{"_id": i} for i in range(5)])
    with client.start_session() as s:
        s.start_transaction()
        cursor = db.command("find", "c", batchSize=1, session=s)["cursor"]["id"]
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", cursor, collection="c")
        assert e.value.code == 50740
        # Still readable inside it.
        assert len(db.command("getMore", cursor, collection="c", session=s)["cursor"]["nextBatch"]) == 4
        s.commit_transaction()


def test_an_index_built_while_a_transaction_writes_aborts_its_commit(client):
    """The transaction's writes did not maintain the new index: committing
    them would leave it without their entries."""
    db = client.test
    db.c.insert_many([{"_id": i, "a": i} for i in range(3)])
    with client.start_session() as s:
        s.start_transaction()
        db.c.insert_one({"_id": 10, "a": 10}, session=s)
        db.c.delete_one({"_id": 0}, session=s)
        db.c.create_index("a")
        with pytest.raises(OperationFailure) as e:
            s.commit_transaction()
        assert e.value.code == 112 and "TransientTransactionError" in labels(e)
    assert sorted(d["_id"] for d in db.c.find()) == [0, 1, 2]
    assert db.command("validate", "c")["valid"]
    assert [d["_id"] for d in db.c.find({"a": {"$gte": 0}}).hint("a_1")] == [0, 1, 2]
    # Retried, the transaction maintains the index.
    with client.start_session() as s:
        s.start_transaction()
        db.c.insert_one({"_id": 10, "a": 10}, session=s)
        s.commit_transaction()
    assert [d["_id"] for d in db.c.find({"a": {"$gte": 5}}).hint("a_1")] == [10]


def test_an_unordered_insert_in_a_transaction_stops_at_its_first_error(client):
    db = client.test
    db.c.insert_one({"_id": 2})
    with client.start_session() as s:
        s.start_transaction()
        reply = db.command("insert", "c", documents=[{"_id": 1}, {"_id": 2}, {"_id": 3}], ordered=False, session=s)
        assert reply["n"] == 1 and [w["index"] for w in reply["writeErrors"]] == [1]
        with pytest.raises(OperationFailure) as e:
            s.commit_transaction()
        assert e.value.code == 251
    assert [d["_id"] for d in db.c.find()] == [2]


def test_operation_time_is_the_snapshot_then_the_commit(client):
    """A statement's operationTime in a transaction is its snapshot, a
    commit's its commit timestamp; cluster times grow with commits."""
    db = client.test
    db.c.insert_one({"_id": 0})
    with client.start_session() as s:
        s.start_transaction()
        db.c.find_one({"_id": 0}, session=s)
        snapshot = s.operation_time
        db.c.insert_one({"_id": 1})  # commits after the snapshot
        outside = client.admin.command("ping")["operationTime"]
        assert outside > snapshot
        db.c.insert_one({"_id": 2}, session=s)
        db.c.find_one({"_id": 1}, session=s)
        assert s.operation_time == snapshot
        s.commit_transaction()
        assert s.operation_time > outside


def test_collections_created_in_a_transaction_appear_at_its_commit(client):
    db = client.test
    with client.start_session() as s:
        s.start_transaction()
        db.create_collection("made", session=s)
        db.made.insert_one({"_id": 1}, session=s)
        db.implied.insert_many([{"_id": 1}, {"_id": 2}], session=s)
        assert db.implied.count_documents({}, session=s) == 2
        assert [d["_id"] for d in db.made.find({}, session=s)] == [1]
        assert set(db.list_collection_names()) == set()
        s.commit_transaction()
    assert set(db.list_collection_names()) == {"made", "implied"}
    assert db.implied.count_documents({}) == 2
    with client.start_session() as s:
        s.start_transaction()
        db.gone.insert_one({"_id": 1}, session=s)
        with pytest.raises(OperationFailure) as e:
            db.create_collection("made", session=s)
        assert e.value.code == 48
        s.abort_transaction()
    assert "gone" not in db.list_collection_names()
    db.gone.insert_one({"_id": 7})
    assert [d["_id"] for d in db.gone.find()] == [7]
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            db.create_collection("v", viewOn="made", pipeline=[], session=s)
        assert e.value.code == 263
        s.abort_transaction()


def test_create_indexes_in_a_transaction_on_a_collection_it_creates(client):
    """mongod 8.0's rule: indexes are created in a transaction only on a
    collection the transaction creates (by createIndexes itself or
    earlier) and that is still empty; they commit or vanish with it."""
    db = client.test
    with client.start_session() as s:
        s.start_transaction()
        reply = db.command(
            "createIndexes", "fresh", indexes=[{"key": {"k": 1}, "name": "k_1", "unique": True}], session=s
        )
        assert (reply["numIndexesBefore"], reply["numIndexesAfter"], reply["createdCollectionAutomatically"]) == (
            1,
            2,
            True,
        )
        db.fresh.insert_one({"_id": 1, "k": "a"}, session=s)
        with pytest.raises(OperationFailure) as e:
            db.fresh.insert_one({"_id": 2, "k": "a"}, session=s)
        assert e.value.code == 11000 and "index: k_1" in str(e.value)
    # The duplicate aborted the transaction: nothing of it stays.
    assert "fresh" not in db.list_collection_names()
    with client.start_session() as s:
        s.start_transaction()
        db.create_collection("made", session=s)
        db.made.create_index([("k", 1)], unique=True, session=s)
        reply = db.command("createIndexes", "made", indexes=[{"key": {"k": 1}, "name": "k_1", "unique": True}], session=s)
        assert reply["note"] == "all indexes already exist" and "createdCollectionAutomatically" not in reply
        db.made.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 2}], session=s)
        assert [d["_id"] for d in db.made.find({"k": {"$gte": 2}}, session=s)] == [2]
        assert "made" not in db.list_collection_names()
        s.commit_transaction()
    assert [ix["name"] for ix in db.made.list_indexes()] == ["_id_", "k_1"]
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        db.made.insert_one({"_id": 3, "k": 1})
    plan = db.made.find({"k": 2}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in str(plan) and "k_1" in str(plan)
    assert db.command("validate", "made")["valid"]


def test_create_indexes_in_a_transaction_refused_as_mongod(client):
    db = client.test
    db.old.insert_one({"_id": 1, "k": 1})
    db.old.create_index("k")
    cases = [
        (lambda s: db.old.create_index("j", session=s), "Cannot create new indexes on existing collection test.old in a multi-document transaction."),
        (lambda s: (db.new.insert_one({"k": 1}, session=s), db.new.create_index("k", session=s)), "Cannot create new indexes on non-empty collection test.new in a multi-document transaction."),
        (lambda s: db["system.js"].create_index("k", session=s), "Cannot write to system collection test.system.js within a transaction."),
    ]
    for run, message in cases:
        with client.start_session() as s:
            s.start_transaction()
            with pytest.raises(OperationFailure) as e:
                run(s)
            assert (e.value.code, e.value.details["errmsg"]) == (263, message)
            assert "TransientTransactionError" not in (e.value.details.get("errorLabels") or [])
    # An index the collection already has is not a new one.
    with client.start_session() as s:
        s.start_transaction()
        assert db.old.create_index("k", session=s) == "k_1"
        s.commit_transaction()
    assert "new" not in db.list_collection_names()
    assert [ix["name"] for ix in db.old.list_indexes()] == ["_id_", "k_1"]


def test_an_index_on_a_collection_emptied_in_its_transaction_then_written(client):
    """Insert, delete, createIndexes, insert: the index list changed only
    by the transaction itself is no conflict."""
    db = client.test
    with client.start_session() as s:
        s.start_transaction()
        db.cycle.insert_one({"_id": 1, "k": 1}, session=s)
        db.cycle.delete_one({"_id": 1}, session=s)
        db.cycle.create_index("k", unique=True, session=s)
        db.cycle.insert_one({"_id": 2, "k": 2}, session=s)
        s.commit_transaction()
    assert [d["_id"] for d in db.cycle.find({"k": 2}).hint("k_1")] == [2]


def test_ddl_in_a_transaction_needs_read_concern_local(client):
    """mongod refuses create and createIndexes in a transaction whose
    readConcern names a level other than local (InvalidOptions), and the
    transaction is aborted; local, or no level, is fine."""
    db = client.test
    for level in ["snapshot", "majority"]:
        for run in [lambda s: db.create_collection("ddl", session=s), lambda s: db.ddl.create_index("k", session=s)]:
            with client.start_session() as s:
                s.start_transaction(read_concern=ReadConcern(level))
                db.other.find_one({}, session=s)
                with pytest.raises(OperationFailure) as e:
                    run(s)
                assert e.value.code == 72
                assert e.value.details["errmsg"].startswith("Command ")
                assert f"does not support this transaction's {{ readConcern: {{ level: \"{level}\"" in str(e.value)
                with pytest.raises(OperationFailure) as e:
                    s.commit_transaction()
                assert e.value.code == 251
    with client.start_session() as s:
        s.start_transaction(read_concern=ReadConcern("local"))
        db.ddl.create_index("k", session=s)
        s.commit_transaction()
    assert [ix["name"] for ix in db.ddl.list_indexes()] == ["_id_", "k_1"]


def test_snapshot_reads_outside_transactions(client):
    """A snapshot session's reads all see the snapshot its first read took
    (its atClusterTime), whatever is written meanwhile, getMore included."""
    db = client.test
    db.snap.insert_many([{"_id": i, "x": 1} for i in range(5)])
    with client.start_session(snapshot=True) as s:
        first = db.snap.find({}, session=s, batch_size=2)
        assert [d["_id"] for d in first][:2] == [0, 1]
        at = s._snapshot_time  # pymongo's record of the reply's atClusterTime
        assert at is not None
        later = db.snap.find({}, session=s, batch_size=2)
        assert next(later)["x"] == 1
        db.snap.update_many({}, {"$set": {"x": 2}})
        db.snap.insert_one({"_id": 9, "x": 2})
        assert [d["x"] for d in later] == [1, 1, 1, 1], "the getMores read the same snapshot"
        assert db.snap.count_documents({}, session=s) == 5
        assert db.snap.distinct("x", session=s) == [1]
        assert [d["n"] for d in db.snap.aggregate([{"$count": "n"}], session=s)] == [5]
    assert db.snap.count_documents({"x": 2}) == 6
    # The time is kept: a raw read at it sees the same.
    reply = db.command("find", "snap", readConcern={"level": "snapshot", "atClusterTime": at})
    assert reply["cursor"]["atClusterTime"] == at
    assert [d["x"] for d in reply["cursor"]["firstBatch"]] == [1] * 5
    reply = db.command("distinct", "snap", key="x", readConcern={"level": "snapshot", "atClusterTime": at})
    assert (reply["values"], reply["atClusterTime"]) == ([1], at)


def test_read_concern_errors_as_mongod(client):
    db = client.test
    db.rc.insert_one({"_id": 1})
    now = db.command("ping")["$clusterTime"]["clusterTime"]
    future = Timestamp(now.time + 100, 0)
    cases = [
        ({"find": "rc", "readConcern": 1}, 14, "BSON field 'readConcern' is the wrong type 'int', expected type 'object'"),
        ({"find": "rc", "readConcern": {"level": "bogus"}}, 2, "Enumeration value 'bogus' for field 'readConcern.level' is not a valid value."),
        ({"find": "rc", "readConcern": {"level": "local", "atClusterTime": now}}, 72, "atClusterTime field can be set only if level is equal to snapshot"),
        ({"find": "rc", "readConcern": {"level": "snapshot", "atClusterTime": future}}, 72, "readConcern atClusterTime value must not be greater than the current clusterTime."),
        ({"find": "rc", "readConcern": {"level": "snapshot", "atClusterTime": Timestamp(0, 0)}}, 72, "atClusterTime cannot be a null timestamp"),
        ({"find": "rc", "tailable": True, "readConcern": {"level": "snapshot"}}, 72, "A tailable cursor cannot read at readConcern level snapshot"),
        ({"aggregate": "rc", "pipeline": [{"$collStats": {"count": {}}}], "cursor": {}, "readConcern": {"level": "snapshot"}}, 72, "Aggregation stage $collStats cannot run with a readConcern other than 'local'"),
        ({"insert": "rc", "documents": [{}], "readConcern": {"level": "snapshot"}}, 72, "Command insert does not support { readConcern: { level: \"snapshot\" } }"),
        ({"listCollections": 1, "readConcern": {"level": "snapshot"}}, 72, "Command listCollections does not support"),
        ({"aggregate": "rc", "pipeline": [{"$out": "o"}], "cursor": {}, "readConcern": {"level": "snapshot"}}, 72, "$out cannot be used with a 'snapshot' read concern level"),
        ({"find": "rc", "readConcern": {"level": "serializable"}}, 72, "readConcern level 'serializable' applies to multi-document transactions only"),
    ]
    for cmd, code, message in cases:
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code == code and e.value.details["errmsg"].startswith(message), (cmd, e.value.details)
    assert db.command("find", "rc", readConcern={"level": "majority", "afterClusterTime": now})["ok"] == 1.0
    # Every acknowledged write is visible: a time ahead (an earlier process's
    # clock) is no reason to refuse a causally consistent read.
    assert db.command("find", "rc", readConcern={"afterClusterTime": future})["ok"] == 1.0
    assert "o" not in db.list_collection_names()


def test_a_snapshot_read_does_not_plan_with_an_index_built_after_it(client):
    """An index built after a snapshot holds entries the snapshot does not
    see whole: a read at that snapshot plans without it and finds every
    document of the snapshot."""
    db = client.test
    db.late.insert_many([{"_id": i, "k": i % 3} for i in range(30)])
    at = db.command("find", "late", readConcern={"level": "snapshot"})["cursor"]["atClusterTime"]
    db.late.create_index("k")
    db.late.insert_one({"_id": 99, "k": 1})
    rc = {"level": "snapshot", "atClusterTime": at}
    reply = db.command("find", "late", filter={"k": 1}, readConcern=rc)
    assert sorted(d["_id"] for d in reply["cursor"]["firstBatch"]) == list(range(1, 30, 3))
    for hint in ["k_1", {"k": 1}]:
        with pytest.raises(OperationFailure) as e:
            db.command("find", "late", filter={"k": 1}, readConcern=rc, hint=hint)
        assert e.value.code == 246, e.value.details
    reply = db.command("distinct", "late", key="_id", query={"k": 1}, readConcern=rc)
    assert sorted(reply["values"]) == list(range(1, 30, 3))
    # At the newest snapshot the index serves.
    plan = db.late.find({"k": 1}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in str(plan)


def test_snapshot_history_is_kept_for_the_window(client):
    """A time no snapshot read took is too old (SnapshotTooOld); a kept
    one is forgotten once minSnapshotHistoryWindowInSeconds passes unused."""
    db = client.test
    db.win.insert_one({"_id": 1})
    stale = db.command("ping")["$clusterTime"]["clusterTime"]
    db.win.insert_one({"_id": 2})
    with pytest.raises(OperationFailure) as e:
        db.command("find", "win", readConcern={"level": "snapshot", "atClusterTime": stale})
    assert e.value.code == 239 and "is older than the oldest available timestamp" in str(e.value)
    at = db.command("find", "win", readConcern={"level": "snapshot"})["cursor"]["atClusterTime"]
    db.win.insert_one({"_id": 3})
    old = client.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=0)["was"]
    try:
        assert old == 300
        deadline = time.time() + 10
        while True:
            try:
                db.command("find", "win", readConcern={"level": "snapshot", "atClusterTime": at})
            except OperationFailure as e:
                assert e.code == 239
                break
            assert time.time() < deadline, "the kept snapshot outlived its window"
            time.sleep(0.1)
    finally:
        client.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=old)


def test_a_transaction_at_cluster_time(server, client):
    """A transaction begins on the newest snapshot: atClusterTime may name
    it, and an older time is too old."""
    db = client.test
    db.tat.insert_one({"_id": 1})
    stale = db.command("ping")["$clusterTime"]["clusterTime"]
    db.tat.insert_one({"_id": 2})
    now = db.command("ping")["$clusterTime"]["clusterTime"]
    raw, lsid = Raw(server), raw_session()

    def start(n, at):
        rc = {"level": "snapshot", "atClusterTime": at}
        return raw({"find": "tat", "readConcern": rc, "lsid": lsid, "txnNumber": Int64(n),
                    "startTransaction": True, "autocommit": False})

    reply = start(1, now)
    assert reply["ok"] == 1.0 and [d["_id"] for d in reply["cursor"]["firstBatch"]] == [1, 2]
    reply = start(2, stale)
    assert (reply["ok"], reply["code"]) == (0.0, 239)
    raw.close()


def test_an_abandoned_transaction_drops_the_indexes_it_made(server, client):
    db = client.test
    with client.start_session() as s:
        s.start_transaction()
        db.gone.create_index("a", session=s)
        db.gone.create_index([("b", 1), ("c", -1)], session=s)
        db.gone.insert_one({"a": [1, 2], "b": 1, "c": 2}, session=s)
        s.abort_transaction()
    assert "gone" not in db.list_collection_names()
    db.gone.insert_one({"a": 1})
    assert [ix["name"] for ix in db.gone.list_indexes()] == ["_id_"]


def test_an_insert_into_a_collection_a_transaction_creates_waits_for_it(client):
    db = client.test
    with client.start_session() as s:
        s.start_transaction()
        db.fresh.insert_one({"_id": "txn"}, session=s)
        with pytest.raises(OperationFailure) as e:
            db.command("insert", "fresh", documents=[{"_id": "plain"}], maxTimeMS=200)
        assert e.value.code == 50
        done = []
        t = threading.Thread(target=lambda: done.append(db.fresh.insert_one({"_id": "plain"})))
        t.start()
        time.sleep(0.3)
        assert not done
        s.commit_transaction()
        t.join(timeout=10)
    assert done and sorted(d["_id"] for d in db.fresh.find()) == ["plain", "txn"]


def wait_until_running(client, op, ns):
    """Wait until an operation `op` on `ns` shows in `$currentOp` (its
    thread may start late on a loaded machine)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if list(client.admin.aggregate([{"$currentOp": {"allUsers": True}}, {"$match": {"op": op, "ns": ns}}])):
            return
        time.sleep(0.01)
    raise AssertionError(f"no {op} on {ns} in $currentOp")


def test_the_profiler_entry_of_a_write_that_waited(client):
    """The scenario's profiler part: the update that waited on a
    transaction shows its write conflicts, yields, time and plan."""
    db = client.test
    assert db.command("profile", 2)["was"] == 0
    db.demo.insert_one({"_id": "x", "value": 0})
    conflicts_before = client.admin.command("serverStatus")["metrics"]["operation"]["writeConflicts"]
    with client.start_session() as s:
        s.start_transaction()
        db.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=s)
        waiter = threading.Thread(target=lambda: db.demo.update_one({"_id": "x"}, {"$inc": {"value": 8}}))
        waiter.start()
        wait_until_running(client, "update", "test.demo")
        time.sleep(0.5)
        s.abort_transaction()
        waiter.join(timeout=10)
    assert db.demo.find_one() == {"_id": "x", "value": 8}
    assert db.command("profile", 0)["was"] == 2
    grew = client.admin.command("serverStatus")["metrics"]["operation"]["writeConflicts"] - conflicts_before
    entries = list(db.system.profile.find({"op": "update", "command.u.$inc.value": 8}))
    assert len(entries) == 1, entries
    e = entries[0]
    assert e["ns"] == "test.demo" and e["command"]["q"] == {"_id": "x"}
    assert (e["nMatched"], e["nModified"]) == (1, 1)
    # The transaction's own update met none; the waiting one every attempt.
    assert e["writeConflicts"] > 4 and e["writeConflicts"] == grew
    assert e["numYield"] == e["writeConflicts"]
    assert e["millis"] >= 400
    assert "_id" in e["planSummary"] or "IDHACK" in e["planSummary"]
    assert {"ts", "client", "appName", "user", "allUsers"} <= set(e)
    # Every operation at level 2: the inserts and finds too; none since level 0.
    ops = [x["op"] for x in db.system.profile.find()]
    assert "insert" in ops and "query" in ops
    count = db.system.profile.count_documents({})
    db.demo.find_one()
    assert db.system.profile.count_documents({}) == count
    assert db.system.profile.options()["capped"] is True


def test_profile_entries_count_keys_and_documents_examined_and_written(client):
    """Each entry tells what the operation did, as mongod's: keys and
    documents its read examined (for a read, update or delete; a getMore
    its own share), keys its writes inserted and deleted, and `execStats`,
    the plan it ran with those counts."""
    db = client.test
    db.k.insert_many([{"_id": i, "a": i % 10, "b": i} for i in range(100)])
    db.k.create_index("a")
    db.command("profile", 2)
    assert len(list(db.k.find({"a": 3}).comment("ix"))) == 10
    assert len(list(db.k.find({"b": {"$gt": 90}}).comment("scan"))) == 9
    assert db.k.find_one({"_id": 5}, comment="point") is not None
    assert len(list(db.k.find({}, batch_size=40).comment("batches"))) == 100
    assert len(list(db.k.find({"a": {"$gte": 0}}, batch_size=30).comment("ix batches"))) == 100
    assert len(list(db.k.aggregate([{"$match": {"a": 1}}], comment="agg"))) == 10
    db.k.update_many({"a": 4}, {"$inc": {"n": 1}})
    db.k.update_one({"_id": 1}, {"$set": {"a": 42}})
    db.k.insert_one({"_id": 1000, "a": 7})
    db.k.delete_one({"_id": 1000})
    with client.start_session() as s:
        s.start_transaction()
        db.k.insert_one({"_id": 2000, "a": 8}, session=s)
        assert len(list(db.k.find({"a": {"$gte": 0}}, batch_size=60, session=s).comment("txn batches"))) == 101
        s.commit_transaction()
    db.command("profile", 0)
    explained = db.k.find({"a": 3}).explain()["executionStats"]["totalKeysExamined"]
    assert explained == 10

    def entry(**query):
        (e,) = list(db.system.profile.find(query))
        return e

    ix = entry(**{"command.comment": "ix", "op": "query"})
    assert (ix["keysExamined"], ix["docsExamined"], ix["nreturned"]) == (explained, 10, 10)
    assert ix["planSummary"] == "IXSCAN { a: 1 }"
    stats = ix["execStats"]
    assert (stats["stage"], stats["nReturned"], stats["docsExamined"]) == ("FETCH", 10, 10)
    assert stats["inputStage"]["stage"] == "IXSCAN" and stats["inputStage"]["indexName"] == "a_1"
    assert stats["inputStage"]["keyPattern"] == {"a": 1} and stats["inputStage"]["keysExamined"] == explained
    scan = entry(**{"command.comment": "scan", "op": "query"})
    assert (scan["keysExamined"], scan["docsExamined"], scan["nreturned"]) == (0, 100, 9)
    assert scan["execStats"] == {"stage": "COLLSCAN", "nReturned": 9, "docsExamined": 100}
    point = entry(**{"command.comment": "point", "op": "query"})
    assert (point["keysExamined"], point["docsExamined"], point["nreturned"]) == (1, 1, 1)
    # The find and each getMore count what each read.
    find = entry(**{"command.comment": "batches", "op": "query"})
    more = list(db.system.profile.find({"op": "getmore", "command.comment": "batches"}))
    assert find["docsExamined"] == 40 and [m["docsExamined"] for m in more] == [40, 20], more
    assert all(m["keysExamined"] == 0 and m["nreturned"] == m["docsExamined"] for m in more)
    # Through an index, the getMores' share of the keys and documents too.
    ix_find = entry(**{"command.comment": "ix batches", "op": "query"})
    ix_more = list(db.system.profile.find({"op": "getmore", "command.comment": "ix batches"}))
    assert len(ix_more) == 3 and all(m["docsExamined"] > 0 for m in ix_more), ix_more
    assert sum(m["docsExamined"] for m in [ix_find] + ix_more) == 100
    assert sum(m["keysExamined"] for m in [ix_find] + ix_more) == 100
    # Inside a transaction too (its own insert among what it reads).
    txn_reads = list(db.system.profile.find({"command.comment": "txn batches"}))
    assert [e["op"] for e in txn_reads] == ["query", "getmore"]
    assert sum(e["docsExamined"] for e in txn_reads) == 101 and all(e["keysExamined"] > 0 for e in txn_reads)
    agg = entry(**{"command.comment": "agg", "op": "command"})
    assert (agg["keysExamined"], agg["docsExamined"]) == (10, 10)
    # Writes: an update of a field no index holds writes no key; one of
    # an indexed field one key out, one in; an insert and a delete every
    # index's key (`_id` and `a`).
    many = entry(op="update", **{"command.q": {"a": 4}})
    assert (many["keysExamined"], many["docsExamined"], many["nMatched"], many["nModified"]) == (explained, 10, 10, 10)
    assert "keysInserted" not in many and "keysDeleted" not in many
    one = entry(op="update", **{"command.q": {"_id": 1}})
    assert (one["keysExamined"], one["docsExamined"], one["keysInserted"], one["keysDeleted"]) == (1, 1, 1, 1)
    inserted = entry(op="insert", **{"command.documents._id": 1000})
    assert (inserted["ninserted"], inserted["keysInserted"]) == (1, 2) and "docsExamined" not in inserted
    deleted = entry(op="remove", **{"command.q": {"_id": 1000}})
    assert (deleted["ndeleted"], deleted["keysDeleted"], deleted["docsExamined"]) == (1, 2, 1)
    in_txn = entry(op="insert", **{"command.documents._id": 2000})
    assert in_txn["keysInserted"] == 2


def test_a_write_that_waited_on_conflicts_counts_its_keys_once(client):
    """A write retried after each conflict counts the keys of the attempt
    that committed only."""
    db = client.test
    db.w.insert_one({"_id": "x", "v": 0})
    db.w.create_index("v")
    db.command("profile", 2)
    with client.start_session() as s:
        s.start_transaction()
        db.w.update_one({"_id": "x"}, {"$set": {"v": 1}}, session=s)
        waiter = threading.Thread(target=lambda: db.w.update_one({"_id": "x"}, {"$set": {"v": 2}}))
        waiter.start()
        wait_until_running(client, "update", "test.w")
        time.sleep(0.3)
        s.abort_transaction()
        waiter.join(timeout=10)
    db.command("profile", 0)
    (e,) = list(db.system.profile.find({"op": "update", "command.u.$set.v": 2}))
    assert e["writeConflicts"] > 4
    assert (e["nModified"], e["keysInserted"], e["keysDeleted"]) == (1, 1, 1)


def test_profile_level_1_records_only_slow_operations(client):
    db = client.test
    db.c.insert_many([{"_id": i} for i in range(100)])
    db.command("profile", 1, slowms=0)
    db.c.find_one({"_id": 5})
    db.command("profile", 1, slowms=10_000)
    db.c.find_one({"_id": 6})
    db.command("profile", 0, slowms=100)
    found = [e["command"]["filter"] for e in db.system.profile.find({"op": "query"})]
    assert found == [{"_id": 5}]


def test_current_op_lists_waiting_writes_and_open_transactions_and_kill_op_ends_them(client):
    db, admin = client.test, client.admin
    db.demo.insert_one({"_id": "x", "value": 0})
    s = client.start_session()
    s.start_transaction()
    db.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=s)
    # The open transaction, between statements: an idle session.
    idle = [o for o in admin.command("currentOp")["inprog"] if o.get("type") == "idleSession"]
    assert len(idle) == 1 and idle[0]["active"] is False
    assert idle[0]["lsid"]["id"] == s.session_id["id"]
    assert idle[0]["transaction"]["parameters"]["txnNumber"] == s._server_session.transaction_id
    assert idle[0]["transaction"]["timeOpenMicros"] > 0
    # A write waiting on it is a running operation.
    outcome = []

    def waiting_update():
        try:
            db.demo.update_one({"_id": "x"}, {"$inc": {"value": 8}})
            outcome.append("done")
        except OperationFailure as e:
            outcome.append(e.code)

    t = threading.Thread(target=waiting_update)
    t.start()
    deadline = time.monotonic() + 5
    running = []
    while not running and time.monotonic() < deadline:
        pipeline = [{"$currentOp": {"allUsers": True}}, {"$match": {"op": "update", "ns": "test.demo"}}]
        running = list(admin.aggregate(pipeline))
        time.sleep(0.05)
    assert len(running) == 1 and running[0]["active"] is True and running[0]["command"]["update"] == "demo"
    assert admin.command("killOp", op=running[0]["opid"])["info"] == "attempting to kill op"
    t.join(timeout=10)
    assert outcome == [11601]
    # killOp of the idle transaction aborts it.
    admin.command("killOp", op=idle[0]["opid"])
    with pytest.raises(OperationFailure) as e:
        s.commit_transaction()
    assert e.value.code == 251
    assert db.demo.find_one() == {"_id": "x", "value": 0}
    assert [o for o in admin.command("currentOp")["inprog"] if o.get("type") == "idleSession"] == []
    s.end_session()


@pytest.mark.parametrize("cycle", range(int(os.environ.get("ARBORDB_TXN_WIRE_KILLS", "3"))))
def test_kill_9_during_concurrent_transactions(datadir, cycle):
    """Transfers in transactions from several threads, each also logging
    itself; the server is killed mid-stream. After the restart every
    acknowledged transfer is there whole, none is there in part (the total
    holds), and nothing unacknowledged but at most the commits in flight."""
    import random

    server = Server(datadir / "db")
    client = server.client(retryWrites=False, serverSelectionTimeoutMS=500)
    db = client.test
    accounts = 10
    db.accounts.insert_many([{"_id": i, "balance": 100} for i in range(accounts)])
    acknowledged, stop = [], threading.Event()

    def transfers(seed):
        rng = random.Random(seed * 100 + cycle)
        n = 0
        while not stop.is_set():
            n += 1
            tid = f"{seed}-{n}"
            a, b = rng.sample(range(accounts), 2)
            try:
                with client.start_session() as s:
                    s.start_transaction()
                    db.accounts.update_one({"_id": a}, {"$inc": {"balance": -3}}, session=s)
                    db.accounts.update_one({"_id": b}, {"$inc": {"balance": 3}}, session=s)
                    db.log.insert_one({"_id": tid, "from": a, "to": b}, session=s)
                    s.commit_transaction()
                acknowledged.append(tid)
            except pymongo.errors.PyMongoError:
                if stop.is_set():
                    return

    threads = [threading.Thread(target=transfers, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.7 + 0.3 * cycle)
    server.stop(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    client.close()
    server = Server(datadir / "db", port=server.port)
    client = server.client()
    try:
        db = client.test
        logged = {d["_id"]: d for d in db.log.find()}
        assert set(acknowledged) <= set(logged), sorted(set(acknowledged) - set(logged))[:5]
        assert len(logged) - len(acknowledged) <= 4, "at most one commit in flight per thread"
        balances = {d["_id"]: d["balance"] for d in db.accounts.find()}
        assert sum(balances.values()) == 100 * accounts
        # Each account moved exactly by the transfers the log holds.
        moved = {i: 100 for i in range(accounts)}
        for d in logged.values():
            moved[d["from"]] -= 3
            moved[d["to"]] += 3
        assert balances == moved
        assert len(acknowledged) > 10
    finally:
        client.close()
        assert server.stop() == 0


def test_kill_op_ends_a_long_read(client):
    """killOp reaches a read while it runs: the loops that check maxTimeMS
    check the kill too, and the read fails with Interrupted (11601); in a
    transaction, the failed statement aborts it."""
    db = client.test
    batch = [{"x": i, "pad": "p" * 100} for i in range(20_000)]
    for _ in range(25):
        db.big.insert_many([dict(d) for d in batch])
    # A collection scan whose `$expr` decodes every document whole: a few
    # hundred ms for these 500,000 documents (killed, it ends at once).
    query = {"$expr": {"$eq": ["$pad", "none"]}}
    for in_transaction in [False, True]:
        with client.start_session() as s:
            if in_transaction:
                s.start_transaction()
            outcome = kill_while_reading(client, lambda: list(db.big.find(query, comment="long-read", session=s)))
            assert "error" in outcome and outcome["error"].code == 11601, outcome
            if in_transaction:
                with pytest.raises(OperationFailure) as e:
                    s.commit_transaction()
                assert e.value.code == 251


def test_a_pipeline_that_returns_nothing_still_stops_at_max_time_ms_and_kill_op(client):
    """A pipeline whose stages drop or hold back their input ($unwind then
    a $match that rejects all, a $group) checks the reading command's
    deadline and kill for each document it takes in, not only between the
    documents it returns; a getMore brings its own deadline."""
    db = client.test
    db.u.insert_many([{"_id": i, "arr": list(range(200))} for i in range(5000)])
    drop_all = [{"$unwind": "$arr"}, {"$match": {"never": 1}}]
    counted_away = [{"$unwind": "$arr"}, {"$group": {"_id": None, "n": {"$sum": 1}}}, {"$match": {"n": -1}}]
    for pipeline in [drop_all, counted_away]:
        with pytest.raises(OperationFailure) as e:
            list(db.u.aggregate(pipeline, maxTimeMS=20))
        assert e.value.code == 50, pipeline
    for in_transaction in [False, True]:
        with client.start_session() as s:
            if in_transaction:
                s.start_transaction()
            read = lambda: list(db.u.aggregate(drop_all, comment="long-read", session=s))  # noqa: E731
            outcome = kill_while_reading(client, read)
            assert "error" in outcome and outcome["error"].code == 11601, outcome
            if in_transaction:
                with pytest.raises(OperationFailure) as e:
                    s.commit_transaction()
                assert e.value.code == 251
    # Past its first batch, the getMores go on within what is left of the
    # aggregate's maxTimeMS (the rest takes over a second to read).
    near_ends = [{"$unwind": "$arr"}, {"$match": {"$or": [{"_id": 0}, {"_id": 4999}]}}]
    raw = db.command("aggregate", "u", pipeline=near_ends, cursor={"batchSize": 150}, maxTimeMS=500)
    assert len(raw["cursor"]["firstBatch"]) == 150 and raw["cursor"]["id"] != 0
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", raw["cursor"]["id"], collection="u")
    assert e.value.code == 50
    # Killed while it reads ahead past a full first batch, the aggregate
    # fails itself (nothing is kept for the next getMore).
    first_only = [{"$unwind": "$arr"}, {"$match": {"$or": [{"_id": 0}, {"_id": -1}]}}]
    read = lambda: db.command("aggregate", "u", pipeline=first_only, cursor={"batchSize": 200}, comment="long-read")  # noqa: E731
    outcome = kill_while_reading(client, read)
    assert "error" in outcome and outcome["error"].code == 11601, outcome


def kill_while_reading(client, read):
    """Run `read` in a thread, killOp it once currentOp lists it (by its
    comment, "long-read"); what it returned or raised."""
    outcome = {}

    def run():
        try:
            outcome["docs"] = read()
        except OperationFailure as e:
            outcome["error"] = e

    reader = threading.Thread(target=run)
    reader.start()
    opid, deadline = None, time.time() + 10
    while opid is None and time.time() < deadline and reader.is_alive():
        ops = client.admin.aggregate([{"$currentOp": {}}, {"$match": {"command.comment": "long-read"}}])
        opid = next((op["opid"] for op in ops), None)
    assert opid is not None, f"the read never showed in currentOp: {outcome}"
    client.admin.command("killOp", op=opid)
    reader.join(timeout=30)
    return outcome


def test_clients_cannot_write_system_profile_and_big_commands_are_shown_cut(client):
    db = client.test
    with pytest.raises(OperationFailure) as e:
        db.system.profile.insert_one({"x": 1})
    assert e.value.code == 73
    db.command("profile", 2)
    db.big.insert_one({"_id": 1, "s": "x" * 200_000})
    db.command("profile", 0)
    (entry,) = list(db.system.profile.find({"op": "insert", "ns": "test.big"}))
    assert entry["command"].get("$truncated") is True and entry["ninserted"] == 1
