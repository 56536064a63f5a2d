//! Commands run in process, through the same dispatch as the network path
//! (`commands::run`), on an engine over the in-memory file system: a
//! command can be tested without starting the binary or opening a socket.

use bson::{doc, Bson, Document};
use server::commands;
use server::exec::call::{Call, Place};
use server::net::wire::OpMsg;
use server::server::{Conn, ServerOptions, Shared};
use std::path::Path;
use std::sync::Arc;
use storage::{Config, Engine};
use testkit::mem::MemVfs;

fn shared() -> Arc<Shared> {
    let dir = Path::new("/db");
    let engine = Engine::open_with_vfs(Arc::new(MemVfs::new()), dir, Config::default()).unwrap();
    let options = ServerOptions {
        bind: Vec::new(),
        port: 0,
        dbpath: dir.to_path_buf(),
        argv: Vec::new(),
        parsed: Document::new(),
        test_commands: false,
    };
    Shared::open(engine, options).unwrap()
}

fn conn() -> Conn {
    let addr = "127.0.0.1:1".parse().unwrap();
    Conn { id: 1, peer: addr, local: addr, app_name: Default::default() }
}

/// Run `body` (with `$db: "t"`) and, for a write, its document sequence.
fn run(shared: &Shared, body: Document, sequence: Option<(&str, Vec<Document>)>) -> Document {
    let mut body = body;
    body.insert("$db", "t");
    let sequences = sequence.map(|(name, docs)| vec![(name.to_string(), docs)]).unwrap_or_default();
    let conn = conn();
    let call = Call::new(&conn, Place::Blocking, false);
    commands::run(shared, &call, &OpMsg { flags: 0, body: body.into(), sequences }).into_document()
}

fn ok(reply: &Document) {
    assert_eq!(reply.get("ok"), Some(&Bson::Double(1.0)), "{reply}");
}

/// A count in a reply, whatever integer type carries it.
fn int(reply: &Document, key: &str) -> i64 {
    match reply.get(key) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("{key}: {other:?} in {reply}"),
    }
}

fn first_batch(reply: &Document) -> Vec<Document> {
    ok(reply);
    let batch = reply.get_document("cursor").unwrap().get_array("firstBatch").unwrap();
    batch.iter().map(|d| d.as_document().unwrap().clone()).collect()
}

#[test]
fn insert_find_update_delete_aggregate_in_process() {
    let s = shared();
    let docs: Vec<Document> = (0..5).map(|i| doc! { "_id": i, "n": i % 2, "v": { "$numberLong": "5" } }).collect();
    let reply = run(&s, doc! { "insert": "c" }, Some(("documents", docs.clone())));
    ok(&reply);
    assert_eq!(int(&reply, "n"), 5);

    // find: a point read, then a scan with a sort.
    assert_eq!(first_batch(&run(&s, doc! { "find": "c", "filter": { "_id": 3 } }, None)), vec![docs[3].clone()]);
    let odd = first_batch(&run(&s, doc! { "find": "c", "filter": { "n": 1 }, "sort": { "_id": -1 } }, None));
    assert_eq!(odd.iter().map(|d| d.get_i32("_id").unwrap()).collect::<Vec<_>>(), vec![3, 1]);

    // update: one by _id, then many by a scan.
    let reply = run(&s, doc! { "update": "c", "updates": [{ "q": { "_id": 0 }, "u": { "$set": { "x": 1 } } }] }, None);
    assert_eq!((int(&reply, "n"), int(&reply, "nModified")), (1, 1));
    let reply = run(
        &s,
        doc! { "update": "c", "updates": [{ "q": { "n": 0 }, "u": { "$inc": { "x": 10 } }, "multi": true }] },
        None,
    );
    assert_eq!((int(&reply, "n"), int(&reply, "nModified")), (3, 3));
    let x = first_batch(&run(&s, doc! { "find": "c", "filter": { "_id": 0 } }, None));
    assert_eq!(int(&x[0], "x"), 11);

    // delete: one by _id, then all that match.
    let reply = run(&s, doc! { "delete": "c", "deletes": [{ "q": { "_id": 4 }, "limit": 1 }] }, None);
    assert_eq!(int(&reply, "n"), 1);
    let reply = run(&s, doc! { "delete": "c", "deletes": [{ "q": { "n": 1 }, "limit": 0 }] }, None);
    assert_eq!(int(&reply, "n"), 2);

    // aggregate over what is left: _id 0 and 2.
    let pipeline = vec![doc! { "$group": { "_id": null, "total": { "$sum": "$x" }, "ids": { "$push": "$_id" } } }];
    let out = first_batch(&run(&s, doc! { "aggregate": "c", "pipeline": pipeline, "cursor": {} }, None));
    assert_eq!(out, vec![doc! { "_id": null, "total": 21, "ids": [0, 2] }]);
}

#[test]
fn errors_come_back_as_mongod_replies() {
    let s = shared();
    let reply = run(&s, doc! { "find": "c", "filter": { "a": { "$frob": 1 } } }, None);
    assert_eq!((reply.get_i32("code").unwrap(), reply.get_str("codeName").unwrap()), (2, "BadValue"));
    let reply = run(&s, doc! { "noSuchCommand": 1 }, None);
    assert_eq!(reply.get_i32("code").unwrap(), 59);
}
