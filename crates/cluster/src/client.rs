//! The asking side: ask an index node which nodes may hold matches, ask those
//! alone within the cluster's deadline, and merge their answers. A node that
//! could hold matches and did not answer (down, past the deadline, refusing)
//! is named in the answer's [`Missing`], never left out in silence.

use std::collections::{BinaryHeap, VecDeque};
use std::io::Read;
use std::time::{Duration, Instant};

use hindsight_model::Addr16;
use hindsight_model::CoveredRow;
use hindsight_output::time::format_nanos;
use hindsight_store::TimeRange;

use crate::ClusterConfig;
use crate::index::{Choice, Route};

/// A node that may hold matches and did not answer, or answered in part.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    /// The node.
    pub node: String,
    /// Why, in words.
    pub reason: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {}: {}", self.node, self.reason)
    }
}

/// How a federated question went: which nodes the index chose and why, who
/// did not answer.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The route the question took.
    pub route: Route,
    /// What went wrong with the route itself (no index node answered: every
    /// node was asked).
    pub notes: Vec<String>,
    /// Nodes whose answers are missing or incomplete.
    pub missing: Vec<Missing>,
}

impl Outcome {
    /// Whether the answer lacks what a node could have held.
    pub fn is_partial(&self) -> bool {
        !self.missing.is_empty()
    }

    /// The `hindsight-partial` header's value, if partial.
    pub fn header(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| {
            self.missing
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// The response header that says an answer is partial, naming the nodes.
pub const PARTIAL_HEADER: &str = "hindsight-partial";

/// This process's own archive, when it is a node of the cluster (`serve`):
/// its share of an answer is read here, without a request to itself.
pub trait LocalNode: Send + Sync + std::fmt::Debug {
    /// This node's packets matching `filter` in `time` (at most `limit`), in
    /// the rows format; and what made the answer incomplete, if anything.
    fn rows(
        &self,
        filter: &str,
        time: TimeRange,
        limit: Option<u64>,
    ) -> Result<(Vec<u8>, Option<String>), String>;
}

/// A client of the cluster's nodes.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    config: std::sync::Arc<ClusterConfig>,
    agent: ureq::Agent,
    /// This process's own index, when it is an index node: routes are
    /// answered here, without a request.
    local: Option<std::sync::Arc<crate::ClusterIndex>>,
    /// This process's own archive, when it is the node of the config's name.
    node: Option<std::sync::Arc<dyn LocalNode>>,
    /// Kept connections to the nodes, for their packet answers.
    connections: std::sync::Arc<crate::pipeline::Connections>,
}

/// One packet from a node.
type Packet = CoveredRow;

impl ClusterClient {
    /// A client of the cluster `config`.
    pub fn new(config: ClusterConfig) -> Self {
        let agent = ureq::Agent::with_parts(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(Duration::from_secs(2)))
                .timeout_global(Some(config.deadline))
                .build(),
            ureq::unversioned::transport::DefaultConnector::default(),
            LiteralResolver::default(),
        );
        Self {
            config: std::sync::Arc::new(config),
            agent,
            local: None,
            node: None,
            connections: std::sync::Arc::default(),
        }
    }

    /// Reads this node's share of answers through `node`, the archive of the
    /// node the config names as itself.
    pub fn with_local_node(mut self, node: std::sync::Arc<dyn LocalNode>) -> Self {
        self.node = Some(node);
        self
    }

    /// This process's archive, if `name` is this node.
    fn local_node(&self, name: &str) -> Option<&dyn LocalNode> {
        (self.config.name.as_deref() == Some(name))
            .then_some(self.node.as_deref())
            .flatten()
    }

    /// Routes with `index`, this process's own (an index node asking).
    pub fn with_local_index(mut self, index: std::sync::Arc<crate::ClusterIndex>) -> Self {
        self.local = Some(index);
        self
    }

    /// The cluster.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.config.token)
    }

