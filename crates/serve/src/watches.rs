//! The watches' routes of the API: `GET`/`POST /api/v1/watches`,
//! `GET`/`DELETE /api/v1/watches/{name}`, and `GET
//! /api/v1/watches/{name}/results` (JSON lines of the kept rows, or with
//! `follow=true` server-sent events of the rows as they come).
//!
//! A watch made through the API can dump from the ring into the dump
//! directory, nothing else: webhooks and alert logs send and write where the
//! configuration says, so only `[[watch]]` sections have them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Json, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hindsight_output::time::parse_instant;
use hindsight_sql::SqlError;
use hindsight_watch::WatchError;
use hindsight_watch::hub::{Actions, DumpAction, Hub, HubWatch, RowTemplate};
use hindsight_watch::request::WatchRequest;
use serde::Deserialize;
use serde_json::json;
use tokio_stream::StreamExt;

use super::api::{ApiError, ApiResult, AppState};

type Shared = Arc<AppState>;

/// The routes (behind the token check of the rest of the API).
pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/api/v1/watches", get(list).post(create))
        .route("/api/v1/watches/{name}", get(one).delete(remove))
        .route("/api/v1/watches/{name}/results", get(results))
}

fn hub(state: &AppState) -> ApiResult<&Arc<Hub>> {
    state.hub.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "this server does not capture (no [capture] section): watches run on live traffic",
        )
    })
}

/// `GET /api/v1/watches`: every watch, its counters and its latest rows.
async fn list(State(state): State<Shared>) -> ApiResult<Response> {
    let watches = state.hub.as_ref().map(|hub| hub.list()).unwrap_or_default();
    Ok(Json(json!({
        "capturing": state.hub.is_some(),
        "watches": watches,
    }))
    .into_response())
}

/// `GET /api/v1/watches/{name}`.
async fn one(State(state): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    let watch = hub(&state)?.get(&name).ok_or_else(|| not_found(&name))?;
    Ok(Json(watch).into_response())
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no watch is named {name:?}"))
}

/// `DELETE /api/v1/watches/{name}`.
async fn remove(State(state): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    if hub(&state)?.remove(&name) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(not_found(&name))
    }
}

/// The body of `POST /api/v1/watches`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchBody {
    name: String,
    sql: Option<String>,
    analysis: Option<String>,
    window: Option<String>,
    slide: Option<String>,
    #[serde(default)]
    params: BTreeMap<String, serde_json::Value>,
    max_window_rows: Option<usize>,
    dump: Option<DumpBody>,
    /// Refused: only `[[watch]]` sections send or write elsewhere.
    webhook: Option<serde_json::Value>,
    /// Refused, as `webhook`.
    alert_log: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DumpBody {
    filter: String,
    before: Option<String>,
    after: Option<String>,
}

fn duration(name: &str, text: &str) -> ApiResult<Duration> {
    hindsight_output::time::parse_span(text)
        .map_err(|e| ApiError::bad_request(format!("{name}: {e:#}")))
}

