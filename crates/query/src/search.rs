//! Packet search over the archive: plans which segments and row groups a filter
//! query must read, then reads them and evaluates the filter on every row.
//!
//! Pruning goes from coarse to fine, as in Hyperion's multi-level index:
//! 1. the catalog's per-segment time ranges against the query window;
//! 2. the address postings (RocksDB) against the filter's address ranges, for the
//!    segments the index covers (unindexed segments are always read); where every
//!    posting of those ranges in a segment is a covering posting (an address with a
//!    few rows there, kept whole in the index), the segment is not opened at all:
//!    its candidate rows come from the index;
//! 3. per row group, timestamp statistics, address min/max and Bloom filters;
//! 4. per row, the time window and the filter itself.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};

use hindsight_index::connections::DEFAULT_COMMUNITY_SEED;
use hindsight_index::{AddressIndex, AddressLookup, ConnectionIndex};
use hindsight_model::{
    Addr16, CoveredRow, DataForm, GranuleSet, PacketRecord, SegmentId, decode_covered_rows, snap,
};
use hindsight_store::arrow::array::RecordBatch;
use hindsight_store::schema::{PacketBatchView, col};
use hindsight_store::segment::reader::ConnTuple;
use hindsight_store::{Archive, CatalogEntry, FooterCache, SegmentReader, Table, TimeRange};

use crate::error::QueryError;
use crate::filter::names::TextTest;
use crate::filter::{Filter, Verdict};

/// A packet query: a filter, a time window and an optional row limit.
#[derive(Debug)]
pub struct SearchRequest {
    /// Rows must match this filter.
    pub filter: Filter,
    /// Rows must lie in this window.
    pub time: TimeRange,
    /// Stop after this many matching rows.
    pub limit: Option<u64>,
    /// Whether matching rows need their stored packet bytes (pcap export).
    pub with_data: bool,
    /// Whether the visitor reads only what a capture file needs (time, lengths,
    /// link type, interface, bytes): then only those columns and the ones the
    /// filter reads are decoded, and the other header fields of the records it
    /// gets are absent.
    pub capture_only: bool,
}

/// How much each pruning level kept, for `--explain` and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Segments in the catalog.
    pub segments_total: usize,
    /// Segments whose time range overlaps the window.
    pub segments_in_time: usize,
    /// Segments left after the address index.
    pub segments_planned: usize,
    /// Planned segments answered from covering postings, without opening them.
    pub segments_covered: usize,
    /// Row groups in the planned segments.
    pub row_groups_total: usize,
    /// Row groups left after statistics and Bloom filters.
    pub row_groups_read: usize,
    /// Rows selected in the row groups read (their address columns decoded when the
    /// filter names addresses, every column otherwise), plus the rows of covering
    /// postings.
    pub rows_read: u64,
    /// Rows that matched (and were handed to the visitor).
    pub rows_matched: u64,
    /// Rows left out because the filter reads bytes the source captured but
    /// the archive did not keep (its snap length): whether they match is not known.
    pub rows_unknown: u64,
    /// Segments that could not be read (missing, cut short, a page whose bytes
    /// fail their checksum): skipped, so the answer is incomplete. Rows of a
    /// damaged segment read before its damage was met are in the answer (they
    /// passed their pages' checksums).
    pub skipped: Vec<SkippedSegment>,
}

/// A segment a query skipped because it could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedSegment {
    /// The segment.
    pub id: SegmentId,
    /// Its file, relative to the archive.
    pub file: String,
    /// Why: the reader's error, with the row group and column of a damaged page.
    pub reason: String,
}

impl std::fmt::Display for SkippedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "segment {} ({}) skipped: {}",
            self.id.0, self.file, self.reason
        )
    }
}