    /// `GET url/api/v1/route` with `params` and the cluster's token; the
    /// response if it is 200, else why not, in words.
    pub fn get(
        &self,
        url: &str,
        route: &str,
        params: &[(&str, String)],
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let request = self
            .agent
            .get(format!("{url}/api/v1/{route}"))
            .header("Authorization", self.bearer())
            .query_pairs(params.iter().map(|(k, v)| (*k, v.as_str())));
        answer_of(request.call())
    }

    /// `POST url/api/v1/route` with a binary body.
    pub fn post_bytes(
        &self,
        url: &str,
        route: &str,
        body: &[u8],
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        self.post_with(
            url,
            route,
            "application/octet-stream",
            body,
            &self.bearer(),
            "the cluster's token",
        )
    }

    /// `POST url/api/v1/route` with a JSON body and this node's own token
    /// (what it says of itself to an index node).
    pub fn post_as_node(
        &self,
        url: &str,
        route: &str,
        body: &[u8],
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let token = self
            .config
            .node_token
            .as_deref()
            .ok_or("this is not a node of the cluster (no node_token)")?;
        let bearer = format!("Bearer {token}");
        self.post_with(
            url,
            route,
            "application/json",
            body,
            &bearer,
            "this node's own token",
        )
    }

    /// `POST url/api/v1/route` with `authorization` (`token`: what a 401
    /// refused, in words).
    fn post_with(
        &self,
        url: &str,
        route: &str,
        content_type: &str,
        body: &[u8],
        authorization: &str,
        token: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let request = self
            .agent
            .post(format!("{url}/api/v1/{route}"))
            .header("Authorization", authorization)
            .header("Content-Type", content_type);
        answer_with(request.send(body), token)
    }

    /// Which nodes may hold rows of `tables` in `time` with an address in
    /// `ranges`: the first index node that answers says; if none does, every
    /// node (and the notes say why).
    pub fn route(
        &self,
        tables: &[&str],
        time: TimeRange,
        ranges: Option<&[(Addr16, Addr16)]>,
    ) -> (Route, Vec<String>) {
        let (route, notes) = self.route_unlogged(tables, time, ranges);
        if self.local.is_some() {
            crate::index::log_route(&route, tables, time.start_nanos, time.end_nanos, ranges);
        }
        (route, notes)
    }

    /// A route as [`Self::route`] gives it, not logged here when this process
    /// is the index node that gives it (the caller logs it).
    fn route_unlogged(
        &self,
        tables: &[&str],
        time: TimeRange,
        ranges: Option<&[(Addr16, Addr16)]>,
    ) -> (Route, Vec<String>) {
        if let Some(index) = &self.local {
            let route = index.route(tables, time.start_nanos, time.end_nanos, ranges);
            return (route, Vec::new());
        }
        let mut notes = Vec::new();
        let mut params = vec![("tables", tables.join(","))];
        params.extend(window_params(time));
        if let Some(ranges) = ranges {
            let text: Vec<String> = ranges
                .iter()
                .map(|(low, high)| format!("{}-{}", low, high))
                .collect();
            params.push(("addresses", text.join(",")));
        }
        for index in self.config.index_nodes() {
            match self
                .get(&index.url, "cluster/route", &params)
                .and_then(|mut response| {
                    response
                        .body_mut()
                        .with_config()
                        .limit(16 << 20)
                        .read_json::<Route>()
                        .map_err(|e| format!("its answer is not a route: {e}"))
                }) {
                Ok(route) => return (self.trusted(route, &mut notes), notes),
                Err(why) => notes.push(format!("index node {} did not answer: {why}", index.name)),
            }
        }
        notes.push("no index node answered: every node is asked".to_owned());
        let route = Route {
            index: String::new(),
            ask: self
                .config
                .nodes
                .iter()
                .map(|node| Choice {
                    node: node.name.clone(),
                    url: node.url.clone(),
                    reason: "no index node answered".to_owned(),
                    segments: 0,
                })
                .collect(),
            skip: Vec::new(),
        };
        (route, notes)
    }

