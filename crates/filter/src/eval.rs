//! Evaluates a typed filter against a [`PacketRecord`], without allocating.
//!
//! Every field value is read into the one `u128` value space the literals were
//! converted to ([`Literal::value_range`](super::ast::Literal::value_range)), so a
//! comparison is an integer comparison whatever the field's type.

use hindsight_model::{
    Addr16, AppFields, DecodeStatus, PacketHeaders, PacketRecord, ethertype, ip_proto, tcp_flags,
    tunnel,
};

use super::Filter;
use super::ast::{CmpOp, Expr, Field, FieldRef, Quantifier};
use super::offsets::Abort;

/// What a filter says of a packet whose bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The packet passes.
    Match,
    /// The packet does not pass.
    NoMatch,
    /// The filter reads bytes the source captured that were not kept (the
    /// archive's snap length), or a layer behind a link header whose layout
    /// the byte offsets do not follow: whether it passes is not known.
    Unknown,
}

impl Filter {
    /// Returns true if `record` passes the filter. Tests of the packet's bytes
    /// (tcpdump byte offsets, payload) are false without them: use
    /// [`test`](Self::test) where the bytes are at hand.
    pub fn matches(&self, record: &PacketRecord) -> bool {
        self.root()
            .is_none_or(|root| root.matches(record, self.cx(None)))
    }

    /// Returns true if a connection passes the filter: `record` its fields as a
    /// packet of it has them, `app` its application fields.
    pub fn matches_connection(&self, record: &PacketRecord, app: Option<&AppFields>) -> bool {
        self.root()
            .is_none_or(|root| root.matches(record, self.cx(app)))
    }

    fn cx<'a>(&self, app: Option<&'a AppFields>) -> Cx<'a> {
        Cx {
            seed: self.community_seed,
            app,
        }
    }

    /// Returns true if the filter tests the packet's bytes, not only its fields.
    pub fn reads_bytes(&self) -> bool {
        self.reads_bytes
    }

    /// Returns true if a packet passes, its frame's bytes at hand (a live
    /// packet's): [`test`](Self::test) if the filter reads them, else
    /// [`matches`](Self::matches).
    pub fn passes(&self, record: &PacketRecord, frame: &[u8]) -> bool {
        match self.reads_bytes() {
            true => self.test(record, frame) == Verdict::Match,
            false => self.matches(record),
        }
    }

    /// Tests a packet with its frame's bytes (as captured, or as many as the
    /// archive kept of them, `record.cap_len` telling how many were captured).
    pub fn test(&self, record: &PacketRecord, frame: &[u8]) -> Verdict {
        match self
            .root()
            .map(|root| root.eval(record, frame, self.cx(None)))
        {
            None | Some(Ok(true)) => Verdict::Match,
            Some(Ok(false)) | Some(Err(Abort::Reject)) => Verdict::NoMatch,
            Some(Err(Abort::PastKept | Abort::Unsupported)) => Verdict::Unknown,
        }
    }
}

/// What an evaluation needs besides the packet: the Community ID seed, and
/// the connection's application fields where a connection is tested.
#[derive(Clone, Copy)]
pub(crate) struct Cx<'a> {
    seed: u16,
    app: Option<&'a AppFields>,
}

/// Returns true if the tree tests the packet's bytes, not only its fields.
pub(crate) fn reads_bytes(expr: &Expr) -> bool {
    match expr {
        Expr::Offsets(relation) => relation.reads_bytes(),
        Expr::Bytes(_) => true,
        Expr::Not(inner) => reads_bytes(inner),
        Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
            operands.iter().any(reads_bytes)
        }
        _ => false,
    }
}

impl Expr {
    /// Evaluates this (sub)filter over a packet and its bytes, left to right
    /// with short circuits, as BPF does: a rejection ends the whole filter.
    fn eval(&self, record: &PacketRecord, frame: &[u8], cx: Cx<'_>) -> Result<bool, Abort> {
        Ok(match self {
            Expr::Offsets(relation) => relation.eval(record, frame)?,
            Expr::Bytes(test) => test.eval(record, frame)?,
            Expr::Not(inner) => !inner.eval(record, frame, cx)?,
            Expr::And(operands) => {
                for operand in operands {
                    if !operand.eval(record, frame, cx)? {
                        return Ok(false);
                    }
                }
                true
            }
            Expr::Or(operands) => {
                for operand in operands {
                    if operand.eval(record, frame, cx)? {
                        return Ok(true);
                    }
                }
                false
            }
            Expr::Xor(operands) => {
                let mut odd = false;
                for operand in operands {
                    odd ^= operand.eval(record, frame, cx)?;
                }
                odd
            }
            leaf => leaf.matches(record, cx),
        })
    }