/// The segments a query must read, in time order, and why.
#[derive(Debug)]
pub struct SearchPlan {
    /// Segments to read, by ascending start time.
    pub segments: Vec<CatalogEntry>,
    /// The address ranges every match lies in, if the filter implies any.
    pub address_ranges: Option<Vec<(Addr16, Addr16)>>,
    /// For indexed segments under an address constraint: the granules (blocks of
    /// `GRANULE_ROWS` rows) holding those addresses; only they are read.
    pub granules: BTreeMap<SegmentId, GranuleSet>,
    /// For segments where every posting of the address ranges is covering: those
    /// postings (encoded rows, one per address), read instead of the segment.
    pub covered: BTreeMap<SegmentId, Vec<Vec<u8>>>,
    /// Planned segments whose local file is gone or damaged, read from their
    /// copy in the object store instead.
    pub remote: BTreeSet<SegmentId>,
    /// A cheaper test every match passes, tried first: the addresses of the
    /// connections of a filter's Community IDs.
    pub prefilter: Option<Filter>,
    /// Those connections: segment files return only their packets (decoding
    /// the other columns only where they are).
    pub connections: Vec<ConnTuple>,
    /// Counts of the planning levels (the reading levels are filled by execution).
    pub stats: SearchStats,
}

/// The copies of sealed segments in object storage (`[archive]
/// object_store`), read where a segment's local file is gone (the local copy
/// may expire first) or damaged.
pub trait RemoteSegments: Send + Sync + std::fmt::Debug {
    /// Whether `entry` has a copy whole in the store (as the archive's log of
    /// copies says).
    fn has_copy(&self, entry: &CatalogEntry) -> bool;
    /// `entry`'s copy as an open file, its bytes checked against the
    /// catalog's size and CRC-32 before they are read; or why not.
    fn fetch(&self, entry: &CatalogEntry) -> Result<std::fs::File, String>;
}

/// An archive opened for packet queries.
#[derive(Debug)]
pub struct PacketSearch {
    archive: Arc<Archive>,
    index: Option<Arc<AddressIndex>>,
    remote: Option<Arc<dyn RemoteSegments>>,
    /// The connection index, opened when a filter names a Community ID.
    connections: std::sync::OnceLock<Option<Arc<ConnectionIndex>>>,
    /// Where the parsed footers of the segments it reads are kept, if
    /// anywhere (`FooterCache`, a long-lived reader's).
    footers: Option<Arc<FooterCache>>,
}

/// What a capture file needs of a record besides its bytes.
const CAPTURE_COLUMNS: [&str; 5] = [
    col::TS,
    col::IFACE,
    col::LINK_TYPE,
    col::WIRE_LEN,
    col::CAP_LEN,
];

/// What a filter's Community IDs give the planner: address ranges every match
/// lies in, a cheaper test every match passes, the connections, and (for one
/// connection) the address index's answer for where both its addresses occur.
type CommunityPlan = (
    Vec<(Addr16, Addr16)>,
    Filter,
    Vec<ConnTuple>,
    Option<AddressLookup>,
);

impl PacketSearch {
    /// Opens the archive at `root` for reading, with its address index if it has one.
    pub fn open(root: &Path) -> Result<Self, QueryError> {
        Self::open_within(root, TimeRange::ALL)
    }

    /// [`open`](Self::open) for searches within `window` only: the catalog
    /// is read for that window ([`Archive::open_reader_within`]), and a
    /// search outside it is refused.
    pub fn open_within(root: &Path, window: TimeRange) -> Result<Self, QueryError> {
        let archive = Archive::open_reader_within(root, window)?;
        let index = AddressIndex::open_read_only(&archive.index_dir())?;
        Ok(Self::new(Arc::new(archive), index.map(Arc::new)))
    }

    /// A search over an archive and its address index already open (shared with
    /// the other readers of a long-lived reader).
    pub fn new(archive: Arc<Archive>, index: Option<Arc<AddressIndex>>) -> Self {
        Self {
            archive,
            index,
            remote: None,
            connections: std::sync::OnceLock::new(),
            // A one-shot search reads each footer once: keeping them would
            // only cost memory. A long-lived reader gives its own.
            footers: None,
        }
    }

    /// Keeps the parsed footers of the segments it reads in `footers` (a
    /// long-lived reader's, shared by its searches); without, none is kept.
    pub fn with_footers(mut self, footers: Arc<FooterCache>) -> Self {
        self.footers = Some(footers);
        self
    }

