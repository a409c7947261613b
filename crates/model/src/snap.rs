//! The stored form of a frame's kept bytes: the bytes of header fields that the
//! `packets` table also holds in their own columns (MAC addresses, ethertype, IP
//! addresses, TTL, protocol, IPv4 identification, ports) or that follow from
//! them (the IP length field, from the wire length; the IPv4 header checksum,
//! from the rest of the header) are left out of the `data` column and put back
//! when the frame is read.
//!
//! Those fields are the most repeated bytes of a capture, and the checksum the
//! least compressible, so leaving them out shortens what the `data` column
//! compresses by nearly half and what it stores by about a third (lan-hour: 76.4
//! → 42.8 bytes a frame before compression). The frame read back is the frame
//! read in, byte for byte: a field is left out only where the frame's bytes at
//! its place equal the value it is put back from, whatever the decoder made of
//! the frame, and [`restore`] puts the same value back at the same place.
//!
//! A [`DataForm`] code beside the bytes says which fields were left out; the
//! layouts are in `docs/formats/segment.md`.

use crate::{Addr16, PacketRecord};

/// Which header fields the stored bytes of a frame leave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DataForm {
    code: u8,
}

/// Bits of `code - 1` for the forms that leave fields out.
const PORTS: u8 = 1;
const IPV6: u8 = 2;
const NO_LINK_HEADER: u8 = 4;
/// The IP length field (IPv4 total length, IPv6 payload length) is left out: it
/// is the wire length less the link header (and the fixed IPv6 header).
const IP_LENGTH: u8 = 8;
/// The IPv4 header checksum is left out: it was the right one, and is computed
/// again from the header put back.
const IPV4_CHECKSUM: u8 = 16;
/// The highest form code.
const MAX_CODE: u8 = 1 + (PORTS | IPV6 | NO_LINK_HEADER | IP_LENGTH | IPV4_CHECKSUM);

/// Bytes of the Ethernet header: destination MAC, source MAC, ethertype.
const ETHERNET_LEN: usize = 14;
/// Bytes of the IPv4 header without options, and of the fixed IPv6 header.
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;

/// What a form leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Parts {
    /// The Ethernet header (else there is no link header: raw IP).
    ethernet: bool,
    /// The IP header is IPv6 (else IPv4).
    ipv6: bool,
    ports: bool,
    length: bool,
    /// Never set with `ipv6`.
    checksum: bool,
}

impl Parts {
    /// Bytes of the IP header kept before an IPv4 header's options: IPv4
    /// version/IHL, TOS, total length, flags/fragment offset, checksum; IPv6
    /// version/traffic class/flow label, payload length, next header; less the
    /// length and checksum where they are left out.
    fn ip_kept(self) -> usize {
        let all = if self.ipv6 { 7 } else { 8 };
        all - 2 * usize::from(self.length) - 2 * usize::from(self.checksum)
    }
}

impl DataForm {
    /// The frame's bytes as they are.
    pub const VERBATIM: Self = Self { code: 0 };

    /// Returns the form of `code`, if it is one.
    pub fn from_code(code: u8) -> Option<Self> {
        let form = Self { code };
        let valid = code <= MAX_CODE && form.parts().is_none_or(|p| !(p.ipv6 && p.checksum));
        valid.then_some(form)
    }

    /// Returns the code stored in the `data_form` column.
    pub fn code(self) -> u8 {
        self.code
    }

    fn elided(parts: Parts) -> Self {
        let bit = |set: bool, bit: u8| if set { bit } else { 0 };
        let bits = bit(parts.ports, PORTS)
            | bit(parts.ipv6, IPV6)
            | bit(!parts.ethernet, NO_LINK_HEADER)
            | bit(parts.length, IP_LENGTH)
            | bit(parts.checksum, IPV4_CHECKSUM);
        Self { code: 1 + bits }
    }

