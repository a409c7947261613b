//! The HTTP API of `hindsight serve` (`docs/openapi.yaml` is its contract): every
//! route, the bearer-token check, the request bounds, and errors as JSON.
//!
//! Archive work (search, SQL, connection lookups) is blocking and runs on threads
//! of its own, admitted by its cost (`admission`: at most `max_concurrent`
//! cheap requests and `max_scans` scans at once); packet results stream to the
//! client as they are found, through a bounded channel, so a slow client slows
//! the search rather than filling memory.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Json, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use hindsight_filter::Filter;
use hindsight_live::{Dumper, LiveCounters};
use hindsight_output::Format;
use hindsight_output::time::{format_nanos, parse_instant, time_range};
use hindsight_reader::{Limits, Reader, ReaderError, Snapshot};
use hindsight_ring::Ring;
use hindsight_service::{Cancel, ConnQuestion, PacketQuestion, Questions};
pub use hindsight_service::{INCOMPLETE_HEADER, NEXT_HEADER};
pub(crate) use hindsight_service::{ascii, header_text};
use hindsight_sql::SqlError;
use hindsight_store::TimeRange;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::admission::{Admission, Cost, Ticket};
use super::metrics;
use super::worker::{Answer, Statement};

/// The web UI: a search page and a live page, no external resources.
const UI: &str = include_str!("ui.html");
const LIVE_UI: &str = include_str!("live.html");
const SESSIONS_UI: &str = include_str!("sessions.html");

/// The API's contract.
const OPENAPI: &str = include_str!("../../../docs/openapi.yaml");

/// Bounds of requests.
#[derive(Clone, Copy, Debug)]
pub struct ApiLimits {
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Most rows a query or statement returns.
    pub max_rows: u64,
    /// Longest a request may run.
    pub timeout: Duration,
    /// Cheap requests running at once.
    pub max_concurrent: usize,
    /// Scans running at once.
    pub max_scans: usize,
    /// Memory of one SQL statement's operators, bytes.
    pub max_memory_bytes: usize,
}

impl ApiLimits {
    /// The bounds of a SQL statement through the API: at most `max_rows`
    /// rows, the request timeout, the operators' memory.
    pub(crate) fn sql(&self, max_rows: u64) -> Limits {
        Limits {
            max_rows: Some(max_rows),
            timeout: Some(self.timeout),
            memory_bytes: Some(self.max_memory_bytes),
            ..Limits::default()
        }
    }
}

/// The live side of the server, when it captures.
#[derive(Debug)]
pub struct Live {
    /// The interface.
    pub interface: String,
    /// The recording's counters.
    pub counters: Arc<LiveCounters>,
    /// The capture ring.
    pub ring: Ring,
    /// Dumps on request.
    pub dumper: Dumper,
}

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The archive, opened once.
    pub reader: Arc<Reader>,
    /// Its questions, over the reader's snapshots within the API's bounds.
    pub archive: hindsight_service::Snapshots,
    /// The dump directory.
    pub dumps_dir: PathBuf,
    /// The bearer token, if the API needs one.
    pub token: Option<String>,
    /// Bounds of requests (changed by a reload: read them with `limits()`).
    pub limits: std::sync::RwLock<ApiLimits>,
    /// Live capture, if any.
    pub live: Option<Live>,
    /// When the server started.
    pub started: Instant,
    /// Slots of the archive work running at once, by cost.
    pub admission: Admission,
    /// Dump requests running at once.
    pub dump_requests: Arc<Semaphore>,
    /// Dump requests made, to name them.
    pub dump_requests_made: AtomicU64,
    /// Responses by status class (1xx..5xx).
    pub responses: [AtomicU64; 5],
    /// Packets archived per second, as `f64` bits, sampled by [`sample_rates`].
    pub archive_rate: AtomicU64,
    /// The finished dumps as [`refresh`] last listed them (for the metrics).
    pub dumps_seen: std::sync::Mutex<Vec<(String, u64, i64)>>,
    /// The watches, when the server captures.
    pub hub: Option<Arc<hindsight_watch::hub::Hub>>,
    /// Most rows a watch's window may hold (`[watches] max_window_rows`).
    pub max_window_rows: usize,
    /// Longest a watch's window may run (`[watches] window_timeout_secs`).
    pub window_timeout: Duration,
    /// The cluster this server is a node of, if any.
    pub cluster: Option<crate::cluster::ClusterState>,
    /// The processes statements run in, unless they run in this one
    /// (`[api] statement_workers`).
    pub workers: Option<Arc<crate::worker::Workers>>,
    /// Requests by route (the matched path), for the metrics.
    pub requests: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Connections accepted and refused (see `listen`).
    pub connections: Arc<crate::listen::ConnectionCounts>,
    /// Names a request's `Host` may give besides loopback's, when the API
    /// has no token ([`require_host`]).
    pub allowed_hosts: std::sync::RwLock<Vec<String>>,
}