/// `POST /api/v1/watches`: starts a watch on the live traffic (201 with the
/// watch), after checking it against the archive: a statement that cannot be
/// planned is 400, one that writes 403, a name taken or no room 409.
async fn create(
    State(state): State<Shared>,
    body: Result<Json<WatchBody>, JsonRejection>,
) -> ApiResult<Response> {
    let Json(body) = body?;
    if body.webhook.is_some() || body.alert_log.is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "webhook and alert_log are refused through the API: a watch made here only \
             dumps into the dump directory; set them in a [[watch]] section of the \
             configuration",
        ));
    }
    let hub = Arc::clone(hub(&state)?);
    let request = WatchRequest {
        name: body.name.clone(),
        sql: body.sql.clone(),
        analysis: body.analysis.clone(),
        window: duration("window", body.window.as_deref().unwrap_or("10s"))?,
        slide: body
            .slide
            .as_deref()
            .map(|slide| duration("slide", slide))
            .transpose()?,
        params: body
            .params
            .iter()
            .map(|(name, value)| {
                let text = match value {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                (name.clone(), text)
            })
            .collect(),
        max_window_rows: Some(body.max_window_rows.unwrap_or(state.max_window_rows)),
        window_timeout: Some(state.window_timeout),
    };
    if body
        .max_window_rows
        .is_some_and(|rows| rows > state.max_window_rows)
    {
        return Err(ApiError::bad_request(format!(
            "max_window_rows {} is above this server's bound ({}, [watches] max_window_rows)",
            body.max_window_rows.unwrap_or_default(),
            state.max_window_rows
        )));
    }
    let (spec, analysis) = request.spec().map_err(ApiError::bad_request)?;
    let dump = match &body.dump {
        Some(dump) => Some(DumpAction {
            filter: RowTemplate::new(&dump.filter)
                .map_err(|e| ApiError::bad_request(format!("dump: {e}")))?,
            before: dump
                .before
                .as_deref()
                .map(|t| duration("dump.before", t))
                .transpose()?,
            after: dump
                .after
                .as_deref()
                .map(|t| duration("dump.after", t))
                .transpose()?
                .unwrap_or(Duration::ZERO),
        }),
        None => None,
    };
    if hub.get(&spec.name).is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("a watch is already named {:?}", spec.name),
        ));
    }
    // Planned against the archive before it runs, on a blocking thread.
    let reader = Arc::clone(&state.reader);
    let memory = state.limits().max_memory_bytes;
    let checked = spec.clone();
    let needs_home = analysis.is_some().then(|| checked.name.clone());
    tokio::task::spawn_blocking(move || -> ApiResult<()> {
        let snapshot = reader.snapshot().map_err(ApiError::of_reader)?;
        if let Some(refusal) = without_home(&snapshot, needs_home.as_deref()) {
            return Err(ApiError::bad_request(refusal));
        }
        let limits = hindsight_reader::Limits {
            memory_bytes: Some(memory),
            ..Default::default()
        };
        let session = snapshot.sql(&limits).map_err(ApiError::of_reader)?;
        hindsight_watch::check(&session, &checked).map_err(watch_error)
    })
    .await
    .map_err(|e| ApiError::internal(&e.into()))??;
    let watch = HubWatch {
        spec,
        analysis: analysis.map(|a| a.name.to_owned()),
        actions: Actions {
            dump,
            ..Actions::default()
        },
        origin: "api",
    };
    let name = watch.spec.name.clone();
    hub.add(watch)
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, e.to_string()))?;
    let info = hub.get(&name).ok_or_else(|| not_found(&name))?;
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

/// Why `watch` (the first watch that runs an analysis, if any) cannot run
/// on this archive: the analyses need its home network. One check for the
/// configuration at start, a reload and the API.
pub(crate) fn without_home(
    snapshot: &hindsight_reader::Snapshot,
    watch: Option<&str>,
) -> Option<String> {
    let watch = watch?;
    snapshot.settings().home.is_empty().then(|| {
        format!(
            "watch {watch:?} runs an analysis, which needs the home network: \
             [network] home in the archive's config.toml"
        )
    })
}

/// A watch's error as the API answers it: a statement that writes is 403,
/// everything else the request's fault.
fn watch_error(error: WatchError) -> ApiError {
    let status = match &error {
        WatchError::Sql {
            source: SqlError::ReadOnly { .. },
            ..
        } => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut message = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ApiError::new(status, message)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultsParams {
    since: Option<String>,
    #[serde(default)]
    follow: bool,
}

/// `GET /api/v1/watches/{name}/results[?since=TIME][&follow=true]`: the kept
/// rows whose window ended after `since`, as JSON lines; with `follow`, as
/// server-sent events (one `data:` line per row), and then the rows to come.
async fn results(
    State(state): State<Shared>,
    Path(name): Path<String>,
    params: Result<Query<ResultsParams>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(params) = params?;
    let since = match &params.since {
        Some(text) => parse_instant(text, jiff::Timestamp::now())
            .map_err(|e| ApiError::bad_request(format!("since: {e:#}")))?,
        None => i64::MIN,
    };
    let (kept, receiver) = hub(&state)?
        .rows(&name, since)
        .ok_or_else(|| not_found(&name))?;
    if !params.follow {
        let mut body = String::new();
        for row in kept {
            body.push_str(&row);
            body.push('\n');
        }
        return Ok((
            [(header::CONTENT_TYPE, "application/x-ndjson")],
            Body::from(body),
        )
            .into_response());
    }
    let kept = tokio_stream::iter(kept.into_iter().map(Ok));
    let coming = tokio_stream::wrappers::BroadcastStream::new(receiver);
    let events = kept.chain(coming).map(|row| {
        Ok::<_, std::convert::Infallible>(match row {
            Ok(row) => Event::default().data(&*row),
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                Event::default().comment(format!(
                    "{n} rows were not sent: the client read too slowly"
                ))
            }
        })
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}
