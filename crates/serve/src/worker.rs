//! A client's statements, peers' fragments and watches' windows run in
//! worker processes, each under a kernel memory limit.
//!
//! The statement budget (`hindsight_sql::budget`) bounds what operators
//! reserve, and the resident watchdog cancels statements past the server's
//! bound; but a cancel lands only when a statement yields, and some work
//! allocates much before it yields (an aggregate making a batch of wide
//! states, functions nested in one projection). Inside the recorder's
//! process that memory could only be refused by aborting the process, and
//! with it the capture and the unsealed tail. So a statement runs in a
//! worker: the same binary (`hindsight serve --statement-worker`), reading
//! the archive read-only, with `RLIMIT_DATA` at `[api] worker_memory_mib`.
//! An allocation past it fails in the worker alone; the worker dies, the
//! client gets 400 naming the bound, and the next statement gets a new
//! worker. The recorder keeps capturing and answering.
//!
//! The recorder sends each statement with what the worker cannot read from
//! disk: the unsealed tail as of just before (`hindsight_sql::wire`). The
//! worker takes it first and its view of the disk after, as the recorder's
//! own reader does, so every row is read exactly once. A worker answers one
//! statement at a time; at most as many run as the admission's scan slots
//! let, and idle ones wait for the next statement. A statement past its
//! deadline, or whose client went away, ends with its worker: the recorder
//! kills it, so nothing computes on after its answer (a worker that gave up
//! on a statement exits after answering, for the same reason).
//!
//! The frames between them are a 64-bit little-endian length and its bytes:
//! a request is a JSON header, a payload (a peer's fragment, a watch's
//! window, or nothing), then the tail a piece at a time
//! (`hindsight_sql::wire::write_tail`); a reply is a JSON header and the
//! answer's bytes.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::http::StatusCode;
use hindsight_output::Format;
use hindsight_reader::{Limits, Reader};
use hindsight_store::TailView;
use serde::{Deserialize, Serialize};

use crate::api::{ApiError, ApiResult};
use hindsight_cluster::PARTIAL_HEADER;
use hindsight_service::{Output, Questions, Snapshots, SqlQuestion};

/// What a worker runs.
#[derive(Debug)]
pub enum Statement {
    /// A client's statement over this archive, its answer in `format`.
    Sql {
        /// The statement.
        text: String,
        /// The answer's format.
        format: Format,
    },
    /// A client's statement over the cluster (planned here, cut into
    /// fragments the nodes run, finished here), its answer in `format`.
    Cluster {
        /// The statement.
        text: String,
        /// The answer's format.
        format: Format,
    },
    /// A peer's fragment (`hindsight_sql::SqlSession::run_fragment`).
    Fragment(Vec<u8>),
    /// A watch's statement over one window: its parameters and live tables
    /// (`hindsight_sql::wire::encode_window`); the answer's batches as
    /// `hindsight_sql::wire::encode_batches` writes them.
    Window {
        /// The watch's statement (a script of stages).
        text: String,
        /// The window.
        window: Vec<u8>,
    },
}

/// A statement's answer: its bytes, and the headers that say how whole it is.
#[derive(Debug)]
pub struct Answer {
    /// The rows, in the statement's format (an Arrow IPC stream for a fragment).
    pub body: Vec<u8>,
    /// Response headers: what made it incomplete, which nodes answered.
    pub headers: Vec<(String, String)>,
}

/// Where a statement runs: an archive's reader, and the cluster's client
/// if the server is a node of one.
#[derive(Debug, Clone, Copy)]
pub struct Here<'a> {
    /// The archive.
    pub reader: &'a Arc<Reader>,
    /// The cluster, if any.
    pub cluster: Option<&'a hindsight_cluster::client::ClusterClient>,
}

