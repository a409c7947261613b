//! The nodes' packet answers, asked of them all at once from the asking thread
//! and read as the merge needs them: the requests are written first, this
//! node's own share is read while the others work, and the answers are read
//! from their sockets in turn. No thread per node is started or woken, and
//! TCP's flow control bounds what waits unread (a thread and a ureq request
//! per node took a third longer over three nodes).
//!
//! HTTP is ureq's own protocol engine (`ureq-proto`, sans I/O), driven over
//! sockets kept alive and pooled per node here: `GET` with the cluster's
//! token, a response with a length, chunked or to its close. Nothing a node
//! sends is trusted: the response head is bounded, the engine checks the
//! framing, and every read has the cluster's deadline.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ureq_proto::client::state::{RecvBody, RecvResponse};
use ureq_proto::client::{Call, RecvResponseResult, SendRequestResult};

/// Most bytes of a response's head.
const MAX_HEAD: usize = 64 << 10;
/// Most bytes of an error's body that are read for its message.
const MAX_ERROR_BODY: u64 = 64 << 10;
/// Most idle connections kept per node.
const MAX_IDLE: usize = 16;

/// Idle keep-alive connections, by node address.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    idle: Mutex<HashMap<SocketAddr, Vec<TcpStream>>>,
}

impl Connections {
    fn take(&self, addr: SocketAddr) -> Option<TcpStream> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&addr)?
            .pop()
    }

    fn put(&self, addr: SocketAddr, stream: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = idle.entry(addr).or_default();
        if kept.len() < MAX_IDLE {
            kept.push(stream);
        }
    }
}

/// A request written to a node, its answer not read yet.
pub(crate) struct Sent {
    pool: Arc<Connections>,
    addr: SocketAddr,
    request: Vec<u8>,
    reader: Input<Timed>,
    call: Call<RecvResponse>,
    /// Whether the connection was a kept one (which the node may have closed
    /// meanwhile: then the request is sent once more on a new one).
    reused: bool,
    deadline: Instant,
}

/// The request's bytes, and the call that reads its response.
fn call(uri: &str, bearer: &str) -> Result<(Vec<u8>, Call<RecvResponse>), String> {
    let bad = |e: &dyn std::fmt::Display| format!("cannot ask it: {e}");
    let request = ureq_proto::http::Request::get(uri)
        .header("authorization", bearer)
        .body(())
        .map_err(|e| bad(&e))?;
    let mut call = Call::new(request).map_err(|e| bad(&e))?.proceed();
    // The path and the host header are both from the uri.
    let mut bytes = vec![0; 2 * uri.len() + bearer.len() + 512];
    let written = call.write(&mut bytes).map_err(|e| bad(&e))?;
    bytes.truncate(written);
    match call.proceed().map_err(|e| bad(&e))? {
        Some(SendRequestResult::RecvResponse(call)) => Ok((bytes, call)),
        _ => Err(bad(&"a GET that is not answered")),
    }
}

/// Writes `GET url/api/v1/route?params` with `bearer`, to be read by
/// [`Sent::answer`] before `deadline`.
pub(crate) fn send(
    pool: &Arc<Connections>,
    url: &str,
    route: &str,
    params: &[(&str, String)],
    bearer: &str,
    deadline: Instant,
) -> Result<Sent, String> {
    let host = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("its url {url:?} is not http://"))?;
    let addr = resolve(host)?;
    let mut uri = format!("{url}/api/v1/{route}?");
    for (at, (key, value)) in params.iter().enumerate() {
        if at > 0 {
            uri.push('&');
        }
        percent_encode(key, &mut uri);
        uri.push('=');
        percent_encode(value, &mut uri);
    }
    let (request, call) = self::call(&uri, bearer)?;
    let (stream, reused) = match pool.take(addr) {
        Some(stream) => (stream, true),
        None => (connect(addr, deadline)?, false),
    };
    let mut sent = Sent {
        pool: Arc::clone(pool),
        addr,
        request,
        reader: Input::new(Timed::new(stream, deadline)),
        call,
        reused,
        deadline,
    };
    if let Err(e) = sent.write() {
        if !sent.reused {
            return Err(e);
        }
        sent.reconnect()?;
    }
    Ok(sent)
}

impl Sent {
    fn write(&mut self) -> Result<(), String> {
        let stream = &mut self.reader.source.stream;
        stream
            .set_write_timeout(Some(remaining(self.deadline)?))
            .and_then(|()| stream.write_all(&self.request))
            .map_err(|e| failure(&e))
    }

