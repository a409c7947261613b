//! The role of the decode crate is to extract the header fields hindsight keeps
//! from a captured frame: a pure, allocation-free function of the link type and the
//! captured bytes, run once per packet at line rate and fuzzed.
//!
//! Layers: Ethernet (with up to two 802.1Q/802.1ad tags recorded, more skipped),
//! Linux SLL and SLL2, raw IP, BSD null/loopback (either byte order), OpenBSD
//! loop, PPP (plain, HDLC-framed, with a direction byte, over PPPoE) and Cisco
//! HDLC; ARP (IPv4 sender/target addresses); IPv4 (options, fragments) and IPv6
//! (hop-by-hop, routing, fragment, destination options and AH extension headers);
//! TCP, UDP and SCTP ports, TCP flags, ICMP and ICMPv6 type and code.
//!
//! Tunnels are seen through: MPLS (label stacks; IP, or Ethernet after a
//! pseudowire control word), PPPoE sessions, Cisco FabricPath, GRE (versions 0
//! and 1; IP, Ethernet, MPLS, PPP, ERSPAN types I, II and III inside), IP in IP
//! (4in4, 6in4, 4in6, 6in6), and on their UDP ports VXLAN (4789), VXLAN-GPE
//! (4790), Geneve (6081), GTP-U G-PDUs (2152) and MPLS over UDP (6635). The
//! fields are the innermost packet's; the encapsulations passed are bits of
//! `tunnel`, the outermost IP header's addresses `tunnel_src`/`tunnel_dst`, the
//! outermost identifier (GRE key, VNI, TEID) `tunnel_id` and the top label
//! `mpls_label`. MAC addresses and VLAN IDs stay the outermost frame's: the link
//! the recorder sees. A tunnel whose inner network header is not captured (or
//! is not IP or ARP) leaves the outer packet's fields, with the tunnel's bits and
//! identifiers added. At most [`MAX_ENCAPSULATIONS`] are followed.
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
//!   known, the transport header is not there (nor a tunnel's inner packet).
//!   ESP (50) and "no next header" (59) end IPv6 header walking.
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
    Addr16, DecodeStatus, Frame, LinkType, PacketHeaders, PacketRecord, TunnelId, ethertype,
    ip_proto, tunnel,
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
/// Encapsulations followed at most, against crafted endless nesting.
pub const MAX_ENCAPSULATIONS: u8 = 8;
/// MPLS labels walked at most before the bottom of the stack.
const MAX_MPLS_LABELS: usize = 16;
/// UDP ports of the tunnels decoded on UDP (IANA).
const VXLAN_PORT: u16 = 4789;
const VXLAN_GPE_PORT: u16 = 4790;
const GENEVE_PORT: u16 = 6081;
const GTP_U_PORT: u16 = 2152;
const MPLS_UDP_PORT: u16 = 6635;
/// PPP protocol numbers (RFC 1661, IANA "PPP DLL Protocol Numbers").
const PPP_IPV4: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;
const PPP_MPLS: u16 = 0x0281;
const PPP_MPLS_MULTICAST: u16 = 0x0283;

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
    record_layout(frame).0
}

/// [`record`], and where the innermost packet's layers lie in the frame.
pub fn record_layout(frame: &Frame<'_>) -> (PacketRecord, Layout) {
    let mut record = PacketRecord {
        ts_nanos: frame.ts_nanos,
        wire_len: frame.wire_len,
        cap_len: u32::try_from(frame.data.len()).unwrap_or(u32::MAX),
        link_type: frame.link_type,
        iface: frame.iface,
        headers: PacketHeaders::default(),
    };
    // Decoded in place: the headers are some 200 bytes, and a copy of them
    // per packet shows in the ingest profile.
    let layout = decode_into(frame.link_type, frame.data, &mut record.headers);
    (record, layout)
}

