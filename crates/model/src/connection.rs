//! A connection as the connection index keeps it: one entry per address of
//! a connection, with a compact summary and the application fields. The
//! index's key and value encoding is `hindsight_index::connections`'.

use std::time::Duration;

use crate::{Addr16, AppFields, FlowRecord, FlowSource, FlowState};

/// The Community ID seed of an index opened without one (the specification's
/// default, and what Zeek, Suricata and Arkime use unless told otherwise).
pub const DEFAULT_COMMUNITY_SEED: u16 = 0;

/// The compact summary of a connection kept as the value of both its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ConnSummary {
    /// Where the record came from.
    pub source: FlowSource,
    /// Connection state.
    pub state: FlowState,
    /// Union of TCP flags.
    pub tcp_flags: u16,
    /// log2 scale of the bytes from originator to responder (see [`scale`]).
    pub bytes_out_scale: u8,
    /// log2 scale of the bytes from responder to originator.
    pub bytes_in_scale: u8,
    /// log2 scale of the packets from originator to responder.
    pub packets_out_scale: u8,
    /// log2 scale of the packets from responder to originator.
    pub packets_in_scale: u8,
    /// Duration in milliseconds (saturating).
    pub duration_ms: u32,
}

/// Returns the scale of a count: 0 for 0, else `s` with `2^(s-1) <= n < 2^s`.
pub fn scale(n: u64) -> u8 {
    (64 - n.leading_zeros()) as u8
}

/// Returns the inclusive range of counts a scale stands for.
pub fn scale_range(scale: u8) -> (u64, u64) {
    match scale {
        0 => (0, 0),
        64.. => (1 << 63, u64::MAX),
        s => (1 << (s - 1), (1u64 << s) - 1),
    }
}

impl ConnSummary {
    /// Summarizes a record.
    pub fn of(record: &FlowRecord) -> Self {
        let duration_ms = record.duration_ns() / 1_000_000;
        Self {
            source: record.source,
            state: record.state,
            tcp_flags: record.tcp_flags,
            bytes_out_scale: scale(record.bytes_out),
            bytes_in_scale: scale(record.bytes_in),
            packets_out_scale: scale(record.packets_out),
            packets_in_scale: scale(record.packets_in),
            duration_ms: u32::try_from(duration_ms).unwrap_or(u32::MAX),
        }
    }
}

/// One entry of the index: a connection seen from one of its addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnEntry {
    /// The address the entry is keyed by.
    pub addr: Addr16,
    /// Start of the connection, nanoseconds since the epoch.
    pub ts_ns: i64,
    /// The other address.
    pub peer: Addr16,
    /// The port on `addr`'s side.
    pub port: u16,
    /// The port on `peer`'s side.
    pub peer_port: u16,
    /// IP protocol.
    pub proto: u8,
    /// True if `addr` is the responder (the entry is the reverse copy).
    pub reverse: bool,
    /// The compact summary.
    pub summary: ConnSummary,
    /// The connection's application fields, if it has any.
    pub app: Option<Box<AppFields>>,
}

impl ConnEntry {
    /// Returns (originator, originator port, responder, responder port).
    pub fn oriented(&self) -> (Addr16, u16, Addr16, u16) {
        if self.reverse {
            (self.peer, self.peer_port, self.addr, self.port)
        } else {
            (self.addr, self.port, self.peer, self.peer_port)
        }
    }
}

/// Count-based expiration settings (the paper's N and the three intervals that
/// bound k, Theorem 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// N: keep at least the N newest events; 0 turns expiration off.
    pub keep_events: u64,
    /// Width of a timestamp-histogram interval, in event time.
    pub histogram_granularity: Duration,
    /// How often the cutoff is recomputed from the histogram.
    pub cutoff_interval: Duration,
    /// How often every entry goes through a compaction (and so through the filter).
    pub compaction_interval: Duration,
}

impl Expiry {
    /// Expiration off: the index keeps everything.
    pub const OFF: Self = Self {
        keep_events: 0,
        histogram_granularity: Duration::from_secs(60),
        cutoff_interval: Duration::from_secs(60),
        compaction_interval: Duration::from_secs(3600),
    };

    /// Whether the index keeps the N newest events only (N above 0).
    pub fn expires(&self) -> bool {
        self.keep_events > 0
    }

    /// Returns k of Theorem 1 for a maximum event rate (events per second, both of
    /// event time and of ingest): e_hist + I_update + I_compact, each the rate
    /// times the corresponding interval.
    pub fn excess_bound(&self, max_events_per_second: f64) -> u64 {
        let seconds = self.histogram_granularity.as_secs_f64()
            + self.cutoff_interval.as_secs_f64()
            + self.compaction_interval.as_secs_f64();
        (max_events_per_second * seconds).ceil() as u64
    }
}

impl Default for Expiry {
    fn default() -> Self {
        Self::OFF
    }
}