    /// The request once more, on a new connection.
    fn reconnect(&mut self) -> Result<(), String> {
        let stream = connect(self.addr, self.deadline)?;
        self.reader = Input::new(Timed::new(stream, self.deadline));
        self.reused = false;
        self.write()
    }

    /// The node's answer: its body if it answered 200 (and what made it
    /// incomplete, from `hindsight-incomplete`), else why not, in words.
    pub(crate) fn answer(mut self) -> Result<(Answer, Option<String>), String> {
        loop {
            match read_head(&mut self.reader, &mut self.call) {
                Ok(head) => {
                    let home = Some((Arc::clone(&self.pool), self.addr));
                    return answered(self.reader, self.call, head, home);
                }
                // A kept connection the node closed before this request: once
                // more on a new one (a GET may be asked twice).
                Err(Head::Closed) if self.reused => self.reconnect()?,
                Err(Head::Closed) => {
                    return Err("it closed the connection without an answer".to_owned());
                }
                Err(Head::Io(e)) => return Err(failure(&e)),
                Err(Head::Bad(why)) => return Err(format!("its answer is not HTTP: {why}")),
            }
        }
    }
}

/// The answer whose head is `head`, its body to come from `reader` as `call`
/// frames it: the body if the status is 200 (and what made the answer
/// incomplete), else why not, in words. A kept-alive connection goes `home`
/// once its body has been read.
fn answered<R: Source>(
    reader: Input<R>,
    call: Call<RecvResponse>,
    head: ureq_proto::http::Response<()>,
    home: Option<(Arc<Connections>, SocketAddr)>,
) -> Result<(Answer<R>, Option<String>), String> {
    let body = match call.proceed() {
        Some(RecvResponseResult::RecvBody(body)) => Some(body),
        _ => None,
    };
    let mut answer = Answer {
        reader: Some(reader),
        body,
        home,
    };
    let status = head.status();
    if status == 200 {
        let incomplete = head
            .headers()
            .get("hindsight-incomplete")
            .and_then(|value| value.to_str().ok())
            .map(|value| value.trim().to_owned());
        return Ok((answer, incomplete));
    }
    let mut text = Vec::new();
    let _ = (&mut answer).take(MAX_ERROR_BODY).read_to_end(&mut text);
    Err(refusal(
        status.as_u16(),
        &status.as_u16().to_string(),
        String::from_utf8_lossy(&text).into_owned(),
        "the cluster's token",
    ))
}

/// A node's answer of status `code` (shown as `status`) other than 200, in
/// words: the message of its JSON error, else its `body` (`token`: what a
/// 401 refused).
pub(crate) fn refusal(code: u16, status: &str, body: String, token: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or(body);
    match code {
        401 => format!("it refused {token} (401): {message}"),
        _ => format!("it answered {status}: {message}"),
    }
}

/// Reads `bytes` as the cluster reads a node's answer: what made it
/// incomplete and its whole body if its status is 200, else why not. For
/// tests and fuzzing: nothing a node sends is trusted.
pub fn read_answer(bytes: &[u8]) -> Result<(Option<String>, Vec<u8>), String> {
    let (_, mut call) = call("http://node/api/v1/query", "Bearer t")?;
    let mut reader = Input::new(bytes);
    let head = read_head(&mut reader, &mut call).map_err(|e| match e {
        Head::Closed => "it closed the connection without an answer".to_owned(),
        Head::Io(e) => failure(&e),
        Head::Bad(why) => format!("its answer is not HTTP: {why}"),
    })?;
    let (mut answer, incomplete) = answered(reader, call, head, None)?;
    let mut body = Vec::new();
    answer
        .read_to_end(&mut body)
        .map_err(|e| format!("its answer broke off: {e}"))?;
    Ok((incomplete, body))
}

/// A response's body as it arrives; its connection goes back to the pool when
/// it has been read to its end.
pub(crate) struct Answer<R: Source = Timed> {
    /// None once the connection has gone back to the pool.
    reader: Option<Input<R>>,
    /// How the body is framed; none once it has ended (or if there is none).
    body: Option<Call<RecvBody>>,
    /// Where the connection goes back, if it is kept alive.
    home: Option<(Arc<Connections>, SocketAddr)>,
}

/// Where an answer is read from: a node's socket, or bytes (tests, fuzzing).
pub(crate) trait Source: Read {
    /// The connection, to keep for the next request.
    fn into_stream(self) -> Option<TcpStream>;
}