impl Layout {
    /// The TCP or UDP payload of `frame` (the frame this layout is of), the
    /// TCP sequence number, and whether the payload is cut (the frame was
    /// captured shorter than its IP length says).
    pub fn payload<'a>(&self, frame: &'a [u8], tcp: bool) -> (&'a [u8], Option<u32>, bool) {
        let (Some(start), Some((header, end))) = (self.payload, self.transport) else {
            return (&[], None, false);
        };
        // A frame cut by the snap length holds the start of its payload.
        let bytes = frame.get(start..end.min(frame.len())).unwrap_or_default();
        let seq = if tcp {
            header
                .checked_add(4)
                .and_then(|at| array::<4>(frame, at))
                .map(u32::from_be_bytes)
        } else {
            None
        };
        (bytes, seq, end > frame.len())
    }
}

/// Decodes the headers of one frame of link type `link_type`.
pub fn decode(link_type: LinkType, data: &[u8]) -> PacketHeaders {
    let mut headers = PacketHeaders::default();
    decode_into(link_type, data, &mut headers);
    headers
}

/// Where the innermost decoded packet's layers lie in a frame, as byte ranges
/// of it: what tests of a packet's bytes (`ip contains ...`, `tcp.payload[0:3]`)
/// read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The IP header's first byte, and the end of the IP packet (its length
    /// field's, within the captured bytes).
    pub network: Option<(usize, usize)>,
    /// The TCP, UDP or SCTP header's first byte, and the end of the IP payload
    /// (for UDP, of its length field's datagram).
    pub transport: Option<(usize, usize)>,
    /// The first byte of the TCP or UDP payload.
    pub payload: Option<usize>,
}

/// The decoded headers and where the innermost packet's layers lie.
pub fn layout(link_type: LinkType, data: &[u8]) -> (PacketHeaders, Layout) {
    let mut headers = PacketHeaders::default();
    let layout = decode_into(link_type, data, &mut headers);
    (headers, layout)
}

/// Decodes a frame into `headers` (which must be the default ones) and returns
/// where the innermost packet's layers lie.
fn decode_into(link_type: LinkType, data: &[u8], headers: &mut PacketHeaders) -> Layout {
    let mut out = Out {
        h: headers,
        base: data.as_ptr() as usize,
        layout: Layout::default(),
    };
    let h = &mut out;
    match link_type.0 {
        1 => ethernet(data, h),
        // DLT_RAW is 12 on some BSDs and 14 on OpenBSD; LINKTYPE_RAW is 101.
        12 | 14 | 101 => raw_ip(data, h),
        228 => network(ethertype::IPV4, data, h, 0),
        229 => network(ethertype::IPV6, data, h, 0),
        0 => loopback(data, false, h),
        108 => loopback(data, true, h),
        113 => sll(data, h),
        226 => ipnet(data, h),
        276 => sll2(data, h),
        9 | 50 => ppp(data, h, 0),
        51 => pppoe(data, h, 0),
        104 => chdlc(data, h),
        204 => ppp(data.get(1..).unwrap_or_default(), h, 0),
        205 => chdlc(data.get(1..).unwrap_or_default(), h),
        _ => h.status = DecodeStatus::UnsupportedLinkType,
    }
    out.layout
}

/// The record being decoded into, and where in the frame (whose first byte is
/// at address `base`) the layers decoded so far lie.
struct Out<'h> {
    h: &'h mut PacketHeaders,
    base: usize,
    layout: Layout,
}

impl std::ops::Deref for Out<'_> {
    type Target = PacketHeaders;

    fn deref(&self) -> &PacketHeaders {
        self.h
    }
}

impl std::ops::DerefMut for Out<'_> {
    fn deref_mut(&mut self) -> &mut PacketHeaders {
        self.h
    }
}

impl Out<'_> {
    /// The offset in the frame of a slice of it.
    #[inline]
    fn offset(&self, part: &[u8]) -> usize {
        (part.as_ptr() as usize).wrapping_sub(self.base)
    }
}

fn ethernet(data: &[u8], h: &mut Out<'_>) {
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
    network(kind, data.get(at..).unwrap_or_default(), h, 0);
}

