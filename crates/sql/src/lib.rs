//! The role of the sql crate is to answer SQL over the archive: it exposes the sealed
//! packet segments as one DataFusion table, `packets`, and the connection records as
//! `flows`, and prunes what a statement cannot match before DataFusion reads a byte:
//!
//! 1. catalog time ranges against the statement's conditions on `ts`;
//! 2. for `packets`, the RocksDB address postings against its conditions on
//!    `src_addr`/`dst_addr`;
//! 3. Parquet row-group statistics, page indexes and Bloom filters (DataFusion's own
//!    Parquet pruning, fed the same conditions).
//!
//! Functions added to DataFusion's own: `ip('10.1.2.3')` turns an IPv4/IPv6 literal into
//! the 16-byte address form of the address columns, `ip_str(src_addr)` prints one, and
//! `time_bucket(INTERVAL '1 minute', ts)` is DataFusion's `date_bin` under the name
//! TimescaleDB users know. `docs/sql.md` is the user's reference.
//!
//! Over a cluster ([`SqlSession::federated`], `federate`), a statement's plan is
//! cut into fragments each node runs on its own rows ([`SqlSession::run_fragment`]);
//! `objects` copies segments to S3-compatible storage and scans read the copies
//! once the local files are gone.

pub mod abandoned;
pub mod budget;
mod count;
mod federate;
mod filter_expr;
mod functions;
pub mod objects;
mod output_bound;
mod peer_ipc;
mod policy;
mod prune;
mod shape;
mod stages;
mod summary;
mod table;
pub mod wire;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use hindsight_index::AddressIndex;
use hindsight_store::{Archive, StoreError, Table};

pub use crate::count::TimeCounter;
pub use crate::federate::{MAX_FRAGMENT_BYTES, Nodes};
pub use crate::filter_expr::ColumnarFilter;
pub use crate::functions::{Networks, scalar_functions};
pub use crate::output_bound::MAX_OUTPUT_BYTES;
pub use crate::shape::{MAX_LINKS, STACK_BYTES};
pub use crate::stages::{MAX_BOUND_VALUES, Script};
use crate::table::SegmentTable;
pub use crate::table::with_uid;
pub use datafusion::scalar::ScalarValue;
use datafusion::sql::parser::Statement as DfStatement;
pub use hindsight_output::Format;
pub use hindsight_store::objects::ObjectStoreSettings;

/// The tables of a live window (`hindsight-watch`): the rows of the stream in
/// the current window, with the columns of `packets` and `flows`.
pub const LIVE_PACKETS: &str = "live_packets";
/// See [`LIVE_PACKETS`].
pub const LIVE_FLOWS: &str = "live_flows";

/// Errors of a SQL session.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The archive could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The address index could not be opened.
    #[error(transparent)]
    Index(#[from] hindsight_index::IndexError),
    /// The statement is invalid or failed while running.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// The statement would write, create, drop, set an option or name a file,
    /// and the session only reads.
    #[error(
        "{statement} is refused: SQL here only reads (SELECT, EXPLAIN, SHOW, DESCRIBE); \
         statements that write, create, drop, set options or name files are not allowed"
    )]
    ReadOnly {
        /// The refused statement's leading keywords (`COPY`, `CREATE VIEW`).
        statement: String,
    },
    /// The statement ran longer than the configured limit; it was cancelled.
    #[error("the statement ran longer than {seconds} s and was cancelled")]
    TimedOut {
        /// The configured limit, seconds.
        seconds: u64,
    },
    /// The statement was cancelled before it finished (its client went away).
    #[error("the statement was cancelled: its client went away, or its watch was removed")]
    Cancelled,
    /// The process passed its resident memory bound and the statements
    /// running were cancelled (see `budget`'s resident bound).
    #[error("{0}")]
    OverMemory(String),
    /// Statements given up on still compute, as many as the server lets
    /// (see `abandoned`).
    #[error(
        "{abandoned} statements given up on (past their deadline or their client gone) still \
         compute, as many as the server lets; try again when they are done"
    )]
    Busy {
        /// How many.
        abandoned: usize,
    },
    /// The result is longer than the configured limit.
    #[error("the result has more than {max_rows} rows (raise --max-rows, or add LIMIT)")]
    TooManyRows {
        /// The configured limit.
        max_rows: u64,
    },
    /// Writing the result failed.
    #[error("cannot write the result")]
    Output(#[from] std::io::Error),
    /// Formatting the result failed.
    #[error("cannot format the result")]
    Format(#[from] datafusion::arrow::error::ArrowError),
    /// The result could not be written in the format asked for.
    #[error(transparent)]
    Rows(#[from] hindsight_output::rows::RowsError),
    /// A script of stages is not valid.
    #[error("{0}")]
    Script(String),
    /// The statement chains more operators, joins and set operations than a
    /// plan may nest (see `shape`).
    #[error(
        "the statement chains {links} operators, joins and set operations; at most {max} \
         are taken, since each nests the plan one level deeper (write a long list of \
         values as `x IN (a, b, ...)`)"
    )]
    TooDeep {
        /// The links counted.
        links: usize,
        /// [`MAX_LINKS`].
        max: usize,
    },
    /// The async runtime could not start.
    #[error("cannot start the query runtime")]
    Runtime(#[source] std::io::Error),
}

/// Bounds of one statement.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Fail once the result has more rows than this.
    pub max_rows: Option<u64>,
    /// Cancel the statement once it has run this long.
    pub timeout: Option<std::time::Duration>,
    /// Cancel the statement once this is set.
    pub cancel: Cancel,
}

