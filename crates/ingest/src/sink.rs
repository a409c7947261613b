//! The segment sink: a thread that owns the archive, the open segments and the
//! indexes, and turns record batches into sealed, catalogued, indexed segments:
//! packet batches into `packets` segments and their address postings, flow records
//! into `flows` segments and the connection index.
//!
//! Parquet encoding and zstd compression are the most expensive part of ingest, so
//! they run here, beside the thread that reads and decodes, and the two stages
//! overlap. The channel between them is bounded, which bounds memory.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use hindsight_index::{AddressIndex, ConnectionIndex};
use hindsight_model::{FlowRecord, SegmentId};
use hindsight_store::arrow::array::RecordBatch;
use hindsight_store::flows::FlowBatchBuilder;
use hindsight_store::{
    Archive, CatalogEntry, SegmentOptions, SegmentReader, SegmentWriter, Table, Tail,
};

use crate::Retention;
use crate::error::IngestError;

/// Batches in flight between the decoding thread and the sink.
const CHANNEL_BATCHES: usize = 4;

/// A command for the sink thread.
#[derive(Debug)]
enum Command {
    /// Append a batch to the open packets segment of a retention class (0:
    /// the default), opening one if none is.
    Write(usize, RecordBatch),
    /// Index flow records and append them to the open flows segment.
    Flows(Vec<FlowRecord>),
    /// Seal the open segments, if any, and acknowledge if asked to. A failed seal
    /// without an acknowledgement stops the sink with the error, which the next
    /// command's sender then receives.
    Seal(Option<Sender<Result<(), IngestError>>>),
    /// Expire by these bounds from the next seal on (the same classes).
    Retention(Retention),
}

/// Connection entries staged (see `ConnectionIndex::stage`) beyond which they are
/// committed as a table file of the index, the open flows segment sealed first.
pub const STAGED_MAX_BYTES: usize = 64 << 20;

/// How often a seal waiting for its acknowledgement checks the sink is alive.
const SEAL_POLL: Duration = Duration::from_millis(100);

/// What the sink did over its life.
#[derive(Debug, Default)]
pub struct SinkReport {
    /// Segments sealed, catalogued and indexed, in order.
    pub sealed: Vec<CatalogEntry>,
}

/// The handle the decoding thread holds on the sink thread.
#[derive(Debug)]
pub struct SegmentSink {
    commands: Option<Sender<Command>>,
    thread: Option<JoinHandle<Result<(SinkReport, Archive), IngestError>>>,
}

impl SegmentSink {
    /// Starts the sink thread, which takes ownership of the archive and the indexes.
    pub fn start(
        archive: Archive,
        index: AddressIndex,
        connections: Arc<ConnectionIndex>,
        options: SegmentOptions,
        retention: Retention,
        tail: Option<Arc<Tail>>,
    ) -> Self {
        let (commands, receiver) = bounded(CHANNEL_BATCHES);
        let thread = std::thread::Builder::new()
            .name("segment-sink".to_owned())
            .spawn(move || {
                let indexes = Indexes {
                    addresses: index,
                    connections,
                    tail,
                };
                let mut retention = retention;
                let result = run(archive, &indexes, &options, &mut retention, &receiver);
                if let Some(tail) = &indexes.tail {
                    // What was not sealed is not in the archive.
                    tail.clear();
                }
                result
            })
            .ok();
        Self {
            commands: Some(commands),
            thread,
        }
    }

    /// Hands a batch to the sink. Fails if the sink has stopped on an error.
    pub fn write(&mut self, class: usize, batch: RecordBatch) -> Result<(), IngestError> {
        self.send(Command::Write(class, batch))
    }

    /// Hands flow records to the sink. Fails if the sink has stopped on an error.
    pub fn write_flows(&mut self, records: Vec<FlowRecord>) -> Result<(), IngestError> {
        self.send(Command::Flows(records))
    }