    /// `route` as an index node answered it, made to hold only what this
    /// cluster file says: each node's URL is the file's (an index node that
    /// names another URL would have the cluster's token sent there), a node
    /// the file does not hold is dropped, and a node of the file the route
    /// neither asks nor spares is asked. Each change is noted.
    fn trusted(&self, route: Route, notes: &mut Vec<String>) -> Route {
        let nodes = &self.config.nodes;
        let mut keep = |choices: Vec<Choice>| -> Vec<Choice> {
            choices
                .into_iter()
                .filter_map(|mut choice| {
                    let Some(node) = nodes.iter().find(|n| n.name == choice.node) else {
                        notes.push(format!(
                            "index node {} named node {:?}, which the cluster file does not \
                             hold: left out",
                            route.index, choice.node
                        ));
                        return None;
                    };
                    choice.url.clone_from(&node.url);
                    Some(choice)
                })
                .collect()
        };
        let mut trusted = Route {
            index: route.index.clone(),
            ask: keep(route.ask),
            skip: keep(route.skip),
        };
        for node in nodes {
            let named = |choices: &[Choice]| choices.iter().any(|c| c.node == node.name);
            if !named(&trusted.ask) && !named(&trusted.skip) {
                notes.push(format!(
                    "index node {} did not name node {}: it is asked",
                    route.index, node.name
                ));
                trusted.ask.push(Choice {
                    node: node.name.clone(),
                    url: node.url.clone(),
                    reason: "not named by the index node".to_owned(),
                    segments: 0,
                });
            }
        }
        trusted
    }

    /// The packets matching `filter` in `time` from every node that may hold
    /// them, in time order (ties in the order of the nodes), each handed to
    /// `visit` with its node's name; `visit` returns false to stop. At most
    /// `limit` packets.
    pub fn packets(
        &self,
        filter: &str,
        ranges: Option<&[(Addr16, Addr16)]>,
        time: TimeRange,
        limit: Option<u64>,
        visit: &mut dyn FnMut(&str, &Packet) -> std::io::Result<bool>,
    ) -> std::io::Result<Outcome> {
        let (route, notes) = self.route_unlogged(&["packets"], time, ranges);
        let mut outcome = Outcome {
            route,
            notes,
            missing: Vec::new(),
        };
        let mut params = vec![("filter", filter.to_owned()), ("format", "rows".to_owned())];
        params.extend(window_params(time));
        if let Some(limit) = limit {
            params.push(("limit", limit.to_string()));
        }
        // The other nodes' requests are written first; this node's own share
        // is read while they work; then their answers, as the merge needs
        // them.
        let deadline = Instant::now() + self.config.deadline;
        let bearer = self.bearer();
        let mut sent = Vec::new();
        let mut streams = Vec::new();
        for choice in &outcome.route.ask {
            streams.push(Stream {
                node: choice.node.clone(),
                ready: VecDeque::new(),
                unread: None,
            });
            if self.local_node(&choice.node).is_some() {
                continue;
            }
            match crate::pipeline::send(
                &self.connections,
                &choice.url,
                "query",
                &params,
                &bearer,
                deadline,
            ) {
                Ok(request) => sent.push((streams.len() - 1, request)),
                Err(reason) => outcome.missing.push(Missing {
                    node: choice.node.clone(),
                    reason,
                }),
            }
        }
        // Logged once the nodes have their requests.
        if self.local.is_some() {
            let (start, end) = (time.start_nanos, time.end_nanos);
            crate::index::log_route(&outcome.route, &["packets"], start, end, ranges);
        }
        for stream in &mut streams {
            if let Some(node) = self.local_node(&stream.node) {
                match node.rows(filter, time, limit) {
                    Ok((bytes, incomplete)) => {
                        stream.unread = Some(Unread {
                            body: Box::new(std::io::Cursor::new(bytes)),
                            incomplete,
                            rows: 0,
                        });
                    }
                    Err(reason) => outcome.missing.push(Missing {
                        node: stream.node.clone(),
                        reason,
                    }),
                }
            }
        }
        for (at, request) in sent {
            match request.answer() {
                Ok((body, incomplete)) => {
                    streams[at].unread = Some(Unread {
                        body: Box::new(body),
                        incomplete,
                        rows: 0,
                    });
                }
                Err(reason) => outcome.missing.push(Missing {
                    node: streams[at].node.clone(),
                    reason,
                }),
            }
        }
        merge(&mut streams, limit, &mut outcome.missing, visit)?;
        outcome.missing.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(outcome)
    }
}

