//! The role of the reader crate is to be the one long-lived reader of an archive:
//! opened once (by `serve`, by a command), it holds the catalog, the address index,
//! the connection index and the archive's settings (`config.toml`), and answers
//! packet searches, connection lookups, SQL and the archive's summary from them.
//!
//! What it holds is a [`Snapshot`]: an immutable view of the archive as of one
//! catalog. [`Reader::snapshot`] checks with a `stat` of the catalog and of the two
//! index directories whether a writer (in this process or another) has sealed or
//! expired a segment since, and if so loads a new snapshot, as tantivy's
//! `IndexReader` reloads on commit. A request works on the snapshot it took, to its
//! end, whatever seals meanwhile: a segment expired under it is a file gone, which
//! the search skips and names.
//!
//! A reader in the process of a live writer (`serve` while it captures) is given
//! the writer's [`Tail`]: each snapshot then also holds what the tail held just
//! before the snapshot looked at the disk, so packets and connection records are
//! answered within a second of capture, before their segment seals, each exactly
//! once (see `hindsight_store::tail`).
//!
//! Limits (rows, time, memory) are carried by each request ([`Limits`]), not by
//! the surface that asks.

mod connections;
mod histogram;
mod scan;
mod summary;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hindsight_index::{AddressIndex, ConnectionIndex};
use hindsight_model::{PacketRecord, SegmentId};
use hindsight_query::QueryError;
use hindsight_query::filter::Filter;
use hindsight_query::search::{
    PacketSearch, RemoteSegments, SearchPlan, SearchRequest, SearchStats,
};
use hindsight_sql::{SqlError, SqlSession};
use hindsight_store::settings::{ArchiveSettings, SettingsError, archive_settings};
use hindsight_store::{Archive, CatalogEntry, FooterCache, StoreError, Table, Tail, TailView};

pub use crate::connections::{
    ConnQuery, Connections, MAX_CURSOR_HEX, decode_cursor, encode_cursor,
};
pub use crate::histogram::{Histogram, HistogramMethod, ROWS_PATH_MAX_ROWS};
pub use crate::summary::{Summary, TableTotals};
/// How the connection index stores an entry (a node hands its entries to a
/// cluster in that form).
pub use hindsight_index::Stored;

/// Errors of the reader.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// The archive or its catalog could not be opened.
    #[error("cannot open archive {}: {source}", root.display())]
    Open {
        /// The archive.
        root: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// An index could not be opened.
    #[error("cannot open the {which} of {}: {source}", root.display())]
    Index {
        /// "address index" or "connection index".
        which: &'static str,
        /// The archive.
        root: PathBuf,
        /// Why.
        #[source]
        source: hindsight_index::IndexError,
    },
    /// The archive's `config.toml` is not valid.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// A packet search failed.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// A SQL statement failed.
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// A request is not valid (an address, a cursor, a filter without addresses).
    #[error("{0}")]
    Request(String),
    /// A request went past one of its limits.
    #[error("{0}")]
    Limit(LimitExceeded),
}

/// Which of a request's limits was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitExceeded {
    /// More rows than `max_rows`.
    Rows(u64),
    /// Longer than `timeout`.
    Time(Duration),
    /// Cancelled: its client went away.
    Cancelled,
}

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rows(max) => write!(
                f,
                "the result has more than {max} rows: add a limit or narrow the filter or the window"
            ),
            Self::Time(timeout) => write!(
                f,
                "the request ran longer than {} s and was stopped",
                timeout.as_secs_f64()
            ),
            Self::Cancelled => write!(f, "the request was cancelled: its client went away"),
        }
    }
}

/// The `packets` segments of one retention class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassUsage {
    /// The class (`default` for packets of no class).
    pub name: String,
    /// Its guaranteed bytes.
    pub min_bytes: u64,
    /// Its own longest age, if it has one.
    pub max_age_secs: Option<u64>,
    /// Its segments.
    pub segments: u64,
    /// Their packets.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Its oldest and newest packets, ns since the epoch.
    pub first_ns: Option<i64>,
    /// See `first_ns`.
    pub last_ns: Option<i64>,
}

/// Most covering postings a plan may read to count as small
/// ([`Snapshot::is_small`]): about a millisecond of decoding.
pub const SMALL_PLAN_ROWS: usize = 4096;

