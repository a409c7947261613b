//! Reads one segment: opens the Parquet footer, prunes row groups by timestamp
//! statistics, address min/max statistics and address Bloom filters, then decodes
//! only the surviving row groups and the projected columns.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{
    Array, AsArray, BooleanArray, FixedSizeBinaryArray, RecordBatch, UInt8Array, UInt16Array,
    UInt32Array,
};
use arrow::buffer::BooleanBuffer;
use arrow::compute::concat_batches;
use arrow::datatypes::{TimestampNanosecondType, UInt64Type};
use arrow::error::ArrowError;
use hindsight_model::{Addr16, GRANULE_ROWS, GranuleSet};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowFilter, RowSelection, RowSelector,
};
use parquet::file::metadata::{PageIndexPolicy, RowGroupMetaData};
use parquet::file::statistics::Statistics;

use crate::error::{Result, StoreError};
use crate::schema::col;
use crate::segment::cluster::reorder;
use crate::segment::footers::FooterCache;
use crate::segment::postings::{CoveringLimits, PostingsCollector};
use crate::segment::summary::{self, SummaryKind, SummaryLocation};
use crate::segment::{FORMAT_VERSION, FORMAT_VERSION_KEY, TABLE_KEY};

/// An inclusive time range in ns since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    /// First instant included.
    pub start_nanos: i64,
    /// Last instant included.
    pub end_nanos: i64,
}

impl TimeRange {
    /// The range that includes every instant.
    pub const ALL: Self = Self {
        start_nanos: i64::MIN,
        end_nanos: i64::MAX,
    };

    /// Returns true if `[min, max]` and this range share an instant.
    pub fn overlaps(&self, min_nanos: i64, max_nanos: i64) -> bool {
        min_nanos <= self.end_nanos && max_nanos >= self.start_nanos
    }

    /// Returns true if the instant lies in the range.
    pub fn contains(&self, ts_nanos: i64) -> bool {
        self.start_nanos <= ts_nanos && ts_nanos <= self.end_nanos
    }
}

/// Returns, for each row of a batch holding `src_addr` and `dst_addr`, whether
/// either address lies in one of `ranges`.
///
/// Addresses are compared as big-endian 128-bit numbers straight from the
/// columns' value buffers, 64 rows a word: the predicate of a busy-address
/// query tests every row of the granules it reads, and testing them as byte
/// slices (a `memcmp` call per bound) was 18% of that query's instructions.
fn address_mask(batch: &RecordBatch, ranges: &[(Addr16, Addr16)]) -> BooleanArray {
    let rows = batch.num_rows();
    let ranges: Vec<(u128, u128)> = ranges
        .iter()
        .map(|(lo, hi)| (u128::from_be_bytes(lo.0), u128::from_be_bytes(hi.0)))
        .collect();
    let hits = |name: &str| -> BooleanBuffer {
        let Some(array) = batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
            .filter(|a| a.value_length() == 16 && a.value_data().len() >= rows * 16)
        else {
            return BooleanBuffer::new_unset(rows);
        };
        let values = array.value_data();
        let value = |row: usize| {
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(&values[row * 16..row * 16 + 16]);
            u128::from_be_bytes(bytes)
        };
        let hits = match ranges.as_slice() {
            [(lo, hi)] if lo == hi => BooleanBuffer::collect_bool(rows, |row| value(row) == *lo),
            [(lo, hi)] => {
                BooleanBuffer::collect_bool(rows, |row| (*lo..=*hi).contains(&value(row)))
            }
            _ => BooleanBuffer::collect_bool(rows, |row| {
                let value = value(row);
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&value))
            }),
        };
        match array.nulls() {
            Some(nulls) => &hits & nulls.inner(),
            None => hits,
        }
    };
    BooleanArray::new(&hits(col::SRC_ADDR) | &hits(col::DST_ADDR), None)
}

/// A connection's endpoints and protocol: `(address, port, peer, peer port,
/// protocol)`, the ports tested only for TCP, UDP and SCTP.
pub type ConnTuple = (Addr16, u16, Addr16, u16, u8);

