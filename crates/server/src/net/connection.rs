//! One client connection, from its first byte to its close, in three
//! parts:
//!
//! - Framing (`Serving::read_frame`): read one message, its 16-byte
//!   header and then exactly the bytes that header announces, undo
//!   OP_COMPRESSED, and parse it, or answer a `find` by `_id` straight from
//!   the bytes (`point.rs`).
//! - Dispatch (`Serving::dispatch_msg`, `Serving::dispatch_query`,
//!   `run_command`): run one request: meet its fail point, wait for its
//!   session's turn, run the command on this task or on the blocking pool.
//! - Streaming replies (`Serving::await_hello`,
//!   `Serving::stream_hello`, `await_get_more`): the answers that wait:
//!   an awaitable `hello` answers once its heartbeat is due, an exhaust
//!   `hello` streams a moreToCome reply per heartbeat, and a `getMore` on
//!   an awaitData cursor waits for an insert.
//!
//! Invariants:
//! 1. A frame is read whole (exactly `header.length` bytes, bounded by
//!    `message_size_max_bytes`) before it is parsed; bad input ends in an
//!    error reply or a closed connection, never in a panic of the server.
//! 2. One request runs at a time and its reply is written before the next
//!    frame is read, so replies go out in request order; a moreToCome
//!    request gets no reply, and an exhaust stream ends when the client
//!    sends a request.
//! 3. A reply is compressed as its request was.
//! 4. A retryable write runs only holding its session's turn (up to its
//!    maxTimeMS), so its check-out (`session.rs` invariant 1) finds the
//!    session free.
//! 5. Shutdown ends every wait: for a header, an awaitable or exhaust
//!    `hello`, an awaitData `getMore`.

use crate::commands;
use crate::exec::call::{Call, Place};
use crate::limits::*;
use crate::net::compression;
use crate::net::wire;
use crate::net::wire::Header;
use crate::net::wire::Request;
use crate::net::wire::WireError;
use crate::reply::Reply;
use crate::server::Conn;
use crate::server::Shared;
use bson::Document;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;

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

/// A connection being served: what every part of it uses.
struct Serving<'a> {
    shared: &'a Arc<Shared>,
    conn: &'a Conn,
    stream: &'a mut BufReader<TcpStream>,
    /// Becomes true at shutdown (invariant 5).
    stop: watch::Receiver<bool>,
}

/// One message read off the connection.
struct Frame {
    /// Its header (the inner message's, once decompressed).
    header: Header,
    /// How the request was compressed: its reply is compressed alike.
    compressor: Option<compression::Compressor>,
    /// What it holds, or why it could not be parsed.
    parsed: Result<Parsed, WireError>,
}

/// What follows a request.
enum Next {
    /// Send this reply, then read the next frame.
    Reply(Vec<u8>),
    /// Read the next frame (the reply, if any, is sent).
    Continue,
    /// Close the connection.
    Close,
}

/// Serve one request after another (invariant 2) until the client hangs
/// up, the server shuts down or the input is bad beyond a reply.
async fn serve_connection(
    shared: &Arc<Shared>,
    conn: &Conn,
    stream: &mut BufReader<TcpStream>,
) -> Result<(), ConnError> {
    let stop = shared.shutdown.subscribe();
    let mut serving = Serving { shared, conn, stream, stop };
    loop {
        let Some(Frame { header, compressor, parsed }) = serving.read_frame().await? else { return Ok(()) };
        let next = match parsed {
            Ok(Parsed::Answered(reply)) => Next::Reply(reply),
            Ok(Parsed::Request(Request::Msg(msg))) => serving.dispatch_msg(&header, compressor, msg).await?,
            Ok(Parsed::Request(Request::Query(q))) => serving.dispatch_query(&header, &q).await,
            Err(e) => Next::Reply(serving.bad_frame_reply(&header, e)?),
        };
        match next {
            Next::Reply(reply) => serving.send(reply, compressor).await?,
            Next::Continue => {}
            Next::Close => return Ok(()),
        }
    }
}