/// A flag that stops work once set: a request's, set when its client goes
/// away. Work checks it where it checks its deadline.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Option<Arc<std::sync::atomic::AtomicBool>>);

impl Cancel {
    /// A flag not yet set.
    pub fn new() -> Self {
        Self(Some(Arc::default()))
    }

    /// Sets the flag (a flag made by `default` cannot be set).
    pub fn cancel(&self) {
        if let Some(flag) = &self.0 {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether the flag is set.
    pub fn is_cancelled(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|flag| flag.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for Cancel {}

/// Rows not yet in a sealed segment (a live writer's tail), which the tables
/// hold besides their segments.
#[derive(Debug, Default)]
pub struct Unsealed {
    /// Batches of the `packets` schema.
    pub packets: Vec<RecordBatch>,
    /// Connection records.
    pub flows: Vec<hindsight_model::FlowRecord>,
}

/// The configuration of every session: two partitions (the machine's cores),
/// Parquet pruning by statistics, page indexes and Bloom filters.
fn session_config() -> SessionConfig {
    let mut config = SessionConfig::new()
        .with_target_partitions(2)
        .with_information_schema(true);
    let parquet = &mut config.options_mut().execution.parquet;
    parquet.pushdown_filters = true;
    parquet.reorder_filters = true;
    parquet.bloom_filter_on_read = true;
    parquet.enable_page_index = true;
    config
}

/// The runtime environment of a session: at most `memory_bytes` for the
/// operators of each statement (sorts, joins, aggregations), if given, and
/// within the process's budget ([`budget`]), if one is set.
fn environment(memory_bytes: Option<usize>) -> RuntimeEnvBuilder {
    let builder = match memory_bytes {
        Some(bytes) => RuntimeEnvBuilder::new().with_memory_limit(bytes, 1.0),
        None => RuntimeEnvBuilder::new(),
    };
    match budget::process_memory() {
        Some(budget) => {
            let inner = builder.memory_pool.clone().unwrap_or_else(|| {
                Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default())
            });
            builder.with_memory_pool(Arc::new(budget::Budgeted { inner, budget }))
        }
        None => builder,
    }
}

/// What the sessions of this process keep of the segment files they read:
/// their statistics (what planning reads of every file's footer) and their
/// parsed footers and page indexes (what the scan reads before any page).
/// Segments are immutable, so these hold until a file is expired; an entry is
/// used only while the file keeps the size and modification time it was read
/// with. Each cache is bounded ([`FILE_STATISTICS_CACHE_BYTES`],
/// [`FILE_METADATA_CACHE_BYTES`]) and drops its least recently used entries.
fn shared_caches() -> datafusion::execution::cache::cache_manager::CacheManagerConfig {
    use datafusion::execution::cache::cache_manager::{
        CacheManagerConfig, FileMetadataCache, FileStatisticsCache,
    };
    use datafusion::execution::cache::default_cache::DefaultCache;
    type Caches = (Arc<FileStatisticsCache>, Arc<FileMetadataCache>);
    static CACHES: std::sync::LazyLock<Caches> = std::sync::LazyLock::new(|| {
        (
            Arc::new(
                DefaultCache::new(FILE_STATISTICS_CACHE_BYTES).with_name("segment statistics"),
            ),
            Arc::new(DefaultCache::new(FILE_METADATA_CACHE_BYTES).with_name("segment footers")),
        )
    });
    let (statistics, footers) = &*CACHES;
    CacheManagerConfig::default()
        .with_file_statistics_cache(Some(Arc::clone(statistics)))
        .with_file_statistics_cache_limit(FILE_STATISTICS_CACHE_BYTES)
        .with_file_metadata_cache(Some(Arc::clone(footers)))
        .with_metadata_cache_limit(FILE_METADATA_CACHE_BYTES)
}

/// The most bytes a node's answer to a fragment holds when the session has
/// no memory bound of its own.
pub const DEFAULT_ANSWER_BYTES: u64 = 1 << 30;

/// The bound of the segment statistics the process's SQL sessions share.
pub const FILE_STATISTICS_CACHE_BYTES: usize = 32 << 20;
/// The bound of the parsed segment footers the process's SQL sessions share.
pub const FILE_METADATA_CACHE_BYTES: usize = 128 << 20;

/// The runtime every session of the process runs its statements on, made at
/// the first: a worker per core, and one more for each statement given up on
/// that may still compute ([`abandoned::MAX_ABANDONED`]: an abort stops a
/// statement only where it yields), so that those never hold every worker.
/// How many statements run at once is the admission's to bound.
fn runtime() -> Result<tokio::runtime::Handle, SqlError> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime.handle().clone());
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores + abandoned::MAX_ABANDONED)
        .thread_name("sql")
        .thread_stack_size(STACK_BYTES)
        // IO for the object store's client.
        .enable_all()
        .build()
        .map_err(SqlError::Runtime)?;
    // Another thread may have made one meanwhile: the first stays, and this
    // one (no task on it yet) is let go without waiting.
    if let Err(unused) = RUNTIME.set(runtime) {
        unused.shutdown_background();
    }
    Ok(RUNTIME.get().expect("set above").handle().clone())
}