/// Returns, for each row of a batch holding the addresses, ports and protocol,
/// whether it is a packet of one of `connections` (either direction).
fn connection_mask(batch: &RecordBatch, connections: &[ConnTuple]) -> BooleanArray {
    let addr = |name: &str| {
        batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
    };
    let port = |name: &str| {
        batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<UInt16Array>())
    };
    let (Some(src), Some(dst), Some(sport), Some(dport), Some(proto)) = (
        addr(col::SRC_ADDR),
        addr(col::DST_ADDR),
        port(col::SRC_PORT),
        port(col::DST_PORT),
        batch
            .column_by_name(col::IP_PROTO)
            .and_then(|c| c.as_any().downcast_ref::<UInt8Array>()),
    ) else {
        // Columns not as written: keep every row for the filter to decide.
        return (0..batch.num_rows()).map(|_| Some(true)).collect();
    };
    fn value(a: &FixedSizeBinaryArray, row: usize) -> Option<&[u8]> {
        a.is_valid(row).then(|| a.value(row))
    }
    let number = |a: &UInt16Array, row: usize| a.is_valid(row).then(|| a.value(row));
    (0..batch.num_rows())
        .map(|row| {
            // Protocol and ports first: integers, and most rows differ there.
            let p = proto.is_valid(row).then(|| proto.value(row));
            let (sp, dp) = (number(sport, row), number(dport, row));
            let candidates = connections.iter().filter(|&&(_, a_port, _, b_port, want)| {
                p == Some(want)
                    && (!matches!(want, 6 | 17 | 132)
                        || (sp == Some(a_port) && dp == Some(b_port))
                        || (sp == Some(b_port) && dp == Some(a_port)))
            });
            let mut candidates = candidates.peekable();
            if candidates.peek().is_none() {
                return Some(false);
            }
            let (Some(s), Some(d)) = (value(src, row), value(dst, row)) else {
                return Some(false);
            };
            Some(candidates.any(|&(a, a_port, b, b_port, want)| {
                let ported = matches!(want, 6 | 17 | 132);
                let forward = s == &a.0[..]
                    && d == &b.0[..]
                    && (!ported || (sp == Some(a_port) && dp == Some(b_port)));
                let backward = s == &b.0[..]
                    && d == &a.0[..]
                    && (!ported || (sp == Some(b_port) && dp == Some(a_port)));
                forward || backward
            }))
        })
        .collect()
}

/// Rows of a segment whose timestamps all lie in `min_ts..=max_ts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeSpan {
    /// The first, counted from the file's first row.
    pub first_row: u64,
    /// How many.
    pub rows: u64,
    /// The smallest timestamp among them.
    pub min_ts: i64,
    /// The largest.
    pub max_ts: i64,
}

/// Rows per decoded record batch.
const READ_BATCH_ROWS: usize = 8192;

/// An open segment file and its footer.
#[derive(Debug)]
pub struct SegmentReader {
    path: PathBuf,
    file: File,
    /// The file's length when its footer was read.
    file_len: u64,
    metadata: ArrowReaderMetadata,
}

