// Everyday use through the real mongosh; test_mongosh.py checks each line.
db = db.getSiblingDB("shop");
print(EJSON.stringify(db.items.insertOne({ _id: 1, name: "lamp", qty: 3 })));
print(EJSON.stringify(db.items.insertMany([{ _id: 2, name: "desk", qty: 1 }, { _id: 3, name: "chair", qty: 0 }])));
print(EJSON.stringify(db.items.find({ qty: { $gt: 0 } }).sort({ _id: 1 }).toArray()));
print(EJSON.stringify(db.items.findOne({ name: "desk" }, { _id: 0, qty: 1 })));
print(EJSON.stringify(db.items.updateOne({ _id: 3 }, { $inc: { qty: 5 }, $set: { tag: "new" } })));
print(EJSON.stringify(db.items.updateMany({}, { $unset: { tag: "" } })));
print(EJSON.stringify(db.items.findOneAndUpdate({ _id: 1 }, { $push: { log: "sold" } }, { returnDocument: "after" })));
print(EJSON.stringify(db.items.countDocuments({ qty: { $gte: 1 } })));
print(EJSON.stringify(db.items.estimatedDocumentCount()));
print(EJSON.stringify(db.items.distinct("name")));
print(EJSON.stringify(db.items.deleteOne({ _id: 2 })));
print(EJSON.stringify(db.items.find({}, { name: 1 }).sort({ name: -1 }).toArray()));
print(EJSON.stringify(db.items.getIndexes()));