/// An archive opened for SQL.
pub struct SqlSession {
    context: SessionContext,
    /// The process's SQL runtime (see [`runtime`]).
    runtime: tokio::runtime::Handle,
    /// Whether statements other than queries may run ([`Self::allow_writes`]).
    writes: bool,
    /// Segments the scans read and skipped, and the catalog's unreadable lines.
    scans: table::Scans,
    catalog_damage: Vec<String>,
    /// The archive's own tables, unviewed: what a cluster's fragments scan
    /// ([`Self::run_fragment`]).
    sources: Vec<(Table, Arc<dyn datafusion::datasource::TableProvider>)>,
    /// The archive's directory, if the session is over one.
    archive_root: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSession").finish_non_exhaustive()
    }
}

impl SqlSession {
    fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Opens the archive at `root` read-only and registers the `packets` and
    /// `flows` tables.
    pub fn open(root: &Path) -> Result<Self, SqlError> {
        Self::open_within(root, None)
    }

    /// As [`Self::open`], with at most `memory_bytes` for the operators of
    /// each statement, if given (see [`Self::over`]).
    pub fn open_within(root: &Path, memory_bytes: Option<usize>) -> Result<Self, SqlError> {
        let archive = Archive::open_reader(root)?;
        let index = AddressIndex::open_read_only(&archive.index_dir())?;
        Self::over(
            Arc::new(archive),
            index.map(Arc::new),
            memory_bytes,
            Unsealed::default(),
        )
    }

    /// A session over an archive and address index already open, running on
    /// (shared with the other readers of a long-lived reader), with at most
    /// `memory_bytes` of memory for its operators (sorts, joins, aggregations)
    /// if given: a statement that needs more fails with a clear error.
    /// `unsealed` rows (a live writer's tail) are in the tables too.
    pub fn over(
        archive: Arc<Archive>,
        index: Option<Arc<AddressIndex>>,
        memory_bytes: Option<usize>,
        unsealed: Unsealed,
    ) -> Result<Self, SqlError> {
        let root = archive.root().to_path_buf();
        let catalog_damage = archive
            .catalog_damage()
            .iter()
            .map(|damage| {
                format!(
                    "{}: byte {}: {}; the segment it names is not read",
                    archive.catalog().path().display(),
                    damage.offset,
                    damage.reason
                )
            })
            .collect();
        let scans = table::Scans::default();
        let config = session_config();
        let runtime_env = environment(memory_bytes).with_cache_manager(shared_caches());
        let context = SessionContext::new_with_config_rt(config, runtime_env.build_arc()?);
        let session = Self::of_context(context)?;
        let context = &session.context;
        let segments = Arc::new(
            SegmentTable::new(
                Arc::clone(&archive),
                Table::Packets,
                index,
                Arc::clone(&scans),
            )
            .with_unsealed(unsealed.packets),
        );
        context.add_analyzer_rule(Arc::new(summary::BySummary::new(Arc::clone(&segments))));
        let packets: Arc<dyn datafusion::datasource::TableProvider> = segments;
        context.register_table("packets", Arc::clone(&packets))?;
        let flows = if unsealed.flows.is_empty() {
            Vec::new()
        } else {
            let mut builder = hindsight_store::flows::FlowBatchBuilder::new();
            for record in &unsealed.flows {
                builder.append(record);
            }
            vec![builder.finish()]
        };
        let records: Arc<dyn datafusion::datasource::TableProvider> = Arc::new(
            SegmentTable::new(archive, Table::Flows, None, Arc::clone(&scans)).with_unsealed(flows),
        );
        context.register_table("flows", table::with_uid("flows", Arc::clone(&records))?)?;
        Ok(Self {
            scans,
            catalog_damage,
            sources: vec![(Table::Packets, packets), (Table::Flows, records)],
            archive_root: Some(root),
            ..session
        })
    }

    /// A session without an archive: the functions, and the live tables once
    /// [`Self::set_live`] gives them.
    pub fn live_only() -> Result<Self, SqlError> {
        Self::live_only_within(None)
    }

    /// As [`Self::live_only`], with at most `memory_bytes` for the operators
    /// of each statement, if given.
    pub fn live_only_within(memory_bytes: Option<usize>) -> Result<Self, SqlError> {
        let context = SessionContext::new_with_config_rt(
            session_config(),
            environment(memory_bytes).build_arc()?,
        );
        Self::of_context(context)
    }

    /// A session of `context`, with hindsight's functions and no tables.
    fn of_context(context: SessionContext) -> Result<Self, SqlError> {
        functions::register(&context);
        Ok(Self {
            context,
            runtime: runtime()?,
            writes: false,
            scans: table::Scans::default(),
            catalog_damage: Vec::new(),
            sources: Vec::new(),
            archive_root: None,
        })
    }