fn sll(data: &[u8], h: &mut Out<'_>) {
    // packet type 2, ARPHRD 2, address length 2, address 8, protocol 2.
    let (Some(addr_len), Some(kind)) = (be16(data, 4), be16(data, 14)) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    if addr_len == 6 {
        h.src_mac = array::<6>(data, 6);
    }
    network(kind, data.get(16..).unwrap_or_default(), h, 0);
}

fn sll2(data: &[u8], h: &mut Out<'_>) {
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
    network(kind, data.get(20..).unwrap_or_default(), h, 0);
}

fn raw_ip(data: &[u8], h: &mut Out<'_>) {
    match data.first().map(|b| b >> 4) {
        Some(4) => network(ethertype::IPV4, data, h, 0),
        Some(6) => network(ethertype::IPV6, data, h, 0),
        Some(_) => h.status = DecodeStatus::Malformed,
        None => h.status = DecodeStatus::Truncated,
    }
}

fn ipnet(data: &[u8], h: &mut Out<'_>) {
    // version 1, family 1 (IPH_AF_INET 2, IPH_AF_INET6 26), htype 2, pktlen 4,
    // ifindex 4, grifindex 4, zsrc 4, zdst 4.
    const IPNET_HEADER: usize = 24;
    let (Some(&family), Some(payload)) = (data.get(1), data.get(IPNET_HEADER..)) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    match family {
        2 => network(ethertype::IPV4, payload, h, 0),
        26 => network(ethertype::IPV6, payload, h, 0),
        _ => h.status = DecodeStatus::NonIp,
    }
}

fn loopback(data: &[u8], network_order: bool, h: &mut Out<'_>) {
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
        network(ethertype::IPV4, payload, h, 0);
    } else if AF_INET6.contains(&family) {
        network(ethertype::IPV6, payload, h, 0);
    } else {
        h.status = DecodeStatus::NonIp;
    }
}

fn network(kind: u16, data: &[u8], h: &mut Out<'_>, depth: u8) {
    h.eth_type = Some(kind);
    match kind {
        ethertype::IPV4 => ipv4(data, h, depth),
        ethertype::IPV6 => ipv6(data, h, depth),
        ethertype::ARP => arp(data, h),
        ethertype::MPLS | ethertype::MPLS_MULTICAST => mpls(data, h, depth),
        ethertype::PPPOE_SESSION => pppoe(data, h, depth),
        ethertype::NSH => nsh(data, h, depth),
        ethertype::FABRICPATH => {
            // The FabricPath tag's second half (FTag, TTL), then the host's frame.
            let Some(next) = deeper(h, tunnel::FABRICPATH, depth) else {
                return;
            };
            inner_ethernet(data.get(2..).unwrap_or_default(), h, next);
        }
        _ => h.status = DecodeStatus::NonIp,
    }
}

/// Adds encapsulation `bit` to the record, returning the depth of what it holds,
/// or `None` (the record `Malformed`) past [`MAX_ENCAPSULATIONS`].
fn deeper(h: &mut Out<'_>, bit: u16, depth: u8) -> Option<u8> {
    h.tunnel = Some(h.tunnel.unwrap_or(0) | bit);
    if depth >= MAX_ENCAPSULATIONS {
        h.status = DecodeStatus::Malformed;
        return None;
    }
    Some(depth.saturating_add(1))
}

/// Records `id` as the tunnel identifier unless an outer encapsulation gave one.
fn identify(h: &mut Out<'_>, kind: u16, id: u32) {
    if h.tunnel_id.is_none() {
        h.tunnel_id = Some(TunnelId { kind, id });
    }
}

/// An Ethernet frame inside a tunnel: its tags are skipped, its MAC addresses
/// left out (the record keeps the outermost frame's), its payload decoded.
fn inner_ethernet(data: &[u8], h: &mut Out<'_>, depth: u8) {
    let Some(mut kind) = be16(data, 12) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    let mut at = 14usize;
    while matches!(
        kind,
        ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_OLD
    ) {
        let Some(inner) = be16(data, at.saturating_add(2)) else {
            h.status = DecodeStatus::Truncated;
            return;
        };
        kind = inner;
        at = at.saturating_add(4);
    }
    if kind < MIN_ETHERTYPE {
        h.status = DecodeStatus::NonIp;
        return;
    }
    network(kind, data.get(at..).unwrap_or_default(), h, depth);
}

