//! The capture ring: FlowScope's QQ ("queue of queues"), a bounded in-memory ring
//! of large chunks that live capture fills and analyzers and dumpers read.
//!
//! - The memory is `chunks × chunk_bytes`, allocated once; nothing else grows.
//! - A [`Producer`] owns one chunk while it fills it and copies packets into it
//!   back to back, with no lock and no atomic per packet. It hands the chunk over
//!   (publishes it) when it is full, when it has held it longer than the maximum
//!   hold time (so a slow link still flushes), or when told to.
//! - Chunks carry sequence numbers. A new chunk reuses the slot of the oldest one,
//!   overwriting it: the ring always holds the newest `chunks` chunks.
//! - A [`Cursor`] peeks at published chunks in sequence order without consuming
//!   them; any number of cursors read independently. A cursor that falls behind is
//!   moved past what was overwritten and counts what it missed.
//! - A [`Pin`] (the dumper's) forbids overwriting a chunk and everything after it:
//!   producers wait instead. The dumper moves its pin forward as it goes.
//! - Each producer has a watermark: a time up to which every packet it will push
//!   has been published. With several producers (fanout), chunks are numbered in
//!   the order they were acquired, not by the time of their packets: a producer
//!   that lags publishes older packets in a later chunk. A reader that needs every
//!   packet up to a time asks [`Ring::settled_through`] instead of stopping at the
//!   first chunk past it.
//!
//! Locks are taken per chunk, never per packet: the outer queue's mutex when a
//! chunk is acquired or published, a chunk's read-write lock while a producer
//! swaps its memory in or out and while a cursor reads it.

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

/// Default size of one chunk: 2 MiB, a transparent huge page (the paper's choice).
pub const DEFAULT_CHUNK_BYTES: usize = 2 << 20;

/// Bytes of a record's header: timestamp (i64 ns), wire length (u32), captured
/// length (u32), interface (u16). The packet bytes follow, so that after a 14-byte
/// Ethernet header the network header starts 4-byte aligned (records are).
const RECORD_HEADER: usize = 18;
const RECORD_ALIGN: usize = 4;

/// How many pushes pass between two looks at the clock for the hold time.
const HOLD_CHECK_EVERY: u32 = 256;

/// The ring's dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes of one chunk (a multiple of 4 KiB, 64 KiB to 1 GiB).
    pub chunk_bytes: usize,
    /// Chunks in the ring (at least 2).
    pub chunks: usize,
    /// Longest time a producer keeps a chunk before publishing it.
    pub max_hold: Duration,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            chunks: 128,
            max_hold: Duration::from_millis(50),
        }
    }
}

impl RingConfig {
    /// A ring of about `memory_bytes` in chunks of the default size.
    pub fn with_memory(memory_bytes: usize) -> Self {
        Self {
            chunks: (memory_bytes / DEFAULT_CHUNK_BYTES).max(2),
            ..Self::default()
        }
    }

    /// The memory the ring allocates.
    pub fn memory_bytes(&self) -> usize {
        self.chunk_bytes.saturating_mul(self.chunks)
    }

    fn validate(&self) -> Result<(), RingError> {
        if !(64 << 10..=1 << 30).contains(&self.chunk_bytes)
            || !self.chunk_bytes.is_multiple_of(4096)
        {
            return Err(RingError::ChunkSize(self.chunk_bytes));
        }
        if self.chunks < 2 {
            return Err(RingError::TooFewChunks(self.chunks));
        }
        if self.chunk_bytes.checked_mul(self.chunks).is_none() {
            return Err(RingError::TooLarge {
                chunks: self.chunks,
                chunk_bytes: self.chunk_bytes,
            });
        }
        Ok(())
    }
}

/// What can go wrong with the ring.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingError {
    /// The chunk size is out of range.
    #[error(
        "ring chunk size of {0} bytes is out of range: it must be a multiple of 4 KiB from 64 KiB to 1 GiB"
    )]
    ChunkSize(usize),
    /// Fewer than two chunks.
    #[error("a ring of {0} chunks is too small: it needs at least 2")]
    TooFewChunks(usize),
    /// The ring would not fit the address space.
    #[error("a ring of {chunks} chunks of {chunk_bytes} bytes does not fit in memory")]
    TooLarge {
        /// Chunks asked for.
        chunks: usize,
        /// Bytes per chunk asked for.
        chunk_bytes: usize,
    },
    /// The ring was closed: no more chunks are handed out.
    #[error("the capture ring is closed")]
    Closed,
}

