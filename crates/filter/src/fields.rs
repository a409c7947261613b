//! The table of packet fields: each field a filter can name is declared once,
//! with its Wireshark name, the type of its values, the layer a packet must
//! have for the field to be present, and how each of its occurrences is read
//! from the `packets` columns. The row evaluator (`eval.rs`), the columns a
//! search decodes (`columns.rs`), the address and port pruning (`prune.rs`)
//! and the SQL expression of a filter (`hindsight_sql`'s `filter_expr.rs`)
//! all derive from this table, and a test holds the row evaluator and the SQL
//! path to each other field by field.
//!
//! Adding a field over the columns is one line of [`fields!`]; a field over a
//! value no column holds needs its column first: one line of
//! `hindsight_model::packet_header_columns!` and the decoder's line that sets
//! it.

use hindsight_model::{
    Addr16, DecodeStatus, PacketRecord, col, ethertype, ip_proto, tcp_flags, tunnel,
};

use crate::ast::FieldType;

/// How a column's values are held (its Arrow type), and so how a value of the
/// filter's `u128` value space is written against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// `UInt8`.
    U8,
    /// `UInt16`.
    U16,
    /// `UInt32`.
    U32,
    /// `UInt64`.
    U64,
    /// `Boolean`, read as 0 or 1.
    Bool,
    /// A 6-byte MAC (`FixedSizeBinary(6)`), read as a 48-bit integer.
    Mac,
    /// A 16-byte address (`FixedSizeBinary(16)`), read as a 128-bit integer.
    Addr,
}

/// A column of the `packets` table that fields read: its name, its kind, and
/// its value in a decoded record.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// The column's name (`hindsight_model::col`).
    pub name: &'static str,
    /// How its values are held.
    pub kind: ColumnKind,
    /// Its value in a record, if the record has one.
    pub read: fn(&PacketRecord) -> Option<u128>,
}

/// A header column's value as fields read it: its kind, and its value in the
/// filter's `u128` value space.
trait Scalar: Copy {
    const KIND: ColumnKind;
    fn value(self) -> u128;
}

macro_rules! scalar {
    ($($ty:ty => $kind:ident, |$v:ident| $value:expr;)*) => {$(
        impl Scalar for $ty {
            const KIND: ColumnKind = ColumnKind::$kind;
            fn value(self) -> u128 {
                let $v = self;
                $value
            }
        }
    )*};
}
scalar! {
    u8 => U8, |v| u128::from(v);
    u16 => U16, |v| u128::from(v);
    u32 => U32, |v| u128::from(v);
    bool => Bool, |v| u128::from(v);
    [u8; 6] => Mac, |v| v.iter().fold(0, |acc, &byte| (acc << 8) | u128::from(byte));
    Addr16 => Addr, |v| u128::from_be_bytes(v.0);
    hindsight_model::TunnelId => U64, |v| u128::from(v.to_u64());
}

macro_rules! columns {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $ty:ty;)*) => {
        /// The columns fields read: the frame's lengths and interface, and
        /// every header column.
        pub mod column {
            use super::*;

            /// `wire_len`.
            pub const WIRE_LEN: Column = Column {
                name: col::WIRE_LEN,
                kind: ColumnKind::U32,
                read: |r| Some(u128::from(r.wire_len)),
            };
            /// `cap_len`.
            pub const CAP_LEN: Column = Column {
                name: col::CAP_LEN,
                kind: ColumnKind::U32,
                read: |r| Some(u128::from(r.cap_len)),
            };
            /// `iface`.
            pub const IFACE: Column = Column {
                name: col::IFACE,
                kind: ColumnKind::U32,
                read: |r| Some(u128::from(r.iface)),
            };
            $(
                $(#[$doc])*
                pub const $konst: Column = Column {
                    name: col::$konst,
                    kind: <$ty as Scalar>::KIND,
                    read: |r| r.headers.$field.map(Scalar::value),
                };
            )*
        }
    };
}
hindsight_model::packet_header_columns!(columns);

/// The layer a packet must have for a field to be present (for a protocol,
/// what the protocol's presence is), as Wireshark shows layers with IP
/// reassembly off: a non-first fragment has no transport layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Every packet.
    Frame,
    /// A MAC header: a source or destination MAC.
    Eth,
    /// A VLAN tag.
    Vlan,
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// IPv4 or IPv6.
    Ip,
    /// ARP (its ethertype).
    Arp,
    /// This transport protocol over IPv4 or IPv6, not in a non-first fragment.
    Transport(u8),
    /// This protocol over IPv4 (ICMP, IGMP).
    Ipv4Transport(u8),
    /// This protocol over IPv6 (ICMPv6).
    Ipv6Transport(u8),
    /// An encapsulation with one of these bits (`hindsight_model::tunnel`).
    Tunnel(u16),
}

