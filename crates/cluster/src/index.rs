//! The index node's side: the summaries every node sent, kept in memory by node
//! and segment, and the answer to "which nodes may hold matches?".
//!
//! Nodes keep the index current by anti-entropy rather than by a log of
//! changes: every few seconds a node sends the ids its catalog holds (as
//! ranges, a few bytes), the index drops the summaries of ids no longer held
//! (expired, repaired away) and answers the ids it lacks, and the node sends
//! those summaries. A node that was down, or an index node that restarted
//! empty, is whole again after one round, with nothing to replay.
//!
//! Only a node may speak for itself (its own token, checked by the route),
//! and what it says is checked against itself: a sync carries the digest of
//! the node's catalog, and summaries that do not add up to it are dropped
//! and asked for again (see [`crate::summary::Digest`]). Until the index's
//! summaries of a node are whole and match, every question asks that node.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hindsight_model::Addr16;
use serde::{Deserialize, Serialize};

use crate::summary::{Digest, SegmentSummary, in_ranges};

/// What a node tells its index nodes every `sync_secs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SyncRequest {
    /// The node.
    pub node: String,
    /// The ids its catalog holds, as inclusive ranges in order.
    pub ids: Vec<(u64, u64)>,
    /// Whether it captures: then its unsealed packets, newer than its last
    /// sealed segment, are not in any summary yet.
    pub capturing: bool,
    /// Its clock, ns since the epoch (for the summary lag).
    pub now_ns: i64,
    /// The digest of its catalog's entries, hex (see
    /// [`crate::summary::Digest`]).
    pub digest: String,
}

/// The index node's answer: the ids whose summaries it lacks.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SyncAnswer {
    /// Ids to send summaries of, as inclusive ranges.
    pub missing: Vec<(u64, u64)>,
}

/// Summaries a node sends.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SummaryUpload {
    /// The node.
    pub node: String,
    /// The summaries.
    pub summaries: Vec<SegmentSummary>,
}

/// Why a node is asked, or not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// The node.
    pub node: String,
    /// Where it answers.
    pub url: String,
    /// Why it is asked or left out, in words.
    pub reason: String,
    /// Segments whose summaries may hold matches.
    pub segments: u64,
}

/// The answer to "which nodes may hold matches?".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The index node that answered.
    pub index: String,
    /// The nodes to ask.
    pub ask: Vec<Choice>,
    /// The nodes left out, and why.
    pub skip: Vec<Choice>,
}

/// What the index knows of one node.
#[derive(Debug, Default)]
struct NodeState {
    summaries: BTreeMap<u64, SegmentSummary>,
    /// The summaries by their last timestamp (and id): a window's are those
    /// from its start on whose first timestamp is not past its end.
    by_end: std::collections::BTreeSet<(i64, u64)>,
    /// The ids of its last sync, and the digest of its catalog then.
    ids: Vec<(u64, u64)>,
    digest: Digest,
    /// The digest of the summaries held (kept as they come and go).
    held: Digest,
    /// When it last synced (the index node's clock) and its own clock then.
    last_sync: Option<SystemTime>,
    capturing: bool,
    /// Summary bytes received, and syncs.
    bytes_received: u64,
    syncs: u64,
    /// Rejected summaries (invalid), counted.
    rejected: u64,
    /// Times its summaries did not match its catalog and were dropped.
    mismatches: u64,
}

impl NodeState {
    /// Whether the index holds a summary of every id of the node's last sync.
    fn is_complete(&self) -> bool {
        id_count(&self.ids) == self.summaries.len() as u64
    }

    /// Whether its summaries are whole and describe its catalog.
    fn is_current(&self) -> bool {
        self.is_complete() && self.held == self.digest
    }

    fn insert(&mut self, summary: SegmentSummary) {
        self.remove(summary.id);
        self.held.toggle(summary.digest());
        self.by_end.insert((summary.max_ts, summary.id));
        self.summaries.insert(summary.id, summary);
    }