/// The bounds one request carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Fail once the answer has more rows than this.
    pub max_rows: Option<u64>,
    /// Stop once the request has run this long.
    pub timeout: Option<Duration>,
    /// Memory for SQL operators (sorts, joins, aggregations), bytes.
    pub memory_bytes: Option<usize>,
    /// Stop once this is set (its client went away).
    pub cancel: hindsight_sql::Cancel,
}

impl Limits {
    /// The bounds of one SQL statement run within these (the memory bound is
    /// the session's, [`Snapshot::sql`]).
    pub fn statement(&self) -> hindsight_sql::Limits {
        hindsight_sql::Limits {
            max_rows: self.max_rows,
            timeout: self.timeout,
            cancel: self.cancel.clone(),
        }
    }
}

/// What makes a snapshot stale: the catalog file and the index directories as
/// `stat` sees them (a seal appends to the catalog; an index commit adds a file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Stamp(Vec<Option<(u64, u64, i64, i64)>>);

impl Stamp {
    fn of(paths: &[PathBuf]) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self(
            paths
                .iter()
                .map(|path| {
                    std::fs::metadata(path)
                        .ok()
                        .map(|m| (m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
                })
                .collect(),
        )
    }
}

/// The archive as of one catalog: everything a request reads, opened once, and
/// the unsealed tail as of just before.
#[derive(Debug, Clone)]
pub struct Snapshot {
    archive: Arc<Archive>,
    index: Option<Arc<AddressIndex>>,
    /// The connection index, opened when a request first needs it: a packet
    /// search or `stats` does not pay for opening it.
    connections: Arc<std::sync::OnceLock<Option<OpenConnections>>>,
    settings: ArchiveSettings,
    summary: Summary,
    generation: u64,
    /// The tail's pieces that are not on disk as of this snapshot.
    tail: Option<TailView>,
    /// Bytes under the archive directory, counted when first asked.
    disk_bytes: Arc<std::sync::OnceLock<u64>>,
    /// The copies of its segments in object storage, if it has a store.
    remote: Option<Arc<dyn RemoteSegments>>,
    /// The reader's parsed segment footers, shared by its snapshots.
    footers: Arc<FooterCache>,
}

/// A connection index opened read-only, with the last `flows` segment whose
/// connection entries it had committed then.
#[derive(Debug)]
struct OpenConnections {
    index: Arc<ConnectionIndex>,
    flows_mark: Option<SegmentId>,
}

/// An archive's copies in its object store (`[archive] object_store`), for
/// packet searches: the store opened and the log of copies read when a
/// search first needs them (a segment whose local file is gone).
#[derive(Debug)]
struct ObjectCopies {
    root: PathBuf,
    settings: hindsight_sql::ObjectStoreSettings,
    objects: std::sync::OnceLock<Result<Arc<hindsight_sql::objects::Objects>, String>>,
    copied: std::sync::OnceLock<hindsight_store::objects::CopyLog>,
}

impl RemoteSegments for ObjectCopies {
    fn has_copy(&self, entry: &CatalogEntry) -> bool {
        let log = self
            .copied
            .get_or_init(|| hindsight_store::objects::read_log(&self.root));
        hindsight_store::objects::has_copy(log, entry)
    }