    /// Returns true if `record` passes this (sub)filter, Community IDs hashed
    /// with `seed`.
    pub(crate) fn matches(&self, record: &PacketRecord, cx: Cx<'_>) -> bool {
        match self {
            Expr::Exists(field) => is_present(*field, record),
            Expr::BitTest(left) => {
                let values = field_values(left, record, cx.seed);
                values.as_slice().iter().any(|&value| value != 0)
            }
            Expr::Compare(comparison) => {
                let values = field_values(&comparison.left, record, cx.seed);
                let (low, high) = comparison.range;
                quantify(
                    comparison.quantifier,
                    values.as_slice(),
                    |value| match comparison.op {
                        CmpOp::Eq => low <= value && value <= high,
                        CmpOp::Ne => value < low || high < value,
                        CmpOp::Lt => value < low,
                        CmpOp::Le => value <= low,
                        CmpOp::Gt => value > low,
                        CmpOp::Ge => value >= low,
                    },
                )
            }
            Expr::In(membership) => {
                let values = field_values(&membership.left, record, cx.seed);
                quantify(membership.quantifier, values.as_slice(), |value| {
                    in_ranges(&membership.ranges, value)
                })
            }
            // Without the bytes, a test of them is false; `len` needs none.
            Expr::Offsets(relation) => {
                !relation.reads_bytes() && relation.eval(record, &[]).unwrap_or(false)
            }
            Expr::Bytes(_) => false,
            Expr::Text(test) => test.matches(cx.app),
            Expr::Not(inner) => !inner.matches(record, cx),
            Expr::And(operands) => operands.iter().all(|operand| operand.matches(record, cx)),
            Expr::Or(operands) => operands.iter().any(|operand| operand.matches(record, cx)),
            Expr::Xor(operands) => operands
                .iter()
                .fold(false, |odd, operand| odd ^ operand.matches(record, cx)),
        }
    }
}

/// Applies a test to the occurrences of a field: an absent field fails either way.
fn quantify(quantifier: Quantifier, values: &[u128], test: impl Fn(u128) -> bool) -> bool {
    match quantifier {
        Quantifier::Any => values.iter().any(|&value| test(value)),
        Quantifier::All => !values.is_empty() && values.iter().all(|&value| test(value)),
    }
}

/// Returns true if `value` lies in one of the sorted, disjoint `ranges`.
fn in_ranges(ranges: &[(u128, u128)], value: u128) -> bool {
    let after = ranges.partition_point(|&(low, _)| low <= value);
    after > 0
        && ranges
            .get(after - 1)
            .is_some_and(|&(_, high)| value <= high)
}

/// Up to two occurrences of a field in one packet (`ip.addr` is source and
/// destination; `vlan.id` the outer and inner tag), held without allocating.
#[derive(Clone, Copy)]
struct Values {
    items: [u128; 2],
    len: usize,
}

impl Values {
    const NONE: Self = Self {
        items: [0; 2],
        len: 0,
    };

    fn one(value: Option<u128>) -> Self {
        match value {
            Some(value) => Self {
                items: [value, 0],
                len: 1,
            },
            None => Self::NONE,
        }
    }

    fn two(first: Option<u128>, second: Option<u128>) -> Self {
        match (first, second) {
            (Some(first), Some(second)) => Self {
                items: [first, second],
                len: 2,
            },
            (Some(only), None) | (None, Some(only)) => Self::one(Some(only)),
            (None, None) => Self::NONE,
        }
    }

    fn as_slice(&self) -> &[u128] {
        self.items.get(..self.len).unwrap_or_default()
    }

    fn mask(mut self, mask: Option<u64>) -> Self {
        if let Some(mask) = mask {
            for item in &mut self.items {
                *item &= u128::from(mask);
            }
        }
        self
    }
}

