//! The role of the ingest crate is to move packets from a capture source into the
//! archive: read frames, decode their headers, keep the first `snaplen` bytes,
//! batch them by column, and hand batches to the segment sink, which seals
//! time-partitioned segments, catalogues them and indexes their addresses. The
//! same decoded headers feed the flow table, whose connection records go to the
//! `flows` table and the connection index.
//!
//! ```text
//! capture file ─► CaptureReader ─► decode ─┬► PacketBatchBuilder ─► SegmentSink (thread)
//!                  (hindsight-capture)     │   (store schema)        packets segments ─► catalog ─► postings
//!                                          └► FlowTable ───────────► flows segments, connection index
//!                                             (hindsight-flow)
//! ```
//!
//! Nothing read before an error is lost: when a capture turns out damaged, the
//! packets read up to the damage are sealed into the archive before the error is
//! returned.

pub mod check;
pub mod error;
pub use hindsight_store::settings;
pub use hindsight_store::settings::{Retention, RetentionClass};
mod sink;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::Arc;

use hindsight_capture::CaptureReader;
use hindsight_flow::zeek::{LogKind, LogReader, UidJoin, ZeekLineError, app_record};
use hindsight_flow::{FlowTable, FlowTableConfig, FlowTableStats, Payload};
use hindsight_index::{AddressIndex, ConnectionIndex, Expiry, Maintenance};
use hindsight_model::{DecodeStatus, FlowRecord, Frame, SegmentId, ip_proto};
use hindsight_store::flows::flow_records;
use hindsight_store::schema::{MAX_BATCH_DATA_BYTES, PacketBatchBuilder};
use hindsight_store::{
    Archive, CatalogEntry, RecoveryReport, SegmentOptions, SegmentReader, StoreError, Table, Tail,
};

pub use crate::error::IngestError;
pub use crate::sink::STAGED_MAX_BYTES;
use crate::sink::SegmentSink;

/// Tunables of ingest. The defaults are what `hindsight ingest` uses.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// Bytes of each frame kept for pcap export (0 keeps whole frames, as tcpdump `-s 0`).
    pub snaplen: u32,
    /// Length of a time partition: a segment never holds packets of two partitions
    /// (late packets excepted, see `docs/ARCHITECTURE.md`).
    pub partition_nanos: i64,
    /// A segment is sealed once it holds this many packets.
    pub segment_max_rows: u64,
    /// Parquet tunables of segments.
    pub segment: SegmentOptions,
    /// Timeouts and size of the flow table that builds connection records.
    pub flows: FlowTableConfig,
    /// Build connection records from the packets (`flows` segments and the
    /// connection index); false archives packets only. Records pushed with
    /// [`Ingestor::push_flow_records`] are archived either way.
    pub flows_from_packets: bool,
    /// Count-based expiration of the connection index.
    pub expiry: Expiry,
    /// The seed the connection index keys Community IDs with.
    pub community_seed: u16,
    /// Bounds of the packets table on disk.
    pub retention: Retention,
    /// Keep the unsealed rows in memory for readers in this process (a live
    /// recorder), up to about this many bytes of packet batches, past which the
    /// open segment seals early; 0 keeps none ([`Ingestor::tail`]).
    pub tail_bytes: usize,
    /// Most connections (uids) whose Zeek dns/ssl/http/ssh fields wait in
    /// memory for their conn.log records ([`Ingestor::ingest_zeek_log`]).
    pub zeek_pending_uids: usize,
}

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            snaplen: 128,
            partition_nanos: 3600 * 1_000_000_000,
            segment_max_rows: 4 * 1024 * 1024,
            segment: SegmentOptions::default(),
            flows: FlowTableConfig::default(),
            flows_from_packets: true,
            expiry: Expiry::OFF,
            community_seed: hindsight_index::connections::DEFAULT_COMMUNITY_SEED,
            retention: Retention::default(),
            tail_bytes: 0,
            zeek_pending_uids: 1_000_000,
        }
    }
}