impl AppState {
    /// The bounds of requests now.
    pub fn limits(&self) -> ApiLimits {
        *self
            .limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

type Shared = Arc<AppState>;

/// An error answered as `{"error": message, "status": code}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// Seconds a refused request should wait before it asks again.
    retry_after: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, answered with `Retry-After: seconds`.
    pub(crate) fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Its status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What went wrong, for the client.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Its `Retry-After`, seconds.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn internal(error: &anyhow::Error) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{error:#}"))
    }

    /// A question's error: a reader's by its kind ([`Self::of_reader`]), any
    /// other the request's fault (400).
    pub(crate) fn of(error: anyhow::Error) -> Self {
        match error.downcast::<ReaderError>() {
            Ok(error) => Self::of_reader(error),
            Err(error) => match error.downcast::<SqlError>() {
                Ok(error) => Self::of_reader(error.into()),
                Err(error) => Self::bad_request(format!("{error:#}")),
            },
        }
    }

    /// A reader's error, by its kind: the request's fault (400), a limit it
    /// carried (400 for rows, 504 for time), a statement refused (403), the
    /// server's (500).
    pub(crate) fn of_reader(error: ReaderError) -> Self {
        let status = match &error {
            ReaderError::Request(_)
            | ReaderError::Limit(hindsight_reader::LimitExceeded::Rows(_)) => {
                StatusCode::BAD_REQUEST
            }
            ReaderError::Limit(hindsight_reader::LimitExceeded::Time(_)) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ReaderError::Sql(
                SqlError::DataFusion(_)
                | SqlError::TooManyRows { .. }
                | SqlError::TooDeep { .. }
                | SqlError::Script(_),
            ) => StatusCode::BAD_REQUEST,
            ReaderError::Sql(SqlError::ReadOnly { .. }) => StatusCode::FORBIDDEN,
            ReaderError::Sql(SqlError::TimedOut { .. }) => StatusCode::GATEWAY_TIMEOUT,
            // The server's state, not the statement's fault alone: again later.
            ReaderError::Sql(SqlError::OverMemory(_) | SqlError::Busy { .. }) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            // Nobody reads it: nginx's "client closed request".
            ReaderError::Limit(hindsight_reader::LimitExceeded::Cancelled)
            | ReaderError::Sql(SqlError::Cancelled) => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut message = format!("{:#}", anyhow::Error::from(error));
        if status == StatusCode::GATEWAY_TIMEOUT {
            message.push_str(" (the server's timeout_secs)");
        }
        let error = Self::new(status, message);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            error.retry_after(1)
        } else {
            error
        }
    }
}

/// The reader's current snapshot (reloaded if a segment was sealed or expired).
fn snapshot(state: &AppState) -> ApiResult<Arc<Snapshot>> {
    state.reader.snapshot().map_err(ApiError::of_reader)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.message, "status": self.status.as_u16()});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::bad_request(format!("bad query parameters: {}", rejection.body_text()))
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the request body is larger than the server's max_body_bytes".to_owned()
        } else {
            format!("bad request body: {}", rejection.body_text())
        };
        Self::new(status, message)
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The whole application.
pub fn router(state: Shared) -> Router {
    let api = Router::new()
        .route("/api/v1/query", get(query))
        .route("/api/v1/histogram", get(histogram))
        .route("/api/v1/sql", post(sql))
        .route("/api/v1/flows", get(flows))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/triggers", post(trigger))
        .route("/api/v1/dumps", get(dumps))
        .route("/api/v1/dumps/{name}", get(dump_file))
        .route("/metrics", get(metrics_text))
        .merge(super::watches::routes())
        .merge(super::cluster::routes())
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            require_token,
        ));
    Router::new()
        .route(
            "/",
            get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], UI) }),
        )
        .route(
            "/live",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    LIVE_UI,
                )
            }),
        )
        .route(
            "/sessions",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    SESSIONS_UI,
                )
            }),
        )
        .route("/api/v1/health", get(health))
        .route(
            "/api/openapi.yaml",
            get(|| async { ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI) }),
        )
        .merge(api)
        .merge(super::cluster::node_routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(state.limits().max_body_bytes))
        // gzip for clients that ask (`Accept-Encoding: gzip`), at the fastest
        // level so that a large pcap download is not bound by the compressor.
        // Streams stay streams.
        .layer(
            tower_http::compression::CompressionLayer::new()
                .quality(tower_http::CompressionLevel::Fastest),
        )
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            require_host,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_responses,
        ))
        .with_state(state)
}

/// Without a token, refuses (403) a request whose `Host` names neither
/// loopback (`localhost`, `*.localhost`), an address, nor one of
/// `[api] allowed_hosts`. A web page the analyst visits can make the browser
/// ask the loopback server under a name of the page's own that resolves to
/// 127.0.0.1 (DNS rebinding), and read the answer as its own origin's; the
/// `Host` header still names the page's name, and is refused here. With a
/// token, the token decides.
async fn require_host(State(state): State<Shared>, request: Request, next: Next) -> Response {
    if state.token.is_some() || state.cluster.is_some() {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .map(|value| value.to_str().unwrap_or("?"))
        .or_else(|| request.uri().host());
    match host {
        Some(host)
            if !host_allowed(
                host,
                &state
                    .allowed_hosts
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ) =>
        {
            ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "Host {:?} is not this server's: without a token it answers requests to \
                 localhost or an address only (add the name to [api] allowed_hosts, or set a \
                 token)",
                    ascii(host)
                ),
            )
            .into_response()
        }
        _ => next.run(request).await,
    }
}