impl SegmentReader {
    /// Opens a segment file and reads its footer.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(StoreError::io("open segment", path))?;
        Self::from_file(file, path)
    }

    /// As [`open`](Self::open), with the footer from `footers` if it holds
    /// this file's (same length and modification time), and kept there if not.
    pub fn open_cached(path: &Path, footers: &FooterCache) -> Result<Self> {
        let file = File::open(path).map_err(StoreError::io("open segment", path))?;
        let stat = file
            .metadata()
            .map_err(StoreError::io("stat segment", path))?;
        let identity = (stat.len(), stat.modified().ok());
        if let Some(metadata) = footers.get(path, identity) {
            return Ok(Self {
                path: path.to_owned(),
                file,
                file_len: identity.0,
                metadata,
            });
        }
        let reader = Self::read_footer(file, identity.0, path, PageIndexPolicy::Optional)?;
        footers.put(path, identity, &reader.metadata);
        Ok(reader)
    }

    /// As [`open`](Self::open), without the page index: for a reader of its
    /// summaries, or of whole row groups, which saves reading and parsing
    /// an offset index per column.
    pub fn open_without_page_index(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(StoreError::io("open segment", path))?;
        Self::with_page_index(file, path, PageIndexPolicy::Skip)
    }

    /// Reads the footer of a segment already open (a copy fetched from
    /// object storage); `path` names it in errors.
    pub fn from_file(file: File, path: &Path) -> Result<Self> {
        Self::with_page_index(file, path, PageIndexPolicy::Optional)
    }

    fn with_page_index(file: File, path: &Path, page_index: PageIndexPolicy) -> Result<Self> {
        let file_len = file
            .metadata()
            .map_err(StoreError::io("stat segment", path))?
            .len();
        Self::read_footer(file, file_len, path, page_index)
    }

    /// Reads and checks the footer of `file`, whose `stat` gave `file_len`.
    fn read_footer(
        file: File,
        file_len: u64,
        path: &Path,
        page_index: PageIndexPolicy,
    ) -> Result<Self> {
        // The Arrow schema comes from the Parquet schema, not from the footer's
        // embedded IPC schema (`ARROW:schema`): the `arrow-ipc` decoder panics on
        // some damaged ones (found by the `segment_reader` fuzz target), and the
        // Parquet logical types give the same columns (the timestamp zone reads
        // as "+00:00" instead of "UTC").
        let metadata = ArrowReaderMetadata::load(
            &file,
            ArrowReaderOptions::new()
                .with_page_index_policy(page_index)
                .with_skip_arrow_metadata(true),
        )
        .map_err(StoreError::parquet(path))?;
        check_format_version(path, &metadata)?;
        check_layout(path, &metadata, file_len)?;
        Ok(Self {
            path: path.to_owned(),
            file,
            file_len,
            metadata,
        })
    }

    /// The segment's table (`packets`, `flows`), from its key-value metadata.
    pub fn table_name(&self) -> Option<&str> {
        key_value(&self.metadata, TABLE_KEY)
    }

    /// Decodes every column of every row group, one column at a time, and returns
    /// where the first damage is: each page's CRC-32 is checked and its bytes
    /// decoded, so a damaged page names its row group and column. `None`: the
    /// segment reads whole.
    pub fn find_damage(&self) -> Option<Damage> {
        let schema = self.metadata.metadata().file_metadata().schema_descr();
        for group in 0..self.row_groups() {
            for (index, column) in schema.columns().iter().enumerate() {
                let mask = ProjectionMask::leaves(schema, [index]);
                let reader = self.builder().and_then(|builder| {
                    builder
                        .with_row_groups(vec![group])
                        .with_projection(mask)
                        .with_batch_size(READ_BATCH_ROWS)
                        .build()
                        .map_err(StoreError::parquet(&self.path))
                });
                let failure = match reader {
                    Err(error) => Some(error.to_string()),
                    Ok(mut reader) => reader.find_map(|batch| batch.err()).map(|e| e.to_string()),
                };
                if let Some(reason) = failure {
                    return Some(Damage {
                        row_group: group,
                        column: column.name().to_owned(),
                        reason,
                    });
                }
            }
        }
        None
    }

    /// Returns the path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns the number of rows in the segment.
    pub fn rows(&self) -> u64 {
        u64::try_from(self.metadata.metadata().file_metadata().num_rows()).unwrap_or(0)
    }

    /// Returns the number of row groups.
    pub fn row_groups(&self) -> usize {
        self.metadata.metadata().num_row_groups()
    }

    /// Returns the smallest and largest timestamp, from the row-group statistics.
    pub fn time_bounds(&self) -> Option<(i64, i64)> {
        let ts = self.column_index(col::TS)?;
        let mut bounds: Option<(i64, i64)> = None;
        for group in self.metadata.metadata().row_groups() {
            let (min, max) = int64_bounds(group, ts)?;
            bounds = Some(match bounds {
                None => (min, max),
                Some((lo, hi)) => (lo.min(min), hi.max(max)),
            });
        }
        bounds
    }

    fn column_index(&self, name: &str) -> Option<usize> {
        self.metadata
            .metadata()
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == name)
    }

    fn builder(&self) -> Result<ParquetRecordBatchReaderBuilder<File>> {
        let file = self
            .file
            .try_clone()
            .map_err(StoreError::io("reopen segment", &self.path))?;
        Ok(ParquetRecordBatchReaderBuilder::new_with_metadata(
            file,
            self.metadata.clone(),
        ))
    }

    /// Returns the row groups that may hold rows in `time` whose source or destination
    /// address lies in one of `addresses` (inclusive ranges; `None`: any address).
    pub fn matching_row_groups(
        &self,
        time: TimeRange,
        addresses: Option<&[(Addr16, Addr16)]>,
    ) -> Result<Vec<usize>> {
        let ts = self.column_index(col::TS);
        let src = self.column_index(col::SRC_ADDR);
        let dst = self.column_index(col::DST_ADDR);
        let builder = self.builder()?;
        let mut groups = Vec::new();
        for (index, group) in self.metadata.metadata().row_groups().iter().enumerate() {
            if let Some((min, max)) = ts.and_then(|ts| int64_bounds(group, ts))
                && !time.overlaps(min, max)
            {
                continue;
            }
            if let Some(ranges) = addresses {
                let mut may_match = false;
                for column in [src, dst].into_iter().flatten() {
                    if self.column_may_hold(&builder, index, group, column, ranges)? {
                        may_match = true;
                        break;
                    }
                }
                if !may_match {
                    continue;
                }
            }
            groups.push(index);
        }
        Ok(groups)
    }

    fn column_may_hold(
        &self,
        builder: &ParquetRecordBatchReaderBuilder<File>,
        group_index: usize,
        group: &RowGroupMetaData,
        column: usize,
        ranges: &[(Addr16, Addr16)],
    ) -> Result<bool> {
        let chunk = group.column(column);
        let (min, max) = match chunk.statistics() {
            Some(stats) if stats.null_count_opt() == Some(group.num_rows() as u64) => {
                return Ok(false);
            }
            Some(Statistics::FixedLenByteArray(stats)) => (
                stats.min_opt().map(|v| v.data().to_vec()),
                stats.max_opt().map(|v| v.data().to_vec()),
            ),
            _ => (None, None),
        };
        let overlapping: Vec<&(Addr16, Addr16)> = ranges
            .iter()
            .filter(|(lo, hi)| {
                let below_max = max.as_deref().is_none_or(|max| &lo.0[..] <= max);
                let above_min = min.as_deref().is_none_or(|min| &hi.0[..] >= min);
                below_max && above_min
            })
            .collect();
        if overlapping.is_empty() {
            return Ok(false);
        }
        // A Bloom filter answers only exact values; any true range keeps the group.
        if overlapping.iter().any(|(lo, hi)| lo != hi) {
            return Ok(true);
        }
        let Some(bloom) = builder
            .get_row_group_column_bloom_filter(group_index, column)
            .map_err(StoreError::parquet(&self.path))?
        else {
            return Ok(true);
        };
        Ok(overlapping.iter().any(|(lo, _)| bloom.check(&lo.0[..])))
    }

    /// Returns a reader of the rows of `row_groups` that lie in `granules` (`None`: all
    /// rows), decoding only the named columns (`None`: all), and the number of rows
    /// selected. Pages holding no selected row are skipped through the page index.
    ///
    /// With `addresses`, only rows whose source or destination address lies in one
    /// of the ranges are returned: the two address columns are decoded first, and
    /// the other columns only for the rows that pass (a Parquet row filter). With
    /// `connections` (not empty), only the packets of those connections are, by
    /// addresses, ports and protocol.
    pub fn read_granules(
        &self,
        row_groups: Vec<usize>,
        granules: Option<&GranuleSet>,
        columns: Option<&[&str]>,
        addresses: Option<&[(Addr16, Addr16)]>,
        connections: &[ConnTuple],
    ) -> Result<(ParquetRecordBatchReader, u64)> {
        let metadata = self.metadata.metadata();
        let granule_rows = u64::from(GRANULE_ROWS);
        let mut selectors: Vec<RowSelector> = Vec::new();
        let mut selected = 0u64;
        let mut group_start = 0u64;
        let mut group_starts = Vec::with_capacity(metadata.num_row_groups());
        for group in metadata.row_groups() {
            group_starts.push(group_start);
            group_start += u64::try_from(group.num_rows()).unwrap_or(0);
        }
        for &index in &row_groups {
            let start = group_starts.get(index).copied().unwrap_or(0);
            let rows = metadata
                .row_groups()
                .get(index)
                .map_or(0, |g| u64::try_from(g.num_rows()).unwrap_or(0));
            let end = start + rows;
            let Some(granules) = granules else {
                selectors.push(RowSelector::select(rows as usize));
                selected += rows;
                continue;
            };
            let mut cursor = start;
            for &granule in granules.granules() {
                let from = (u64::from(granule) * granule_rows).max(start);
                let to = ((u64::from(granule) + 1) * granule_rows).min(end);
                if from >= to || from < cursor {
                    continue;
                }
                if from > cursor {
                    selectors.push(RowSelector::skip((from - cursor) as usize));
                }
                selectors.push(RowSelector::select((to - from) as usize));
                selected += to - from;
                cursor = to;
            }
            if end > cursor {
                selectors.push(RowSelector::skip((end - cursor) as usize));
            }
        }
        let mut builder = self
            .builder()?
            .with_row_groups(row_groups)
            .with_batch_size(READ_BATCH_ROWS);
        if granules.is_some() {
            builder = builder.with_row_selection(RowSelection::from(selectors));
        }
        let schema = metadata.file_metadata().schema_descr();
        if let Some(columns) = columns {
            builder =
                builder.with_projection(ProjectionMask::columns(schema, columns.iter().copied()));
        }
        // Late materialisation: the other columns are decoded only for the
        // rows (pages) these columns select.
        if !connections.is_empty() {
            let connections = connections.to_vec();
            let mask = ProjectionMask::columns(
                schema,
                [
                    col::SRC_ADDR,
                    col::DST_ADDR,
                    col::SRC_PORT,
                    col::DST_PORT,
                    col::IP_PROTO,
                ],
            );
            let predicate = ArrowPredicateFn::new(mask, move |batch: RecordBatch| {
                Ok(connection_mask(&batch, &connections))
            });
            builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
        } else if let Some(ranges) = addresses {
            let ranges = ranges.to_vec();
            let mask = ProjectionMask::columns(schema, [col::SRC_ADDR, col::DST_ADDR]);
            let predicate = ArrowPredicateFn::new(mask, move |batch: RecordBatch| {
                Ok(address_mask(&batch, &ranges))
            });
            builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
        }
        let reader = builder.build().map_err(StoreError::parquet(&self.path))?;
        Ok((reader, selected))
    }

    /// Reads what [`read_granules`](Self::read_granules) reads, one row group at
    /// a time, with each row group's rows in time order: a `packets` row group
    /// written since format 5 keeps its rows grouped by host (`cluster.rs`), and
    /// sorting them by timestamp, stably, gives back the order they were
    /// captured in. At most one row group's selected rows are held at once.
    pub fn read_in_time_order(
        &self,
        row_groups: Vec<usize>,
        granules: Option<&GranuleSet>,
        columns: Option<&[&str]>,
        addresses: Option<&[(Addr16, Addr16)]>,
        connections: &[ConnTuple],
    ) -> Result<(TimeOrdered, u64)> {
        let mut groups = Vec::with_capacity(row_groups.len());
        let mut selected = 0;
        for group in row_groups {
            let (reader, rows) =
                self.read_granules(vec![group], granules, columns, addresses, connections)?;
            groups.push(reader);
            selected += rows;
        }
        groups.reverse();
        Ok((
            TimeOrdered {
                groups,
                ready: Vec::new(),
            },
            selected,
        ))
    }

    /// The row spans of row group `group` with the time range of each: its
    /// pages of `ts` (first row in the file, rows, smallest and largest
    /// timestamp) from the page index, or else the whole group with its
    /// statistics (or, without them, every instant). What a count by time
    /// answers without decoding a row.
    pub fn time_spans(&self, group: usize) -> Vec<TimeSpan> {
        let metadata = self.metadata.metadata();
        let Some(row_group) = metadata.row_groups().get(group) else {
            return Vec::new();
        };
        let group_rows = u64::try_from(row_group.num_rows()).unwrap_or(0);
        let first_row: u64 = metadata
            .row_groups()
            .iter()
            .take(group)
            .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
            .sum();
        let ts = self.column_index(col::TS);
        let (min_ts, max_ts) = ts
            .and_then(|ts| int64_bounds(row_group, ts))
            .unwrap_or((i64::MIN, i64::MAX));
        let whole = vec![TimeSpan {
            first_row,
            rows: group_rows,
            min_ts,
            max_ts,
        }];
        let Some(ts) = ts else {
            return whole;
        };
        let pages = metadata
            .offset_index()
            .and_then(|index| index.get(group))
            .and_then(|columns| columns.get(ts))
            .map(|offsets| offsets.page_locations());
        let bounds = match metadata
            .column_index()
            .and_then(|index| index.get(group))
            .and_then(|columns| columns.get(ts))
        {
            Some(parquet::file::page_index::column_index::ColumnIndexMetaData::INT64(index)) => {
                Some(index)
            }
            _ => None,
        };
        let (Some(pages), Some(bounds)) = (pages, bounds) else {
            return whole;
        };
        let mut spans = Vec::with_capacity(pages.len());
        for (page, location) in pages.iter().enumerate() {
            let start = u64::try_from(location.first_row_index).unwrap_or(u64::MAX);
            let end = pages.get(page + 1).map_or(group_rows, |next| {
                u64::try_from(next.first_row_index).unwrap_or(0)
            });
            let (Some(&min), Some(&max)) = (bounds.min_value(page), bounds.max_value(page)) else {
                return whole;
            };
            // Pages out of order or past the group: the index is not trusted.
            if end < start || end > group_rows || min > max {
                return whole;
            }
            spans.push(TimeSpan {
                first_row: first_row + start,
                rows: end - start,
                min_ts: min,
                max_ts: max,
            });
        }
        spans
    }

    /// Returns a reader of the rows in `ranges` (first row in the file, rows;
    /// sorted, disjoint), decoding only the named columns; pages holding none
    /// of them are skipped through the page index.
    pub fn read_ranges(
        &self,
        ranges: &[(u64, u64)],
        columns: &[&str],
    ) -> Result<ParquetRecordBatchReader> {
        let metadata = self.metadata.metadata();
        let mut groups = Vec::new();
        let mut selectors = Vec::new();
        let mut group_start = 0u64;
        for (index, group) in metadata.row_groups().iter().enumerate() {
            let rows = u64::try_from(group.num_rows()).unwrap_or(0);
            let end = group_start + rows;
            let mut cursor = group_start;
            let mut any = false;
            for &(first, count) in ranges {
                let (from, to) = (first.max(cursor), (first + count).min(end));
                if from >= to {
                    continue;
                }
                if from > cursor {
                    selectors.push(RowSelector::skip((from - cursor) as usize));
                }
                selectors.push(RowSelector::select((to - from) as usize));
                cursor = to;
                any = true;
            }
            if any {
                if end > cursor {
                    selectors.push(RowSelector::skip((end - cursor) as usize));
                }
                groups.push(index);
            }
            group_start = end;
        }
        let schema = metadata.file_metadata().schema_descr();
        self.builder()?
            .with_row_groups(groups)
            .with_batch_size(READ_BATCH_ROWS)
            .with_row_selection(RowSelection::from(selectors))
            .with_projection(ProjectionMask::columns(schema, columns.iter().copied()))
            .build()
            .map_err(StoreError::parquet(&self.path))
    }

    /// Returns a reader of `row_groups`, decoding only the named columns (`None`: all).
    pub fn read(
        &self,
        row_groups: Vec<usize>,
        columns: Option<&[&str]>,
    ) -> Result<ParquetRecordBatchReader> {
        let mut builder = self
            .builder()?
            .with_row_groups(row_groups)
            .with_batch_size(READ_BATCH_ROWS);
        if let Some(columns) = columns {
            let schema = self.metadata.metadata().file_metadata().schema_descr();
            let mask = ProjectionMask::columns(schema, columns.iter().copied());
            builder = builder.with_projection(mask);
        }
        builder.build().map_err(StoreError::parquet(&self.path))
    }
}

