//! Covering postings: the whole rows (every stored field and the stored packet
//! bytes) of an address that occurs only a few times in a segment, kept next to its
//! postings in the address index, so a query for a rare address is answered from the
//! index without opening the segment.
//!
//! The byte layout (documented in `docs/formats/index.md`) is a version byte, then
//! one entry per row in ascending row order:
//!
//! ```text
//! row gap        varint   row - previous row (the first: the row itself)
//! ts delta       varint   zigzag(ts - previous ts) (the first: zigzag(ts))
//! wire_len       varint
//! cap_len        varint
//! link_type      varint
//! iface          varint
//! status         u8       DecodeStatus code
//! present        varint   bit i set: optional field i follows (order of FIELDS)
//! fields         ...      MACs 6 bytes, addresses 16 bytes, numbers varint, flags none
//!                         (a flag's value is its second bit in `present`)
//! data form      u8       `DataForm` code of the stored bytes (version 2 only;
//!                         version 1 rows are verbatim)
//! data length    varint
//! data           bytes    the stored form, as in the segment's `data` column
//! ```

use crate::{Addr16, DataForm, DecodeStatus, LinkType, PacketHeaders, PacketRecord, TunnelId};

/// Version byte of the layout above.
const VERSION: u8 = 2;
/// The version before rows had a data form byte.
const VERSION_VERBATIM: u8 = 1;

/// One row of a covering posting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoveredRow {
    /// Row number within the segment.
    pub row: u64,
    /// The stored fields of the row (`ip_len` is not stored and reads as absent).
    pub record: PacketRecord,
    /// Which header fields `data` leaves out (see [`crate::snap`]).
    pub form: DataForm,
    /// The stored packet bytes (cut to the snap length, in their stored form).
    pub data: Vec<u8>,
}

/// Appends rows of one address to a covering posting.
#[derive(Clone, Debug)]
pub struct CoveredRowsBuilder {
    bytes: Vec<u8>,
    rows: u32,
    previous_row: u64,
    previous_ts: i64,
}

impl Default for CoveredRowsBuilder {
    fn default() -> Self {
        Self {
            bytes: vec![VERSION],
            rows: 0,
            previous_row: 0,
            previous_ts: 0,
        }
    }
}

// Bits of `present`, in field order.
const SRC_MAC: u32 = 1 << 0;
const DST_MAC: u32 = 1 << 1;
const ETH_TYPE: u32 = 1 << 2;
const VLAN_OUTER: u32 = 1 << 3;
const VLAN_INNER: u32 = 1 << 4;
const IP_VERSION: u32 = 1 << 5;
const SRC_ADDR: u32 = 1 << 6;
const DST_ADDR: u32 = 1 << 7;
const IP_PROTO: u32 = 1 << 8;
const IP_TTL: u32 = 1 << 9;
const IP_ID: u32 = 1 << 10;
const FRAG_OFFSET: u32 = 1 << 11;
const MORE_FRAGMENTS: u32 = 1 << 12;
const MORE_FRAGMENTS_SET: u32 = 1 << 13;
const DONT_FRAGMENT: u32 = 1 << 14;
const DONT_FRAGMENT_SET: u32 = 1 << 15;
const SRC_PORT: u32 = 1 << 16;
const DST_PORT: u32 = 1 << 17;
const TCP_FLAGS: u32 = 1 << 18;
const ICMP_TYPE: u32 = 1 << 19;
const ICMP_CODE: u32 = 1 << 20;
const TUNNEL: u32 = 1 << 21;
const TUNNEL_SRC: u32 = 1 << 22;
const TUNNEL_DST: u32 = 1 << 23;
const TUNNEL_ID: u32 = 1 << 24;
const MPLS_LABEL: u32 = 1 << 25;

impl CoveredRowsBuilder {
    /// Returns an empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the number of rows pushed.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// Returns the encoded size so far in bytes.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Returns the last row pushed, if any.
    pub fn last_row(&self) -> Option<u64> {
        (self.rows > 0).then_some(self.previous_row)
    }