/// Whether `host` (a `Host` header: a name or address, maybe with a port)
/// is loopback's, an address, or one of `allowed`.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let is_port = |port: &str| port.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = host.strip_prefix('[') {
        // An IPv6 address, `[::1]` or `[::1]:8080`, and nothing else.
        return rest.split_once(']').is_some_and(|(address, after)| {
            address.parse::<std::net::Ipv6Addr>().is_ok()
                && (after.is_empty() || after.strip_prefix(':').is_some_and(is_port))
        });
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if is_port(port) => name,
        _ => host,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || allowed
            .iter()
            .any(|a| a.trim_end_matches('.').eq_ignore_ascii_case(&name))
}

async fn count_responses(State(state): State<Shared>, request: Request, next: Next) -> Response {
    if let Some(path) = request.extensions().get::<axum::extract::MatchedPath>() {
        let mut requests = state
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *requests.entry(path.as_str().to_owned()).or_default() += 1;
    }
    let mut response = next.run(request).await;
    let class = usize::from(response.status().as_u16() / 100).clamp(1, 5) - 1;
    state.responses[class].fetch_add(1, Ordering::Relaxed);
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        // The body was not read to its end, so the connection cannot carry
        // another request: say so, or a client that keeps connections sends
        // its next request down one the server has closed.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Lets a request through if the server has no token or the request carries it.
async fn require_token(State(state): State<Shared>, request: Request, next: Next) -> Response {
    // A node of a cluster takes the cluster's token too (its peers ask it).
    let cluster_token = state
        .cluster
        .as_ref()
        .map(|cluster| cluster.client.config().token.as_str());
    if state.token.is_none() && cluster_token.is_none() {
        return next.run(request).await;
    }
    let given = bearer(request.headers());
    let accepted = [state.token.as_deref(), cluster_token]
        .into_iter()
        .flatten()
        .any(|token| {
            given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
        });
    if accepted {
        return next.run(request).await;
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this server needs an `Authorization: Bearer TOKEN` header",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The token of an `Authorization: Bearer TOKEN` header, if there is one.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        // The scheme's name is case-insensitive (RFC 9110, 11.1).
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
}

/// Whether `given` is `token`, compared as their SHA-256 digests without an
/// early exit, so that timing tells neither how much matched nor how long
/// the token is.
pub(crate) fn constant_time_eq(given: &[u8], token: &[u8]) -> bool {
    use sha2::Digest;
    let (a, b) = (sha2::Sha256::digest(given), sha2::Sha256::digest(token));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The fewest characters a bearer token may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Sets a request's cancel flag when dropped: when its handler's future is
/// dropped because the client went away, the work it started stops.
pub(crate) struct CancelOnDrop(pub(crate) Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs blocking archive work of `cost` on a thread of its own, within the
/// time bound, once admitted (see [`Admission`]); the work is handed the
/// request's cancel flag, set when the client goes away.
pub(crate) async fn blocking<T: Send + 'static>(
    state: &AppState,
    cost: Cost,
    work: impl FnOnce(Cancel) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let ticket = state.admission.admit(cost).await?;
    run_admitted(state, ticket, work).await
}

/// The slot a planned search runs under: the cheap `ticket` it was planned
/// under, or a scan slot if its plan decodes more than a cheap request's rows
/// (whatever its limit: a limit does not bound the rows read before the
/// first match).
async fn by_plan(state: &AppState, ticket: Ticket, rows: u64) -> ApiResult<Ticket> {
    if state.admission.cost_of_rows(rows) == Cost::Cheap {
        return Ok(ticket);
    }
    drop(ticket);
    state.admission.admit(Cost::Scan).await
}

/// [`blocking`] with its slot taken.
pub(crate) async fn run_admitted<T: Send + 'static>(
    state: &AppState,
    ticket: Ticket,
    work: impl FnOnce(Cancel) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let cancel = CancelOnDrop(Cancel::new());
    let flag = cancel.0.clone();
    let (done, result) = oneshot::channel();
    // On the runtime's pool of blocking threads, kept between requests: a new
    // thread per request cost more than a rare-address query itself.
    tokio::task::spawn_blocking(move || {
        let _ticket = ticket;
        let _ = done.send(work(flag));
    });
    // A little after the work's own bound, so that work which cancels itself
    // (SQL) reports first.
    let answer =
        match tokio::time::timeout(state.limits().timeout + Duration::from_secs(2), result).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the request's worker ended without an answer",
            )),
            Err(_) => Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "the request took longer than the server's timeout_secs ({} s)",
                    state.limits().timeout.as_secs()
                ),
            )),
        };
    // Done (or timed out): the flag stops whatever still runs.
    drop(cancel);
    answer
}

async fn health(State(state): State<Shared>) -> Json<serde_json::Value> {
    let capture = state.live.as_ref().map(|live| {
        json!({
            "interface": live.interface,
            "running": live.counters.capture_threads.load(Ordering::Relaxed) > 0,
        })
    });
    // A node of a cluster says so, for the web UI's cluster view (how many
    // nodes; their names and addresses need the token).
    let cluster = state.cluster.as_ref().map(|cluster| {
        let config = cluster.client.config();
        json!({"node": config.name, "nodes": config.nodes.len()})
    });
    let limits = state.limits();
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": state.started.elapsed().as_secs(),
        "capture": capture,
        "cluster": cluster,
        "limits": {
            "max_rows": limits.max_rows,
            "max_body_bytes": limits.max_body_bytes,
            "timeout_secs": limits.timeout.as_secs(),
            "max_concurrent": limits.max_concurrent,
            "max_scans": limits.max_scans,
        },
    }))
}