// Framing.
impl Serving<'_> {
    /// The next message; `None` when the client hung up between messages
    /// or the server shuts down.
    async fn read_frame(&mut self) -> Result<Option<Frame>, ConnError> {
        let mut head = [0u8; header_bytes];
        tokio::select! {
            read = self.stream.read_exact(&mut head) => match read {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e.into()),
            },
            _ = self.stop.wait_for(|s| *s) => return Ok(None),
        }
        // Invariant 1: `parse` bounds the length; read exactly that much.
        let header = Header::parse(&head)?;
        let mut body = vec![0u8; header.length - header_bytes];
        self.stream.read_exact(&mut body).await?;
        let net = &self.shared.network;
        net.bytes_in.fetch_add(header.length as u64, Ordering::Relaxed);
        net.requests.fetch_add(1, Ordering::Relaxed);
        let (header, body, compressor) = match header.op_code == wire::OP_COMPRESSED {
            true => self.decompress(header, &body)?,
            false => (header, body, None),
        };
        let parsed = self.parse_frame(&header, &body);
        Ok(Some(Frame { header, compressor, parsed }))
    }

    /// The message an OP_COMPRESSED holds, with its own header, and the
    /// compressor it came in.
    fn decompress(
        &self,
        header: Header,
        body: &[u8],
    ) -> Result<(Header, Vec<u8>, Option<compression::Compressor>), ConnError> {
        let (op, inner, c) = compression::decompress(body)?;
        let counters = &self.shared.network.compression[c.id() as usize];
        counters[0].fetch_add(body.len() as u64, Ordering::Relaxed);
        counters[1].fetch_add(inner.len() as u64, Ordering::Relaxed);
        let header = Header { length: header_bytes + inner.len(), op_code: op, ..header };
        Ok((header, inner, Some(c)))
    }

    /// The request a message holds, or the reply of the point-read fast
    /// path when it answers it.
    fn parse_frame(&self, header: &Header, body: &[u8]) -> Result<Parsed, WireError> {
        // A fail point may name `find`: no fast path while one is set.
        let point = match self.shared.fail_points.is_armed() {
            true => None,
            false => crate::net::point::find_by_id(self.shared, header, body),
        };
        match point {
            Some(reply) => Ok(Parsed::Answered(reply)),
            None => wire::parse(header, body).map(Parsed::Request),
        }
    }

    /// A well-framed OP_MSG whose document is bad gets an error reply, as
    /// mongod does; anything else ends the connection.
    fn bad_frame_reply(&self, header: &Header, e: WireError) -> Result<Vec<u8>, ConnError> {
        let err = match &e {
            WireError::DocumentTooLarge(_) if header.op_code == wire::OP_MSG => {
                crate::error::CommandError::bson_object_too_large(e.to_string())
            }
            WireError::InvalidBson(_) if header.op_code == wire::OP_MSG => {
                crate::error::CommandError::invalid_bson(e.to_string())
            }
            _ => return Err(e.into()),
        };
        Ok(wire::encode_msg(self.shared.request_id(), header.request_id, &err.to_document()))
    }

    /// Send one reply, compressed as the request was (invariant 3).
    async fn send(&mut self, reply: Vec<u8>, compressor: Option<compression::Compressor>) -> Result<(), ConnError> {
        let net = &self.shared.network;
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
        self.stream.write_all(&reply).await?;
        Ok(())
    }
}

