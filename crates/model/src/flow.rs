//! The connection (flow) record: one shape for every flow source (the flow table
//! built from packets, Zeek conn.log, NetFlow v5/v9, IPFIX), so every query works
//! the same whatever the source.

use std::fmt;

use crate::{Addr16, ip_proto};

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
    /// Zeek's `uid` of a conn.log line; empty for the records hindsight builds
    /// (from packets, NetFlow, IPFIX), whose uid is a function of the record and is
    /// derived when asked for ([`FlowRecord::uid`]) instead of being kept.
    pub uid: String,
    /// What the connection's first packets say at the application layer
    /// (DNS, TLS, HTTP, QUIC, SSH); `None` when nothing was recognised.
    pub app: Option<Box<crate::AppFields>>,
}

impl FlowRecord {
    /// Duration in nanoseconds (zero for a one-packet flow).
    pub fn duration_ns(&self) -> i64 {
        self.last_ns.saturating_sub(self.first_ns).max(0)
    }

    /// The record's unique id: the kept `uid` (Zeek's) if there is one, else
    /// [`FlowRecord::derived_uid`].
    pub fn uid(&self) -> std::borrow::Cow<'_, str> {
        if self.uid.is_empty() {
            std::borrow::Cow::Owned(self.derived_uid())
        } else {
            std::borrow::Cow::Borrowed(&self.uid)
        }
    }

    /// The Community ID (version 1, seed `seed`) of the connection. ICMP
    /// records hold the type and code in the destination port, as NetFlow does.
    pub fn community_id(&self, seed: u16) -> String {
        crate::community::community_id_text(&self.community_id_hash(seed))
    }

    /// The hash of [`community_id`](Self::community_id).
    pub fn community_id_hash(&self, seed: u16) -> [u8; 20] {
        let ports = match self.proto {
            ip_proto::ICMP | ip_proto::ICMPV6 => Some((self.dst_port >> 8, self.dst_port & 0xff)),
            ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP => Some((self.src_port, self.dst_port)),
            _ => None,
        };
        crate::community::community_id_hash(seed, self.src, self.dst, self.proto, ports)
    }

    /// A Zeek-style uid derived from the record, so the same input always gives
    /// the same uids: a prefix (`P` for records built from packets, `N` for
    /// NetFlow/IPFIX, `Z` for a Zeek line without one) and 17 base-62 digits of a
    /// 128-bit FNV-1a hash of the 5-tuple, the start time and (but for records
    /// built from packets) the exporter.
    pub fn derived_uid(&self) -> String {
        let prefix = match self.source {
            FlowSource::Packets => 'P',
            FlowSource::Zeek => 'Z',
            FlowSource::NetflowV5 | FlowSource::NetflowV9 | FlowSource::Ipfix => 'N',
        };
        let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
        let mut feed = |bytes: &[u8]| {
            for &b in bytes {
                hash ^= u128::from(b);
                // The FNV-128 prime is 2^88 + 0x13b: a shift and a small product
                // instead of a full 128-bit multiplication.
                hash = (hash << 88).wrapping_add(hash.wrapping_mul(0x13b));
            }
        };
        feed(&self.src.0);
        feed(&self.dst.0);
        feed(&self.src_port.to_be_bytes());
        feed(&self.dst_port.to_be_bytes());
        feed(&[self.proto]);
        feed(&self.first_ns.to_be_bytes());
        if self.source != FlowSource::Packets {
            feed(&self.exporter.0);
        }
        base62_digits(prefix, hash)
    }
}

/// `prefix` and the 17 lowest base-62 digits of `value`, least significant first.
fn base62_digits(prefix: char, value: u128) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    // Two 128-bit divisions split the digits into 64-bit pieces of 10 and 7
    // digits (62^10 < 2^64), instead of one 128-bit division per digit.
    const POW10: u128 = 62u128.pow(10);
    const POW7: u128 = 62u128.pow(7);
    let low = (value % POW10) as u64;
    let high = ((value / POW10) % POW7) as u64;
    let mut text = String::with_capacity(18);
    text.push(prefix);
    for (mut piece, digits) in [(low, 10), (high, 7)] {
        for _ in 0..digits {
            text.push(char::from(DIGITS[(piece % 62) as usize]));
            piece /= 62;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip_proto;

    fn v4(d: u8) -> Addr16 {
        Addr16::from_v4_bytes([10, 0, 0, d])
    }

    #[test]
    fn uid_digits_are_those_of_one_division_per_digit() {
        let reference = |mut value: u128| {
            const DIGITS: &[u8; 62] =
                b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
            let mut text = String::from("P");
            for _ in 0..17 {
                text.push(char::from(DIGITS[(value % 62) as usize]));
                value /= 62;
            }
            text
        };
        let mut x = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58du128;
        let mut values = vec![
            0,
            1,
            61,
            62,
            62u128.pow(10) - 1,
            62u128.pow(10),
            62u128.pow(17) - 1,
            u128::MAX,
        ];
        for _ in 0..1000 {
            x = x.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b) ^ 0x9e37;
            values.push(x);
        }
        for value in values {
            assert_eq!(base62_digits('P', value), reference(value), "{value:#x}");
        }
    }

    fn record() -> FlowRecord {
        FlowRecord {
            first_ns: 1_334_000_000_123_456_789,
            src: v4(1),
            dst: v4(2),
            src_port: 49152,
            dst_port: 443,
            proto: ip_proto::TCP,
            ..FlowRecord::default()
        }
    }

    #[test]
    fn a_derived_uid_is_the_fnv1a_128_hash_of_the_record() {
        let record = record();
        let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
        let bytes = [
            &record.src.0[..],
            &record.dst.0,
            &record.src_port.to_be_bytes(),
            &record.dst_port.to_be_bytes(),
            &[record.proto],
            &record.first_ns.to_be_bytes(),
        ]
        .concat();
        for b in bytes {
            hash ^= u128::from(b);
            hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
        assert_eq!(record.derived_uid(), base62_digits('P', hash));
        // The uids earlier versions kept in `flows` segments: deriving them now
        // must give the same text.
        assert_eq!(record.derived_uid(), "P5BpwpCyZTeFLaVoFy");
    }

    #[test]
    fn a_kept_uid_wins_and_the_source_picks_the_prefix() {
        let record = record();
        assert_eq!(record.uid(), "P5BpwpCyZTeFLaVoFy");
        let zeek = FlowRecord {
            source: FlowSource::Zeek,
            uid: "CoyZrY2g74UvMMgp4a".to_owned(),
            ..record.clone()
        };
        assert_eq!(zeek.uid(), "CoyZrY2g74UvMMgp4a");
        let without = FlowRecord {
            uid: String::new(),
            ..zeek
        };
        assert!(without.uid().starts_with('Z'));
        let exported = |exporter: u8| FlowRecord {
            source: FlowSource::Ipfix,
            exporter: v4(exporter),
            ..record.clone()
        };
        assert!(exported(9).uid().starts_with('N'));
        assert_eq!(exported(9).uid().len(), 18);
        assert_ne!(exported(9).uid(), exported(8).uid());
    }
}