    /// A session over a cluster's nodes: `packets` and `flows` are theirs, a
    /// statement's plan is cut into fragments that the nodes that may hold
    /// its rows run on their own archives (filters, projections, partial
    /// aggregations), and the rest runs here over their answers (see
    /// `federate`). A node that does not answer is reported to `nodes`.
    /// With `memory_bytes`, the operators that run here have at most that
    /// much memory, and each node's answer to a fragment holds at most that
    /// many bytes (else [`DEFAULT_ANSWER_BYTES`]).
    pub fn federated(nodes: Arc<dyn Nodes>, memory_bytes: Option<usize>) -> Result<Self, SqlError> {
        use datafusion::execution::session_state::SessionStateBuilder;
        let max_answer_bytes = memory_bytes.map_or(DEFAULT_ANSWER_BYTES, |bytes| bytes as u64);
        let state = SessionStateBuilder::new()
            .with_config(session_config())
            .with_runtime_env(environment(memory_bytes).build_arc()?)
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(federate::Federate::new(
                Arc::clone(&nodes),
                max_answer_bytes,
            )))
            .build();
        let session = Self::of_context(SessionContext::new_with_state(state))?;
        session.context.register_table(
            "packets",
            Arc::new(federate::RemoteTable::new(
                Table::Packets,
                Arc::clone(&nodes),
            )),
        )?;
        session.context.register_table(
            "flows",
            table::with_uid(
                "flows",
                Arc::new(federate::RemoteTable::new(Table::Flows, nodes)),
            )?,
        )?;
        Ok(session)
    }

    /// Reads the segments whose local file is gone from their copies in the
    /// object store `settings` names (`[archive] object_store`), as
    /// `objects.log` lists them; without settings, the session as it is.
    pub fn with_objects(self, settings: Option<&ObjectStoreSettings>) -> Result<Self, SqlError> {
        let Some(settings) = settings else {
            return Ok(self);
        };
        let objects = Arc::new(objects::Objects::open(settings)?);
        let (url, store) = objects.store();
        self.context.register_object_store(url, store);
        let copied = self
            .archive_root
            .as_deref()
            .map(hindsight_store::objects::read_log)
            .unwrap_or_default();
        if let Ok(mut scans) = self.scans.lock() {
            scans.remote = Some((objects, copied));
        }
        Ok(self)
    }

    /// Runs a fragment of a statement asked of the cluster (the protobuf form
    /// of a physical plan, see `federate`) over this archive and writes its
    /// rows to `out` as an Arrow IPC stream. Only filters, projections and a
    /// partial aggregation over one of the tables are run; anything else is
    /// refused. Returns the rows written.
    pub fn run_fragment(
        &self,
        fragment: &[u8],
        out: &mut dyn Write,
        limits: &Limits,
    ) -> Result<u64, SqlError> {
        let context = self.context.clone();
        let sources = self.sources.clone();
        let fragment = fragment.to_vec();
        let max_rows = limits.max_rows;
        let run = async move {
            let task = context.task_ctx();
            let plan = federate::decode_fragment(&fragment, &task)?;
            let state = context.state();
            let provider = |table: Table| {
                sources
                    .iter()
                    .find(|(t, _)| *t == table)
                    .map(|(_, provider)| Arc::clone(provider))
            };
            let plan = federate::localize(plan, &state, &provider).await?;
            let stream = federate::execute_fragment(plan, task)?;
            let schema = stream.schema();
            Ok::<_, SqlError>((schema, gather(stream, max_rows).await?))
        };
        let (schema, batches) = self.within(limits.timeout, &limits.cancel, run)?;
        let mut writer = datafusion::arrow::ipc::writer::StreamWriter::try_new(out, &schema)?;
        let mut rows = 0u64;
        for batch in &batches {
            writer.write(batch)?;
            rows += batch.num_rows() as u64;
        }
        writer.finish()?;
        Ok(rows)
    }

    /// Makes `live_packets` and `live_flows` hold `packets` (batches of the
    /// `packets` schema) and `flows` (batches of connection records,
    /// `hindsight_store::flows::FlowBatchBuilder`): the rows of one window.
    pub fn set_live(
        &self,
        packets: Vec<RecordBatch>,
        flows: Vec<RecordBatch>,
    ) -> Result<(), SqlError> {
        let packets = MemTable::try_new(hindsight_store::schema::packets_schema(), vec![packets])?;
        let flows = table::with_uid(
            LIVE_FLOWS,
            Arc::new(MemTable::try_new(
                hindsight_store::flows::flows_schema(),
                vec![flows],
            )?),
        )?;
        self.context.deregister_table(LIVE_PACKETS)?;
        self.context.deregister_table(LIVE_FLOWS)?;
        self.context
            .register_table(LIVE_PACKETS, Arc::new(packets))?;
        self.context.register_table(LIVE_FLOWS, flows)?;
        Ok(())
    }

    /// Makes `live_packets` and `live_flows` the archive's own rows of
    /// `[start_ns, end_ns)`: packets by `ts`, connection records by the time
    /// they ended (`last_ts`), as a watch's window holds them; so a watch runs
    /// over the archive's past as over a stream.
    pub fn set_live_from_archive(&self, start_ns: i64, end_ns: i64) -> Result<(), SqlError> {
        use datafusion::prelude::{col, lit};
        let at = |ns| {
            lit(ScalarValue::TimestampNanosecond(
                Some(ns),
                Some("UTC".into()),
            ))
        };
        let (packets, flows) = self.runtime().block_on(async {
            let packets = self
                .context
                .table("packets")
                .await?
                .filter(col("ts").gt_eq(at(start_ns)).and(col("ts").lt(at(end_ns))))?;
            // A connection starts before it ends: the condition on `ts` lets
            // the catalog skip the segments that start later.
            let flows = self.context.table("flows").await?.filter(
                col("last_ts")
                    .gt_eq(at(start_ns))
                    .and(col("last_ts").lt(at(end_ns)))
                    .and(col("ts").lt(at(end_ns))),
            )?;
            Ok::<_, DataFusionError>((packets.into_view(), flows.into_view()))
        })?;
        self.context.deregister_table(LIVE_PACKETS)?;
        self.context.deregister_table(LIVE_FLOWS)?;
        self.context.register_table(LIVE_PACKETS, packets)?;
        self.context.register_table(LIVE_FLOWS, flows)?;
        Ok(())
    }

    /// As [`Self::collect`], with the named parameters of `sql` (`:name`) bound
    /// to `params`.
    pub fn collect_with(
        &self,
        sql: &str,
        params: &[(&str, ScalarValue)],
        max_rows: Option<u64>,
    ) -> Result<Vec<RecordBatch>, SqlError> {
        let params = param_values(params);
        let statement = self.parse(sql)?;
        self.runtime().block_on(collect_async(
            &self.context,
            &statement,
            &Binding::params(Some(&params)),
            max_rows,
            self.writes,
            &self.scans,
        ))
    }

    /// The packets matching `filter` in each of `buckets.count` buckets of
    /// `buckets.width_ns` from `buckets.start_ns`, within `time` (inclusive):
    /// a scan of `packets` that decodes only `ts` and the columns the filter
    /// names, pruned by the table's time, address and statistics pruning, and
    /// counted by DataFusion's grouped aggregation. A damaged segment is left
    /// out and named by [`Self::skipped`], as for a statement.
    pub fn count_by_time(
        &self,
        filter: &ColumnarFilter,
        time: hindsight_store::TimeRange,
        buckets: TimeBuckets,
        limits: &Limits,
    ) -> Result<Vec<u64>, SqlError> {
        use datafusion::arrow::array::{Array, Int64Array};
        use datafusion::arrow::datatypes::DataType;
        use datafusion::logical_expr::{cast, col, lit};

        let mut counts = vec![0u64; buckets.count];
        let width = buckets.width_ns.max(1);
        let (low, high) = buckets.window(time);
        if low > high {
            return Ok(counts);
        }
        let ts = |nanos: i64| {
            lit(ScalarValue::TimestampNanosecond(
                Some(nanos),
                Some("UTC".into()),
            ))
        };
        let condition = filter
            .expr()
            .clone()
            .and(col(hindsight_store::schema::col::TS).between(ts(low), ts(high)));
        let slot = (cast(col(hindsight_store::schema::col::TS), DataType::Int64)
            - lit(buckets.start_ns))
            / lit(width);
        let context = self.context.clone();
        let scans = Arc::clone(&self.scans);
        let batches = self.within(limits.timeout, &limits.cancel, async move {
            loop {
                let frame = context
                    .table("packets")
                    .await?
                    .filter(condition.clone())?
                    .aggregate(
                        vec![slot.clone().alias("slot")],
                        vec![datafusion::functions_aggregate::expr_fn::count(lit(1)).alias("n")],
                    )?;
                match frame.collect().await {
                    Ok(batches) => return Ok(batches),
                    Err(error) => {
                        if table::exclude_damaged(&scans) == 0 {
                            return Err(SqlError::DataFusion(error));
                        }
                    }
                }
            }
        })?;
        for batch in &batches {
            let column = |index: usize| {
                batch
                    .column(index)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .ok_or_else(|| {
                        SqlError::DataFusion(DataFusionError::Internal(
                            "a histogram's slot and count are 64-bit integers".to_owned(),
                        ))
                    })
            };
            let (slots, totals) = (column(0)?, column(1)?);
            for row in 0..batch.num_rows() {
                if slots.is_null(row) {
                    continue;
                }
                let slot = usize::try_from(slots.value(row)).ok();
                if let Some(count) = slot.and_then(|slot| counts.get_mut(slot)) {
                    *count += u64::try_from(totals.value(row)).unwrap_or(0);
                }
            }
        }
        Ok(counts)
    }

    /// Sets the home network `ip_home(addr)` tests against (the archive's
    /// `[network] home`, or the command line's).
    pub fn set_home(&self, home: Networks) {
        functions::register_home(&self.context, Some(home));
    }

    /// Parses `sql` as a script of stages (see [`Script`]).
    pub fn script(&self, sql: &str) -> Result<Script, SqlError> {
        let script = stages::parse(&self.context.state(), sql)?;
        if !self.writes {
            for (_, statement) in &script.stages {
                policy::check_read_only(statement)?;
            }
            policy::check_read_only(&script.answer)?;
        }
        Ok(script)
    }

    /// Plans each statement of `script` without running it (each stage's
    /// table is registered empty, with its columns, for the statements after
    /// it): the errors the script would meet before reading a row.
    pub fn prepare_script(&self, script: &Script) -> Result<(), SqlError> {
        self.runtime().block_on(async {
            for (name, statement) in &script.stages {
                let plan = plan(&self.context, statement, self.writes).await?;
                let schema = Arc::new(plan.schema().as_arrow().clone());
                self.set_stage(name, MemTable::try_new(schema, vec![Vec::new()])?)?;
            }
            plan(&self.context, &script.answer, self.writes).await?;
            Ok(())
        })
    }

    /// Runs `script` with its named parameters bound to `params`: each stage,
    /// whose rows become its table, then the answer, whose rows it returns.
    /// `max_rows` bounds each statement's rows.
    pub fn run_script(
        &self,
        script: &Script,
        params: &[(&str, ScalarValue)],
        max_rows: Option<u64>,
    ) -> Result<Vec<RecordBatch>, SqlError> {
        let limits = Limits {
            max_rows,
            ..Limits::default()
        };
        self.run_script_within(script, params, &limits)
    }

    /// As [`Self::run_script`] within `limits`: at most its rows per
    /// statement, cancelled at its timeout or once its flag is set (see
    /// [`Self::within`]).
    pub fn run_script_within(
        &self,
        script: &Script,
        params: &[(&str, ScalarValue)],
        limits: &Limits,
    ) -> Result<Vec<RecordBatch>, SqlError> {
        let run = run_script(
            self.context.clone(),
            script.clone(),
            param_values(params),
            limits.max_rows,
            self.writes,
            Arc::clone(&self.scans),
        );
        if limits.timeout.is_none() && limits.cancel == Cancel::default() {
            return self.runtime().block_on(run);
        }
        self.within(limits.timeout, &limits.cancel, run)
    }

    /// Whether a statement of `script` may read the packets' stored bytes
    /// (`live_packets.data`): it scans `live_packets` and its plan names a
    /// column `data` (`SELECT *` names every column). A watch that does not
    /// need them is spared building them.
    pub fn reads_live_packet_data(&self, script: &Script) -> Result<bool, SqlError> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        use datafusion::logical_expr::{Expr, LogicalPlan};
        let data = hindsight_store::schema::col::DATA;
        self.runtime().block_on(async {
            let (mut scans, mut names) = (false, false);
            for statement in script
                .stages
                .iter()
                .map(|(_, statement)| statement)
                .chain([&script.answer])
            {
                let plan = plan(&self.context, statement, self.writes).await?;
                plan.apply_with_subqueries(|node| {
                    if let LogicalPlan::TableScan(scan) = node
                        && scan.table_name.table() == LIVE_PACKETS
                    {
                        scans = true;
                    }
                    node.apply_expressions(|expr| {
                        expr.apply(|e| {
                            if matches!(e, Expr::Column(c) if c.name == data) {
                                names = true;
                            }
                            Ok(TreeNodeRecursion::Continue)
                        })
                    })
                })?;
            }
            Ok(scans && names)
        })
    }

    /// The tables `script` reads besides its own stages.
    pub fn tables_of_script(&self, script: &Script) -> Result<Vec<String>, SqlError> {
        let state = self.context.state();
        let mut tables = Vec::new();
        for statement in script
            .stages
            .iter()
            .map(|(_, statement)| statement)
            .chain([&script.answer])
        {
            for table in state.resolve_table_references(statement)? {
                let table = table.table().to_owned();
                if !script.stage_names().any(|stage| stage == table) && !tables.contains(&table) {
                    tables.push(table);
                }
            }
        }
        Ok(tables)
    }

    fn set_stage(&self, name: &str, table: MemTable) -> Result<(), SqlError> {
        set_stage(&self.context, name, table)
    }

    fn parse(&self, sql: &str) -> Result<DfStatement, SqlError> {
        let state = self.context.state();
        shape::check_in(&state, sql)?;
        let dialect = state.config().options().sql_parser.dialect;
        Ok(state.sql_to_statement(sql, &dialect)?)
    }

    /// What the statements run so far went without: the catalog's unreadable
    /// lines and the segment files that were gone or not their sealed size, one
    /// line each. Empty when every answer was complete.
    pub fn skipped(&self) -> Vec<String> {
        let mut lines = self.catalog_damage.clone();
        if let Ok(scans) = self.scans.lock() {
            lines.extend(scans.skipped.iter().cloned());
        }
        lines
    }

    /// [`Self::skipped`] as warnings for people, with a last line saying the
    /// answer is incomplete; empty when it is whole.
    pub fn incomplete_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .skipped()
            .iter()
            .map(|line| format!("warning: {line}"))
            .collect();
        if !lines.is_empty() {
            lines.push(
                "warning: the answer is incomplete (`hindsight check` lists the damage, \
                 `--repair` sets it aside)"
                    .to_owned(),
            );
        }
        lines
    }

    /// Lets statements that write, create, drop or set options run (`COPY ... TO`,
    /// `CREATE EXTERNAL TABLE`, `SET`): for a user's own command line, never for
    /// a surface the network reaches. Without it every such statement fails with
    /// [`SqlError::ReadOnly`] (see `policy`).
    pub fn allow_writes(mut self) -> Self {
        self.writes = true;
        self
    }

    /// Parses `sql` and checks that this session may run it (see `policy`),
    /// without running it.
    pub fn check(&self, sql: &str) -> Result<(), SqlError> {
        if self.writes {
            return Ok(());
        }
        policy::check_read_only(&self.parse(sql)?)
    }

    /// Returns the plan of `sql`, with the pruning the `packets` scans will do.
    pub fn explain(&self, sql: &str) -> Result<String, SqlError> {
        let statement = format!("EXPLAIN {sql}");
        let batches = self.collect(&statement, None)?;
        let mut text = String::new();
        for batch in &batches {
            let plan_column = batch.column(1);
            let plans = datafusion::arrow::array::as_string_array(plan_column);
            let types = datafusion::arrow::array::as_string_array(batch.column(0));
            for row in 0..batch.num_rows() {
                text.push_str(types.value(row));
                text.push_str(":\n");
                text.push_str(plans.value(row));
                text.push('\n');
            }
        }
        Ok(text)
    }

    /// Runs `sql` and writes the result to `out` in `format`.
    pub fn run(
        &self,
        sql: &str,
        format: Format,
        out: &mut dyn Write,
        limits: &Limits,
    ) -> Result<u64, SqlError> {
        let batches = if limits.timeout.is_some() || limits.cancel != Cancel::default() {
            self.collect_within(sql, limits)?
        } else {
            self.collect(sql, limits.max_rows)?
        };
        hindsight_output::rows::write(&batches, format, out)?;
        Ok(batches.iter().map(|b| b.num_rows() as u64).sum())
    }

    /// Runs `sql` and returns its result, failing once it exceeds `max_rows`.
    pub fn collect(&self, sql: &str, max_rows: Option<u64>) -> Result<Vec<RecordBatch>, SqlError> {
        let statement = self.parse(sql)?;
        self.runtime().block_on(collect_async(
            &self.context,
            &statement,
            &Binding::params(None),
            max_rows,
            self.writes,
            &self.scans,
        ))
    }

    /// As [`Self::collect`], cancelled after the limits' timeout or once
    /// their flag is set (see [`Self::within`]).
    fn collect_within(&self, sql: &str, limits: &Limits) -> Result<Vec<RecordBatch>, SqlError> {
        let context = self.context.clone();
        let statement = self.parse(sql)?;
        let writes = self.writes;
        let scans = Arc::clone(&self.scans);
        let max_rows = limits.max_rows;
        self.within(limits.timeout, &limits.cancel, async move {
            let binding = Binding::params(None);
            collect_async(&context, &statement, &binding, max_rows, writes, &scans).await
        })
    }

    /// Runs `work` as a task of the session's runtime while this thread waits
    /// on a plain channel (the runtime's timers are driven by its workers, which
    /// a heavy statement keeps busy), cancelled after `timeout` or once `cancel`
    /// is set (looked at every [`CANCEL_POLL`]): the task is aborted, which
    /// drops its streams and with them DataFusion's tasks. A panic in
    /// DataFusion ends the task, not this thread. Work that does not yield
    /// (planning, one large batch) computes on after the abort; it counts as
    /// given up on until it does (see [`abandoned::check`]).
    fn within<T: Send + 'static>(
        &self,
        timeout: Option<std::time::Duration>,
        cancel: &Cancel,
        work: impl std::future::Future<Output = Result<T, SqlError>> + Send + 'static,
    ) -> Result<T, SqlError> {
        let (running, waiter) = abandoned::LEDGER.start();
        let (done, result) = std::sync::mpsc::sync_channel(1);
        let task = self.runtime().spawn(async move {
            // Dropped with the task: at its end, or at the first yield after
            // it was aborted.
            let _running = running;
            let _ = done.send(work.await);
        });
        let watched = budget::watch(task.abort_handle());
        let deadline = timeout.map(|timeout| std::time::Instant::now() + timeout);
        loop {
            let left = deadline.map_or(CANCEL_POLL, |deadline| {
                deadline.saturating_duration_since(std::time::Instant::now())
            });
            match result.recv_timeout(left.min(CANCEL_POLL)) {
                Ok(Err(SqlError::DataFusion(error))) => {
                    // Refused a reservation or cancelled: the server was past
                    // its resident bound, which is not the statement's fault.
                    if let Some(refusal) =
                        watched.refusal().or_else(|| budget::over_resident(&error))
                    {
                        return Err(SqlError::OverMemory(refusal));
                    }
                    return Err(SqlError::DataFusion(error));
                }
                Ok(result) => return result,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if cancel.is_cancelled() {
                        task.abort();
                        waiter.give_up();
                        return Err(SqlError::Cancelled);
                    }
                    if let (Some(deadline), Some(timeout)) = (deadline, timeout)
                        && std::time::Instant::now() >= deadline
                    {
                        task.abort();
                        waiter.give_up();
                        return Err(SqlError::TimedOut {
                            seconds: timeout.as_secs(),
                        });
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    if let Some(refusal) = watched.refusal() {
                        return Err(SqlError::OverMemory(refusal));
                    }
                    return Err(SqlError::DataFusion(DataFusionError::Execution(
                        "the statement failed as it ran (a panic in DataFusion)".to_owned(),
                    )));
                }
            }
        }
    }
}

