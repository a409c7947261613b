//! `serve` as a node of a cluster (`[cluster]` in its configuration): the index
//! node's routes (`/api/v1/cluster/...`), the thread that keeps the index nodes
//! current with this node's summaries, and federated packet queries
//! (`GET /api/v1/query?cluster=true`), answered through the cluster crate.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hindsight_cluster::index::{SummaryUpload, SyncRequest};
use hindsight_cluster::sync::SyncCounters;
use hindsight_cluster::{ClusterClient, ClusterConfig, ClusterIndex, PARTIAL_HEADER};
use hindsight_model::Addr16;
use serde::Deserialize;
use serde_json::json;

use crate::api::{ApiError, ApiResult, AppState};

/// A node's cluster side.
#[derive(Debug)]
pub struct ClusterState {
    /// The cluster.
    pub client: ClusterClient,
    /// Its questions (packets and connections), answered within `max_rows`.
    pub questions: hindsight_service::Cluster,
    /// This node's index of every node's summaries, if it is an index node.
    pub index: Option<Arc<ClusterIndex>>,
    /// Its syncs with the index nodes.
    pub counters: Arc<SyncCounters>,
    /// Set to stop the sync thread.
    pub stop: Arc<AtomicBool>,
}

impl ClusterState {
    /// The cluster side of the node `config` names, whose own share of an
    /// answer `archive` gives (without a request to itself); a packet answer
    /// longer than `max_rows` is an error.
    pub fn new(
        config: ClusterConfig,
        archive: hindsight_service::Snapshots,
        max_rows: u64,
    ) -> Self {
        let index = match &config.name {
            Some(name) if config.is_index() => Some(Arc::new(ClusterIndex::new(&config, name))),
            _ => None,
        };
        let client = ClusterClient::new(config).with_local_node(Arc::new(archive));
        let client = match &index {
            Some(index) => client.with_local_index(Arc::clone(index)),
            None => client,
        };
        Self {
            questions: hindsight_service::Cluster::new(client.clone()).with_limits(
                hindsight_reader::Limits {
                    max_rows: Some(max_rows),
                    ..Default::default()
                },
            ),
            client,
            index,
            counters: Arc::new(SyncCounters::default()),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts the thread that keeps the index nodes current with the summaries
    /// of the archive `reader` reads.
    pub fn start_sync(
        &self,
        reader: Arc<hindsight_reader::Reader>,
        capturing: bool,
    ) -> Option<std::thread::JoinHandle<()>> {
        let name = self.client.config().name.clone()?;
        let (client, index, counters, stop) = (
            self.client.clone(),
            self.index.clone(),
            Arc::clone(&self.counters),
            Arc::clone(&self.stop),
        );
        let catalog = move || {
            let snapshot = reader.snapshot().ok()?;
            let entries = snapshot.archive().catalog().entries().cloned().collect();
            Some((reader.root().to_path_buf(), entries))
        };
        std::thread::Builder::new()
            .name("cluster-sync".to_owned())
            .spawn(move || {
                hindsight_cluster::sync::run(
                    &client,
                    &name,
                    capturing,
                    &catalog,
                    index.as_deref(),
                    &counters,
                    &stop,
                );
            })
            .ok()
    }
}

type Shared = Arc<AppState>;

/// The routes a node uses to tell an index node what it holds: each takes
/// the node's own token alone (checked here, not by the API's token check),
/// and a node speaks only for itself.
pub fn node_routes() -> Router<Shared> {
    Router::new()
        .route("/api/v1/cluster/sync", post(sync))
        // A busy segment's signature is megabytes: summaries have their own
        // body bound, which the nodes' uploads are cut to fit.
        .route(
            "/api/v1/cluster/summaries",
            post(summaries).layer(axum::extract::DefaultBodyLimit::max(
                hindsight_cluster::sync::MAX_UPLOAD_BODY_BYTES,
            )),
        )
}

/// The cluster's routes for questions (behind the token check).
pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/api/v1/cluster/route", get(route))
        .route("/api/v1/cluster/status", get(status))
        .route("/api/v1/cluster/fragment", post(fragment))
}

pub(crate) fn cluster(state: &AppState) -> ApiResult<&ClusterState> {
    state.cluster.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "this server is not a node of a cluster (no [cluster] in its configuration)",
        )
    })
}