    /// What a form that leaves fields out leaves out; `None` for
    /// [`VERBATIM`](Self::VERBATIM).
    fn parts(self) -> Option<Parts> {
        let bits = self.code.checked_sub(1)?;
        Some(Parts {
            ethernet: bits & NO_LINK_HEADER == 0,
            ipv6: bits & IPV6 != 0,
            ports: bits & PORTS != 0,
            length: bits & IP_LENGTH != 0,
            checksum: bits & IPV4_CHECKSUM != 0,
        })
    }

    /// Bytes the form leaves out of a frame.
    pub fn elided_len(self) -> usize {
        match self.parts() {
            None => 0,
            Some(parts) => {
                let link = if parts.ethernet { ETHERNET_LEN } else { 0 };
                // IPv6: hop limit and addresses; IPv4: id, TTL, protocol, addresses.
                let ip = if parts.ipv6 { 33 } else { 12 };
                let fixed = if parts.ipv6 {
                    IPV6_LEN - 33
                } else {
                    IPV4_LEN - 12
                };
                link + ip + fixed - parts.ip_kept() + if parts.ports { 4 } else { 0 }
            }
        }
    }
}

/// The `N` bytes of `bytes` at `at`, as an array (compared without a call).
fn array<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at + N)?.try_into().ok()
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    array(bytes, at).map(u16::from_be_bytes)
}

/// The Internet checksum's one's-complement sum of `bytes` (a last odd byte
/// padded with zero), folded to 16 bits.
fn ones_complement_sum(bytes: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = bytes.chunks_exact(4);
    for word in &mut words {
        sum += u64::from(u32::from_be_bytes([word[0], word[1], word[2], word[3]]));
    }
    for pair in words.remainder().chunks(2) {
        sum += u64::from(u16::from_be_bytes([
            pair[0],
            pair.get(1).copied().unwrap_or(0),
        ]));
    }
    fold(sum)
}

/// Folds a sum of 16-bit words (added as 32-bit ones, or more) to 16 bits, the
/// carries added back: 2^16 is 1 in one's-complement arithmetic.
fn fold(sum: u64) -> u16 {
    let mut sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum an IPv4 header (of an even length, 20 bytes or more) should
/// carry: the complement of its sum with the checksum field taken as zero.
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = header.chunks_exact(4);
    for (i, word) in (&mut words).enumerate() {
        let word = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        // Bytes 10 and 11, the checksum, are the low half of the third word.
        sum += u64::from(if i == 2 { word & 0xffff_0000 } else { word });
    }
    sum += u64::from(ones_complement_sum(words.remainder()));
    !fold(sum)
}

/// Appends the stored form of the frame of `record` (its kept bytes `frame`,
/// link header first) to `out` and returns its form: without the fields that
/// `record` gives back with the same value at the same place, or verbatim where
/// any of the columns' fields differs or is cut off by the snap length.
#[inline]
pub fn strip(record: &PacketRecord, frame: &[u8], out: &mut Vec<u8>) -> DataForm {
    let form = elision(record, frame);
    let Some(parts) = form.parts() else {
        out.extend_from_slice(frame);
        return form;
    };
    out.reserve(frame.len());
    let ip = if parts.ethernet { ETHERNET_LEN } else { 0 };
    let l4 = if parts.ipv6 {
        let header = &frame[ip..ip + IPV6_LEN];
        out.extend_from_slice(&header[..4]);
        if !parts.length {
            out.extend_from_slice(&header[4..6]);
        }
        out.push(header[6]);
        ip + IPV6_LEN
    } else {
        let l4 = ip + usize::from(frame[ip] & 0x0f) * 4;
        let header = &frame[ip..ip + IPV4_LEN];
        out.extend_from_slice(&header[..2]);
        if !parts.length {
            out.extend_from_slice(&header[2..4]);
        }
        out.extend_from_slice(&header[6..8]);
        if !parts.checksum {
            out.extend_from_slice(&header[10..12]);
        }
        out.extend_from_slice(&frame[ip + IPV4_LEN..l4]);
        l4
    };
    out.extend_from_slice(&frame[l4 + if parts.ports { 4 } else { 0 }..]);
    form
}