/// Counts of one ingest run (or of one file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngestCounts {
    /// Frames read.
    pub packets: u64,
    /// Sum of wire lengths.
    pub wire_bytes: u64,
    /// Sum of captured lengths as read from the source.
    pub captured_bytes: u64,
    /// Frames by decode status, indexed by `DecodeStatus as usize`.
    pub by_status: [u64; DecodeStatus::ALL.len()],
}

impl IngestCounts {
    fn add_frame(&mut self, frame: &Frame<'_>, status: DecodeStatus) {
        self.packets += 1;
        self.wire_bytes += u64::from(frame.wire_len);
        self.captured_bytes += frame.data.len() as u64;
        if let Some(count) = self.by_status.get_mut(status as usize) {
            *count += 1;
        }
    }

    /// Adds another run's counts to these.
    pub fn merge(&mut self, other: &Self) {
        self.packets += other.packets;
        self.wire_bytes += other.wire_bytes;
        self.captured_bytes += other.captured_bytes;
        for (mine, theirs) in self.by_status.iter_mut().zip(other.by_status) {
            *mine += theirs;
        }
    }

    /// Returns the count of frames with `status`.
    pub fn with_status(&self, status: DecodeStatus) -> u64 {
        self.by_status.get(status as usize).copied().unwrap_or(0)
    }
}

/// Progress of the file being read, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Bytes of the source file consumed so far (compressed bytes for gzip).
    pub source_bytes: u64,
    /// Frames read from this file so far.
    pub packets: u64,
}

/// What ingesting one capture file did.
#[derive(Debug)]
pub struct FileOutcome {
    /// Counts of the frames read from the file (all of them archived).
    pub counts: IngestCounts,
    /// The error that stopped reading early, if the file is damaged.
    pub error: Option<IngestError>,
}

/// What reading Zeek logs did ([`Ingestor::ingest_zeek_logs`]).
#[derive(Debug, Default)]
pub struct ZeekReport {
    /// Connection records archived.
    pub records: u64,
    /// Application records read (dns, ssl, http, ssh).
    pub fields: u64,
    /// Files that could not be read, or had unreadable lines.
    pub damaged: usize,
}

/// What reading one flow log did.
#[derive(Debug, Default)]
pub struct LogOutcome {
    /// The log's kind; `None` if the file holds no record or header to tell.
    /// Logs of other kinds than conn, dns, ssl, http and ssh are not read
    /// beyond their header.
    pub kind: Option<LogKind>,
    /// Records read: connection records archived (conn.log), or records whose
    /// fields wait for their connection (dns, ssl, http and ssh logs).
    pub records: u64,
    /// Lines that could not be read (skipped).
    pub bad_lines: u64,
    /// The first of those, with their line numbers.
    pub first_errors: Vec<ZeekLineError>,
    /// The error that stopped reading early (cannot open, read error, cut gzip).
    pub error: Option<IngestError>,
}

/// Opens a text file, decompressing it if it starts with the gzip magic.
fn open_text(path: &Path) -> std::io::Result<Box<dyn std::io::BufRead>> {
    use std::io::{BufReader, Read, Seek};
    let mut file = std::fs::File::open(path)?;
    let mut magic = [0u8; 2];
    let gzip = file.read(&mut magic)? == 2 && magic == [0x1f, 0x8b];
    file.rewind()?;
    Ok(if gzip {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, file))
    })
}

/// The kind of a Zeek log file, from its header or first record (at most its
/// first 64 lines); `None` if they do not tell.
pub fn zeek_log_kind(path: &Path) -> std::io::Result<Option<LogKind>> {
    let mut reader = open_text(path)?;
    let mut parser = LogReader::new();
    let mut line = Vec::with_capacity(1024);
    for _ in 0..64 {
        line.clear();
        if std::io::BufRead::read_until(&mut reader, b'\n', &mut line)? == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        // A line that cannot be read does not tell; the next may.
        let _ = parser.push_line(text.trim_end_matches('\n'));
        if parser.kind().is_some() {
            break;
        }
    }
    Ok(parser.kind().cloned())
}

