//! The role of the decode crate is to extract the header fields hindsight keeps
//! from a captured frame: a pure, allocation-free function of the link type and the
//! captured bytes, run once per packet at line rate and fuzzed.
//!
//! Layers: Ethernet (with up to two 802.1Q/802.1ad tags recorded, more skipped),
//! Linux SLL and SLL2, raw IP, BSD null/loopback (either byte order) and OpenBSD
//! loop; ARP (IPv4 sender/target addresses); IPv4 (options, fragments) and IPv6
//! (hop-by-hop, routing, fragment, destination options and AH extension headers);
//! TCP, UDP and SCTP ports, TCP flags, ICMP and ICMPv6 type and code.
//!
//! Semantics, pinned by the tests:
//! - Every field the captured bytes allow is filled, layer by layer. A header is
//!   decoded only if its fixed part up to the field is captured: Ethernet needs 14
//!   bytes, a VLAN tag 4, IPv4 20, IPv6 40, TCP/UDP/SCTP ports 4, TCP flags 14,
//!   ICMP type and code 2. Bytes that end inside a header give `Truncated`.
//! - IPv4 payload is bounded by the total length when it is valid (Ethernet padding
//!   is not transport data); a total length of 0 (TSO) or below the header length
//!   falls back to the captured bytes.
//! - A fragment with a non-zero offset is `Fragment`: addresses and protocol are
//!   known, the transport header is not there.
//! - Tunnels are not followed: `ip_proto` is 4, 41 or 47 and the outer header is
//!   recorded. ESP (50) and "no next header" (59) end IPv6 header walking.
//! - ICMP errors are recorded by type and code; the quoted inner header is not decoded.

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]

use hindsight_model::{
    Addr16, DecodeStatus, Frame, LinkType, PacketHeaders, PacketRecord, ethertype, ip_proto,
};

/// BSD loopback address family values of IPv4 (AF_INET on every BSD and Linux).
const AF_INET: u32 = 2;
/// BSD loopback address family values of IPv6: NetBSD/OpenBSD 24, FreeBSD 28, Darwin 30.
const AF_INET6: [u32; 3] = [24, 28, 30];
/// Smallest ethertype value; below it the field is an 802.3 length (IEEE 802.3 §3.2.6).
const MIN_ETHERTYPE: u16 = 0x0600;
/// ARP hardware-independent part: htype 2, ptype 2, hlen 1, plen 1, oper 2 (RFC 826).
const ARP_FIXED_BYTES: usize = 8;
/// IPv6 extension headers walked to find the upper-layer protocol (RFC 8200 §4).
const IPV6_HOP_BY_HOP: u8 = 0;
const IPV6_ROUTING: u8 = 43;
const IPV6_FRAGMENT: u8 = 44;
const IPV6_DEST_OPTIONS: u8 = 60;
const IPV6_AH: u8 = 51;
/// Extension headers walked at most, against crafted endless chains.
const MAX_IPV6_EXTENSIONS: usize = 16;

#[inline]
fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let end = at.checked_add(2)?;
    let b: [u8; 2] = bytes.get(at..end)?.try_into().ok()?;
    Some(u16::from_be_bytes(b))
}

#[inline]
fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    let b: [u8; 4] = bytes.get(at..end)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