    fn fetch(&self, entry: &CatalogEntry) -> Result<std::fs::File, String> {
        let objects = self
            .objects
            .get_or_init(|| {
                hindsight_sql::objects::Objects::open(&self.settings)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)?;
        objects.fetch_to(entry, &self.root.join(FETCH_DIR))
    }
}

/// The copies of the archive at `root` in the object store its `config.toml`
/// names, if it names one: where a packet search reads the segments whose
/// local file is gone or damaged.
pub fn remote_segments(root: &Path) -> Result<Option<Arc<dyn RemoteSegments>>, ReaderError> {
    Ok(settings_remote(root, &archive_settings(root, None)?))
}

/// The copies of the archive at `root`, if its settings name a store.
fn settings_remote(root: &Path, settings: &ArchiveSettings) -> Option<Arc<dyn RemoteSegments>> {
    let copies = ObjectCopies {
        root: root.to_owned(),
        settings: settings.objects.clone()?,
        objects: std::sync::OnceLock::new(),
        copied: std::sync::OnceLock::new(),
    };
    Some(Arc::new(copies))
}

/// Where copies fetched from the object store are written while they are
/// read (each file unlinked once open).
const FETCH_DIR: &str = "fetched";

impl Snapshot {
    fn load(root: &Path, generation: u64, footers: Arc<FooterCache>) -> Result<Self, ReaderError> {
        let archive = Archive::open_reader(root).map_err(|source| ReaderError::Open {
            root: root.to_owned(),
            source,
        })?;
        let index = AddressIndex::open_read_only(&archive.index_dir()).map_err(|source| {
            ReaderError::Index {
                which: "address index",
                root: root.to_owned(),
                source,
            }
        })?;
        let settings = archive_settings(root, None)?;
        let summary = Summary::of(&archive);
        Ok(Self {
            archive: Arc::new(archive),
            index: index.map(Arc::new),
            connections: Arc::default(),
            summary,
            generation,
            tail: None,
            disk_bytes: Arc::default(),
            remote: settings_remote(root, &settings),
            settings,
            footers,
        })
    }

    /// The connection index of this snapshot (`None` if the archive has
    /// none yet), opened on the first call. A failed open is not kept: the
    /// next call tries again.
    fn open_connections(&self) -> Result<Option<&OpenConnections>, ReaderError> {
        if let Some(open) = self.connections.get() {
            return Ok(open.as_ref());
        }
        let root = self.archive.root();
        let failed = |source| ReaderError::Index {
            which: "connection index",
            root: root.to_owned(),
            source,
        };
        let opened = match ConnectionIndex::open_read_only(&self.archive.connections_dir())
            .map_err(failed)?
        {
            Some(index) => Some(OpenConnections {
                flows_mark: index.flows_mark().map_err(failed)?,
                index: Arc::new(index),
            }),
            None => None,
        };
        Ok(self.connections.get_or_init(|| opened).as_ref())
    }

    /// This snapshot with the pieces of `view` (taken before it looked at the
    /// disk) that are not on disk: packet batches of segments not in its catalog,
    /// connection records the connection index had not committed.
    fn with_tail(&self, mut view: TailView) -> Result<Self, ReaderError> {
        let catalog = self.archive.catalog();
        view.packets.retain(|(id, _)| catalog.get(*id).is_none());
        let flows_mark = self.open_connections()?.and_then(|open| open.flows_mark);
        view.flows
            .retain(|(id, _)| flows_mark.is_none_or(|mark| *id > mark));
        Ok(Self {
            tail: Some(view),
            ..self.clone()
        })
    }

    /// The unsealed pieces this snapshot answers from besides its segments.
    pub fn tail(&self) -> Option<&TailView> {
        self.tail.as_ref()
    }

    /// Packets in the unsealed tail (answered, not yet in a segment).
    pub fn unsealed_packets(&self) -> u64 {
        self.tail.as_ref().map_or(0, |tail| {
            tail.packets
                .iter()
                .map(|(_, batch)| batch.num_rows() as u64)
                .sum()
        })
    }

    /// The time span of the unsealed packets, if there are any.
    pub fn unsealed_span(&self) -> Option<(i64, i64)> {
        use hindsight_store::arrow::array::AsArray;
        use hindsight_store::arrow::datatypes::TimestampNanosecondType;
        let tail = self.tail.as_ref()?;
        let mut span: Option<(i64, i64)> = None;
        for (_, batch) in &tail.packets {
            let Some(ts) = batch
                .column_by_name(hindsight_store::schema::col::TS)
                .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
            else {
                continue;
            };
            for &t in ts.values() {
                span = Some(span.map_or((t, t), |(low, high)| (low.min(t), high.max(t))));
            }
        }
        span
    }

    /// The archive (its catalog and layout).
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The archive's settings, from its `config.toml`.
    pub fn settings(&self) -> &ArchiveSettings {
        &self.settings
    }

    /// Bytes of every file under the archive directory (segments, indexes,
    /// catalog, dumps kept there), counted once per snapshot, when first asked
    /// (a walk of the directory: `serve` asks after each reload, so that its
    /// metrics do not).
    pub fn disk_bytes(&self) -> u64 {
        *self
            .disk_bytes
            .get_or_init(|| summary::disk_usage(self.archive.root()))
    }