/// What a whole ingest run did.
#[derive(Debug)]
pub struct IngestSummary {
    /// Counts over all files.
    pub counts: IngestCounts,
    /// Segments sealed by this run (both tables).
    pub sealed: Vec<CatalogEntry>,
    /// Counters of the flow table.
    pub flows: FlowTableStats,
    /// Wall-clock time from open to finish.
    pub elapsed: Duration,
}

impl IngestSummary {
    /// What `ingest` says of the run, a line each: packets and rate from
    /// `files` file(s), how they decoded, the segments sealed, and (`flows`)
    /// the connection records built.
    pub fn lines(&self, files: usize, flows: bool) -> Vec<String> {
        use hindsight_output::{human_bytes, human_rate};
        let (counts, seconds) = (&self.counts, self.elapsed.as_secs_f64());
        let rate = if seconds > 0.0 {
            counts.packets as f64 / seconds
        } else {
            0.0
        };
        let mut lines = vec![format!(
            "ingested {} packets ({} on the wire, {} captured) from {files} file(s) in {seconds:.2} s: {}packets/s",
            counts.packets,
            human_bytes(counts.wire_bytes),
            human_bytes(counts.captured_bytes),
            human_rate(rate),
        )];
        let by_reason: Vec<String> = DecodeStatus::ALL
            .iter()
            .filter(|&&status| counts.with_status(status) > 0)
            .map(|&status| format!("{} {}", counts.with_status(status), status.name()))
            .collect();
        if !by_reason.is_empty() {
            lines.push(format!("  decoded: {}", by_reason.join(", ")));
        }
        let packets = Table::Packets.name();
        let segments = self.sealed.iter().filter(|s| s.table == packets);
        let bytes: u64 = segments.clone().map(|s| s.size_bytes).sum();
        let per_packet = bytes as f64 / counts.packets.max(1) as f64;
        lines.push(format!(
            "  sealed {} packet segment(s), {} on disk, {per_packet:.1} bytes/packet",
            segments.count(),
            human_bytes(bytes),
        ));
        let f = &self.flows;
        let mut flows_line = match flows {
            false => "  flows: none built (--no-flows)".to_owned(),
            true => format!(
                "  flows: {} connection records from {} IP packets ({} not IP), {} with application fields",
                f.records, f.packets, f.not_flows, f.app_records
            ),
        };
        if flows && f.app_cut > 0 {
            flows_line += &format!(
                " ({} cut short at the bound of buffered first bytes)",
                f.app_cut
            );
        }
        if flows && f.evicted > 0 {
            flows_line += &format!(
                ", {} closed early because the flow table was full",
                f.evicted
            );
        }
        lines.push(flows_line);
        lines
    }
}

/// Ingests frames into an archive; see the crate documentation.
#[derive(Debug)]
pub struct Ingestor {
    options: IngestOptions,
    sink: SegmentSink,
    /// One batch builder per retention class (0: the default class).
    builders: Vec<PacketBatchBuilder>,
    /// End (exclusive, in nanoseconds) of the partition of the open segment, if a
    /// segment is open; `i64::MAX` where no later partition starts within `i64`.
    /// Kept as a bound, so that a packet costs a comparison and not a division.
    partition_end: Option<i64>,
    /// Rows handed to the open segment, including the unflushed batch.
    segment_rows: u64,
    counts: IngestCounts,
    started: Instant,
    flow_table: FlowTable,
    /// Ended flows not yet handed to the sink.
    flow_out: Vec<FlowRecord>,
    /// The connection index (shared with the sink and the maintenance thread).
    connections: Arc<ConnectionIndex>,
    /// Runs expiration of the connection index while ingest runs.
    maintenance: Option<Maintenance>,
    /// The unsealed rows, if kept.
    tail: Option<Arc<Tail>>,
    /// Zeek application fields waiting for their conn.log records.
    zeek_join: UidJoin,
    /// The archive's directory, which a full disk's error names.
    root: PathBuf,
}

