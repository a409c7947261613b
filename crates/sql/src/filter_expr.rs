//! A packet filter (`hindsight_filter`) as a DataFusion expression over the
//! `packets` table's columns, so that an aggregation over a filter (the API's
//! histogram) runs on the columnar path SQL takes: only the columns the filter
//! names are decoded, and it is evaluated a batch at a time.
//!
//! The expression means what the filter's own evaluator means (`eval.rs` of
//! the filter crate): a field is present only where its layer is (a port only
//! in a packet whose transport it is, an IPv4 field only in IPv4, no transport
//! in a non-first fragment), a test of an absent field is false under either
//! quantifier, and every leaf is a non-null boolean, so negation is plain.
//! Filters reading what the columns do not hold (packet bytes, payload,
//! application names, Community IDs, tcpdump's `len`) have no expression; they
//! take the row path.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr as DfExpr, Operator, binary_expr, cast, col, lit};
use hindsight_filter::Filter;
use hindsight_filter::ast::{CmpOp, Expr, Field, FieldRef, Quantifier};
use hindsight_model::{DecodeStatus, col as column, ethertype, ip_proto, tcp_flags, tunnel};

/// The most ranges of a set (`port in {...}`) written out as comparisons;
/// a larger set takes the row path.
const MAX_SET_RANGES: usize = 256;

/// A filter translated for the columnar path.
#[derive(Clone, Debug)]
pub struct ColumnarFilter {
    expr: DfExpr,
    match_all: bool,
}

impl ColumnarFilter {
    /// The expression of `filter`, or `None` if it reads what the header
    /// columns do not hold. The addresses every match lies in
    /// ([`Filter::address_ranges`]) are added as a condition the table's
    /// pruning by address postings and statistics understands.
    pub fn of(filter: &Filter) -> Option<Self> {
        let Some(root) = filter.root() else {
            return Some(Self {
                expr: lit(true),
                match_all: true,
            });
        };
        let mut expr = translate(root)?;
        if let Some(ranges) = filter.address_ranges() {
            let either = ranges
                .iter()
                .flat_map(|(low, high)| {
                    [column::SRC_ADDR, column::DST_ADDR].map(|name| {
                        col(name).between(lit(addr_scalar(low.0)), lit(addr_scalar(high.0)))
                    })
                })
                .reduce(DfExpr::or);
            if let Some(either) = either {
                expr = either.and(expr);
            }
        }
        Some(Self {
            expr,
            match_all: false,
        })
    }

    /// Whether the filter matches every packet.
    pub fn is_match_all(&self) -> bool {
        self.match_all
    }

    /// The expression.
    pub fn expr(&self) -> &DfExpr {
        &self.expr
    }
}

fn addr_scalar(bytes: [u8; 16]) -> ScalarValue {
    ScalarValue::FixedSizeBinary(16, Some(bytes.to_vec()))
}

fn translate(expr: &Expr) -> Option<DfExpr> {
    Some(match expr {
        Expr::Exists(field) => exists(*field)?,
        Expr::BitTest(left) => occurrences(left)?
            .into_iter()
            .map(|occ| {
                let zero = occ.scalar(0)?;
                Some(occ.present.and(occ.value.not_eq(lit(zero))))
            })
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .reduce(DfExpr::or)
            .unwrap_or(lit(false)),
        Expr::Compare(comparison) => {
            let (low, high) = comparison.value.value_range();
            let op = comparison.op;
            quantify(&comparison.left, comparison.quantifier, &|occ| {
                occ.compare(op, low, high)
            })?
        }
        Expr::In(membership) => {
            let ranges = membership.ranges();
            if ranges.len() > MAX_SET_RANGES {
                return None;
            }
            quantify(&membership.left, membership.quantifier, &|occ| {
                occ.within(ranges)
            })?
        }
        Expr::Offsets(_) | Expr::Bytes(_) | Expr::Text(_) => return None,
        Expr::Not(inner) => !translate(inner)?,
        Expr::And(operands) => combine(operands, DfExpr::and)?,
        Expr::Or(operands) => combine(operands, DfExpr::or)?,
        Expr::Xor(operands) => combine(operands, |a, b| binary_expr(a, Operator::NotEq, b))?,
    })
}

fn combine(operands: &[Expr], join: impl Fn(DfExpr, DfExpr) -> DfExpr) -> Option<DfExpr> {
    operands
        .iter()
        .map(translate)
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .reduce(join)
}

