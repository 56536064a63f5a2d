//! One client connection: reading frames, fail points, running commands
//! (inline or on the blocking pool), exhaust replies and awaitable
//! `hello`, writing replies.

use crate::commands;
use crate::limits::*;
use crate::net::compression;
use crate::net::wire;
use crate::net::wire::Header;
use crate::net::wire::Request;
use crate::net::wire::WireError;
use crate::server::Conn;
use crate::server::Shared;
use bson::Document;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub(crate) async fn connection(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    let id = shared.connections_total.fetch_add(1, Ordering::Relaxed) + 1;
    shared.connections_current.fetch_add(1, Ordering::Relaxed);
    let local = stream.local_addr().unwrap_or(peer);
    let conn = Conn { id, peer, local, app_name: Arc::default() };
    let _ = stream.set_nodelay(true);
    tracing::debug!(conn = id, %peer, "connection accepted");
    // Buffered: a header and a small body arrive in one read call.
    let mut stream = BufReader::with_capacity(READ_BUFFER_BYTES, stream);
    let result = serve_connection(&shared, &conn, &mut stream).await;
    if let Err(e) = result {
        tracing::info!(conn = id, %peer, error = %e, "connection closed");
    }
    shared.connections_current.fetch_sub(1, Ordering::Relaxed);
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// A message answered by the point-read fast path, or one to dispatch.
pub(crate) enum Parsed {
    Answered(Vec<u8>),
    Request(Request),
}

/// How often expired sessions are looked for.
pub(crate) const SESSION_REAP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Bytes a connection reads ahead.
pub(crate) const READ_BUFFER_BYTES: usize = 64 * 1024;

async fn serve_connection(
    shared: &Arc<Shared>,
    conn: &Conn,
    stream: &mut BufReader<TcpStream>,
) -> Result<(), ConnError> {
    let mut stop = shared.shutdown.subscribe();
    loop {
        let mut head = [0u8; header_bytes];
        tokio::select! {
            read = stream.read_exact(&mut head) => match read {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            },
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        let mut header = Header::parse(&head)?;
        let mut body = vec![0u8; header.length - header_bytes];
        stream.read_exact(&mut body).await?;
        let net = &shared.network;
        net.bytes_in.fetch_add(header.length as u64, Ordering::Relaxed);
        net.requests.fetch_add(1, Ordering::Relaxed);
        let mut compressor = None;
        if header.op_code == wire::OP_COMPRESSED {
            let (op, inner, c) = compression::decompress(&body)?;
            let counters = &net.compression[c.id() as usize];
            counters[0].fetch_add(body.len() as u64, Ordering::Relaxed);
            counters[1].fetch_add(inner.len() as u64, Ordering::Relaxed);
            header = Header { length: header_bytes + inner.len(), op_code: op, ..header };
            body = inner;
            compressor = Some(c);
        }
        // A fail point may name `find`: no fast path while one is set.
        let point = match shared.fail_points.is_armed() {
            true => None,
            false => crate::net::point::find_by_id(shared, &header, &body),
        };
        let parsed = match point {
            Some(reply) => Ok(Parsed::Answered(reply)),
            None => wire::parse(&header, &body).map(Parsed::Request),
        };
        let reply = match parsed {
            Ok(Parsed::Answered(reply)) => reply,
            Ok(Parsed::Request(Request::Msg(msg))) => {
                let more_to_come = msg.flags & wire::MORE_TO_COME != 0;
                let name = msg.body.keys().next().map(String::as_str).unwrap_or("");
                let Ok(failing) = meet_fail_point(shared, conn, name, &msg.body).await else {
                    return Ok(());
                };
                if let Some(action) = &failing {
                    if let Some(code) = action.error_code {
                        if !more_to_come {
                            let mut reply = action.error_reply(code, &msg.body);
                            commands::add_cluster_time(&mut reply);
                            let bytes = wire::encode_msg(shared.request_id(), header.request_id, &reply);
                            send(shared, stream, bytes, compressor).await?;
                        }
                        continue;
                    }
                }
                // Bad awaitable options are reported by the hello itself.
                let awaited = match commands::is_hello(name) {
                    true => commands::admin::hello_await(shared, name, &msg.body).ok().flatten(),
                    false => None,
                };
                if let Some(wait) = awaited {
                    // An awaitable hello: answer when the heartbeat is due
                    // (or at shutdown), as a primary whose topology holds.
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                }
                let how = if commands::runs_inline(name) {
                    Run::Inline
                } else if commands::is_small_write(name, &msg) && !commands::writes_capped(shared, name, &msg) {
                    Run::InlineWrite
                } else {
                    Run::Pool
                };
                let exhaust = awaited.filter(|_| msg.flags & wire::EXHAUST_ALLOWED != 0 && !more_to_come);
                let again = exhaust.map(|_| msg.clone());
                let tail_wait = match name {
                    "getMore" => {
                        msg.body.get_i64("getMore").ok().and_then(|id| shared.cursors.await_data(id, &msg.body))
                    }
                    _ => None,
                };
                // A retryable write waits here for its session's turn (up
                // to its maxTimeMS), so its check-out (`session.rs`) finds
                // the session free.
                let turn = match crate::session::retryable_session(&msg.body) {
                    None => Ok(None),
                    Some(lsid) => {
                        let waiting = shared.sessions.take_turn(lsid);
                        // A bad maxTimeMS is the command's own error to report.
                        let limit = crate::exec::deadline::Deadline::of(&msg.body).ok().and_then(|d| d.left());
                        match limit {
                            None => Ok(Some(waiting.await)),
                            Some(limit) => tokio::time::timeout(limit, waiting).await.map(Some),
                        }
                    }
                };
                let reply = match (turn, tail_wait) {
                    (Err(_), _) => {
                        let mut reply =
                            crate::error::CommandError::max_time_ms_expired("operation exceeded time limit")
                                .to_document();
                        commands::add_cluster_time(&mut reply);
                        reply
                    }
                    (Ok(_turn), Some(wait)) => await_get_more(shared, conn, msg, wait).await,
                    (Ok(_turn), None) => match &failing {
                        Some(action) => {
                            let body = msg.body.clone();
                            let mut reply = run_command(shared, conn, msg, how).await;
                            action.amend(&mut reply, &body);
                            reply
                        }
                        None => run_command(shared, conn, msg, how).await,
                    },
                };
                if more_to_come {
                    continue;
                }
                if let (Some(wait), Some(msg)) = (exhaust, again) {
                    // Exhaust: keep streaming a hello reply per heartbeat,
                    // each flagged moreToCome, until the client hangs up.
                    let mut reply = reply;
                    let mut response_to = header.request_id;
                    loop {
                        let id = shared.request_id();
                        let bytes = wire::encode_msg_flags(id, response_to, wire::MORE_TO_COME, &reply);
                        send(shared, stream, bytes, compressor).await?;
                        response_to = id;
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = stop.wait_for(|s| *s) => return Ok(()),
                            readable = stream.fill_buf() => match readable {
                                // Closed: the monitor is done with us.
                                Ok([]) => return Ok(()),
                                // A request ends the stream (clients do not
                                // send while one is open).
                                Ok(_) => break,
                                Err(e) => return Err(e.into()),
                            },
                        }
                        reply = run_command(shared, conn, msg.clone(), Run::Inline).await;
                    }
                    continue;
                }
                wire::encode_msg(shared.request_id(), header.request_id, &reply)
            }
            Ok(Parsed::Request(Request::Query(q))) => {
                // A legacy handshake meets a fail point as an OP_MSG does.
                let cmd = q.query.get_document("$query").unwrap_or(&q.query);
                let name = cmd.keys().next().map(String::as_str).unwrap_or("");
                let Ok(failing) = meet_fail_point(shared, conn, name, cmd).await else {
                    return Ok(());
                };
                let reply = match failing.as_ref().and_then(|a| a.error_code.map(|code| (a, code))) {
                    Some((action, code)) => {
                        let mut reply = action.error_reply(code, cmd);
                        commands::add_cluster_time(&mut reply);
                        reply
                    }
                    None => commands::run_query(shared, conn, &q.query),
                };
                wire::encode_reply(shared.request_id(), header.request_id, &reply)
            }
            // A well-framed OP_MSG whose document is bad gets an error reply,
            // as mongod does; anything else ends the connection.
            Err(e @ (WireError::InvalidBson(_) | WireError::DocumentTooLarge(_))) if header.op_code == wire::OP_MSG => {
                let err = match &e {
                    WireError::DocumentTooLarge(_) => crate::error::CommandError::bson_object_too_large(e.to_string()),
                    _ => crate::error::CommandError::invalid_bson(e.to_string()),
                };
                wire::encode_msg(shared.request_id(), header.request_id, &err.to_document())
            }
            Err(e) => return Err(e.into()),
        };
        send(shared, stream, reply, compressor).await?;
    }
}

/// A `getMore` on an awaitData cursor (capped collections): while its
/// batch is empty, wait for an insert into a capped collection, up to
/// `wait`, and look again.
async fn await_get_more(shared: &Arc<Shared>, conn: &Conn, msg: wire::OpMsg, wait: std::time::Duration) -> Document {
    let deadline = tokio::time::Instant::now() + wait;
    let mut inserts = shared.capped_inserts.subscribe();
    let mut stop = shared.shutdown.subscribe();
    loop {
        inserts.borrow_and_update();
        let reply = run_command(shared, conn, msg.clone(), Run::Inline).await;
        let cursor = reply.get_document("cursor").ok();
        let empty = cursor.and_then(|c| c.get_array("nextBatch").ok()).is_some_and(|b| b.is_empty());
        let open = cursor.and_then(|c| c.get_i64("id").ok()).is_some_and(|id| id != 0);
        if !empty || !open || tokio::time::Instant::now() >= deadline {
            return reply;
        }
        tokio::select! {
            _ = inserts.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = stop.wait_for(|s| *s) => return reply,
        }
    }
}

/// The fail point command `name` meets (`failpoint.rs`), after the delay
/// it asks for; `Err` when it closes the connection.
async fn meet_fail_point(
    shared: &Shared,
    conn: &Conn,
    name: &str,
    cmd: &Document,
) -> Result<Option<crate::failpoint::Action>, ()> {
    if !shared.fail_points.is_armed() {
        return Ok(None);
    }
    // A hello names its application before the fail point looks.
    let app_name = match commands::is_hello(name) {
        true => commands::admin::app_name_of(cmd).or_else(|| conn.app_name.get().cloned()),
        false => conn.app_name.get().cloned(),
    };
    let Some(action) = shared.fail_points.check(name, app_name.as_deref()) else { return Ok(None) };
    if action.close_connection {
        return Err(());
    }
    if let Some(wait) = action.block {
        tokio::time::sleep(wait).await;
    }
    Ok(Some(action))
}

/// At most this many connections: a single client's (its pool connection
/// and its two monitors, as pymongo and the Rust driver open them), so a
/// lone writer may run its fsync on its own task (`durability.rs`).
pub(crate) const FEW_CLIENTS: u64 = 3;

/// Where a command runs.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Run {
    /// On the connection's task: reads and other quick commands.
    Inline,
    /// On the connection's task, registered as a writer for the group
    /// commit, its fsync awaited there.
    InlineWrite,
    /// On the blocking pool.
    Pool,
}