    /// Asks the sink to seal the open segment once it has written what came
    /// before, without waiting: reading goes on while the sink encodes.
    pub fn roll(&mut self) -> Result<(), IngestError> {
        self.send(Command::Seal(None))
    }

    /// Hands the sink new retention bounds for the same classes (see
    /// `Ingestor::set_retention`).
    pub fn set_retention(&mut self, retention: Retention) -> Result<(), IngestError> {
        self.send(Command::Retention(retention))
    }

    /// Seals the open segment and waits until it is catalogued and indexed.
    pub fn seal(&mut self) -> Result<(), IngestError> {
        let (ack, acked) = bounded(1);
        self.send(Command::Seal(Some(ack)))?;
        // A sink thread that died (a bug: a panic) after the command was queued
        // never drops it, so the acknowledgement is awaited while it lives.
        loop {
            match acked.recv_timeout(SEAL_POLL) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Timeout)
                    if self.thread.as_ref().is_some_and(|t| !t.is_finished()) => {}
                Err(_) => return Err(self.stopped()),
            }
        }
    }

    /// Seals the open segment, stops the thread and returns its report and the archive.
    pub fn finish(mut self) -> Result<(SinkReport, Archive), IngestError> {
        self.seal()?;
        self.commands = None;
        self.join()
    }

    fn send(&mut self, command: Command) -> Result<(), IngestError> {
        let sent = self
            .commands
            .as_ref()
            .is_some_and(|commands| commands.send(command).is_ok());
        if sent { Ok(()) } else { Err(self.stopped()) }
    }

    /// Returns the error that stopped the sink thread.
    fn stopped(&mut self) -> IngestError {
        self.commands = None;
        match self.join() {
            Err(error) => error,
            Ok(_) => IngestError::SinkStopped,
        }
    }

    fn join(&mut self) -> Result<(SinkReport, Archive), IngestError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Err(IngestError::SinkStopped),
        }
    }
}

/// The indexes the sink writes.
struct Indexes {
    addresses: AddressIndex,
    connections: Arc<ConnectionIndex>,
    /// The unsealed rows, for readers in this process (live capture).
    tail: Option<Arc<Tail>>,
}

impl Indexes {
    /// Commits the staged connection entries (all of flows segments up to
    /// `mark`); their records leave the tail.
    fn commit(&self, mark: Option<SegmentId>) -> Result<(), IngestError> {
        self.connections.commit(mark)?;
        if let (Some(tail), Some(mark)) = (&self.tail, mark) {
            tail.committed(mark);
        }
        Ok(())
    }
}

/// An open segment of one table (and, for `packets`, of one retention class).
struct Open {
    table: Table,
    class: Option<String>,
    writer: Option<SegmentWriter>,
}

impl Open {
    fn writer(
        &mut self,
        archive: &Archive,
        next_id: &mut SegmentId,
        options: &SegmentOptions,
    ) -> Result<&mut SegmentWriter, IngestError> {
        if self.writer.is_none() {
            let dir = archive.table_dir(self.table);
            self.writer = Some(SegmentWriter::create(&dir, self.table, *next_id, options)?);
            *next_id = SegmentId(next_id.0 + 1);
        }
        self.writer.as_mut().ok_or(IngestError::SinkStopped)
    }

    /// Seals the open segment, if any (see [`seal`]).
    fn seal(
        &mut self,
        archive: &mut Archive,
        indexes: &Indexes,
        report: &mut SinkReport,
        last_flows: &mut Option<SegmentId>,
    ) -> Result<(), IngestError> {
        match self.writer.take() {
            Some(writer) => seal(
                writer,
                self.class.as_deref(),
                archive,
                indexes,
                report,
                last_flows,
            ),
            None => Ok(()),
        }
    }
}

/// The open segments: `flows` first, then `packets` of each retention class
/// (the default class first).
fn open_segments(retention: &Retention) -> Vec<Open> {
    let flows = Open {
        table: Table::Flows,
        class: None,
        writer: None,
    };
    let packets = (0..=retention.classes.len()).map(|class| Open {
        table: Table::Packets,
        class: retention.class_name(class).map(str::to_owned),
        writer: None,
    });
    std::iter::once(flows).chain(packets).collect()
}