async fn stats(State(state): State<Shared>) -> ApiResult<Json<serde_json::Value>> {
    let snapshot = snapshot(&state)?;
    Ok(Json(snapshot.summary_json(state.reader.root(), false)))
}

/// The time window of a request.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Window {
    pub(crate) since: Option<String>,
    pub(crate) until: Option<String>,
}

impl Window {
    pub(crate) fn range(&self) -> ApiResult<TimeRange> {
        time_range(self.since.as_deref(), self.until.as_deref(), None)
            .map_err(|e| ApiError::bad_request(format!("{e:#}")))
    }
}

pub(crate) fn parse_filter(text: &str) -> ApiResult<Filter> {
    Filter::parse(text).map_err(|e| ApiError::bad_request(format!("invalid filter:\n{e}")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryParams {
    #[serde(default)]
    filter: String,
    since: Option<String>,
    until: Option<String>,
    limit: Option<u64>,
    format: Option<String>,
    /// Ask every node of the cluster that may hold matches.
    #[serde(default)]
    cluster: bool,
}

fn row_limit(state: &AppState, limit: Option<u64>) -> ApiResult<u64> {
    let max = state.limits().max_rows;
    match limit {
        Some(0) => Err(ApiError::bad_request("limit must be positive")),
        Some(n) if n > max => Err(ApiError::bad_request(format!(
            "limit {n} is above the server's max_rows ({max})"
        ))),
        Some(n) => Ok(n),
        None => Ok(max),
    }
}

/// What answers the API's questions: the archive, or with `cluster` the
/// cluster this server is a node of. The one place a question's answerer is
/// chosen.
fn questions(state: &AppState, cluster: bool) -> ApiResult<Box<dyn Questions>> {
    if cluster {
        return Ok(Box::new(super::cluster::cluster(state)?.questions.clone()));
    }
    Ok(Box::new(state.archive.clone()))
}

/// `GET /api/v1/query`: the packets matching a filter in a window, streamed.
async fn query(
    State(state): State<Shared>,
    params: Result<Query<QueryParams>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(params) = params?;
    // Refused before it waits for a slot.
    parse_filter(&params.filter)?;
    let time = Window {
        since: params.since,
        until: params.until,
    }
    .range()?;
    let format = answer_format(
        params.format.as_deref(),
        Format::Jsonl,
        hindsight_output::Answer::Packets,
    )?;
    // An explicit limit cuts the result there. Without one the search reads
    // ahead in parallel, and a result longer than max_rows is an error, never
    // a silently short answer.
    let limit = match params.limit {
        Some(_) => Some(row_limit(&state, params.limit)?),
        None => None,
    };
    if params.cluster && format == Format::Rows {
        return Err(ApiError::bad_request(
            "a cluster's answer is not in the rows format (nodes answer rows to the node that asks)",
        ));
    }
    let questions = questions(&state, params.cluster)?;
    let question = PacketQuestion {
        filter: params.filter,
        time,
        limit,
        count: false,
        explain: false,
    };
    // Planned under a cheap slot (it reads the indexes, not the segments);
    // a plan that decodes more than `CHEAP_ROWS` rows then waits for a scan slot.
    let ticket = state.admission.admit(Cost::Cheap).await?;
    let plan = questions.plan(&question, format).map_err(ApiError::of)?;
    if plan.gathered() {
        // A cluster's: gathered (bounded by `max_rows`) before it is sent,
        // so that its headers can name every node that did not answer.
        let (bytes, answered) = run_admitted(&state, ticket, move |cancel| {
            let mut bytes = Vec::new();
            let answered = plan
                .write(format, &mut bytes, cancel)
                .map_err(ApiError::of)?;
            Ok((bytes, answered))
        })
        .await?;
        let mut response = packet_answer(format, None, Body::from(bytes).into_response());
        super::cluster::federated_headers(&mut response, &answered);
        return Ok(response);
    }
    // What the answer goes without, known before reading: damaged catalog
    // lines, segment files gone or not their sealed size.
    let mut skipped = plan.skipped();
    // A node's share of a cluster's answer, asked by the node that merges:
    // when its plan reads covering postings alone it is answered here, on the
    // runtime's thread, without the two thread hops of the blocking pool
    // (docs/ARCHITECTURE.md, "A federated packet answer asks its nodes from
    // one thread"); any other plan is read there.
    if format == Format::Rows && plan.is_small() {
        let mut bytes = Vec::new();
        let answered = plan
            .write(format, &mut bytes, Cancel::new())
            .map_err(ApiError::of)?;
        drop(ticket);
        skipped.extend(answered.notes);
        return Ok(packet_answer(
            format,
            header_text(&skipped),
            Body::from(bytes).into_response(),
        ));
    }
    let ticket = by_plan(&state, ticket, plan.rows()).await?;
    let incomplete = header_text(&skipped);
    let (pieces, mut body) = mpsc::channel::<Piece>(8);
    // The runtime's blocking pool (see `blocking`).
    tokio::task::spawn_blocking(move || {
        let _ticket = ticket;
        let mut out = PieceWriter::new(pieces);
        // What was met while reading, after the plan.
        let answered = plan.write(format, &mut out, Cancel::new());
        out.finish(
            answered
                .map(|answered| answered.notes)
                .map_err(ApiError::of),
        );
    });
    // An answer that ends within its first piece (64 KiB) and within
    // `WHOLE_WITHIN` goes out whole, with its length, after one wake of this task;
    // a longer or slower one streams, its headers sent at most `WHOLE_WITHIN`
    // after it began.
    let first = tokio::time::timeout(WHOLE_WITHIN, body.recv()).await.ok();
    let (incomplete, response) = match first {
        Some(None) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the query ended without an answer",
            ));
        }
        // Headers not yet sent: what was met while reading is in them too,
        // and a failure has its own status.
        Some(Some(Piece::Last(bytes, late))) => {
            let mut parts: Vec<String> = incomplete.into_iter().collect();
            parts.extend(late?);
            (header_text(&parts), Body::from(bytes).into_response())
        }
        Some(Some(Piece::More(bytes))) => (
            incomplete,
            Body::from_stream(piece_stream(Some(bytes), body)).into_response(),
        ),
        None => (
            incomplete,
            Body::from_stream(piece_stream(None, body)).into_response(),
        ),
    };
    Ok(packet_answer(format, incomplete, response))
}