/// Runs `statement` in this process; `tail`, if given, stands for the
/// reader's own unsealed rows (a worker's, sent by its server).
pub fn run_here(
    here: Here<'_>,
    tail: Option<TailView>,
    statement: &Statement,
    limits: &Limits,
) -> ApiResult<Answer> {
    let sql = |text: &String| SqlQuestion {
        text: text.clone(),
        max_rows: limits.max_rows.unwrap_or(u64::MAX),
        explain: false,
        allow_writes: false,
    };
    let mut body = Vec::new();
    let answered = match statement {
        Statement::Cluster { text, format } => {
            let client = here.cluster.ok_or_else(|| {
                ApiError::new(
                    StatusCode::CONFLICT,
                    "this server is not a node of a cluster (no [cluster] section)",
                )
            })?;
            let cluster =
                hindsight_service::Cluster::new(client.clone()).with_limits(limits.clone());
            cluster.sql(&sql(text), *format, &mut Output::over(&mut body))
        }
        Statement::Sql { text, format } => {
            let archive = Snapshots::new(Arc::clone(here.reader), limits.clone()).with_tail(tail);
            archive.sql(&sql(text), *format, &mut Output::over(&mut body))
        }
        Statement::Fragment(_) | Statement::Window { .. } => {
            return run_session(here, tail, statement, limits);
        }
    }
    .map_err(ApiError::of)?;
    let mut headers = Vec::new();
    if let Some(partial) = answered.partial {
        headers.push((PARTIAL_HEADER.to_owned(), partial));
    }
    if let Statement::Cluster { .. } = statement {
        headers.push(("hindsight-nodes".to_owned(), answered.nodes.join(",")));
    }
    if let Some(text) = crate::api::header_text(&answered.notes).filter(|_| answered.incomplete) {
        headers.push((crate::api::INCOMPLETE_HEADER.to_owned(), text));
    }
    Ok(Answer { body, headers })
}

/// A peer's fragment or a watch's window, over the archive's snapshot.
fn run_session(
    here: Here<'_>,
    tail: Option<TailView>,
    statement: &Statement,
    limits: &Limits,
) -> ApiResult<Answer> {
    let snapshot = match tail {
        Some(view) => here.reader.snapshot_with(Some(view)),
        None => here.reader.snapshot(),
    }
    .map_err(ApiError::of_reader)?;
    let session = snapshot.sql(limits).map_err(ApiError::of_reader)?;
    let mut body = Vec::new();
    match statement {
        Statement::Fragment(fragment) => session
            .run_fragment(fragment, &mut body, &limits.statement())
            .map(|_| ()),
        Statement::Window { text, window } => {
            run_window(&session, text, window, limits).map(|batches| body = batches)
        }
        Statement::Sql { .. } | Statement::Cluster { .. } => Ok(()),
    }
    .map_err(|e| ApiError::of_reader(e.into()))?;
    let headers = crate::api::header_text(&session.skipped())
        .map(|text| (crate::api::INCOMPLETE_HEADER.to_owned(), text))
        .into_iter()
        .collect();
    Ok(Answer { body, headers })
}

/// A watch's statement `text` over `window`: its batches, encoded.
fn run_window(
    session: &hindsight_sql::SqlSession,
    text: &str,
    window: &[u8],
    limits: &Limits,
) -> Result<Vec<u8>, hindsight_sql::SqlError> {
    let (params, packets, flows) = hindsight_sql::wire::decode_window(window)?;
    session.set_live(packets, flows)?;
    let script = session.script(text)?;
    let params: Vec<(&str, hindsight_sql::ScalarValue)> = params
        .iter()
        .map(|(name, value)| (name.as_str(), value.clone()))
        .collect();
    let batches = session.run_script_within(&script, &params, &limits.statement())?;
    hindsight_sql::wire::encode_batches(&batches)
}

/// A watch's windows, run in statement workers.
#[derive(Debug)]
pub struct Windows {
    /// The workers.
    pub workers: Arc<Workers>,
    /// The archive, for its unsealed tail.
    pub reader: Arc<Reader>,
    /// Memory of a window's operators.
    pub memory_bytes: Option<usize>,
}