/// The index in [`open_segments`] of the `flows` segment.
const FLOWS: usize = 0;

fn run(
    mut archive: Archive,
    indexes: &Indexes,
    options: &SegmentOptions,
    retention: &mut Retention,
    commands: &Receiver<Command>,
) -> Result<(SinkReport, Archive), IngestError> {
    let mut report = SinkReport::default();
    let mut opens = open_segments(retention);
    // The last flows segment sealed: all staged connection entries are of it or
    // of segments before it once the open flows segment is sealed.
    let mut last_flows: Option<SegmentId> = None;
    let result = run_commands(
        &mut archive,
        indexes,
        (options, &mut *retention),
        commands,
        &mut report,
        &mut opens,
        &mut last_flows,
    );
    match result {
        Ok(()) => {}
        Err(error @ IngestError::DiskFull { .. }) => {
            // Under the floor: what was read is sealed in the room the floor
            // leaves, so that nothing read so far is lost.
            for open in opens.iter_mut().rev() {
                if open
                    .seal(&mut archive, indexes, &mut report, &mut last_flows)
                    .is_err()
                {
                    break;
                }
            }
            abort(opens);
            let _committed = indexes.commit(last_flows);
            return Err(error);
        }
        Err(error) => {
            abort(opens);
            return Err(full_disk_error(archive.root(), retention, error));
        }
    }
    abort(opens);
    // The memtables' last table files can meet a full disk too (ENOSPC in the
    // connection index's flush once its blocks grew): named as one.
    indexes
        .addresses
        .flush()
        .and_then(|()| indexes.connections.flush())
        .map_err(|error| full_disk_error(archive.root(), retention, error.into()))?;
    Ok((report, archive))
}

/// The sink's commands, until the channel closes or one fails.
fn run_commands(
    archive: &mut Archive,
    indexes: &Indexes,
    (options, retention): (&SegmentOptions, &mut Retention),
    commands: &Receiver<Command>,
    report: &mut SinkReport,
    opens: &mut [Open],
    last_flows: &mut Option<SegmentId>,
) -> Result<(), IngestError> {
    let mut flow_batch = FlowBatchBuilder::new();
    let mut next_id = archive.next_segment_id();
    for command in commands {
        match command {
            Command::Write(class, batch) => {
                make_room(archive, indexes, retention)?;
                let open = opens
                    .get_mut(FLOWS + 1 + class)
                    .ok_or(IngestError::SinkStopped)?;
                let writer = open.writer(archive, &mut next_id, options)?;
                writer.write(&batch)?;
                if let Some(tail) = &indexes.tail {
                    tail.push_packets(writer.id(), batch);
                    if tail.is_full() {
                        // Memory is bounded: the segments seal early.
                        for open in opens.iter_mut().skip(FLOWS + 1) {
                            open.seal(archive, indexes, report, last_flows)?;
                        }
                    }
                }
            }
            Command::Flows(records) => {
                indexes.connections.stage(&records);
                // Records end in the order of their last packets; the segment keeps
                // them in the order of their first. Sorting them here spares the
                // writer sorting and copying the built batch.
                let mut order: Vec<u32> = (0..records.len() as u32).collect();
                order.sort_by_key(|&i| records[i as usize].first_ns);
                for i in order {
                    flow_batch.append(&records[i as usize]);
                }
                make_room(archive, indexes, retention)?;
                let flows = &mut opens[FLOWS];
                let writer = flows.writer(archive, &mut next_id, options)?;
                writer.write(&flow_batch.finish())?;
                if let Some(tail) = &indexes.tail {
                    tail.push_flows(writer.id(), records.into());
                }
                if indexes.connections.staged_bytes() >= STAGED_MAX_BYTES {
                    // Memory is bounded: the flows segment is sealed early, so
                    // that every staged entry is of a sealed segment.
                    flows.seal(archive, indexes, report, last_flows)?;
                    indexes.commit(*last_flows)?;
                }
            }
            Command::Seal(ack) => {
                // The packets first, so that a flows segment is never sealed
                // before the packets its records stand for.
                let mut result = Ok(());
                for open in opens.iter_mut().rev() {
                    result = result.and_then(|()| open.seal(archive, indexes, report, last_flows));
                }
                // Every staged entry is now of a sealed segment. A seal that is
                // waited for makes them visible; others leave them staged (one
                // table file per 64 MiB of entries rather than per segment).
                let commit =
                    ack.is_some() || indexes.connections.staged_bytes() >= STAGED_MAX_BYTES;
                let result = result
                    .and_then(|()| {
                        if commit {
                            indexes.commit(*last_flows)?;
                        }
                        Ok(())
                    })
                    .and_then(|()| expire_flows(archive, indexes))
                    .and_then(|()| expire_packets(archive, indexes, retention))
                    .map_err(|error| full_disk_error(archive.root(), retention, error));
                match (ack, result) {
                    (Some(ack), result) => {
                        let failed = result.is_err();
                        let _receiver_gone = ack.send(result);
                        if failed {
                            break;
                        }
                    }
                    (None, Ok(())) => {}
                    (None, Err(error)) => return Err(error),
                }
            }
            Command::Retention(bounds) => *retention = bounds,
        }
    }
    Ok(())
}