// Dispatch.
impl Serving<'_> {
    /// Run an OP_MSG: its fail point, an awaitable hello's wait, then the
    /// command (`answer_msg`); an exhaust hello goes on streaming.
    async fn dispatch_msg(
        &mut self,
        header: &Header,
        compressor: Option<compression::Compressor>,
        msg: wire::OpMsg,
    ) -> Result<Next, ConnError> {
        let shared = self.shared;
        let more_to_come = msg.flags & wire::MORE_TO_COME != 0;
        let name = msg.body.keys().next().map(String::as_str).unwrap_or("");
        let Ok(failing) = meet_fail_point(shared, self.conn, name, &msg.body).await else {
            return Ok(Next::Close);
        };
        if let Some(reply) = fail_point_error(shared, failing.as_ref(), &msg.body) {
            return Ok(match more_to_come {
                true => Next::Continue,
                false => Next::Reply(wire::encode_msg(shared.request_id(), header.request_id, &reply)),
            });
        }
        let awaited = self.await_hello(name, &msg.body).await;
        let how = Run::of(shared, name, &msg);
        let exhaust = awaited.filter(|_| msg.flags & wire::EXHAUST_ALLOWED != 0 && !more_to_come);
        let again = exhaust.map(|_| msg.clone());
        let tail_wait = match name {
            "getMore" => msg.body.get_i64("getMore").ok().and_then(|id| shared.cursors.await_data(id, &msg.body)),
            _ => None,
        };
        let reply = answer_msg(shared, self.conn, msg, how, failing, tail_wait).await;
        if more_to_come {
            return Ok(Next::Continue);
        }
        if let (Some(wait), Some(msg)) = (exhaust, again) {
            return self.stream_hello(header, compressor, reply, msg, wait).await;
        }
        Ok(Next::Reply(wire::encode_msg_reply(shared.request_id(), header.request_id, 0, &reply)))
    }

    /// Run a legacy OP_QUERY (the handshake), which meets a fail point as
    /// an OP_MSG does.
    async fn dispatch_query(&self, header: &Header, q: &wire::OpQuery) -> Next {
        let cmd = q.query.get_document("$query").unwrap_or(&q.query);
        let name = cmd.keys().next().map(String::as_str).unwrap_or("");
        let Ok(failing) = meet_fail_point(self.shared, self.conn, name, cmd).await else {
            return Next::Close;
        };
        let reply = match fail_point_error(self.shared, failing.as_ref(), cmd) {
            Some(reply) => reply,
            None => commands::run_query(self.shared, self.conn, &q.query),
        };
        Next::Reply(wire::encode_reply(self.shared.request_id(), header.request_id, &reply))
    }
}

/// The reply of an OP_MSG past its fail point: once it holds its session's
/// turn (invariant 4), an awaitData `getMore`'s, or the command's own,
/// amended by its fail point.
async fn answer_msg(
    shared: &Arc<Shared>,
    conn: &Conn,
    msg: wire::OpMsg,
    how: Run,
    failing: Option<crate::failpoint::Action>,
    tail_wait: Option<std::time::Duration>,
) -> Reply {
    let Ok(_turn) = session_turn(shared, &msg.body).await else {
        let mut reply = crate::error::CommandError::max_time_ms_expired("operation exceeded time limit").to_document();
        commands::add_cluster_time(shared, &mut reply);
        return Reply::Doc(reply);
    };
    if let Some(wait) = tail_wait {
        return await_get_more(shared, conn, msg, wait).await;
    }
    match &failing {
        Some(action) => {
            let body = msg.body.clone();
            let mut reply = run_command(shared, conn, msg, how).await.into_document();
            action.amend(&mut reply, &body);
            Reply::Doc(reply)
        }
        None => run_command(shared, conn, msg, how).await,
    }
}

/// A retryable write's turn on its session (`None` for any other
/// command), awaited up to its maxTimeMS; `Err` when that runs out first.
async fn session_turn(
    shared: &Shared,
    cmd: &Document,
) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>, tokio::time::error::Elapsed> {
    let Some(lsid) = crate::session::retryable_session(cmd) else { return Ok(None) };
    let waiting = shared.sessions.take_turn(lsid);
    // A bad maxTimeMS is the command's own error to report.
    let limit = crate::exec::deadline::Deadline::of(cmd).ok().and_then(|d| d.left());
    match limit {
        None => Ok(Some(waiting.await)),
        Some(limit) => tokio::time::timeout(limit, waiting).await.map(Some),
    }
}

