//! The columns of the `packets` table a filter reads, so a search decodes only
//! those (and what its output needs) instead of every header column.

use std::collections::BTreeSet;

use hindsight_model::col;

use super::Filter;
use super::ast::{Expr, Field};

/// Columns every evaluation may read: the layer tests (`Layers::of`: version,
/// protocol, decode status), ARP detection (`eth_type`), the addresses, the time.
const BASE: &[&str] = &[
    col::TS,
    col::STATUS,
    col::IP_VERSION,
    col::IP_PROTO,
    col::ETH_TYPE,
    col::SRC_ADDR,
    col::DST_ADDR,
];

/// Returns the columns `field` reads beyond [`BASE`].
fn field_columns(field: Field) -> &'static [&'static str] {
    match field {
        Field::Frame
        | Field::Ip
        | Field::Ipv6
        | Field::Arp
        | Field::Tcp
        | Field::Udp
        | Field::Sctp
        | Field::Icmp
        | Field::Igmp
        | Field::Icmpv6
        | Field::IpSrc
        | Field::IpDst
        | Field::IpAddr
        | Field::IpProto
        | Field::IpVersion
        | Field::Ipv6Src
        | Field::Ipv6Dst
        | Field::Ipv6Addr
        | Field::Ipv6Nxt
        | Field::ArpSrcProtoIpv4
        | Field::ArpDstProtoIpv4 => &[],
        Field::Eth | Field::EthSrc | Field::EthDst | Field::EthAddr | Field::EthType => {
            &[col::ETH_SRC, col::ETH_DST]
        }
        Field::Vlan | Field::VlanId => &[col::VLAN_OUTER, col::VLAN_INNER],
        Field::FrameLen => &[col::WIRE_LEN],
        Field::FrameCapLen => &[col::CAP_LEN],
        Field::FrameInterfaceId => &[col::IFACE],
        Field::IpTtl | Field::Ipv6Hlim => &[col::IP_TTL],
        Field::IpId => &[col::IP_ID],
        Field::IpFlagsMf => &[col::MORE_FRAGMENTS],
        Field::IpFlagsDf => &[col::DONT_FRAGMENT],
        Field::IpFragOffset => &[col::FRAG_OFFSET],
        Field::TcpPort
        | Field::TcpSrcPort
        | Field::TcpDstPort
        | Field::UdpPort
        | Field::UdpSrcPort
        | Field::UdpDstPort
        | Field::SctpPort
        | Field::SctpSrcPort
        | Field::SctpDstPort => &[col::SRC_PORT, col::DST_PORT],
        Field::TcpFlags
        | Field::TcpFlagsFin
        | Field::TcpFlagsSyn
        | Field::TcpFlagsReset
        | Field::TcpFlagsPush
        | Field::TcpFlagsAck
        | Field::TcpFlagsUrg
        | Field::TcpFlagsEce
        | Field::TcpFlagsCwr
        | Field::TcpFlagsAe => &[col::TCP_FLAGS],
        Field::IcmpType | Field::IcmpCode | Field::Icmpv6Type | Field::Icmpv6Code => {
            &[col::ICMP_TYPE, col::ICMP_CODE]
        }
        Field::Tunnel
        | Field::TunnelType
        | Field::Mpls
        | Field::Pppoes
        | Field::Gre
        | Field::Erspan
        | Field::Vxlan
        | Field::Geneve
        | Field::Gtp
        | Field::Cfp => &[col::TUNNEL],
        Field::TunnelSrc | Field::TunnelDst | Field::TunnelAddr => {
            &[col::TUNNEL_SRC, col::TUNNEL_DST]
        }
        Field::MplsLabel => &[col::MPLS_LABEL],
        Field::CommunityId => &[col::SRC_PORT, col::DST_PORT, col::ICMP_TYPE, col::ICMP_CODE],
        Field::GreKey | Field::VxlanVni | Field::GeneveVni | Field::GtpTeid => &[col::TUNNEL_ID],
    }
}

fn collect(expr: &Expr, into: &mut BTreeSet<&'static str>) {
    match expr {
        Expr::Exists(field) => into.extend(field_columns(*field)),
        Expr::BitTest(field) => into.extend(field_columns(field.field)),
        Expr::Compare(comparison) => into.extend(field_columns(comparison.left.field)),
        Expr::In(membership) => into.extend(field_columns(membership.left.field)),
        Expr::Offsets(_) | Expr::Bytes(_) => {
            into.extend(col::FRAME);
            into.extend([col::LINK_TYPE, col::CAP_LEN, col::WIRE_LEN]);
        }
        // A connection's field: a packet query reads the packets of the
        // connections found, by their addresses and ports (in BASE).
        Expr::Text(_) => {}
        Expr::Not(inner) => collect(inner, into),
        Expr::And(operands) | Expr::Or(operands) | Expr::Xor(operands) => {
            for operand in operands {
                collect(operand, into);
            }
        }
    }
}

impl Filter {
    /// Returns the `packets` columns evaluating this filter may read.
    pub fn columns(&self) -> BTreeSet<&'static str> {
        let mut columns: BTreeSet<&'static str> = BASE.iter().copied().collect();
        if let Some(root) = self.root() {
            collect(root, &mut columns);
        }
        columns
    }
}
