//! The role of the model crate is to name the records that flow through hindsight:
//! a captured [`Frame`] as a capture source hands it over, and the [`PacketHeaders`]
//! the decoder extracts from it, which become one row of the `packets` table, and
//! the [`FlowRecord`] every flow source produces, one row of the `flows` table.
//!
//! It performs no I/O and has no dependencies, so every other crate can share it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub mod app;
mod cipher_suites;
pub mod community;
pub mod connection;
mod covering;
mod flow;
pub mod snap;

pub use app::AppFields;
pub use covering::{CoveredRow, CoveredRowsBuilder, decode_covered_rows, put_varint};
pub use flow::{FlowRecord, FlowSource, FlowState};
pub use snap::DataForm;

/// Link-layer header type, numbered as in the tcpdump.org `LINKTYPE_` registry
/// (the values pcap and pcapng files carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LinkType(pub u16);

impl LinkType {
    /// BSD loopback: a 4-byte address family in the host byte order of the writer.
    pub const NULL: Self = Self(0);
    /// IEEE 802.3 Ethernet.
    pub const ETHERNET: Self = Self(1);
    /// Raw IP (version read from the first nibble); also DLT 12/14 on some systems.
    pub const RAW: Self = Self(101);
    /// OpenBSD loopback: a 4-byte address family in network byte order.
    pub const LOOP: Self = Self(108);
    /// Linux "cooked" capture, version 1 (16-byte header).
    pub const LINUX_SLL: Self = Self(113);
    /// Solaris ipnet: a 24-byte header whose second byte is the address family.
    pub const IPNET: Self = Self(226);
    /// Raw IPv4, no link header.
    pub const IPV4: Self = Self(228);
    /// Raw IPv6, no link header.
    pub const IPV6: Self = Self(229);
    /// Linux "cooked" capture, version 2 (20-byte header).
    pub const LINUX_SLL2: Self = Self(276);
    /// PPP: the protocol field, after an optional `ff 03` address and control (RFC 1661).
    pub const PPP: Self = Self(9);
    /// PPP in HDLC-like framing (RFC 1662), or Cisco HDLC framing.
    pub const PPP_HDLC: Self = Self(50);
    /// PPPoE session stage: the 6-byte PPPoE header, then PPP (RFC 2516).
    pub const PPP_ETHER: Self = Self(51);
    /// Cisco HDLC: address, control and an ethertype.
    pub const C_HDLC: Self = Self(104);
    /// PPP after a direction byte.
    pub const PPP_WITH_DIR: Self = Self(204);
    /// Cisco HDLC after a direction byte.
    pub const C_HDLC_WITH_DIR: Self = Self(205);

    /// Returns the registry name of the link type (`EN10MB`, `LINUX_SLL`...), as tcpdump prints it.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "NULL",
            1 => "EN10MB",
            12 | 14 | 101 => "RAW",
            108 => "LOOP",
            113 => "LINUX_SLL",
            226 => "IPNET",
            228 => "IPV4",
            229 => "IPV6",
            276 => "LINUX_SLL2",
            9 => "PPP",
            50 => "PPP_HDLC",
            51 => "PPP_ETHER",
            104 => "C_HDLC",
            204 => "PPP_WITH_DIR",
            205 => "C_HDLC_WITH_DIR",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// Formats a MAC address as Wireshark and tcpdump print it: `00:1b:21:0a:bc:de`.
pub fn mac_text(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

/// One captured frame as a capture source hands it over, before decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Capture timestamp in nanoseconds since the Unix epoch (UTC).
    pub ts_nanos: i64,
    /// Length of the frame on the wire, in bytes (pcap `orig_len`).
    pub wire_len: u32,
    /// The captured bytes (pcap `incl_len` of them), starting at the link-layer header.
    pub data: &'a [u8],
    /// Link type of the interface the frame was captured on.
    pub link_type: LinkType,
    /// Interface index within the capture source (pcapng IDB number; 0 for pcap).
    pub iface: u32,
}

/// An IPv4 or IPv6 address in one 16-byte shape: IPv4 addresses are stored
/// IPv4-mapped (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2), so both families sort,
/// compare and range-match as plain big-endian byte strings.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Addr16(pub [u8; 16]);

// One 128-bit write instead of a length and sixteen bytes.
impl std::hash::Hash for Addr16 {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(u128::from_ne_bytes(self.0));
    }
}