    /// Finds Community IDs in `connections` (a long-lived reader's), instead of
    /// opening the archive's connection index when a filter names one.
    pub fn with_connections(self, connections: Option<Arc<ConnectionIndex>>) -> Self {
        let _ = self.connections.set(connections);
        self
    }

    /// The connection index, opened read-only on first use.
    fn connections(&self) -> Result<Option<&Arc<ConnectionIndex>>, QueryError> {
        if let Some(connections) = self.connections.get() {
            return Ok(connections.as_ref());
        }
        let opened =
            ConnectionIndex::open_read_only(&self.archive.connections_dir())?.map(Arc::new);
        Ok(self.connections.get_or_init(|| opened).as_ref())
    }

    /// The filter a packet is tested with: the request's, with each test of
    /// a connection's application field (`dns.qry.name == ...`) replaced by
    /// the packets of the connections that pass it, found in the connection
    /// index's name keys, and `community_id` hashed with the index's seed.
    fn effective<'f>(&self, request: &'f SearchRequest) -> Result<Cow<'f, Filter>, QueryError> {
        if !request.filter.tests_app_fields() {
            return self.seeded(&request.filter);
        }
        let resolved = request
            .filter
            .resolve_text(&mut |test| self.connections_of(test, request.time))?;
        Ok(Cow::Owned(self.seeded(&resolved)?.into_owned()))
    }

    /// The filter of the packets of the connections that pass `test` and
    /// start in `time` or up to [`NAME_LOOKBACK_NS`] before it.
    fn connections_of(&self, test: &TextTest, time: TimeRange) -> Result<Filter, QueryError> {
        let plan_error = |message: String| QueryError::Plan { message };
        let Some(lookups) = test.lookups() else {
            return Err(plan_error(format!(
                "{} is not a name the connection index keeps (dns.qry.name, \
                 tls.handshake.extensions_server_name, http.host, http.user_agent, \
                 tls.handshake.ja3, tls.handshake.ja3s, ja4 are); find the connections with \
                 `hindsight flows` and their addresses",
                test.field
            )));
        };
        let Some(connections) = self.connections()? else {
            return Ok(Filter::between(&[]));
        };
        let one = Filter::of_text(test);
        let entries = connections
            .names(
                &lookups,
                time.start_nanos.saturating_sub(NAME_LOOKBACK_NS),
                time.end_nanos,
                None,
                MAX_NAMED_CONNECTIONS + 1,
                &|entry| test.matches(entry.app.as_deref()),
                &|kind, name| one.may_pass_name(kind, name),
            )?
            .entries;
        if entries.len() > MAX_NAMED_CONNECTIONS {
            return Err(QueryError::ResourcesExhausted {
                resource: "connections of a name in one query (narrow the time window)",
                limit: MAX_NAMED_CONNECTIONS as u64,
            });
        }
        let tuples: Vec<ConnTuple> = entries
            .iter()
            .map(|e| (e.addr, e.port, e.peer, e.peer_port, e.proto))
            .collect();
        Ok(Filter::between(&tuples))
    }

    /// `filter` with `community_id` hashed with the seed of the archive's
    /// connection index (the filter itself when it names no Community ID).
    fn seeded<'f>(&self, filter: &'f Filter) -> Result<Cow<'f, Filter>, QueryError> {
        if !filter.names_community_id() {
            return Ok(Cow::Borrowed(filter));
        }
        let seed = self
            .connections()?
            .map_or(DEFAULT_COMMUNITY_SEED, |index| index.community_seed());
        Ok(match seed == filter.community_seed() {
            true => Cow::Borrowed(filter),
            false => Cow::Owned(filter.clone().with_community_seed(seed)),
        })
    }

    /// Address ranges that every packet of the filter's Community IDs has: for
    /// each ID, the rarer of its connection's two addresses (a Community ID is
    /// a hash of both addresses, so every packet with it has both). `None` if
    /// the filter names none, or one is not in the connection index.
    fn community_ranges(&self, filter: &Filter) -> Result<Option<CommunityPlan>, QueryError> {
        let Some(ids) = filter.community_ids() else {
            return Ok(None);
        };
        let Some(connections) = self.connections()? else {
            return Ok(None);
        };
        let mut ranges = Vec::with_capacity(ids.len());
        let mut pairs = Vec::with_capacity(ids.len());
        let mut lookups = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(entry) = connections.community(&id, i64::MIN, i64::MAX, 1)?.pop() else {
                return Ok(None);
            };
            let pick = match &self.index {
                Some(index) => {
                    let weight =
                        |lookup: &AddressLookup| lookup.granule_count() + lookup.covered_count();
                    let mut ours = index.lookup(&[(entry.addr, entry.addr)])?;
                    let mut theirs = index.lookup(&[(entry.peer, entry.peer)])?;
                    let pick = if weight(&ours) <= weight(&theirs) {
                        ours.intersect(&theirs);
                        entry.addr
                    } else {
                        theirs.intersect(&ours);
                        std::mem::swap(&mut ours, &mut theirs);
                        entry.peer
                    };
                    lookups.push(ours);
                    pick
                }
                None => entry.addr,
            };
            ranges.push((pick, pick));
            pairs.push((
                entry.addr,
                entry.port,
                entry.peer,
                entry.peer_port,
                entry.proto,
            ));
        }
        // One connection: where both its addresses occur (every packet of it
        // has both), from the lookups already made.
        let lookup = match lookups.len() {
            1 => lookups.pop(),
            _ => None,
        };
        Ok(Some((ranges, Filter::between(&pairs), pairs, lookup)))
    }

    /// Reads the segments whose local file is gone or damaged from their
    /// copies in `remote`, where it has one.
    pub fn with_remote(mut self, remote: Option<Arc<dyn RemoteSegments>>) -> Self {
        self.remote = remote;
        self
    }

    /// Returns the archive.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// Chooses the segments `request` must read.
    pub fn plan(&self, request: &SearchRequest) -> Result<SearchPlan, QueryError> {
        let catalog = self.archive.catalog();
        if !catalog.lists(request.time) {
            return Err(QueryError::Plan {
                message: "the archive was opened for another time window than the search's"
                    .to_owned(),
            });
        }
        let mut stats = SearchStats {
            segments_total: catalog.count_of(Table::Packets),
            ..SearchStats::default()
        };
        let mut segments: Vec<CatalogEntry> = catalog
            .entries_of(Table::Packets)
            .filter(|entry| entry.overlaps(request.time))
            .cloned()
            .collect();
        stats.segments_in_time = segments.len();
        let filter = self.effective(request)?;
        let (address_ranges, prefilter, connections, looked_up) =
            match self.community_ranges(&filter)? {
                Some((ranges, prefilter, connections, lookup)) => {
                    (Some(ranges), Some(prefilter), connections, lookup)
                }
                None => (filter.address_ranges(), None, Vec::new(), None),
            };
        let mut granules = BTreeMap::new();
        let mut covered = BTreeMap::new();
        if let (Some(ranges), Some(index)) = (&address_ranges, &self.index) {
            // Only the postings of the segments in the window are read.
            let ids = segments.iter().map(CatalogEntry::segment_id);
            let bounds = ids.clone().min().zip(ids.max());
            let lookup = match looked_up {
                Some(lookup) => lookup,
                // No segment in the window: an empty span of ids reads nothing.
                None => {
                    index.lookup_within(ranges, bounds.unwrap_or((SegmentId(1), SegmentId(0))))?
                }
            };
            segments.retain(|entry| lookup.may_hold(entry.segment_id()));
            (granules, covered) = lookup.into_parts();
            let planned: BTreeSet<SegmentId> =
                segments.iter().map(CatalogEntry::segment_id).collect();
            covered.retain(|id, _| planned.contains(id));
        }
        segments.sort_by_key(|entry| (entry.min_ts_nanos, entry.id));
        stats.segments_planned = segments.len();
        // A file that is gone or not the size it was sealed at is skipped before
        // anything is read (so an API answer can say so in its headers); damage
        // inside a file is found by the pages' checksums while reading.
        let mut remote = BTreeSet::new();
        segments.retain(|entry| {
            if covered.contains_key(&entry.segment_id()) {
                return true;
            }
            let Some(problem) = self.archive.segment_file_problem(entry) else {
                return true;
            };
            if let Some(copies) = &self.remote
                && copies.has_copy(entry)
            {
                remote.insert(entry.segment_id());
                return true;
            }
            stats.skipped.push(SkippedSegment {
                id: entry.segment_id(),
                file: entry.file.clone(),
                reason: problem,
            });
            false
        });
        stats.segments_covered = covered.len();
        Ok(SearchPlan {
            segments,
            prefilter,
            connections,
            address_ranges,
            granules,
            covered,
            remote,
            stats,
        })
    }

    /// Runs a plan, handing every matching row to `visit` in segment order; `visit`
    /// returns `Ok(false)` to stop early. Returns the pruning and row counts.
    pub fn execute(
        &self,
        request: &SearchRequest,
        plan: &SearchPlan,
        visit: &mut dyn FnMut(&PacketRecord, &[u8]) -> std::io::Result<bool>,
    ) -> Result<SearchStats, QueryError> {
        let mut stats = plan.stats.clone();
        let mut columns: Vec<&str> = if request.capture_only {
            let mut needed = self.effective(request)?.columns();
            needed.extend(CAPTURE_COLUMNS);
            needed.into_iter().collect()
        } else {
            // Every column a filter may read; `data` is added for pcap export.
            CAPTURE_COLUMNS
                .into_iter()
                .chain([col::STATUS])
                .chain(col::HEADERS.iter().copied())
                .collect()
        };
        if request.with_data {
            columns.extend(col::FRAME);
            columns.sort_unstable();
            columns.dedup();
        }
        let limit = request.limit.unwrap_or(u64::MAX);
        if limit == 0 {
            return Ok(stats);
        }
        // A damaged covering posting falls back to the segment, which the granules
        // still narrow.
        let covered: Vec<Option<Vec<CoveredRow>>> = plan
            .segments
            .iter()
            .map(|entry| {
                plan.covered
                    .get(&entry.segment_id())
                    .and_then(|postings| covered_rows(postings))
            })
            .collect();
        let files: Vec<&CatalogEntry> = plan
            .segments
            .iter()
            .zip(&covered)
            .filter(|(_, rows)| rows.is_none())
            .map(|(entry, _)| entry)
            .collect();
        let read = SegmentRead {
            search: self,
            request,
            plan,
            columns: &columns,
        };
        let filter = self.effective(request)?;
        let mut visitor = Visitor {
            request,
            filter: &filter,
            visit,
            stats: &mut stats,
            limit,
            segment: SegmentId(0),
            frame: Vec::new(),
            prefilter: plan.prefilter.as_ref(),
        };
        // Without a row limit every planned segment is read to its end, so
        // several are decoded at once; with one, reading ahead would be wasted.
        let threads = if request.limit.is_none() && files.len() > 1 {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(READ_THREADS))
        } else {
            1
        };
        if threads < 2 {
            let mut files = files.into_iter();
            visitor.segments(&plan.segments, &covered, |visitor| {
                let Some(entry) = files.next() else {
                    return Ok(false);
                };
                let mut outcome = Ok(true);
                read.segment(entry, &mut |item| {
                    outcome = item.and_then(|item| visitor.item(item));
                    matches!(outcome, Ok(true))
                });
                outcome
            })?;
            return Ok(stats);
        }
        let (jobs, queue) = mpsc::channel::<(&CatalogEntry, mpsc::SyncSender<_>)>();
        let queue = Mutex::new(queue);
        std::thread::scope(|scope| {
            // Owned here, so that the workers stop once the visiting ends, however.
            let jobs = jobs;
            for _ in 0..threads {
                let (queue, read) = (&queue, &read);
                scope.spawn(move || {
                    loop {
                        let job = queue.lock().map_or(None, |queue| queue.recv().ok());
                        let Some((entry, batches)) = job else { break };
                        read.segment(entry, &mut |item| batches.send(item).is_ok());
                    }
                });
            }
            // Each segment streams through its own small channel; `threads + 1`
            // are in flight, visited in segment order.
            let mut pending = files.into_iter();
            let mut in_flight = VecDeque::new();
            let mut submit = |in_flight: &mut VecDeque<_>| {
                if let Some(entry) = pending.next() {
                    let (batches, received) = mpsc::sync_channel(BATCHES_AHEAD);
                    if jobs.send((entry, batches)).is_ok() {
                        in_flight.push_back(received);
                    }
                }
            };
            for _ in 0..=threads {
                submit(&mut in_flight);
            }
            visitor.segments(&plan.segments, &covered, |visitor| {
                let Some(received) = in_flight.pop_front() else {
                    return Ok(false);
                };
                submit(&mut in_flight);
                for item in received {
                    if !visitor.item(item?)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            })
        })?;
        Ok(stats)
    }
}