impl Source for &[u8] {
    fn into_stream(self) -> Option<TcpStream> {
        None
    }
}

impl<R: Source> Answer<R> {
    /// The body has ended: the connection goes home if it may be kept and
    /// nothing is left over.
    fn finish(&mut self) {
        let kept = match self.body.take().and_then(Call::<RecvBody>::proceed) {
            Some(ureq_proto::client::RecvBodyResult::Cleanup(cleanup)) => {
                !cleanup.must_close_connection()
            }
            _ => false,
        };
        if kept
            && let Some((pool, addr)) = self.home.take()
            && self
                .reader
                .as_ref()
                .is_some_and(|r| r.available().is_empty())
            && let Some(reader) = self.reader.take()
            && let Some(stream) = reader.source.into_stream()
        {
            pool.put(addr, stream);
        }
    }
}

impl<R: Source> Answer<R> {
    /// The next bytes of the body into `buf`, and whether it has ended.
    fn next(&mut self, buf: &mut [u8]) -> std::io::Result<(usize, bool)> {
        let (Some(reader), Some(body)) = (self.reader.as_mut(), self.body.as_mut()) else {
            return Ok((0, false));
        };
        let to_close = body.body_mode() == ureq_proto::BodyMode::CloseDelimited;
        let ended = |body: &Call<RecvBody>| body.can_proceed() && !to_close;
        loop {
            if ended(body) {
                return Ok((0, true));
            }
            let (used, written) = body
                .read(reader.available(), buf)
                .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e.to_string()))?;
            reader.consume(used);
            if written > 0 {
                // The end seen as soon as it is reached, so that the
                // connection goes home even if the reader stops at the rows'
                // own end.
                return Ok((written, ended(body)));
            }
            // Nothing taken: the engine needs more bytes than have come.
            if used == 0 && !reader.more()? {
                if to_close {
                    return Ok((0, true));
                }
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the node closed the connection inside its answer",
                ));
            }
        }
    }
}

impl<R: Source> Read for Answer<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let (n, ended) = self.next(buf)?;
        if ended {
            self.finish();
        }
        Ok(n)
    }
}

/// A socket whose every read waits at most until about the deadline.
pub(crate) struct Timed {
    stream: TcpStream,
    deadline: Instant,
    /// When the socket's read timeout was last set to what was left then.
    set_at: Option<Instant>,
}

/// How far past the deadline a read may wait before its timeout is set again
/// (each setting is a system call).
const SLACK: Duration = Duration::from_millis(50);

impl Timed {
    fn new(stream: TcpStream, deadline: Instant) -> Self {
        Self {
            stream,
            deadline,
            set_at: None,
        }
    }
}

impl Source for Timed {
    fn into_stream(self) -> Option<TcpStream> {
        Some(self.stream)
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let now = Instant::now();
        let left = self
            .deadline
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| std::io::Error::from(ErrorKind::TimedOut))?;
        // A timeout set at `set_at` to what was left then lets a read that
        // starts now wait `now - set_at` past the deadline.
        if self.set_at.is_none_or(|at| now.duration_since(at) > SLACK) {
            self.stream.set_read_timeout(Some(left))?;
            self.set_at = Some(now);
        }
        self.stream.read(buf)
    }
}

enum Head {
    /// The connection ended (or was reset) before any byte of a head.
    Closed,
    Io(std::io::Error),
    Bad(String),
}

/// Reads a response's head for `call`, consuming exactly its bytes.
fn read_head<R: Read>(
    reader: &mut Input<R>,
    call: &mut Call<RecvResponse>,
) -> Result<ureq_proto::http::Response<()>, Head> {
    loop {
        match call.try_response(reader.available(), false) {
            Ok((used, Some(response))) => {
                reader.consume(used);
                // Read to its close, a body in another coding would be taken
                // for an answer: hindsight's nodes send none.
                if let Some(coding) = response.headers().get("transfer-encoding")
                    && !coding.as_bytes().eq_ignore_ascii_case(b"chunked")
                {
                    return Err(Head::Bad(format!("a transfer-encoding of {coding:?}")));
                }
                return Ok(response);
            }
            // An informational answer (1xx): no node sends one to a GET.
            Ok((used, None)) if used > 0 => {
                return Err(Head::Bad("an informational answer".to_owned()));
            }
            Ok(_) if reader.available().len() > MAX_HEAD => {
                return Err(Head::Bad(format!("a head longer than {MAX_HEAD} bytes")));
            }
            Ok(_) => {}
            Err(e) => return Err(Head::Bad(e.to_string())),
        }
        let started = !reader.available().is_empty();
        match reader.more() {
            Ok(true) => {}
            Ok(false) if started => {
                return Err(Head::Bad("the connection ended inside its head".to_owned()));
            }
            Ok(false) => return Err(Head::Closed),
            Err(e) if !started && is_reset(&e) => return Err(Head::Closed),
            Err(e) => return Err(Head::Io(e)),
        }
    }
}

