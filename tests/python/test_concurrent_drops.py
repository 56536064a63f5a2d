"""Commands on a view or a collection that another client drops meanwhile
answer with MongoDB's normal errors or an empty result, never an internal
error, and the server keeps serving (issue 18: two check-then-use races)."""

import threading

from pymongo.errors import OperationFailure


def test_dropping_views_and_collections_under_running_commands(client):
    db = client.drops
    stop = threading.Event()
    unexpected = []

    def churn():
        while not stop.is_set():
            db.base.insert_many([{"_id": i, "x": i} for i in range(20)])
            db.command("create", "v", viewOn="base", pipeline=[{"$match": {"x": {"$gte": 0}}}])
            db.drop_collection("v")
            db.drop_collection("base")

    def read():
        while not stop.is_set():
            for run in (lambda: list(db.v.find({"x": {"$lt": 10}})),
                        lambda: db.command("dropIndexes", "base", index="*"),
                        lambda: list(db.base.list_indexes())):
                try:
                    run()
                except OperationFailure as e:
                    # Missing namespace or a killed scan are normal answers; an internal error is not.
                    if e.code == 1 or "panicked" in str(e):
                        unexpected.append(e.details)

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    stop.wait(4)
    stop.set()
    for t in threads:
        t.join()
    assert not unexpected, unexpected[:3]
    assert client.admin.command("ping")["ok"] == 1