impl PacketSearch {
    /// Hands the matching rows of in-memory batches of the packets schema (an
    /// archive's unsealed tail) to `visit`, after a plan's segments: the same
    /// filter, window and row limit, with `stats` carried on from the segments.
    pub fn execute_batches(
        &self,
        request: &SearchRequest,
        batches: &[(SegmentId, RecordBatch)],
        stats: &mut SearchStats,
        visit: &mut dyn FnMut(&PacketRecord, &[u8]) -> std::io::Result<bool>,
    ) -> Result<(), QueryError> {
        let limit = request.limit.unwrap_or(u64::MAX);
        if stats.rows_matched >= limit {
            return Ok(());
        }
        let filter = self.effective(request)?;
        let mut visitor = Visitor {
            request,
            filter: &filter,
            visit,
            stats,
            limit,
            segment: SegmentId(0),
            frame: Vec::new(),
            prefilter: None,
        };
        for (id, batch) in batches {
            visitor.segment = *id;
            visitor.stats.rows_read += batch.num_rows() as u64;
            if !visitor.item(SegmentItem::Batch(batch.clone()))? {
                break;
            }
        }
        Ok(())
    }
}

/// How long before a query's window a connection with a name it asks for
/// may have started (its packets are the query's from the window's start).
const NAME_LOOKBACK_NS: i64 = 3_600_000_000_000;