/// Removes the temporary files of segments left open.
fn abort(opens: Vec<Open>) {
    for open in opens {
        if let Some(writer) = open.writer {
            writer.abort();
        }
    }
}

/// Seals, catalogues (in `class`) and (for packets) indexes the segment, or
/// drops it if it is empty. A sealed `flows` segment becomes `last_flows`.
fn seal(
    writer: SegmentWriter,
    class: Option<&str>,
    archive: &mut Archive,
    indexes: &Indexes,
    report: &mut SinkReport,
    last_flows: &mut Option<SegmentId>,
) -> Result<(), IngestError> {
    if writer.rows() == 0 {
        writer.abort();
        return Ok(());
    }
    let sealed = writer.seal()?;
    let entry = archive.register_in_class(&sealed, class)?;
    if sealed.table == Table::Packets {
        indexes
            .addresses
            .add_segment(sealed.id, &sealed.addresses, &sealed.covered)?;
        // In the catalog and indexed: readers find it on disk from now on.
        if let Some(tail) = &indexes.tail {
            tail.sealed(sealed.id);
        }
    }
    if sealed.table == Table::Flows {
        *last_flows = Some(sealed.id);
    }
    report.sealed.push(entry);
    Ok(())
}

/// The `packets` segments by retention class, each class oldest first (by
/// their newest packet) without its newest segment, which retention never
/// removes; with the newest packet archived.
struct ByClass {
    classes: Vec<ClassSegments>,
    newest_ts: Option<i64>,
}

struct ClassSegments {
    /// Bytes the class keeps whatever the others need.
    min_bytes: u64,
    /// Its longest age, else the archive's.
    max_age: Option<Duration>,
    /// Bytes of all its segments, the newest included.
    bytes: u64,
    /// Its segments but the newest, oldest first.
    removable: std::collections::VecDeque<CatalogEntry>,
}

