//! `arbordb-bench canned-server` (hidden): the YCSB driver ceiling.
//!
//! A server that speaks just enough of the wire protocol for the Rust
//! `mongodb` driver to run YCSB against it, and does no database work:
//! every `find` gets the same prepared reply (one YCSB record, 10 fields
//! of 100 bytes), every `update` the prepared `{n: 1, nModified: 1}`,
//! every `insert` its count. Replies carry `$clusterTime` and
//! `operationTime` and the handshake answers as a replica-set primary, as
//! `arbordb serve` does, so the driver takes the same paths per operation
//! as against ArborDB (sessions, retryable-write transaction numbers,
//! cluster-time gossip). It reads each request whole and writes each reply
//! with one system call (reading as `arbordb serve` does, through a
//! buffer): the least a server can do per operation.
//!
//! `arbordb-bench ycsb --driver-ceiling` runs the workloads against it:
//! the throughput it measures estimates what a server reached through this
//! driver can reach on the same machine, with client and server sharing
//! the CPUs as they do for ArborDB and PostgreSQL.
//!
//! It is a measuring instrument, not a database: it is reachable only
//! through `bench`, stores nothing, and answers every other command with
//! `{ok: 1}`.
//!
//! It is an estimate, not a strict bound: the driver's CPU per operation
//! depends on how replies arrive (their timing across connections), and
//! ArborDB has read faster than it at 8 client tasks.

use crate::BenchResult;
use bson::{doc, rawdoc, RawDocument, RawDocumentBuf};
use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Args, Debug, Clone)]
pub struct CannedArgs {
    /// Port to listen on (loopback).
    #[arg(long)]
    port: u16,
}

const OP_REPLY: i32 = 1;
const OP_QUERY: i32 = 2004;
const OP_MSG: i32 = 2013;
/// The largest message a driver may send (mongod's maxMessageSizeBytes).
const MESSAGE_MAX: usize = 48_000_000;

/// Reply bodies built ahead, so answering costs only the framing. Each
/// connection rebuilds them when the second changes: their cluster time is
/// the current second's, as `arbordb serve`'s replies' is, so the driver
/// advances its cluster time as often as against ArborDB.
struct Replies {
    second: u64,
    find: RawDocumentBuf,
    update: RawDocumentBuf,
    ok: RawDocumentBuf,
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `body` with the `$clusterTime` and `operationTime` every reply of
/// `arbordb serve` carries (`commands::cluster_time_fields`).
fn with_cluster_time(mut body: RawDocumentBuf) -> RawDocumentBuf {
    let now = bson::Timestamp { time: now_seconds() as u32, increment: 1 };
    for (key, value) in server::commands::cluster_time_fields(now, None) {
        body.append(key, bson::RawBson::try_from(value).expect("cluster time fields convert to raw BSON"));
    }
    body
}

impl Replies {
    fn new() -> Replies {
        let mut record = RawDocumentBuf::new();
        record.append("_id", "user0000000000000000000");
        for f in 0..crate::ycsb::FIELDS {
            record.append(format!("field{f}"), "x".repeat(crate::ycsb::FIELD_BYTES));
        }
        let mut batch = bson::RawArrayBuf::new();
        batch.push(record);
        let mut cursor = RawDocumentBuf::new();
        cursor.append("firstBatch", batch);
        cursor.append("id", 0i64);
        cursor.append("ns", "ycsb.usertable");
        let mut find = RawDocumentBuf::new();
        find.append("cursor", cursor);
        find.append("ok", 1.0);
        Replies {
            second: now_seconds(),
            find: with_cluster_time(find),
            update: with_cluster_time(rawdoc! { "n": 1, "nModified": 1, "ok": 1.0 }),
            ok: with_cluster_time(rawdoc! { "ok": 1.0 }),
        }
    }
}

/// A document's bytes as the server writes them.
fn raw(d: &bson::Document) -> BenchResult<RawDocumentBuf> {
    Ok(RawDocumentBuf::from_bytes(doc::bson_bytes::encode(d)?)?)
}

/// The handshake reply: a one-member replica set's primary, reachable at
/// `me`, without `topologyVersion` (so the driver polls once per heartbeat
/// rather than streaming, and this server never holds a reply back).
fn hello(me: &str, legacy: bool) -> BenchResult<RawDocumentBuf> {
    let primary_field = if legacy { "ismaster" } else { "isWritablePrimary" };
    let mut d = raw(&doc! {
        "hosts": [me],
        "setName": server::commands::SET_NAME,
        "setVersion": 1,
        primary_field: true,
        "secondary": false,
        "primary": me,
        "me": me,
        "maxBsonObjectSize": 16 * 1024 * 1024,
        "maxMessageSizeBytes": MESSAGE_MAX as i32,
        "maxWriteBatchSize": 100_000,
        "localTime": bson::DateTime::now(),
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": 1,
        "minWireVersion": 0,
        "maxWireVersion": server::limits::wire_version_max,
        "readOnly": false,
        "ok": 1.0,
    })?;
    d = with_cluster_time(d);
    Ok(d)
}

/// OP_MSG's sections after its flagBits, as (kind, bytes): kind 0 is the
/// command document, kind 1 a document sequence; both begin with their
/// int32 length.
fn sections(body: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut pos = 4;
    std::iter::from_fn(move || {
        let kind = *body.get(pos)?;
        let len = i32::from_le_bytes(body.get(pos + 1..pos + 5)?.try_into().ok()?) as usize;
        let bytes = body.get(pos + 1..(pos + 1).checked_add(len)?)?;
        pos += 1 + len;
        Some((kind, bytes))
    })
}

/// The command document of a request: OP_MSG's body section, or OP_QUERY's
/// query (a driver's first handshake may use either).
fn command_of(op: i32, body: &[u8]) -> Option<&RawDocument> {
    let bytes = match op {
        OP_MSG => sections(body).find(|(kind, _)| *kind == 0)?.1,
        OP_QUERY => {
            // flags, full collection name (a C string), skip, return, query.
            let at = 4 + body.get(4..)?.iter().position(|&b| b == 0)? + 1 + 8;
            let len = i32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?) as usize;
            body.get(at..at.checked_add(len)?)?
        }
        _ => return None,
    };
    RawDocument::from_bytes(bytes).ok()
}