/// Counters of the ring since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Chunks published.
    pub chunks: u64,
    /// Packets published.
    pub packets: u64,
    /// Bytes of packet data published (captured bytes, not record headers).
    pub bytes: u64,
    /// Published chunks overwritten by newer ones.
    pub overwritten: u64,
    /// Packets cut short to fit a chunk.
    pub truncated: u64,
    /// Times a producer waited for a pin to move before it could overwrite.
    pub pin_waits: u64,
}

/// One packet in the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRef<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// Length on the wire.
    pub wire_len: u32,
    /// Interface index of the producer's source.
    pub iface: u16,
    /// The captured bytes.
    pub data: &'a [u8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Unused,
    Filling,
    Ready,
}

#[derive(Debug)]
struct Slot {
    seq: u64,
    state: SlotState,
    /// The chunk's memory; `None` while a producer holds it.
    data: Option<Box<[u8]>>,
    len: usize,
    packets: u32,
    first_ns: i64,
    last_ns: i64,
}

#[derive(Debug, Default)]
struct Outer {
    /// Sequence number of the next chunk handed to a producer.
    next_seq: u64,
    /// Chunks held by producers.
    filling: Vec<u64>,
    /// Pins: (id, first sequence number that must not be overwritten).
    pins: Vec<(u64, u64)>,
    next_pin: u64,
    /// Producers: (id, watermark), see [`Producer::caught_up`].
    producers: Vec<(u64, i64)>,
    next_producer: u64,
    closed: bool,
}

impl Outer {
    /// The lowest sequence number not yet published: a chunk being filled, or
    /// the next one to be handed out.
    fn first_unpublished(&self) -> u64 {
        self.filling.iter().copied().min().unwrap_or(self.next_seq)
    }

    fn min_pin(&self) -> Option<u64> {
        self.pins.iter().map(|&(_, seq)| seq).min()
    }

    /// Raises `producer`'s watermark to `ts_ns`; returns whether it rose.
    fn raise_watermark(&mut self, producer: u64, ts_ns: i64) -> bool {
        let mut raised = false;
        for (_, mark) in self.producers.iter_mut().filter(|(id, _)| *id == producer) {
            raised |= *mark < ts_ns;
            *mark = (*mark).max(ts_ns);
        }
        raised
    }
}

#[derive(Debug, Default)]
struct Counters {
    chunks: AtomicU64,
    packets: AtomicU64,
    bytes: AtomicU64,
    overwritten: AtomicU64,
    truncated: AtomicU64,
    pin_waits: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    config: RingConfig,
    slots: Box<[RwLock<Slot>]>,
    outer: Mutex<Outer>,
    /// Signalled whenever a chunk is published, a pin moves or the ring closes.
    changed: Condvar,
    counters: Counters,
}

impl Shared {
    fn outer(&self) -> MutexGuard<'_, Outer> {
        self.outer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[allow(clippy::indexing_slicing)] // `seq % len` is below `len`, never 0
    fn slot(&self, seq: u64) -> &RwLock<Slot> {
        &self.slots[(seq % self.slots.len() as u64) as usize]
    }

