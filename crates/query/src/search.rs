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

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hindsight_index::AddressIndex;
use hindsight_model::{
    Addr16, CoveredRow, GranuleSet, PacketRecord, SegmentId, decode_covered_rows,
};
use hindsight_store::schema::{PacketBatchView, col};
use hindsight_store::{Archive, CatalogEntry, SegmentReader, Table, TimeRange};

use crate::error::QueryError;
use crate::filter::Filter;

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
    /// Counts of the planning levels (the reading levels are filled by execution).
    pub stats: SearchStats,
}

/// An archive opened for packet queries.
#[derive(Debug)]
pub struct PacketSearch {
    archive: Archive,
    index: Option<AddressIndex>,
}

/// What a capture file needs of a record besides its bytes.
const CAPTURE_COLUMNS: [&str; 5] = [
    col::TS,
    col::IFACE,
    col::LINK_TYPE,
    col::WIRE_LEN,
    col::CAP_LEN,
];

/// Columns a filter may read; `data` is added for pcap export.
const RECORD_COLUMNS: &[&str] = &[
    col::TS,
    col::IFACE,
    col::LINK_TYPE,
    col::WIRE_LEN,
    col::CAP_LEN,
    col::STATUS,
    col::ETH_SRC,
    col::ETH_DST,
    col::ETH_TYPE,
    col::VLAN_OUTER,
    col::VLAN_INNER,
    col::IP_VERSION,
    col::SRC_ADDR,
    col::DST_ADDR,
    col::IP_PROTO,
    col::IP_TTL,
    col::IP_ID,
    col::FRAG_OFFSET,
    col::MORE_FRAGMENTS,
    col::DONT_FRAGMENT,
    col::SRC_PORT,
    col::DST_PORT,
    col::TCP_FLAGS,
    col::ICMP_TYPE,
    col::ICMP_CODE,
];

impl PacketSearch {
    /// Opens the archive at `root` for reading, with its address index if it has one.
    pub fn open(root: &Path) -> Result<Self, QueryError> {
        let archive = Archive::open_reader(root)?;
        let index = AddressIndex::open_read_only(&archive.index_dir())?;
        Ok(Self { archive, index })
    }

    /// Returns the archive.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// Chooses the segments `request` must read.
    pub fn plan(&self, request: &SearchRequest) -> Result<SearchPlan, QueryError> {
        let catalog = self.archive.catalog();
        let mut stats = SearchStats {
            segments_total: catalog.entries_of(Table::Packets).count(),
            ..SearchStats::default()
        };
        let mut segments: Vec<CatalogEntry> = catalog
            .entries_of(Table::Packets)
            .filter(|entry| entry.overlaps(request.time))
            .cloned()
            .collect();
        stats.segments_in_time = segments.len();
        let address_ranges = request.filter.address_ranges();
        let mut granules = BTreeMap::new();
        let mut covered = BTreeMap::new();
        if let (Some(ranges), Some(index)) = (&address_ranges, &self.index) {
            let lookup = index.lookup(ranges)?;
            segments.retain(|entry| lookup.may_hold(entry.segment_id()));
            (granules, covered) = lookup.into_parts();
            let planned: BTreeSet<SegmentId> =
                segments.iter().map(CatalogEntry::segment_id).collect();
            covered.retain(|id, _| planned.contains(id));
        }
        segments.sort_by_key(|entry| (entry.min_ts_nanos, entry.id));
        stats.segments_planned = segments.len();
        stats.segments_covered = covered.len();
        Ok(SearchPlan {
            segments,
            address_ranges,
            granules,
            covered,
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
            let mut needed = request.filter.columns();
            needed.extend(CAPTURE_COLUMNS);
            needed.into_iter().collect()
        } else {
            RECORD_COLUMNS.to_vec()
        };
        if request.with_data {
            columns.push(col::DATA);
        }
        let limit = request.limit.unwrap_or(u64::MAX);
        if limit == 0 {
            return Ok(stats);
        }
        for entry in &plan.segments {
            // A damaged covering posting falls back to the segment, which the
            // granules still narrow.
            let covered = plan.covered.get(&entry.segment_id());
            if let Some(rows) = covered.and_then(|postings| covered_rows(postings)) {
                stats.rows_read += rows.len() as u64;
                for CoveredRow { record, data, .. } in &rows {
                    if !request.time.contains(record.ts_nanos) || !request.filter.matches(record) {
                        continue;
                    }
                    stats.rows_matched += 1;
                    let go_on = visit(record, data).map_err(QueryError::Output)?;
                    if !go_on || stats.rows_matched >= limit {
                        return Ok(stats);
                    }
                }
                continue;
            }
            let reader = SegmentReader::open(&self.archive.segment_path(entry))?;
            stats.row_groups_total += reader.row_groups();
            let groups =
                reader.matching_row_groups(request.time, plan.address_ranges.as_deref())?;
            stats.row_groups_read += groups.len();
            if groups.is_empty() {
                continue;
            }
            let granules = plan.granules.get(&entry.segment_id());
            let (batches, selected) = reader.read_granules(
                groups,
                granules,
                Some(&columns),
                plan.address_ranges.as_deref(),
            )?;
            stats.rows_read += selected;
            for batch in batches {
                let batch = batch.map_err(|e| QueryError::Execution {
                    message: format!("reading {}: {e}", reader.path().display()),
                })?;
                let view = PacketBatchView::new(&batch);
                for row in 0..view.len() {
                    let record = view.record(row);
                    if !request.time.contains(record.ts_nanos) || !request.filter.matches(&record) {
                        continue;
                    }
                    stats.rows_matched += 1;
                    let go_on = visit(&record, view.data(row)).map_err(QueryError::Output)?;
                    if !go_on || stats.rows_matched >= limit {
                        return Ok(stats);
                    }
                }
            }
        }
        Ok(stats)
    }
}

/// Decodes the covering postings of one segment (one per address) into its
/// candidate rows, in row order, each once (a packet between two of the addresses
/// is in both postings); `None` if one is damaged.
fn covered_rows(postings: &[Vec<u8>]) -> Option<Vec<CoveredRow>> {
    let mut rows = Vec::new();
    for posting in postings {
        rows.extend(decode_covered_rows(posting)?);
    }
    rows.sort_by_key(|row| row.row);
    rows.dedup_by_key(|row| row.row);
    Some(rows)
}
