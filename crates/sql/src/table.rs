//! The `packets` and `flows` tables: the catalogued segments of a table as a
//! DataFusion table provider. Each scan first keeps only the segments the statement
//! can match (catalog time ranges; for `packets` also the address postings), then
//! hands them to DataFusion's Parquet scan, which prunes row groups and pages by
//! statistics and Bloom filters. The `flows` table is a view over its segments that
//! derives the `uid` the segments do not keep ([`flows_table`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::catalog::view::ViewTable;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::prelude::col;
use hindsight_index::AddressIndex;
use hindsight_model::SegmentId;
use hindsight_store::archive::checksum_file;
use hindsight_store::flows::{UID_INPUTS, col::UID};
use hindsight_store::{Archive, CatalogEntry, SegmentReader, Table};

use crate::{functions, prune};

/// A view of connection records (`records`, of the `flows` schema) with their
/// `uid` derived, which the stored form does not keep.
pub fn with_uid(name: &str, records: Arc<dyn TableProvider>) -> Result<Arc<dyn TableProvider>> {
    let udf = Arc::new(functions::flow_uid());
    let columns: Vec<Expr> = records
        .schema()
        .fields()
        .iter()
        .map(|field| {
            if field.name() == UID {
                udf.call(UID_INPUTS.iter().map(|name| col(*name)).collect())
                    .alias(UID)
            } else {
                col(field.name())
            }
        })
        .collect();
    let plan = LogicalPlanBuilder::scan(name, provider_as_source(records), None)?
        .project(columns)?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// What the scans of a session read and skipped, shared by its tables.
pub type Scans = Arc<std::sync::Mutex<ScanState>>;

/// See [`Scans`].
#[derive(Debug, Default)]
pub struct ScanState {
    /// What was skipped, one line each (`segment 42 (packets/seg-…) skipped: …`).
    pub skipped: BTreeSet<String>,
    /// Segments found damaged, left out of every later scan.
    excluded: BTreeSet<SegmentId>,
    /// Segments scans handed to DataFusion, with their files.
    scanned: BTreeMap<SegmentId, (PathBuf, CatalogEntry)>,
    /// The archive's object store and the segments copied there, whose copy
    /// is read once the local file is gone.
    pub remote: Option<(
        Arc<crate::objects::Objects>,
        hindsight_store::objects::CopyLog,
    )>,
}

impl ScanState {
    fn skip(&mut self, entry: &CatalogEntry, problem: &str) {
        self.excluded.insert(entry.segment_id());
        self.skipped.insert(format!(
            "segment {} ({}) skipped: {problem}",
            entry.id, entry.file
        ));
    }
}

/// After a statement failed: checks the files of the segments it scanned
/// against the CRC-32 the catalog recorded when each was sealed, and leaves the
/// damaged ones out of later scans (naming the row group and column where a
/// page shows the damage). Returns how many it found; with none, the failure
/// was not the archive's.
pub fn exclude_damaged(scans: &Scans) -> usize {
    let scanned: Vec<(PathBuf, CatalogEntry)> = match scans.lock() {
        Ok(state) => state
            .scanned
            .iter()
            .filter(|(id, _)| !state.excluded.contains(id))
            .map(|(_, scanned)| scanned.clone())
            .collect(),
        Err(_) => return 0,
    };
    let mut found = 0;
    for (path, entry) in scanned {
        let problem = match checksum_file(&path) {
            Ok((_, crc)) if crc == entry.crc32 => continue,
            Ok(_) => match SegmentReader::open(&path).map(|reader| reader.find_damage()) {
                Ok(Some(damage)) => format!("bytes changed since it was sealed: {damage}"),
                Ok(None) => "bytes changed since it was sealed".to_owned(),
                Err(error) => error.to_string(),
            },
            Err(error) => error.to_string(),
        };
        if let Ok(mut state) = scans.lock() {
            state.skip(&entry, &problem);
            found += 1;
        }
    }
    found
}

/// One table of one archive.
#[derive(Debug)]
pub struct SegmentTable {
    archive: Arc<Archive>,
    table: Table,
    /// Address postings (packet segments only).
    index: Option<Arc<AddressIndex>>,
    schema: SchemaRef,
    scans: Scans,
    /// Rows not yet in a segment (a live writer's tail), scanned after them.
    unsealed: Vec<RecordBatch>,
}

impl SegmentTable {
    /// Creates `table` over the archive's catalogued segments; `index` prunes
    /// `packets` scans by address.
    pub fn new(
        archive: Arc<Archive>,
        table: Table,
        index: Option<Arc<AddressIndex>>,
        scans: Scans,
    ) -> Self {
        let index = index.filter(|_| table == Table::Packets);
        Self {
            archive,
            table,
            index,
            schema: table.schema(),
            scans,
            unsealed: Vec::new(),
        }
    }

    /// Rows not yet in a segment.
    pub(crate) fn unsealed(&self) -> &[RecordBatch] {
        &self.unsealed
    }

    /// Whether scans may read copies in an object store.
    pub(crate) fn reads_copies(&self) -> bool {
        self.scans
            .lock()
            .map_or(true, |scans| scans.remote.is_some())
    }

    /// The table with `batches` (of its schema) besides its segments.
    pub fn with_unsealed(mut self, batches: Vec<RecordBatch>) -> Self {
        self.unsealed = batches;
        self
    }

    /// The segments a scan with `filters` must read, each with the URL of its
    /// file: the local one, or its copy in the object store once it is gone.
    pub(crate) fn segments(&self, filters: &[Expr]) -> Result<Vec<(CatalogEntry, String)>> {
        let time = prune::time_range(filters);
        let mut segments: Vec<CatalogEntry> = self
            .archive
            .catalog()
            .entries_of(self.table)
            .filter(|entry| entry.overlaps(time))
            .cloned()
            .collect();
        if let Some(index) = &self.index {
            for set in prune::address_sets(filters) {
                let lookup = index
                    .lookup(&set)
                    .map_err(|e| DataFusionError::External(e.into()))?;
                segments.retain(|entry| lookup.may_hold(entry.segment_id()));
            }
        }
        segments.sort_by_key(|entry| (entry.min_ts_nanos, entry.id));
        // A file that is gone or not its sealed size would fail the whole
        // statement: it is skipped and reported (`SqlSession::skipped`); damage
        // inside a file fails the statement through its pages' checksums, and
        // the session then finds and leaves out the damaged file
        // ([`exclude_damaged`]).
        let Ok(mut scans) = self.scans.lock() else {
            return Err(DataFusionError::Internal("scan state poisoned".to_owned()));
        };
        let mut found = Vec::new();
        for entry in segments {
            if scans.excluded.contains(&entry.segment_id()) {
                continue;
            }
            let path = self.archive.segment_path(&entry);
            let Some(problem) = self.archive.segment_file_problem(&entry) else {
                scans
                    .scanned
                    .insert(entry.segment_id(), (path.clone(), entry.clone()));
                found.push((entry, path.to_string_lossy().into_owned()));
                continue;
            };
            // Gone here, kept there: the copy, whose pages' checksums DataFusion checks.
            let copy = scans.remote.as_ref().and_then(|(objects, copied)| {
                hindsight_store::objects::has_copy(copied, &entry)
                    .then(|| objects.object_url(&entry))
            });
            match copy {
                Some(url) if !path.exists() => found.push((entry, url)),
                _ => scans.skip(&entry, &problem),
            }
        }
        Ok(found)
    }
}

#[async_trait]
impl TableProvider for SegmentTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Filters prune segments, row groups and pages; DataFusion still applies them.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let sealed = self
            .scan_segments(state, projection, filters, limit)
            .await?;
        if self.unsealed.is_empty() {
            return Ok(sealed);
        }
        let memory = MemTable::try_new(Arc::clone(&self.schema), vec![self.unsealed.clone()])?
            .scan(state, projection, filters, limit)
            .await?;
        UnionExec::try_new(vec![sealed, memory])
    }
}

impl SegmentTable {
    /// The scan of the segments a statement's filters leave.
    async fn scan_segments(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let segments = self.segments(filters)?;
        if segments.is_empty() {
            let schema = match projection {
                Some(columns) => Arc::new(self.schema.project(columns)?),
                None => Arc::clone(&self.schema),
            };
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let urls = segments
            .iter()
            .map(|(_, url)| ListingTableUrl::parse(url))
            .collect::<Result<Vec<_>>>()?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .with_schema(Arc::clone(&self.schema));
        let table = ListingTable::try_new(config)?
            .with_cache(state.runtime_env().cache_manager.get_file_statistic_cache());
        table.scan(state, projection, filters, limit).await
    }
}