/// Resolves an address literal (`127.0.0.1:8080`, `[::1]:8080`) in place, and
/// a name as ureq does: ureq's own resolver, given a deadline, starts a thread
/// for every request to resolve it within the deadline, even a literal's.
#[derive(Debug, Default)]
struct LiteralResolver(ureq::unversioned::resolver::DefaultResolver);

impl ureq::unversioned::resolver::Resolver for LiteralResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        if let Some(authority) = uri.authority() {
            let host = authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let port = authority.port_u16().or(match uri.scheme_str() {
                Some("http") => Some(80),
                Some("https") => Some(443),
                _ => None,
            });
            if let (Ok(ip), Some(port)) = (host.parse::<std::net::IpAddr>(), port) {
                let mut addrs = self.empty();
                addrs.push(std::net::SocketAddr::new(ip, port));
                return Ok(addrs);
            }
        }
        self.0.resolve(uri, config, timeout)
    }
}

/// `since` and `until` of a window, as every node reads them.
pub fn window_params(time: TimeRange) -> Vec<(&'static str, String)> {
    let mut params = Vec::new();
    if time.start_nanos != i64::MIN {
        params.push(("since", format_nanos(time.start_nanos)));
    }
    if time.end_nanos != i64::MAX {
        params.push(("until", format_nanos(time.end_nanos.saturating_add(1))));
    }
    params
}

/// A response if it is a 200, else its error in words (the JSON error's
/// message where there is one).
fn answer_of(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    answer_with(result, "the cluster's token")
}

/// The response if it is 200, else why not, in words (`token`: what a 401
/// refused).
fn answer_with(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    token: &str,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    let mut response = match result {
        Ok(response) => response,
        Err(ureq::Error::Timeout(_)) => {
            return Err("it did not answer within the deadline".to_owned());
        }
        Err(ureq::Error::Io(e)) => return Err(format!("cannot reach it: {e}")),
        Err(e) => return Err(format!("cannot ask it: {e}")),
    };
    let status = response.status();
    if status == 200 {
        return Ok(response);
    }
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_string()
        .unwrap_or_default();
    Err(crate::pipeline::refusal(
        status.as_u16(),
        &status.to_string(),
        body,
        token,
    ))
}

/// One node's answer: the packets read and not merged yet, and the rest of
/// its answer unread (on its connection, or this node's own share in memory).
struct Stream {
    node: String,
    ready: VecDeque<Packet>,
    unread: Option<Unread>,
}

struct Unread {
    body: Box<dyn Read>,
    /// What the node said made its answer incomplete.
    incomplete: Option<String>,
    /// Its packets read so far.
    rows: u64,
}

impl Stream {
    /// Whether a packet is ready, reading the node's next chunk if none is;
    /// a node whose answer breaks off or is incomplete goes to `missing`.
    fn refill(&mut self, missing: &mut Vec<Missing>) -> bool {
        while self.ready.is_empty() {
            let Some(unread) = self.unread.as_mut() else {
                return false;
            };
            let reason = match hindsight_output::packets::read_rows_chunk(&mut unread.body) {
                Ok(Some(chunk)) => {
                    unread.rows += chunk.len() as u64;
                    self.ready.extend(chunk);
                    continue;
                }
                Ok(None) => unread
                    .incomplete
                    .take()
                    .map(|what| format!("its answer is incomplete: {what}")),
                Err(e) => Some(format!(
                    "its answer broke off after {} packets: {e}",
                    unread.rows
                )),
            };
            self.unread = None;
            missing.extend(reason.map(|reason| Missing {
                node: self.node.clone(),
                reason,
            }));
            return false;
        }
        true
    }
}

