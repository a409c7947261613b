//! Writes one segment: Parquet row groups into a hidden temporary file, then seals it
//! with the write-hidden / fsync / rename / fsync-directory protocol, so a reader or a
//! recovering writer never sees half a segment.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, Field, SchemaRef, TimestampNanosecondType};
use hindsight_model::{Addr16, GranuleSet, SegmentId};
use parquet::arrow::ArrowWriter;
use parquet::basic::Encoding;
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnDescPtr;

use super::chunk::{ChunkOptions, Compressors, EncodedChunk, encode_column};
use super::cluster::{HostOrder, host_order, reorder};
use super::postings::{CoveringLimits, PostingsCollector};
use super::summary::{
    FLOWS_MAX_SHARE, SummaryBuilder, SummaryKind, SummaryLocation, SummarySet, encode_summary,
};
use super::{FORMAT_VERSION, FORMAT_VERSION_KEY, TABLE_KEY, segment_file_name, temp_file_name};
use crate::Table;
use crate::error::{Result, StoreError};
use crate::schema::col;

/// Columns of packet segments with page-level statistics (a page index).
const PAGE_INDEXED: [&str; 6] = [
    col::TS,
    col::SRC_ADDR,
    col::DST_ADDR,
    col::SRC_PORT,
    col::DST_PORT,
    col::IP_PROTO,
];

/// Tunables of segment files. The defaults are what `hindsight ingest` uses.
#[derive(Clone, Debug)]
pub struct SegmentOptions {
    /// Rows per Parquet row group: the unit of Bloom-filter and min/max pruning.
    pub row_group_rows: usize,
    /// Rows per data page: the unit of page-index pruning.
    pub page_rows: usize,
    /// Byte size at which a page of the `packets.data` column is closed: a
    /// query decompresses whole pages of packet bytes for the rows it wants.
    pub data_page_bytes: usize,
    /// zstd level of the header columns and of `flows` segments (any level zstd
    /// accepts, negative ones included).
    pub zstd_level: i32,
    /// zstd level of the `data` column (packet bytes), which dominates the cost.
    pub data_zstd_level: i32,
    /// False-positive probability of the address Bloom filters.
    pub bloom_fpp: f64,
    /// Covering postings of packet segments: an address with at most this many
    /// rows in a segment has its whole rows in the address index (0: none).
    pub covering_rows: u32,
    /// Budget of covering postings in bytes per packet of the segment.
    pub covering_bytes_per_row: u32,
    /// Threads that encode the columns of a row group (1: the writing thread alone).
    pub encode_threads: usize,
    /// Whether the rows of a `packets` row group are grouped by host in the file
    /// (`cluster.rs`); false keeps them in time order.
    pub group_by_host: bool,
    /// Whether the header columns of `packets` segments (all but `data`) are
    /// compressed with LZ4 rather than zstd (see `ChunkOptions::lz4`).
    pub lz4_headers: bool,
    /// The fewest rows of a `packets` segment that carries summaries
    /// (`summary.rs`): below, reading its rows costs about what reading a
    /// summary does, and a summary's own footer (about 2 kB each) would
    /// weigh on small segments (a small retention class's).
    pub summary_min_rows: u64,
    /// The summaries `packets` segments carry (`[packets] summaries`).
    pub summaries: SummarySet,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        Self {
            row_group_rows: 64 * 1024,
            page_rows: 8 * 1024,
            data_page_bytes: 128 * 1024,
            zstd_level: 1,
            data_zstd_level: 1,
            bloom_fpp: 0.01,
            covering_rows: 64,
            covering_bytes_per_row: 2,
            encode_threads: 2,
            group_by_host: true,
            lz4_headers: true,
            summary_min_rows: 4096,
            summaries: SummarySet::ALL,
        }
    }
}