    /// What the archive holds, counted when the snapshot was loaded.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The `packets` segments of each retention class (`[[retention.class]]`),
    /// the default class first; empty when the archive sets no classes.
    pub fn retention_classes(&self) -> Vec<ClassUsage> {
        let classes = &self.settings.retention.classes;
        if classes.is_empty() {
            return Vec::new();
        }
        let mut usage: Vec<ClassUsage> = std::iter::once(ClassUsage {
            name: "default".to_owned(),
            ..ClassUsage::default()
        })
        .chain(classes.iter().map(|class| ClassUsage {
            name: class.name.clone(),
            min_bytes: class.min_bytes,
            max_age_secs: class.max_age.map(|age| age.as_secs()),
            ..ClassUsage::default()
        }))
        .collect();
        for entry in self.archive.catalog().entries_of(Table::Packets) {
            let class = &mut usage[self.settings.retention.class_index(entry.class.as_deref())];
            class.segments += 1;
            class.packets += entry.rows;
            class.bytes += entry.size_bytes;
            class.first_ns = Some(
                class
                    .first_ns
                    .map_or(entry.min_ts_nanos, |t| t.min(entry.min_ts_nanos)),
            );
            class.last_ns = Some(
                class
                    .last_ns
                    .map_or(entry.max_ts_nanos, |t| t.max(entry.max_ts_nanos)),
            );
        }
        usage
    }

    /// What the archive at `root` holds, as JSON (`stats --json`, `GET /api/v1/stats`),
    /// with every segment if `with_segments`.
    pub fn summary_json(&self, root: &Path, with_segments: bool) -> serde_json::Value {
        use hindsight_output::time::format_nanos;
        let (packets, flows) = (&self.summary.packets, &self.summary.flows);
        serde_json::json!({
            "archive": root.display().to_string(),
            "segments": packets.segments,
            "packets": packets.rows,
            "bytes_on_disk": packets.bytes,
            "bytes_per_packet": self.summary.bytes_per_packet(),
            "first": packets.first_ns.map(format_nanos),
            "last": packets.last_ns.map(format_nanos),
            "first_ns": packets.first_ns,
            "last_ns": packets.last_ns,
            "flows": {
                "segments": flows.segments,
                "records": flows.rows,
                "bytes_on_disk": flows.bytes,
            },
            "retention_classes": self.retention_classes().iter().map(|class| serde_json::json!({
                "name": class.name,
                "segments": class.segments,
                "packets": class.packets,
                "bytes_on_disk": class.bytes,
                "min_bytes": class.min_bytes,
                "max_age_secs": class.max_age_secs,
                "first": class.first_ns.map(format_nanos),
                "last": class.last_ns.map(format_nanos),
            })).collect::<Vec<_>>(),
            "segment_list": if with_segments {
                serde_json::json!(self.archive.catalog().entries().collect::<Vec<_>>())
            } else {
                serde_json::Value::Null
            },
        })
    }

    /// How many snapshots the reader loaded before this one (0 for the first).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The damaged catalog lines this snapshot went without, one line each.
    pub fn catalog_damage(&self) -> Vec<String> {
        self.archive
            .catalog_damage()
            .iter()
            .map(|damage| format!("catalog line at byte {} unreadable", damage.offset))
            .collect()
    }

    /// A packet search over this snapshot (its plan and execution) for
    /// `filter`. A filter that tests an application field (a name) or a
    /// Community ID needs the connection index: the search gets the
    /// snapshot's, opened here if it is not yet, so that the plan, the
    /// execution, lookups and the tail share one open index.
    pub fn packet_search(&self, filter: &Filter) -> Result<PacketSearch, ReaderError> {
        let search = PacketSearch::new(Arc::clone(&self.archive), self.index.clone())
            .with_remote(self.remote.clone())
            .with_footers(Arc::clone(&self.footers));
        let open = if filter.tests_app_fields() || filter.names_community_id() {
            Some(self.open_connections()?)
        } else {
            self.connections.get().map(Option::as_ref)
        };
        Ok(match open {
            Some(open) => search.with_connections(open.map(|open| Arc::clone(&open.index))),
            None => search,
        })
    }