/// Merges the nodes' streams by time; ties go to the node named first.
fn merge(
    streams: &mut [Stream],
    limit: Option<u64>,
    missing: &mut Vec<Missing>,
    visit: &mut dyn FnMut(&str, &Packet) -> std::io::Result<bool>,
) -> std::io::Result<()> {
    // Each stream's head in the heap as (time, stream): min-heap by Reverse.
    let mut heap = BinaryHeap::new();
    for (at, stream) in streams.iter_mut().enumerate() {
        if stream.refill(missing)
            && let Some(head) = stream.ready.front()
        {
            heap.push(std::cmp::Reverse((head.record.ts_nanos, at)));
        }
    }
    let mut written = 0u64;
    while let Some(std::cmp::Reverse((_, at))) = heap.pop() {
        let stream = &mut streams[at];
        let Some(packet) = stream.ready.pop_front() else {
            continue;
        };
        if !visit(&stream.node, &packet)? {
            return Ok(());
        }
        written += 1;
        if limit.is_some_and(|limit| written >= limit) {
            return Ok(());
        }
        if stream.refill(missing)
            && let Some(head) = stream.ready.front()
        {
            heap.push(std::cmp::Reverse((head.record.ts_nanos, at)));
        }
    }
    Ok(())
}

/// A question for the cluster's packets.
#[derive(Clone, Debug)]
pub struct PacketQuestion {
    /// The filter, in either syntax.
    pub filter: String,
    /// The window.
    pub time: TimeRange,
    /// At most this many packets.
    pub limit: Option<u64>,
    /// More than this many is an error, not a short answer.
    pub max_rows: Option<u64>,
    /// Only their number.
    pub count: bool,
}

/// Writes the cluster's packets matching the question as `format` to `out`,
/// each tagged with its node (or, with `count`, their number).
pub fn write_packets(
    client: &ClusterClient,
    question: &PacketQuestion,
    format: hindsight_output::Format,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Outcome> {
    let parsed = hindsight_filter::Filter::parse(&question.filter)
        .map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))?;
    let ranges = parsed.address_ranges();
    let (filter, time, limit) = (question.filter.as_str(), question.time, question.limit);
    let mut written = 0u64;
    let outcome = if question.count {
        let outcome = client.packets(filter, ranges.as_deref(), time, limit, &mut |_, _| {
            written += 1;
            Ok(true)
        })?;
        writeln!(out, "{written}")?;
        outcome
    } else {
        let mut sink = hindsight_output::packets::packet_sink(format, Box::new(&mut *out))
            .map_err(anyhow::Error::msg)?;
        let max_rows = question.max_rows;
        let outcome =
            client.packets(filter, ranges.as_deref(), time, limit, &mut |node, row| {
                written += 1;
                if let Some(max) = max_rows.filter(|&max| written > max) {
                    return Err(std::io::Error::other(format!(
                        "the answer has more than {max} packets (max_rows): narrow the filter or \
                     the window, or give a limit"
                    )));
                }
                sink.set_node(node);
                sink.write(&row.record, &row.data).map(|()| true)
            })?;
        sink.finish()?;
        outcome
    };
    Ok(outcome)
}

/// What the command line says on stderr of a federated answer: the route,
/// the notes, each node missing, and that the answer is partial.
pub fn report_lines(outcome: &Outcome) -> Vec<String> {
    let mut lines = vec![route_line(outcome)];
    lines.extend(outcome.notes.iter().map(|note| format!("warning: {note}")));
    lines.extend(
        outcome
            .missing
            .iter()
            .map(|missing| format!("warning: {missing}")),
    );
    if outcome.is_partial() {
        lines.push(
            "warning: the answer is partial: nodes that may hold matches did not answer".to_owned(),
        );
    }
    lines
}