/// The number of documents an insert carries (its `documents` array or
/// document sequence), for its reply's `n`.
fn insert_count(op: i32, body: &[u8], cmd: &RawDocument) -> i32 {
    if let Ok(docs) = cmd.get_array("documents") {
        return docs.into_iter().count() as i32;
    }
    if op != OP_MSG {
        return 0;
    }
    let Some((_, seq)) = sections(body).find(|(kind, _)| *kind == 1) else { return 0 };
    // size, identifier (a C string), then the documents.
    let Some(id_len) = seq.get(4..).and_then(|s| s.iter().position(|&b| b == 0)) else { return 0 };
    let (mut at, mut n) = (4 + id_len + 1, 0);
    while let Some(b) = seq.get(at..at + 4) {
        let len = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        match usize::try_from(len).ok().filter(|&l| l >= 5).and_then(|l| at.checked_add(l)) {
            Some(end) if end <= seq.len() => (at, n) = (end, n + 1),
            _ => break,
        }
    }
    n
}

/// One framed reply to `request_id`: OP_MSG for OP_MSG, OP_REPLY for a
/// legacy OP_QUERY.
fn frame(out: &mut Vec<u8>, request_id: i32, op: i32, reply: &RawDocument) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    if op == OP_MSG {
        out.extend_from_slice(&OP_MSG.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.push(0);
    } else {
        out.extend_from_slice(&OP_REPLY.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes()); // responseFlags
        out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
        out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
        out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    }
    out.extend_from_slice(reply.as_bytes());
    let len = out.len() as i32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
}

async fn connection(stream: TcpStream) -> BenchResult<()> {
    stream.set_nodelay(true)?;
    let me = stream.local_addr()?.to_string();
    // Buffered as `arbordb serve` reads: a header and a small body in one
    // read call.
    let mut stream = BufReader::with_capacity(64 * 1024, stream);
    let (mut body, mut out, mut replies) = (Vec::new(), Vec::new(), Replies::new());
    loop {
        let mut header = [0u8; 16];
        if stream.read_exact(&mut header).await.is_err() {
            return Ok(()); // the client hung up
        }
        let len = i32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let request_id = i32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let op = i32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        if !(16..=MESSAGE_MAX).contains(&len) {
            return Err(format!("message length {len} out of range").into());
        }
        body.resize(len - 16, 0);
        stream.read_exact(&mut body).await?;
        let Some(cmd) = command_of(op, &body) else {
            return Err(format!("no command in a message of op code {op}").into());
        };
        let name = match cmd.iter().next() {
            Some(Ok((name, _))) => name,
            _ => return Err("an empty command".into()),
        };
        if replies.second != now_seconds() {
            replies = Replies::new();
        }
        let made;
        let reply: &RawDocument = match name {
            "find" => &replies.find,
            "update" => &replies.update,
            "hello" | "isMaster" | "ismaster" => {
                made = hello(&me, name != "hello")?;
                &made
            }
            "insert" => {
                let n = insert_count(op, &body, cmd);
                made = with_cluster_time(rawdoc! { "n": n, "ok": 1.0 });
                &made
            }
            _ => &replies.ok,
        };
        frame(&mut out, request_id, op, reply);
        stream.write_all(&out).await?;
    }
}

async fn serve(a: CannedArgs) -> BenchResult<()> {
    let listener = TcpListener::bind(("127.0.0.1", a.port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = connection(stream).await {
                eprintln!("canned server: {e}");
            }
        });
    }
}

pub fn run(a: CannedArgs) -> BenchResult<()> {
    crate::report::block_on(serve(a))
}