/// A test over a field's occurrences: some passes (`Any`), or there is one and
/// all present pass (`All`).
fn quantify(
    left: &FieldRef,
    quantifier: Quantifier,
    test: &dyn Fn(&Occurrence) -> Option<DfExpr>,
) -> Option<DfExpr> {
    let occurrences = occurrences(left)?;
    let tests = occurrences
        .iter()
        .map(|occ| Some((occ.present.clone(), test(occ)?)))
        .collect::<Option<Vec<_>>>()?;
    Some(match quantifier {
        Quantifier::Any => tests
            .into_iter()
            .map(|(present, test)| present.and(test))
            .reduce(DfExpr::or)
            .unwrap_or(lit(false)),
        Quantifier::All => {
            let some = tests
                .iter()
                .map(|(present, _)| present.clone())
                .reduce(DfExpr::or)
                .unwrap_or(lit(false));
            tests
                .into_iter()
                .map(|(present, test)| (!present).or(test))
                .fold(some, DfExpr::and)
        }
    })
}

/// How a field's values are held, and so how a literal of the filter's `u128`
/// value space is written against them.
#[derive(Clone, Copy, Debug)]
enum Kind {
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    /// An IPv4 address in its IPv4-mapped 16-byte form, compared by its low 32 bits.
    Ipv4,
    /// A 16-byte address, compared as a 128-bit integer.
    Addr,
    /// A 6-byte MAC, compared as a 48-bit integer.
    Mac,
}

impl Kind {
    fn max(self) -> u128 {
        match self {
            Kind::UInt8 => u128::from(u8::MAX),
            Kind::UInt16 => u128::from(u16::MAX),
            Kind::UInt32 | Kind::Ipv4 => u128::from(u32::MAX),
            Kind::UInt64 => u128::from(u64::MAX),
            Kind::Addr => u128::MAX,
            Kind::Mac => (1 << 48) - 1,
        }
    }

    /// `value` as the column's type; `value` is at most [`Self::max`].
    fn scalar(self, value: u128) -> ScalarValue {
        match self {
            Kind::UInt8 => ScalarValue::UInt8(Some(value as u8)),
            Kind::UInt16 => ScalarValue::UInt16(Some(value as u16)),
            Kind::UInt32 => ScalarValue::UInt32(Some(value as u32)),
            Kind::UInt64 => ScalarValue::UInt64(Some(value as u64)),
            Kind::Ipv4 => {
                let mut bytes = [0u8; 16];
                bytes[10] = 0xff;
                bytes[11] = 0xff;
                bytes[12..].copy_from_slice(&(value as u32).to_be_bytes());
                addr_scalar(bytes)
            }
            Kind::Addr => addr_scalar(value.to_be_bytes()),
            Kind::Mac => ScalarValue::FixedSizeBinary(6, Some(value.to_be_bytes()[10..].to_vec())),
        }
    }
}

/// One occurrence of a field in a packet: its value, and whether the packet
/// has it (a non-null boolean that implies the value is not null).
struct Occurrence {
    value: DfExpr,
    present: DfExpr,
    kind: Kind,
}

impl Occurrence {
    fn scalar(&self, value: u128) -> Option<ScalarValue> {
        (value <= self.kind.max()).then(|| self.kind.scalar(value))
    }

    /// The value against a literal's range `low..=high`, as the evaluator
    /// compares (ordering operators against `low`); literals beyond the
    /// column's type decide the test alone.
    fn compare(&self, op: CmpOp, low: u128, high: u128) -> Option<DfExpr> {
        let max = self.kind.max();
        let value = || self.value.clone();
        let at = |v: u128| self.scalar(v).map(lit);
        Some(match op {
            CmpOp::Eq if low > max || low > high => lit(false),
            CmpOp::Eq if low == high => value().eq(at(low)?),
            CmpOp::Eq => value().between(at(low)?, at(high.min(max))?),
            CmpOp::Ne if low > max || low > high => lit(true),
            CmpOp::Ne if high >= max => value().lt(at(low)?),
            CmpOp::Ne => value().lt(at(low)?).or(value().gt(at(high)?)),
            CmpOp::Lt if low > max => lit(true),
            CmpOp::Lt => value().lt(at(low)?),
            CmpOp::Le if low >= max => lit(true),
            CmpOp::Le => value().lt_eq(at(low)?),
            CmpOp::Gt if low >= max => lit(false),
            CmpOp::Gt => value().gt(at(low)?),
            CmpOp::Ge if low > max => lit(false),
            CmpOp::Ge => value().gt_eq(at(low)?),
        })
    }