// The order of the bytes (big-endian), compared as one 128-bit integer rather
// than through memcmp: the flow table orders the endpoints of every packet.
impl Ord for Addr16 {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        u128::from_be_bytes(self.0).cmp(&u128::from_be_bytes(other.0))
    }
}

impl PartialOrd for Addr16 {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Addr16 {
    /// Returns the IPv4-mapped form of an IPv4 address given as 4 network-order bytes.
    pub fn from_v4_bytes(octets: [u8; 4]) -> Self {
        let mut bytes = [0u8; 16];
        bytes[10] = 0xff;
        bytes[11] = 0xff;
        bytes[12..].copy_from_slice(&octets);
        Self(bytes)
    }

    /// Returns the address of an IPv6 address given as 16 network-order bytes.
    pub fn from_v6_bytes(octets: [u8; 16]) -> Self {
        Self(octets)
    }

    /// Returns true if the address is IPv4-mapped, i.e. holds an IPv4 address.
    pub fn is_v4(&self) -> bool {
        self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff
    }

    /// Returns the standard library form: `IpAddr::V4` for mapped addresses.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

/// The lowest and highest address of a network written `ADDR` or `ADDR/PREFIX`
/// (`10.1.2.3`, `10.1.2.0/24`, `2001:db8::/32`), inclusive: the address ranges the
/// indexes are scanned by. Host bits under the prefix are ignored, as tcpdump's
/// `net` does.
pub fn network_range(text: &str) -> Result<(Addr16, Addr16), String> {
    let text = text.trim();
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("{text:?} is not an IPv4 or IPv6 address or network"))?;
    let family_bits = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match prefix {
        None => family_bits,
        Some(prefix) => prefix
            .parse::<u32>()
            .ok()
            .filter(|&bits| bits <= family_bits)
            .ok_or_else(|| {
                format!("{text:?}: the prefix length must be a number from 0 to {family_bits}")
            })?,
    };
    let value = u128::from_be_bytes(Addr16::from(ip).0);
    // The host bits of the 128-bit form: an IPv4 prefix counts from bit 96.
    let host_bits = family_bits - bits;
    let host_mask = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    let low = value & !host_mask;
    Ok((
        Addr16(low.to_be_bytes()),
        Addr16((low | host_mask).to_be_bytes()),
    ))
}

impl From<IpAddr> for Addr16 {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::from_v4_bytes(v4.octets()),
            IpAddr::V6(v6) => Self(v6.octets()),
        }
    }
}

impl From<Ipv4Addr> for Addr16 {
    fn from(ip: Ipv4Addr) -> Self {
        Self::from_v4_bytes(ip.octets())
    }
}

impl fmt::Display for Addr16 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_ip().fmt(f)
    }
}

impl fmt::Debug for Addr16 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Addr16({})", self.to_ip())
    }
}

/// How far the decoder got through a frame, stored with every packet record so
/// that nothing is dropped silently and `ingest` can report counts by reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum DecodeStatus {
    /// Every header up to and including the transport header was decoded.
    #[default]
    Complete = 0,
    /// The frame is not IP (ARP, LLDP, STP...): kept as a raw record with its ethertype.
    NonIp = 1,
    /// The captured bytes end (snap length) before a header does: decoded as far as they go.
    Truncated = 2,
    /// A header is invalid (bad version, header length below minimum...): decoded up to it.
    Malformed = 3,
    /// The link type is not one the decoder knows: kept as a raw record.
    UnsupportedLinkType = 4,
    /// An IP fragment other than the first: addresses and protocol decoded, no ports.
    Fragment = 5,
}

impl DecodeStatus {
    /// Every status, in code order.
    pub const ALL: [Self; 6] = [
        Self::Complete,
        Self::NonIp,
        Self::Truncated,
        Self::Malformed,
        Self::UnsupportedLinkType,
        Self::Fragment,
    ];

    /// Returns the status stored under `code`, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// Returns the lowercase name used in summaries and documentation.
    pub fn name(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::NonIp => "non-ip",
            Self::Truncated => "truncated",
            Self::Malformed => "malformed",
            Self::UnsupportedLinkType => "unsupported-link-type",
            Self::Fragment => "fragment",
        }
    }
}

