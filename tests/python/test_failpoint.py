"""`configureFailPoint` with `failCommand`: a test command, only with
`--setParameter enableTestCommands=1`, as mongod's."""

import pymongo
import pytest
from pymongo.errors import (AutoReconnect, NetworkTimeout, OperationFailure, WriteConcernError)

from conftest import Server


@pytest.fixture
def test_server(datadir):
    s = Server(datadir / "db", extra=("--setParameter", "enableTestCommands=1"))
    yield s
    assert s.stop() == 0


def fail(client, mode, **data):
    return client.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})


def test_it_is_a_test_command(client):
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert e.value.code == 59


def test_refused_bad_settings_and_other_databases(test_server):
    c = test_server.client()
    with pytest.raises(OperationFailure) as e:
        c.test.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert e.value.code == 13
    for mode, data in [("sometimes", {"failCommands": ["insert"]}), ({"times": -1}, {"failCommands": ["insert"]}),
                       ("alwaysOn", {}), ("alwaysOn", {"failCommands": ["insert"], "blockConnection": True})]:
        with pytest.raises(OperationFailure) as e:
            fail(c, mode, **data)
        assert e.value.code == 2, (mode, data)
    c.test.t.insert_one({"_id": 1})  # nothing was armed


def test_error_code_fails_that_many_commands_and_changes_nothing(test_server):
    c = test_server.client(retryWrites=False)
    fail(c, {"times": 2}, failCommands=["insert", "find"], errorCode=8, errorLabels=["Custom"])
    with pytest.raises(OperationFailure) as e:
        c.test.t.insert_one({"_id": 1})
    assert e.value.code == 8 and e.value.details["codeName"] == "UnknownError"
    assert e.value.details["errmsg"] == "Failing command due to 'failCommand' failpoint"
    assert e.value.has_error_label("Custom")
    # find_one({_id}) would take the point-read fast path: not while armed.
    with pytest.raises(OperationFailure):
        c.test.t.find_one({"_id": 1})
    assert c.test.t.find_one({"_id": 1}) is None, "spent: the failed insert wrote nothing"
    c.test.t.insert_one({"_id": 1})
    assert fail(c, "off")["count"] == 2
    # A retryable code on a retryable write is labelled, so the driver
    # retries it (and the retry succeeds). (Not a "not primary" code: the
    # driver would wait for its next heartbeat before selecting us again.)
    r = test_server.client()
    fail(r, {"times": 1}, failCommands=["insert"], errorCode=6)
    r.test.t.insert_one({"_id": 2})
    assert fail(r, "off")["count"] == 3, "a running total"
    assert r.test.t.find_one({"_id": 2}) == {"_id": 2}


def test_close_connection_is_a_network_error(test_server):
    c = test_server.client(retryReads=False)
    c.test.t.insert_one({"_id": 1})
    fail(c, {"times": 1}, failCommands=["count"], closeConnection=True)
    with pytest.raises(AutoReconnect):
        c.test.t.estimated_document_count()
    assert c.test.t.estimated_document_count() == 1


def test_write_concern_error_comes_after_the_write(test_server):
    c = test_server.client(retryWrites=False)
    # (Not a state-change code such as 91: pymongo would then wait for
    # the next heartbeat before it selects the server again.)
    fail(c, {"times": 1}, failCommands=["insert"],
         writeConcernError={"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out",
                            "errInfo": {"wtimeout": True}})
    with pytest.raises(WriteConcernError) as e:
        c.test.t.insert_one({"_id": 7})
    assert e.value.code == 64 and e.value.details["errInfo"] == {"wtimeout": True}
    assert c.test.t.find_one({"_id": 7}) == {"_id": 7}


def test_block_connection_and_app_name(test_server):
    mine = test_server.client(appname="mine", socketTimeoutMS=300, retryReads=False)
    other = test_server.client(appname="other")
    mine.test.t.insert_one({"_id": 1})
    fail(other, "alwaysOn", failCommands=["find"], blockConnection=True, blockTimeMS=3000, appName="mine")
    assert other.test.t.find_one({"x": None}) == {"_id": 1}, "another application is not blocked"
    with pytest.raises(NetworkTimeout):
        mine.test.t.find_one({"x": None})
    fail(other, "off")
    assert test_server.client(appname="mine").test.t.find_one({"x": None}) == {"_id": 1}


def test_skip_lets_the_first_ones_through(test_server):
    c = test_server.client(retryWrites=False)
    fail(c, {"skip": 1}, failCommands=["insert"], errorCode=2)
    c.test.t.insert_one({"_id": 1})
    for i in (2, 3):
        with pytest.raises(OperationFailure):
            c.test.t.insert_one({"_id": i})
    fail(c, "off")
    assert [d["_id"] for d in c.test.t.find()] == [1]


def test_activation_probability_fails_a_share_of_the_commands(test_server):
    c = test_server.client(retryWrites=False)
    fail(c, {"activationProbability": 0.5}, failCommands=["insert"], errorCode=2)
    failed = 0
    for i in range(200):
        try:
            c.test.t.insert_one({"_id": i})
        except OperationFailure as e:
            assert e.code == 2
            failed += 1
    reply = fail(c, "off")
    assert 50 < failed < 150 and reply["count"] == failed, (failed, reply)
    assert c.test.t.count_documents({}) == 200 - failed
    with pytest.raises(OperationFailure) as e:
        fail(c, {"activationProbability": 2}, failCommands=["insert"], errorCode=2)
    assert e.value.code == 2 and "between 0.0 and 1.0" in str(e.value)


def test_a_handshake_meets_the_fail_point_too(test_server):
    c = test_server.client()
    # Only the new client's application: its first handshake (a legacy
    # OP_QUERY isMaster from pymongo) has the connection closed.
    before = c.admin.command({"configureFailPoint": "failCommand", "mode": "off"})["count"]
    fail(c, {"times": 1}, failCommands=["hello", "isMaster"], closeConnection=True, appName="newcomer")
    newcomer = test_server.client(appname="newcomer")
    newcomer.test.t.insert_one({"_id": 1})  # after the monitor's retry
    assert fail(c, "off")["count"] == before + 1, "the handshake met the fail point once"
    assert c.admin.command("ping")["ok"] == 1.0, "other clients were never touched"


def test_max_time_always_time_out(test_server):
    c = test_server.client()
    c.test.c.insert_one({"_id": 1})
    c.admin.command({"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": {"times": 2}})
    for _ in range(2):
        with pytest.raises(pymongo.errors.ExecutionTimeout):
            c.test.c.find_one({}, max_time_ms=10_000)
    assert c.test.c.find_one({}, max_time_ms=10_000) == {"_id": 1}
    c.admin.command({"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "alwaysOn"})
    assert c.test.c.find_one({}) == {"_id": 1}  # no maxTimeMS: runs
    with pytest.raises(OperationFailure) as e:
        c.test.command("count", "c", maxTimeMS=5)
    assert e.value.code == 50
    c.admin.command({"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "off"})
    assert c.test.command("count", "c", maxTimeMS=5)["n"] == 1


def test_get_parameter_says_test_commands_are_on(test_server):
    assert test_server.client().admin.command("getParameter", "*")["enableTestCommands"] is True


def test_get_parameter_says_test_commands_are_off(client):
    assert client.admin.command("getParameter", "*")["enableTestCommands"] is False
    assert client.admin.command("getParameter", "*")["transactionLifetimeLimitSeconds"] == 60