    /// The value in one of the sorted, disjoint `ranges`.
    fn within(&self, ranges: &[(u128, u128)]) -> Option<DfExpr> {
        let max = self.kind.max();
        let mut singles = Vec::new();
        let mut spans = Vec::new();
        for &(low, high) in ranges.iter().filter(|(low, _)| *low <= max) {
            let high = high.min(max);
            if low == high {
                singles.push(lit(self.scalar(low)?));
            } else {
                spans.push(
                    self.value
                        .clone()
                        .between(lit(self.scalar(low)?), lit(self.scalar(high)?)),
                );
            }
        }
        if !singles.is_empty() {
            spans.push(self.value.clone().in_list(singles, false));
        }
        Some(spans.into_iter().reduce(DfExpr::or).unwrap_or(lit(false)))
    }
}

fn u8_is(name: &str, value: u8) -> DfExpr {
    known(name, col(name).eq(lit(value)))
}

/// `test` of column `name`, false (not null) where the column is null: SQL's
/// `false AND NULL` is false.
fn known(name: &str, test: DfExpr) -> DfExpr {
    col(name).is_not_null().and(test)
}

fn ipv4() -> DfExpr {
    u8_is(column::IP_VERSION, 4)
}

fn ipv6() -> DfExpr {
    u8_is(column::IP_VERSION, 6)
}

/// The packet's transport is `proto`: IPv4 or IPv6, not a non-first fragment.
fn transport(proto: u8) -> DfExpr {
    ipv4()
        .or(ipv6())
        .and(u8_is(column::IP_PROTO, proto))
        .and(col(column::STATUS).not_eq(lit(DecodeStatus::Fragment as u8)))
}

fn has_eth() -> DfExpr {
    col(column::ETH_SRC)
        .is_not_null()
        .or(col(column::ETH_DST).is_not_null())
}

fn is_arp() -> DfExpr {
    known(
        column::ETH_TYPE,
        col(column::ETH_TYPE).eq(lit(ethertype::ARP)),
    )
}

/// The address column holds an IPv4-mapped address.
fn is_v4(name: &str) -> DfExpr {
    known(
        name,
        col(name).between(
            lit(Kind::Ipv4.scalar(0)),
            lit(Kind::Ipv4.scalar(u128::from(u32::MAX))),
        ),
    )
}

fn has_tunnel(bits: u16) -> DfExpr {
    known(
        column::TUNNEL,
        binary_expr(col(column::TUNNEL), Operator::BitwiseAnd, lit(bits)).not_eq(lit(0u16)),
    )
}

/// Whether the packet has the field or protocol.
fn exists(field: Field) -> Option<DfExpr> {
    Some(match field {
        Field::Frame => lit(true),
        Field::Eth => has_eth(),
        Field::Vlan => col(column::VLAN_OUTER).is_not_null(),
        Field::Ip => ipv4(),
        Field::Ipv6 => ipv6(),
        Field::Arp => is_arp(),
        Field::Tcp => transport(ip_proto::TCP),
        Field::Udp => transport(ip_proto::UDP),
        Field::Sctp => transport(ip_proto::SCTP),
        Field::Icmp => ipv4().and(transport(ip_proto::ICMP)),
        Field::Igmp => ipv4().and(transport(ip_proto::IGMP)),
        Field::Icmpv6 => ipv6().and(transport(ip_proto::ICMPV6)),
        Field::Tunnel => has_tunnel(u16::MAX),
        Field::Mpls => has_tunnel(tunnel::MPLS),
        Field::Pppoes => has_tunnel(tunnel::PPPOE),
        Field::Gre => has_tunnel(tunnel::GRE),
        Field::Erspan => has_tunnel(tunnel::ERSPAN),
        Field::Vxlan => has_tunnel(tunnel::VXLAN),
        Field::Geneve => has_tunnel(tunnel::GENEVE),
        Field::Gtp => has_tunnel(tunnel::GTP),
        Field::Cfp => has_tunnel(tunnel::FABRICPATH),
        other => occurrences(&FieldRef {
            field: other,
            mask: None,
        })?
        .into_iter()
        .map(|occ| occ.present)
        .reduce(DfExpr::or)
        .unwrap_or(lit(false)),
    })
}

