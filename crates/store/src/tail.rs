//! The unsealed tail of an archive: the packet batches and connection records a
//! live writer has taken in but not yet made visible on disk, held in memory so
//! that a reader in the same process answers from them at once (`serve` while it
//! captures), instead of a minute later when their segment seals.
//!
//! Every piece is tagged with the segment it goes into. Packet batches leave the
//! tail once that segment is in the catalog; connection records once the
//! connection index has committed the entries of that flows segment (the index
//! commits later than the segment seals). A reader that takes a [`TailView`]
//! first and its view of the catalog and indexes after sees every row exactly
//! once: a piece is either still in the view, or it left the tail before the view
//! was taken, and then its segment (or commit) was already on disk.
//!
//! Memory is bounded: past `max_bytes` of packet batches, the writer seals its
//! open segment early ([`Tail::is_full`]).

use std::sync::{Arc, RwLock};

use arrow::array::RecordBatch;
use hindsight_model::{FlowRecord, SegmentId};

/// The unsealed rows of one live archive writer.
#[derive(Debug)]
pub struct Tail {
    max_bytes: usize,
    inner: RwLock<Pieces>,
}

#[derive(Debug, Default, Clone)]
struct Pieces {
    packets: Vec<(SegmentId, RecordBatch)>,
    flows: Vec<(SegmentId, Arc<[FlowRecord]>)>,
    packet_bytes: usize,
}

/// What the tail held at one moment.
#[derive(Debug, Default, Clone)]
pub struct TailView {
    /// Packet batches, in the order written, with the segment each goes into.
    pub packets: Vec<(SegmentId, RecordBatch)>,
    /// Connection records, in the order written, with the flows segment each
    /// went into.
    pub flows: Vec<(SegmentId, Arc<[FlowRecord]>)>,
}

impl Tail {
    /// An empty tail that holds at most about `max_bytes` of packet batches.
    pub fn new(max_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            max_bytes,
            inner: RwLock::new(Pieces::default()),
        })
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Pieces> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a batch written to packets segment `id`.
    pub fn push_packets(&self, id: SegmentId, batch: RecordBatch) {
        let mut pieces = self.write();
        pieces.packet_bytes += batch.get_array_memory_size();
        pieces.packets.push((id, batch));
    }

    /// Adds connection records written to flows segment `id`.
    pub fn push_flows(&self, id: SegmentId, records: Arc<[FlowRecord]>) {
        self.write().flows.push((id, records));
    }

    /// Whether the packet batches held reach the bound: the writer seals then.
    pub fn is_full(&self) -> bool {
        let pieces = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pieces.packet_bytes >= self.max_bytes
    }

    /// Packets segment `id` is in the catalog: its batches leave the tail.
    pub fn sealed(&self, id: SegmentId) {
        let mut pieces = self.write();
        let mut freed = 0;
        pieces.packets.retain(|(of, batch)| {
            let keep = *of != id;
            if !keep {
                freed += batch.get_array_memory_size();
            }
            keep
        });
        pieces.packet_bytes -= freed;
    }

    /// The connection index has committed the entries of every flows segment up
    /// to `mark`: their records leave the tail.
    pub fn committed(&self, mark: SegmentId) {
        self.write().flows.retain(|(of, _)| *of > mark);
    }

    /// Everything left without being sealed (the writer stopped): the tail empties.
    pub fn clear(&self) {
        *self.write() = Pieces::default();
    }

    /// What the tail holds now.
    pub fn view(&self) -> TailView {
        let pieces = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        TailView {
            packets: pieces.packets.clone(),
            flows: pieces.flows.clone(),
        }
    }
}