/// The IP length field's value the wire length gives: the wire length less the
/// link header, less the fixed header for IPv6 (whose field counts the payload).
fn length_from_wire(wire_len: u32, ip: usize, ipv6: bool) -> Option<u16> {
    let header = if ipv6 { IPV6_LEN } else { 0 };
    let length = usize::try_from(wire_len).ok()?.checked_sub(ip + header)?;
    u16::try_from(length).ok()
}

/// The form [`strip`] gives `frame`: the fields it leaves out are all present in
/// the record, within `frame`, and equal there.
fn elision(record: &PacketRecord, frame: &[u8]) -> DataForm {
    let h = &record.headers;
    let (Some(ttl), Some(src), Some(dst)) = (h.ip_ttl, h.src_addr, h.dst_addr) else {
        return DataForm::VERBATIM;
    };
    // Where the IP header starts, and the version the link header announces.
    let (ethernet, ip, announced) = match record.link_type.0 {
        1 => {
            let (Some(src_mac), Some(dst_mac)) = (h.src_mac, h.dst_mac) else {
                return DataForm::VERBATIM;
            };
            if array(frame, 0) != Some(dst_mac) || array(frame, 6) != Some(src_mac) {
                return DataForm::VERBATIM;
            }
            match be16(frame, 12) {
                Some(0x0800) => (true, ETHERNET_LEN, 4),
                Some(0x86dd) => (true, ETHERNET_LEN, 6),
                _ => return DataForm::VERBATIM,
            }
        }
        // Raw IP link types: the IP header is first, its version says which.
        12 | 14 | 101 | 228 | 229 => (false, 0, frame.first().map_or(0, |byte| byte >> 4)),
        _ => return DataForm::VERBATIM,
    };
    let v4 = |at: usize| array(frame, at).map(Addr16::from_v4_bytes);
    let (ipv6, l4, length, checksum) = match (announced, frame.get(ip).map(|byte| byte >> 4)) {
        (4, Some(4)) => {
            let header = usize::from(frame[ip] & 0x0f) * 4;
            let fields_equal = header >= IPV4_LEN
                && frame.len() >= ip + header
                && h.ip_id.is_some_and(|id| be16(frame, ip + 4) == Some(id))
                && frame[ip + 8] == ttl
                && h.ip_proto == Some(frame[ip + 9])
                && v4(ip + 12) == Some(src)
                && v4(ip + 16) == Some(dst);
            if !fields_equal {
                return DataForm::VERBATIM;
            }
            let length = be16(frame, ip + 2) == length_from_wire(record.wire_len, ip, false);
            let checksum = be16(frame, ip + 10) == Some(ipv4_checksum(&frame[ip..ip + header]));
            (false, ip + header, length, checksum)
        }
        (6, Some(6)) => {
            let fields_equal = frame.len() >= ip + IPV6_LEN
                && frame[ip + 7] == ttl
                && array(frame, ip + 8) == Some(src.0)
                && array(frame, ip + 24) == Some(dst.0);
            if !fields_equal {
                return DataForm::VERBATIM;
            }
            let length = be16(frame, ip + 4) == length_from_wire(record.wire_len, ip, true);
            (true, ip + IPV6_LEN, length, false)
        }
        _ => return DataForm::VERBATIM,
    };
    let ports = match (h.src_port, h.dst_port) {
        (Some(src_port), Some(dst_port)) => {
            be16(frame, l4) == Some(src_port) && be16(frame, l4 + 2) == Some(dst_port)
        }
        _ => false,
    };
    DataForm::elided(Parts {
        ethernet,
        ipv6,
        ports,
        length,
        checksum,
    })
}