/// The encoding of a column's values, by type, in both tables.
fn encoding_of(data_type: &DataType) -> Encoding {
    match data_type {
        // Timestamps are nearly sorted: deltas beat plain values.
        DataType::Timestamp(..) => Encoding::DELTA_BINARY_PACKED,
        // Integers, mostly small: their bytes split into streams (all low bytes,
        // then all next bytes...) compress 12% smaller and faster than plain
        // values (9.56 vs 10.86 B/packet of header columns on lan-hour, encoding
        // 423 vs 463 ns/packet).
        data_type if data_type.is_integer() => Encoding::BYTE_STREAM_SPLIT,
        // Addresses and MACs: a few distinct values per row group.
        DataType::FixedSizeBinary(_) => Encoding::RLE_DICTIONARY,
        // Packet bytes and strings.
        _ => Encoding::PLAIN,
    }
}

impl SegmentOptions {
    /// How each column of a `packets` segment is written by the chunk encoder.
    fn packet_chunk_options(&self, field: &Field) -> ChunkOptions {
        let column = field.name().as_str();
        let data = column == col::DATA;
        let address = column == col::SRC_ADDR || column == col::DST_ADDR;
        ChunkOptions {
            page_rows: self.page_rows,
            // Small pages of packet bytes: exporting one packet decompresses one
            // page of about a thousand packets, not eight thousand.
            page_bytes: if data { self.data_page_bytes } else { 0 },
            zstd_level: if data {
                self.data_zstd_level
            } else {
                self.zstd_level
            },
            raw_literals: data,
            lz4: self.lz4_headers && !data,
            statistics: !data,
            page_index: PAGE_INDEXED.contains(&column),
            encoding: encoding_of(field.data_type()),
            bloom: address.then_some((self.row_group_rows as u64, self.bloom_fpp)),
        }
    }

    /// How each column of a `flows` segment is written by the chunk encoder: page
    /// statistics for every column, timestamps as deltas, addresses as
    /// dictionaries with Bloom filters on the two endpoints, integers as byte
    /// streams, strings plain (zstd takes the repeats of `state` and `source`).
    fn flow_chunk_options(&self, field: &Field) -> ChunkOptions {
        let column = field.name().as_str();
        let endpoint = column == col::SRC_ADDR || column == col::DST_ADDR;
        ChunkOptions {
            page_rows: self.page_rows,
            page_bytes: 0,
            zstd_level: self.zstd_level,
            raw_literals: false,
            lz4: false,
            statistics: true,
            page_index: true,
            encoding: encoding_of(field.data_type()),
            bloom: endpoint.then_some((self.row_group_rows as u64, self.bloom_fpp)),
        }
    }

    /// Properties of the file writer: the footer's metadata. (The chunk encoder
    /// writes the columns, by `packet_chunk_options` and `flow_chunk_options`.)
    fn writer_properties(&self, table: Table) -> WriterProperties {
        WriterProperties::builder()
            .set_created_by(format!("hindsight {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![
                KeyValue::new(FORMAT_VERSION_KEY.to_owned(), FORMAT_VERSION.to_string()),
                KeyValue::new(TABLE_KEY.to_owned(), table.name().to_owned()),
            ]))
            .set_max_row_group_row_count(Some(self.row_group_rows))
            .build()
    }
}

/// A file writer that checksums (CRC-32) and counts every byte it passes on.
struct ChecksummingFile {
    inner: BufWriter<File>,
    crc: crc32fast::Hasher,
    len_bytes: u64,
}

impl Write for ChecksummingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        let accepted = buf.get(..written).unwrap_or(buf);
        self.crc.update(accepted);
        self.len_bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// What sealing a segment produced: enough to enter it in the catalog and the index.
#[derive(Clone, Debug, PartialEq)]
pub struct SealedSegment {
    /// The table the segment belongs to.
    pub table: Table,
    /// The segment's id.
    pub id: SegmentId,
    /// Final path of the segment file.
    pub path: PathBuf,
    /// Number of packet rows.
    pub rows: u64,
    /// Smallest timestamp, ns since the epoch.
    pub min_ts_nanos: i64,
    /// Largest timestamp, ns since the epoch.
    pub max_ts_nanos: i64,
    /// Size of the file in bytes.
    pub size_bytes: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
    /// Every distinct source or destination address in the segment, sorted, with
    /// the granules (row ranges) where it occurs: the segment's address postings.
    /// The writer leaves it empty for `flows` segments, which the address index
    /// does not hold (the connection index answers for them); a summary rebuilt by
    /// recovery scans it from the file for either table.
    pub addresses: Vec<(Addr16, GranuleSet)>,
    /// The covering postings (see `postings.rs`): sorted addresses with their
    /// encoded rows (`hindsight_model::decode_covered_rows`).
    pub covered: Vec<(Addr16, Vec<u8>)>,
    /// CPU time spent encoding each column (the encoding threads' own CPU time),
    /// in the table schema's order: where a segment's cost goes, for benchmarks.
    pub column_cpu: Vec<Duration>,
}