/// Equal time buckets: `count` of `width_ns` from `start_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeBuckets {
    /// Where the first bucket starts.
    pub start_ns: i64,
    /// Each bucket's width.
    pub width_ns: i64,
    /// How many buckets.
    pub count: usize,
}

impl TimeBuckets {
    /// The instants counted: `time` (inclusive) within the buckets, as
    /// `(first, last)`; empty (first above last) when they do not meet.
    pub fn window(&self, time: hindsight_store::TimeRange) -> (i64, i64) {
        let width = self.width_ns.max(1);
        let last =
            i64::try_from(i128::from(self.start_ns) + i128::from(width) * self.count as i128 - 1)
                .unwrap_or(i64::MAX);
        (
            time.start_nanos.max(self.start_ns),
            time.end_nanos.min(last),
        )
    }
}

/// How often a running statement looks at its cancel flag.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Named parameters as DataFusion binds them.
fn param_values(params: &[(&str, ScalarValue)]) -> ParamValues {
    ParamValues::from(
        params
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect::<Vec<_>>(),
    )
}

/// What a statement's plan is bound to before it runs: named parameters, and
/// the stages run before it (their subqueries become values, see `stages`).
struct Binding<'a> {
    params: Option<&'a ParamValues>,
    stages: &'a BTreeSet<String>,
}

