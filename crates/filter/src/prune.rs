//! Derives from a filter the address and port ranges every matching packet must
//! touch, so that the planner can skip archive segments whose address or port
//! summaries miss all of them.
//!
//! The answer is a conservative superset: `Some(ranges)` promises that every
//! record the filter matches has its source or its destination in one of the
//! ranges; `None` promises nothing. `Some` of no ranges means nothing can match.

use hindsight_model::{Addr16, col};

use super::Filter;
use super::ast::{CmpOp, Expr, Field};
use super::fields::{Column, Read};

/// Where the values of the fields of one kind (addresses, ports) land in the
/// output space: the field's value plus `offset`, up to `max`.
#[derive(Clone, Copy)]
struct Placement {
    offset: u128,
    max: u128,
}

impl Filter {
    /// The filter of packets of one of `connections` (addresses, ports,
    /// protocol; either direction; for ICMP the addresses and protocol): what
    /// every packet of a connection has, tested with integer comparisons, so a
    /// search tries it before a costlier test (a Community ID's hash).
    pub fn between(connections: &[(Addr16, u16, Addr16, u16, u8)]) -> Filter {
        let side = |addr: Addr16| {
            let field = if addr.is_v4() {
                Field::IpAddr
            } else {
                Field::Ipv6Addr
            };
            let value = match addr.to_ip() {
                std::net::IpAddr::V4(addr) => crate::Literal::Ipv4 {
                    addr,
                    prefix_len: 32,
                },
                std::net::IpAddr::V6(addr) => crate::Literal::Ipv6 {
                    addr,
                    prefix_len: 128,
                },
            };
            Expr::eq(field, value)
        };
        let operands = connections
            .iter()
            .map(|&(a, a_port, b, b_port, proto)| {
                let mut all = vec![side(a), side(b)];
                let family = if a.is_v4() {
                    Field::IpProto
                } else {
                    Field::Ipv6Nxt
                };
                all.push(Expr::eq(family, crate::Literal::UInt(u64::from(proto))));
                let port = match proto {
                    6 => Some(Field::TcpPort),
                    17 => Some(Field::UdpPort),
                    132 => Some(Field::SctpPort),
                    _ => None,
                };
                if let Some(port) = port {
                    all.push(Expr::eq(port, crate::Literal::UInt(u64::from(a_port))));
                    all.push(Expr::eq(port, crate::Literal::UInt(u64::from(b_port))));
                }
                Expr::and(all)
            })
            .collect();
        Filter::from_root(Some(Expr::Or(operands)))
    }

    /// The Community IDs (their hashes) one of which every matching packet
    /// must have (`community_id == "1:..."`, alone, in a conjunction, or in a
    /// disjunction of such); `None` if the filter does not say.
    pub fn community_ids(&self) -> Option<Vec<[u8; 20]>> {
        fn ids(expr: &Expr) -> Option<Vec<[u8; 20]>> {
            match expr {
                Expr::Compare(comparison)
                    if comparison.left.field == Field::CommunityId
                        && comparison.op == CmpOp::Eq =>
                {
                    match comparison.value {
                        crate::Literal::CommunityId(hash) => Some(vec![hash]),
                        _ => None,
                    }
                }
                Expr::And(operands) => operands.iter().find_map(ids),
                Expr::Or(operands) => {
                    let mut all = Vec::new();
                    for operand in operands {
                        all.extend(ids(operand)?);
                    }
                    Some(all)
                }
                _ => None,
            }
        }
        self.root().and_then(ids)
    }
}

/// The offset of the IPv4-mapped block `::ffff:0:0/96` in the 16-byte address space.
const IPV4_MAPPED_OFFSET: u128 = 0xffff_u128 << 32;

/// Where a field's values land among the packet's addresses: every
/// occurrence read from the source or destination address column (as an
/// IPv4 address, at the IPv4-mapped block; as it is, over the whole space).
fn address_placement(field: Field) -> Option<Placement> {
    let reads = field.def().reads;
    let on_addresses = |column: Column| [col::SRC_ADDR, col::DST_ADDR].contains(&column.name);
    if reads.is_empty() {
        return None;
    }
    if reads
        .iter()
        .all(|read| matches!(read, Read::Ipv4(column) if on_addresses(*column)))
    {
        return Some(Placement {
            offset: IPV4_MAPPED_OFFSET,
            max: u128::from(u32::MAX),
        });
    }
    reads
        .iter()
        .all(|read| matches!(read, Read::Value(column) if on_addresses(*column)))
        .then_some(Placement {
            offset: 0,
            max: u128::MAX,
        })
}