impl hindsight_watch::WindowRunner for Windows {
    fn run(
        &self,
        sql: &str,
        params: &[(&str, hindsight_sql::ScalarValue)],
        packets: Vec<hindsight_store::arrow::array::RecordBatch>,
        flows: Vec<hindsight_store::arrow::array::RecordBatch>,
        limits: &hindsight_sql::Limits,
    ) -> Result<Vec<hindsight_store::arrow::array::RecordBatch>, String> {
        let window = hindsight_sql::wire::encode_window(params, &packets, &flows)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))?;
        drop((packets, flows));
        let statement = Statement::Window {
            text: sql.to_owned(),
            window,
        };
        let limits = Limits {
            max_rows: limits.max_rows,
            timeout: limits.timeout,
            memory_bytes: self.memory_bytes,
            cancel: limits.cancel.clone(),
        };
        let answer = self
            .workers
            .run(&self.reader, &statement, &limits)
            .map_err(|e| e.message().to_owned())?;
        hindsight_sql::wire::decode_batches(&answer.body)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    }
}

/// A request's header.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    /// The statement's text; none for a fragment.
    sql: Option<String>,
    /// The statement is over the cluster.
    cluster: bool,
    /// The statement is a watch's, over the window sent as the payload.
    window: bool,
    /// The answer's format, by name.
    format: String,
    max_rows: Option<u64>,
    timeout_ms: Option<u64>,
    memory_bytes: Option<usize>,
}

/// A reply's header.
#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    status: u16,
    error: Option<String>,
    retry_after: Option<u64>,
    headers: Vec<(String, String)>,
    /// The worker exits after this reply (work it gave up on still computes).
    exits: bool,
}

/// The most bytes of a reply's answer the recorder reads.
const MAX_REPLY_BYTES: u64 = 4 << 30;

/// How long past the statement's own deadline the recorder waits for a
/// worker's answer before it kills the worker.
const GRACE: Duration = Duration::from_secs(2);

/// The statement workers of a server.
#[derive(Debug)]
pub struct Workers {
    exe: PathBuf,
    archive: PathBuf,
    config: Option<PathBuf>,
    memory_mib: usize,
    footer_cache_mib: usize,
    idle: Mutex<Vec<Worker>>,
    /// Workers started.
    pub started: AtomicU64,
    /// Workers that died while they ran a statement.
    pub died: AtomicU64,
}

#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: Option<ChildStdout>,
    /// The last lines it wrote to stderr (what it said when it died).
    last_words: Arc<Mutex<Vec<String>>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a statement in a worker ended without a reply.
enum Failure {
    Cancelled,
    TimedOut,
    Died(String),
}

impl Workers {
    /// Workers running `exe` (this binary) over the archive at `archive`,
    /// each limited to `memory_mib`.
    pub fn new(
        exe: PathBuf,
        archive: &Path,
        config: Option<&Path>,
        memory_mib: usize,
        footer_cache_mib: usize,
    ) -> Self {
        Self {
            exe,
            archive: archive.to_owned(),
            config: config.map(Path::to_owned),
            memory_mib,
            footer_cache_mib,
            idle: Mutex::new(Vec::new()),
            started: AtomicU64::new(0),
            died: AtomicU64::new(0),
        }
    }

    /// Each worker's memory limit, MiB.
    pub fn memory_mib(&self) -> usize {
        self.memory_mib
    }