/// Writes one segment of a table. Batches go in with [`write`](Self::write); nothing is
/// visible under the final name until [`seal`](Self::seal) returns.
pub struct SegmentWriter {
    table: Table,
    id: SegmentId,
    temp_path: PathBuf,
    final_path: PathBuf,
    encoder: RowGroupEncoder,
    rows: u64,
    min_ts_nanos: i64,
    max_ts_nanos: i64,
}

impl std::fmt::Debug for SegmentWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentWriter")
            .field("id", &self.id)
            .field("temp_path", &self.temp_path)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl SegmentWriter {
    /// Creates the hidden temporary file of segment `id` of `table` in `dir`.
    pub fn create(
        dir: &Path,
        table: Table,
        id: SegmentId,
        options: &SegmentOptions,
    ) -> Result<Self> {
        let temp_path = dir.join(temp_file_name(id));
        let final_path = dir.join(segment_file_name(id));
        let file =
            File::create(&temp_path).map_err(StoreError::io("create segment", &temp_path))?;
        let sink = ChecksummingFile {
            inner: BufWriter::with_capacity(1 << 20, file),
            crc: crc32fast::Hasher::new(),
            len_bytes: 0,
        };
        let properties = options.writer_properties(table);
        let postings = (table == Table::Packets).then(|| {
            PostingsCollector::new(CoveringLimits {
                rows: options.covering_rows,
                bytes_per_row: options.covering_bytes_per_row,
            })
        });
        let encoder = RowGroupEncoder::new(sink, table, properties, options, postings)
            .map_err(StoreError::parquet(&temp_path))?;
        Ok(Self {
            table,
            id,
            temp_path,
            final_path,
            encoder,
            rows: 0,
            min_ts_nanos: i64::MAX,
            max_ts_nanos: i64::MIN,
        })
    }

    /// Returns the segment's id.
    pub fn id(&self) -> SegmentId {
        self.id
    }

    /// Returns the number of rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Returns the smallest timestamp written so far (`i64::MAX` if none).
    pub fn min_ts_nanos(&self) -> i64 {
        self.min_ts_nanos
    }

    /// Returns the bytes written to the file so far plus those buffered for the open row group.
    pub fn approximate_size_bytes(&self) -> u64 {
        self.encoder.approximate_size_bytes()
    }

    /// Appends a batch of rows of the segment's table; rows are sorted by timestamp first if needed.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let ts_column = batch.column_by_name(col::TS).cloned();
        let Some(ts) = ts_column
            .as_ref()
            .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
        else {
            return Err(StoreError::Corrupt {
                path: self.temp_path.clone(),
                offset: 0,
                reason: "batch has no timestamp column".to_owned(),
            });
        };
        let values = ts.values();
        let batch = if values.windows(2).all(|pair| pair[0] <= pair[1]) {
            batch.clone()
        } else {
            let arrow_error = |e: arrow::error::ArrowError| {
                parquet::errors::ParquetError::ArrowError(e.to_string())
            };
            sort_to_indices(ts, None, None)
                .and_then(|indices| take_record_batch(batch, &indices))
                .map_err(arrow_error)
                .map_err(StoreError::parquet(&self.temp_path))?
        };
        if let (Some(&first), Some(&last)) = (values.iter().min(), values.iter().max()) {
            self.min_ts_nanos = self.min_ts_nanos.min(first);
            self.max_ts_nanos = self.max_ts_nanos.max(last);
        }
        let rows = batch.num_rows() as u64;
        self.encoder
            .write(batch)
            .map_err(StoreError::parquet(&self.temp_path))?;
        self.rows += rows;
        Ok(())
    }

    /// Finishes the file, makes it durable and gives it its final name. A crash at any
    /// point leaves either no segment or a whole one under its final name.
    pub fn seal(self) -> Result<SealedSegment> {
        let temp_path = self.temp_path.clone();
        let sealed = self.finish_file();
        if sealed.is_err() {
            // Not left behind to take space a full disk needs.
            let _ignored = fs::remove_file(&temp_path);
        }
        sealed
    }

    fn finish_file(self) -> Result<SealedSegment> {
        let temp_path = self.temp_path;
        let (sink, column_cpu, postings) = self
            .encoder
            .finish()
            .map_err(StoreError::parquet(&temp_path))?;
        let ChecksummingFile {
            inner,
            crc,
            len_bytes,
        } = sink;
        let file = inner
            .into_inner()
            .map_err(|e| e.into_error())
            .map_err(StoreError::io("flush segment", &temp_path))?;
        file.sync_all()
            .map_err(StoreError::io("fsync segment", &temp_path))?;
        drop(file);
        fs::rename(&temp_path, &self.final_path)
            .map_err(StoreError::io("rename segment", &temp_path))?;
        let dir = self.final_path.parent().unwrap_or(Path::new("."));
        sync_dir(dir)?;
        let postings = postings.map(PostingsCollector::finish).unwrap_or_default();
        Ok(SealedSegment {
            table: self.table,
            id: self.id,
            path: self.final_path,
            rows: self.rows,
            min_ts_nanos: self.min_ts_nanos,
            max_ts_nanos: self.max_ts_nanos,
            size_bytes: len_bytes,
            crc32: crc.finalize(),
            addresses: postings.granules,
            covered: postings.covered,
            column_cpu,
        })
    }

    /// Abandons the segment and removes its temporary file.
    pub fn abort(self) {
        drop(self.encoder);
        let _ignored = fs::remove_file(&self.temp_path);
    }
}