/// Where a field's values land among the packet's ports: every occurrence
/// read from the source or destination port column.
fn port_placement(field: Field) -> Option<Placement> {
    let reads = field.def().reads;
    let on_ports = |read: &Read| matches!(read, Read::Value(column) if [col::SRC_PORT, col::DST_PORT].contains(&column.name));
    (!reads.is_empty() && reads.iter().all(on_ports)).then_some(Placement {
        offset: 0,
        max: u128::from(u16::MAX),
    })
}

impl Filter {
    /// Returns inclusive address ranges such that every record the filter matches
    /// has `src_addr` or `dst_addr` in one of them, or `None` if the filter does
    /// not constrain addresses. IPv4 ranges are given IPv4-mapped.
    pub fn address_ranges(&self) -> Option<Vec<(Addr16, Addr16)>> {
        let ranges = constraint(self.root()?, address_placement)?;
        Some(
            ranges
                .into_iter()
                .map(|(low, high)| (Addr16(low.to_be_bytes()), Addr16(high.to_be_bytes())))
                .collect(),
        )
    }

    /// Returns inclusive port ranges such that every record the filter matches has
    /// `src_port` or `dst_port` in one of them, or `None` if the filter does not
    /// constrain ports.
    pub fn port_ranges(&self) -> Option<Vec<(u16, u16)>> {
        let ranges = constraint(self.root()?, port_placement)?;
        Some(
            ranges
                .into_iter()
                .map(|(low, high)| {
                    (
                        u16::try_from(low).unwrap_or(u16::MAX),
                        u16::try_from(high).unwrap_or(u16::MAX),
                    )
                })
                .collect(),
        )
    }
}

/// Returns the sorted, merged ranges the expression confines the chosen fields to.
fn constraint(expr: &Expr, placement: fn(Field) -> Option<Placement>) -> Option<Vec<(u128, u128)>> {
    match expr {
        Expr::Exists(field) => {
            let place = placement(*field)?;
            Some(place_ranges(place, &[(0, place.max)]))
        }
        Expr::Compare(comparison) => {
            if comparison.left.mask.is_some() {
                return None;
            }
            let place = placement(comparison.left.field)?;
            let (low, high) = comparison.range;
            let field_ranges: Vec<(u128, u128)> = match comparison.op {
                CmpOp::Eq => vec![(low, high)],
                CmpOp::Ne => return None,
                CmpOp::Lt => low.checked_sub(1).map(|top| (0, top)).into_iter().collect(),
                CmpOp::Le => vec![(0, low)],
                CmpOp::Gt => low
                    .checked_add(1)
                    .filter(|&bottom| bottom <= place.max)
                    .map(|bottom| (bottom, place.max))
                    .into_iter()
                    .collect(),
                CmpOp::Ge => vec![(low, place.max)],
            };
            Some(place_ranges(place, &field_ranges))
        }
        Expr::In(membership) => {
            if membership.left.mask.is_some() {
                return None;
            }
            let place = placement(membership.left.field)?;
            Some(place_ranges(place, &membership.ranges))
        }
        Expr::BitTest(_) | Expr::Offsets(_) | Expr::Bytes(_) | Expr::Text(_) | Expr::Not(_) => None,
        Expr::And(operands) => operands
            .iter()
            .filter_map(|operand| constraint(operand, placement))
            .min_by_key(|ranges| span(ranges)),
        // A packet passing `a ^^ b` passes `a || b`.
        Expr::Or(operands) | Expr::Xor(operands) => {
            let mut union = Vec::new();
            for operand in operands {
                union.extend(constraint(operand, placement)?);
            }
            Some(merge(union))
        }
    }
}

/// Moves field-space ranges into the output space, dropping empty ones.
fn place_ranges(place: Placement, ranges: &[(u128, u128)]) -> Vec<(u128, u128)> {
    merge(
        ranges
            .iter()
            .filter(|(low, high)| low <= high && *low <= place.max)
            .map(|&(low, high)| {
                (
                    low.saturating_add(place.offset),
                    high.min(place.max).saturating_add(place.offset),
                )
            })
            .collect(),
    )
}