/// A packet answer's headers: its media type, what made it `incomplete`, and
/// a file name for a capture.
fn packet_answer(format: Format, incomplete: Option<String>, mut response: Response) -> Response {
    let headers = response.headers_mut();
    if let Some(value) = incomplete.and_then(|text| HeaderValue::from_str(&text).ok()) {
        headers.insert(INCOMPLETE_HEADER, value);
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.media_type()),
    );
    if format.is_capture() {
        let name = format!("attachment; filename=\"hindsight.{}\"", format.name());
        if let Ok(value) = HeaderValue::from_str(&name) {
            headers.insert(header::CONTENT_DISPOSITION, value);
        }
    }
    response
}

/// How long a packet answer may take to go out whole (with its length, in one
/// piece) before its headers are sent and the rest streams.
const WHOLE_WITHIN: Duration = Duration::from_millis(20);

/// What the search sends to the response: a piece of the answer, or its last
/// piece with what the reading met (damaged segments skipped) or its failure.
enum Piece {
    More(Bytes),
    Last(Bytes, ApiResult<Vec<String>>),
}

/// The response body once its headers are sent: the pieces as they come; damage
/// met or a failure ends the body with an error, which makes the connection close
/// early, so the client sees a broken transfer rather than a short result that
/// looks whole.
fn piece_stream(first: Option<Bytes>, rest: mpsc::Receiver<Piece>) -> PieceStream {
    PieceStream {
        ready: first.map(Ok).into_iter().collect(),
        rest,
    }
}

/// See [`piece_stream`].
struct PieceStream {
    ready: std::collections::VecDeque<io::Result<Bytes>>,
    rest: mpsc::Receiver<Piece>,
}

impl tokio_stream::Stream for PieceStream {
    type Item = io::Result<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if let Some(item) = self.ready.pop_front() {
            return Poll::Ready(Some(item));
        }
        match self.rest.poll_recv(context) {
            Poll::Ready(Some(Piece::More(bytes))) => Poll::Ready(Some(Ok(bytes))),
            Poll::Ready(Some(Piece::Last(bytes, end))) => {
                let failure = match end {
                    Ok(late) => late
                        .first()
                        .map(|first| format!("the answer is incomplete: {first}")),
                    Err(error) => Some(error.message),
                };
                if let Some(message) = failure {
                    self.ready.push_back(Err(io::Error::other(message)));
                }
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A `Write` that sends 64 KiB pieces down a channel to the response, and the
/// rest at [`PieceWriter::finish`]; a client that went away makes the next write
/// fail, which stops the search.
struct PieceWriter {
    pieces: mpsc::Sender<Piece>,
    buffer: Vec<u8>,
}

const WRITE_CHUNK: usize = 64 << 10;

impl PieceWriter {
    fn new(pieces: mpsc::Sender<Piece>) -> Self {
        Self {
            pieces,
            buffer: Vec::with_capacity(WRITE_CHUNK),
        }
    }

    /// Sends what is left with the answer's end.
    fn finish(mut self, end: ApiResult<Vec<String>>) {
        let last = Bytes::from(std::mem::take(&mut self.buffer));
        let _ = self.pieces.blocking_send(Piece::Last(last, end));
    }
}

impl Write for PieceWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= WRITE_CHUNK {
            let piece = Bytes::from(std::mem::replace(
                &mut self.buffer,
                Vec::with_capacity(WRITE_CHUNK),
            ));
            self.pieces
                .blocking_send(Piece::More(piece))
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))?;
        }
        Ok(data.len())
    }

    /// Nothing: the buffer goes at 64 KiB or at the end, so that a short answer
    /// is one piece.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistogramParams {
    #[serde(default)]
    filter: String,
    since: Option<String>,
    until: Option<String>,
    buckets: Option<usize>,
}