/// No stages.
static NO_STAGES: BTreeSet<String> = BTreeSet::new();

impl<'a> Binding<'a> {
    fn params(params: Option<&'a ParamValues>) -> Self {
        Self {
            params,
            stages: &NO_STAGES,
        }
    }
}

/// Makes `table` the stage `name` of `context`.
fn set_stage(context: &SessionContext, name: &str, table: MemTable) -> Result<(), SqlError> {
    context.deregister_table(name)?;
    context.register_table(name, Arc::new(table))?;
    Ok(())
}

/// Runs each stage of `script`, whose rows become its table, then its
/// answer, whose rows it returns (see [`SqlSession::run_script`]).
async fn run_script(
    context: SessionContext,
    script: Script,
    params: ParamValues,
    max_rows: Option<u64>,
    writes: bool,
    scans: table::Scans,
) -> Result<Vec<RecordBatch>, SqlError> {
    let mut stages = BTreeSet::new();
    for (name, statement) in &script.stages {
        let binding = Binding {
            params: Some(&params),
            stages: &stages,
        };
        let rows = collect_async(&context, statement, &binding, max_rows, writes, &scans).await?;
        let schema = match rows.first() {
            Some(batch) => batch.schema(),
            None => {
                let plan = plan(&context, statement, writes).await?;
                Arc::new(plan.schema().as_arrow().clone())
            }
        };
        set_stage(&context, name, MemTable::try_new(schema, vec![rows])?)?;
        stages.insert(name.clone());
    }
    let binding = Binding {
        params: Some(&params),
        stages: &stages,
    };
    collect_async(&context, &script.answer, &binding, max_rows, writes, &scans).await
}