/// An MPLS label stack (RFC 3032) and what follows its bottom: IPv4 or IPv6 by
/// the first nibble, or a pseudowire control word (first nibble 0) and Ethernet.
fn mpls(data: &[u8], h: &mut Out<'_>, depth: u8) {
    let Some(next) = deeper(h, tunnel::MPLS, depth) else {
        return;
    };
    let mut at = 0usize;
    for _ in 0..MAX_MPLS_LABELS {
        let Some(entry) = be32(data, at) else {
            h.status = DecodeStatus::Truncated;
            return;
        };
        if h.mpls_label.is_none() {
            h.mpls_label = Some(entry >> 12);
        }
        at = at.saturating_add(4);
        if entry & 0x100 != 0 {
            let payload = data.get(at..).unwrap_or_default();
            match payload.first().map(|byte| byte >> 4) {
                Some(4) => network(ethertype::IPV4, payload, h, next),
                Some(6) => network(ethertype::IPV6, payload, h, next),
                Some(0) => inner_ethernet(payload.get(4..).unwrap_or_default(), h, next),
                Some(_) => h.status = DecodeStatus::NonIp,
                None => h.status = DecodeStatus::Truncated,
            }
            return;
        }
    }
    h.status = DecodeStatus::Malformed;
}

/// A Network Service Header (RFC 8300): its length in 4-byte words, then
/// what its next protocol field names.
fn nsh(data: &[u8], h: &mut Out<'_>, depth: u8) {
    let (Some(word), Some(&next)) = (be16(data, 0), data.get(3)) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    let Some(depth) = deeper(h, 0, depth) else {
        return;
    };
    let payload = data
        .get(usize::from(word & 0x3f).saturating_mul(4)..)
        .unwrap_or_default();
    match next {
        1 => network(ethertype::IPV4, payload, h, depth),
        2 => network(ethertype::IPV6, payload, h, depth),
        3 => inner_ethernet(payload, h, depth),
        5 => network(ethertype::MPLS, payload, h, depth),
        _ => h.status = DecodeStatus::NonIp,
    }
}

/// A PPPoE session header (RFC 2516: version/type, code, session, length), then PPP.
fn pppoe(data: &[u8], h: &mut Out<'_>, depth: u8) {
    let Some(next) = deeper(h, tunnel::PPPOE, depth) else {
        return;
    };
    if data.len() < 6 {
        h.status = DecodeStatus::Truncated;
        return;
    }
    ppp(data.get(6..).unwrap_or_default(), h, next);
}

/// The protocol field of a PPP frame after an optional `ff 03` address and
/// control (one byte when compressed: an odd first byte), as an ethertype
/// (0 for none decoded), and where its payload starts. `None` if cut short.
fn ppp_protocol(data: &[u8]) -> Option<(u16, &[u8])> {
    let data = match data {
        [0xff, 0x03, rest @ ..] => rest,
        _ => data,
    };
    let (protocol, at) = match data.first() {
        Some(&first) if first & 1 == 1 => (u16::from(first), 1usize),
        _ => (be16(data, 0)?, 2usize),
    };
    let kind = match protocol {
        PPP_IPV4 => ethertype::IPV4,
        PPP_IPV6 => ethertype::IPV6,
        PPP_MPLS => ethertype::MPLS,
        PPP_MPLS_MULTICAST => ethertype::MPLS_MULTICAST,
        _ => 0,
    };
    Some((kind, data.get(at..).unwrap_or_default()))
}

/// A PPP frame (RFC 1661). HDLC-framed captures may hold Cisco HDLC instead
/// (first byte 0x0f or 0x8f).
fn ppp(data: &[u8], h: &mut Out<'_>, depth: u8) {
    if let [0x0f | 0x8f, ..] = data {
        return chdlc(data, h);
    }
    match ppp_protocol(data) {
        None => h.status = DecodeStatus::Truncated,
        Some((0, _)) => h.status = DecodeStatus::NonIp,
        Some((kind, payload)) => network(kind, payload, h, depth),
    }
}