/// The protocol layers a record has, as Wireshark would show them with IP
/// reassembly off: a non-first fragment has no transport layer.
struct Layers {
    ipv4: bool,
    ipv6: bool,
    transport: Option<u8>,
}

impl Layers {
    fn of(record: &PacketRecord) -> Self {
        let headers = &record.headers;
        let ipv4 = headers.ip_version == Some(4);
        let ipv6 = headers.ip_version == Some(6);
        let transport = headers
            .ip_proto
            .filter(|_| (ipv4 || ipv6) && headers.status != DecodeStatus::Fragment);
        Self {
            ipv4,
            ipv6,
            transport,
        }
    }

    fn has_transport(&self, proto: u8) -> bool {
        self.transport == Some(proto)
    }

    fn has_icmp(&self) -> bool {
        self.ipv4 && self.has_transport(ip_proto::ICMP)
    }

    fn has_icmpv6(&self) -> bool {
        self.ipv6 && self.has_transport(ip_proto::ICMPV6)
    }
}

fn has_eth(record: &PacketRecord) -> bool {
    record.headers.src_mac.is_some() || record.headers.dst_mac.is_some()
}

fn is_arp(record: &PacketRecord) -> bool {
    record.headers.eth_type == Some(ethertype::ARP)
}

/// Returns true if the packet has the field or protocol.
fn is_present(field: Field, record: &PacketRecord) -> bool {
    let layers = Layers::of(record);
    match field {
        Field::Frame => true,
        Field::Eth => has_eth(record),
        Field::Vlan => record.headers.vlan_outer.is_some(),
        Field::Ip => layers.ipv4,
        Field::Ipv6 => layers.ipv6,
        Field::Arp => is_arp(record),
        Field::Tcp => layers.has_transport(ip_proto::TCP),
        Field::Udp => layers.has_transport(ip_proto::UDP),
        Field::Sctp => layers.has_transport(ip_proto::SCTP),
        Field::Icmp => layers.has_icmp(),
        Field::Igmp => layers.ipv4 && layers.has_transport(ip_proto::IGMP),
        Field::Icmpv6 => layers.has_icmpv6(),
        Field::Tunnel => has_tunnel(record, u16::MAX),
        Field::Mpls => has_tunnel(record, tunnel::MPLS),
        Field::Pppoes => has_tunnel(record, tunnel::PPPOE),
        Field::Gre => has_tunnel(record, tunnel::GRE),
        Field::Erspan => has_tunnel(record, tunnel::ERSPAN),
        Field::Vxlan => has_tunnel(record, tunnel::VXLAN),
        Field::Geneve => has_tunnel(record, tunnel::GENEVE),
        Field::Gtp => has_tunnel(record, tunnel::GTP),
        Field::Cfp => has_tunnel(record, tunnel::FABRICPATH),
        // Whether a Community ID is there does not depend on the seed.
        _ => field_values(&FieldRef { field, mask: None }, record, 0).len > 0,
    }
}

fn mac_value(mac: Option<[u8; 6]>) -> Option<u128> {
    mac.map(|bytes| {
        bytes
            .iter()
            .fold(0u128, |acc, &byte| (acc << 8) | u128::from(byte))
    })
}

/// The value of an IPv4 address in the IPv4 value space (its low 32 bits).
fn ipv4_value(addr: Option<Addr16>) -> Option<u128> {
    addr.filter(Addr16::is_v4)
        .map(|addr| u128::from_be_bytes(addr.0) & u128::from(u32::MAX))
}

fn ipv6_value(addr: Option<Addr16>) -> Option<u128> {
    addr.map(|addr| u128::from_be_bytes(addr.0))
}

fn flag(flags: Option<u16>, bit: u16) -> Option<u128> {
    flags.map(|flags| u128::from(flags & bit != 0))
}

/// The tunnel identifier of the packet if the encapsulation with `bit` gave it.
fn tunnel_id(headers: &PacketHeaders, bit: u16) -> Values {
    Values::one(
        headers
            .tunnel_id
            .filter(|id| id.kind & bit != 0)
            .map(|id| u128::from(id.id)),
    )
}