/// The header columns of the `packets` table, each declared once, in schema
/// order: its constant in [`col`], its name, the [`PacketHeaders`] field it
/// holds and the type of that field's value. `packet_header_columns!(m)` calls
/// the macro `m` with the list, so that the header struct and the column
/// names here, the store's schema, batch builder and view, the covering
/// postings' layout, the filter's columns and the printed columns of the
/// output all come from it. A new column is a new line at the end (where
/// segments and postings written before it read it as absent) and the decoder
/// line that sets it.
#[macro_export]
macro_rules! packet_header_columns {
    ($then:ident) => {
        $then! {
            /// Ethernet source MAC address (also the SLL/SLL2 link-layer address when it is 6 bytes).
            ETH_SRC = "eth_src", src_mac: [u8; 6];
            /// Ethernet destination MAC address.
            ETH_DST = "eth_dst", dst_mac: [u8; 6];
            /// The ethertype after any VLAN tags (for SLL/SLL2 the protocol field; for raw
            /// IP and loopback link types the ethertype of the IP version found).
            ETH_TYPE = "eth_type", eth_type: u16;
            /// The outer 802.1Q/802.1ad VLAN ID.
            VLAN_OUTER = "vlan_outer", vlan_outer: u16;
            /// The inner VLAN ID of a QinQ frame.
            VLAN_INNER = "vlan_inner", vlan_inner: u16;
            /// 4 or 6 for IP packets.
            IP_VERSION = "ip_version", ip_version: u8;
            /// Source address of the innermost IP header decoded (inside any tunnel),
            /// IPv4 mapped; for ARP over IPv4 the sender protocol address (with
            /// `ip_version` `None`), so `host X` finds ARP as tcpdump does.
            SRC_ADDR = "src_addr", src_addr: $crate::Addr16;
            /// Destination address of the innermost IP header decoded; for ARP the
            /// target protocol address.
            DST_ADDR = "dst_addr", dst_addr: $crate::Addr16;
            /// The transport protocol: IPv4 protocol, or the IPv6 next header after the
            /// extension headers (hop-by-hop, routing, fragment, destination options, AH).
            IP_PROTO = "ip_proto", ip_proto: u8;
            /// IPv4 TTL or IPv6 hop limit.
            IP_TTL = "ip_ttl", ip_ttl: u8;
            /// IPv4 identification, or the IPv6 fragment header identification (low 16 bits).
            IP_ID = "ip_id", ip_id: u16;
            /// Fragment offset in 8-byte units (13 bits), for IPv4 and the IPv6 fragment header.
            FRAG_OFFSET = "frag_offset", frag_offset: u16;
            /// The more-fragments flag, for IPv4 and the IPv6 fragment header.
            MORE_FRAGMENTS = "more_fragments", more_fragments: bool;
            /// The IPv4 don't-fragment flag.
            DONT_FRAGMENT = "dont_fragment", dont_fragment: bool;
            /// TCP, UDP or SCTP source port.
            SRC_PORT = "src_port", src_port: u16;
            /// TCP, UDP or SCTP destination port.
            DST_PORT = "dst_port", dst_port: u16;
            /// TCP flags, the low 12 bits of the data-offset/flags word (see `tcp_flags`).
            TCP_FLAGS = "tcp_flags", tcp_flags: u16;
            /// ICMP or ICMPv6 type.
            ICMP_TYPE = "icmp_type", icmp_type: u8;
            /// ICMP or ICMPv6 code.
            ICMP_CODE = "icmp_code", icmp_code: u8;
            /// The encapsulations decoded through to reach the fields above (bits of
            /// `tunnel`), `None` for a packet in none.
            TUNNEL = "tunnel", tunnel: u16;
            /// Source address of the outermost IP header, where a tunnel was decoded
            /// through an IP header (GRE, IP in IP, the UDP tunnels).
            TUNNEL_SRC = "tunnel_src", tunnel_src: $crate::Addr16;
            /// Destination address of the outermost IP header of a tunnelled packet.
            TUNNEL_DST = "tunnel_dst", tunnel_dst: $crate::Addr16;
            /// The identifier of the outermost encapsulation that has one (GRE key,
            /// VXLAN or Geneve VNI, GTP-U TEID), with that encapsulation's bit (stored
            /// with the bit in the high 32 bits, the identifier in the low 32).
            TUNNEL_ID = "tunnel_id", tunnel_id: $crate::TunnelId;
            /// The top (outermost) MPLS label.
            MPLS_LABEL = "mpls_label", mpls_label: u32;
            /// The Differentiated Services codepoint of the innermost IP header: the
            /// high 6 bits of the IPv4 TOS byte or of the IPv6 traffic class.
            IP_DSCP = "ip_dscp", ip_dscp: u8;
        }
    };
}