    /// Appends row `row`, which must be above every row pushed before, with its
    /// stored bytes `data` of form `form`.
    pub fn push(&mut self, row: u64, record: &PacketRecord, form: DataForm, data: &[u8]) {
        let out = &mut self.bytes;
        let gap = if self.rows == 0 {
            row
        } else {
            row.saturating_sub(self.previous_row)
        };
        put_varint(out, gap);
        let delta = record.ts_nanos.wrapping_sub(self.previous_ts);
        put_varint(out, ((delta << 1) ^ (delta >> 63)) as u64);
        self.previous_row = row;
        self.previous_ts = record.ts_nanos;
        self.rows += 1;
        put_varint(out, u64::from(record.wire_len));
        put_varint(out, u64::from(record.cap_len));
        put_varint(out, u64::from(record.link_type.0));
        put_varint(out, u64::from(record.iface));
        let h = &record.headers;
        out.push(h.status as u8);
        let mut present = 0u32;
        let flags = [
            (h.src_mac.is_some(), SRC_MAC),
            (h.dst_mac.is_some(), DST_MAC),
            (h.eth_type.is_some(), ETH_TYPE),
            (h.vlan_outer.is_some(), VLAN_OUTER),
            (h.vlan_inner.is_some(), VLAN_INNER),
            (h.ip_version.is_some(), IP_VERSION),
            (h.src_addr.is_some(), SRC_ADDR),
            (h.dst_addr.is_some(), DST_ADDR),
            (h.ip_proto.is_some(), IP_PROTO),
            (h.ip_ttl.is_some(), IP_TTL),
            (h.ip_id.is_some(), IP_ID),
            (h.frag_offset.is_some(), FRAG_OFFSET),
            (h.more_fragments.is_some(), MORE_FRAGMENTS),
            (h.more_fragments == Some(true), MORE_FRAGMENTS_SET),
            (h.dont_fragment.is_some(), DONT_FRAGMENT),
            (h.dont_fragment == Some(true), DONT_FRAGMENT_SET),
            (h.src_port.is_some(), SRC_PORT),
            (h.dst_port.is_some(), DST_PORT),
            (h.tcp_flags.is_some(), TCP_FLAGS),
            (h.icmp_type.is_some(), ICMP_TYPE),
            (h.icmp_code.is_some(), ICMP_CODE),
            (h.tunnel.is_some(), TUNNEL),
            (h.tunnel_src.is_some(), TUNNEL_SRC),
            (h.tunnel_dst.is_some(), TUNNEL_DST),
            (h.tunnel_id.is_some(), TUNNEL_ID),
            (h.mpls_label.is_some(), MPLS_LABEL),
        ];
        for (is_set, bit) in flags {
            if is_set {
                present |= bit;
            }
        }
        put_varint(out, u64::from(present));
        for mac in [h.src_mac, h.dst_mac].into_iter().flatten() {
            out.extend_from_slice(&mac);
        }
        for value in [h.eth_type, h.vlan_outer, h.vlan_inner]
            .into_iter()
            .flatten()
        {
            put_varint(out, u64::from(value));
        }
        if let Some(version) = h.ip_version {
            put_varint(out, u64::from(version));
        }
        for address in [h.src_addr, h.dst_addr].into_iter().flatten() {
            out.extend_from_slice(&address.0);
        }
        for value in [h.ip_proto, h.ip_ttl].into_iter().flatten() {
            put_varint(out, u64::from(value));
        }
        for value in [h.ip_id, h.frag_offset].into_iter().flatten() {
            put_varint(out, u64::from(value));
        }
        for value in [h.src_port, h.dst_port, h.tcp_flags].into_iter().flatten() {
            put_varint(out, u64::from(value));
        }
        for value in [h.icmp_type, h.icmp_code].into_iter().flatten() {
            put_varint(out, u64::from(value));
        }
        if let Some(bits) = h.tunnel {
            put_varint(out, u64::from(bits));
        }
        for address in [h.tunnel_src, h.tunnel_dst].into_iter().flatten() {
            out.extend_from_slice(&address.0);
        }
        if let Some(id) = h.tunnel_id {
            put_varint(out, id.to_u64());
        }
        if let Some(label) = h.mpls_label {
            put_varint(out, u64::from(label));
        }
        out.push(form.code());
        put_varint(out, data.len() as u64);
        out.extend_from_slice(data);
    }