impl ByClass {
    fn of(archive: &Archive, retention: &Retention) -> Self {
        let mut classes: Vec<ClassSegments> = (0..=retention.classes.len())
            .map(|class| {
                let config = class.checked_sub(1).and_then(|i| retention.classes.get(i));
                ClassSegments {
                    min_bytes: config.map_or(0, |c| c.min_bytes),
                    max_age: config.and_then(|c| c.max_age).or(retention.max_age),
                    bytes: 0,
                    removable: std::collections::VecDeque::new(),
                }
            })
            .collect();
        let mut entries: Vec<CatalogEntry> = archive
            .catalog()
            .entries_of(Table::Packets)
            .cloned()
            .collect();
        entries.sort_by_key(|entry| (entry.max_ts_nanos, entry.id));
        let newest_ts = entries.last().map(|entry| entry.max_ts_nanos);
        for entry in entries {
            let segments = &mut classes[retention.class_index(entry.class.as_deref())];
            segments.bytes += entry.size_bytes;
            segments.removable.push_back(entry);
        }
        for segments in &mut classes {
            segments.removable.pop_back();
        }
        Self { classes, newest_ts }
    }

    fn total_bytes(&self) -> u64 {
        self.classes.iter().map(|c| c.bytes).sum()
    }

    /// Takes the segments past their class's age.
    fn take_too_old(&mut self) -> Vec<CatalogEntry> {
        let Some(newest) = self.newest_ts else {
            return Vec::new();
        };
        let mut old = Vec::new();
        for segments in &mut self.classes {
            let Some(age) = segments.max_age else {
                continue;
            };
            let cutoff = newest.saturating_sub(i64::try_from(age.as_nanos()).unwrap_or(i64::MAX));
            let keep = segments.removable.split_off(
                segments
                    .removable
                    .iter()
                    .position(|entry| entry.max_ts_nanos >= cutoff)
                    .unwrap_or(segments.removable.len()),
            );
            for entry in std::mem::replace(&mut segments.removable, keep) {
                segments.bytes -= entry.size_bytes;
                old.push(entry);
            }
        }
        old
    }

    /// Takes the segment expiry removes next for room: the oldest of the
    /// classes that stay at or above their guarantee without it, else of the
    /// classes over their guarantee, else (guarantees larger than the bound
    /// allows) the oldest of all.
    fn take_next(&mut self) -> Option<CatalogEntry> {
        let tiers: [fn(&ClassSegments, &CatalogEntry) -> bool; 3] = [
            |c, e| c.bytes - e.size_bytes >= c.min_bytes,
            |c, _| c.bytes > c.min_bytes,
            |_, _| true,
        ];
        for keeps_guarantee in tiers {
            let oldest = self
                .classes
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.removable.front().map(|e| (i, c, e)))
                .filter(|(_, c, e)| keeps_guarantee(c, e))
                .min_by_key(|(_, _, e)| (e.max_ts_nanos, e.id))
                .map(|(i, _, _)| i);
            if let Some(i) = oldest {
                let segments = &mut self.classes[i];
                let entry = segments.removable.pop_front()?;
                segments.bytes -= entry.size_bytes;
                return Some(entry);
            }
        }
        None
    }
}

/// Removes the `packets` segments beyond the retention bounds, with their
/// address postings: those past their class's age, then, while the archive
/// is over `max_bytes`, the oldest of the classes over their guarantee
/// ([`ByClass::take_next`]). Never a class's newest segment.
fn expire_packets(
    archive: &mut Archive,
    indexes: &Indexes,
    retention: &Retention,
) -> Result<(), IngestError> {
    if !retention.expires() {
        return Ok(());
    }
    let mut segments = ByClass::of(archive, retention);
    for entry in segments.take_too_old() {
        remove_packets_segment(archive, indexes, &entry)?;
    }
    if retention.max_packet_bytes == 0 {
        return Ok(());
    }
    while segments.total_bytes() > retention.max_packet_bytes {
        let Some(entry) = segments.take_next() else {
            break;
        };
        remove_packets_segment(archive, indexes, &entry)?;
    }
    Ok(())
}