/// Encodes row groups into the segment file. Batches are gathered until they make
/// a row group (`row_group_rows`); a `packets` row group's rows are grouped by
/// host (`group_by_host`) and its address postings collected in that order; the
/// columns of a row group are then encoded by
/// `encode_threads` threads, each taking whole columns (the costliest first, to
/// the least loaded thread), and the encoded chunks are written in schema order.
/// Columns of both tables go through the chunk encoder of `chunk.rs`.
struct RowGroupEncoder {
    file: SerializedFileWriter<ChecksummingFile>,
    schema: SchemaRef,
    /// Per column: its descriptor and how the chunk encoder writes it.
    chunk_columns: Vec<(ColumnDescPtr, ChunkOptions)>,
    row_groups: usize,
    row_group_rows: usize,
    threads: usize,
    pending: Vec<RecordBatch>,
    /// CPU time spent encoding each column so far.
    column_cpu: Vec<Duration>,
    /// Whether rows are grouped by host.
    group_by_host: bool,
    /// Address postings, collected for `packets` segments only.
    postings: Option<PostingsCollector>,
    /// Rows encoded so far: the segment row of the next row group's first row.
    rows_encoded: u64,
    /// The summaries made from the rows (see [`summary_builders`]), for
    /// `packets` segments only.
    summaries: Vec<SummaryBuilder>,
    /// Whether the hosts summary is made from the flows summary at the end.
    hosts_from_flows: bool,
    /// Written only for a segment of at least this many rows.
    summary_min_rows: u64,
}

/// One column of a row group to encode: its position, values, descriptor and options.
struct ColumnJob(usize, ArrayRef, ColumnDescPtr, ChunkOptions);