/// The header columns' names in [`col`], and [`col::HEADERS`].
macro_rules! header_names {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $ty:ty;)*) => {
        $($(#[$doc])* pub const $konst: &str = $name;)*
        /// The header columns, in schema order (after `status`).
        pub const HEADERS: &[&str] = &[$($konst),*];
    };
}

/// [`PacketHeaders`], from the header columns.
macro_rules! header_struct {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $ty:ty;)*) => {
        /// The header fields hindsight keeps for every packet: one row of the
        /// `packets` table (its columns are [`packet_header_columns!`]), less the
        /// timestamp, lengths and captured bytes that come from the [`Frame`].
        ///
        /// Fields a frame does not have are `None`: a UDP packet has no
        /// `tcp_flags`, an ARP frame no addresses. For IPv4 and IPv6 alike the
        /// addresses are [`Addr16`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
        pub struct PacketHeaders {
            /// How far decoding got.
            pub status: DecodeStatus,
            /// Length of the IP packet from its headers: the IPv4 total length, or 40
            /// plus the IPv6 payload length (`None` when the field is 0, as with TSO
            /// or jumbograms). Flow records count these bytes, as NetFlow does; the
            /// `packets` table does not store it (its `wire_len` gives the frame size).
            pub ip_len: Option<u32>,
            $($(#[$doc])* pub $field: Option<$ty>,)*
        }
    };
}

/// Column names of the `packets` table, in schema order.
pub mod col {
    /// Capture timestamp, `Timestamp(ns, UTC)`.
    pub const TS: &str = "ts";
    /// Interface index within the capture source.
    pub const IFACE: &str = "iface";
    /// Link type (tcpdump.org LINKTYPE_ value).
    pub const LINK_TYPE: &str = "link_type";
    /// Length on the wire in bytes.
    pub const WIRE_LEN: &str = "wire_len";
    /// Length captured by the source in bytes (before hindsight's own snap length).
    pub const CAP_LEN: &str = "cap_len";
    /// Decode status code (see `DecodeStatus`).
    pub const STATUS: &str = "status";
    crate::packet_header_columns!(header_names);

    /// Which header fields `data` leaves out (a `DataForm` code; absent in
    /// segments written before it: verbatim).
    pub const DATA_FORM: &str = "data_form";
    /// The first captured bytes of the frame (hindsight's snap length), link header
    /// included, less the header fields `data_form` names (see `hindsight_model::snap`).
    pub const DATA: &str = "data";

    /// The columns a frame's bytes are read back from: `data`, its form, and the
    /// header fields a form leaves out of it.
    pub const FRAME: [&str; 11] = [
        DATA, DATA_FORM, ETH_SRC, ETH_DST, SRC_ADDR, DST_ADDR, IP_PROTO, IP_TTL, IP_ID, SRC_PORT,
        DST_PORT,
    ];
}

/// IP protocol numbers the decoder understands (IANA "Assigned Internet Protocol Numbers").
pub mod ip_proto {
    /// Internet Control Message Protocol.
    pub const ICMP: u8 = 1;
    /// Internet Group Management Protocol.
    pub const IGMP: u8 = 2;
    /// IPv4 encapsulation (IP in IP).
    pub const IPIP: u8 = 4;
    /// Transmission Control Protocol.
    pub const TCP: u8 = 6;
    /// User Datagram Protocol.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation (6in4, 6in6).
    pub const IPV6: u8 = 41;
    /// Generic Routing Encapsulation.
    pub const GRE: u8 = 47;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// Stream Control Transmission Protocol (ports decoded like TCP/UDP).
    pub const SCTP: u8 = 132;
}

/// Encapsulations the decoder sees through, as bits of [`PacketHeaders::tunnel`].
pub mod tunnel {
    /// MPLS label stack (ethertype 0x8847/0x8848, PPP 0x0281, UDP port 6635).
    pub const MPLS: u16 = 1 << 0;
    /// PPPoE session (ethertype 0x8864).
    pub const PPPOE: u16 = 1 << 1;
    /// GRE, versions 0 and 1 (IP protocol 47).
    pub const GRE: u16 = 1 << 2;
    /// ERSPAN types I, II and III inside GRE.
    pub const ERSPAN: u16 = 1 << 3;
    /// VXLAN (UDP port 4789) and VXLAN-GPE (4790).
    pub const VXLAN: u16 = 1 << 4;
    /// Geneve (UDP port 6081).
    pub const GENEVE: u16 = 1 << 5;
    /// GTP-U G-PDUs (UDP port 2152).
    pub const GTP: u16 = 1 << 6;
    /// IP in IP: 4in4, 6in4, 4in6, 6in6 (IP protocols 4 and 41).
    pub const IPIP: u16 = 1 << 7;
    /// Cisco FabricPath (ethertype 0x8903).
    pub const FABRICPATH: u16 = 1 << 8;

    /// Every encapsulation with the name `tunnel.type` compares with.
    pub const NAMES: [(&str, u16); 9] = [
        ("mpls", MPLS),
        ("pppoe", PPPOE),
        ("gre", GRE),
        ("erspan", ERSPAN),
        ("vxlan", VXLAN),
        ("geneve", GENEVE),
        ("gtp", GTP),
        ("ipip", IPIP),
        ("fabricpath", FABRICPATH),
    ];

    /// The names of the bits set in `bits`, joined with `+` (`gre+erspan`).
    pub fn names(bits: u16) -> String {
        let mut out = String::new();
        for (name, bit) in NAMES {
            if bits & bit != 0 {
                if !out.is_empty() {
                    out.push('+');
                }
                out.push_str(name);
            }
        }
        out
    }
}

/// Ethertypes the decoder understands (IEEE 802 numbers).
pub mod ethertype {
    /// Internet Protocol version 4.
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ outer tag used by some vendors.
    pub const QINQ_OLD: u16 = 0x9100;
    /// Internet Protocol version 6.
    pub const IPV6: u16 = 0x86dd;
    /// Transparent Ethernet Bridging: an Ethernet frame inside GRE or Geneve.
    pub const TEB: u16 = 0x6558;
    /// MPLS unicast.
    pub const MPLS: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MULTICAST: u16 = 0x8848;
    /// PPPoE discovery stage.
    pub const PPPOE_DISCOVERY: u16 = 0x8863;
    /// PPPoE session stage.
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// Cisco FabricPath.
    pub const FABRICPATH: u16 = 0x8903;
    /// ERSPAN types I and II (GRE protocol).
    pub const ERSPAN_II: u16 = 0x88be;
    /// ERSPAN type III (GRE protocol).
    pub const ERSPAN_III: u16 = 0x22eb;
    /// PPP inside enhanced GRE (PPTP).
    pub const PPP: u16 = 0x880b;
    /// Network Service Header (RFC 8300).
    pub const NSH: u16 = 0x894f;
}

/// TCP flag bits as they sit in the low 12 bits of the TCP data-offset/flags word
/// (RFC 9293 §3.1; AE, formerly NS, is bit 8), matching Wireshark's `tcp.flags`.
pub mod tcp_flags {
    /// No more data from sender.
    pub const FIN: u16 = 0x001;
    /// Synchronize sequence numbers.
    pub const SYN: u16 = 0x002;
    /// Reset the connection.
    pub const RST: u16 = 0x004;
    /// Push function.
    pub const PSH: u16 = 0x008;
    /// Acknowledgment field significant.
    pub const ACK: u16 = 0x010;
    /// Urgent pointer field significant.
    pub const URG: u16 = 0x020;
    /// ECN-Echo.
    pub const ECE: u16 = 0x040;
    /// Congestion Window Reduced.
    pub const CWR: u16 = 0x080;
    /// Accurate ECN (formerly NS, nonce sum).
    pub const AE: u16 = 0x100;
}

packet_header_columns!(header_struct);

/// A tunnel identifier and the encapsulation it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TunnelId {
    /// The encapsulation's bit in [`tunnel`].
    pub kind: u16,
    /// The GRE key, the VNI or the TEID.
    pub id: u32,
}