/// Removes one `packets` segment with its address postings. The catalog line
/// goes first, so a crash in between leaves only postings of a segment no
/// query plans.
fn remove_packets_segment(
    archive: &mut Archive,
    indexes: &Indexes,
    entry: &CatalogEntry,
) -> Result<(), IngestError> {
    // The postings to delete are the segment's addresses, from its file or,
    // for a segment held only as a copy, as they were kept when its local
    // file was removed; a segment that cannot be read leaves its postings,
    // which no query plans without it.
    let root = archive.root().to_owned();
    let addresses: Vec<_> = SegmentReader::open(&archive.segment_path(entry))
        .and_then(|reader| reader.address_postings())
        .map(|postings| postings.into_iter().map(|(address, _)| address).collect())
        .ok()
        .or_else(|| hindsight_store::objects::copy_only_addresses(&root, entry.segment_id()))
        .unwrap_or_default();
    archive.remove_segment(entry.segment_id())?;
    indexes
        .addresses
        .remove_segment(entry.segment_id(), &addresses)?;
    hindsight_store::objects::forget_copy_only(&root, entry.segment_id());
    Ok(())
}

/// Keeps the free-space floor (`[packets] min_free_bytes`) before a write:
/// under it, an archive whose retention expires removes its oldest `packets`
/// segments (never the newest) until their bytes make up the shortfall; one
/// that keeps everything, or has nothing left to remove, fails with
/// [`IngestError::DiskFull`].
fn make_room(
    archive: &mut Archive,
    indexes: &Indexes,
    retention: &Retention,
) -> Result<(), IngestError> {
    let floor = retention.min_free_bytes;
    if floor == 0 {
        return Ok(());
    }
    let Some(free) = hindsight_store::disk::free_bytes(archive.root()) else {
        return Ok(());
    };
    if free >= floor {
        return Ok(());
    }
    if !retention.expires() {
        return Err(disk_full(
            archive.root(),
            free,
            floor,
            "the archive sets no [packets] max_bytes or max_age_secs, so nothing is expired to make room"
                .to_owned(),
        ));
    }
    // By the removed files' sizes rather than asking again: a file a reader
    // still holds open frees its blocks only when it is closed.
    let mut made = 0u64;
    let mut segments = ByClass::of(archive, retention);
    while free.saturating_add(made) < floor {
        let Some(entry) = segments.take_next() else {
            break;
        };
        remove_packets_segment(archive, indexes, &entry)?;
        made = made.saturating_add(entry.size_bytes);
    }
    if free.saturating_add(made) >= floor {
        return Ok(());
    }
    Err(disk_full(
        archive.root(),
        hindsight_store::disk::free_bytes(archive.root()).unwrap_or(free),
        floor,
        "every segment but the newest of each retention class has been expired, and that is not room enough"
            .to_owned(),
    ))
}

fn disk_full(root: &Path, free_bytes: u64, min_free_bytes: u64, reason: String) -> IngestError {
    IngestError::DiskFull {
        archive: root.to_owned(),
        mount: hindsight_store::disk::mount_point(root),
        free_bytes,
        min_free_bytes,
        reason,
    }
}

/// `error` as [`IngestError::DiskFull`] if it is ENOSPC, else unchanged.
pub(crate) fn full_disk_error(
    root: &Path,
    retention: &Retention,
    error: IngestError,
) -> IngestError {
    if matches!(error, IngestError::DiskFull { .. }) || !hindsight_store::disk::is_disk_full(&error)
    {
        return error;
    }
    disk_full(
        root,
        hindsight_store::disk::free_bytes(root).unwrap_or(0),
        retention.min_free_bytes,
        format!("a write failed: {error}"),
    )
}

/// Removes the `flows` segments whose newest record starts before the connection
/// index's expiration cutoff: the table follows the index's count-based bound.
fn expire_flows(archive: &mut Archive, indexes: &Indexes) -> Result<(), IngestError> {
    let Some(cutoff) = indexes.connections.cutoff() else {
        return Ok(());
    };
    let expired: Vec<SegmentId> = archive
        .catalog()
        .entries_of(Table::Flows)
        .filter(|entry| entry.max_ts_nanos < cutoff)
        .map(|entry| entry.segment_id())
        .collect();
    for id in expired {
        archive.remove_segment(id)?;
    }
    Ok(())
}