/// `GET /api/v1/histogram`: packets matching a filter per time bucket (the UI's
/// timeline). Without a window, the span of the segments the filter can match.
async fn histogram(
    State(state): State<Shared>,
    params: Result<Query<HistogramParams>, QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let Query(params) = params?;
    parse_filter(&params.filter)?;
    let buckets = params.buckets.unwrap_or(100);
    if !(1..=2000).contains(&buckets) {
        return Err(ApiError::bad_request("buckets must be between 1 and 2000"));
    }
    let window = Window {
        since: params.since,
        until: params.until,
    };
    let time = window.range()?;
    let question = PacketQuestion {
        filter: params.filter,
        time,
        limit: None,
        count: true,
        explain: false,
    };
    // Planned under a cheap slot; a plan that decodes more than a cheap
    // request's rows runs under a scan slot (see `query`).
    let ticket = state.admission.admit(Cost::Cheap).await?;
    let plan = questions(&state, false)?
        .plan(&question, Format::Jsonl)
        .map_err(ApiError::of)?;
    let ticket = by_plan(&state, ticket, plan.rows()).await?;
    let answer = run_admitted(&state, ticket, move |cancel| {
        let histogram = plan.histogram(buckets, cancel).map_err(ApiError::of)?;
        Ok(json!({
            "start_ns": histogram.start_ns,
            "end_ns": histogram.end_ns,
            "start": format_nanos(histogram.start_ns),
            "end": format_nanos(histogram.end_ns),
            "bucket_ns": histogram.bucket_ns,
            "counts": histogram.counts,
            "total": histogram.total,
            "method": histogram.method,
            "summarised_segments": histogram.summarised,
            "incomplete": header_text(&histogram.incomplete),
        }))
    })
    .await?;
    Ok(Json(answer))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlBody {
    sql: String,
    max_rows: Option<u64>,
    format: Option<String>,
    /// Ask every node of the cluster that may hold rows.
    #[serde(default)]
    cluster: bool,
}

/// The format an answer of `answer` asks for by name (`default` without one).
fn answer_format(
    name: Option<&str>,
    default: Format,
    answer: hindsight_output::Answer,
) -> ApiResult<Format> {
    let Some(name) = name else {
        return Ok(default);
    };
    Format::from_name(name)
        .filter(|format| answer.formats().contains(format))
        .ok_or_else(|| {
            let names: Vec<&str> = answer.formats().iter().map(|f| f.name()).collect();
            ApiError::bad_request(format!(
                "format {name:?} is not one of {}",
                names.join(", ")
            ))
        })
}

/// Runs `statement` under a scan slot: in a statement worker, or here if the
/// server has none.
pub(crate) async fn run_statement(
    state: &Shared,
    statement: Statement,
    mut limits: Limits,
) -> ApiResult<Answer> {
    let shared = Arc::clone(state);
    blocking(state, Cost::Scan, move |cancel| {
        limits.cancel = cancel;
        match &shared.workers {
            Some(workers) => workers.run(&shared.reader, &statement, &limits),
            None => {
                let here = crate::worker::Here {
                    reader: &shared.reader,
                    cluster: shared.cluster.as_ref().map(|cluster| &cluster.client),
                };
                crate::worker::run_here(here, None, &statement, &limits)
            }
        }
    })
    .await
}

/// `POST /api/v1/sql`: a statement over `packets` and `flows`, as JSON lines
/// (or `format`: csv, table, parquet).
async fn sql(
    State(state): State<Shared>,
    body: Result<Json<SqlBody>, JsonRejection>,
) -> ApiResult<Response> {
    let Json(body) = body?;
    let max_rows = row_limit(&state, body.max_rows)?;
    let format = answer_format(
        body.format.as_deref(),
        Format::Jsonl,
        hindsight_output::Answer::Rows,
    )?;
    // Not while statements given up on still compute, as many as it lets.
    hindsight_sql::abandoned::check().map_err(|e| ApiError::of_reader(e.into()))?;
    let statement = if body.cluster {
        // Here, so that a server that is no node says so before queueing.
        super::cluster::cluster(&state)?;
        Statement::Cluster {
            text: body.sql,
            format,
        }
    } else {
        Statement::Sql {
            text: body.sql,
            format,
        }
    };
    let answer = run_statement(&state, statement, state.limits().sql(max_rows)).await?;
    let mut response = ([(header::CONTENT_TYPE, format.media_type())], answer.body).into_response();
    for (name, value) in &answer.headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::try_from(name.as_str()),
            HeaderValue::from_str(&ascii(value)),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    Ok(response)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowParams {
    ip: Option<String>,
    filter: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
    format: Option<String>,
    /// JSON entries carry `stored`: the index's key and value in hex (what a
    /// cluster's nodes answer the node that merges them).
    #[serde(default)]
    stored: bool,
    /// Ask every node of the cluster that may hold matches.
    #[serde(default)]
    cluster: bool,
}

/// `GET /api/v1/flows`: the connections of an address or network, as JSON with
/// the next page's cursor, or with `format` (table, csv, jsonl) as text with
/// the cursor in the `hindsight-next` header.
async fn flows(
    State(state): State<Shared>,
    params: Result<Query<FlowParams>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(params) = params?;
    let text = match params.format.as_deref() {
        Some(name) => Some(answer_format(
            Some(name),
            Format::Jsonl,
            hindsight_output::Answer::Connections,
        )?),
        None => None,
    };
    if let Some(filter) = &params.filter {
        parse_filter(filter)?;
    }
    let limit = row_limit(&state, params.limit.map(|n| n as u64))?;
    let limit = usize::try_from(limit.min(100_000)).unwrap_or(100_000);
    let question = ConnQuestion {
        ip: params.ip,
        filter: params.filter,
        time: Window {
            since: params.since,
            until: params.until,
        }
        .range()?,
        // A page of an archive is 1,000 connections unless the question says;
        // a cluster's, as many as the server answers.
        limit: if params.limit.is_some() || params.cluster {
            limit
        } else {
            1000
        },
        after: params.after,
    };
    let questions = questions(&state, params.cluster)?;
    // A filter that names no address or name scans the flows segments.
    let cost = match hindsight_service::scans(&question) {
        true => Cost::Scan,
        false => Cost::Cheap,
    };
    let page = blocking(&state, cost, move |_| {
        questions.page(&question).map_err(ApiError::of)
    })
    .await?;
    let mut response = match text {
        None => {
            let connections: Vec<_> = page
                .connections
                .iter()
                .map(|connection| {
                    let entry = &connection.entry;
                    let mut json = hindsight_output::connections::connection_json(
                        entry,
                        connection.community_seed,
                    );
                    if let Some(node) = &connection.node {
                        json["node"] = json!(node);
                    }
                    if params.stored {
                        let (key, value) = hindsight_reader::Stored::stored(entry);
                        json["stored"] = json!(format!(
                            "{}.{}",
                            hindsight_reader::encode_cursor(&key),
                            hindsight_reader::encode_cursor(&value)
                        ));
                        // A lookup by name's order (a cluster merges pages by it).
                        if let Some(place) = &connection.at {
                            json["at"] = json!(hindsight_reader::encode_cursor(place));
                        }
                    }
                    json
                })
                .collect();
            let mut answer = json!({"connections": connections, "next": page.answered.next});
            if let Some(seed) = page.community_seed {
                answer["community_seed"] = json!(seed);
            }
            Json(answer).into_response()
        }
        Some(format) => {
            let mut out = Vec::new();
            page.write(format, &mut out).map_err(ApiError::of)?;
            let mut response = ([(header::CONTENT_TYPE, format.media_type())], out).into_response();
            if let Some(value) = page
                .answered
                .next
                .as_deref()
                .and_then(|next| HeaderValue::from_str(next).ok())
            {
                response.headers_mut().insert(NEXT_HEADER, value);
            }
            response
        }
    };
    if params.cluster {
        super::cluster::federated_headers(&mut response, &page.answered);
    }
    // What a scan left out (a damaged flows segment).
    if page.answered.incomplete
        && let Some(value) = hindsight_service::header_text(&page.answered.notes)
            .and_then(|text| HeaderValue::from_str(&text).ok())
    {
        response.headers_mut().insert(INCOMPLETE_HEADER, value);
    }
    Ok(response)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TriggerBody {
    filter: String,
    at: Option<String>,
    before_secs: Option<f64>,
    after_secs: Option<f64>,
}

/// Longest window a dump request may ask for, each side of its time.
const MAX_DUMP_SIDE: Duration = Duration::from_secs(3600);

/// Dump requests running at once.
pub const MAX_DUMP_REQUESTS: usize = 4;

/// `POST /api/v1/triggers`: dump the ring's window around a time (now by
/// default) for a filter. Answers 202 at once; the dump appears in
/// `/api/v1/dumps` once the window's end has been captured.
async fn trigger(
    State(state): State<Shared>,
    body: Result<Json<TriggerBody>, JsonRejection>,
) -> ApiResult<Response> {
    let Json(body) = body?;
    let Some(live) = &state.live else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this server does not capture (no [capture] section): there is no ring to dump",
        ));
    };
    let filter = parse_filter(&body.filter)?;
    let side = |name: &str, value: Option<f64>, default: f64| -> ApiResult<Duration> {
        let value = value.unwrap_or(default);
        match Duration::try_from_secs_f64(value) {
            Ok(d) if d <= MAX_DUMP_SIDE => Ok(d),
            _ => Err(ApiError::bad_request(format!(
                "{name} = {value}: expected seconds between 0 and {}",
                MAX_DUMP_SIDE.as_secs()
            ))),
        }
    };
    let before = side("before_secs", body.before_secs, 10.0)?;
    let after = side("after_secs", body.after_secs, 5.0)?;
    let now = jiff::Timestamp::now();
    let at_ns = match &body.at {
        Some(text) => {
            parse_instant(text, now).map_err(|e| ApiError::bad_request(format!("at: {e:#}")))?
        }
        None => i64::try_from(now.as_nanosecond()).unwrap_or(i64::MAX),
    };
    let permit = Arc::clone(&state.dump_requests)
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("{MAX_DUMP_REQUESTS} dumps are being written: try again shortly"),
            )
        })?;
    let n = state.dump_requests_made.fetch_add(1, Ordering::Relaxed) + 1;
    let label = format!("request{n}");
    let name = live
        .dumper
        .new_name(at_ns, &label)
        .map_err(|e| ApiError::bad_request(format!("at: {e}")))?;
    let dumper = live.dumper.clone();
    let file = name.clone();
    std::thread::Builder::new()
        .name("api-dump".to_owned())
        .spawn(move || {
            let _permit = permit;
            match dumper.dump_as(filter, at_ns, before, after, &file) {
                Ok(report) if !report.complete => log::warn!(
                    "dump {label} is incomplete: the capture did not reach the \
                     window's end in time"
                ),
                Ok(_) => {}
                Err(error) => log::warn!("dump {label}: {error}"),
            }
        })
        .map_err(|e| ApiError::internal(&e.into()))?;
    let ready_by = at_ns.saturating_add(i64::try_from(after.as_nanos()).unwrap_or(i64::MAX));
    let answer = json!({
        "dump": name,
        "url": format!("/api/v1/dumps/{name}"),
        "at": format_nanos(at_ns),
        "at_ns": at_ns,
        "ready_after": format_nanos(ready_by),
    });
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// The finished dumps of `dir`: name, bytes, and modification time, newest first.
pub fn list_dumps(dir: &Path) -> Vec<(String, u64, i64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dumps: Vec<(String, u64, i64)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if !valid_dump_name(&name) {
                return None;
            }
            let metadata = entry.metadata().ok()?;
            let modified = metadata
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            let modified = i64::try_from(modified.as_nanos()).ok()?;
            Some((name, metadata.len(), modified))
        })
        .collect();
    dumps.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| b.0.cmp(&a.0)));
    dumps
}