impl SegmentReader {
    /// The segment's summary of `kind` (`summary.rs`): `None` for a segment
    /// written without one. Its bytes are checked against their CRC-32, its
    /// columns against its kind's schema, and its packets must add up to the
    /// segment's rows; anything else is [`StoreError::Corrupt`].
    pub fn summary(&self, kind: SummaryKind) -> Result<Option<RecordBatch>> {
        self.summary_columns(kind, None)
    }

    /// As [`summary`](Self::summary), with only the columns of `kind`'s
    /// schema at `projection` (in that order), and `packets` last if they
    /// do not include it: it is read in any case, to check the total.
    pub fn summary_columns(
        &self,
        kind: SummaryKind,
        projection: Option<&[usize]>,
    ) -> Result<Option<RecordBatch>> {
        let Some(text) = key_value(&self.metadata, kind.key()) else {
            return Ok(None);
        };
        let corrupt = |offset: u64, reason: String| StoreError::Corrupt {
            path: self.path.clone(),
            offset,
            reason: format!("summary {}: {reason}", kind.key()),
        };
        let location = SummaryLocation::parse(text).ok_or_else(|| {
            corrupt(
                0,
                format!("its location {text:?} is not `<offset> <length> <crc32>`"),
            )
        })?;
        let file_len = self.file_len;
        let SummaryLocation { offset, len, crc32 } = location;
        let len_inside = offset.checked_add(len).is_some_and(|end| end <= file_len);
        let Some(len) = usize::try_from(len).ok().filter(|_| len_inside) else {
            return Err(corrupt(
                offset,
                format!("{len} bytes at {offset} lie outside the file of {file_len} bytes"),
            ));
        };
        let mut bytes = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&self.file, &mut bytes, offset)
            .map_err(StoreError::io("read summary", &self.path))?;
        let found = crc32fast::hash(&bytes);
        if found != crc32 {
            return Err(corrupt(
                offset,
                format!("CRC-32 {found:08x} of its {len} bytes, {crc32:08x} recorded"),
            ));
        }
        let summary = summary::decode(bytes, &self.path, kind, projection)
            .map_err(|reason| corrupt(offset, reason))?;
        let packets = summary
            .column_by_name(summary::PACKETS)
            .and_then(|c| c.as_primitive_opt::<UInt64Type>())
            .map(|c| {
                c.values()
                    .iter()
                    .try_fold(0u64, |sum, &n| sum.checked_add(n))
            });
        match packets {
            Some(Some(total)) if total == self.rows() => Ok(Some(summary)),
            _ => Err(corrupt(
                offset,
                format!(
                    "its packets do not add up to the segment's {} rows",
                    self.rows()
                ),
            )),
        }
    }

    /// Returns the address postings of the segment (every distinct source or
    /// destination address with the granules where it occurs), sorted, by scanning
    /// the two address columns; used to rebuild the index after a crash.
    pub fn address_postings(&self) -> Result<Vec<(Addr16, GranuleSet)>> {
        let mut postings = PostingsCollector::new(CoveringLimits {
            rows: 0,
            bytes_per_row: 0,
        });
        let groups = (0..self.row_groups()).collect();
        let mut first_row = 0u64;
        for batch in self.read(groups, Some(&[col::SRC_ADDR, col::DST_ADDR]))? {
            let batch = batch.map_err(|e| StoreError::Parquet {
                path: self.path.clone(),
                source: e.into(),
            })?;
            postings.collect(&batch, first_row);
            first_row += batch.num_rows() as u64;
        }
        Ok(postings.finish().granules)
    }
}