/// Ended flows handed to the sink at once.
const FLOW_BATCH: usize = 8192;

/// What opening the archive for ingest repaired.
#[derive(Debug, Default)]
pub struct OpenReport {
    /// Catalog-level repairs (see [`RecoveryReport`]).
    pub recovery: RecoveryReport,
    /// Catalogued segments whose index entries were missing and have been rebuilt:
    /// address postings of `packets` segments, connection entries of `flows`
    /// segments sealed after the connection index's last commit.
    pub reindexed: Vec<CatalogEntry>,
}

/// Puts into the connection index the records of the `flows` segments sealed
/// after its last commit (a crash in between: the sink commits the index's staged
/// entries only now and then, see `sink.rs`). Returns those segments.
fn restage_flows(
    archive: &Archive,
    connections: &ConnectionIndex,
) -> Result<Vec<CatalogEntry>, IngestError> {
    let mut flows: Vec<&CatalogEntry> = archive.catalog().entries_of(Table::Flows).collect();
    flows.sort_by_key(|entry| entry.segment_id());
    let Some(mark) = connections.flows_mark()? else {
        // An index without a mark is new, or was written by a version that put
        // every record in before sealing its segment: either way it holds every
        // catalogued segment's records.
        let last = flows
            .last()
            .map_or(SegmentId(0), |entry| entry.segment_id());
        connections.set_flows_mark(last)?;
        return Ok(Vec::new());
    };
    let missing: Vec<CatalogEntry> = flows
        .into_iter()
        .filter(|entry| entry.segment_id() > mark)
        .cloned()
        .collect();
    for entry in &missing {
        let reader = SegmentReader::open(&archive.segment_path(entry))?;
        let groups = (0..reader.row_groups()).collect();
        for batch in reader.read(groups, None)? {
            let corrupt = |reason: String| {
                IngestError::Store(StoreError::Corrupt {
                    path: reader.path().to_owned(),
                    offset: 0,
                    reason,
                })
            };
            let batch = batch.map_err(|e| corrupt(e.to_string()))?;
            let records =
                flow_records(&batch).ok_or_else(|| corrupt("not a flows segment".to_owned()))?;
            connections.stage(&records);
        }
    }
    if let Some(last) = missing.last() {
        connections.commit(Some(last.segment_id()))?;
    }
    Ok(missing)
}

impl Ingestor {
    /// Opens (creating if needed) the archive at `root` for ingest, repairing what a
    /// crash left behind and re-indexing segments whose postings are missing.
    pub fn open(root: &Path, options: IngestOptions) -> Result<(Self, OpenReport), IngestError> {
        let (archive, recovery) = Archive::open_writer(root)?;
        let index = AddressIndex::open(&archive.index_dir())?;
        let indexed = index.indexed_segments()?;
        let mut reindexed = Vec::new();
        for entry in archive.catalog().entries_of(Table::Packets) {
            if indexed.contains(&entry.segment_id()) {
                continue;
            }
            let reader = SegmentReader::open(&archive.segment_path(entry))?;
            index.add_segment(entry.segment_id(), &reader.address_postings()?, &[])?;
            reindexed.push(entry.clone());
        }
        let batch_rows = options.segment.row_group_rows;
        let data_capacity = batch_rows * options.snaplen.clamp(64, 2048) as usize;
        let connections = Arc::new(ConnectionIndex::open_seeded(
            &archive.connections_dir(),
            options.expiry,
            options.community_seed,
        )?);
        reindexed.extend(restage_flows(&archive, &connections)?);
        let maintenance = options.expiry.expires().then(|| {
            Maintenance::start(Arc::clone(&connections), |error| {
                log::warn!("connection index expiration: {error}");
            })
        });
        let tail = (options.tail_bytes > 0).then(|| Tail::new(options.tail_bytes));
        let sink = SegmentSink::start(
            archive,
            index,
            Arc::clone(&connections),
            options.segment.clone(),
            options.retention.clone(),
            tail.clone(),
        );
        let ingestor = Self {
            root: root.to_owned(),
            zeek_join: UidJoin::new(options.zeek_pending_uids),
            flow_table: FlowTable::new(options.flows),
            flow_out: Vec::new(),
            connections,
            maintenance,
            tail,
            // The classes' builders grow as their packets come.
            builders: std::iter::once(PacketBatchBuilder::with_capacity(batch_rows, data_capacity))
                .chain(
                    options
                        .retention
                        .classes
                        .iter()
                        .map(|_| PacketBatchBuilder::with_capacity(0, 0)),
                )
                .collect(),
            options,
            sink,
            partition_end: None,
            segment_rows: 0,
            counts: IngestCounts::default(),
            started: Instant::now(),
        };
        Ok((
            ingestor,
            OpenReport {
                recovery,
                reindexed,
            },
        ))
    }