/// One line that says which nodes a question reached, which it spared, and
/// who chose (for stderr).
pub fn route_line(outcome: &Outcome) -> String {
    let names = |choices: &[Choice]| {
        if choices.is_empty() {
            "none".to_owned()
        } else {
            choices
                .iter()
                .map(|c| format!("{} ({})", c.node, c.reason))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let by = if outcome.route.index.is_empty() {
        "no index node".to_owned()
    } else {
        format!("index node {}", outcome.route.index)
    };
    format!(
        "hindsight: asked {}; spared {} ({by})",
        names(&outcome.route.ask),
        names(&outcome.route.skip)
    )
}

/// The status of the cluster from the first index node that answers.
pub fn status(client: &ClusterClient) -> anyhow::Result<serde_json::Value> {
    let mut errors = Vec::new();
    for index in client.config().index_nodes() {
        match client.get(&index.url, "cluster/status", &[]) {
            Ok(mut response) => {
                return response
                    .body_mut()
                    .with_config()
                    .limit(16 << 20)
                    .read_json()
                    .map_err(|e| anyhow::anyhow!("index node {}: bad status: {e}", index.name));
            }
            Err(why) => errors.push(format!("index node {}: {why}", index.name)),
        }
    }
    anyhow::bail!("no index node answered: {}", errors.join("; "))
}

/// The status as a table for people.
pub fn status_table(status: &serde_json::Value) -> String {
    let mut out = format!(
        "index node {} of index nodes {}\n{:<14} {:<8} {:>9} {:>12} {:>10}  {:<20} {:<20} {:>10} {:>8} {:>10}\n",
        status["node"].as_str().unwrap_or("?"),
        status["index_nodes"],
        "node",
        "health",
        "segments",
        "rows",
        "MB",
        "first",
        "last",
        "last sync",
        "missing",
        "capturing"
    );
    let time = |v: &serde_json::Value| {
        v.as_i64()
            .map(|ns| format_nanos(ns).chars().take(19).collect::<String>())
            .unwrap_or_else(|| "-".to_owned())
    };
    for node in status["nodes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<14} {:<8} {:>9} {:>12} {:>10.1}  {:<20} {:<20} {:>10} {:>8} {:>10}\n",
            node["node"].as_str().unwrap_or("?"),
            node["health"].as_str().unwrap_or("?"),
            node["segments"],
            node["rows"],
            node["bytes"].as_f64().unwrap_or(0.0) / 1e6,
            time(&node["first_ns"]),
            time(&node["last_ns"]),
            node["last_sync_secs_ago"]
                .as_f64()
                .map_or("never".to_owned(), |s| format!("{s:.1} s ago")),
            node["missing"],
            node["capturing"],
        ));
    }
    out
}

/// A question for the cluster's connections (`hindsight flows --cluster`).
#[derive(Clone, Debug)]
pub struct ConnQuestion {
    /// The address or network, if given.
    pub ip: Option<String>,
    /// The filter, if given.
    pub filter: Option<String>,
    /// The window.
    pub time: TimeRange,
    /// Connections in one page.
    pub limit: usize,
    /// Where the page starts: the cursor the page before ended with.
    pub after: Option<String>,
}

/// A page of the cluster's connections.
#[derive(Debug, Default)]
pub struct ConnPage {
    /// The connections in the index's order (address, start, peer, ports),
    /// each with its node; ties in the order of the nodes.
    pub entries: Vec<(String, hindsight_index::ConnEntry)>,
    /// The cursor of the next page, if there is one: each node's own cursor
    /// (`a:HEX,b:,c:-`: after that key, from the start, done).
    pub next: Option<String>,
    /// Each answering node's Community ID seed (its archive's).
    pub community_seeds: std::collections::BTreeMap<String, u16>,
    /// How the question went.
    pub outcome: Outcome,
}