    /// Runs `statement` in a worker, with the unsealed tail of `reader`.
    pub fn run(
        &self,
        reader: &Reader,
        statement: &Statement,
        limits: &Limits,
    ) -> ApiResult<Answer> {
        // Taken before the worker looks at the disk (see `hindsight_store::tail`).
        let tail = reader.tail_view().unwrap_or_default();
        let (sql, cluster, format, payload) = match statement {
            Statement::Sql { text, format } => (Some(text.clone()), false, *format, &[][..]),
            Statement::Cluster { text, format } => (Some(text.clone()), true, *format, &[][..]),
            Statement::Fragment(fragment) => (None, false, Format::Jsonl, &fragment[..]),
            Statement::Window { text, window } => {
                (Some(text.clone()), false, Format::Jsonl, &window[..])
            }
        };
        let request = Request {
            sql,
            cluster,
            window: matches!(statement, Statement::Window { .. }),
            format: format.name().to_owned(),
            max_rows: limits.max_rows,
            timeout_ms: limits
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            memory_bytes: limits.memory_bytes,
        };
        let header = serde_json::to_vec(&request).map_err(|e| ApiError::internal(&e.into()))?;
        let deadline = limits
            .timeout
            .map(|timeout| Instant::now() + timeout + GRACE);
        let mut worker = self.take()?;
        match worker.ask(&[&header, payload], &tail, deadline, &limits.cancel) {
            Ok((reply, body)) => {
                if !reply.exits {
                    self.idle
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(worker);
                }
                if reply.status == 200 {
                    return Ok(Answer {
                        body,
                        headers: reply.headers,
                    });
                }
                let status =
                    StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let error = ApiError::new(status, reply.error.unwrap_or_default());
                Err(match reply.retry_after {
                    Some(seconds) => error.retry_after(seconds),
                    None => error,
                })
            }
            Err(Failure::Cancelled) => Err(ApiError::of_reader(
                hindsight_reader::ReaderError::Sql(hindsight_sql::SqlError::Cancelled),
            )),
            Err(Failure::TimedOut) => Err(ApiError::of_reader(hindsight_reader::ReaderError::Sql(
                hindsight_sql::SqlError::TimedOut {
                    seconds: limits.timeout.unwrap_or_default().as_secs(),
                },
            ))),
            Err(Failure::Died(why)) => {
                self.died.fetch_add(1, Ordering::Relaxed);
                let words = worker.last_words();
                log::warn!("a statement worker died ({why}): {words}");
                let refused = words
                    .split(" / ")
                    .find(|line| line.starts_with("memory allocation of"));
                Err(if let Some(refused) = refused {
                    ApiError::bad_request(format!(
                        "the statement needed more memory than its worker may have, \
                         [api] worker_memory_mib = {} ({refused}): the worker was stopped, \
                         the server goes on",
                        self.memory_mib
                    ))
                } else {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("the statement's worker died ({why}: {words}); the server goes on"),
                    )
                })
            }
        }
    }

    /// An idle worker, or a new one.
    fn take(&self) -> ApiResult<Worker> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        if let Some(mut worker) = idle
            && matches!(worker.child.try_wait(), Ok(None))
        {
            return Ok(worker);
        }
        self.spawn().map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot start a statement worker: {e:#}"),
            )
            .retry_after(1)
        })
    }

    fn spawn(&self) -> Result<Worker> {
        let mut child = Command::new(&self.exe)
            .arg("serve")
            .arg("--statement-worker")
            .arg(self.memory_mib.to_string())
            .arg("--footer-cache-mib")
            .arg(self.footer_cache_mib.to_string())
            .arg("--archive")
            .arg(&self.archive)
            .args(
                self.config
                    .iter()
                    .flat_map(|c| [std::ffi::OsStr::new("--config"), c.as_os_str()]),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", self.exe.display()))?;
        self.started.fetch_add(1, Ordering::Relaxed);
        let last_words = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let words = Arc::clone(&last_words);
            let pid = child.id();
            std::thread::Builder::new()
                .name("worker-stderr".to_owned())
                .spawn(move || relay_stderr(stderr, pid, &words))
                .context("cannot start a thread")?;
        }
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            anyhow::bail!("the worker has no pipes");
        };
        Ok(Worker {
            child,
            stdin,
            stdout: Some(stdout),
            last_words,
        })
    }
}

/// Passes a worker's stderr on to the server's, keeping its last lines.
fn relay_stderr(stderr: std::process::ChildStderr, pid: u32, words: &Mutex<Vec<String>>) {
    use std::io::BufRead;
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        log::warn!("statement worker {pid}: {line}");
        // Not the frames of a backtrace: what it said.
        let trimmed = line.trim_start();
        let frame = trimmed.starts_with("at ")
            || trimmed
                .split_once(':')
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
            || trimmed.starts_with("stack backtrace:")
            || trimmed.starts_with("note: Some details are omitted");
        if frame {
            continue;
        }
        let mut words = words
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if words.len() == 4 {
            words.remove(0);
        }
        words.push(line.chars().take(500).collect());
    }
}