/// A finished dump's name: `dump-<digits>-<n>-<label>.pcap` (or an earlier
/// version's `dump-<digits>-<label>.pcap`), nothing that leaves the
/// directory (the `.part` of a dump being written is not one).
fn valid_dump_name(name: &str) -> bool {
    Dumper::time_of(name).is_some()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.contains("..")
}

async fn dumps(State(state): State<Shared>) -> Json<serde_json::Value> {
    let dumps: Vec<_> = list_dumps(&state.dumps_dir)
        .into_iter()
        .map(|(name, bytes, modified)| {
            json!({
                "name": name,
                "bytes": bytes,
                "modified": format_nanos(modified),
                "url": format!("/api/v1/dumps/{name}"),
            })
        })
        .collect();
    Json(json!({"dumps": dumps}))
}

async fn dump_file(
    State(state): State<Shared>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> ApiResult<Response> {
    if !valid_dump_name(&name) {
        return Err(ApiError::bad_request(format!(
            "{name:?} is not a dump name (dump-<time>-<n>-<label>.pcap)"
        )));
    }
    let path = state.dumps_dir.join(&name);
    let file = tokio::fs::File::open(&path)
        .await
        .map_err(|_| ApiError::new(StatusCode::NOT_FOUND, format!("no dump named {name}")))?;
    let length = file.metadata().await.map(|m| m.len()).ok();
    let mut response = Body::from_stream(tokio_util::io::ReaderStream::new(file)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.tcpdump.pcap"),
    );
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// `GET /metrics`, outside the query permits: a scrape must answer while queries run.
async fn metrics_text(State(state): State<Shared>) -> ApiResult<Response> {
    let text = tokio::task::spawn_blocking(move || metrics::render(&state))
        .await
        .map_err(|e| ApiError::internal(&e.into()))?
        .map_err(|e| ApiError::internal(&e))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// Looks for sealed or expired segments every `every`, so that what the reader
/// holds (the metrics read it) is at most that old.
pub async fn refresh(state: Shared, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let work = Arc::clone(&state);
        let reloaded = tokio::task::spawn_blocking(move || {
            // Only a capturing server makes dumps; without one the list read at
            // the start stands.
            if work.live.is_some() {
                let dumps = list_dumps(&work.dumps_dir);
                if let Ok(mut seen) = work.dumps_seen.lock() {
                    *seen = dumps;
                }
            }
            // Counted here, once per snapshot, so that a scrape does not walk
            // the archive.
            work.reader.snapshot().map(|snapshot| snapshot.disk_bytes())
        })
        .await;
        if let Ok(Err(error)) = reloaded {
            log::warn!("cannot reload the archive: {error}");
        }
    }
}

/// Samples the archive rate every `every`, for the `hindsight_archive_packets_per_second` gauge.
pub async fn sample_rates(state: Shared, every: Duration) {
    let Some(live) = &state.live else { return };
    let mut last = (
        Instant::now(),
        live.counters.archived.load(Ordering::Relaxed),
    );
    loop {
        tokio::time::sleep(every).await;
        let now = (
            Instant::now(),
            live.counters.archived.load(Ordering::Relaxed),
        );
        let rate = (now.1 - last.1) as f64 / now.0.duration_since(last.0).as_secs_f64();
        state.archive_rate.store(rate.to_bits(), Ordering::Relaxed);
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn hosts_of_loopback_and_addresses_are_allowed_and_other_names_not() {
        let allowed = ["recorder.lab".to_owned()];
        for host in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "localhost",
            "LocalHost:80",
            "ui.localhost",
            "localhost.",
            "[::1]",
            "[::1]:8080",
            "10.1.2.3:8080",
            "recorder.lab",
            "Recorder.Lab:443",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "[::1].attacker.example",
            "[::1]:80x",
            "[::1",
            "lab",
            "",
            "?",
        ] {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }
}
