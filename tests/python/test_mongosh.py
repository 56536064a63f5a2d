"""A smoke test with the real mongosh (npm package, run with Node):
connect, insert, find, update, findAndModify, the count helpers, distinct,
delete, `show dbs`, `show collections`.

mongosh is installed into tests/mongosh/node_modules (pinned by its
package-lock.json) on first use; the test is skipped only when Node.js and
npm are missing."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent / "mongosh"
MONGOSH = HERE / "node_modules" / ".bin" / "mongosh"


@pytest.fixture(scope="module")
def mongosh():
    if not MONGOSH.exists():
        if not (shutil.which("node") and shutil.which("npm")):
            pytest.skip("Node.js and npm are needed for the mongosh smoke test")
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True, timeout=600
        )
    return MONGOSH


def run(mongosh, server, *args):
    out = subprocess.run(
        [str(mongosh), f"mongodb://127.0.0.1:{server.port}/shop", "--quiet", "--norc", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_mongosh_everyday_session(mongosh, server):
    lines = [json.loads(line) for line in run(mongosh, server, "--file", str(HERE / "smoke.js"))]
    assert lines == [
        {"acknowledged": True, "insertedId": 1},
        {"acknowledged": True, "insertedIds": {"0": 2, "1": 3}},
        [{"_id": 1, "name": "lamp", "qty": 3}, {"_id": 2, "name": "desk", "qty": 1}],
        {"qty": 1},
        {"acknowledged": True, "insertedId": None, "matchedCount": 1, "modifiedCount": 1, "upsertedCount": 0},
        {"acknowledged": True, "insertedId": None, "matchedCount": 3, "modifiedCount": 1, "upsertedCount": 0},
        {"_id": 1, "name": "lamp", "qty": 3, "log": ["sold"]},
        3,
        3,
        ["chair", "desk", "lamp"],
        {"acknowledged": True, "deletedCount": 1},
        [{"_id": 1, "name": "lamp"}, {"_id": 3, "name": "chair"}],
        [{"v": 2, "key": {"_id": 1}, "name": "_id_"}],
    ]


def test_mongosh_show_dbs_and_collections(mongosh, server):
    with server.client() as c:
        c.shop.items.insert_one({"_id": 1})
        c.shop.orders.insert_one({"_id": 1})
        c.other.things.insert_one({"_id": 1})
    dbs = run(mongosh, server, "--eval", "show dbs")
    assert [line.split()[0] for line in dbs] == ["admin", "config", "local", "other", "shop"]
    assert all(line.split()[-1] in ("KiB", "MiB") for line in dbs), dbs
    assert run(mongosh, server, "--eval", "show collections") == ["items", "orders"]


def test_mongosh_transactions_scenario(mongosh, server):
    """conflicts-and-transactions.md through mongosh's session helpers."""
    lines = [json.loads(line) for line in run(mongosh, server, "--file", str(HERE / "transactions.js"))]
    conflict = {"code": 112, "codeName": "WriteConflict", "labels": ["TransientTransactionError"]}
    updated = {"acknowledged": True, "insertedId": None, "matchedCount": 1, "modifiedCount": 1, "upsertedCount": 0}
    assert lines == [
        updated,
        [False],
        conflict,
        updated,
        {"waited": True},
        {"code": 251, "codeName": "NoSuchTransaction", "labels": ["TransientTransactionError"]},
        [{"_id": "x", "value": 8}],
        {"_id": "demo_id", "seq": 1},
        {"_id": "demo_id", "seq": 2},
        conflict,
        {"_id": "demo_id", "seq": 3},
        {"outcomes": ["no error", "no error"], "onCall": 0},
        {"outcomes": ["no error", conflict], "onCall": 1},
    ]