impl Layer {
    /// Whether `record` has the layer.
    pub fn holds(self, record: &PacketRecord) -> bool {
        let h = &record.headers;
        let v4 = h.ip_version == Some(4);
        let v6 = h.ip_version == Some(6);
        let transport = |proto: u8| {
            (v4 || v6) && h.ip_proto == Some(proto) && h.status != DecodeStatus::Fragment
        };
        match self {
            Layer::Frame => true,
            Layer::Eth => h.src_mac.is_some() || h.dst_mac.is_some(),
            Layer::Vlan => h.vlan_outer.is_some(),
            Layer::Ipv4 => v4,
            Layer::Ipv6 => v6,
            Layer::Ip => v4 || v6,
            Layer::Arp => h.eth_type == Some(ethertype::ARP),
            Layer::Transport(proto) => transport(proto),
            Layer::Ipv4Transport(proto) => v4 && transport(proto),
            Layer::Ipv6Transport(proto) => v6 && transport(proto),
            Layer::Tunnel(bits) => h.tunnel.is_some_and(|seen| seen & bits != 0),
        }
    }

    /// The columns its test reads besides those every filter reads
    /// (`IP_VERSION`, `IP_PROTO`, `STATUS`, `ETH_TYPE`).
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Layer::Eth => &[col::ETH_SRC, col::ETH_DST],
            Layer::Vlan => &[col::VLAN_OUTER],
            Layer::Tunnel(_) => &[col::TUNNEL],
            _ => &[],
        }
    }
}

/// How one occurrence of a field is read from the columns.
#[derive(Clone, Copy, Debug)]
pub enum Read {
    /// The column's value.
    Value(Column),
    /// An IPv4 address: the low 32 bits of the column's IPv4-mapped address
    /// (absent where the column holds an IPv6 address).
    Ipv4(Column),
    /// 1 if any of these bits of the column's value is set, else 0.
    Bit(Column, u64),
    /// The tunnel's identifier (the low 32 bits of `TUNNEL_ID`) where its
    /// encapsulation has one of these bits.
    TunnelId(u16),
    /// The packet's Community ID (its first 16 bytes), hashed with the
    /// filter's seed from the addresses, protocol, ports and ICMP type and
    /// code. No column holds it: SQL does not read it.
    CommunityId,
}

impl Read {
    /// The columns it reads.
    pub fn columns(self) -> Vec<&'static str> {
        match self {
            Read::Value(column) | Read::Ipv4(column) | Read::Bit(column, _) => vec![column.name],
            Read::TunnelId(_) => vec![col::TUNNEL_ID],
            Read::CommunityId => vec![col::SRC_PORT, col::DST_PORT, col::ICMP_TYPE, col::ICMP_CODE],
        }
    }

    /// Its value in `record`, if the record has it (whatever the layer).
    pub fn value(self, record: &PacketRecord, seed: u16) -> Option<u128> {
        match self {
            Read::Value(column) => (column.read)(record),
            Read::Ipv4(column) => (column.read)(record)
                .filter(|&value| value >> 32 == 0xffff)
                .map(|value| value & u128::from(u32::MAX)),
            Read::Bit(column, bits) => {
                (column.read)(record).map(|value| u128::from(value & u128::from(bits) != 0))
            }
            Read::TunnelId(bits) => (column::TUNNEL_ID.read)(record)
                .filter(|&packed| (packed >> 32) & u128::from(bits) != 0)
                .map(|packed| packed & u128::from(u32::MAX)),
            Read::CommunityId => record
                .headers
                .community_id_hash(seed)
                .map(|hash| crate::ast::community_value(&hash)),
        }
    }
}

/// A field's declaration.
#[derive(Clone, Copy, Debug)]
pub struct FieldDef {
    /// Its Wireshark name.
    pub name: &'static str,
    /// The field.
    pub field: crate::ast::Field,
    /// The type of its values (which literals and operators it takes).
    pub ty: FieldType,
    /// The layer a packet must have for the field to be present.
    pub layer: Layer,
    /// How each occurrence is read; none for a protocol. A field that occurs
    /// twice (`ip.addr`) is "any equal" under `==`, "all differ" under `!=`.
    pub reads: &'static [Read],
}