/// Appends to `out` the frame of `record` whose stored form is `stored`, putting
/// back the fields `form` left out from the record. Returns false, having
/// appended nothing, if the record lacks one of them or `stored` is too short for
/// the form (bytes that were not written by [`strip`]).
pub fn restore(form: DataForm, record: &PacketRecord, stored: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(parts) = form.parts() else {
        out.extend_from_slice(stored);
        return true;
    };
    let h = &record.headers;
    let (Some(ttl), Some(src), Some(dst)) = (h.ip_ttl, h.src_addr, h.dst_addr) else {
        return false;
    };
    let ports = match (parts.ports, h.src_port, h.dst_port) {
        (false, _, _) => None,
        (true, Some(src_port), Some(dst_port)) => Some([src_port, dst_port]),
        (true, _, _) => return false,
    };
    let link = match (parts.ethernet, h.dst_mac, h.src_mac) {
        (false, _, _) => None,
        (true, Some(dst_mac), Some(src_mac)) => Some((dst_mac, src_mac)),
        (true, _, _) => return false,
    };
    let ip = if parts.ethernet { ETHERNET_LEN } else { 0 };
    let length = match parts.length {
        false => None,
        true => match length_from_wire(record.wire_len, ip, parts.ipv6) {
            Some(length) => Some(length.to_be_bytes()),
            None => return false,
        },
    };
    let kept = parts.ip_kept();
    // IPv4: the identification and protocol from their columns, and the stored
    // bytes the header's options take; IPv6 keeps its next header.
    let ipv4 = if parts.ipv6 {
        None
    } else {
        let (Some(id), Some(proto), Some(&version_ihl)) = (h.ip_id, h.ip_proto, stored.first())
        else {
            return false;
        };
        let header = usize::from(version_ihl & 0x0f) * 4;
        if header < IPV4_LEN {
            return false;
        }
        Some((id, proto, header - IPV4_LEN))
    };
    let rest = match ipv4 {
        Some((_, _, options)) => kept + options,
        None => kept,
    };
    if stored.len() < rest {
        return false;
    }
    out.reserve(stored.len() + form.elided_len());
    if let Some((dst_mac, src_mac)) = link {
        out.extend_from_slice(&dst_mac);
        out.extend_from_slice(&src_mac);
        out.extend_from_slice(if parts.ipv6 {
            &[0x86, 0xdd]
        } else {
            &[0x08, 0x00]
        });
    }
    let mut stored_ip = stored[..kept].iter().copied();
    let mut take = |n: usize, out: &mut Vec<u8>| out.extend(stored_ip.by_ref().take(n));
    match ipv4 {
        Some((id, proto, _)) => {
            let start = out.len();
            take(2, out);
            match length {
                Some(length) => out.extend_from_slice(&length),
                None => take(2, out),
            }
            out.extend_from_slice(&id.to_be_bytes());
            take(2, out);
            out.extend_from_slice(&[ttl, proto]);
            if parts.checksum {
                out.extend_from_slice(&[0, 0]);
            } else {
                take(2, out);
            }
            out.extend_from_slice(&src.0[12..]);
            out.extend_from_slice(&dst.0[12..]);
            out.extend_from_slice(&stored[kept..rest]);
            if parts.checksum {
                let checksum = ipv4_checksum(&out[start..]);
                out[start + 10..start + 12].copy_from_slice(&checksum.to_be_bytes());
            }
        }
        None => {
            take(4, out);
            match length {
                Some(length) => out.extend_from_slice(&length),
                None => take(2, out),
            }
            take(1, out);
            out.push(ttl);
            out.extend_from_slice(&src.0);
            out.extend_from_slice(&dst.0);
        }
    }
    for port in ports.into_iter().flatten() {
        out.extend_from_slice(&port.to_be_bytes());
    }
    out.extend_from_slice(&stored[rest..]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinkType, PacketHeaders};

    /// An Ethernet/IPv4/TCP frame with two bytes of IP options, and its headers.
    fn ipv4_tcp() -> (Vec<u8>, PacketHeaders) {
        let mut frame = vec![
            1, 2, 3, 4, 5, 6, // dst MAC
            7, 8, 9, 10, 11, 12, // src MAC
            0x08, 0x00, // IPv4
            0x46, 0x10, 0x00, 0x40, // version 4, IHL 6, TOS, total length
            0x12, 0x34, 0x40, 0x00, // id, DF
            64, 6, 0xab, 0xcd, // TTL, TCP, checksum
            10, 0, 0, 1, // src
            192, 168, 1, 2, // dst
            0x94, 0x04, 0x00, 0x00, // router alert option
            0x01, 0xbb, 0xc7, 0x38, // ports 443 → 51000
        ];
        frame.extend(0..30u8);
        let headers = PacketHeaders {
            src_mac: Some([7, 8, 9, 10, 11, 12]),
            dst_mac: Some([1, 2, 3, 4, 5, 6]),
            eth_type: Some(0x0800),
            ip_version: Some(4),
            src_addr: Some(Addr16::from_v4_bytes([10, 0, 0, 1])),
            dst_addr: Some(Addr16::from_v4_bytes([192, 168, 1, 2])),
            ip_proto: Some(6),
            ip_ttl: Some(64),
            ip_id: Some(0x1234),
            src_port: Some(443),
            dst_port: Some(51000),
            ..PacketHeaders::default()
        };
        (frame, headers)
    }

    /// The record of a frame of `wire_len` bytes on the wire.
    fn record(link_type: LinkType, headers: &PacketHeaders, wire_len: usize) -> PacketRecord {
        PacketRecord {
            ts_nanos: 0,
            wire_len: wire_len as u32,
            cap_len: wire_len as u32,
            link_type,
            iface: 0,
            headers: *headers,
        }
    }

    /// The form that leaves out the columns' fields where `ethernet`, `ipv6` and
    /// `ports` say, and neither the IP length nor the checksum.
    fn columns_form(ethernet: bool, ipv6: bool, ports: bool) -> DataForm {
        DataForm::elided(Parts {
            ethernet,
            ipv6,
            ports,
            length: false,
            checksum: false,
        })
    }

    /// `form` with the IP length left out too.
    fn with_length(form: DataForm) -> DataForm {
        let parts = form.parts().expect("a form that leaves fields out");
        DataForm::elided(Parts {
            length: true,
            ..parts
        })
    }

    /// `ipv4_tcp` with the right total length (for a frame of 72 bytes) and checksum.
    fn ipv4_tcp_consistent() -> (Vec<u8>, PacketHeaders) {
        let (mut frame, headers) = ipv4_tcp();
        frame[16..18].copy_from_slice(&58u16.to_be_bytes());
        frame[24..26].copy_from_slice(&[0, 0]);
        let checksum = ipv4_checksum(&frame[14..38]);
        frame[24..26].copy_from_slice(&checksum.to_be_bytes());
        (frame, headers)
    }

    fn round_trip(link_type: LinkType, headers: &PacketHeaders, frame: &[u8]) -> (DataForm, usize) {
        round_trip_on_wire(link_type, headers, frame, frame.len())
    }

    fn round_trip_on_wire(
        link_type: LinkType,
        headers: &PacketHeaders,
        frame: &[u8],
        wire_len: usize,
    ) -> (DataForm, usize) {
        let record = record(link_type, headers, wire_len);
        let mut stored = vec![0xee];
        let form = strip(&record, frame, &mut stored);
        assert_eq!(
            stored.len() - 1 + form.elided_len(),
            frame.len(),
            "{form:?}"
        );
        let mut back = vec![0xdd];
        assert!(restore(form, &record, &stored[1..], &mut back), "{form:?}");
        assert_eq!(&back[1..], frame, "{form:?}");
        (form, stored.len() - 1)
    }

    #[test]
    fn ipv4_fields_and_ports_are_left_out_and_put_back() {
        let (frame, headers) = ipv4_tcp();
        let (form, stored) = round_trip(LinkType::ETHERNET, &headers, &frame);
        assert_eq!(form, columns_form(true, false, true));
        assert_eq!(stored, frame.len() - 30);
    }

    #[test]
    fn a_field_that_differs_from_its_column_keeps_the_frame_verbatim() {
        let (frame, headers) = ipv4_tcp();
        for change in [
            |h: &mut PacketHeaders| h.ip_ttl = Some(63),
            |h: &mut PacketHeaders| h.ip_id = None,
            |h: &mut PacketHeaders| h.src_mac = Some([0; 6]),
            |h: &mut PacketHeaders| h.dst_addr = Some(Addr16::from_v4_bytes([192, 168, 1, 3])),
            |h: &mut PacketHeaders| h.ip_proto = Some(17),
        ] {
            let mut changed = headers;
            change(&mut changed);
            assert_eq!(
                round_trip(LinkType::ETHERNET, &changed, &frame).0,
                DataForm::VERBATIM
            );
        }
        // Ports that differ (or are cut off) are kept; the IP fields still go.
        let mut other_port = headers;
        other_port.dst_port = Some(80);
        let form = round_trip(LinkType::ETHERNET, &other_port, &frame).0;
        assert_eq!(form, columns_form(true, false, false));
        let form = round_trip(LinkType::ETHERNET, &headers, &frame[..40]).0;
        assert_eq!(form, columns_form(true, false, false));
        // A frame cut inside the IP header, or with another link type, is kept.
        for (link_type, cut) in [(LinkType::ETHERNET, 33), (LinkType::LINUX_SLL, frame.len())] {
            assert_eq!(
                round_trip(link_type, &headers, &frame[..cut]).0,
                DataForm::VERBATIM
            );
        }
    }

    #[test]
    fn ipv6_and_raw_ip_frames_round_trip() {
        let src = Addr16([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let dst = Addr16([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let mut ip = vec![0x60, 0, 0, 0, 0, 12, 17, 255];
        ip.extend_from_slice(&src.0);
        ip.extend_from_slice(&dst.0);
        ip.extend_from_slice(&[0, 53, 0x30, 0x39, 0, 12, 0, 0, 9, 9, 9, 9]);
        let headers = PacketHeaders {
            src_mac: Some([7; 6]),
            dst_mac: Some([1; 6]),
            eth_type: Some(0x86dd),
            ip_version: Some(6),
            src_addr: Some(src),
            dst_addr: Some(dst),
            ip_proto: Some(17),
            ip_ttl: Some(255),
            src_port: Some(53),
            dst_port: Some(12345),
            ..PacketHeaders::default()
        };
        let mut frame = vec![1; 6];
        frame.extend_from_slice(&[7; 6]);
        frame.extend_from_slice(&[0x86, 0xdd]);
        frame.extend_from_slice(&ip);
        let (form, stored) = round_trip(LinkType::ETHERNET, &headers, &frame);
        assert_eq!(
            (form, stored),
            (
                with_length(columns_form(true, true, true)),
                frame.len() - 53
            )
        );
        let (form, stored) = round_trip(LinkType::RAW, &headers, &ip);
        assert_eq!(
            (form, stored),
            (with_length(columns_form(false, true, true)), ip.len() - 39)
        );
        let (mut v4, v4_headers) = ipv4_tcp();
        v4.drain(..ETHERNET_LEN);
        let (form, stored) = round_trip(LinkType::IPV4, &v4_headers, &v4);
        assert_eq!(
            (form, stored),
            (columns_form(false, false, true), v4.len() - 16)
        );
    }

    #[test]
    fn restore_refuses_bytes_too_short_for_their_form_or_missing_fields() {
        let (frame, headers) = ipv4_tcp();
        let mut stored = Vec::new();
        let record = record(LinkType::ETHERNET, &headers, frame.len());
        let form = strip(&record, &frame, &mut stored);
        let mut out = Vec::new();
        // IHL 6 needs eight kept bytes and four of options.
        assert!(!restore(form, &record, &stored[..11], &mut out));
        assert!(!restore(form, &record, &[], &mut out));
        let mut no_ports = record;
        no_ports.headers.src_port = None;
        assert!(!restore(form, &no_ports, &stored, &mut out));
        // A length left out that the wire length cannot give.
        let length = with_length(form);
        let mut short = record;
        short.wire_len = 10;
        assert!(!restore(length, &short, &stored, &mut out));
        assert!(out.is_empty());
        assert_eq!(DataForm::from_code(MAX_CODE + 1), None);
        // IPv6 headers have no checksum to leave out.
        let ipv6_checksum = 1 + (IPV6 | IPV4_CHECKSUM);
        assert_eq!(DataForm::from_code(ipv6_checksum), None);
        for code in 0..=MAX_CODE {
            let parts = DataForm { code }.parts();
            let expected = (!parts.is_some_and(|p| p.ipv6 && p.checksum)).then_some(code);
            assert_eq!(DataForm::from_code(code).map(DataForm::code), expected);
        }
    }

    #[test]
    fn a_right_ipv4_length_and_checksum_are_left_out_and_computed_again() {
        let (frame, headers) = ipv4_tcp_consistent();
        // The checksum is right: the header's one's-complement sum is all ones.
        assert_eq!(ones_complement_sum(&frame[14..38]), 0xffff);
        let all = DataForm::elided(Parts {
            ethernet: true,
            ipv6: false,
            ports: true,
            length: true,
            checksum: true,
        });
        assert_eq!(
            round_trip(LinkType::ETHERNET, &headers, &frame),
            (all, frame.len() - 34)
        );
        // Cut by the snap length: the length still follows from the wire length.
        assert_eq!(
            round_trip_on_wire(LinkType::ETHERNET, &headers, &frame[..50], frame.len()),
            (all, 50 - 34)
        );
        // Padded to a longer frame on the wire (Ethernet's 60-byte minimum): the
        // length is kept, the checksum still goes.
        let padded = DataForm::elided(Parts {
            length: false,
            ..all.parts().expect("parts")
        });
        assert_eq!(
            round_trip_on_wire(LinkType::ETHERNET, &headers, &frame, frame.len() + 6).0,
            padded
        );
        // A wrong checksum (offloaded to the card, say) is kept as it is.
        let mut wrong = frame.clone();
        wrong[25] ^= 1;
        let kept = DataForm::elided(Parts {
            checksum: false,
            ..all.parts().expect("parts")
        });
        assert_eq!(
            round_trip(LinkType::ETHERNET, &headers, &wrong),
            (kept, frame.len() - 32)
        );
    }

    #[test]
    fn a_checksum_of_all_ones_where_zero_is_computed_is_kept() {
        // One's complement has two zeros: a header whose checksum computes to
        // 0x0000 sums to all ones with 0xffff in the field too. Only the computed
        // value is left out, so the other one reads back as it was.
        let (mut frame, mut headers) = ipv4_tcp_consistent();
        let id = (0..=u16::MAX)
            .find(|&id| {
                frame[18..20].copy_from_slice(&id.to_be_bytes());
                ipv4_checksum(&frame[14..38]) == 0
            })
            .expect("an identification with checksum 0");
        headers.ip_id = Some(id);
        frame[24..26].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(ones_complement_sum(&frame[14..38]), 0xffff);
        let (form, stored) = round_trip(LinkType::ETHERNET, &headers, &frame);
        assert!(!form.parts().expect("parts").checksum);
        assert_eq!(stored, frame.len() - 32);
        frame[24..26].copy_from_slice(&[0, 0]);
        let (form, _) = round_trip(LinkType::ETHERNET, &headers, &frame);
        assert!(form.parts().expect("parts").checksum);
    }

    #[test]
    fn the_ipv4_checksum_is_the_internet_checksum() {
        // A UDP packet's header with its checksum, 0xb861 (RFC 1071's algorithm,
        // as Wikipedia's "IPv4 header checksum" works it through).
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&header), 0xb861);
        assert_eq!(ones_complement_sum(&header), 0xffff);
        // With options (IHL 6), and an odd tail for the plain sum.
        let mut longer = header.to_vec();
        longer[0] = 0x46;
        longer.extend_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        let checksum = ipv4_checksum(&longer);
        longer[10..12].copy_from_slice(&checksum.to_be_bytes());
        assert_eq!(ones_complement_sum(&longer), 0xffff);
        assert_eq!(ones_complement_sum(&[0x01]), 0x0100);
    }
}