    fn remove(&mut self, id: u64) {
        if let Some(old) = self.summaries.remove(&id) {
            self.held.toggle(old.digest());
            self.by_end.remove(&(old.max_ts, old.id));
        }
    }
}

/// The nodes' status as the index node sees it (`hindsight cluster status`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node.
    pub node: String,
    /// Where it answers.
    pub url: String,
    /// Segments summarised.
    pub segments: u64,
    /// Rows of those segments (packets and connection records).
    pub rows: u64,
    /// Bytes of those segments on the node's disk.
    pub bytes: u64,
    /// The time they span, ns since the epoch.
    pub first_ns: Option<i64>,
    /// See `first_ns`.
    pub last_ns: Option<i64>,
    /// Seconds since it last synced, if ever.
    pub last_sync_secs_ago: Option<f64>,
    /// Summaries of its catalog the index still lacks.
    pub missing: u64,
    /// Whether it captures.
    pub capturing: bool,
    /// Summary bytes received since the index node started.
    pub summary_bytes: u64,
    /// Times its summaries did not match its catalog and were dropped.
    #[serde(default)]
    pub mismatches: u64,
    /// `ok`, `behind` (summaries missing, or not matching its catalog),
    /// `stale` (no sync within three periods) or `never` (no sync since the
    /// index node started).
    pub health: String,
}

/// The summaries of every node, held by an index node.
#[derive(Debug)]
pub struct ClusterIndex {
    name: String,
    nodes: Vec<crate::config::Node>,
    sync: Duration,
    state: Mutex<BTreeMap<String, NodeState>>,
}

/// Errors of the index's routes, in words for the requester.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A node not in the cluster's configuration.
    #[error("no node of this cluster is named {0:?}")]
    UnknownNode(String),
    /// A sync that names ids out of order or too many.
    #[error("{0}")]
    BadSync(String),
    /// A node speaking for another.
    #[error("the token is node {token}'s, and a node speaks only for itself (this names {named})")]
    NotItself {
        /// The node whose token it is.
        token: String,
        /// The node named.
        named: String,
    },
}

/// Refuses what the node `from` says for the node `named`.
fn itself(from: &str, named: &str) -> Result<(), IndexError> {
    if from == named {
        Ok(())
    } else {
        Err(IndexError::NotItself {
            token: from.to_owned(),
            named: named.to_owned(),
        })
    }
}

/// Most segment ids one node's sync may name.
const MAX_SYNC_IDS: u64 = 10_000_000;

/// The number of ids in `ranges`.
fn id_count(ranges: &[(u64, u64)]) -> u64 {
    ranges
        .iter()
        .map(|&(l, h)| (h - l).saturating_add(1))
        .fold(0, u64::saturating_add)
}

impl ClusterIndex {
    /// An empty index of the nodes of `config`, kept by the node `name`.
    pub fn new(config: &crate::ClusterConfig, name: &str) -> Self {
        Self {
            name: name.to_owned(),
            nodes: config.nodes.clone(),
            sync: config.sync,
            state: Mutex::new(BTreeMap::new()),
        }
    }