/// Where a segment is damaged ([`SegmentReader::find_damage`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The row group holding the damaged page.
    pub row_group: usize,
    /// The column of the damaged page.
    pub column: String,
    /// What the reader found.
    pub reason: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "row group {}, column {}: {}",
            self.row_group, self.column, self.reason
        )
    }
}

fn key_value<'a>(metadata: &'a ArrowReaderMetadata, key: &str) -> Option<&'a str> {
    metadata
        .metadata()
        .file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_deref()
}

/// Refuses a footer whose column chunks or pages lie outside the file or their
/// chunk: the `parquet` crate trusts these offsets (a negative one fails an
/// assertion, a page before its chunk's start overflows a subtraction; found by
/// the `segment_reader` fuzz target).
pub(crate) fn check_layout(
    path: &Path,
    metadata: &ArrowReaderMetadata,
    file_len: u64,
) -> Result<()> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_owned(),
        offset: 0,
        reason,
    };
    let file_len = i64::try_from(file_len).unwrap_or(i64::MAX);
    let footer = metadata.metadata();
    for (group_index, group) in footer.row_groups().iter().enumerate() {
        for (column_index, chunk) in group.columns().iter().enumerate() {
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or(chunk.data_page_offset());
            let len = chunk.compressed_size();
            let end = start.checked_add(len);
            let inside = start >= 0
                && len >= 0
                && chunk.data_page_offset() >= start
                && end.is_some_and(|end| end <= file_len && chunk.data_page_offset() <= end);
            if !inside {
                return Err(corrupt(format!(
                    "row group {group_index}, column {}: column chunk at {start} of {len} bytes \
                     lies outside the file of {file_len} bytes",
                    chunk.column_descr().name()
                )));
            }
            let end = end.unwrap_or(i64::MAX);
            let pages = footer
                .offset_index()
                .and_then(|index| index.get(group_index))
                .and_then(|group| group.get(column_index));
            for page in pages
                .map(|p| p.page_locations().as_slice())
                .unwrap_or_default()
            {
                let size = i64::from(page.compressed_page_size);
                let page_inside = page.offset >= start
                    && size >= 0
                    && page
                        .offset
                        .checked_add(size)
                        .is_some_and(|page_end| page_end <= end);
                if !page_inside {
                    return Err(corrupt(format!(
                        "row group {group_index}, column {}: a page at {} of {size} bytes lies \
                         outside its column chunk ({start}..{end})",
                        chunk.column_descr().name(),
                        page.offset
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Refuses a segment written by a newer hindsight (a format version above this
/// build's), which this build could misread.
fn check_format_version(path: &Path, metadata: &ArrowReaderMetadata) -> Result<()> {
    let Some(found) = key_value(metadata, FORMAT_VERSION_KEY) else {
        return Ok(());
    };
    match found.trim().parse::<u32>() {
        Ok(version) if version <= FORMAT_VERSION => Ok(()),
        _ => Err(StoreError::NewerFormat {
            path: path.to_owned(),
            found: found.to_owned(),
            supported: FORMAT_VERSION,
        }),
    }
}

fn int64_bounds(group: &RowGroupMetaData, column: usize) -> Option<(i64, i64)> {
    match group.column(column).statistics()? {
        Statistics::Int64(stats) => Some((*stats.min_opt()?, *stats.max_opt()?)),
        _ => None,
    }
}

/// The batches of [`SegmentReader::read_in_time_order`]: each row group's rows in
/// time order.
pub struct TimeOrdered {
    /// Readers of the row groups still to read, the next one last.
    groups: Vec<ParquetRecordBatchReader>,
    /// Batches of the row group being handed out, the next one last.
    ready: Vec<RecordBatch>,
}

impl std::fmt::Debug for TimeOrdered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeOrdered")
            .field("groups", &self.groups.len())
            .field("ready", &self.ready.len())
            .finish()
    }
}

impl Iterator for TimeOrdered {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(batch) = self.ready.pop() {
                return Some(Ok(batch));
            }
            let group = self.groups.pop()?;
            match group.collect::<std::result::Result<Vec<_>, _>>() {
                Ok(batches) => self.ready = in_time_order(batches),
                Err(error) => {
                    self.groups.clear();
                    return Some(Err(error));
                }
            }
            self.ready.reverse();
        }
    }
}

/// The rows of `batches` (one row group's) in time order, stably: as they are
/// if they already are, else as one batch.
fn in_time_order(batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
    let timestamps = |batch: &RecordBatch| {
        batch
            .column_by_name(col::TS)
            .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
            .map(|ts| ts.values().clone())
    };
    let mut previous = i64::MIN;
    let mut sorted = true;
    for batch in &batches {
        let Some(ts) = timestamps(batch) else {
            return batches;
        };
        for &value in ts.iter() {
            sorted &= previous <= value;
            previous = value;
        }
    }
    if sorted {
        return batches;
    }
    let Some(schema) = batches.first().map(RecordBatch::schema) else {
        return batches;
    };
    let Ok(rows) = concat_batches(&schema, &batches) else {
        return batches;
    };
    let Some(ts) = timestamps(&rows) else {
        return batches;
    };
    let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
    order.sort_by_key(|&row| ts[row as usize]);
    match reorder(&rows, &UInt32Array::from(order)) {
        Ok(rows) => vec![rows],
        Err(_) => batches,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, FixedSizeBinaryBuilder};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn column(values: &[Option<[u8; 16]>]) -> ArrayRef {
        let mut builder = FixedSizeBinaryBuilder::with_capacity(values.len(), 16);
        for value in values {
            match value {
                Some(bytes) => builder.append_value(bytes).unwrap(),
                None => builder.append_null(),
            }
        }
        Arc::new(builder.finish())
    }

    #[test]
    fn the_address_mask_is_the_byte_order_range_test() {
        // Addresses from a few values so that ranges hit, with nulls.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pick = |n: u64| -> Option<[u8; 16]> {
            (!n.is_multiple_of(11)).then(|| {
                let mut bytes = [0u8; 16];
                bytes[10] = 0xff;
                bytes[11] = 0xff;
                bytes[12] = 10;
                bytes[15] = (n % 7) as u8;
                if n.is_multiple_of(5) {
                    bytes[0] = 0x20; // an IPv6 address
                }
                bytes
            })
        };
        let src: Vec<_> = (0..300).map(|_| pick(next())).collect();
        let dst: Vec<_> = (0..300).map(|_| pick(next())).collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new(col::SRC_ADDR, DataType::FixedSizeBinary(16), true),
            Field::new(col::DST_ADDR, DataType::FixedSizeBinary(16), true),
        ]));
        let batch = RecordBatch::try_new(schema, vec![column(&src), column(&dst)]).unwrap();
        let address = |last: u8| {
            let mut bytes = [0u8; 16];
            bytes[10] = 0xff;
            bytes[11] = 0xff;
            bytes[12] = 10;
            bytes[15] = last;
            Addr16(bytes)
        };
        let cases = [
            vec![(address(3), address(3))],
            vec![(address(1), address(4))],
            vec![(address(0), address(0)), (address(5), address(6))],
            vec![(Addr16([0; 16]), Addr16([0xff; 16]))],
            vec![],
        ];
        for ranges in cases {
            let hit = |value: &Option<[u8; 16]>| {
                value.is_some_and(|v| {
                    ranges
                        .iter()
                        .any(|(lo, hi)| lo.0[..] <= v[..] && v[..] <= hi.0[..])
                })
            };
            let expected: Vec<bool> = src
                .iter()
                .zip(&dst)
                .map(|(s, d)| hit(s) || hit(d))
                .collect();
            let mask = address_mask(&batch, &ranges);
            assert_eq!(mask.null_count(), 0);
            assert_eq!(
                mask.iter().map(Option::unwrap).collect::<Vec<_>>(),
                expected
            );
            // A slice of the batch answers for its own rows.
            let sliced = address_mask(&batch.slice(37, 100), &ranges);
            let got: Vec<bool> = sliced.iter().map(Option::unwrap).collect();
            assert_eq!(got, expected[37..137]);
        }
    }
}