fn index(state: &AppState) -> ApiResult<&ClusterIndex> {
    cluster(state)?.index.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "this node is not an index node of its cluster ([cluster] index)",
        )
    })
}

/// Whether the request carries the cluster's own token (nodes' routes take no
/// other).
fn require_cluster_token(state: &AppState, headers: &HeaderMap) -> ApiResult<()> {
    let token = &cluster(state)?.client.config().token;
    let given = crate::api::bearer(headers);
    if given.is_some_and(|given| crate::api::constant_time_eq(given.as_bytes(), token.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this route takes the cluster's token only",
        ))
    }
}

/// The node whose own token the request carries.
fn require_node_token<'a>(state: &'a AppState, headers: &HeaderMap) -> ApiResult<&'a str> {
    let config = cluster(state)?.client.config();
    crate::api::bearer(headers)
        .and_then(|given| config.node_of_token(given))
        .map(|node| node.name.as_str())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this route takes a node's own token (node_token; token_sha256 of its [[cluster.node]] is its SHA-256)",
            )
        })
}

fn index_error(error: hindsight_cluster::index::IndexError) -> ApiError {
    match error {
        hindsight_cluster::index::IndexError::NotItself { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, error.to_string())
        }
        _ => ApiError::bad_request(error.to_string()),
    }
}

/// `POST /api/v1/cluster/sync`: a node names the segments it holds.
async fn sync(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let from = require_node_token(&state, &headers)?;
    let index = index(&state)?;
    let request: SyncRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("bad sync: {e}")))?;
    let answer = index.sync(from, &request).map_err(|e| {
        log::warn!(
            "cluster: refused a sync from {from} as {:?}: {e}",
            request.node
        );
        index_error(e)
    })?;
    Ok(axum::Json(answer).into_response())
}

/// `POST /api/v1/cluster/summaries`: a node's summaries.
async fn summaries(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let from = require_node_token(&state, &headers)?;
    let index = index(&state)?;
    let upload: SummaryUpload = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("bad summaries: {e}")))?;
    let count = upload.summaries.len();
    let named = upload.node.clone();
    index.add(from, upload, body.len() as u64).map_err(|e| {
        log::warn!("cluster: refused summaries from {from} as {named:?}: {e}");
        index_error(e)
    })?;
    Ok(axum::Json(json!({"taken": count})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteParams {
    /// `packets`, `flows`, or both, comma-separated.
    #[serde(default)]
    tables: Option<String>,
    /// The filter whose addresses narrow the nodes (or `addresses`).
    filter: Option<String>,
    /// Address ranges, `LOW-HIGH` comma-separated.
    addresses: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

/// `GET /api/v1/cluster/route`: which nodes may hold matches.
async fn route(
    State(state): State<Shared>,
    params: Result<Query<RouteParams>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(params) = params?;
    let index = index(&state)?;
    let tables_text = params.tables.unwrap_or_else(|| "packets".to_owned());
    let tables: Vec<&str> = tables_text.split(',').map(str::trim).collect();
    if let Some(bad) = tables.iter().find(|t| !["packets", "flows"].contains(t)) {
        return Err(ApiError::bad_request(format!(
            "no table {bad:?}: the tables are packets and flows"
        )));
    }
    let time = crate::api::Window {
        since: params.since,
        until: params.until,
    }
    .range()?;
    let ranges = match (&params.filter, &params.addresses) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give filter or addresses, not both"));
        }
        (Some(filter), None) => crate::api::parse_filter(filter)?.address_ranges(),
        (None, Some(text)) => Some(parse_ranges(text)?),
        (None, None) => None,
    };
    let route = index.route(&tables, time.start_nanos, time.end_nanos, ranges.as_deref());
    hindsight_cluster::index::log_route(
        &route,
        &tables,
        time.start_nanos,
        time.end_nanos,
        ranges.as_deref(),
    );
    Ok(axum::Json(route).into_response())
}

/// `LOW-HIGH` address ranges, comma-separated.
fn parse_ranges(text: &str) -> ApiResult<Vec<(Addr16, Addr16)>> {
    text.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (low, high) = part.split_once('-').unwrap_or((part, part));
            let parse = |t: &str| {
                t.trim()
                    .parse::<std::net::IpAddr>()
                    .map(Addr16::from)
                    .map_err(|_| ApiError::bad_request(format!("bad address {t:?} in addresses")))
            };
            Ok((parse(low)?, parse(high)?))
        })
        .collect()
}