impl RowGroupEncoder {
    fn new(
        sink: ChecksummingFile,
        table: Table,
        properties: WriterProperties,
        options: &SegmentOptions,
        postings: Option<PostingsCollector>,
    ) -> Result<Self, ParquetError> {
        let schema = table.schema();
        let column_cpu = vec![Duration::ZERO; schema.fields().len()];
        let (file, _) = ArrowWriter::try_new(sink, SchemaRef::clone(&schema), Some(properties))?
            .into_serialized_writer()?;
        let descriptors = file.schema_descr();
        let chunk_columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let chunk_options = match table {
                    Table::Packets => options.packet_chunk_options(field),
                    Table::Flows => options.flow_chunk_options(field),
                };
                (descriptors.column(i), chunk_options)
            })
            .collect();
        Ok(Self {
            file,
            schema,
            chunk_columns,
            row_groups: 0,
            row_group_rows: options.row_group_rows.max(1),
            threads: options.encode_threads.max(1),
            pending: Vec::new(),
            column_cpu,
            group_by_host: options.group_by_host && table == Table::Packets,
            postings,
            rows_encoded: 0,
            summary_min_rows: options.summary_min_rows,
            summaries: if table == Table::Packets {
                summary_builders(options.summaries)
            } else {
                Vec::new()
            },
            hosts_from_flows: hosts_from_flows(options.summaries),
        })
    }

    fn approximate_size_bytes(&self) -> u64 {
        let pending: usize = self
            .pending
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum();
        (self.file.bytes_written() + pending) as u64
    }

    /// Adds rows; encodes every full row group they complete.
    fn write(&mut self, batch: RecordBatch) -> Result<(), ParquetError> {
        self.pending.push(batch);
        let pending_rows: usize = self.pending.iter().map(RecordBatch::num_rows).sum();
        if pending_rows >= self.row_group_rows {
            self.flush(false)?;
        }
        Ok(())
    }

    /// Encodes the pending rows as row groups of `row_group_rows`; the remainder
    /// stays pending unless `all`.
    fn flush(&mut self, all: bool) -> Result<(), ParquetError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let rows = match self.pending.as_slice() {
            [one] => one.clone(),
            _ => concat_batches(&self.schema, &self.pending)
                .map_err(|e| ParquetError::ArrowError(e.to_string()))?,
        };
        self.pending.clear();
        let mut offset = 0;
        while offset < rows.num_rows() {
            let len = self.row_group_rows.min(rows.num_rows() - offset);
            let group = rows.slice(offset, len);
            if len < self.row_group_rows && !all {
                self.pending.push(group);
                break;
            }
            self.encode(&group)?;
            offset += len;
        }
        Ok(())
    }

    /// The columns of one row group as encoding jobs, each with its estimated cost.
    fn jobs(&self, group: &RecordBatch) -> Vec<(ColumnJob, usize)> {
        // Estimated cost: a per-value part (levels, statistics, encoding) and a
        // per-byte part (compression).
        let cost = |column: &ArrayRef| column.len() * 8 + column.get_buffer_memory_size();
        group
            .columns()
            .iter()
            .zip(&self.chunk_columns)
            .enumerate()
            .map(|(position, (column, (descr, options)))| {
                let job = ColumnJob(
                    position,
                    ArrayRef::clone(column),
                    ColumnDescPtr::clone(descr),
                    options.clone(),
                );
                (job, cost(column))
            })
            .collect()
    }

    /// Encodes one row group and appends it to the file.
    fn encode(&mut self, group: &RecordBatch) -> Result<(), ParquetError> {
        let hosts = self.group_by_host.then(|| host_order(group)).flatten();
        let grouped = match hosts.as_ref().and_then(|hosts| hosts.order.as_ref()) {
            Some(order) => {
                Some(reorder(group, order).map_err(|e| ParquetError::ArrowError(e.to_string()))?)
            }
            None => None,
        };
        let group = grouped.as_ref().unwrap_or(group);
        if let Some(postings) = &mut self.postings {
            match &hosts {
                Some(HostOrder { ids, addresses, .. }) => {
                    postings.collect_numbered(group, self.rows_encoded, ids, addresses);
                }
                None => postings.collect(group, self.rows_encoded),
            }
        }
        self.rows_encoded += group.num_rows() as u64;
        for summary in &mut self.summaries {
            summary.add(group)?;
        }
        let mut jobs = self.jobs(group);
        // Costliest columns first, each to the thread with the least cost so far.
        jobs.sort_by_key(|(_, cost)| std::cmp::Reverse(*cost));
        let mut bins: Vec<(usize, Vec<ColumnJob>)> =
            (0..self.threads).map(|_| (0, Vec::new())).collect();
        for (job, cost) in jobs {
            if let Some(bin) = bins.iter_mut().min_by_key(|(load, _)| *load) {
                bin.0 += cost;
                bin.1.push(job);
            }
        }
        let mut bins = bins.into_iter().map(|(_, jobs)| jobs);
        let first = bins.next().unwrap_or_default();
        let mut chunks: Vec<(usize, EncodedChunk, Duration)> = std::thread::scope(|scope| {
            let others: Vec<_> = bins
                .filter(|jobs| !jobs.is_empty())
                .map(|jobs| scope.spawn(move || encode_columns(jobs)))
                .collect();
            let mut chunks = encode_columns(first)?;
            for handle in others {
                let encoded = handle.join().map_err(|_| {
                    ParquetError::General("a column encoding thread panicked".to_owned())
                })?;
                chunks.extend(encoded?);
            }
            Ok::<_, ParquetError>(chunks)
        })?;
        chunks.sort_by_key(|(position, _, _)| *position);
        let mut row_group = self.file.next_row_group()?;
        for (position, chunk, cpu) in chunks {
            row_group.append_column(&chunk.bytes, chunk.close)?;
            if let Some(total) = self.column_cpu.get_mut(position) {
                *total += cpu;
            }
        }
        row_group.close()?;
        self.row_groups += 1;
        Ok(())
    }

    /// Encodes what is pending, writes the footer and returns the file with the
    /// CPU time each column took and the postings collected.
    #[allow(clippy::type_complexity)]
    fn finish(
        mut self,
    ) -> Result<(ChecksummingFile, Vec<Duration>, Option<PostingsCollector>), ParquetError> {
        self.flush(true)?;
        let mut summaries = std::mem::take(&mut self.summaries);
        if self.rows_encoded < self.summary_min_rows {
            summaries.clear();
        }
        if self.hosts_from_flows
            && let Some(flows) = summaries.iter().find(|s| s.kind() == SummaryKind::Flows)
        {
            summaries.push(flows.coarsen(SummaryKind::Hosts)?);
        }
        // Flows past its share of the rows would save a reader little.
        let rows = self.rows_encoded;
        summaries.retain(|s| {
            s.kind() != SummaryKind::Flows || s.groups() as u64 * FLOWS_MAX_SHARE <= rows
        });
        summaries.sort_by_key(|s| s.kind().position());
        for summary in summaries {
            let kind = summary.kind();
            let bytes = encode_summary(&summary.finish()?, kind)?;
            let location = SummaryLocation {
                offset: self.file.bytes_written() as u64,
                len: bytes.len() as u64,
                crc32: crc32fast::hash(&bytes),
            };
            self.file.write_all(&bytes)?;
            self.file.append_key_value_metadata(KeyValue::new(
                kind.key().to_owned(),
                location.to_text(),
            ));
        }
        Ok((self.file.into_inner()?, self.column_cpu, self.postings))
    }
}