impl Worker {
    /// Sends `frames` and waits for the reply until `deadline`, or until
    /// `cancel` is set.
    fn ask(
        &mut self,
        frames: &[&[u8]],
        tail: &TailView,
        deadline: Option<Instant>,
        cancel: &hindsight_sql::Cancel,
    ) -> Result<(Reply, Vec<u8>), Failure> {
        let sent = {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut self.stdin);
            frames
                .iter()
                .try_for_each(|frame| write_frame(&mut out, frame))
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    hindsight_sql::wire::write_tail(tail, &mut out).map_err(|e| e.to_string())
                })
                .and_then(|()| out.flush().map_err(|e| e.to_string()))
        };
        sent.map_err(|e| self.died(&e))?;
        // Read on a thread, so that this one can watch the deadline and the
        // client; killing the worker ends the read.
        let Some(mut stdout) = self.stdout.take() else {
            return Err(self.died("its answers were lost"));
        };
        let (send, answer) = std::sync::mpsc::sync_channel(1);
        let reading = std::thread::Builder::new()
            .name("worker-reply".to_owned())
            .spawn(move || {
                let reply = read_reply(&mut stdout);
                let _ = send.send((reply, stdout));
            });
        if reading.is_err() {
            return Err(self.died("cannot start a thread to read it"));
        }
        loop {
            match answer.recv_timeout(Duration::from_millis(20)) {
                Ok((reply, stdout)) => {
                    self.stdout = Some(stdout);
                    return reply.map_err(|e| self.died(&e));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.died("its reader ended"));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let failure = if cancel.is_cancelled() {
                        Failure::Cancelled
                    } else if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        Failure::TimedOut
                    } else {
                        continue;
                    };
                    // The worker goes (dropped by the caller), and with it
                    // whatever it computes.
                    let _ = self.child.kill();
                    return Err(failure);
                }
            }
        }
    }

    /// The worker ended while it ran a statement: how.
    fn died(&mut self, reading: &str) -> Failure {
        // Its exit status, once it has exited (a broken pipe comes first).
        let status = (0..100)
            .find_map(|_| match self.child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => {
                    std::thread::sleep(Duration::from_millis(10));
                    None
                }
                Err(error) => Some(error.to_string()),
            })
            .unwrap_or_else(|| {
                let _ = self.child.kill();
                "still running, killed".to_owned()
            });
        // The relay has the last words once the pipe is closed.
        std::thread::sleep(Duration::from_millis(20));
        Failure::Died(format!("{status}; {reading}"))
    }

    fn last_words(&self) -> String {
        self.last_words
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join(" / ")
    }
}

fn write_frame(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(bytes)
}

/// A frame of at most `max` bytes; `None` at the end of the input.
fn read_frame(input: &mut impl Read, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut length = [0u8; 8];
    match input.read_exact(&mut length) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let length = u64::from_le_bytes(length);
    if length > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {length} bytes, more than {max}"),
        ));
    }
    let mut bytes = Vec::new();
    input.take(length).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != length {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(bytes))
}

fn read_reply(input: &mut impl Read) -> Result<(Reply, Vec<u8>), String> {
    let closed = || "it closed its answers".to_owned();
    let failed = |e: std::io::Error| format!("reading its answer: {e}");
    let header = read_frame(input, 1 << 20)
        .map_err(failed)?
        .ok_or_else(closed)?;
    let reply: Reply =
        serde_json::from_slice(&header).map_err(|e| format!("its answer's header: {e}"))?;
    let body = read_frame(input, MAX_REPLY_BYTES)
        .map_err(failed)?
        .ok_or_else(closed)?;
    Ok((reply, body))
}

/// What `hindsight serve --statement-worker` is given.
#[derive(Debug)]
pub struct WorkerOptions {
    /// The archive to read.
    pub archive: PathBuf,
    /// Its memory limit, MiB.
    pub memory_mib: usize,
    /// Parsed segment footers it keeps between statements, MiB.
    pub footer_cache_mib: usize,
    /// The server's configuration file, for its cluster.
    pub config: Option<PathBuf>,
}

/// The most bytes of a request (a statement, a fragment and the tail).
const MAX_REQUEST_BYTES: u64 = 8 << 30;