/// The error reply a fail point gives in place of running `cmd`, if it
/// gives one.
fn fail_point_error(shared: &Shared, failing: Option<&crate::failpoint::Action>, cmd: &Document) -> Option<Document> {
    let action = failing?;
    let code = action.error_code?;
    let mut reply = action.error_reply(code, cmd);
    // A state change error names the topology it was seen in, as mongod's
    // (a driver ignores one no newer than what it knows).
    if crate::failpoint::STATE_CHANGE_CODES.contains(&code) {
        reply.insert("topologyVersion", commands::topology_version(shared));
    }
    commands::add_cluster_time(shared, &mut reply);
    Some(reply)
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
        true => commands::app_name_of(cmd).or_else(|| conn.app_name.get().cloned()),
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

impl Run {
    /// Where OP_MSG command `name` runs.
    fn of(shared: &Shared, name: &str, msg: &wire::OpMsg) -> Run {
        if commands::runs_inline(name) {
            Run::Inline
        } else if commands::is_small_write(name, msg) && !commands::writes_capped(shared, name, msg) {
            Run::InlineWrite
        } else {
            Run::Pool
        }
    }
}

/// Run an OP_MSG command: on this task when it is quick or a small write
/// (awaiting its journal fsync here), otherwise on the blocking pool.
async fn run_command(shared: &Arc<Shared>, conn: &Conn, msg: wire::OpMsg, how: Run) -> Reply {
    let panicked = || Reply::Doc(crate::error::CommandError::internal_error("the command panicked").to_document());
    if how != Run::Pool {
        // Reads answer from memory or a short page read, and a small write
        // commits here and awaits its journal fsync instead of blocking on
        // it: running them on this task saves two thread handoffs per
        // request.
        let _running = shared.durability.running();
        let writer = (how == Run::InlineWrite).then(|| shared.durability.writer());
        let multi_thread =
            tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
        let place = if multi_thread { Place::Network } else { Place::Blocking };
        let call = Call::new(conn, place, true);
        let run = || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commands::run(shared, &call, &msg)))
                .unwrap_or_else(|_| panicked())
        };
        // A command that may scan gives this thread's other connections
        // to another thread while it runs (`find` decides that itself,
        // once it knows its plan).
        let name = msg.body.keys().next().map_or("", String::as_str);
        let reply = place.run(!commands::may_scan(shared, name, &msg), run);
        drop(writer);
        match if call.owes_sync() { shared.durability.wait().await } else { Ok(()) } {
            Ok(()) => reply,
            Err(why) => Reply::Doc(crate::error::CommandError::internal_error(why).to_document()),
        }
    } else {
        // Writes wait for the journal fsync: off the async workers.
        let (s, c) = (shared.clone(), conn.clone());
        tokio::task::spawn_blocking(move || commands::run(&s, &Call::new(&c, Place::Blocking, false), &msg))
            .await
            .unwrap_or_else(|_| panicked())
    }
}

// Streaming replies.
impl Serving<'_> {
    /// An awaitable hello: wait until its heartbeat is due (or shutdown),
    /// answering as a primary whose topology holds; the heartbeat, if it
    /// is one. Bad awaitable options are reported by the hello itself.
    async fn await_hello(&mut self, name: &str, cmd: &Document) -> Option<std::time::Duration> {
        let awaited = match commands::is_hello(name) {
            true => commands::hello_await(self.shared, name, cmd).ok().flatten(),
            false => None,
        };
        if let Some(wait) = awaited {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.wait_for(|s| *s) => {}
            }
        }
        awaited
    }

    /// Exhaust: send `first`, then a hello reply per heartbeat `wait`, each
    /// flagged moreToCome, until the client hangs up or sends a request
    /// (clients do not send while a stream is open), which ends the stream.
    async fn stream_hello(
        &mut self,
        header: &Header,
        compressor: Option<compression::Compressor>,
        first: Reply,
        msg: wire::OpMsg,
        wait: std::time::Duration,
    ) -> Result<Next, ConnError> {
        let mut reply = first;
        let mut response_to = header.request_id;
        loop {
            let id = self.shared.request_id();
            let bytes = wire::encode_msg_reply(id, response_to, wire::MORE_TO_COME, &reply);
            self.send(bytes, compressor).await?;
            response_to = id;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.wait_for(|s| *s) => return Ok(Next::Close),
                readable = self.stream.fill_buf() => match readable {
                    // Closed: the monitor is done with us.
                    Ok([]) => return Ok(Next::Close),
                    Ok(_) => return Ok(Next::Continue),
                    Err(e) => return Err(e.into()),
                },
            }
            reply = run_command(self.shared, self.conn, msg.clone(), Run::Inline).await;
        }
    }
}

/// A `getMore` on an awaitData cursor (capped collections): while its
/// batch is empty, wait for an insert into a capped collection, up to
/// `wait`, and look again.
async fn await_get_more(shared: &Arc<Shared>, conn: &Conn, msg: wire::OpMsg, wait: std::time::Duration) -> Reply {
    let deadline = tokio::time::Instant::now() + wait;
    let mut inserts = shared.capped_inserts.subscribe();
    let mut stop = shared.shutdown.subscribe();
    loop {
        inserts.borrow_and_update();
        let reply = run_command(shared, conn, msg.clone(), Run::Inline).await;
        let cursor = reply.cursor();
        let empty = cursor.is_some_and(|(_, empty)| empty);
        let open = cursor.is_some_and(|(id, _)| id != 0);
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