/// Cisco HDLC: address, control, then an ethertype.
fn chdlc(data: &[u8], h: &mut Out<'_>) {
    let Some(kind) = be16(data, 2) else {
        h.status = DecodeStatus::Truncated;
        return;
    };
    network(kind, data.get(4..).unwrap_or_default(), h, 0);
}

/// Decodes the packet a tunnel over IP carries (`kind`: an ethertype, or
/// [`ethertype::TEB`] for Ethernet) into the record, the outer IP header's
/// addresses kept as the tunnel's. If it yields no network address (not
/// captured, not IP or ARP), the outer packet's fields stay, with the tunnel's
/// bits and identifier added and a truncation noted.
fn over_ip(kind: u16, data: &[u8], h: &mut Out<'_>, depth: u8, bit: u16, id: Option<u32>) {
    let mut inner_headers = **h;
    let mut inner = Out {
        h: &mut inner_headers,
        base: h.base,
        layout: h.layout,
    };
    if inner.tunnel_src.is_none() {
        inner.tunnel_src = h.src_addr;
        inner.tunnel_dst = h.dst_addr;
    }
    let Some(next) = deeper(&mut inner, bit, depth) else {
        h.tunnel = inner.tunnel;
        h.tunnel_src = inner.tunnel_src;
        h.tunnel_dst = inner.tunnel_dst;
        h.status = inner.status;
        return;
    };
    if let Some(id) = id {
        identify(&mut inner, bit, id);
    }
    inner.status = DecodeStatus::Complete;
    inner.ip_version = None;
    inner.src_addr = None;
    inner.dst_addr = None;
    inner.ip_proto = None;
    inner.ip_ttl = None;
    inner.ip_len = None;
    inner.ip_id = None;
    inner.frag_offset = None;
    inner.more_fragments = None;
    inner.dont_fragment = None;
    inner.src_port = None;
    inner.dst_port = None;
    inner.tcp_flags = None;
    inner.icmp_type = None;
    inner.icmp_code = None;
    match kind {
        ethertype::TEB => inner_ethernet(data, &mut inner, next),
        _ => network(kind, data, &mut inner, next),
    }
    if inner.src_addr.is_some() {
        let layout = inner.layout;
        **h = inner_headers;
        h.layout = layout;
    } else {
        h.tunnel = inner.tunnel;
        h.tunnel_src = inner.tunnel_src;
        h.tunnel_dst = inner.tunnel_dst;
        h.tunnel_id = inner.tunnel_id;
        h.mpls_label = inner.mpls_label;
        if matches!(
            inner.status,
            DecodeStatus::Truncated | DecodeStatus::Malformed
        ) {
            h.status = inner.status;
        }
    }
}