impl TunnelId {
    /// The `tunnel_id` column's value: the kind in the high 32 bits.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.kind) << 32) | u64::from(self.id)
    }

    /// The identifier of a `tunnel_id` column value.
    pub fn from_u64(value: u64) -> Self {
        Self {
            kind: (value >> 32) as u16,
            id: value as u32,
        }
    }
}

impl PacketHeaders {
    /// The Community ID hash (seed `seed`) of the packet's innermost
    /// addresses, protocol and ports (ICMP: type and code; none where the
    /// transport header is not there); `None` for a packet that is not IP.
    pub fn community_id_hash(&self, seed: u16) -> Option<[u8; 20]> {
        self.ip_version?;
        let (src, dst, proto) = (self.src_addr?, self.dst_addr?, self.ip_proto?);
        let ports = match proto {
            ip_proto::ICMP | ip_proto::ICMPV6 => self
                .icmp_type
                .zip(self.icmp_code)
                .map(|(kind, code)| (u16::from(kind), u16::from(code))),
            ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP => self.src_port.zip(self.dst_port),
            _ => None,
        };
        // A non-first fragment or a cut-off transport header hashes without
        // ports, as the spec's reference and tshark do.
        Some(community::community_id_hash(seed, src, dst, proto, ports))
    }
}

/// Identifies one sealed segment of the archive; ids increase with sealing order
/// and are never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId(pub u64);

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:012}", self.0)
    }
}