/// Bytes read from a node and not yet taken by the protocol engine, which
/// may need more than have come before it takes any (a chunk's size line).
pub(crate) struct Input<R> {
    source: R,
    bytes: Vec<u8>,
    at: usize,
}

/// Most bytes read ahead and not taken.
const MAX_PENDING: usize = MAX_HEAD + (16 << 10);

impl<R: Read> Input<R> {
    fn new(source: R) -> Self {
        Self {
            source,
            bytes: Vec::new(),
            at: 0,
        }
    }

    fn available(&self) -> &[u8] {
        &self.bytes[self.at..]
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.bytes.len());
    }

    /// Reads more bytes after those not taken yet; false at the source's end.
    fn more(&mut self) -> std::io::Result<bool> {
        self.bytes.drain(..self.at);
        self.at = 0;
        let kept = self.bytes.len();
        if kept >= MAX_PENDING {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                "an answer whose framing does not go on",
            ));
        }
        self.bytes.resize(kept + (16 << 10), 0);
        let read = loop {
            match self.source.read(&mut self.bytes[kept..]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                read => break read,
            }
        };
        self.bytes.truncate(kept + *read.as_ref().unwrap_or(&0));
        Ok(read? > 0)
    }
}

fn resolve(host: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = host.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let with_port = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

fn connect(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, String> {
    let timeout = remaining(deadline)?.min(Duration::from_secs(2));
    let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| failure(&e))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

fn remaining(deadline: Instant) -> Result<Duration, String> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| "it did not answer within the deadline".to_owned())
}

fn is_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

/// An I/O error in words, as the cluster names a node's failure.
fn failure(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            "it did not answer within the deadline".to_owned()
        }
        _ => format!("cannot reach it: {e}"),
    }
}