/// The occurrences of a field, masked if the test masks them; `None` for a
/// field the columns do not hold (a Community ID) or a mask on an address.
fn occurrences(left: &FieldRef) -> Option<Vec<Occurrence>> {
    let plain = |name: &str, kind: Kind, present: DfExpr| Occurrence {
        value: col(name),
        present: present.and(col(name).is_not_null()),
        kind,
    };
    let always = |name: &str, kind: Kind| plain(name, kind, lit(true));
    let flag = |name: &str, present: DfExpr| Occurrence {
        value: cast(col(name), DataType::UInt8),
        present: present.and(col(name).is_not_null()),
        kind: Kind::UInt8,
    };
    let tcp_flag = |bit: u16| Occurrence {
        value: cast(
            binary_expr(col(column::TCP_FLAGS), Operator::BitwiseAnd, lit(bit)).not_eq(lit(0u16)),
            DataType::UInt8,
        ),
        present: transport(ip_proto::TCP).and(col(column::TCP_FLAGS).is_not_null()),
        kind: Kind::UInt8,
    };
    let v4_addr = |name: &str, present: DfExpr| Occurrence {
        value: col(name),
        present: present.and(is_v4(name)),
        kind: Kind::Ipv4,
    };
    let ports = |proto: u8| {
        vec![
            plain(column::SRC_PORT, Kind::UInt16, transport(proto)),
            plain(column::DST_PORT, Kind::UInt16, transport(proto)),
        ]
    };
    let tunnel_id = |bit: u16| Occurrence {
        value: binary_expr(
            col(column::TUNNEL_ID),
            Operator::BitwiseAnd,
            lit(u64::from(u32::MAX)),
        ),
        present: known(
            column::TUNNEL_ID,
            binary_expr(
                binary_expr(
                    col(column::TUNNEL_ID),
                    Operator::BitwiseShiftRight,
                    lit(32u64),
                ),
                Operator::BitwiseAnd,
                lit(u64::from(bit)),
            )
            .not_eq(lit(0u64)),
        ),
        kind: Kind::UInt64,
    };
    let mut values = match left.field {
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
        | Field::Icmpv6
        | Field::Tunnel
        | Field::Mpls
        | Field::Pppoes
        | Field::Gre
        | Field::Erspan
        | Field::Vxlan
        | Field::Geneve
        | Field::Gtp
        | Field::Cfp => Vec::new(),
        Field::FrameLen => vec![always(column::WIRE_LEN, Kind::UInt32)],
        Field::FrameCapLen => vec![always(column::CAP_LEN, Kind::UInt32)],
        Field::FrameInterfaceId => vec![always(column::IFACE, Kind::UInt32)],
        Field::EthSrc => vec![always(column::ETH_SRC, Kind::Mac)],
        Field::EthDst => vec![always(column::ETH_DST, Kind::Mac)],
        Field::EthAddr => vec![
            always(column::ETH_DST, Kind::Mac),
            always(column::ETH_SRC, Kind::Mac),
        ],
        Field::EthType => vec![plain(column::ETH_TYPE, Kind::UInt16, has_eth())],
        Field::VlanId => vec![
            always(column::VLAN_OUTER, Kind::UInt16),
            always(column::VLAN_INNER, Kind::UInt16),
        ],
        Field::IpSrc => vec![v4_addr(column::SRC_ADDR, ipv4())],
        Field::IpDst => vec![v4_addr(column::DST_ADDR, ipv4())],
        Field::IpAddr => vec![
            v4_addr(column::SRC_ADDR, ipv4()),
            v4_addr(column::DST_ADDR, ipv4()),
        ],
        Field::IpProto => vec![plain(column::IP_PROTO, Kind::UInt8, ipv4())],
        Field::IpTtl => vec![plain(column::IP_TTL, Kind::UInt8, ipv4())],
        Field::IpId => vec![plain(column::IP_ID, Kind::UInt16, ipv4())],
        Field::IpFlagsMf => vec![flag(column::MORE_FRAGMENTS, ipv4())],
        Field::IpFlagsDf => vec![flag(column::DONT_FRAGMENT, ipv4())],
        Field::IpFragOffset => vec![plain(column::FRAG_OFFSET, Kind::UInt16, ipv4())],
        Field::IpVersion => vec![plain(column::IP_VERSION, Kind::UInt8, ipv4().or(ipv6()))],
        Field::Ipv6Src => vec![plain(column::SRC_ADDR, Kind::Addr, ipv6())],
        Field::Ipv6Dst => vec![plain(column::DST_ADDR, Kind::Addr, ipv6())],
        Field::Ipv6Addr => vec![
            plain(column::SRC_ADDR, Kind::Addr, ipv6()),
            plain(column::DST_ADDR, Kind::Addr, ipv6()),
        ],
        Field::Ipv6Hlim => vec![plain(column::IP_TTL, Kind::UInt8, ipv6())],
        Field::Ipv6Nxt => vec![plain(column::IP_PROTO, Kind::UInt8, ipv6())],
        Field::ArpSrcProtoIpv4 => vec![v4_addr(column::SRC_ADDR, is_arp())],
        Field::ArpDstProtoIpv4 => vec![v4_addr(column::DST_ADDR, is_arp())],
        Field::TcpPort => ports(ip_proto::TCP),
        Field::TcpSrcPort => vec![plain(
            column::SRC_PORT,
            Kind::UInt16,
            transport(ip_proto::TCP),
        )],
        Field::TcpDstPort => vec![plain(
            column::DST_PORT,
            Kind::UInt16,
            transport(ip_proto::TCP),
        )],
        Field::UdpPort => ports(ip_proto::UDP),
        Field::UdpSrcPort => vec![plain(
            column::SRC_PORT,
            Kind::UInt16,
            transport(ip_proto::UDP),
        )],
        Field::UdpDstPort => vec![plain(
            column::DST_PORT,
            Kind::UInt16,
            transport(ip_proto::UDP),
        )],
        Field::SctpPort => ports(ip_proto::SCTP),
        Field::SctpSrcPort => vec![plain(
            column::SRC_PORT,
            Kind::UInt16,
            transport(ip_proto::SCTP),
        )],
        Field::SctpDstPort => vec![plain(
            column::DST_PORT,
            Kind::UInt16,
            transport(ip_proto::SCTP),
        )],
        Field::TcpFlags => vec![plain(
            column::TCP_FLAGS,
            Kind::UInt16,
            transport(ip_proto::TCP),
        )],
        Field::TcpFlagsFin => vec![tcp_flag(tcp_flags::FIN)],
        Field::TcpFlagsSyn => vec![tcp_flag(tcp_flags::SYN)],
        Field::TcpFlagsReset => vec![tcp_flag(tcp_flags::RST)],
        Field::TcpFlagsPush => vec![tcp_flag(tcp_flags::PSH)],
        Field::TcpFlagsAck => vec![tcp_flag(tcp_flags::ACK)],
        Field::TcpFlagsUrg => vec![tcp_flag(tcp_flags::URG)],
        Field::TcpFlagsEce => vec![tcp_flag(tcp_flags::ECE)],
        Field::TcpFlagsCwr => vec![tcp_flag(tcp_flags::CWR)],
        Field::TcpFlagsAe => vec![tcp_flag(tcp_flags::AE)],
        Field::IcmpType => vec![plain(
            column::ICMP_TYPE,
            Kind::UInt8,
            ipv4().and(transport(ip_proto::ICMP)),
        )],
        Field::IcmpCode => vec![plain(
            column::ICMP_CODE,
            Kind::UInt8,
            ipv4().and(transport(ip_proto::ICMP)),
        )],
        Field::Icmpv6Type => vec![plain(
            column::ICMP_TYPE,
            Kind::UInt8,
            ipv6().and(transport(ip_proto::ICMPV6)),
        )],
        Field::Icmpv6Code => vec![plain(
            column::ICMP_CODE,
            Kind::UInt8,
            ipv6().and(transport(ip_proto::ICMPV6)),
        )],
        Field::TunnelType => vec![always(column::TUNNEL, Kind::UInt16)],
        Field::TunnelSrc => vec![always(column::TUNNEL_SRC, Kind::Addr)],
        Field::TunnelDst => vec![always(column::TUNNEL_DST, Kind::Addr)],
        Field::TunnelAddr => vec![
            always(column::TUNNEL_SRC, Kind::Addr),
            always(column::TUNNEL_DST, Kind::Addr),
        ],
        Field::MplsLabel => vec![always(column::MPLS_LABEL, Kind::UInt32)],
        Field::GreKey => vec![tunnel_id(tunnel::GRE)],
        Field::VxlanVni => vec![tunnel_id(tunnel::VXLAN)],
        Field::GeneveVni => vec![tunnel_id(tunnel::GENEVE)],
        Field::GtpTeid => vec![tunnel_id(tunnel::GTP)],
        Field::CommunityId => return None,
    };
    if let Some(mask) = left.mask {
        for occ in &mut values {
            let mask = match occ.kind {
                Kind::UInt8 => ScalarValue::UInt8(Some(mask as u8)),
                Kind::UInt16 => ScalarValue::UInt16(Some(mask as u16)),
                Kind::UInt32 => ScalarValue::UInt32(Some(mask as u32)),
                Kind::UInt64 => ScalarValue::UInt64(Some(mask)),
                Kind::Ipv4 | Kind::Addr | Kind::Mac => return None,
            };
            occ.value = binary_expr(occ.value.clone(), Operator::BitwiseAnd, lit(mask));
        }
    }
    Some(values)
}