    /// Hands the next chunk to a producer: waits while reusing its slot would
    /// overwrite a pinned chunk or one a producer still holds.
    fn acquire(&self) -> Result<(u64, Box<[u8]>), RingError> {
        let n = self.slots.len() as u64;
        let mut outer = self.outer();
        let mut waited = false;
        let seq = loop {
            if outer.closed {
                return Err(RingError::Closed);
            }
            let seq = outer.next_seq;
            let overwrites = seq.checked_sub(n);
            let blocked = overwrites.is_some_and(|old| {
                outer.min_pin().is_some_and(|pin| pin <= old) || outer.filling.contains(&old)
            });
            if !blocked {
                outer.next_seq += 1;
                outer.filling.push(seq);
                break seq;
            }
            if !waited {
                waited = true;
                self.counters.pin_waits.fetch_add(1, Ordering::Relaxed);
            }
            outer = self
                .changed
                .wait(outer)
                .unwrap_or_else(PoisonError::into_inner);
        };
        drop(outer);
        let mut slot = self
            .slot(seq)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.state == SlotState::Ready {
            self.counters.overwritten.fetch_add(1, Ordering::Relaxed);
        }
        slot.seq = seq;
        slot.state = SlotState::Filling;
        slot.len = 0;
        slot.packets = 0;
        // The slot's last holder published before the slot could be handed out
        // again (checked above), so its memory is back.
        let data = slot
            .data
            .take()
            .unwrap_or_else(|| vec![0; self.config.chunk_bytes].into_boxed_slice());
        Ok((seq, data))
    }

    fn publish(&self, producer: u64, seq: u64, data: Box<[u8]>, fill: &Fill) {
        {
            let mut slot = self
                .slot(seq)
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            slot.data = Some(data);
            slot.state = SlotState::Ready;
            slot.len = fill.len;
            slot.packets = fill.packets;
            slot.first_ns = fill.first_ns;
            slot.last_ns = fill.last_ns;
        }
        self.counters.chunks.fetch_add(1, Ordering::Relaxed);
        self.counters
            .packets
            .fetch_add(u64::from(fill.packets), Ordering::Relaxed);
        self.counters.bytes.fetch_add(fill.bytes, Ordering::Relaxed);
        let mut outer = self.outer();
        outer.filling.retain(|&s| s != seq);
        // A producer pushes in time order: its later packets are no older than
        // this chunk's last, and may have the same time.
        outer.raise_watermark(producer, fill.last_ns.saturating_sub(1));
        drop(outer);
        self.changed.notify_all();
    }
}

/// The capture ring. Cloning gives another handle on the same ring.
#[derive(Clone, Debug)]
pub struct Ring {
    shared: Arc<Shared>,
}