/// Appends `text` percent-encoded as a query component.
fn percent_encode(text: &str, out: &mut String) {
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    #[test]
    fn answers_with_a_length_or_chunked() {
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nhindsight-incomplete: segment 3 skipped\r\n\r\nhello";
        assert_eq!(
            read_answer(whole),
            Ok((Some("segment 3 skipped".to_owned()), b"hello".to_vec()))
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nx-trailer: 1\r\n\r\n";
        assert_eq!(read_answer(chunked), Ok((None, b"hello!".to_vec())));
        // Without a length, until the end (HTTP/1.0).
        assert_eq!(
            read_answer(b"HTTP/1.0 200 OK\r\n\r\nto the end"),
            Ok((None, b"to the end".to_vec()))
        );
    }

    #[test]
    fn refusals_are_said_in_words() {
        let refused = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 27\r\n\r\n{\"error\":\"a wrong token.\"} ";
        assert_eq!(
            read_answer(refused),
            Err("it refused the cluster's token (401): a wrong token.".to_owned())
        );
        assert_eq!(
            read_answer(b"HTTP/1.1 503 Busy\r\ncontent-length: 4\r\n\r\nbusy"),
            Err("it answered 503: busy".to_owned())
        );
    }

    #[test]
    fn hostile_answers_are_errors() {
        let cases: [&[u8]; 10] = [
            b"",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        ];
        for case in cases {
            assert!(
                read_answer(case).is_err(),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
        let mut long = b"HTTP/1.1 200 OK\r\n".to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_HEAD + 10));
        let error = read_answer(&long).unwrap_err();
        assert!(error.contains("longer than"), "{error}");
    }

    /// A node's bytes a byte at a time, as a slow network gives them.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match (self.0.split_first(), buf.first_mut()) {
                (Some((&byte, rest)), Some(first)) => {
                    *first = byte;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    impl Source for Trickle<'_> {
        fn into_stream(self) -> Option<TcpStream> {
            None
        }
    }

    #[test]
    fn answers_arriving_a_byte_at_a_time_read_whole() {
        let cases: [(&[u8], &[u8]); 2] = [
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\n\r\n",
                b"hello!",
            ),
            (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", b"hello"),
        ];
        for (bytes, body) in cases {
            let (_, mut call) = call("http://node/api/v1/query", "Bearer t").unwrap();
            let mut input = Input::new(Trickle(bytes));
            let head = read_head(&mut input, &mut call).ok().unwrap();
            let (mut answer, _) = answered(input, call, head, None).unwrap();
            let mut got = Vec::new();
            answer.read_to_end(&mut got).unwrap();
            assert_eq!(got, body);
        }
    }

    /// What the fuzz target checks, on answers mutated at random: a body or an
    /// error in words, never a panic, and never a body longer than its bytes.
    #[test]
    fn mutated_answers_give_a_body_or_an_error() {
        let seeds: [&[u8]; 3] = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nhindsight-incomplete: x\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=1\r\nhello\r\n1\r\n!\r\n0\r\nt: 1\r\n\r\n",
            b"HTTP/1.1 401 No\r\ncontent-length: 11\r\n\r\n{\"error\":1}",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20_000 {
            let mut bytes = seeds[round % seeds.len()].to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % (bytes.len() + 1);
                match next() % 3 {
                    0 if at < bytes.len() => bytes[at] = next() as u8,
                    1 => bytes.insert(at, b"\r\n0:;9fF \t"[(next() % 10) as usize]),
                    _ => bytes.truncate(at),
                }
            }
            match read_answer(&bytes) {
                Ok((_, body)) => assert!(body.len() <= bytes.len(), "{bytes:?}"),
                Err(why) => assert!(!why.is_empty()),
            }
        }
    }

    /// A node that answers `answers` requests on each connection, then
    /// closes it; how many connections it accepted.
    fn node(answers: usize, requests: usize) -> (String, std::thread::JoinHandle<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let thread = std::thread::spawn(move || {
            let (mut served, mut accepted) = (0, 0);
            while served < requests {
                let (stream, _) = listener.accept().unwrap();
                accepted += 1;
                let mut reader = BufReader::new(stream);
                for _ in 0..answers {
                    let mut line = String::new();
                    let mut request = String::new();
                    while reader.read_line(&mut line).unwrap() > 0 {
                        request.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                        line.clear();
                    }
                    assert!(
                        request.starts_with("GET /api/v1/query?filter=host%2010.0.0.1&limit=2 "),
                        "{request}"
                    );
                    assert!(
                        request
                            .to_ascii_lowercase()
                            .contains("authorization: bearer t\r\n"),
                        "{request}"
                    );
                    reader
                        .get_mut()
                        .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
                        .unwrap();
                    served += 1;
                    if served == requests {
                        break;
                    }
                }
            }
            accepted
        });
        (url, thread)
    }

    fn ask(pool: &Arc<Connections>, url: &str) -> Vec<u8> {
        let params = [
            ("filter", "host 10.0.0.1".to_owned()),
            ("limit", "2".to_owned()),
        ];
        let deadline = Instant::now() + Duration::from_secs(10);
        let sent = send(pool, url, "query", &params, "Bearer t", deadline).unwrap();
        let (mut answer, _) = sent.answer().unwrap();
        let mut body = Vec::new();
        answer.read_to_end(&mut body).unwrap();
        body
    }

    #[test]
    fn connections_are_kept_and_asked_again_when_closed() {
        // Kept alive: three requests on one connection.
        let pool = Arc::default();
        let (url, node_thread) = node(3, 3);
        for _ in 0..3 {
            assert_eq!(ask(&pool, &url), b"ok");
        }
        assert_eq!(node_thread.join().unwrap(), 1);
        // Closed after each answer: the kept connection fails, and the
        // request is sent again on a new one.
        let pool = Arc::default();
        let (url, node_thread) = node(1, 3);
        for _ in 0..3 {
            assert_eq!(ask(&pool, &url), b"ok");
        }
        assert_eq!(node_thread.join().unwrap(), 3);
    }

    #[test]
    fn a_node_that_is_not_there_is_named_as_such() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let deadline = Instant::now() + Duration::from_secs(5);
        let error = send(
            &Arc::default(),
            &format!("http://127.0.0.1:{port}"),
            "query",
            &[],
            "Bearer t",
            deadline,
        )
        .err()
        .unwrap();
        assert!(error.starts_with("cannot reach it: "), "{error}");
    }
}