/// Run an OP_MSG command: on this task when it is quick or a small write
/// (awaiting its journal fsync here), otherwise on the blocking pool.
async fn run_command(shared: &Arc<Shared>, conn: &Conn, msg: wire::OpMsg, how: Run) -> Document {
    let panicked = || crate::error::CommandError::internal_error("the command panicked").to_document();
    if how != Run::Pool {
        // Reads answer from memory or a short page read, and a small write
        // commits here and awaits its journal fsync instead of blocking on
        // it: running them on this task saves two thread handoffs per
        // request.
        let _running = shared.durability.running();
        let writer = (how == Run::InlineWrite).then(|| shared.durability.writer());
        let run = || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::exec::write::deferring_sync(|| commands::run(shared, conn, &msg))
            }))
            .unwrap_or_else(|_| (panicked(), false))
        };
        // A command that may scan gives this thread's other connections
        // to another thread while it runs.
        let name = msg.body.keys().next().map_or("", String::as_str);
        let multi_thread =
            tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
        let (reply, owed) = match multi_thread && commands::may_scan(shared, name, &msg) {
            true => tokio::task::block_in_place(run),
            false => run(),
        };
        drop(writer);
        // A single client (one pool connection and its monitors): no other
        // request can be queued behind this thread unseen.
        let few_clients = shared.connections_current.load(Ordering::Relaxed) <= FEW_CLIENTS;
        match if owed { shared.durability.wait(few_clients).await } else { Ok(()) } {
            Ok(()) => reply,
            Err(why) => crate::error::CommandError::internal_error(why).to_document(),
        }
    } else {
        // Writes wait for the journal fsync: off the async workers.
        let (s, c) = (shared.clone(), conn.clone());
        tokio::task::spawn_blocking(move || commands::run(&s, &c, &msg)).await.unwrap_or_else(|_| panicked())
    }
}

/// Send one reply, compressed as the request was.
async fn send(
    shared: &Shared,
    stream: &mut BufReader<TcpStream>,
    reply: Vec<u8>,
    compressor: Option<compression::Compressor>,
) -> Result<(), ConnError> {
    let net = &shared.network;
    let reply = match compressor {
        Some(c) => {
            let packed = compression::compress(&reply, c);
            let counters = &net.compression[c.id() as usize];
            counters[2].fetch_add(reply.len() as u64, Ordering::Relaxed);
            counters[3].fetch_add(packed.len() as u64, Ordering::Relaxed);
            packed
        }
        None => reply,
    };
    net.bytes_out.fetch_add(reply.len() as u64, Ordering::Relaxed);
    stream.write_all(&reply).await?;
    Ok(())
}