/// Runs a statement worker: statements from standard input, answers to
/// standard output, until standard input closes.
pub fn serve_statements(options: &WorkerOptions) -> Result<()> {
    let answers = limit_process(options.memory_mib)?;
    let mut answers = std::io::BufWriter::new(answers);
    let reader = Arc::new(
        Reader::open(&options.archive)?.with_footer_cache_bytes(options.footer_cache_mib << 20),
    );
    // Its statements over the cluster route through the index node over
    // HTTP (the server's index is in the server) and ask every node,
    // this one too, for their fragments.
    let cluster = match &options.config {
        Some(path) => crate::cluster::load(crate::ServeConfig::load(path)?.cluster, path.parent())?
            .map(hindsight_cluster::client::ClusterClient::new),
        None => None,
    };
    let here = Here {
        reader: &reader,
        cluster: cluster.as_ref(),
    };
    let mut input = std::io::stdin().lock();
    loop {
        let Some(header) = read_frame(&mut input, 1 << 30)? else {
            return Ok(());
        };
        let payload = read_frame(&mut input, MAX_REQUEST_BYTES)?.context("no payload")?;
        let tail = hindsight_sql::wire::read_tail(&mut input, MAX_REQUEST_BYTES)?;
        let answer = answer(here, &header, payload, tail);
        let exits = hindsight_sql::abandoned::abandoned() > 0;
        let (reply, body) = match answer {
            Ok(answer) => (
                Reply {
                    status: 200,
                    error: None,
                    retry_after: None,
                    headers: answer.headers,
                    exits,
                },
                answer.body,
            ),
            Err(error) => (
                Reply {
                    status: error.status().as_u16(),
                    error: Some(error.message().to_owned()),
                    retry_after: error.retry_after_secs(),
                    headers: Vec::new(),
                    exits,
                },
                Vec::new(),
            ),
        };
        write_frame(&mut answers, &serde_json::to_vec(&reply)?)?;
        write_frame(&mut answers, &body)?;
        answers.flush()?;
        drop(body);
        if exits {
            // What it gave up on computes on its threads: they end with it.
            return Ok(());
        }
    }
}

/// One request, answered.
fn answer(here: Here<'_>, header: &[u8], payload: Vec<u8>, view: TailView) -> ApiResult<Answer> {
    let request: Request = serde_json::from_slice(header)
        .map_err(|e| ApiError::internal(&anyhow::anyhow!("a worker's request: {e}")))?;
    let format = Format::from_name(&request.format)
        .ok_or_else(|| ApiError::bad_request(format!("format {:?} is unknown", request.format)))?;
    let statement = match (request.sql, request.cluster, request.window) {
        (Some(text), _, true) => Statement::Window {
            text,
            window: payload,
        },
        (Some(text), true, false) => Statement::Cluster { text, format },
        (Some(text), false, false) => Statement::Sql { text, format },
        (None, ..) => Statement::Fragment(payload),
    };
    let limits = Limits {
        max_rows: request.max_rows,
        timeout: request.timeout_ms.map(Duration::from_millis),
        memory_bytes: request.memory_bytes,
        cancel: hindsight_sql::Cancel::new(),
    };
    run_here(here, Some(view), &statement, &limits)
}

/// Limits this process's data (heap, anonymous mappings, thread stacks) to
/// `memory_mib` and writes no core file; standard output goes to standard
/// error from now on, so that nothing but answers reaches the recorder.
/// Returns where the answers go.
fn limit_process(memory_mib: usize) -> Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let bytes = (memory_mib as libc::rlim_t).saturating_mul(1 << 20);
    let set = |resource, value: libc::rlim_t| {
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    set(libc::RLIMIT_DATA, bytes).context("cannot limit the worker's memory (RLIMIT_DATA)")?;
    set(libc::RLIMIT_CORE, 0).context("cannot turn the worker's core files off")?;
    // SAFETY: dup and dup2 on the standard descriptors, which are open.
    let answers = unsafe { libc::dup(1) };
    if answers < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot keep standard output");
    }
    // SAFETY: `answers` is a new descriptor this process owns alone.
    Ok(unsafe { std::fs::File::from_raw_fd(answers) })
}