/// Sorts ranges and merges the overlapping or adjacent ones.
fn merge(mut ranges: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match merged.last_mut() {
            Some(last) if low <= last.1.saturating_add(1) => last.1 = last.1.max(high),
            _ => merged.push((low, high)),
        }
    }
    merged
}

/// Returns how many values the ranges cover (saturating), to pick the tightest.
fn span(ranges: &[(u128, u128)]) -> u128 {
    ranges.iter().fold(0u128, |total, (low, high)| {
        total.saturating_add(high.saturating_sub(*low).saturating_add(1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(text: &str) -> Addr16 {
        Addr16::from(
            text.parse::<std::net::Ipv4Addr>()
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
        )
    }

    fn ranges(filter: &str) -> Option<Vec<(Addr16, Addr16)>> {
        Filter::parse(filter)
            .unwrap_or_else(|error| panic!("{error}"))
            .address_ranges()
    }

    #[test]
    fn single_address_and_network() {
        assert_eq!(
            ranges("ip.addr == 10.0.0.1"),
            Some(vec![(v4("10.0.0.1"), v4("10.0.0.1"))])
        );
        assert_eq!(
            ranges("ip.src == 10.0.0.0/8"),
            Some(vec![(v4("10.0.0.0"), v4("10.255.255.255"))])
        );
        assert_eq!(
            ranges("ip.dst > 255.255.255.254"),
            Some(vec![(v4("255.255.255.255"), v4("255.255.255.255"))])
        );
        assert_eq!(ranges("ip.dst > 255.255.255.255"), Some(vec![]));
        assert_eq!(ranges("ip.dst < 0.0.0.0"), Some(vec![]));
    }

    #[test]
    fn and_picks_the_tighter_side_or_unions_and_not_gives_up() {
        assert_eq!(
            ranges("ip.addr == 10.0.0.0/8 && ip.addr == 10.1.2.3"),
            Some(vec![(v4("10.1.2.3"), v4("10.1.2.3"))])
        );
        assert_eq!(
            ranges("tcp && ip.addr == 10.1.2.3"),
            Some(vec![(v4("10.1.2.3"), v4("10.1.2.3"))])
        );
        assert_eq!(
            ranges("ip.addr == 10.0.0.2 || ip.addr == 10.0.0.1 || ip.src == 10.0.0.3"),
            Some(vec![(v4("10.0.0.1"), v4("10.0.0.3"))])
        );
        assert_eq!(ranges("ip.addr == 10.0.0.1 || tcp"), None);
        assert_eq!(ranges("!(ip.addr == 10.0.0.1)"), None);
        assert_eq!(ranges("ip.addr != 10.0.0.1"), None);
        assert_eq!(ranges("tcp"), None);
        assert_eq!(ranges(""), None);
    }

    #[test]
    fn ipv6_and_bpf_host() {
        let expected = Addr16::from(
            "2001:db8::1"
                .parse::<std::net::IpAddr>()
                .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
        );
        assert_eq!(
            ranges("ipv6.addr == 2001:db8::1"),
            Some(vec![(expected, expected)])
        );
        assert_eq!(
            ranges("host 10.1.2.3"),
            Some(vec![(v4("10.1.2.3"), v4("10.1.2.3"))])
        );
        assert_eq!(
            ranges("net 10.64"),
            Some(vec![(v4("10.64.0.0"), v4("10.64.255.255"))])
        );
    }

    #[test]
    fn port_ranges_follow_the_same_rules() {
        let ports = |filter: &str| {
            Filter::parse(filter)
                .unwrap_or_else(|error| panic!("{error}"))
                .port_ranges()
        };
        assert_eq!(ports("tcp.port == 80"), Some(vec![(80, 80)]));
        assert_eq!(
            ports("tcp.port in {443, 80, 8000..8004}"),
            Some(vec![(80, 80), (443, 443), (8000, 8004)])
        );
        assert_eq!(
            ports("port 53 or portrange 1-10"),
            Some(vec![(1, 10), (53, 53)])
        );
        assert_eq!(ports("tcp.dstport >= 65000"), Some(vec![(65000, 65535)]));
        assert_eq!(ports("tcp.port != 80"), None);
        assert_eq!(ports("tcp.flags.syn == 1"), None);
    }
}