/// Whether, for `wanted`, the hosts summary is made from the flows summary's
/// groups rather than the rows: when both are wanted, so a row is grouped
/// once for both.
fn hosts_from_flows(wanted: SummarySet) -> bool {
    wanted.contains(SummaryKind::Hosts) && wanted.contains(SummaryKind::Flows)
}

/// The builders that group a `packets` segment's rows for `wanted`: services
/// and flows, and hosts unless it is made from flows ([`hosts_from_flows`]).
fn summary_builders(wanted: SummarySet) -> Vec<SummaryBuilder> {
    wanted
        .kinds()
        .filter(|&kind| kind != SummaryKind::Hosts || !hosts_from_flows(wanted))
        .map(SummaryBuilder::new)
        .collect()
}

/// Encodes the columns of `jobs`, each with the CPU time this thread spent on it.
fn encode_columns(
    jobs: Vec<ColumnJob>,
) -> Result<Vec<(usize, EncodedChunk, Duration)>, ParquetError> {
    let mut zstd = Compressors::default();
    jobs.into_iter()
        .map(|ColumnJob(position, column, descr, options)| {
            let started = thread_cpu_time();
            let chunk = encode_column(&column, descr, &options, &mut zstd)?;
            Ok((position, chunk, thread_cpu_time().saturating_sub(started)))
        })
        .collect()
}

/// CPU time the calling thread has used (zero where the clock cannot be read).
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut now) };
    if read != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Makes a directory's entries (a rename, a new file) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io("fsync directory", dir))
}