impl FieldDef {
    /// The columns its test reads besides those every filter reads.
    pub fn columns(&self) -> impl Iterator<Item = &'static str> {
        self.layer
            .columns()
            .iter()
            .copied()
            .chain(self.reads.iter().flat_map(|read| read.columns()))
    }

    /// Whether `record` has the field (or protocol).
    pub fn is_present(&self, record: &PacketRecord) -> bool {
        self.layer.holds(record)
            && (self.reads.is_empty()
                || self
                    .reads
                    .iter()
                    .any(|read| read.value(record, 0).is_some()))
    }
}

impl FieldDef {
    /// Filters that exercise the field, made from its type: presence,
    /// equality, order, masks, sets and quantifiers (what the tests that hold
    /// the row evaluator, SQL and pruning to each other run for every field).
    pub fn examples(&self) -> Vec<String> {
        let tests: &[&str] = match self.ty {
            // Compared by the encapsulations' names.
            _ if self.field == Field::TunnelType => {
                &["F", "F == \"gre\"", "F != \"vxlan\"", "F > 1", "F & 4"]
            }
            FieldType::Protocol | FieldType::CommunityId => &["F", "!F"],
            FieldType::Bool => &["F", "F == 1", "F == 0", "!(F == 1)"],
            FieldType::UInt { .. } => &[
                "F",
                "F == 0",
                "F > 0",
                "F < 2",
                "F & 1",
                "F & 0x12 == 0x12",
                "F in {0..3, 7, 17}",
                "F != 6",
                "all F > 1",
                "F >= M",
            ],
            FieldType::Ipv4 => &[
                "F",
                "F == 10.0.0.0/8",
                "F != 10.64.88.105",
                "F > 10.64.88.0",
                "all F == 10.64.0.0/16",
            ],
            FieldType::Ipv6 => &["F", "F == fe80::/10", "F == ::/0", "F != ff02::1"],
            FieldType::Addr => &["F", "F == 10.0.0.0/8", "F == ::/0"],
            FieldType::Mac => &["F", "F == ff:ff:ff:ff:ff:ff", "F > 00:50:00:00:00:00"],
        };
        // An order near the top of the field's values (200 where it can be).
        let high = match self.ty {
            FieldType::UInt { max } => max.min(200),
            _ => 0,
        };
        tests
            .iter()
            .map(|test| test.replace('F', self.name).replace('M', &high.to_string()))
            .collect()
    }
}

const fn uint(max: u64) -> FieldType {
    FieldType::UInt { max }
}

const U8: FieldType = uint(u8::MAX as u64);
const U16: FieldType = uint(u16::MAX as u64);
const U32: FieldType = uint(u32::MAX as u64);
const PROTOCOL: FieldType = FieldType::Protocol;
const BOOL: FieldType = FieldType::Bool;

macro_rules! fields {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $ty:expr, $layer:expr, [$($read:expr),* $(,)?];)*) => {
        /// A field or protocol a filter can name, as Wireshark names it (see
        /// [`FIELDS`] for each one's declaration, and `docs/filter-language.md`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Field {
            $($(#[$doc])* $variant,)*
        }

        /// Every field, in the order of the documentation table.
        pub const FIELDS: &[FieldDef] = &[
            $(FieldDef {
                name: $name,
                field: Field::$variant,
                ty: $ty,
                layer: $layer,
                reads: &[$($read),*],
            },)*
        ];
    };
}

use Layer::{Arp, Eth, Frame, Ip, Ipv4, Ipv4Transport, Ipv6, Ipv6Transport, Transport, Tunnel};
use Read::{Bit, TunnelId, Value};
use column as c;