/// `GET /api/v1/cluster/status`: the nodes as the index node sees them, and
/// this node's syncs.
async fn status(State(state): State<Shared>) -> ApiResult<Response> {
    let cluster = cluster(&state)?;
    let config = cluster.client.config();
    let counters = &cluster.counters;
    let nodes = match &cluster.index {
        Some(index) => json!(index.status()),
        // Not an index node: what an index node says of the nodes.
        None => {
            let client = cluster.client.clone();
            let status =
                tokio::task::spawn_blocking(move || hindsight_cluster::client::status(&client))
                    .await
                    .map_err(|e| ApiError::internal(&e.into()))?;
            match status {
                Ok(status) => status["nodes"].clone(),
                Err(error) => json!({"error": format!("{error:#}")}),
            }
        }
    };
    Ok(axum::Json(json!({
        "node": config.name,
        "index_nodes": config.index,
        "is_index": cluster.index.is_some(),
        "nodes": nodes,
        "sync": {
            "rounds": counters.rounds.load(Ordering::Relaxed),
            "failures": counters.failures.load(Ordering::Relaxed),
            "bytes_sent": counters.bytes_sent.load(Ordering::Relaxed),
            "summaries_sent": counters.summaries_sent.load(Ordering::Relaxed),
        },
    }))
    .into_response())
}

/// The headers of a cluster's answer: the nodes asked in `hindsight-nodes`
/// and, if it is partial, the nodes missing in `hindsight-partial`.
pub(crate) fn federated_headers(response: &mut Response, answered: &hindsight_service::Answered) {
    let headers = response.headers_mut();
    if let Some(value) = answered
        .partial
        .as_deref()
        .and_then(|text| HeaderValue::from_str(&hindsight_service::ascii(text)).ok())
    {
        headers.insert(PARTIAL_HEADER, value);
    }
    if let Ok(value) = HeaderValue::from_str(&answered.nodes.join(",")) {
        headers.insert("hindsight-nodes", value);
    }
}

/// `POST /api/v1/cluster/fragment` (the cluster's token): a fragment of a
/// statement asked of the cluster, run over this node's archive; its rows as
/// an Arrow IPC stream. Only filters, projections and a partial aggregation
/// over one table run (see `hindsight_sql::SqlSession::run_fragment`).
async fn fragment(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    require_cluster_token(&state, &headers)?;
    if body.len() > hindsight_sql::MAX_FRAGMENT_BYTES {
        return Err(ApiError::bad_request(format!(
            "the fragment is {} bytes, more than {}",
            body.len(),
            hindsight_sql::MAX_FRAGMENT_BYTES
        )));
    }
    hindsight_sql::abandoned::check().map_err(|e| ApiError::of_reader(e.into()))?;
    let answer = crate::api::run_statement(
        &state,
        crate::worker::Statement::Fragment(body.to_vec()),
        state.limits().sql(state.limits().max_rows),
    )
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "application/vnd.apache.arrow.stream")],
        answer.body,
    )
        .into_response())
}

/// The cluster of `serve`'s configuration, if it has one.
pub fn load(
    value: Option<toml::Value>,
    base: Option<&Path>,
) -> anyhow::Result<Option<ClusterConfig>> {
    value
        .map(|value| ClusterConfig::from_toml(value, base))
        .transpose()
}