impl ConnPage {
    /// The Community ID seed of `node`'s connections.
    pub fn community_seed(&self, node: &str) -> u16 {
        self.community_seeds
            .get(node)
            .copied()
            .unwrap_or(hindsight_index::connections::DEFAULT_COMMUNITY_SEED)
    }
}

/// A node's page: its connections with their keys, its own cursor, and its
/// Community ID seed.
pub type NodePage = (
    Vec<(Vec<u8>, hindsight_index::ConnEntry)>,
    Option<String>,
    u16,
);

/// Each node's place in a paged answer: `None` from the start, `Some(None)`
/// done, `Some(Some(key))` after that key.
type Cursors = std::collections::BTreeMap<String, Option<String>>;

fn parse_cursors(text: &str) -> anyhow::Result<Cursors> {
    let mut cursors = Cursors::new();
    for part in text.split(',') {
        let (node, place) = part
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("cursor {text:?} is not a cluster's (node:KEY,...)"))?;
        let place = match place {
            "-" => None,
            hex if hex.bytes().all(|b| b.is_ascii_hexdigit())
                && hex.len() <= 2 * (2 + hindsight_model::app::MAX_NAME_KEY + 45) =>
            {
                Some(hex.to_owned())
            }
            _ => anyhow::bail!("cursor {text:?} is not a cluster's (node:KEY,...)"),
        };
        cursors.insert(node.to_owned(), place);
    }
    Ok(cursors)
}

impl ClusterClient {
    /// One page of the connections of every node that may hold matches,
    /// merged in the index's order.
    pub fn connections(&self, question: &ConnQuestion) -> anyhow::Result<ConnPage> {
        let filter = question
            .filter
            .as_deref()
            .map(hindsight_filter::Filter::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("invalid filter:\n{e}"))?;
        let ranges = match &question.ip {
            Some(ip) => Some(vec![
                hindsight_model::network_range(ip).map_err(anyhow::Error::msg)?,
            ]),
            None => filter.as_ref().and_then(|f| f.address_ranges()),
        };
        let (route, notes) = self.route(&["flows"], question.time, ranges.as_deref());
        let resumed = question.after.as_deref().map(parse_cursors).transpose()?;
        // (node, where it starts): without a cursor every node asked; with
        // one, the nodes it names that are not done.
        let asked: Vec<(&Choice, Option<String>)> = route
            .ask
            .iter()
            .filter_map(|choice| match &resumed {
                None => Some((choice, None)),
                Some(cursors) => match cursors.get(&choice.node) {
                    Some(Some(key)) => Some((choice, (!key.is_empty()).then(|| key.clone()))),
                    _ => None,
                },
            })
            .collect();
        let mut params = vec![
            ("limit", question.limit.to_string()),
            ("stored", "true".to_owned()),
        ];
        params.extend(question.ip.clone().map(|ip| ("ip", ip)));
        params.extend(question.filter.clone().map(|f| ("filter", f)));
        params.extend(window_params(question.time));
        // Every node's request written first, then their answers read.
        let deadline = Instant::now() + self.config.deadline;
        let bearer = self.bearer();
        let sent: Vec<_> = asked
            .iter()
            .map(|(choice, after)| {
                let mut params = params.clone();
                params.extend(after.clone().map(|a| ("after", a)));
                crate::pipeline::send(
                    &self.connections,
                    &choice.url,
                    "flows",
                    &params,
                    &bearer,
                    deadline,
                )
            })
            .collect();
        let answers: Vec<Result<NodePage, String>> = sent
            .into_iter()
            .map(|request| node_connections(request?))
            .collect();
        let mut outcome = Outcome {
            route: route.clone(),
            notes,
            missing: Vec::new(),
        };
        // Every entry with its node's place in the ask list, by key.
        let mut all = Vec::new();
        let mut nexts = Vec::new();
        let mut community_seeds = std::collections::BTreeMap::new();
        for (at, ((choice, after), answer)) in asked.iter().zip(answers).enumerate() {
            match answer {
                Ok((entries, next, seed)) => {
                    community_seeds.insert(choice.node.clone(), seed);
                    nexts.push((choice.node.clone(), after.clone(), entries.len(), next));
                    all.extend(entries.into_iter().map(|(key, entry)| (key, at, entry)));
                }
                Err(reason) => {
                    outcome.missing.push(Missing {
                        node: choice.node.clone(),
                        reason,
                    });
                    // Asked again from the same place on the next page.
                    nexts.push((choice.node.clone(), after.clone(), usize::MAX, None));
                }
            }
        }
        all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        all.truncate(question.limit);
        let mut cursors = Cursors::new();
        let mut more = false;
        for (at, (node, after, returned, next)) in nexts.into_iter().enumerate() {
            let taken: Vec<&Vec<u8>> = all.iter().filter(|e| e.1 == at).map(|e| &e.0).collect();
            let place = if returned == usize::MAX {
                Some(after.unwrap_or_default())
            } else if taken.len() == returned {
                next
            } else {
                taken
                    .last()
                    .map(|key| key.iter().map(|b| format!("{b:02x}")).collect())
                    .or(Some(after.unwrap_or_default()))
            };
            more |= place.is_some();
            cursors.insert(node, place);
        }
        let next = more.then(|| {
            cursors
                .iter()
                .map(|(node, place)| format!("{node}:{}", place.as_deref().unwrap_or("-")))
                .collect::<Vec<_>>()
                .join(",")
        });
        Ok(ConnPage {
            entries: all
                .into_iter()
                .map(|(_, at, entry)| (asked[at].0.node.clone(), entry))
                .collect(),
            next,
            community_seeds,
            outcome,
        })
    }
}