/// The most connections a name test of a packet query may stand for.
const MAX_NAMED_CONNECTIONS: usize = 10_000;

/// Threads that decode segments at once in a query without a row limit.
const READ_THREADS: usize = 2;

/// Decoded batches a segment may hold ready before the query visits them.
const BATCHES_AHEAD: usize = 4;

/// What reading a segment file yields, in order: its counts, then its batches.
enum SegmentItem {
    Opened {
        row_groups_total: usize,
        row_groups_read: usize,
        rows_selected: u64,
    },
    Batch(RecordBatch),
    /// The segment could not be read (further): the query goes on without it.
    Damaged(SkippedSegment),
}

/// Reads segment files for one query.
struct SegmentRead<'a> {
    search: &'a PacketSearch,
    request: &'a SearchRequest,
    plan: &'a SearchPlan,
    columns: &'a [&'a str],
}

impl SegmentRead<'_> {
    /// Reads one segment, handing its items to `emit` until it returns false.
    fn segment(
        &self,
        entry: &CatalogEntry,
        emit: &mut dyn FnMut(Result<SegmentItem, QueryError>) -> bool,
    ) {
        let opened = (|| {
            let path = self.search.archive.segment_path(entry);
            let reader = match &self.search.remote {
                Some(copies) if self.plan.remote.contains(&entry.segment_id()) => {
                    let file = copies
                        .fetch(entry)
                        .map_err(|message| QueryError::Execution {
                            message: format!("its local file is gone and its copy: {message}"),
                        })?;
                    SegmentReader::from_file(file, &path)?
                }
                _ => match &self.search.footers {
                    Some(footers) => SegmentReader::open_cached(&path, footers)?,
                    None => SegmentReader::open(&path)?,
                },
            };
            let groups = reader
                .matching_row_groups(self.request.time, self.plan.address_ranges.as_deref())?;
            let row_groups_read = groups.len();
            let batches = if groups.is_empty() {
                None
            } else {
                Some(reader.read_in_time_order(
                    groups,
                    self.plan.granules.get(&entry.segment_id()),
                    Some(self.columns),
                    self.plan.address_ranges.as_deref(),
                    &self.plan.connections,
                )?)
            };
            Ok::<_, QueryError>((reader, row_groups_read, batches))
        })();
        let damaged = |reason: String| {
            SegmentItem::Damaged(SkippedSegment {
                id: entry.segment_id(),
                file: entry.file.clone(),
                reason,
            })
        };
        let (reader, row_groups_read, batches) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                emit(Ok(damaged(error.to_string())));
                return;
            }
        };
        let rows_selected = batches.as_ref().map_or(0, |(_, selected)| *selected);
        if !emit(Ok(SegmentItem::Opened {
            row_groups_total: reader.row_groups(),
            row_groups_read,
            rows_selected,
        })) {
            return;
        }
        for batch in batches.into_iter().flat_map(|(batches, _)| batches) {
            match batch {
                Ok(batch) => {
                    if !emit(Ok(SegmentItem::Batch(batch))) {
                        return;
                    }
                }
                Err(error) => {
                    // Name the row group and column of the damaged page.
                    let reason = match reader.find_damage() {
                        Some(damage) => damage.to_string(),
                        None => error.to_string(),
                    };
                    emit(Ok(damaged(reason)));
                    return;
                }
            }
        }
    }
}

