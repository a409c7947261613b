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
//! present        varint   a bit per header column, in schema order
//!                         (`packet_header_columns!`), set where it has a value;
//!                         a flag (boolean) takes a second bit, its value
//! fields         ...      each value in column order: MACs 6 bytes, addresses
//!                         16 bytes, numbers varint, flags none
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

/// How a header column's value is held in a posting.
trait Covered: Copy {
    /// Bits of `present` it takes: its presence, and for a flag its value.
    const BITS: u32 = 1;
    /// Its bits of `present`.
    fn flags(value: Option<Self>) -> u64 {
        u64::from(value.is_some())
    }
    fn put(self, out: &mut Vec<u8>);
    /// Reads a present value; `flags` are its bits of `present`.
    fn take(bytes: &mut &[u8], flags: u64) -> Option<Self>;
}

macro_rules! covered_varint {
    ($($ty:ty),*) => {$(
        impl Covered for $ty {
            fn put(self, out: &mut Vec<u8>) {
                put_varint(out, u64::from(self));
            }
            fn take(bytes: &mut &[u8], _: u64) -> Option<Self> {
                narrow(varint(bytes)?)
            }
        }
    )*};
}
covered_varint!(u8, u16, u32);

impl Covered for bool {
    const BITS: u32 = 2;
    fn flags(value: Option<Self>) -> u64 {
        u64::from(value.is_some()) | (u64::from(value == Some(true)) << 1)
    }
    fn put(self, _: &mut Vec<u8>) {}
    fn take(_: &mut &[u8], flags: u64) -> Option<Self> {
        Some(flags & 2 != 0)
    }
}

impl Covered for [u8; 6] {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self);
    }
    fn take(bytes: &mut &[u8], _: u64) -> Option<Self> {
        take(bytes)
    }
}

impl Covered for Addr16 {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
    fn take(bytes: &mut &[u8], _: u64) -> Option<Self> {
        take(bytes).map(Addr16)
    }
}

impl Covered for TunnelId {
    fn put(self, out: &mut Vec<u8>) {
        put_varint(out, self.to_u64());
    }
    fn take(bytes: &mut &[u8], _: u64) -> Option<Self> {
        varint(bytes).map(TunnelId::from_u64)
    }
}

/// The header fields of a row: `present` (each column's bits in column
/// order), then each present value in column order.
macro_rules! covered_headers {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $ty:ty;)*) => {
        fn put_headers(h: &PacketHeaders, out: &mut Vec<u8>) {
            let mut present = 0u64;
            let mut shift = 0;
            $(
                present |= <$ty as Covered>::flags(h.$field) << shift;
                shift += <$ty as Covered>::BITS;
            )*
            put_varint(out, present);
            $(if let Some(value) = h.$field {
                value.put(out);
            })*
        }

        /// `None` if the bytes are not headers, or name a column this build
        /// does not know (a posting written by a later one).
        fn take_headers(bytes: &mut &[u8], status: DecodeStatus) -> Option<PacketHeaders> {
            let present = varint(bytes)?;
            let mut h = PacketHeaders { status, ..PacketHeaders::default() };
            let mut shift = 0;
            $(
                let flags = (present >> shift) & ((1 << <$ty as Covered>::BITS) - 1);
                shift += <$ty as Covered>::BITS;
                if flags & 1 != 0 {
                    h.$field = Some(<$ty as Covered>::take(bytes, flags)?);
                }
            )*
            (present >> shift == 0).then_some(h)
        }
    };
}
crate::packet_header_columns!(covered_headers);

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
        out.push(record.headers.status as u8);
        put_headers(&record.headers, out);
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
        let h = take_headers(cursor, status)?;
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
                ip_dscp: Some(46),
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

    #[test]
    fn columns_added_later_read_as_absent_before_and_refused_after() {
        let mut builder = CoveredRowsBuilder::new();
        builder.push(1, &record(10, false), DataForm::VERBATIM, b"");
        let bytes = builder.finish();
        // version, gap, ts, wire_len (3 bytes), cap_len (2), link_type (2),
        // iface, status, then present (one byte: none).
        let present_at = 1 + 1 + 1 + 3 + 2 + 2 + 1 + 1;
        assert_eq!(bytes[present_at], 0);
        // A posting written before a column has no bit for it: absent, as
        // this record's are. One written by a later build, with a bit for a
        // column this build does not know, is refused rather than misread.
        assert_eq!(
            decode_covered_rows(&bytes).unwrap()[0].record,
            record(10, false)
        );
        let known: u32 = crate::col::HEADERS.len() as u32 + 2; // two flags
        let mut later = bytes[..present_at].to_vec();
        put_varint(&mut later, 1 << known);
        later.extend_from_slice(&bytes[present_at + 1..]);
        assert!(decode_covered_rows(&later).is_none(), "unknown column");
    }
}