/// Returns true if the packet went through an encapsulation with one of `bits`.
fn has_tunnel(record: &PacketRecord, bits: u16) -> bool {
    record.headers.tunnel.is_some_and(|seen| seen & bits != 0)
}

/// Returns the occurrences of a field in the packet, masked if the test masks them.
fn field_values(left: &FieldRef, record: &PacketRecord, seed: u16) -> Values {
    let headers = &record.headers;
    let layers = Layers::of(record);
    let v4 = |value: Option<u128>| if layers.ipv4 { value } else { None };
    let v6 = |value: Option<u128>| if layers.ipv6 { value } else { None };
    let on = |present: bool, value: Option<u128>| if present { value } else { None };
    let port = |proto: u8, port: Option<u16>| on(layers.has_transport(proto), port.map(u128::from));
    let ports =
        |proto: u8| Values::two(port(proto, headers.src_port), port(proto, headers.dst_port));
    let tcp_flag = |bit: u16| {
        Values::one(on(
            layers.has_transport(ip_proto::TCP),
            flag(headers.tcp_flags, bit),
        ))
    };
    let values = match left.field {
        Field::Frame
        | Field::Eth
        | Field::Vlan
        | Field::Ip
        | Field::Ipv6
        | Field::Arp
        | Field::Tcp
        | Field::Udp
        | Field::Sctp
        | Field::Icmp
        | Field::Igmp
        | Field::Icmpv6 => Values::NONE,
        Field::FrameLen => Values::one(Some(u128::from(record.wire_len))),
        Field::FrameCapLen => Values::one(Some(u128::from(record.cap_len))),
        Field::FrameInterfaceId => Values::one(Some(u128::from(record.iface))),
        Field::EthSrc => Values::one(mac_value(headers.src_mac)),
        Field::EthDst => Values::one(mac_value(headers.dst_mac)),
        Field::EthAddr => Values::two(mac_value(headers.dst_mac), mac_value(headers.src_mac)),
        Field::EthType => Values::one(on(has_eth(record), headers.eth_type.map(u128::from))),
        Field::VlanId => Values::two(
            headers.vlan_outer.map(u128::from),
            headers.vlan_inner.map(u128::from),
        ),
        Field::IpSrc => Values::one(v4(ipv4_value(headers.src_addr))),
        Field::IpDst => Values::one(v4(ipv4_value(headers.dst_addr))),
        Field::IpAddr => Values::two(
            v4(ipv4_value(headers.src_addr)),
            v4(ipv4_value(headers.dst_addr)),
        ),
        Field::IpProto => Values::one(v4(headers.ip_proto.map(u128::from))),
        Field::IpTtl => Values::one(v4(headers.ip_ttl.map(u128::from))),
        Field::IpId => Values::one(v4(headers.ip_id.map(u128::from))),
        Field::IpFlagsMf => Values::one(v4(headers.more_fragments.map(u128::from))),
        Field::IpFlagsDf => Values::one(v4(headers.dont_fragment.map(u128::from))),
        Field::IpFragOffset => Values::one(v4(headers.frag_offset.map(u128::from))),
        Field::IpVersion => Values::one(
            headers
                .ip_version
                .filter(|_| layers.ipv4 || layers.ipv6)
                .map(u128::from),
        ),
        Field::Ipv6Src => Values::one(v6(ipv6_value(headers.src_addr))),
        Field::Ipv6Dst => Values::one(v6(ipv6_value(headers.dst_addr))),
        Field::Ipv6Addr => Values::two(
            v6(ipv6_value(headers.src_addr)),
            v6(ipv6_value(headers.dst_addr)),
        ),
        Field::Ipv6Hlim => Values::one(v6(headers.ip_ttl.map(u128::from))),
        Field::Ipv6Nxt => Values::one(v6(headers.ip_proto.map(u128::from))),
        Field::ArpSrcProtoIpv4 => Values::one(on(is_arp(record), ipv4_value(headers.src_addr))),
        Field::ArpDstProtoIpv4 => Values::one(on(is_arp(record), ipv4_value(headers.dst_addr))),
        Field::TcpPort => ports(ip_proto::TCP),
        Field::TcpSrcPort => Values::one(port(ip_proto::TCP, headers.src_port)),
        Field::TcpDstPort => Values::one(port(ip_proto::TCP, headers.dst_port)),
        Field::UdpPort => ports(ip_proto::UDP),
        Field::UdpSrcPort => Values::one(port(ip_proto::UDP, headers.src_port)),
        Field::UdpDstPort => Values::one(port(ip_proto::UDP, headers.dst_port)),
        Field::SctpPort => ports(ip_proto::SCTP),
        Field::SctpSrcPort => Values::one(port(ip_proto::SCTP, headers.src_port)),
        Field::SctpDstPort => Values::one(port(ip_proto::SCTP, headers.dst_port)),
        Field::TcpFlags => Values::one(on(
            layers.has_transport(ip_proto::TCP),
            headers.tcp_flags.map(u128::from),
        )),
        Field::TcpFlagsFin => tcp_flag(tcp_flags::FIN),
        Field::TcpFlagsSyn => tcp_flag(tcp_flags::SYN),
        Field::TcpFlagsReset => tcp_flag(tcp_flags::RST),
        Field::TcpFlagsPush => tcp_flag(tcp_flags::PSH),
        Field::TcpFlagsAck => tcp_flag(tcp_flags::ACK),
        Field::TcpFlagsUrg => tcp_flag(tcp_flags::URG),
        Field::TcpFlagsEce => tcp_flag(tcp_flags::ECE),
        Field::TcpFlagsCwr => tcp_flag(tcp_flags::CWR),
        Field::TcpFlagsAe => tcp_flag(tcp_flags::AE),
        Field::IcmpType => Values::one(on(layers.has_icmp(), headers.icmp_type.map(u128::from))),
        Field::IcmpCode => Values::one(on(layers.has_icmp(), headers.icmp_code.map(u128::from))),
        Field::Icmpv6Type => {
            Values::one(on(layers.has_icmpv6(), headers.icmp_type.map(u128::from)))
        }
        Field::Icmpv6Code => {
            Values::one(on(layers.has_icmpv6(), headers.icmp_code.map(u128::from)))
        }
        Field::Tunnel
        | Field::Mpls
        | Field::Pppoes
        | Field::Gre
        | Field::Erspan
        | Field::Vxlan
        | Field::Geneve
        | Field::Gtp
        | Field::Cfp => Values::NONE,
        Field::TunnelType => Values::one(headers.tunnel.map(u128::from)),
        Field::TunnelSrc => Values::one(ipv6_value(headers.tunnel_src)),
        Field::TunnelDst => Values::one(ipv6_value(headers.tunnel_dst)),
        Field::TunnelAddr => Values::two(
            ipv6_value(headers.tunnel_src),
            ipv6_value(headers.tunnel_dst),
        ),
        Field::MplsLabel => Values::one(headers.mpls_label.map(u128::from)),
        Field::GreKey => tunnel_id(headers, tunnel::GRE),
        Field::VxlanVni => tunnel_id(headers, tunnel::VXLAN),
        Field::GeneveVni => tunnel_id(headers, tunnel::GENEVE),
        Field::GtpTeid => tunnel_id(headers, tunnel::GTP),
        Field::CommunityId => Values::one(
            headers
                .community_id_hash(seed)
                .map(|hash| crate::ast::community_value(&hash)),
        ),
    };
    values.mask(left.mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_ranges_finds_values_in_sorted_disjoint_ranges() {
        let ranges = [(10, 20), (30, 30), (40, 50)];
        for (value, expected) in [
            (9, false),
            (10, true),
            (20, true),
            (21, false),
            (30, true),
            (31, false),
            (45, true),
            (51, false),
        ] {
            assert_eq!(in_ranges(&ranges, value), expected, "value {value}");
        }
        assert!(!in_ranges(&[], 1));
    }

    #[test]
    fn quantifiers_are_false_on_absent_fields() {
        assert!(!quantify(Quantifier::Any, &[], |_| true));
        assert!(!quantify(Quantifier::All, &[], |_| true));
        assert!(quantify(Quantifier::All, &[1, 2], |value| value > 0));
        assert!(!quantify(Quantifier::All, &[1, 0], |value| value > 0));
        assert!(quantify(Quantifier::Any, &[1, 0], |value| value > 0));
    }
}