    fn url(&self, node: &str) -> Result<String, IndexError> {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.url.clone())
            .ok_or_else(|| IndexError::UnknownNode(node.to_owned()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeState>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A node's sync, sent by the node `from` (whose token the request
    /// carried): drops the summaries of ids it no longer holds and answers the
    /// ids whose summaries are missing.
    pub fn sync(&self, from: &str, request: &SyncRequest) -> Result<SyncAnswer, IndexError> {
        self.url(&request.node)?;
        itself(from, &request.node)?;
        let mut ids = request.ids.clone();
        ids.sort_unstable();
        if ids.iter().any(|&(low, high)| low > high)
            || ids.windows(2).any(|pair| pair[0].1 >= pair[1].0)
        {
            return Err(IndexError::BadSync(
                "a sync's id ranges must be in order, each low <= high, without overlap".to_owned(),
            ));
        }
        if id_count(&ids) > MAX_SYNC_IDS {
            return Err(IndexError::BadSync(format!(
                "a sync may name at most {MAX_SYNC_IDS} segments"
            )));
        }
        let digest = Digest::from_hex(&request.digest).ok_or_else(|| {
            IndexError::BadSync("a sync's digest must be 64 hex digits".to_owned())
        })?;
        let mut state = self.lock();
        let node = state.entry(request.node.clone()).or_default();
        let gone: Vec<u64> = node
            .summaries
            .keys()
            .copied()
            .filter(|id| !in_ranges(&ids, *id))
            .collect();
        for id in gone {
            node.remove(id);
        }
        let mut missing: Vec<u64> = Vec::new();
        for &(low, high) in &ids {
            // Ranges are few; ids in them are checked against what is held.
            missing.extend((low..=high).filter(|id| !node.summaries.contains_key(id)));
        }
        let stale = missing.is_empty() && node.held != digest;
        if stale {
            // Every id is summarised, yet not as the node's catalog is now:
            // which summaries are stale cannot be told, so none is kept.
            node.mismatches += 1;
            log::warn!(
                "cluster: node {}'s summaries do not match its catalog (replaced archive, replayed upload?): dropped, asked again",
                request.node
            );
            node.summaries.clear();
            node.by_end.clear();
            node.held = Digest::default();
        }
        let missing = if stale {
            ids.clone()
        } else {
            crate::summary::id_ranges(missing)
        };
        node.ids = ids;
        node.digest = digest;
        node.capturing = request.capturing;
        node.last_sync = Some(SystemTime::now());
        node.syncs += 1;
        Ok(SyncAnswer { missing })
    }

    /// Summaries the node `from` sent (`bytes`: the size of the upload).
    pub fn add(&self, from: &str, upload: SummaryUpload, bytes: u64) -> Result<(), IndexError> {
        self.url(&upload.node)?;
        itself(from, &upload.node)?;
        let mut state = self.lock();
        let node = state.entry(upload.node).or_default();
        node.bytes_received += bytes;
        for summary in upload.summaries {
            if !summary.addresses.is_valid() || summary.min_ts > summary.max_ts {
                node.rejected += 1;
                continue;
            }
            // Only ids the node said it holds (an upload racing a sync that
            // dropped them is not kept).
            if in_ranges(&node.ids, summary.id) {
                node.insert(summary);
            }
        }
        Ok(())
    }

    /// The nodes that may hold rows of `tables` in `[start, end]` with an
    /// address in `ranges` (`None`: any): a node is asked if a summary may
    /// hold matches, if its summaries are not all here or not current (then
    /// nothing can be ruled out), or if it captures and the window reaches
    /// past its last sealed segment.
    pub fn route(
        &self,
        tables: &[&str],
        start: i64,
        end: i64,
        ranges: Option<&[(Addr16, Addr16)]>,
    ) -> Route {
        let state = self.lock();
        let stale_after = self.stale_after();
        let mut route = Route {
            index: self.name.clone(),
            ..Route::default()
        };
        for node in &self.nodes {
            let choice = |reason: String, segments: u64| Choice {
                node: node.name.clone(),
                url: node.url.clone(),
                reason,
                segments,
            };
            let Some(known) = state.get(&node.name) else {
                route.ask.push(choice(
                    "has not synced with this index node yet".to_owned(),
                    0,
                ));
                continue;
            };
            let age = known
                .last_sync
                .and_then(|at| at.elapsed().ok())
                .unwrap_or(Duration::MAX);
            if age > stale_after {
                route.ask.push(choice(
                    format!(
                        "its summaries are not current (last sync {} s ago)",
                        age.as_secs()
                    ),
                    0,
                ));
                continue;
            }
            if !known.is_complete() {
                route
                    .ask
                    .push(choice("its summaries are still arriving".to_owned(), 0));
                continue;
            }
            if !known.is_current() {
                route.ask.push(choice(
                    "its summaries do not match its catalog".to_owned(),
                    0,
                ));
                continue;
            }
            // Only the summaries that end at or after the window's start.
            let matching = known
                .by_end
                .range((start, 0)..)
                .filter_map(|(_, id)| known.summaries.get(id))
                .filter(|s| tables.contains(&s.table.as_str()) && s.may_hold(start, end, ranges))
                .count() as u64;
            let newest = known.by_end.last().map_or(i64::MIN, |&(end, _)| end);
            if matching > 0 {
                route.ask.push(choice(
                    format!("{matching} segment(s) may hold matches"),
                    matching,
                ));
            } else if known.capturing && end > newest {
                route.ask.push(choice(
                    "it captures, and the window reaches past its sealed segments".to_owned(),
                    0,
                ));
            } else {
                route.skip.push(choice(
                    "no segment's summary holds the window and addresses".to_owned(),
                    0,
                ));
            }
        }
        route
    }

    /// After how long without a sync a node's summaries are not trusted.
    fn stale_after(&self) -> Duration {
        (self.sync * 3).max(Duration::from_secs(10))
    }

    /// Every node's status.
    pub fn status(&self) -> Vec<NodeStatus> {
        let state = self.lock();
        let stale_after = self.stale_after();
        self.nodes
            .iter()
            .map(|node| {
                let known = state.get(&node.name);
                let summaries = known.map(|k| &k.summaries);
                let age = known
                    .and_then(|k| k.last_sync)
                    .and_then(|at| at.elapsed().ok());
                let held = known.map_or(0, |k| id_count(&k.ids));
                let count = summaries.map_or(0, |s| s.len() as u64);
                let health = match (known, age) {
                    (None, _) | (_, None) => "never",
                    (_, Some(age)) if age > stale_after => "stale",
                    (Some(k), _) if !k.is_current() => "behind",
                    _ => "ok",
                };
                NodeStatus {
                    node: node.name.clone(),
                    url: node.url.clone(),
                    segments: count,
                    rows: summaries.map_or(0, |s| s.values().map(|s| s.rows).sum()),
                    bytes: summaries.map_or(0, |s| s.values().map(|s| s.bytes).sum()),
                    first_ns: summaries.and_then(|s| s.values().map(|s| s.min_ts).min()),
                    last_ns: summaries.and_then(|s| s.values().map(|s| s.max_ts).max()),
                    last_sync_secs_ago: age.map(|a| a.as_secs_f64()),
                    missing: held.saturating_sub(count),
                    capturing: known.is_some_and(|k| k.capturing),
                    summary_bytes: known.map_or(0, |k| k.bytes_received),
                    mismatches: known.map_or(0, |k| k.mismatches),
                    health: health.to_owned(),
                }
            })
            .collect()
    }
}

/// Now, ns since the epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The index node's line for each route it answers: which nodes a question
/// reaches, and which it spares (on stderr, the server's log).
pub fn log_route(
    route: &Route,
    tables: &[&str],
    start: i64,
    end: i64,
    ranges: Option<&[(Addr16, Addr16)]>,
) {
    let addresses = match ranges {
        None => "any address".to_owned(),
        Some(ranges) => ranges
            .iter()
            .map(|(l, h)| {
                if l == h {
                    l.to_string()
                } else {
                    format!("{l}-{h}")
                }
            })
            .collect::<Vec<_>>()
            .join(","),
    };
    let names = |choices: &[Choice]| {
        if choices.is_empty() {
            "-".to_owned()
        } else {
            choices
                .iter()
                .map(|c| c.node.as_str())
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    // One write: stderr is unbuffered, and this is on every question's path.
    let line = format!(
        "cluster: route {} [{}, {}] {addresses}: ask {} skip {}\n",
        tables.join(","),
        hindsight_output::time::format_nanos(start),
        hindsight_output::time::format_nanos(end),
        names(&route.ask),
        names(&route.skip),
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}