#[inline]
fn array<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The record of a captured frame, its headers decoded into it (not copied on
/// the way): what ingest stores and a watch reads.
pub fn record(frame: &Frame<'_>) -> PacketRecord {
    PacketRecord {
        ts_nanos: frame.ts_nanos,
        wire_len: frame.wire_len,
        cap_len: u32::try_from(frame.data.len()).unwrap_or(u32::MAX),
        link_type: frame.link_type,
        iface: frame.iface,
        headers: decode(frame.link_type, frame.data),
    }
}

/// Decodes the headers of one frame of link type `link_type`.
pub fn decode(link_type: LinkType, data: &[u8]) -> PacketHeaders {
    let mut headers = PacketHeaders::default();
    match link_type.0 {
        1 => ethernet(data, &mut headers),
        // DLT_RAW is 12 on some BSDs and 14 on OpenBSD; LINKTYPE_RAW is 101.
        12 | 14 | 101 => raw_ip(data, &mut headers),
        228 => network(ethertype::IPV4, data, &mut headers),
        229 => network(ethertype::IPV6, data, &mut headers),
        0 => loopback(data, false, &mut headers),
        108 => loopback(data, true, &mut headers),
        113 => sll(data, &mut headers),
        226 => ipnet(data, &mut headers),
        276 => sll2(data, &mut headers),
        _ => headers.status = DecodeStatus::UnsupportedLinkType,
    }
    headers
}

fn ethernet(data: &[u8], h: &mut PacketHeaders) {
    let (Some(dst), Some(src), Some(mut kind)) =
        (array::<6>(data, 0), array::<6>(data, 6), be16(data, 12))
    else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    h.dst_mac = Some(dst);
    h.src_mac = Some(src);
    let mut at = 14usize;
    let mut tags = 0usize;
    while matches!(
        kind,
        ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_OLD
    ) {
        let (Some(tci), Some(inner)) = (be16(data, at), be16(data, at.saturating_add(2))) else {
            h.status = DecodeStatus::Truncated;
            return;
        };
        let vid = tci & 0x0fff;
        match tags {
            0 => h.vlan_outer = Some(vid),
            1 => h.vlan_inner = Some(vid),
            _ => {}
        }
        tags = tags.saturating_add(1);
        kind = inner;
        at = at.saturating_add(4);
    }
    if kind < MIN_ETHERTYPE {
        // An 802.3 length field: an LLC frame (STP, CDP...), not IP.
        h.status = DecodeStatus::NonIp;
        return;
    }
    network(kind, data.get(at..).unwrap_or_default(), h);
}

fn sll(data: &[u8], h: &mut PacketHeaders) {
    // packet type 2, ARPHRD 2, address length 2, address 8, protocol 2.
    let (Some(addr_len), Some(kind)) = (be16(data, 4), be16(data, 14)) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    if addr_len == 6 {
        h.src_mac = array::<6>(data, 6);
    }
    network(kind, data.get(16..).unwrap_or_default(), h);
}

fn sll2(data: &[u8], h: &mut PacketHeaders) {
    // protocol 2, reserved 2, ifindex 4, ARPHRD 2, packet type 1, address length 1, address 8.
    let (Some(kind), Some(&addr_len)) = (be16(data, 0), data.get(11)) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    if data.len() < 20 {
        h.status = DecodeStatus::Truncated;
        return;
    }
    if addr_len == 6 {
        h.src_mac = array::<6>(data, 12);
    }
    network(kind, data.get(20..).unwrap_or_default(), h);
}

fn raw_ip(data: &[u8], h: &mut PacketHeaders) {
    match data.first().map(|b| b >> 4) {
        Some(4) => network(ethertype::IPV4, data, h),
        Some(6) => network(ethertype::IPV6, data, h),
        Some(_) => h.status = DecodeStatus::Malformed,
        None => h.status = DecodeStatus::Truncated,
    }
}

fn ipnet(data: &[u8], h: &mut PacketHeaders) {
    // version 1, family 1 (IPH_AF_INET 2, IPH_AF_INET6 26), htype 2, pktlen 4,
    // ifindex 4, grifindex 4, zsrc 4, zdst 4.
    const IPNET_HEADER: usize = 24;
    let (Some(&family), Some(payload)) = (data.get(1), data.get(IPNET_HEADER..)) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    match family {
        2 => network(ethertype::IPV4, payload, h),
        26 => network(ethertype::IPV6, payload, h),
        _ => h.status = DecodeStatus::NonIp,
    }
}

fn loopback(data: &[u8], network_order: bool, h: &mut PacketHeaders) {
    let Some(raw) = array::<4>(data, 0) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    // DLT_NULL stores the family in the writer's byte order: accept either.
    let family = if network_order {
        u32::from_be_bytes(raw)
    } else {
        let le = u32::from_le_bytes(raw);
        if le > 0xffff {
            u32::from_be_bytes(raw)
        } else {
            le
        }
    };
    let payload = data.get(4..).unwrap_or_default();
    if family == AF_INET {
        network(ethertype::IPV4, payload, h);
    } else if AF_INET6.contains(&family) {
        network(ethertype::IPV6, payload, h);
    } else {
        h.status = DecodeStatus::NonIp;
    }
}

fn network(kind: u16, data: &[u8], h: &mut PacketHeaders) {
    h.eth_type = Some(kind);
    match kind {
        ethertype::IPV4 => ipv4(data, h),
        ethertype::IPV6 => ipv6(data, h),
        ethertype::ARP => arp(data, h),
        _ => h.status = DecodeStatus::NonIp,
    }
}

fn arp(data: &[u8], h: &mut PacketHeaders) {
    h.status = DecodeStatus::NonIp;
    let (Some(ptype), Some(&hlen), Some(&plen)) = (be16(data, 2), data.get(4), data.get(5)) else {
        return;
    };
    if ptype != ethertype::IPV4 || plen != 4 {
        return;
    }
    let hlen = usize::from(hlen);
    let sender = ARP_FIXED_BYTES.saturating_add(hlen);
    let target = sender.saturating_add(4).saturating_add(hlen);
    h.src_addr = array::<4>(data, sender).map(Addr16::from_v4_bytes);
    h.dst_addr = array::<4>(data, target).map(Addr16::from_v4_bytes);
}

fn ipv4(data: &[u8], h: &mut PacketHeaders) {
    let Some(&version_ihl) = data.first() else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    if version_ihl >> 4 != 4 {
        h.status = DecodeStatus::Malformed;
        return;
    }
    let header_len = usize::from(version_ihl & 0x0f).saturating_mul(4);
    let (
        Some(total_len),
        Some(id),
        Some(flags_offset),
        Some(&ttl),
        Some(&proto),
        Some(src),
        Some(dst),
    ) = (
        be16(data, 2),
        be16(data, 4),
        be16(data, 6),
        data.get(8),
        data.get(9),
        array::<4>(data, 12),
        array::<4>(data, 16),
    )
    else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    h.ip_version = Some(4);
    h.ip_id = Some(id);
    h.dont_fragment = Some(flags_offset & 0x4000 != 0);
    h.more_fragments = Some(flags_offset & 0x2000 != 0);
    h.frag_offset = Some(flags_offset & 0x1fff);
    h.ip_ttl = Some(ttl);
    h.ip_proto = Some(proto);
    h.src_addr = Some(Addr16::from_v4_bytes(src));
    h.dst_addr = Some(Addr16::from_v4_bytes(dst));
    if header_len < 20 {
        h.status = DecodeStatus::Malformed;
        return;
    }
    let total_len = usize::from(total_len);
    if total_len >= header_len {
        h.ip_len = u32::try_from(total_len).ok();
    }
    let end = if total_len >= header_len {
        total_len.min(data.len())
    } else {
        data.len()
    };
    if flags_offset & 0x1fff != 0 {
        h.status = DecodeStatus::Fragment;
        return;
    }
    match data.get(header_len..end) {
        Some(payload) => transport(proto, payload, 4, h),
        None => h.status = DecodeStatus::Truncated,
    }
}

fn ipv6(data: &[u8], h: &mut PacketHeaders) {
    let Some(&first) = data.first() else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    if first >> 4 != 6 {
        h.status = DecodeStatus::Malformed;
        return;
    }
    let (Some(payload_len), Some(&next), Some(&hop_limit), Some(src), Some(dst)) = (
        be16(data, 4),
        data.get(6),
        data.get(7),
        array::<16>(data, 8),
        array::<16>(data, 24),
    ) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    h.ip_version = Some(6);
    h.ip_ttl = Some(hop_limit);
    h.src_addr = Some(Addr16::from_v6_bytes(src));
    h.dst_addr = Some(Addr16::from_v6_bytes(dst));
    let payload_len = usize::from(payload_len);
    if payload_len > 0 {
        h.ip_len = u32::try_from(payload_len.saturating_add(40)).ok();
    }
    let end = if payload_len > 0 {
        40usize.saturating_add(payload_len).min(data.len())
    } else {
        data.len()
    };
    let payload = data.get(40..end).unwrap_or_default();
    let mut next = next;
    let mut at = 0usize;
    for _ in 0..MAX_IPV6_EXTENSIONS {
        match next {
            IPV6_HOP_BY_HOP | IPV6_ROUTING | IPV6_DEST_OPTIONS | IPV6_AH => {
                let (Some(&following), Some(&len)) =
                    (payload.get(at), payload.get(at.saturating_add(1)))
                else {
                    h.ip_proto = Some(next);
                    h.status = DecodeStatus::Truncated;
                    return;
                };
                let bytes = if next == IPV6_AH {
                    (usize::from(len).saturating_add(2)).saturating_mul(4)
                } else {
                    (usize::from(len).saturating_add(1)).saturating_mul(8)
                };
                next = following;
                at = at.saturating_add(bytes);
            }
            IPV6_FRAGMENT => {
                let (Some(&following), Some(offset_flags), Some(id)) = (
                    payload.get(at),
                    be16(payload, at.saturating_add(2)),
                    be32(payload, at.saturating_add(4)),
                ) else {
                    h.ip_proto = Some(next);
                    h.status = DecodeStatus::Truncated;
                    return;
                };
                h.frag_offset = Some(offset_flags >> 3);
                h.more_fragments = Some(offset_flags & 1 != 0);
                h.ip_id = Some((id & 0xffff) as u16);
                next = following;
                at = at.saturating_add(8);
                if offset_flags >> 3 != 0 {
                    h.ip_proto = Some(next);
                    h.status = DecodeStatus::Fragment;
                    return;
                }
            }
            _ => break,
        }
    }
    h.ip_proto = Some(next);
    match payload.get(at..) {
        Some(rest) => transport(next, rest, 6, h),
        None => h.status = DecodeStatus::Truncated,
    }
}

fn transport(proto: u8, data: &[u8], ip_version: u8, h: &mut PacketHeaders) {
    match proto {
        ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP => {
            let (Some(src), Some(dst)) = (be16(data, 0), be16(data, 2)) else {
                h.status = DecodeStatus::Truncated;
                return;
            };
            h.src_port = Some(src);
            h.dst_port = Some(dst);
            if proto == ip_proto::TCP {
                match be16(data, 12) {
                    Some(word) => h.tcp_flags = Some(word & 0x0fff),
                    None => h.status = DecodeStatus::Truncated,
                }
            } else if proto == ip_proto::UDP && data.len() < 8 {
                h.status = DecodeStatus::Truncated;
            }
        }
        ip_proto::ICMP if ip_version == 4 => icmp(data, h),
        ip_proto::ICMPV6 if ip_version == 6 => icmp(data, h),
        _ => {}
    }
}

fn icmp(data: &[u8], h: &mut PacketHeaders) {
    match (data.first(), data.get(1)) {
        (Some(&kind), Some(&code)) => {
            h.icmp_type = Some(kind);
            h.icmp_code = Some(code);
        }
        _ => h.status = DecodeStatus::Truncated,
    }
}

#[cfg(test)]
mod tests;
