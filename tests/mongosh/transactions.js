// The transactions scenario (../shared/scenarios/conflicts-and-transactions.md)
// through the real mongosh; test_mongosh.py checks each line.
db = db.getSiblingDB("tx");
const out = (v) => print(EJSON.stringify(v));
const failure = (f) => {
  try {
    f();
    return "no error";
  } catch (e) {
    return { code: e.code, codeName: e.codeName, labels: e.errorLabels || [] };
  }
};

// Fail-on-conflict inside a transaction, wait-on-conflict outside.
db.adminCommand({ setParameter: 1, transactionLifetimeLimitSeconds: 2 });
db.demo.drop();
db.demo.insertOne({ _id: "x", value: 0 });
const sessionA = db.getMongo().startSession();
sessionA.startTransaction();
const dbA = sessionA.getDatabase(db.getName());
out(dbA.demo.updateOne({ _id: "x" }, { $inc: { value: 2 } }));
// mongosh's db.currentOp() lists the open transaction (an idle session).
out(db.currentOp().inprog.filter((op) => op.type === "idleSession").map((op) => op.transaction.parameters.autocommit));
const sessionB = db.getMongo().startSession();
sessionB.startTransaction();
const dbB = sessionB.getDatabase(db.getName());
out(failure(() => dbB.demo.updateOne({ _id: "x" }, { $inc: { value: 4 } })));
sessionB.abortTransaction();
const started = Date.now();
out(dbB.demo.updateOne({ _id: "x" }, { $inc: { value: 8 } }));
out({ waited: Date.now() - started >= 1000 });
out(failure(() => sessionA.commitTransaction()));
out(db.demo.find().toArray());
db.adminCommand({ setParameter: 1, transactionLifetimeLimitSeconds: 60 });

// Sequences: no gap inside transactions.
const next = (d) =>
  d.sequences.findOneAndUpdate({ _id: "demo_id" }, { $inc: { seq: 1 } }, { upsert: true, returnDocument: "after" });
out(next(db));
const s1 = db.getMongo().startSession();
const s2 = db.getMongo().startSession();
s1.startTransaction();
s2.startTransaction();
out(next(s1.getDatabase("tx")));
out(failure(() => next(s2.getDatabase("tx"))));
s2.abortTransaction();
s1.commitTransaction();
s2.startTransaction();
out(next(s2.getDatabase("tx")));
s2.commitTransaction();

// Write skew: both commit under snapshot isolation, one is refused under serializable.
const doctors = (readConcern) => {
  db.oncall.drop();
  db.oncall.insertMany([{ _id: "alice", shift: 1, on: true }, { _id: "bob", shift: 1, on: true }]);
  const sessions = [db.getMongo().startSession(), db.getMongo().startSession()];
  sessions.forEach((s) => s.startTransaction(readConcern ? { readConcern: { level: readConcern } } : {}));
  const counts = sessions.map((s) => s.getDatabase("tx").oncall.countDocuments({ shift: 1, on: true }));
  const outcomes = ["alice", "bob"].map((who, i) =>
    failure(() => {
      if (counts[i] >= 2) sessions[i].getDatabase("tx").oncall.updateOne({ _id: who }, { $set: { on: false } });
      sessions[i].commitTransaction();
    })
  );
  return { outcomes, onCall: db.oncall.countDocuments({ on: true }) };
};
out(doctors(null));
out(doctors("serializable"));