impl Ring {
    /// Makes a ring. Chunk memory is allocated when a chunk is first filled, and
    /// never more than `config.memory_bytes()`.
    pub fn new(config: RingConfig) -> Result<Self, RingError> {
        config.validate()?;
        let slots = (0..config.chunks)
            .map(|_| {
                RwLock::new(Slot {
                    seq: u64::MAX,
                    state: SlotState::Unused,
                    data: None,
                    len: 0,
                    packets: 0,
                    first_ns: 0,
                    last_ns: 0,
                })
            })
            .collect();
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                slots,
                outer: Mutex::new(Outer::default()),
                changed: Condvar::new(),
                counters: Counters::default(),
            }),
        })
    }

    /// The ring's dimensions.
    pub fn config(&self) -> &RingConfig {
        &self.shared.config
    }

    /// A new producer with the given interface index on its packets. Until it
    /// publishes (or reports itself caught up), [`Ring::settled_through`] waits for it.
    pub fn producer(&self, iface: u16) -> Producer {
        let mut outer = self.shared.outer();
        let id = outer.next_producer;
        outer.next_producer += 1;
        outer.producers.push((id, i64::MIN));
        drop(outer);
        Producer {
            shared: Arc::clone(&self.shared),
            id,
            iface,
            chunk: None,
        }
    }

    /// Whether every packet up to `ts_ns` (inclusive) that any producer will push
    /// has been published: if so, the sequence number of the next chunk to be
    /// acquired. Every such packet is in a chunk numbered below it, so a cursor
    /// that has read up to there has seen them all. `None` while some producer
    /// may still push or publish such a packet. With no producer left, everything
    /// is settled.
    pub fn settled_through(&self, ts_ns: i64) -> Option<u64> {
        let outer = self.shared.outer();
        outer
            .producers
            .iter()
            .all(|&(_, mark)| mark >= ts_ns)
            .then_some(outer.next_seq)
    }

    /// A cursor at the oldest chunk the ring holds.
    pub fn cursor_at_oldest(&self) -> Cursor {
        self.cursor_at_seq(0)
    }

    /// A cursor at the next chunk to be published (it sees only what comes after).
    pub fn cursor_at_newest(&self) -> Cursor {
        let next = self.shared.outer().first_unpublished();
        self.cursor_at_seq(next)
    }

    /// A cursor at the first chunk that may hold packets at or after `ts_ns`:
    /// the lowest-numbered published chunk whose last packet is not older, or a
    /// chunk still being filled, if one has a lower number. With several
    /// producers, chunks overlap in time; the dump filter's time bounds sort the
    /// rest out.
    pub fn cursor_at_time(&self, ts_ns: i64) -> Cursor {
        // First the unpublished: a chunk published after this look has a number
        // at or above it; one published before is seen in the slots.
        let unpublished = self.shared.outer().first_unpublished();
        let published = self
            .shared
            .slots
            .iter()
            .filter_map(|slot| {
                let slot = slot.read().unwrap_or_else(PoisonError::into_inner);
                (slot.state == SlotState::Ready && slot.last_ns >= ts_ns).then_some(slot.seq)
            })
            .min();
        let next = published.map_or(unpublished, |seq| seq.min(unpublished));
        self.cursor_at_seq(next)
    }

    fn cursor_at_seq(&self, next: u64) -> Cursor {
        Cursor {
            shared: Arc::clone(&self.shared),
            next,
            skipped: 0,
        }
    }

    /// Pins chunk `seq` and every later one: producers wait rather than overwrite
    /// them until the pin moves past them or is dropped.
    pub fn pin(&self, seq: u64) -> Pin {
        let mut outer = self.shared.outer();
        let id = outer.next_pin;
        outer.next_pin += 1;
        outer.pins.push((id, seq));
        Pin {
            shared: Arc::clone(&self.shared),
            id,
        }
    }

    /// Stops handing out chunks: producers' next acquire fails, and cursors end
    /// once they have read everything published.
    pub fn close(&self) {
        self.shared.outer().closed = true;
        self.shared.changed.notify_all();
    }

    /// The counters so far.
    pub fn stats(&self) -> RingStats {
        let c = &self.shared.counters;
        RingStats {
            chunks: c.chunks.load(Ordering::Relaxed),
            packets: c.packets.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            overwritten: c.overwritten.load(Ordering::Relaxed),
            truncated: c.truncated.load(Ordering::Relaxed),
            pin_waits: c.pin_waits.load(Ordering::Relaxed),
        }
    }
}

#[allow(clippy::indexing_slicing)] // constant ranges of an array
fn record_header(ts_ns: i64, wire_len: u32, cap_len: u32, iface: u16) -> [u8; RECORD_HEADER] {
    let mut header = [0; RECORD_HEADER];
    header[..8].copy_from_slice(&ts_ns.to_le_bytes());
    header[8..12].copy_from_slice(&wire_len.to_le_bytes());
    header[12..16].copy_from_slice(&cap_len.to_le_bytes());
    header[16..].copy_from_slice(&iface.to_le_bytes());
    header
}

#[derive(Debug)]
struct Fill {
    len: usize,
    packets: u32,
    bytes: u64,
    first_ns: i64,
    last_ns: i64,
    since: Instant,
}

#[derive(Debug)]
struct Held {
    seq: u64,
    data: Box<[u8]>,
    fill: Fill,
}

impl Held {
    /// Appends a record if it fits.
    #[inline]
    fn write(&mut self, ts_ns: i64, wire_len: u32, iface: u16, data: &[u8]) -> bool {
        let start = self.fill.len;
        let Some(out) = self.data.get_mut(start..start + RECORD_HEADER + data.len()) else {
            return false;
        };
        let (header, rest) = out.split_at_mut(RECORD_HEADER);
        // `data` fits in a chunk, so its length fits in 32 bits.
        header.copy_from_slice(&record_header(ts_ns, wire_len, data.len() as u32, iface));
        rest.copy_from_slice(data);
        let fill = &mut self.fill;
        fill.len = (start + RECORD_HEADER + data.len()).next_multiple_of(RECORD_ALIGN);
        fill.packets += 1;
        fill.bytes += data.len() as u64;
        fill.first_ns = fill.first_ns.min(ts_ns);
        fill.last_ns = fill.last_ns.max(ts_ns);
        true
    }
}

