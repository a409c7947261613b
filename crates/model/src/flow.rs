//! The connection (flow) record: one shape for every flow source (the flow table
//! built from packets, Zeek conn.log, NetFlow v5/v9, IPFIX), so every query works
//! the same whatever the source.

use std::fmt;

use crate::Addr16;

/// Where a flow record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum FlowSource {
    /// Built by hindsight's flow table from captured packets.
    #[default]
    Packets = 0,
    /// A Zeek conn.log line.
    Zeek = 1,
    /// A NetFlow v5 record.
    NetflowV5 = 2,
    /// A NetFlow v9 record.
    NetflowV9 = 3,
    /// An IPFIX (NetFlow v10) record.
    Ipfix = 4,
}

impl FlowSource {
    /// Every source, in code order.
    pub const ALL: [Self; 5] = [
        Self::Packets,
        Self::Zeek,
        Self::NetflowV5,
        Self::NetflowV9,
        Self::Ipfix,
    ];

    /// Returns the source stored under `code`, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// Returns the lowercase name used in output and the filter language.
    pub fn name(self) -> &'static str {
        match self {
            Self::Packets => "packets",
            Self::Zeek => "zeek",
            Self::NetflowV5 => "netflow5",
            Self::NetflowV9 => "netflow9",
            Self::Ipfix => "ipfix",
        }
    }
}

/// The state of a connection, in Zeek's `conn_state` vocabulary (the field's
/// documented meanings, so analysts read one language whatever the source).
/// Sources that do not track state (NetFlow, IPFIX) give [`FlowState::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum FlowState {
    /// Not known (NetFlow/IPFIX, or a conn.log line with `-`).
    #[default]
    Unknown = 0,
    /// S0: connection attempt seen, no reply.
    S0 = 1,
    /// S1: established, not terminated.
    S1 = 2,
    /// SF: normal establishment and termination.
    SF = 3,
    /// REJ: connection attempt rejected.
    REJ = 4,
    /// S2: established, close attempt by originator seen (no reply from responder).
    S2 = 5,
    /// S3: established, close attempt by responder seen (no reply from originator).
    S3 = 6,
    /// RSTO: established, originator aborted (sent a RST).
    RSTO = 7,
    /// RSTR: responder sent a RST.
    RSTR = 8,
    /// RSTOS0: originator sent a SYN followed by a RST, no SYN-ACK from the responder.
    RSTOS0 = 9,
    /// RSTRH: responder sent a SYN ACK followed by a RST, no SYN from the originator.
    RSTRH = 10,
    /// SH: originator sent a SYN followed by a FIN, no SYN ACK from the responder.
    SH = 11,
    /// SHR: responder sent a SYN ACK followed by a FIN, no SYN from the originator.
    SHR = 12,
    /// OTH: no SYN seen, just midstream traffic (or a non-TCP flow).
    OTH = 13,
}

impl FlowState {
    /// Every state, in code order.
    pub const ALL: [Self; 14] = [
        Self::Unknown,
        Self::S0,
        Self::S1,
        Self::SF,
        Self::REJ,
        Self::S2,
        Self::S3,
        Self::RSTO,
        Self::RSTR,
        Self::RSTOS0,
        Self::RSTRH,
        Self::SH,
        Self::SHR,
        Self::OTH,
    ];

    /// Returns the state stored under `code`, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// Returns Zeek's name of the state (`-` for unknown).
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "-",
            Self::S0 => "S0",
            Self::S1 => "S1",
            Self::SF => "SF",
            Self::REJ => "REJ",
            Self::S2 => "S2",
            Self::S3 => "S3",
            Self::RSTO => "RSTO",
            Self::RSTR => "RSTR",
            Self::RSTOS0 => "RSTOS0",
            Self::RSTRH => "RSTRH",
            Self::SH => "SH",
            Self::SHR => "SHR",
            Self::OTH => "OTH",
        }
    }

    /// Parses Zeek's name of a state; `-` and the empty string are [`FlowState::Unknown`].
    pub fn from_name(name: &str) -> Option<Self> {
        if name.is_empty() {
            return Some(Self::Unknown);
        }
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for FlowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One connection: a row of the `flows` table.
///
/// `src` is the originator (the side that sent the first packet seen, Zeek's
/// `orig_h`; for unidirectional NetFlow/IPFIX records the flow's source) and
/// `dst` the responder. Counters "out" go from `src` to `dst`, "in" the other way;
/// unidirectional sources leave the "in" counters at zero.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FlowRecord {
    /// Time of the first packet, nanoseconds since the Unix epoch.
    pub first_ns: i64,
    /// Time of the last packet, nanoseconds since the Unix epoch.
    pub last_ns: i64,
    /// Originator address.
    pub src: Addr16,
    /// Responder address.
    pub dst: Addr16,
    /// Originator port (0 when the protocol has none; for ICMP, the type as NetFlow does).
    pub src_port: u16,
    /// Responder port (for ICMP, the code).
    pub dst_port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Packets from originator to responder.
    pub packets_out: u64,
    /// IP bytes from originator to responder (IP header included, as NetFlow counts).
    pub bytes_out: u64,
    /// Packets from responder to originator.
    pub packets_in: u64,
    /// IP bytes from responder to originator.
    pub bytes_in: u64,
    /// Union of the TCP flags seen in either direction (see [`crate::tcp_flags`]).
    pub tcp_flags: u16,
    /// Connection state.
    pub state: FlowState,
    /// Where the record came from.
    pub source: FlowSource,
    /// The exporter's address (NetFlow/IPFIX); unspecified (`::`) for other sources.
    pub exporter: Addr16,
    /// A unique id: Zeek's `uid` for conn.log lines; for other sources an id derived
    /// from the 5-tuple and start time (see the `flows` format documentation).
    pub uid: String,
}

impl FlowRecord {
    /// Duration in nanoseconds (zero for a one-packet flow).
    pub fn duration_ns(&self) -> i64 {
        self.last_ns.saturating_sub(self.first_ns).max(0)
    }
}