    /// Whether this snapshot has opened the archive's connection index (once,
    /// when a lookup, a search for a name or a Community ID, or the unsealed
    /// tail first needs it).
    pub fn connection_index_opened(&self) -> bool {
        self.connections.get().is_some()
    }

    /// Plans `request` and hands every matching packet to `visit`, in time
    /// order, within `limits`: past `max_rows` or `timeout` it fails with
    /// [`ReaderError::Limit`] (an answer is never silently short). `planned`
    /// gets the plan before anything is read (what the answer will go without is
    /// known then: segments gone or not their sealed size).
    pub fn search(
        &self,
        request: &SearchRequest,
        limits: &Limits,
        planned: &mut dyn FnMut(&SearchPlan),
        visit: &mut dyn FnMut(&PacketRecord, &[u8]) -> std::io::Result<bool>,
    ) -> Result<SearchStats, ReaderError> {
        self.search_with(request, None, limits, planned, visit)
    }

    /// [`Self::search`] with `plan` if it has been made already (not made
    /// twice), else planned here.
    pub fn search_with(
        &self,
        request: &SearchRequest,
        plan: Option<SearchPlan>,
        limits: &Limits,
        planned: &mut dyn FnMut(&SearchPlan),
        visit: &mut dyn FnMut(&PacketRecord, &[u8]) -> std::io::Result<bool>,
    ) -> Result<SearchStats, ReaderError> {
        let plan = match plan {
            Some(plan) => plan,
            None => self.plan(request)?,
        };
        planned(&plan);
        self.search_planned(request, &plan, limits, visit)
    }

    /// The plan of `request` over this snapshot's sealed segments.
    pub fn plan(&self, request: &SearchRequest) -> Result<SearchPlan, ReaderError> {
        Ok(self.packet_search(&request.filter)?.plan(request)?)
    }

    /// Whether `plan` is answered from covering postings alone, at most
    /// [`SMALL_PLAN_ROWS`] of them, with no unsealed tail to read: no segment
    /// file is opened, and the answer takes microseconds.
    pub fn is_small(&self, plan: &SearchPlan) -> bool {
        let covered: usize = plan.covered.values().map(Vec::len).sum();
        plan.stats.segments_planned == plan.stats.segments_covered
            && covered <= SMALL_PLAN_ROWS
            && self
                .tail
                .as_ref()
                .is_none_or(|tail| tail.packets.is_empty())
    }

    /// About how many rows `plan` decodes for `request`: its covering
    /// postings, the granules of the segments with an address constraint,
    /// the share of every other segment's rows that its time window spans
    /// (row groups outside the window are skipped by their statistics), and
    /// the unsealed tail. What the API's admission sorts requests by.
    pub fn plan_rows(&self, request: &SearchRequest, plan: &SearchPlan) -> u64 {
        let granule_rows = u64::from(hindsight_model::GRANULE_ROWS);
        let time = request.time;
        let sealed: u64 = plan
            .segments
            .iter()
            .map(|entry| {
                let id = entry.segment_id();
                if let Some(covered) = plan.covered.get(&id) {
                    return covered.len() as u64;
                }
                let rows = match plan.granules.get(&id) {
                    Some(granules) => {
                        (granules.granules().len() as u64 * granule_rows).min(entry.rows)
                    }
                    None => entry.rows,
                };
                // The window's share of the segment's span, at least a granule.
                let span = (i128::from(entry.max_ts_nanos) - i128::from(entry.min_ts_nanos)).max(1);
                let overlap = (i128::from(time.end_nanos.min(entry.max_ts_nanos))
                    - i128::from(time.start_nanos.max(entry.min_ts_nanos)))
                .clamp(0, span);
                let share = (rows as f64 * (overlap as f64 / span as f64)).ceil() as u64;
                share.max(granule_rows.min(rows))
            })
            .sum();
        let tail: u64 = self.tail.as_ref().map_or(0, |tail| {
            tail.packets.iter().map(|(_, b)| b.num_rows() as u64).sum()
        });
        sealed + tail
    }