    /// Returns the encoded posting.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Decodes a covering posting; `None` if the bytes are not one (a corrupt entry).
pub fn decode_covered_rows(bytes: &[u8]) -> Option<Vec<CoveredRow>> {
    let (&version, mut rest) = bytes.split_first()?;
    if version != VERSION && version != VERSION_VERBATIM {
        return None;
    }
    let mut rows = Vec::new();
    let mut row = 0u64;
    let mut ts = 0i64;
    while !rest.is_empty() {
        let cursor = &mut rest;
        let gap = varint(cursor)?;
        if !rows.is_empty() && gap == 0 {
            return None;
        }
        row = row.checked_add(gap)?;
        let zigzag = varint(cursor)?;
        let delta = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        ts = ts.wrapping_add(delta);
        let wire_len = narrow(varint(cursor)?)?;
        let cap_len = narrow(varint(cursor)?)?;
        let link_type = LinkType(narrow(varint(cursor)?)?);
        let iface = narrow(varint(cursor)?)?;
        let status = DecodeStatus::from_code(take::<1>(cursor)?[0])?;
        let present: u32 = narrow(varint(cursor)?)?;
        let has = |bit: u32| present & bit != 0;
        let mut h = PacketHeaders {
            status,
            ..PacketHeaders::default()
        };
        if has(SRC_MAC) {
            h.src_mac = Some(take::<6>(cursor)?);
        }
        if has(DST_MAC) {
            h.dst_mac = Some(take::<6>(cursor)?);
        }
        h.eth_type = optional(cursor, has(ETH_TYPE))?;
        h.vlan_outer = optional(cursor, has(VLAN_OUTER))?;
        h.vlan_inner = optional(cursor, has(VLAN_INNER))?;
        h.ip_version = optional(cursor, has(IP_VERSION))?;
        if has(SRC_ADDR) {
            h.src_addr = Some(Addr16(take::<16>(cursor)?));
        }
        if has(DST_ADDR) {
            h.dst_addr = Some(Addr16(take::<16>(cursor)?));
        }
        h.ip_proto = optional(cursor, has(IP_PROTO))?;
        h.ip_ttl = optional(cursor, has(IP_TTL))?;
        h.ip_id = optional(cursor, has(IP_ID))?;
        h.frag_offset = optional(cursor, has(FRAG_OFFSET))?;
        h.more_fragments = has(MORE_FRAGMENTS).then_some(has(MORE_FRAGMENTS_SET));
        h.dont_fragment = has(DONT_FRAGMENT).then_some(has(DONT_FRAGMENT_SET));
        h.src_port = optional(cursor, has(SRC_PORT))?;
        h.dst_port = optional(cursor, has(DST_PORT))?;
        h.tcp_flags = optional(cursor, has(TCP_FLAGS))?;
        h.icmp_type = optional(cursor, has(ICMP_TYPE))?;
        h.icmp_code = optional(cursor, has(ICMP_CODE))?;
        h.tunnel = optional(cursor, has(TUNNEL))?;
        if has(TUNNEL_SRC) {
            h.tunnel_src = Some(Addr16(take::<16>(cursor)?));
        }
        if has(TUNNEL_DST) {
            h.tunnel_dst = Some(Addr16(take::<16>(cursor)?));
        }
        if has(TUNNEL_ID) {
            h.tunnel_id = Some(TunnelId::from_u64(varint(cursor)?));
        }
        h.mpls_label = optional(cursor, has(MPLS_LABEL))?;
        let form = if version == VERSION_VERBATIM {
            DataForm::VERBATIM
        } else {
            DataForm::from_code(take::<1>(cursor)?[0])?
        };
        let data_len = usize::try_from(varint(cursor)?).ok()?;
        if data_len > cursor.len() {
            return None;
        }
        let (data, tail) = cursor.split_at(data_len);
        rows.push(CoveredRow {
            row,
            record: PacketRecord {
                ts_nanos: ts,
                wire_len,
                cap_len,
                link_type,
                iface,
                headers: h,
            },
            form,
            data: data.to_vec(),
        });
        rest = tail;
    }
    Some(rows)
}

/// Appends `value` as an unsigned LEB128 varint (7 bits a byte, low bits first).
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

pub(crate) fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        let part = u64::from(byte & 0x7f);
        if shift == 63 && part > 1 {
            return None;
        }
        value |= part << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn narrow<T: TryFrom<u64>>(value: u64) -> Option<T> {
    T::try_from(value).ok()
}

fn optional<T: TryFrom<u64>>(bytes: &mut &[u8], present: bool) -> Option<Option<T>> {
    if present {
        narrow(varint(bytes)?).map(Some)
    } else {
        Some(None)
    }
}

fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    if bytes.len() < N {
        return None;
    }
    let (head, rest) = bytes.split_at(N);
    *bytes = rest;
    head.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ts_nanos: i64, fill: bool) -> PacketRecord {
        let headers = if fill {
            PacketHeaders {
                status: DecodeStatus::Complete,
                src_mac: Some([1, 2, 3, 4, 5, 6]),
                dst_mac: Some([7, 8, 9, 10, 11, 12]),
                eth_type: Some(0x86dd),
                vlan_outer: Some(4094),
                vlan_inner: Some(7),
                ip_version: Some(6),
                src_addr: Some(Addr16([
                    0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                ])),
                dst_addr: Some(Addr16::from_v4_bytes([10, 0, 0, 1])),
                ip_proto: Some(17),
                ip_ttl: Some(255),
                ip_len: None,
                ip_id: Some(65535),
                frag_offset: Some(8191),
                more_fragments: Some(true),
                dont_fragment: Some(false),
                src_port: Some(53),
                dst_port: Some(65535),
                tcp_flags: Some(0xfff),
                icmp_type: Some(3),
                icmp_code: Some(13),
                tunnel: Some(crate::tunnel::VXLAN | crate::tunnel::IPIP),
                tunnel_src: Some(Addr16::from_v4_bytes([172, 16, 0, 1])),
                tunnel_dst: Some(Addr16::from_v4_bytes([172, 16, 0, 2])),
                tunnel_id: Some(TunnelId {
                    kind: crate::tunnel::VXLAN,
                    id: 0xff_ffff,
                }),
                mpls_label: Some(1 << 19),
            }
        } else {
            PacketHeaders {
                status: DecodeStatus::NonIp,
                ..PacketHeaders::default()
            }
        };
        PacketRecord {
            ts_nanos,
            wire_len: 70_000,
            cap_len: 128,
            link_type: LinkType::LINUX_SLL2,
            iface: 3,
            headers,
        }
    }

    #[test]
    fn rows_round_trip_every_field_and_out_of_order_times() {
        let elided = DataForm::from_code(2).unwrap();
        let rows = [
            (
                5,
                record(1_700_000_000_000_000_000, true),
                elided,
                vec![0xaa; 128],
            ),
            (
                6,
                record(1_699_999_999_000_000_000, false),
                DataForm::VERBATIM,
                Vec::new(),
            ),
            (90_000, record(-5, true), DataForm::VERBATIM, vec![1, 2, 3]),
        ];
        let mut builder = CoveredRowsBuilder::new();
        for (row, record, form, data) in &rows {
            builder.push(*row, record, *form, data);
        }
        assert_eq!(builder.rows(), 3);
        assert_eq!(builder.last_row(), Some(90_000));
        let decoded = decode_covered_rows(&builder.finish()).unwrap();
        let expected: Vec<CoveredRow> = rows
            .into_iter()
            .map(|(row, record, form, data)| CoveredRow {
                row,
                record,
                form,
                data,
            })
            .collect();
        assert_eq!(decoded, expected);
        assert_eq!(decode_covered_rows(&[VERSION]), Some(Vec::new()));
    }

    #[test]
    fn version_1_rows_without_a_form_byte_read_as_verbatim() {
        let mut builder = CoveredRowsBuilder::new();
        builder.push(1, &record(10, false), DataForm::VERBATIM, b"abc");
        let mut bytes = builder.finish();
        // version, gap, ts, wire_len (3 bytes), cap_len (2), link_type (2), iface,
        // status, present, then the form byte.
        let form_at = 1 + 1 + 1 + 3 + 2 + 2 + 1 + 1 + 1;
        assert_eq!(bytes[form_at], DataForm::VERBATIM.code());
        let mut bad_form = bytes.clone();
        bad_form[form_at] = 200;
        assert!(decode_covered_rows(&bad_form).is_none(), "unknown form");
        bytes.remove(form_at);
        bytes[0] = VERSION_VERBATIM;
        let rows = decode_covered_rows(&bytes).unwrap();
        assert_eq!(
            (rows[0].form, rows[0].data.as_slice()),
            (DataForm::VERBATIM, &b"abc"[..])
        );
        assert_eq!(rows[0].record, record(10, false));
    }

    #[test]
    fn damaged_postings_are_rejected_not_misread() {
        let mut builder = CoveredRowsBuilder::new();
        builder.push(1, &record(10, true), DataForm::VERBATIM, b"abcdef");
        let bytes = builder.finish();
        assert!(decode_covered_rows(&[]).is_none(), "empty");
        assert!(decode_covered_rows(&[3]).is_none(), "unknown version");
        // A version byte alone is an empty posting; any longer cut is damage.
        for cut in 2..bytes.len() {
            assert!(
                decode_covered_rows(&bytes[..cut]).is_none(),
                "cut at {cut} of {}",
                bytes.len()
            );
        }
        let mut bad_status = bytes.clone();
        // version, gap, ts (1 byte: zigzag(10) = 20), wire_len 70000 (3 bytes),
        // cap_len 128 (2 bytes), link_type 276 (2 bytes), iface, then status.
        bad_status[1 + 1 + 1 + 3 + 2 + 2 + 1] = 200;
        assert!(decode_covered_rows(&bad_status).is_none(), "bad status");
    }
}