    /// Decodes one frame and adds it to the open segment.
    pub fn push(&mut self, frame: &Frame<'_>) -> Result<DecodeStatus, IngestError> {
        match self.partition_end {
            // Late packets stay in the open segment; only time moving forward rolls it.
            Some(end) if frame.ts_nanos >= end && end != i64::MAX => {
                self.roll()?;
                self.partition_end = Some(self.partition_end_of(frame.ts_nanos));
            }
            None => self.partition_end = Some(self.partition_end_of(frame.ts_nanos)),
            Some(_) => {}
        }
        let (record, layout) = hindsight_decode::record_layout(frame);
        let headers = &record.headers;
        let keep = match self.options.snaplen {
            0 => frame.data.len(),
            snaplen => frame.data.len().min(snaplen as usize),
        };
        let class = if self.options.retention.classes.is_empty() {
            0
        } else {
            self.options.retention.class_of(&record)
        };
        let builder = &mut self.builders[class];
        builder.append(&record, frame.data.get(..keep).unwrap_or(frame.data));
        let batch_full = builder.len() >= self.options.segment.row_group_rows
            || builder.data_bytes() >= MAX_BATCH_DATA_BYTES;
        if self.options.flows_from_packets {
            let (bytes, seq, cut) =
                layout.payload(frame.data, headers.ip_proto == Some(ip_proto::TCP));
            self.flow_table.push_payload(
                frame.ts_nanos,
                headers,
                frame.wire_len,
                Payload { bytes, seq, cut },
                &mut self.flow_out,
            );
        }
        if self.flow_out.len() >= FLOW_BATCH {
            self.flush_flows()?;
        }
        self.counts.add_frame(frame, headers.status);
        self.segment_rows += 1;
        if batch_full {
            self.flush_batch()?;
        }
        if self.segment_rows >= self.options.segment_max_rows {
            self.roll()?;
        }
        Ok(headers.status)
    }

    fn flush_batch(&mut self) -> Result<(), IngestError> {
        for (class, builder) in self.builders.iter_mut().enumerate() {
            if !builder.is_empty() {
                self.sink.write(class, builder.finish())?;
            }
        }
        self.flush_flows()
    }

    fn flush_flows(&mut self) -> Result<(), IngestError> {
        if !self.flow_out.is_empty() {
            // A full batch's room again: grown from empty, the records were
            // copied at every doubling.
            let records = std::mem::replace(&mut self.flow_out, Vec::with_capacity(FLOW_BATCH));
            self.sink.write_flows(records)?;
        }
        Ok(())
    }