/// Rows per granule: the unit in which address postings say where in a segment an
/// address occurs. A query for a rare address decodes only the granules listed.
pub const GRANULE_ROWS: u32 = 8192;

/// A sorted set of granule numbers (row `r` of a segment lies in granule
/// `r / GRANULE_ROWS`), with a compact byte encoding for the address index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GranuleSet(Vec<u32>);

impl GranuleSet {
    /// Returns an empty set.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Adds the granule of `row`. Rows may come in any order; ascending is the fast path.
    #[inline]
    pub fn push_row(&mut self, row: u64) {
        let granule = u32::try_from(row / u64::from(GRANULE_ROWS)).unwrap_or(u32::MAX);
        match self.0.last() {
            Some(&last) if last == granule => {}
            Some(&last) if last > granule => {
                if let Err(position) = self.0.binary_search(&granule) {
                    self.0.insert(position, granule);
                }
            }
            _ => self.0.push(granule),
        }
    }

    /// Returns the granule numbers, ascending.
    pub fn granules(&self) -> &[u32] {
        &self.0
    }

    /// Returns true if the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every granule of `other`.
    pub fn union_with(&mut self, other: &Self) {
        let mut merged = Vec::with_capacity(self.0.len() + other.0.len());
        let (mut a, mut b) = (self.0.iter().peekable(), other.0.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&x), Some(&&y)) if x < y => a.next(),
                (Some(&&x), Some(&&y)) if y < x => b.next(),
                (Some(_), Some(_)) => {
                    b.next();
                    a.next()
                }
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            if let Some(&granule) = next {
                merged.push(granule);
            }
        }
        self.0 = merged;
    }

    /// Keeps only the granules also in `other`.
    pub fn intersect_with(&mut self, other: &Self) {
        self.0
            .retain(|granule| other.0.binary_search(granule).is_ok());
    }

    /// Encodes the set as LEB128 varints of the gaps between granules.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() + 2);
        let mut previous = 0u32;
        for (i, &granule) in self.0.iter().enumerate() {
            let gap = if i == 0 { granule } else { granule - previous };
            previous = granule;
            put_varint(&mut out, u64::from(gap));
        }
        out
    }

    /// Decodes [`encode`](Self::encode)'s output; `None` if the bytes are not such a set.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut granules = Vec::new();
        let mut value = 0u32;
        let mut shift = 0u32;
        for &byte in bytes {
            let part = u32::from(byte & 0x7f).checked_shl(shift)?;
            if shift > 28 || (shift == 28 && byte & 0x70 != 0) {
                return None;
            }
            value |= part;
            if byte & 0x80 == 0 {
                let granule = match granules.last() {
                    None => value,
                    Some(&last) if value > 0 => u32::checked_add(last, value)?,
                    Some(_) => return None,
                };
                granules.push(granule);
                value = 0;
                shift = 0;
            } else {
                shift += 7;
            }
        }
        (shift == 0).then_some(Self(granules))
    }
}

impl FromIterator<u32> for GranuleSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut granules: Vec<u32> = iter.into_iter().collect();
        granules.sort_unstable();
        granules.dedup();
        Self(granules)
    }
}