    /// [`Self::search`] with its plan made.
    pub fn search_planned(
        &self,
        request: &SearchRequest,
        plan: &SearchPlan,
        limits: &Limits,
        visit: &mut dyn FnMut(&PacketRecord, &[u8]) -> std::io::Result<bool>,
    ) -> Result<SearchStats, ReaderError> {
        let search = self.packet_search(&request.filter)?;
        let deadline = limits
            .timeout
            .map(|timeout| (Instant::now() + timeout, timeout));
        let mut rows = 0u64;
        // Read between the sealed segments and the tail, while the visitor lives.
        let exceeded = std::cell::Cell::new(None);
        let stopped = std::cell::Cell::new(false);
        let mut bounded = |record: &PacketRecord, data: &[u8]| {
            rows += 1;
            if let Some(max) = limits.max_rows
                && rows > max
            {
                exceeded.set(Some(LimitExceeded::Rows(max)));
                return Ok(false);
            }
            if rows.is_multiple_of(256) {
                if let Some((deadline, timeout)) = deadline
                    && Instant::now() > deadline
                {
                    exceeded.set(Some(LimitExceeded::Time(timeout)));
                    return Ok(false);
                }
                if limits.cancel.is_cancelled() {
                    exceeded.set(Some(LimitExceeded::Cancelled));
                    return Ok(false);
                }
            }
            let go_on = visit(record, data)?;
            stopped.set(!go_on);
            Ok(go_on)
        };
        let mut stats = search.execute(request, plan, &mut bounded)?;
        // Then the unsealed tail, later in time than every sealed segment.
        if let Some(tail) = &self.tail
            && exceeded.get().is_none()
            && !stopped.get()
        {
            search.execute_batches(request, &tail.packets, &mut stats, &mut bounded)?;
        }
        match exceeded.get() {
            Some(limit) => Err(ReaderError::Limit(limit)),
            None => Ok(stats),
        }
    }

    /// The connections of [`ConnQuery::ranges`] from the connection index, one
    /// page of at most `query.limit`, in the index's order (address, time, peer).
    pub fn connections(&self, query: &ConnQuery) -> Result<Connections, ReaderError> {
        let tail = self.tail.as_ref().map(|tail| tail.flows.as_slice());
        let index = self.open_connections()?.map(|open| open.index.as_ref());
        let segments = Some((self.archive.as_ref(), self.footers.as_ref()));
        connections::lookup(index, tail.unwrap_or_default(), segments, query)
    }