/// Evaluates the time window and the filter on rows and hands matches on.
struct Visitor<'a, 'v> {
    request: &'a SearchRequest,
    /// The request's filter, its Community IDs hashed with the archive's seed.
    filter: &'a Filter,
    visit: &'v mut dyn FnMut(&PacketRecord, &[u8]) -> std::io::Result<bool>,
    stats: &'a mut SearchStats,
    limit: u64,
    /// The segment being visited, for errors.
    segment: SegmentId,
    /// The bytes of the frame handed on, put back together from its stored form.
    frame: Vec<u8>,
    /// A cheaper test every match passes, tried first.
    prefilter: Option<&'a Filter>,
}

impl Visitor<'_, '_> {
    /// Visits the planned segments in order: those with covering postings from
    /// `covered`, the others through `next_file`, which visits the next segment
    /// file; each returns false once the query is done.
    fn segments(
        &mut self,
        segments: &[CatalogEntry],
        covered: &[Option<Vec<CoveredRow>>],
        mut next_file: impl FnMut(&mut Self) -> Result<bool, QueryError>,
    ) -> Result<(), QueryError> {
        for (entry, rows) in segments.iter().zip(covered) {
            self.segment = entry.segment_id();
            let go_on = match rows {
                Some(rows) => self.covered(rows)?,
                None => next_file(self)?,
            };
            if !go_on {
                break;
            }
        }
        Ok(())
    }

