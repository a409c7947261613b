//! The segment sink: a thread that owns the archive, the open segment and the address
//! index, and turns record batches into sealed, catalogued, indexed segments.
//!
//! Parquet encoding and zstd compression are the most expensive part of ingest, so
//! they run here, beside the thread that reads and decodes, and the two stages
//! overlap. The channel between them is bounded, which bounds memory.

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded};
use hindsight_index::AddressIndex;
use hindsight_model::SegmentId;
use hindsight_store::arrow::array::RecordBatch;
use hindsight_store::{Archive, CatalogEntry, SegmentOptions, SegmentWriter};

use crate::error::IngestError;

/// Batches in flight between the decoding thread and the sink.
const CHANNEL_BATCHES: usize = 4;

/// A command for the sink thread.
#[derive(Debug)]
enum Command {
    /// Append a batch to the open segment, opening one if none is.
    Write(RecordBatch),
    /// Seal the open segment, if any, and acknowledge.
    Seal(Sender<Result<(), IngestError>>),
}

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
    /// Starts the sink thread, which takes ownership of the archive and the index.
    pub fn start(archive: Archive, index: AddressIndex, options: SegmentOptions) -> Self {
        let (commands, receiver) = bounded(CHANNEL_BATCHES);
        let thread = std::thread::Builder::new()
            .name("segment-sink".to_owned())
            .spawn(move || run(archive, index, &options, &receiver))
            .ok();
        Self {
            commands: Some(commands),
            thread,
        }
    }

    /// Hands a batch to the sink. Fails if the sink has stopped on an error.
    pub fn write(&mut self, batch: RecordBatch) -> Result<(), IngestError> {
        self.send(Command::Write(batch))
    }

    /// Seals the open segment and waits until it is catalogued and indexed.
    pub fn seal(&mut self) -> Result<(), IngestError> {
        let (ack, acked) = bounded(1);
        self.send(Command::Seal(ack))?;
        match acked.recv() {
            Ok(result) => result,
            Err(_) => Err(self.stopped()),
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

fn run(
    mut archive: Archive,
    index: AddressIndex,
    options: &SegmentOptions,
    commands: &Receiver<Command>,
) -> Result<(SinkReport, Archive), IngestError> {
    let mut report = SinkReport::default();
    let mut open: Option<SegmentWriter> = None;
    let mut next_id = archive.next_segment_id();
    for command in commands {
        match command {
            Command::Write(batch) => {
                let writer = match open.as_mut() {
                    Some(writer) => writer,
                    None => {
                        let writer =
                            SegmentWriter::create(&archive.packets_dir(), next_id, options)?;
                        next_id = SegmentId(next_id.0 + 1);
                        open.insert(writer)
                    }
                };
                writer.write(&batch)?;
            }
            Command::Seal(ack) => {
                let result = match open.take() {
                    Some(writer) => seal(writer, &mut archive, &index, &mut report),
                    None => Ok(()),
                };
                let failed = result.is_err();
                let _receiver_gone = ack.send(result);
                if failed {
                    break;
                }
            }
        }
    }
    if let Some(writer) = open {
        writer.abort();
    }
    index.sync()?;
    Ok((report, archive))
}

fn seal(
    writer: SegmentWriter,
    archive: &mut Archive,
    index: &AddressIndex,
    report: &mut SinkReport,
) -> Result<(), IngestError> {
    if writer.rows() == 0 {
        writer.abort();
        return Ok(());
    }
    let sealed = writer.seal()?;
    let entry = archive.register(&sealed)?;
    index.add_segment(sealed.id, &sealed.addresses)?;
    report.sealed.push(entry);
    Ok(())
}