    /// Starts a new segment: the sink seals the open one after encoding it, while
    /// this thread reads on. A failed seal stops the sink, and the next call that
    /// hands it work returns the error.
    fn roll(&mut self) -> Result<(), IngestError> {
        self.flush_batch()?;
        self.sink.roll()?;
        self.segment_started();
        Ok(())
    }

    /// The end (exclusive) of the partition holding `ts_nanos`.
    fn partition_end_of(&self, ts_nanos: i64) -> i64 {
        let nanos = self.options.partition_nanos;
        (ts_nanos.div_euclid(nanos) + 1)
            .checked_mul(nanos)
            .unwrap_or(i64::MAX)
    }

    fn segment_started(&mut self) {
        self.partition_end = None;
        self.segment_rows = 0;
    }

    /// Hands what is buffered (the packets of an unfinished batch, ended
    /// connections) to the sink without sealing: with a tail, readers in this
    /// process see them once the sink has taken them.
    pub fn publish(&mut self) -> Result<(), IngestError> {
        self.flush_batch()
    }

    /// The unsealed rows, if this ingestor keeps them (`tail_bytes`).
    pub fn tail(&self) -> Option<Arc<Tail>> {
        self.tail.clone()
    }

    /// Takes new retention bounds (`serve` reloading the archive's
    /// config.toml): the sink expires by them from its next seal. The
    /// classes cannot change while the archive is open (each has segments
    /// of its own): that is refused, saying what changed, and nothing is.
    pub fn set_retention(&mut self, retention: Retention) -> Result<(), IngestError> {
        if let Some(change) = self.options.retention.classes_changed(&retention) {
            return Err(IngestError::Reload(change));
        }
        self.sink.set_retention(retention.clone())?;
        self.options.retention = retention;
        Ok(())
    }

    /// Seals the open segment: everything pushed so far becomes durable and queryable.
    pub fn seal(&mut self) -> Result<(), IngestError> {
        self.flush_batch()?;
        self.sink.seal()?;
        self.segment_started();
        Ok(())
    }

