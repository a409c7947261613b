//! The node's side of the index: every `sync_secs`, tell each index node the
//! ids of the segments this node's catalog holds, and send the summaries it
//! lacks. Summaries are built once per segment and kept (a segment is
//! immutable), so a sync that finds nothing new costs a few hundred bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hindsight_store::CatalogEntry;

use crate::client::ClusterClient;
use crate::index::{SummaryUpload, SyncAnswer, SyncRequest, now_ns};
use crate::summary::{Digest, SegmentSummary, id_ranges, in_ranges};

/// Builds (or finds built) the summaries of the ids in some ranges.
type Summarise<'a> = dyn FnMut(&[(u64, u64)]) -> Vec<Arc<SegmentSummary>> + 'a;

/// Most summary bytes in one upload.
const UPLOAD_BYTES: usize = 4 << 20;

/// The most bytes of one summary upload's body an index node takes: a batch
/// of [`UPLOAD_BYTES`] of signatures, or the largest signature alone
/// (`signature::MAX_BITS`, 16 MiB), as base64 in JSON, with room to spare.
pub const MAX_UPLOAD_BODY_BYTES: usize = 32 << 20;

/// What the node's archive holds now: its root and its catalog's entries.
pub type Catalog = (PathBuf, Vec<CatalogEntry>);

/// Counters of a node's syncs, for its metrics.
#[derive(Debug, Default)]
pub struct SyncCounters {
    /// Bytes sent to index nodes (sync requests and summaries).
    pub bytes_sent: AtomicU64,
    /// Summaries sent.
    pub summaries_sent: AtomicU64,
    /// Syncs that failed (an index node down or refusing).
    pub failures: AtomicU64,
    /// Rounds completed.
    pub rounds: AtomicU64,
}

/// Runs the node's syncs until `stop` is set: every `sync` period, with each
/// index node of `client`'s cluster but this node itself (whose own index is
/// `local`, fed directly).
pub fn run(
    client: &ClusterClient,
    node: &str,
    capturing: bool,
    catalog: &dyn Fn() -> Option<Catalog>,
    local: Option<&crate::ClusterIndex>,
    counters: &SyncCounters,
    stop: &AtomicBool,
) {
    let mut built: BTreeMap<u64, Arc<SegmentSummary>> = BTreeMap::new();
    let period = client.config().sync;
    while !stop.load(Ordering::Relaxed) {
        if let Some((root, entries)) = catalog() {
            let ids = id_ranges(entries.iter().map(|e| e.id));
            built.retain(|id, _| in_ranges(&ids, *id));
            let request = SyncRequest {
                node: node.to_owned(),
                ids,
                capturing,
                now_ns: now_ns(),
                digest: Digest::of_catalog(&entries).to_hex(),
            };
            let mut summarise = |wanted: &[(u64, u64)]| -> Vec<Arc<SegmentSummary>> {
                entries
                    .iter()
                    .filter(|e| in_ranges(wanted, e.id))
                    .filter_map(|e| {
                        if let Some(summary) = built.get(&e.id) {
                            return Some(Arc::clone(summary));
                        }
                        match SegmentSummary::build(&root, e) {
                            Ok(summary) => {
                                let summary = Arc::new(summary);
                                built.insert(e.id, Arc::clone(&summary));
                                Some(summary)
                            }
                            Err(error) => {
                                log::warn!(
                                    "cluster: cannot summarise segment {} ({}): {error}",
                                    e.id,
                                    e.file
                                );
                                None
                            }
                        }
                    })
                    .collect()
            };
            if let Some(index) = local
                && let Ok(answer) = index.sync(node, &request)
            {
                let summaries = summarise(&answer.missing);
                let _ = index.add(
                    node,
                    SummaryUpload {
                        node: node.to_owned(),
                        summaries: summaries.iter().map(|s| (**s).clone()).collect(),
                    },
                    0,
                );
            }
            for index_node in client.config().index_nodes() {
                if Some(index_node.name.as_str()) == local.map(|_| node) {
                    continue;
                }
                if let Err(why) =
                    sync_with(client, &index_node.url, &request, &mut summarise, counters)
                {
                    counters.failures.fetch_add(1, Ordering::Relaxed);
                    log::warn!("cluster: sync with index node {}: {why}", index_node.name);
                }
            }
            counters.rounds.fetch_add(1, Ordering::Relaxed);
        }
        // Sleep in short steps, so that a stop is quick.
        let mut slept = Duration::ZERO;
        while slept < period && !stop.load(Ordering::Relaxed) {
            let step = Duration::from_millis(100).min(period - slept);
            std::thread::sleep(step);
            slept += step;
        }
    }
}

/// One sync with one index node: the ids, then the summaries it lacks.
fn sync_with(
    client: &ClusterClient,
    url: &str,
    request: &SyncRequest,
    summarise: &mut Summarise<'_>,
    counters: &SyncCounters,
) -> Result<(), String> {
    let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    counters
        .bytes_sent
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    let answer: SyncAnswer = client
        .post_as_node(url, "cluster/sync", &body)?
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_json()
        .map_err(|e| format!("its answer is not a sync answer: {e}"))?;
    if answer.missing.is_empty() {
        return Ok(());
    }
    let summaries = summarise(&answer.missing);
    // In uploads of at most UPLOAD_BYTES of signatures.
    let mut batch: Vec<SegmentSummary> = Vec::new();
    let mut bytes = 0;
    let send = |batch: &mut Vec<SegmentSummary>| -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let upload = SummaryUpload {
            node: request.node.clone(),
            summaries: std::mem::take(batch),
        };
        let body = serde_json::to_vec(&upload).map_err(|e| e.to_string())?;
        counters
            .bytes_sent
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        counters
            .summaries_sent
            .fetch_add(upload.summaries.len() as u64, Ordering::Relaxed);
        client.post_as_node(url, "cluster/summaries", &body)?;
        Ok(())
    };
    for summary in summaries {
        // A batch is sent before it would pass UPLOAD_BYTES, so an upload
        // holds at most UPLOAD_BYTES or one summary.
        if bytes + summary.addresses.bytes() > UPLOAD_BYTES {
            send(&mut batch)?;
            bytes = 0;
        }
        bytes += summary.addresses.bytes();
        batch.push((*summary).clone());
    }
    send(&mut batch)
}