/// GRE (RFC 2784, RFC 2890; version 1 is PPTP's, RFC 2637) and what it carries.
fn gre(data: &[u8], h: &mut Out<'_>, depth: u8) {
    let (Some(flags), Some(protocol)) = (be16(data, 0), be16(data, 2)) else {
        h.tunnel = Some(h.tunnel.unwrap_or(0) | tunnel::GRE);
        h.status = DecodeStatus::Truncated;
        return;
    };
    let mut at = 4usize;
    let mut key = None;
    match flags & 7 {
        0 => {
            if flags & 0xc000 != 0 {
                // Checksum and offset, present if either C or R is set.
                at = at.saturating_add(4);
            }
            if flags & 0x2000 != 0 {
                key = be32(data, at);
                at = at.saturating_add(4);
            }
            if flags & 0x1000 != 0 {
                at = at.saturating_add(4);
            }
        }
        1 => {
            // Payload length and call ID (the key), then sequence and acknowledgment.
            key = be16(data, 6).map(u32::from);
            at = at.saturating_add(4);
            if flags & 0x1000 != 0 {
                at = at.saturating_add(4);
            }
            if flags & 0x0080 != 0 {
                at = at.saturating_add(4);
            }
        }
        _ => {
            h.tunnel = Some(h.tunnel.unwrap_or(0) | tunnel::GRE);
            return;
        }
    }
    let payload = data.get(at..).unwrap_or_default();
    match protocol {
        ethertype::ERSPAN_II | ethertype::ERSPAN_III => {
            // Type I has no sequence number and no ERSPAN header; type II an
            // 8-byte header; type III 12 bytes and 8 more when its O bit is set.
            let header = match protocol {
                ethertype::ERSPAN_II if flags & 0x1000 == 0 => 0,
                ethertype::ERSPAN_II => 8,
                _ => match payload.get(11) {
                    Some(&last) if last & 1 == 1 => 20,
                    _ => 12,
                },
            };
            let frame = payload.get(header..).unwrap_or_default();
            let bits = tunnel::GRE | tunnel::ERSPAN;
            over_ip(ethertype::TEB, frame, h, depth, bits, key);
        }
        ethertype::PPP => {
            // PPP inside GRE version 1: its header taken off, then as IP inside GRE.
            let (kind, inner) = ppp_protocol(payload).unwrap_or((0, &[]));
            over_ip(kind, inner, h, depth, tunnel::GRE, key);
        }
        _ => over_ip(protocol, payload, h, depth, tunnel::GRE, key),
    }
}

/// The tunnels carried on UDP, found by either port (as Wireshark tries both).
fn over_udp(port: u16, data: &[u8], h: &mut Out<'_>, depth: u8) {
    // The 24-bit VNI of VXLAN (RFC 7348), VXLAN-GPE and Geneve (RFC 8926).
    let vni = be32(data, 4).map(|word| word >> 8);
    match port {
        VXLAN_PORT => {
            let frame = data.get(8..).unwrap_or_default();
            over_ip(ethertype::TEB, frame, h, depth, tunnel::VXLAN, vni);
        }
        VXLAN_GPE_PORT => {
            let kind = match data.get(3) {
                Some(1) => ethertype::IPV4,
                Some(2) => ethertype::IPV6,
                Some(3) => ethertype::TEB,
                Some(4) => ethertype::NSH,
                Some(5) => ethertype::MPLS,
                _ => 0,
            };
            let payload = data.get(8..).unwrap_or_default();
            over_ip(kind, payload, h, depth, tunnel::VXLAN, vni);
        }
        GENEVE_PORT => {
            // Version and options length (in 4-byte words), flags, protocol, VNI.
            let options = data.first().map_or(0, |byte| usize::from(byte & 0x3f) * 4);
            let kind = be16(data, 2).unwrap_or(0);
            let payload = data
                .get(8usize.saturating_add(options)..)
                .unwrap_or_default();
            over_ip(kind, payload, h, depth, tunnel::GENEVE, vni);
        }
        GTP_U_PORT => gtp_u(data, h, depth),
        MPLS_UDP_PORT => over_ip(ethertype::MPLS, data, h, depth, tunnel::MPLS, None),
        _ => {}
    }
}

/// GTP-U (3GPP TS 29.281): only a G-PDU (message type 255) carries a packet.
fn gtp_u(data: &[u8], h: &mut Out<'_>, depth: u8) {
    let (Some(&flags), Some(&message), Some(teid)) = (data.first(), data.get(1), be32(data, 4))
    else {
        return;
    };
    if flags >> 5 != 1 || flags & 0x10 == 0 || message != 0xff {
        return;
    }
    let mut at = 8usize;
    if flags & 0x07 != 0 {
        // Sequence number, N-PDU number, next extension header type.
        let mut next = data.get(11).copied().unwrap_or(0);
        at = 12;
        for _ in 0..MAX_IPV6_EXTENSIONS {
            if next == 0 {
                break;
            }
            // Length in 4-byte units; the last byte names the next extension.
            let Some(&units) = data.get(at) else {
                break;
            };
            let len = usize::from(units).saturating_mul(4);
            if len == 0 {
                break;
            }
            at = at.saturating_add(len);
            next = data.get(at.saturating_sub(1)).copied().unwrap_or(0);
        }
    }
    let payload = data.get(at..).unwrap_or_default();
    let kind = match payload.first().map(|byte| byte >> 4) {
        Some(4) => ethertype::IPV4,
        Some(6) => ethertype::IPV6,
        _ => 0,
    };
    over_ip(kind, payload, h, depth, tunnel::GTP, Some(teid));
}