/// Runs `statement`; one that fails on a damaged segment runs again without
/// it (as often as that finds another), so the answer comes from the rest and
/// [`SqlSession::skipped`] says what it went without.
async fn collect_async(
    context: &SessionContext,
    statement: &DfStatement,
    binding: &Binding<'_>,
    max_rows: Option<u64>,
    writes: bool,
    scans: &table::Scans,
) -> Result<Vec<RecordBatch>, SqlError> {
    loop {
        match collect_once(context, statement, binding, max_rows, writes).await {
            Err(SqlError::DataFusion(error)) => {
                if table::exclude_damaged(scans) == 0 {
                    return Err(SqlError::DataFusion(error));
                }
            }
            result => return result,
        }
    }
}

async fn collect_once(
    context: &SessionContext,
    statement: &DfStatement,
    binding: &Binding<'_>,
    max_rows: Option<u64>,
    writes: bool,
) -> Result<Vec<RecordBatch>, SqlError> {
    let mut plan = plan(context, statement, writes).await?;
    if let Some(params) = binding.params {
        plan = plan.with_param_values(params.clone())?;
    }
    let plan = stages::bind(context, plan, binding.stages).await?;
    let frame = context.execute_logical_plan(plan).await?;
    gather(frame.execute_stream().await?, max_rows).await
}

/// Plans `statement`, refusing (unless `writes`) what this session must not
/// run (see `policy`).
async fn plan(
    context: &SessionContext,
    statement: &DfStatement,
    writes: bool,
) -> Result<datafusion::logical_expr::LogicalPlan, SqlError> {
    let state = context.state();
    if !writes {
        policy::check_read_only(statement)?;
    }
    let plan = state.statement_to_plan(statement.clone()).await?;
    if !writes {
        policy::read_only_options().verify_plan(&plan)?;
    }
    Ok(plan)
}

/// The batches of `stream`, failing once they pass `max_rows`.
async fn gather(
    mut stream: datafusion::physical_plan::SendableRecordBatchStream,
    max_rows: Option<u64>,
) -> Result<Vec<RecordBatch>, SqlError> {
    let mut batches = Vec::new();
    let mut rows = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        if let Some(max_rows) = max_rows.filter(|&max| rows > max) {
            return Err(SqlError::TooManyRows { max_rows });
        }
        batches.push(batch);
    }
    Ok(batches)
}