/// A producer: fills one chunk at a time, with packets in time order. Publishes
/// what it holds when dropped.
#[derive(Debug)]
pub struct Producer {
    shared: Arc<Shared>,
    id: u64,
    iface: u16,
    chunk: Option<Held>,
}

impl Producer {
    /// Copies a packet into the ring. A chunk is acquired on the first packet
    /// after a publish, so an idle producer holds nothing. A packet larger than a
    /// chunk is cut to fit (counted as truncated). Fails only when the ring is
    /// closed.
    #[inline]
    pub fn push(&mut self, ts_ns: i64, wire_len: u32, data: &[u8]) -> Result<(), RingError> {
        let written = self
            .chunk
            .as_mut()
            .is_some_and(|held| held.write(ts_ns, wire_len, self.iface, data));
        if !written {
            return self.push_cold(ts_ns, wire_len, data);
        }
        if self
            .chunk
            .as_ref()
            .is_some_and(|held| held.fill.packets.is_multiple_of(HOLD_CHECK_EVERY))
        {
            self.publish_if_stale();
        }
        Ok(())
    }

    /// The rare part of a push: a packet larger than a chunk, a full chunk, or
    /// none held.
    #[cold]
    fn push_cold(&mut self, ts_ns: i64, wire_len: u32, data: &[u8]) -> Result<(), RingError> {
        let max_data = self.shared.config.chunk_bytes - RECORD_HEADER;
        let data = match data.get(..max_data) {
            Some(cut) if cut.len() < data.len() => {
                self.shared
                    .counters
                    .truncated
                    .fetch_add(1, Ordering::Relaxed);
                cut
            }
            _ => data,
        };
        if self
            .chunk
            .as_mut()
            .is_some_and(|held| held.write(ts_ns, wire_len, self.iface, data))
        {
            return Ok(());
        }
        self.publish();
        let (seq, memory) = self.shared.acquire()?;
        let mut held = Held {
            seq,
            data: memory,
            fill: Fill {
                len: 0,
                packets: 0,
                bytes: 0,
                first_ns: ts_ns,
                last_ns: ts_ns,
                since: Instant::now(),
            },
        };
        // A packet cut to `max_data` fits an empty chunk.
        held.write(ts_ns, wire_len, self.iface, data);
        self.chunk = Some(held);
        Ok(())
    }

    /// Publishes the held chunk if it has been held longer than the maximum hold
    /// time. Capture loops call it when they wake without packets.
    pub fn publish_if_stale(&mut self) {
        let stale = self
            .chunk
            .as_ref()
            .is_some_and(|held| held.fill.since.elapsed() >= self.shared.config.max_hold);
        if stale {
            self.publish();
        }
    }

    /// Publishes the held chunk, if any, now.
    pub fn publish(&mut self) {
        if let Some(held) = self.chunk.take() {
            self.shared
                .publish(self.id, held.seq, held.data, &held.fill);
        }
    }