fn arp(data: &[u8], h: &mut Out<'_>) {
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

fn ipv4(data: &[u8], h: &mut Out<'_>, depth: u8) {
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
    h.ip_dscp = data.get(1).map(|tos| tos >> 2);
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
    let start = h.offset(data);
    h.layout = Layout {
        network: Some((start, start.wrapping_add(end))),
        ..Layout::default()
    };
    if flags_offset & 0x1fff != 0 {
        h.status = DecodeStatus::Fragment;
        return;
    }
    match data.get(header_len..end) {
        Some(payload) => transport(proto, payload, 4, h, depth),
        None => h.status = DecodeStatus::Truncated,
    }
}

fn ipv6(data: &[u8], h: &mut Out<'_>, depth: u8) {
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
    h.ip_dscp = be16(data, 0).map(|word| (word >> 6) as u8 & 0x3f);
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
    let start = h.offset(data);
    h.layout = Layout {
        network: Some((start, start.wrapping_add(end))),
        ..Layout::default()
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
        Some(rest) => transport(next, rest, 6, h, depth),
        None => h.status = DecodeStatus::Truncated,
    }
}

fn transport(proto: u8, data: &[u8], ip_version: u8, h: &mut Out<'_>, depth: u8) {
    match proto {
        ip_proto::IPIP => over_ip(ethertype::IPV4, data, h, depth, tunnel::IPIP, None),
        ip_proto::IPV6 => over_ip(ethertype::IPV6, data, h, depth, tunnel::IPIP, None),
        ip_proto::GRE => gre(data, h, depth),
        ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP => {
            let (Some(src), Some(dst)) = (be16(data, 0), be16(data, 2)) else {
                h.status = DecodeStatus::Truncated;
                return;
            };
            h.src_port = Some(src);
            h.dst_port = Some(dst);
            let start = h.offset(data);
            h.layout.transport = Some((start, start.wrapping_add(data.len())));
            if proto == ip_proto::TCP {
                match be16(data, 12) {
                    Some(word) => {
                        h.tcp_flags = Some(word & 0x0fff);
                        let header = usize::from(word >> 12).saturating_mul(4);
                        if header >= 20 && header <= data.len() {
                            h.layout.payload = Some(start.wrapping_add(header));
                        }
                    }
                    None => h.status = DecodeStatus::Truncated,
                }
            } else if proto == ip_proto::UDP && data.len() < 8 {
                h.status = DecodeStatus::Truncated;
            } else if proto == ip_proto::UDP {
                // The datagram ends where its length says, within the IP payload.
                let length = be16(data, 4).map_or(0, usize::from);
                if length >= 8 && length <= data.len() {
                    h.layout.transport = Some((start, start.wrapping_add(length)));
                }
                h.layout.payload = Some(start.wrapping_add(8));
                let payload = data.get(8..).unwrap_or_default();
                if is_tunnel_port(dst) {
                    over_udp(dst, payload, h, depth);
                } else if is_tunnel_port(src) {
                    over_udp(src, payload, h, depth);
                }
            }
        }
        ip_proto::ICMP if ip_version == 4 => icmp(data, h),
        ip_proto::ICMPV6 if ip_version == 6 => icmp(data, h),
        _ => {}
    }
}

fn is_tunnel_port(port: u16) -> bool {
    matches!(
        port,
        VXLAN_PORT | VXLAN_GPE_PORT | GENEVE_PORT | GTP_U_PORT | MPLS_UDP_PORT
    )
}

fn icmp(data: &[u8], h: &mut Out<'_>) {
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