fields! {
    /// `frame`: every packet.
    Frame = "frame", PROTOCOL, Frame, [];
    /// `frame.len`: length on the wire.
    FrameLen = "frame.len", U32, Frame, [Value(c::WIRE_LEN)];
    /// `frame.cap_len`: captured length.
    FrameCapLen = "frame.cap_len", U32, Frame, [Value(c::CAP_LEN)];
    /// `frame.interface_id`: capture interface index.
    FrameInterfaceId = "frame.interface_id", U32, Frame, [Value(c::IFACE)];
    /// `eth`: the frame has a MAC header.
    Eth = "eth", PROTOCOL, Eth, [];
    /// `eth.src`.
    EthSrc = "eth.src", FieldType::Mac, Frame, [Value(c::ETH_SRC)];
    /// `eth.dst`.
    EthDst = "eth.dst", FieldType::Mac, Frame, [Value(c::ETH_DST)];
    /// `eth.addr`: either MAC address.
    EthAddr = "eth.addr", FieldType::Mac, Frame, [Value(c::ETH_DST), Value(c::ETH_SRC)];
    /// `eth.dst.ig`: the destination's individual/group bit (1 for multicast
    /// and broadcast).
    EthDstIg = "eth.dst.ig", BOOL, Frame, [Bit(c::ETH_DST, 1 << 40)];
    /// `eth.type`: the ethertype after any VLAN tags.
    EthType = "eth.type", U16, Eth, [Value(c::ETH_TYPE)];
    /// `vlan`: the frame carries at least one VLAN tag.
    Vlan = "vlan", PROTOCOL, Layer::Vlan, [];
    /// `vlan.id`: any of the VLAN IDs (outer and inner).
    VlanId = "vlan.id", U16, Frame, [Value(c::VLAN_OUTER), Value(c::VLAN_INNER)];
    /// `ip`: an IPv4 packet.
    Ip = "ip", PROTOCOL, Ipv4, [];
    /// `ip.src`.
    IpSrc = "ip.src", FieldType::Ipv4, Ipv4, [Read::Ipv4(c::SRC_ADDR)];
    /// `ip.dst`.
    IpDst = "ip.dst", FieldType::Ipv4, Ipv4, [Read::Ipv4(c::DST_ADDR)];
    /// `ip.addr`: either IPv4 address.
    IpAddr = "ip.addr", FieldType::Ipv4, Ipv4, [Read::Ipv4(c::SRC_ADDR), Read::Ipv4(c::DST_ADDR)];
    /// `ip.proto`.
    IpProto = "ip.proto", U8, Ipv4, [Value(c::IP_PROTO)];
    /// `ip.ttl`.
    IpTtl = "ip.ttl", U8, Ipv4, [Value(c::IP_TTL)];
    /// `ip.id`.
    IpId = "ip.id", U16, Ipv4, [Value(c::IP_ID)];
    /// `ip.dsfield.dscp`: the Differentiated Services codepoint.
    IpDsfieldDscp = "ip.dsfield.dscp", uint(63), Ipv4, [Value(c::IP_DSCP)];
    /// `ip.flags.mf`.
    IpFlagsMf = "ip.flags.mf", BOOL, Ipv4, [Value(c::MORE_FRAGMENTS)];
    /// `ip.flags.df`.
    IpFlagsDf = "ip.flags.df", BOOL, Ipv4, [Value(c::DONT_FRAGMENT)];
    /// `ip.frag_offset`: the 13-bit fragment offset field, in 8-byte units.
    IpFragOffset = "ip.frag_offset", U16, Ipv4, [Value(c::FRAG_OFFSET)];
    /// `ip.version`: 4 or 6 (Wireshark adds a hidden `ip.version` to IPv6 packets too).
    IpVersion = "ip.version", U8, Ip, [Value(c::IP_VERSION)];
    /// `ipv6`: an IPv6 packet.
    Ipv6 = "ipv6", PROTOCOL, Ipv6, [];
    /// `ipv6.src`.
    Ipv6Src = "ipv6.src", FieldType::Ipv6, Ipv6, [Value(c::SRC_ADDR)];
    /// `ipv6.dst`.
    Ipv6Dst = "ipv6.dst", FieldType::Ipv6, Ipv6, [Value(c::DST_ADDR)];
    /// `ipv6.addr`: either IPv6 address.
    Ipv6Addr = "ipv6.addr", FieldType::Ipv6, Ipv6, [Value(c::SRC_ADDR), Value(c::DST_ADDR)];
    /// `ipv6.hlim`.
    Ipv6Hlim = "ipv6.hlim", U8, Ipv6, [Value(c::IP_TTL)];
    /// `ipv6.tclass.dscp`: the Differentiated Services codepoint.
    Ipv6TclassDscp = "ipv6.tclass.dscp", uint(63), Ipv6, [Value(c::IP_DSCP)];
    /// `ipv6.nxt`: the upper-layer protocol after any extension headers.
    Ipv6Nxt = "ipv6.nxt", U8, Ipv6, [Value(c::IP_PROTO)];
    /// `arp`.
    Arp = "arp", PROTOCOL, Arp, [];
    /// `arp.src.proto_ipv4`: the sender protocol address.
    ArpSrcProtoIpv4 = "arp.src.proto_ipv4", FieldType::Ipv4, Arp, [Read::Ipv4(c::SRC_ADDR)];
    /// `arp.dst.proto_ipv4`: the target protocol address.
    ArpDstProtoIpv4 = "arp.dst.proto_ipv4", FieldType::Ipv4, Arp, [Read::Ipv4(c::DST_ADDR)];
    /// `tcp`.
    Tcp = "tcp", PROTOCOL, Transport(ip_proto::TCP), [];
    /// `tcp.port`: either TCP port.
    TcpPort = "tcp.port", U16, Transport(ip_proto::TCP), [Value(c::SRC_PORT), Value(c::DST_PORT)];
    /// `tcp.srcport`.
    TcpSrcPort = "tcp.srcport", U16, Transport(ip_proto::TCP), [Value(c::SRC_PORT)];
    /// `tcp.dstport`.
    TcpDstPort = "tcp.dstport", U16, Transport(ip_proto::TCP), [Value(c::DST_PORT)];
    /// `tcp.flags`: the 12 flag bits.
    TcpFlags = "tcp.flags", U16, Transport(ip_proto::TCP), [Value(c::TCP_FLAGS)];
    /// `tcp.flags.fin`.
    TcpFlagsFin = "tcp.flags.fin", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::FIN as u64)];
    /// `tcp.flags.syn`.
    TcpFlagsSyn = "tcp.flags.syn", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::SYN as u64)];
    /// `tcp.flags.reset`.
    TcpFlagsReset = "tcp.flags.reset", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::RST as u64)];
    /// `tcp.flags.push`.
    TcpFlagsPush = "tcp.flags.push", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::PSH as u64)];
    /// `tcp.flags.ack`.
    TcpFlagsAck = "tcp.flags.ack", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::ACK as u64)];
    /// `tcp.flags.urg`.
    TcpFlagsUrg = "tcp.flags.urg", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::URG as u64)];
    /// `tcp.flags.ece`.
    TcpFlagsEce = "tcp.flags.ece", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::ECE as u64)];
    /// `tcp.flags.cwr`.
    TcpFlagsCwr = "tcp.flags.cwr", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::CWR as u64)];
    /// `tcp.flags.ae` (formerly `tcp.flags.ns`).
    TcpFlagsAe = "tcp.flags.ae", BOOL, Transport(ip_proto::TCP), [Bit(c::TCP_FLAGS, tcp_flags::AE as u64)];
    /// `udp`.
    Udp = "udp", PROTOCOL, Transport(ip_proto::UDP), [];
    /// `udp.port`: either UDP port.
    UdpPort = "udp.port", U16, Transport(ip_proto::UDP), [Value(c::SRC_PORT), Value(c::DST_PORT)];
    /// `udp.srcport`.
    UdpSrcPort = "udp.srcport", U16, Transport(ip_proto::UDP), [Value(c::SRC_PORT)];
    /// `udp.dstport`.
    UdpDstPort = "udp.dstport", U16, Transport(ip_proto::UDP), [Value(c::DST_PORT)];
    /// `sctp`.
    Sctp = "sctp", PROTOCOL, Transport(ip_proto::SCTP), [];
    /// `sctp.port`: either SCTP port.
    SctpPort = "sctp.port", U16, Transport(ip_proto::SCTP), [Value(c::SRC_PORT), Value(c::DST_PORT)];
    /// `sctp.srcport`.
    SctpSrcPort = "sctp.srcport", U16, Transport(ip_proto::SCTP), [Value(c::SRC_PORT)];
    /// `sctp.dstport`.
    SctpDstPort = "sctp.dstport", U16, Transport(ip_proto::SCTP), [Value(c::DST_PORT)];
    /// `icmp`.
    Icmp = "icmp", PROTOCOL, Ipv4Transport(ip_proto::ICMP), [];
    /// `igmp`.
    Igmp = "igmp", PROTOCOL, Ipv4Transport(ip_proto::IGMP), [];
    /// `icmp.type`.
    IcmpType = "icmp.type", U8, Ipv4Transport(ip_proto::ICMP), [Value(c::ICMP_TYPE)];
    /// `icmp.code`.
    IcmpCode = "icmp.code", U8, Ipv4Transport(ip_proto::ICMP), [Value(c::ICMP_CODE)];
    /// `icmpv6`.
    Icmpv6 = "icmpv6", PROTOCOL, Ipv6Transport(ip_proto::ICMPV6), [];
    /// `icmpv6.type`.
    Icmpv6Type = "icmpv6.type", U8, Ipv6Transport(ip_proto::ICMPV6), [Value(c::ICMP_TYPE)];
    /// `icmpv6.code`.
    Icmpv6Code = "icmpv6.code", U8, Ipv6Transport(ip_proto::ICMPV6), [Value(c::ICMP_CODE)];
    /// `tunnel`: the packet was decoded through an encapsulation.
    Tunnel = "tunnel", PROTOCOL, Tunnel(u16::MAX), [];
    /// `tunnel.type`: the encapsulations (compared by name: `tunnel.type == "gre"`).
    TunnelType = "tunnel.type", U16, Frame, [Value(c::TUNNEL)];
    /// `tunnel.src`: source address of the outermost IP header of a tunnelled packet.
    TunnelSrc = "tunnel.src", FieldType::Addr, Frame, [Value(c::TUNNEL_SRC)];
    /// `tunnel.dst`: destination address of the outermost IP header.
    TunnelDst = "tunnel.dst", FieldType::Addr, Frame, [Value(c::TUNNEL_DST)];
    /// `tunnel.addr`: either outer address.
    TunnelAddr = "tunnel.addr", FieldType::Addr, Frame, [Value(c::TUNNEL_SRC), Value(c::TUNNEL_DST)];
    /// `mpls`.
    Mpls = "mpls", PROTOCOL, Tunnel(tunnel::MPLS), [];
    /// `mpls.label`: the top label.
    MplsLabel = "mpls.label", uint(0xf_ffff), Frame, [Value(c::MPLS_LABEL)];
    /// `pppoes`: a PPPoE session.
    Pppoes = "pppoes", PROTOCOL, Tunnel(tunnel::PPPOE), [];
    /// `gre`.
    Gre = "gre", PROTOCOL, Tunnel(tunnel::GRE), [];
    /// `gre.key`.
    GreKey = "gre.key", U32, Frame, [TunnelId(tunnel::GRE)];
    /// `erspan`.
    Erspan = "erspan", PROTOCOL, Tunnel(tunnel::ERSPAN), [];
    /// `vxlan`.
    Vxlan = "vxlan", PROTOCOL, Tunnel(tunnel::VXLAN), [];
    /// `vxlan.vni`.
    VxlanVni = "vxlan.vni", uint(0xff_ffff), Frame, [TunnelId(tunnel::VXLAN)];
    /// `geneve`.
    Geneve = "geneve", PROTOCOL, Tunnel(tunnel::GENEVE), [];
    /// `geneve.vni`.
    GeneveVni = "geneve.vni", uint(0xff_ffff), Frame, [TunnelId(tunnel::GENEVE)];
    /// `gtp`: a GTP-U G-PDU.
    Gtp = "gtp", PROTOCOL, Tunnel(tunnel::GTP), [];
    /// `gtp.teid`.
    GtpTeid = "gtp.teid", U32, Frame, [TunnelId(tunnel::GTP)];
    /// `cfp`: Cisco FabricPath.
    Cfp = "cfp", PROTOCOL, Tunnel(tunnel::FABRICPATH), [];
    /// `community_id`: the Community ID (version 1, seed 0) of the innermost
    /// addresses, protocol and ports, compared with `"1:..."`.
    CommunityId = "community_id", FieldType::CommunityId, Frame, [Read::CommunityId];
}

impl Field {
    /// The field's declaration.
    pub fn def(self) -> &'static FieldDef {
        // The table lists the variants in their order.
        FIELDS
            .get(self as usize)
            .filter(|def| def.field == self)
            .unwrap_or(&FALLBACK)
    }
}

/// Never reached: every variant has its entry at its index.
const FALLBACK: FieldDef = FieldDef {
    name: "?",
    field: Field::Frame,
    ty: PROTOCOL,
    layer: Frame,
    reads: &[],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_is_at_its_index() {
        for (at, def) in FIELDS.iter().enumerate() {
            assert_eq!(def.field as usize, at, "{}", def.name);
            assert_eq!(def.field.def().name, def.name);
        }
    }
}