    /// Reads a whole capture file into the archive. A damaged file is read up to the
    /// damage; what was read is sealed and the damage is returned in the outcome.
    /// Errors of the archive itself (disk full...) are returned as `Err`.
    pub fn ingest_file(
        &mut self,
        path: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<FileOutcome, IngestError> {
        match CaptureReader::open(path) {
            Ok(reader) => self.ingest_capture(reader, progress),
            Err(error) => Ok(FileOutcome {
                counts: IngestCounts::default(),
                error: Some(error.into()),
            }),
        }
    }

    /// Reads a capture from standard input, as [`Self::ingest_file`] reads a file.
    pub fn ingest_stdin(
        &mut self,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<FileOutcome, IngestError> {
        match CaptureReader::stdin() {
            Ok(reader) => self.ingest_capture(reader, progress),
            Err(error) => Ok(FileOutcome {
                counts: IngestCounts::default(),
                error: Some(error.into()),
            }),
        }
    }

    /// Reads an opened capture into the archive (see [`Self::ingest_file`]).
    pub fn ingest_capture<R: std::io::Read>(
        &mut self,
        mut reader: CaptureReader<R>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<FileOutcome, IngestError> {
        let before = self.counts.clone();
        let mut read_error = None;
        let mut since_progress = 0u32;
        loop {
            let frame = match reader.next_frame() {
                None => break,
                Some(Ok(frame)) => frame,
                Some(Err(error)) => {
                    read_error = Some(error.into());
                    break;
                }
            };
            self.push(&frame)?;
            since_progress += 1;
            if since_progress == 65_536 {
                since_progress = 0;
                progress(Progress {
                    source_bytes: reader.source_bytes_read(),
                    packets: reader.frames_read(),
                });
            }
        }
        progress(Progress {
            source_bytes: reader.source_bytes_read(),
            packets: reader.frames_read(),
        });
        if read_error.is_some() {
            // Make what was read before the damage durable before reporting it.
            self.seal()?;
        }
        let mut counts = self.counts.clone();
        counts.packets -= before.packets;
        counts.wire_bytes -= before.wire_bytes;
        counts.captured_bytes -= before.captured_bytes;
        for (now, then) in counts.by_status.iter_mut().zip(before.by_status) {
            *now -= then;
        }
        Ok(FileOutcome {
            counts,
            error: read_error,
        })
    }

    /// Hands connection records of an external flow source (a NetFlow/IPFIX
    /// collector) to the archive: the `flows` table and the connection index. They
    /// become durable and queryable at the next [`seal`](Self::seal).
    pub fn push_flow_records(
        &mut self,
        records: impl IntoIterator<Item = FlowRecord>,
    ) -> Result<(), IngestError> {
        for record in records {
            self.flow_out.push(record);
            if self.flow_out.len() >= FLOW_BATCH {
                self.flush_flows()?;
            }
        }
        Ok(())
    }

    /// Reads a Zeek log (TSV or JSON lines, plain or gzip). A conn.log's records
    /// go to the `flows` table and the connection index, each with the fields
    /// that dns, ssl, http and ssh logs read before gave its uid; those logs'
    /// fields wait (at most [`IngestOptions::zeek_pending_uids`] uids) for their
    /// conn.log, so read them first ([`zeek_log_kind`] tells a file's kind).
    /// Lines that cannot be read are counted and the first few reported with
    /// their line numbers; the rest of the file is read.
    pub fn ingest_zeek_log(&mut self, path: &Path) -> Result<LogOutcome, IngestError> {
        let mut outcome = LogOutcome::default();
        let mut reader = match open_text(path) {
            Ok(reader) => reader,
            Err(error) => {
                outcome.error = Some(IngestError::Log {
                    path: path.to_owned(),
                    source: error,
                });
                return Ok(outcome);
            }
        };
        let mut parser = LogReader::new();
        let mut line = Vec::with_capacity(1024);
        loop {
            line.clear();
            match std::io::BufRead::read_until(&mut reader, b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    outcome.error = Some(IngestError::Log {
                        path: path.to_owned(),
                        source: error,
                    });
                    break;
                }
            }
            let text = String::from_utf8_lossy(&line);
            let number = parser.lines() + 1;
            let read = match parser.push_line(text.trim_end_matches('\n')) {
                Ok(None) => Ok(()),
                Ok(Some(row)) => match row.kind() {
                    LogKind::Conn => hindsight_flow::zeek::conn_record(&row).map(|mut record| {
                        record.app = self.zeek_join.take(&record.uid).map(Box::new);
                        outcome.records += 1;
                        self.flow_out.push(record);
                    }),
                    // Not read: the loop ends below, once the kind is kept.
                    LogKind::Other(_) => Ok(()),
                    _ => app_record(&row).map(|record| {
                        if let Some(record) = record {
                            outcome.records += 1;
                            self.zeek_join.add(record);
                        }
                    }),
                },
                Err(error) => Err(error.reason),
            };
            outcome.kind = parser.kind().cloned();
            if let Err(reason) = read {
                outcome.bad_lines += 1;
                if outcome.first_errors.len() < 10 {
                    outcome.first_errors.push(ZeekLineError {
                        line: number,
                        reason,
                    });
                }
            }
            if matches!(outcome.kind, Some(LogKind::Other(_))) {
                break;
            }
            if self.flow_out.len() >= FLOW_BATCH {
                self.flush_flows()?;
            }
        }
        self.flush_flows()?;
        Ok(outcome)
    }

    /// Reads Zeek logs: the application logs (dns, ssl, http, ssh) first,
    /// whatever their order, so that their fields wait for the conn.log
    /// records that take them by uid; logs of other kinds are skipped. What
    /// each file gave, and what could not be joined, goes to `read`; what
    /// could not be read, to `problems`.
    pub fn ingest_zeek_logs(
        &mut self,
        paths: &[PathBuf],
        read: &mut dyn FnMut(String),
        problems: &mut dyn FnMut(String),
    ) -> Result<ZeekReport, IngestError> {
        let mut report = ZeekReport::default();
        let mut ordered = Vec::new();
        for path in paths {
            match zeek_log_kind(path) {
                Ok(kind) => ordered.push((!matches!(kind, Some(LogKind::Conn) | None), path)),
                Err(error) => {
                    problems(format!("cannot read Zeek log {}: {error}", path.display()));
                    report.damaged += 1;
                }
            }
        }
        // Application logs (`true`) first.
        ordered.sort_by_key(|(application, _)| !application);
        for (_, path) in ordered {
            let name = path.display();
            let outcome = self.ingest_zeek_log(path)?;
            for error in &outcome.first_errors {
                problems(format!("{name}: {error}"));
            }
            let unlisted = outcome.bad_lines - outcome.first_errors.len() as u64;
            if unlisted > 0 {
                problems(format!("{name}: {unlisted} more unreadable line(s)"));
            }
            if let Some(error) = &outcome.error {
                problems(error.to_string());
            }
            if outcome.error.is_some() || outcome.bad_lines > 0 {
                report.damaged += 1;
            }
            let (records, skipped) = (outcome.records, outcome.bad_lines);
            read(match &outcome.kind {
                Some(LogKind::Conn) | None => {
                    report.records += records;
                    format!(
                        "{name}: {records} connection record(s), {skipped} unreadable line(s) skipped"
                    )
                }
                Some(LogKind::Other(kind)) => format!(
                    "{name}: skipped, a Zeek {kind} log (hindsight reads conn, dns, ssl, http and ssh logs)"
                ),
                Some(kind) => {
                    report.fields += records;
                    format!(
                        "{name}: {records} {} record(s), {skipped} unreadable line(s) skipped",
                        kind.name()
                    )
                }
            });
        }
        let (unjoined, over_limit) = self.zeek_unjoined();
        if unjoined > 0 {
            read(format!(
                "{unjoined} connection(s) of the dns/ssl/http/ssh logs have no conn.log record with their uid; their fields are not kept"
            ));
        }
        if over_limit > 0 {
            problems(format!(
                "{over_limit} dns/ssl/http/ssh record(s) dropped: more than {} connections waited for their conn.log records; ingest the logs of one rotation interval together",
                self.options.zeek_pending_uids
            ));
        }
        Ok(report)
    }

    /// The uids whose Zeek application fields still wait for a conn.log record,
    /// and the records dropped because [`IngestOptions::zeek_pending_uids`]
    /// uids waited.
    pub fn zeek_unjoined(&self) -> (usize, u64) {
        (self.zeek_join.len(), self.zeek_join.over_limit())
    }

    /// Ends the open flows, seals the open segments and closes the archive.
    pub fn finish(mut self) -> Result<IngestSummary, IngestError> {
        self.flow_table.flush(&mut self.flow_out);
        self.flush_batch()?;
        // A run shorter than the expiration intervals still leaves the index (and
        // the flows segments, removed as the sink seals) within its bound: one last
        // cutoff update before the final seal, and a compaction after it.
        drop(self.maintenance.take());
        let expiring = self.options.expiry.expires();
        // The index's own writes here meet a full disk as the sink's do.
        let (root, retention) = (&self.root, &self.options.retention);
        let full = |error: hindsight_index::IndexError| {
            sink::full_disk_error(root, retention, error.into())
        };
        if expiring {
            // The sink inserts what it was handed before sealing; wait for it.
            self.sink.seal()?;
            self.connections.update_cutoff().map_err(full)?;
        }
        let (report, _archive) = self.sink.finish()?;
        if expiring {
            self.connections.compact().map_err(full)?;
        }
        Ok(IngestSummary {
            counts: self.counts,
            flows: self.flow_table.stats(),
            sealed: report.sealed,
            elapsed: self.started.elapsed(),
        })
    }
}
