"""The local session cache: every command with an `lsid` marks its session
used; `$listLocalSessions` lists the sessions; `startSession` adds one;
`endSessions` forgets them; `killSessions` and `killAllSessions` close
their cursors (as mongod's logical session cache)."""

import hashlib

import pytest
from bson import Binary
from pymongo.errors import OperationFailure

NO_AUTH_UID = hashlib.sha256(b"").digest()


def listed(client, spec=None):
    """The session ids `$listLocalSessions` lists, checking each record's shape."""
    ids = []
    for r in client.admin.aggregate([{"$listLocalSessions": spec or {}}]):
        assert sorted(r) == ["_id", "lastUse"], r
        assert sorted(r["_id"]) == ["id", "uid"]
        assert r["_id"]["uid"] == NO_AUTH_UID
        ids.append(r["_id"]["id"])
    return ids


def uuid_of(session):
    return session.session_id["id"]


def test_a_session_a_command_used_is_listed_until_ended(client):
    client.test.t.insert_one({"_id": 1})
    s = client.start_session()
    client.test.t.find_one({"x": 1}, session=s)
    assert uuid_of(s) in listed(client)
    client.admin.command("endSessions", [s.session_id])
    assert uuid_of(s) not in listed(client)
    client.test.t.find_one({"x": 1}, session=s)
    assert uuid_of(s) in listed(client)
    s.end_session()


def test_the_point_read_path_marks_its_session_too(client):
    client.test.t.insert_one({"_id": 1})
    with client.start_session() as s:
        assert client.test.t.find_one({"_id": 1}, session=s) == {"_id": 1}
        assert uuid_of(s) in listed(client)


def test_start_session_returns_a_new_listed_id(client):
    r = client.admin.command("startSession")
    assert r["timeoutMinutes"] == 30
    sid = r["id"]["id"]
    assert isinstance(sid, Binary) and sid.subtype == 4 and len(sid) == 16
    assert sid in listed(client)
    assert client.admin.command("startSession")["id"]["id"] != sid


def test_list_filters_by_user_and_checks_its_spec(client):
    with client.start_session() as s:
        client.test.t.find_one({}, session=s)
        assert uuid_of(s) in listed(client, {"allUsers": True})
        assert uuid_of(s) in listed(client, {"users": [{"user": "", "db": ""}]})
        assert listed(client, {"users": [{"user": "ann", "db": "admin"}]}) == []
    cases = [
        ([{"$listLocalSessions": 1}], 14),
        ([{"$listLocalSessions": {"allUsers": 1}}], 14),
        ([{"$listLocalSessions": {"frob": 1}}], 40415),
        ([{"$listLocalSessions": {"users": [{"user": "a"}]}}], 40414),
        ([{"$listLocalSessions": {"allUsers": True, "users": [{"user": "a", "db": "b"}]}}], 12),
        ([{"$match": {}}, {"$listLocalSessions": {}}], 40602),
    ]
    for pipeline, code in cases:
        with pytest.raises(OperationFailure) as e:
            list(client.admin.aggregate(pipeline))
        assert e.value.code == code, (pipeline, e.value.details)
    with pytest.raises(OperationFailure) as e:
        list(client.test.t.aggregate([{"$listLocalSessions": {}}]))
    assert e.value.code == 73
    assert "must be run against the database with {aggregate: 1}" in str(e.value)


def test_later_stages_run_over_the_list(client):
    with client.start_session() as s:
        client.test.t.find_one({}, session=s)
        out = list(client.admin.aggregate([
            {"$listLocalSessions": {}}, {"$limit": 1}, {"$addFields": {"dummy": "d"}}, {"$project": {"_id": 0, "dummy": 1}},
        ]))
        assert out == [{"dummy": "d"}]


def test_kill_sessions_closes_their_cursors_and_end_sessions_checks_its_list(client):
    client.test.t.insert_many([{"_id": i} for i in range(10)])
    with client.start_session() as s, client.start_session() as other:
        mine = client.test.t.find({}, batch_size=2, session=s)
        theirs = client.test.t.find({}, batch_size=2, session=other)
        assert [next(mine)["_id"], next(theirs)["_id"]] == [0, 0]
        client.admin.command("killSessions", [s.session_id])
        # Killed, not ended: both are still listed.
        assert uuid_of(s) in listed(client) and uuid_of(other) in listed(client)
        with pytest.raises(OperationFailure) as e:
            list(mine)
        assert e.value.code == 43
        assert [d["_id"] for d in theirs] == list(range(1, 10))
    for bad, code in [(1, 14), ([1], 14), ([{}], 40414), ([{"id": Binary(b"x" * 16, 0)}], 14)]:
        with pytest.raises(OperationFailure) as e:
            client.admin.command("endSessions", bad)
        assert e.value.code == code, bad


def test_kill_all_sessions_closes_every_session_cursor(client):
    client.test.t.insert_many([{"_id": i} for i in range(10)])
    with client.start_session() as s:
        cursor = client.test.t.find({}, batch_size=2, session=s)
        assert next(cursor)["_id"] == 0
        client.admin.command("killAllSessions", [{"user": "ann", "db": "admin"}])
        assert next(cursor)["_id"] == 1  # another user's sessions: none here
        client.admin.command("killAllSessions", [])
        with pytest.raises(OperationFailure) as e:
            list(cursor)
        assert e.value.code == 43
        assert uuid_of(s) in listed(client)
    assert len(list(client.test.t.find({}, batch_size=3))) == 10