/// Everything hindsight knows about one packet except its captured bytes: what a
/// filter is evaluated against, whether the packet comes from the live ring or
/// from an archived segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PacketRecord {
    /// Capture timestamp in nanoseconds since the Unix epoch (UTC).
    pub ts_nanos: i64,
    /// Length on the wire in bytes (Wireshark `frame.len`).
    pub wire_len: u32,
    /// Captured length in bytes as read from the source (Wireshark `frame.cap_len`).
    pub cap_len: u32,
    /// Link type of the capturing interface.
    pub link_type: LinkType,
    /// Interface index within the capture source.
    pub iface: u32,
    /// The decoded header fields.
    pub headers: PacketHeaders,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_are_address_ranges() {
        let ip = |text: &str| Addr16::from(text.parse::<IpAddr>().unwrap());
        assert_eq!(
            network_range("10.1.2.3").unwrap(),
            (ip("10.1.2.3"), ip("10.1.2.3"))
        );
        assert_eq!(
            network_range("10.1.2.77/24").unwrap(),
            (ip("10.1.2.0"), ip("10.1.2.255"))
        );
        assert_eq!(
            network_range("0.0.0.0/0").unwrap(),
            (ip("0.0.0.0"), ip("255.255.255.255"))
        );
        assert_eq!(
            network_range("2001:db8::1/32").unwrap(),
            (
                ip("2001:db8::"),
                ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")
            )
        );
        assert_eq!(
            network_range("::/0").unwrap(),
            (Addr16([0; 16]), Addr16([0xff; 16]))
        );
        for bad in ["10.1.2", "10.1.2.3/33", "::1/129", "10.0.0.0/x", "", "host"] {
            let error = network_range(bad).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn addresses_order_as_their_bytes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..10_000 {
            // Few distinct bytes, so pairs often share a prefix.
            let mut bytes = || std::array::from_fn::<u8, 16, _>(|_| (next() % 3) as u8);
            let (a, b) = (Addr16(bytes()), Addr16(bytes()));
            assert_eq!(a.cmp(&b), a.0.cmp(&b.0), "{a:?} {b:?}");
            assert_eq!(a.partial_cmp(&b), Some(a.0.cmp(&b.0)));
        }
    }

    #[test]
    fn addr16_maps_ipv4_and_round_trips() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        let addr = Addr16::from(v4);
        assert!(addr.is_v4());
        assert_eq!(addr.to_ip(), v4);
        assert_eq!(addr.to_string(), "10.1.2.3");

        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let addr = Addr16::from(v6);
        assert!(!addr.is_v4());
        assert_eq!(addr.to_ip(), v6);
    }

    #[test]
    fn addr16_orders_ipv4_numerically() {
        let low = Addr16::from("9.255.255.255".parse::<IpAddr>().unwrap());
        let high = Addr16::from("10.0.0.0".parse::<IpAddr>().unwrap());
        assert!(low < high);
    }

    #[test]
    fn granule_sets_encode_union_and_reject_garbage() {
        let mut set = GranuleSet::new();
        for row in [0, 5, 8191, 8192, 40_000, 10_000_000, 9000, 3] {
            set.push_row(row);
        }
        assert_eq!(set.granules(), &[0, 1, 4, 1220]);
        assert_eq!(GranuleSet::decode(&set.encode()), Some(set.clone()));
        assert_eq!(GranuleSet::decode(&[]), Some(GranuleSet::new()));
        let other: GranuleSet = [3, 4, 9000].into_iter().collect();
        set.union_with(&other);
        assert_eq!(set.granules(), &[0, 1, 3, 4, 1220, 9000]);
        let mut both = set.clone();
        both.intersect_with(&[1, 2, 4, 9000, 9001].into_iter().collect());
        assert_eq!(both.granules(), &[1, 4, 9000]);
        assert_eq!(GranuleSet::decode(&[0x80]), None, "unterminated varint");
        assert_eq!(GranuleSet::decode(&[1, 0]), None, "zero gap");
        assert_eq!(
            GranuleSet::decode(&[0xff, 0xff, 0xff, 0xff, 0x7f]),
            None,
            "overflow"
        );
    }

    #[test]
    fn decode_status_codes_round_trip() {
        for status in DecodeStatus::ALL {
            assert_eq!(DecodeStatus::from_code(status as u8), Some(status));
        }
        assert_eq!(DecodeStatus::from_code(200), None);
    }
}