/// One node's page of connections, with their stored keys.
fn node_connections(request: crate::pipeline::Sent) -> Result<NodePage, String> {
    let (body, _) = request.answer()?;
    let value: serde_json::Value = serde_json::from_reader(body.take(256 << 20))
        .map_err(|e| format!("its answer is not connections: {e}"))?;
    parse_connections(&value)
}

/// A page of connections as `GET /api/v1/flows?stored=true` answers it: each
/// connection with its place in the archive's order (its key, or for a lookup
/// by name the name key), the next page's cursor, and the Community ID seed.
pub fn parse_connections(value: &serde_json::Value) -> Result<NodePage, String> {
    let bad = || "its answer holds a connection that is not one".to_owned();
    let unhex = |text: &str| -> Option<Vec<u8>> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
            .collect()
    };
    let mut entries = Vec::new();
    for connection in value["connections"].as_array().into_iter().flatten() {
        let (key, stored_value) = connection["stored"]
            .as_str()
            .and_then(|s| s.split_once('.'))
            .ok_or_else(bad)?;
        let (key, stored_value) = (
            unhex(key).ok_or_else(bad)?,
            unhex(stored_value).ok_or_else(bad)?,
        );
        let entry = <hindsight_index::ConnEntry as hindsight_index::Stored>::from_stored(
            &key,
            &stored_value,
        )
        .ok_or_else(bad)?;
        // Its place in the node's order: its key, or for a lookup by name
        // the name key the node gives.
        let place = match connection["at"].as_str() {
            Some(at) => unhex(at).ok_or_else(bad)?,
            None => key,
        };
        entries.push((place, entry));
    }
    let seed = match &value["community_seed"] {
        serde_json::Value::Null => hindsight_index::connections::DEFAULT_COMMUNITY_SEED,
        seed => seed
            .as_u64()
            .and_then(|seed| u16::try_from(seed).ok())
            .ok_or_else(|| format!("its answer's community_seed is not a seed: {seed}"))?,
    };
    Ok((entries, value["next"].as_str().map(str::to_owned), seed))
}