    /// Visits the rows of a covering posting; false once the query is done.
    fn covered(&mut self, rows: &[CoveredRow]) -> Result<bool, QueryError> {
        self.stats.rows_read += rows.len() as u64;
        for CoveredRow {
            record, form, data, ..
        } in rows
        {
            if !self.row(record, Some(*form), data)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Takes one item of a segment file; false once the query is done.
    fn item(&mut self, item: SegmentItem) -> Result<bool, QueryError> {
        match item {
            SegmentItem::Opened {
                row_groups_total,
                row_groups_read,
                rows_selected,
            } => {
                self.stats.row_groups_total += row_groups_total;
                self.stats.row_groups_read += row_groups_read;
                self.stats.rows_read += rows_selected;
                Ok(true)
            }
            SegmentItem::Damaged(skipped) => {
                self.stats.skipped.push(skipped);
                Ok(true)
            }
            SegmentItem::Batch(batch) => {
                let view = PacketBatchView::new(&batch);
                for row in 0..view.len() {
                    if !self.row(&view.record(row), view.data_form(row), view.data(row))? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Hands the row on if it matches, with its frame's bytes put back together
    /// from `stored` (of form `form`, `None` if unknown) when the request wants them.
    fn row(
        &mut self,
        record: &PacketRecord,
        form: Option<DataForm>,
        stored: &[u8],
    ) -> Result<bool, QueryError> {
        if !self.request.time.contains(record.ts_nanos)
            || self.prefilter.is_some_and(|pre| !pre.matches(record))
        {
            return Ok(true);
        }
        let reads_bytes = self.filter.reads_bytes();
        if !reads_bytes && !self.filter.matches(record) {
            return Ok(true);
        }
        let restore = self.request.with_data || reads_bytes;
        if restore {
            self.frame.clear();
            let restored =
                form.is_some_and(|form| snap::restore(form, record, stored, &mut self.frame));
            if !restored {
                return Err(QueryError::Execution {
                    message: format!(
                        "segment {}: the stored bytes of the packet at {} ns do not fit their \
                         data form (a damaged segment)",
                        self.segment.0, record.ts_nanos
                    ),
                });
            }
        }
        if reads_bytes {
            match self.filter.test(record, &self.frame) {
                Verdict::Match => {}
                Verdict::NoMatch => return Ok(true),
                Verdict::Unknown => {
                    self.stats.rows_unknown += 1;
                    return Ok(true);
                }
            }
        }
        self.stats.rows_matched += 1;
        let data = if restore {
            self.frame.as_slice()
        } else {
            stored
        };
        let go_on = (self.visit)(record, data).map_err(QueryError::Output)?;
        Ok(go_on && self.stats.rows_matched < self.limit)
    }
}

/// Decodes the covering postings of one segment (one per address) into its
/// candidate rows, in time order, each once (a packet between two of the addresses
/// is in both postings); `None` if one is damaged.
fn covered_rows(postings: &[Vec<u8>]) -> Option<Vec<CoveredRow>> {
    let mut rows = Vec::new();
    for posting in postings {
        rows.extend(decode_covered_rows(posting)?);
    }
    // In time order: the rows of a segment are grouped by host in its file, and
    // rows with equal timestamps lie together in capture order (`cluster.rs`).
    // A row in two postings is the same row, so its copies end up side by side.
    rows.sort_by_key(|row| (row.record.ts_nanos, row.row));
    rows.dedup_by_key(|row| row.row);
    Some(rows)
}

impl SearchStats {
    /// How many segments, row groups and rows each pruning level kept, in
    /// words (`hindsight query --explain`).
    pub fn explain(&self, seconds: f64) -> String {
        format!(
            "segments: {} in catalog, {} in time window, {} after address index, \
             {} of them answered from covering postings\n\
             row groups: {} in planned segments, {} after statistics and Bloom filters\n\
             rows: {} decoded, {} matched, in {:.3} ms",
            self.segments_total,
            self.segments_in_time,
            self.segments_planned,
            self.segments_covered,
            self.row_groups_total,
            self.row_groups_read,
            self.rows_read,
            self.rows_matched,
            seconds * 1e3
        )
    }
}

/// What an answer says of the packets the filter could not decide, because it
/// reads bytes the archive did not keep; `None` if there were none.
pub fn unknown_line(stats: &SearchStats) -> Option<String> {
    (stats.rows_unknown > 0).then(|| {
        format!(
            "{} packet(s) left out: the filter reads bytes past those the archive kept of \
             them (their snap length: `ingest --snaplen`, 128 bytes by default), or a layer \
             behind a link header whose layout the byte offsets do not follow (802.11, \
             radiotap and others: docs/filter-language.md lists those they do), so whether \
             they match is not known",
            stats.rows_unknown
        )
    })
}

/// The warnings of an answer that went without damaged catalog lines and
/// segments (one line each, then one that says the answer is incomplete);
/// none if it is complete.
pub fn incomplete_lines(
    archive: &hindsight_store::Archive,
    skipped: &[SkippedSegment],
) -> Vec<String> {
    let catalog = archive.catalog_damage();
    let mut lines: Vec<String> = catalog
        .iter()
        .map(|damage| {
            format!(
                "warning: {}: byte {}: {}; the segment it names is not searched",
                archive.catalog().path().display(),
                damage.offset,
                damage.reason
            )
        })
        .chain(skipped.iter().map(|segment| format!("warning: {segment}")))
        .collect();
    if !lines.is_empty() {
        lines.push(format!(
            "warning: the answer is incomplete: {} damaged segment(s), {} damaged catalog \
             line(s) (`hindsight check` lists the damage, `--repair` sets it aside)",
            skipped.len(),
            catalog.len()
        ));
    }
    lines
}