    /// A SQL session over this snapshot (`packets` and `flows`), read-only,
    /// with the memory bound of `limits`, `ip_home()` testing the archive's
    /// `[network] home`, and the copies in its object store read where the
    /// local files are gone.
    pub fn sql(&self, limits: &Limits) -> Result<SqlSession, ReaderError> {
        let unsealed = match &self.tail {
            Some(tail) => {
                // Flow records leave the tail when the index commits them, later
                // than their segment seals: the table takes only the unsealed.
                let catalog = self.archive.catalog();
                let flows = tail
                    .flows
                    .iter()
                    .filter(|(id, _)| catalog.get(*id).is_none())
                    .flat_map(|(_, records)| records.iter().cloned())
                    .collect();
                let packets = tail.packets.iter().map(|(_, b)| b.clone()).collect();
                hindsight_sql::Unsealed { packets, flows }
            }
            None => hindsight_sql::Unsealed::default(),
        };
        let session = SqlSession::over(
            Arc::clone(&self.archive),
            self.index.clone(),
            limits.memory_bytes,
            unsealed,
        )?
        .with_objects(self.settings.objects.as_ref())?;
        if !self.settings.home.is_empty() {
            session.set_home(self.settings.home.clone());
        }
        Ok(session)
    }
}

/// The connections of `query` in the archive at `root`, from its connection
/// index alone, as a snapshot's [`connections`](Snapshot::connections) gives
/// them without a tail: a one-shot lookup (`hindsight flows`) opens neither
/// the catalog nor the address index, whose cost grows with the archive
/// (a 500 M-packet archive's catalog is 16,000 entries) and which the lookup
/// never reads.
///
/// A query that [scans](ConnQuery::scans) the `flows` segments opens the
/// archive's catalog after all.
pub fn sealed_connections(root: &Path, query: &ConnQuery) -> Result<Connections, ReaderError> {
    if query.scans() {
        return Reader::open(root)?.snapshot()?.connections(query);
    }
    Archive::check_reader(root).map_err(|source| ReaderError::Open {
        root: root.to_owned(),
        source,
    })?;
    let index =
        ConnectionIndex::open_read_only(&Archive::connections_dir_of(root)).map_err(|source| {
            ReaderError::Index {
                which: "connection index",
                root: root.to_owned(),
                source,
            }
        })?;
    connections::lookup(index.as_ref(), &[], None, query)
}

/// The long-lived reader of one archive.
#[derive(Debug)]
pub struct Reader {
    root: PathBuf,
    /// The unsealed rows of a writer in this process, if one shares them.
    tail: Option<Arc<Tail>>,
    /// The files whose `stat` tells a snapshot stale.
    watched: Vec<PathBuf>,
    current: Mutex<(Stamp, Arc<Snapshot>)>,
    /// Parsed segment footers, kept across snapshots (segment files never change).
    footers: Arc<FooterCache>,
}

impl Reader {
    /// Opens the archive at `root`: its catalog, indexes and settings.
    pub fn open(root: &Path) -> Result<Self, ReaderError> {
        let footers = Arc::new(FooterCache::new(FooterCache::DEFAULT_BYTES));
        let snapshot = Snapshot::load(root, 0, Arc::clone(&footers))?;
        let watched = vec![
            snapshot.archive.catalog().path().to_owned(),
            snapshot.archive.index_dir(),
            snapshot.archive.connections_dir(),
            root.join(hindsight_store::archive::CONFIG_FILE),
        ];
        let stamp = Stamp::of(&watched);
        Ok(Self {
            root: root.to_owned(),
            tail: None,
            watched,
            current: Mutex::new((stamp, Arc::new(snapshot))),
            footers,
        })
    }

    /// Keeps at most `bytes` of parsed segment footers (`FooterCache`; 0: none).
    pub fn with_footer_cache_bytes(self, bytes: usize) -> Self {
        self.footers.set_limit(bytes);
        self
    }

    /// Answers from `tail` too: the unsealed rows of the live writer of this
    /// archive in this process.
    pub fn with_tail(mut self, tail: Arc<Tail>) -> Self {
        self.tail = Some(tail);
        self
    }

    /// The archive's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The current snapshot: the one held, or a new one if a writer sealed or
    /// expired a segment (or changed the settings) since it was loaded. A reload
    /// that fails (a writer mid-way) keeps the snapshot held and says why.
    pub fn snapshot(&self) -> Result<Arc<Snapshot>, ReaderError> {
        // The tail first, the disk after: a piece that left the tail meanwhile
        // is on disk by then (see `hindsight_store::tail`).
        self.snapshot_with(self.tail_view())
    }

    /// What the tail of this process's writer holds now, if it shares one:
    /// what a reader in another process needs besides the disk (a statement
    /// worker's, see `hindsight_serve`), taken before that reader looks at
    /// the disk.
    pub fn tail_view(&self) -> Option<TailView> {
        self.tail.as_ref().map(|tail| tail.view())
    }

    /// As [`Self::snapshot`], with `tail` (taken before this call) as the
    /// unsealed rows: the pieces of it not on disk by now.
    pub fn snapshot_with(&self, tail: Option<TailView>) -> Result<Arc<Snapshot>, ReaderError> {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stamp = Stamp::of(&self.watched);
        if stamp != current.0 {
            let snapshot = Snapshot::load(
                &self.root,
                current.1.generation + 1,
                Arc::clone(&self.footers),
            )?;
            *current = (stamp, Arc::new(snapshot));
        }
        Ok(match tail {
            Some(view) => Arc::new(current.1.with_tail(view)?),
            None => Arc::clone(&current.1),
        })
    }

    /// The snapshot held, without checking for changes (for a metrics scrape,
    /// which must not touch the archive).
    pub fn held(&self) -> Arc<Snapshot> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&current.1)
    }

    /// A SQL session over the current snapshot, within `limits`' memory.
    pub fn sql(&self, limits: &Limits) -> Result<SqlSession, ReaderError> {
        self.snapshot()?.sql(limits)
    }
}