    /// Tells the ring that every packet this producer pushes from now on is later
    /// than `ts_ns` (a capture thread whose socket had nothing left to read, say),
    /// so that readers waiting for a time need not wait for its next chunk. The
    /// packets of a held chunk are not published yet: the watermark stops short
    /// of them.
    pub fn caught_up(&mut self, ts_ns: i64) {
        let mark = match &self.chunk {
            Some(held) => ts_ns.min(held.fill.first_ns.saturating_sub(1)),
            None => ts_ns,
        };
        let raised = self.shared.outer().raise_watermark(self.id, mark);
        if raised {
            self.shared.changed.notify_all();
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.publish();
        let mut outer = self.shared.outer();
        outer.producers.retain(|(id, _)| *id != self.id);
        drop(outer);
        self.shared.changed.notify_all();
    }
}

/// Reads published chunks in sequence order without consuming them.
#[derive(Debug)]
pub struct Cursor {
    shared: Arc<Shared>,
    next: u64,
    skipped: u64,
}

impl Cursor {
    /// Sequence number of the next chunk this cursor reads.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Chunks this cursor missed because they were overwritten before it read them.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The next published chunk, waiting up to `timeout` for it. `Ok(None)` when
    /// the time ran out; `Err(Closed)` once the ring is closed and every chunk
    /// published before has been read. The chunk stays locked for reading (its
    /// slot cannot be overwritten) until the returned guard is dropped.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<ChunkRef<'_>>, RingError> {
        let deadline = Instant::now() + timeout;
        let n = self.shared.slots.len() as u64;
        let mut outer = self.shared.outer();
        loop {
            let oldest = outer.next_seq.saturating_sub(n);
            if self.next < oldest {
                self.skipped += oldest - self.next;
                self.next = oldest;
            }
            if self.next < outer.next_seq && !outer.filling.contains(&self.next) {
                drop(outer);
                let slot = self
                    .shared
                    .slot(self.next)
                    .read()
                    .unwrap_or_else(PoisonError::into_inner);
                if slot.seq == self.next && slot.state == SlotState::Ready {
                    self.next += 1;
                    return Ok(Some(ChunkRef { slot }));
                }
                // Overwritten since: look again.
                drop(slot);
                outer = self.shared.outer();
                continue;
            }
            if outer.closed && outer.filling.is_empty() && self.next >= outer.next_seq {
                return Err(RingError::Closed);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            outer = self
                .shared
                .changed
                .wait_timeout(outer, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A published chunk, read-locked: producers cannot overwrite it meanwhile.
#[derive(Debug)]
pub struct ChunkRef<'a> {
    slot: RwLockReadGuard<'a, Slot>,
}

impl ChunkRef<'_> {
    /// The chunk's sequence number.
    pub fn seq(&self) -> u64 {
        self.slot.seq
    }

    /// Packets in the chunk.
    pub fn packets(&self) -> u32 {
        self.slot.packets
    }

    /// Time of the oldest and the newest packet in the chunk.
    pub fn time_range(&self) -> (i64, i64) {
        (self.slot.first_ns, self.slot.last_ns)
    }

    /// The packets, in the order they were pushed.
    pub fn iter(&self) -> Packets<'_> {
        let bytes = match &self.slot.data {
            Some(data) => data.get(..self.slot.len).unwrap_or_default(),
            None => &[],
        };
        Packets { bytes }
    }
}

/// Iterator over the packets of a chunk.
#[derive(Debug)]
pub struct Packets<'a> {
    bytes: &'a [u8],
}

impl<'a> Iterator for Packets<'a> {
    type Item = PacketRef<'a>;

    fn next(&mut self) -> Option<PacketRef<'a>> {
        let header = self.bytes.get(..RECORD_HEADER)?;
        let ts_ns = i64::from_le_bytes(header.get(..8)?.try_into().ok()?);
        let wire_len = u32::from_le_bytes(header.get(8..12)?.try_into().ok()?);
        let cap = u32::from_le_bytes(header.get(12..16)?.try_into().ok()?) as usize;
        let iface = u16::from_le_bytes(header.get(16..18)?.try_into().ok()?);
        let data = self.bytes.get(RECORD_HEADER..RECORD_HEADER + cap)?;
        let record = (RECORD_HEADER + cap).next_multiple_of(RECORD_ALIGN);
        self.bytes = self.bytes.get(record..).unwrap_or_default();
        Some(PacketRef {
            ts_ns,
            wire_len,
            iface,
            data,
        })
    }
}

/// Keeps chunks from being overwritten: see [`Ring::pin`]. Dropping it releases them.
#[derive(Debug)]
pub struct Pin {
    shared: Arc<Shared>,
    id: u64,
}

impl Pin {
    /// Moves the pin to chunk `seq` (forward or back), releasing what lies before it.
    pub fn move_to(&mut self, seq: u64) {
        let mut outer = self.shared.outer();
        for pin in outer.pins.iter_mut().filter(|(id, _)| *id == self.id) {
            pin.1 = seq;
        }
        drop(outer);
        self.shared.changed.notify_all();
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut outer = self.shared.outer();
        outer.pins.retain(|(id, _)| *id != self.id);
        drop(outer);
        self.shared.changed.notify_all();
    }
}
