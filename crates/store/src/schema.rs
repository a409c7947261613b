//! The `packets` table: its Arrow schema, a builder that turns packet records into
//! record batches, and a view that reads them back row by row.
//!
//! The column set is the on-disk contract of packet segments; `docs/formats/segment.md`
//! documents it column by column. Any Arrow/Parquet tool reads it as is.

use std::sync::{Arc, LazyLock};

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, BooleanArray, BooleanBuilder,
    FixedSizeBinaryArray, FixedSizeBinaryBuilder, RecordBatch, TimestampNanosecondArray,
    TimestampNanosecondBuilder, UInt8Array, UInt8Builder, UInt16Array, UInt16Builder, UInt32Array,
    UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use hindsight_model::{Addr16, DecodeStatus, LinkType, PacketHeaders, PacketRecord};

/// Column names of the `packets` table, in schema order.
pub mod col {
    /// Capture timestamp, `Timestamp(ns, UTC)`.
    pub const TS: &str = "ts";
    /// Interface index within the capture source.
    pub const IFACE: &str = "iface";
    /// Link type (tcpdump.org LINKTYPE_ value).
    pub const LINK_TYPE: &str = "link_type";
    /// Length on the wire in bytes.
    pub const WIRE_LEN: &str = "wire_len";
    /// Length captured by the source in bytes (before hindsight's own snap length).
    pub const CAP_LEN: &str = "cap_len";
    /// Decode status code (see `DecodeStatus`).
    pub const STATUS: &str = "status";
    /// Ethernet source MAC.
    pub const ETH_SRC: &str = "eth_src";
    /// Ethernet destination MAC.
    pub const ETH_DST: &str = "eth_dst";
    /// Ethertype after VLAN tags.
    pub const ETH_TYPE: &str = "eth_type";
    /// Outer VLAN ID.
    pub const VLAN_OUTER: &str = "vlan_outer";
    /// Inner VLAN ID (QinQ).
    pub const VLAN_INNER: &str = "vlan_inner";
    /// IP version, 4 or 6.
    pub const IP_VERSION: &str = "ip_version";
    /// Source address, 16 bytes, IPv4 mapped.
    pub const SRC_ADDR: &str = "src_addr";
    /// Destination address, 16 bytes, IPv4 mapped.
    pub const DST_ADDR: &str = "dst_addr";
    /// Transport protocol number.
    pub const IP_PROTO: &str = "ip_proto";
    /// IPv4 TTL or IPv6 hop limit.
    pub const IP_TTL: &str = "ip_ttl";
    /// IPv4 identification or IPv6 fragment identification (low 16 bits).
    pub const IP_ID: &str = "ip_id";
    /// Fragment offset in 8-byte units.
    pub const FRAG_OFFSET: &str = "frag_offset";
    /// More-fragments flag.
    pub const MORE_FRAGMENTS: &str = "more_fragments";
    /// IPv4 don't-fragment flag.
    pub const DONT_FRAGMENT: &str = "dont_fragment";
    /// Transport source port.
    pub const SRC_PORT: &str = "src_port";
    /// Transport destination port.
    pub const DST_PORT: &str = "dst_port";
    /// TCP flags (low 12 bits of the flags word).
    pub const TCP_FLAGS: &str = "tcp_flags";
    /// ICMP/ICMPv6 type.
    pub const ICMP_TYPE: &str = "icmp_type";
    /// ICMP/ICMPv6 code.
    pub const ICMP_CODE: &str = "icmp_code";
    /// The first captured bytes of the frame (hindsight's snap length), link header included.
    pub const DATA: &str = "data";
}

/// Length of an Ethernet MAC address column value.
const MAC_LEN: i32 = 6;
/// Length of an [`Addr16`] column value.
const ADDR_LEN: i32 = 16;

static PACKETS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let ts_type = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new(col::TS, ts_type, false),
        Field::new(col::IFACE, DataType::UInt32, false),
        Field::new(col::LINK_TYPE, DataType::UInt16, false),
        Field::new(col::WIRE_LEN, DataType::UInt32, false),
        Field::new(col::CAP_LEN, DataType::UInt32, false),
        Field::new(col::STATUS, DataType::UInt8, false),
        Field::new(col::ETH_SRC, DataType::FixedSizeBinary(MAC_LEN), true),
        Field::new(col::ETH_DST, DataType::FixedSizeBinary(MAC_LEN), true),
        Field::new(col::ETH_TYPE, DataType::UInt16, true),
        Field::new(col::VLAN_OUTER, DataType::UInt16, true),
        Field::new(col::VLAN_INNER, DataType::UInt16, true),
        Field::new(col::IP_VERSION, DataType::UInt8, true),
        Field::new(col::SRC_ADDR, DataType::FixedSizeBinary(ADDR_LEN), true),
        Field::new(col::DST_ADDR, DataType::FixedSizeBinary(ADDR_LEN), true),
        Field::new(col::IP_PROTO, DataType::UInt8, true),
        Field::new(col::IP_TTL, DataType::UInt8, true),
        Field::new(col::IP_ID, DataType::UInt16, true),
        Field::new(col::FRAG_OFFSET, DataType::UInt16, true),
        Field::new(col::MORE_FRAGMENTS, DataType::Boolean, true),
        Field::new(col::DONT_FRAGMENT, DataType::Boolean, true),
        Field::new(col::SRC_PORT, DataType::UInt16, true),
        Field::new(col::DST_PORT, DataType::UInt16, true),
        Field::new(col::TCP_FLAGS, DataType::UInt16, true),
        Field::new(col::ICMP_TYPE, DataType::UInt8, true),
        Field::new(col::ICMP_CODE, DataType::UInt8, true),
        Field::new(col::DATA, DataType::Binary, false),
    ]))
});

/// Returns the Arrow schema of the `packets` table.
pub fn packets_schema() -> SchemaRef {
    Arc::clone(&PACKETS_SCHEMA)
}

/// Accumulates packet records column by column and emits Arrow record batches.
#[derive(Debug)]
pub struct PacketBatchBuilder {
    ts: TimestampNanosecondBuilder,
    iface: UInt32Builder,
    link_type: UInt16Builder,
    wire_len: UInt32Builder,
    cap_len: UInt32Builder,
    status: UInt8Builder,
    eth_src: FixedSizeBinaryBuilder,
    eth_dst: FixedSizeBinaryBuilder,
    eth_type: UInt16Builder,
    vlan_outer: UInt16Builder,
    vlan_inner: UInt16Builder,
    ip_version: UInt8Builder,
    src_addr: FixedSizeBinaryBuilder,
    dst_addr: FixedSizeBinaryBuilder,
    ip_proto: UInt8Builder,
    ip_ttl: UInt8Builder,
    ip_id: UInt16Builder,
    frag_offset: UInt16Builder,
    more_fragments: BooleanBuilder,
    dont_fragment: BooleanBuilder,
    src_port: UInt16Builder,
    dst_port: UInt16Builder,
    tcp_flags: UInt16Builder,
    icmp_type: UInt8Builder,
    icmp_code: UInt8Builder,
    data: BinaryBuilder,
    rows: usize,
}

impl PacketBatchBuilder {
    /// Returns a builder with room for `capacity` rows and `data_capacity` bytes of packet data.
    pub fn with_capacity(capacity: usize, data_capacity: usize) -> Self {
        Self {
            ts: TimestampNanosecondBuilder::with_capacity(capacity).with_timezone("UTC"),
            iface: UInt32Builder::with_capacity(capacity),
            link_type: UInt16Builder::with_capacity(capacity),
            wire_len: UInt32Builder::with_capacity(capacity),
            cap_len: UInt32Builder::with_capacity(capacity),
            status: UInt8Builder::with_capacity(capacity),
            eth_src: FixedSizeBinaryBuilder::with_capacity(capacity, MAC_LEN),
            eth_dst: FixedSizeBinaryBuilder::with_capacity(capacity, MAC_LEN),
            eth_type: UInt16Builder::with_capacity(capacity),
            vlan_outer: UInt16Builder::with_capacity(capacity),
            vlan_inner: UInt16Builder::with_capacity(capacity),
            ip_version: UInt8Builder::with_capacity(capacity),
            src_addr: FixedSizeBinaryBuilder::with_capacity(capacity, ADDR_LEN),
            dst_addr: FixedSizeBinaryBuilder::with_capacity(capacity, ADDR_LEN),
            ip_proto: UInt8Builder::with_capacity(capacity),
            ip_ttl: UInt8Builder::with_capacity(capacity),
            ip_id: UInt16Builder::with_capacity(capacity),
            frag_offset: UInt16Builder::with_capacity(capacity),
            more_fragments: BooleanBuilder::with_capacity(capacity),
            dont_fragment: BooleanBuilder::with_capacity(capacity),
            src_port: UInt16Builder::with_capacity(capacity),
            dst_port: UInt16Builder::with_capacity(capacity),
            tcp_flags: UInt16Builder::with_capacity(capacity),
            icmp_type: UInt8Builder::with_capacity(capacity),
            icmp_code: UInt8Builder::with_capacity(capacity),
            data: BinaryBuilder::with_capacity(capacity, data_capacity),
            rows: 0,
        }
    }

    /// Returns the number of rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Returns true if no row was appended since the last [`finish`](Self::finish).
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends one packet: its record and the bytes to keep (already cut to the snap length).
    pub fn append(&mut self, record: &PacketRecord, data: &[u8]) {
        let h = &record.headers;
        self.ts.append_value(record.ts_nanos);
        self.iface.append_value(record.iface);
        self.link_type.append_value(record.link_type.0);
        self.wire_len.append_value(record.wire_len);
        self.cap_len.append_value(record.cap_len);
        self.status.append_value(h.status as u8);
        append_fixed(&mut self.eth_src, h.src_mac.as_ref().map(|m| &m[..]));
        append_fixed(&mut self.eth_dst, h.dst_mac.as_ref().map(|m| &m[..]));
        self.eth_type.append_option(h.eth_type);
        self.vlan_outer.append_option(h.vlan_outer);
        self.vlan_inner.append_option(h.vlan_inner);
        self.ip_version.append_option(h.ip_version);
        append_fixed(&mut self.src_addr, h.src_addr.as_ref().map(|a| &a.0[..]));
        append_fixed(&mut self.dst_addr, h.dst_addr.as_ref().map(|a| &a.0[..]));
        self.ip_proto.append_option(h.ip_proto);
        self.ip_ttl.append_option(h.ip_ttl);
        self.ip_id.append_option(h.ip_id);
        self.frag_offset.append_option(h.frag_offset);
        self.more_fragments.append_option(h.more_fragments);
        self.dont_fragment.append_option(h.dont_fragment);
        self.src_port.append_option(h.src_port);
        self.dst_port.append_option(h.dst_port);
        self.tcp_flags.append_option(h.tcp_flags);
        self.icmp_type.append_option(h.icmp_type);
        self.icmp_code.append_option(h.icmp_code);
        self.data.append_value(data);
        self.rows += 1;
    }

    /// Returns the rows appended so far as a record batch and resets the builder.
    pub fn finish(&mut self) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.ts.finish()),
            Arc::new(self.iface.finish()),
            Arc::new(self.link_type.finish()),
            Arc::new(self.wire_len.finish()),
            Arc::new(self.cap_len.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.eth_src.finish()),
            Arc::new(self.eth_dst.finish()),
            Arc::new(self.eth_type.finish()),
            Arc::new(self.vlan_outer.finish()),
            Arc::new(self.vlan_inner.finish()),
            Arc::new(self.ip_version.finish()),
            Arc::new(self.src_addr.finish()),
            Arc::new(self.dst_addr.finish()),
            Arc::new(self.ip_proto.finish()),
            Arc::new(self.ip_ttl.finish()),
            Arc::new(self.ip_id.finish()),
            Arc::new(self.frag_offset.finish()),
            Arc::new(self.more_fragments.finish()),
            Arc::new(self.dont_fragment.finish()),
            Arc::new(self.src_port.finish()),
            Arc::new(self.dst_port.finish()),
            Arc::new(self.tcp_flags.finish()),
            Arc::new(self.icmp_type.finish()),
            Arc::new(self.icmp_code.finish()),
            Arc::new(self.data.finish()),
        ];
        self.rows = 0;
        RecordBatch::try_new(packets_schema(), columns)
            .expect("builder columns match the packets schema by construction")
    }
}

fn append_fixed(builder: &mut FixedSizeBinaryBuilder, value: Option<&[u8]>) {
    match value {
        Some(bytes) => builder
            .append_value(bytes)
            .expect("fixed-size values have the column's width by construction"),
        None => builder.append_null(),
    }
}

/// Reads the rows of a `packets` record batch (or a projection of it) back into
/// [`PacketRecord`]s. Columns missing from the batch read as absent fields.
#[derive(Debug)]
pub struct PacketBatchView<'a> {
    ts: Option<&'a TimestampNanosecondArray>,
    iface: Option<&'a UInt32Array>,
    link_type: Option<&'a UInt16Array>,
    wire_len: Option<&'a UInt32Array>,
    cap_len: Option<&'a UInt32Array>,
    status: Option<&'a UInt8Array>,
    eth_src: Option<&'a FixedSizeBinaryArray>,
    eth_dst: Option<&'a FixedSizeBinaryArray>,
    eth_type: Option<&'a UInt16Array>,
    vlan_outer: Option<&'a UInt16Array>,
    vlan_inner: Option<&'a UInt16Array>,
    ip_version: Option<&'a UInt8Array>,
    src_addr: Option<&'a FixedSizeBinaryArray>,
    dst_addr: Option<&'a FixedSizeBinaryArray>,
    ip_proto: Option<&'a UInt8Array>,
    ip_ttl: Option<&'a UInt8Array>,
    ip_id: Option<&'a UInt16Array>,
    frag_offset: Option<&'a UInt16Array>,
    more_fragments: Option<&'a BooleanArray>,
    dont_fragment: Option<&'a BooleanArray>,
    src_port: Option<&'a UInt16Array>,
    dst_port: Option<&'a UInt16Array>,
    tcp_flags: Option<&'a UInt16Array>,
    icmp_type: Option<&'a UInt8Array>,
    icmp_code: Option<&'a UInt8Array>,
    data: Option<&'a BinaryArray>,
    rows: usize,
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Option<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|array| array.as_any().downcast_ref::<T>())
}

#[inline]
fn opt<A: ArrayAccessor>(array: Option<&A>, row: usize) -> Option<A::Item> {
    let array = array?;
    if array.is_null(row) {
        None
    } else {
        Some(array.value_at(row))
    }
}

/// Reads one value of an Arrow array whose nullness was already checked.
trait ArrayAccessor: Array {
    type Item;
    fn value_at(&self, row: usize) -> Self::Item;
}

macro_rules! primitive_accessor {
    ($array:ty, $item:ty) => {
        impl ArrayAccessor for $array {
            type Item = $item;
            #[inline]
            fn value_at(&self, row: usize) -> $item {
                self.value(row)
            }
        }
    };
}
primitive_accessor!(UInt8Array, u8);
primitive_accessor!(UInt16Array, u16);
primitive_accessor!(UInt32Array, u32);
primitive_accessor!(TimestampNanosecondArray, i64);
primitive_accessor!(BooleanArray, bool);

impl<'a> PacketBatchView<'a> {
    /// Returns a view of `batch`; it must use the `packets` column names and types.
    pub fn new(batch: &'a RecordBatch) -> Self {
        Self {
            ts: column(batch, col::TS),
            iface: column(batch, col::IFACE),
            link_type: column(batch, col::LINK_TYPE),
            wire_len: column(batch, col::WIRE_LEN),
            cap_len: column(batch, col::CAP_LEN),
            status: column(batch, col::STATUS),
            eth_src: column(batch, col::ETH_SRC),
            eth_dst: column(batch, col::ETH_DST),
            eth_type: column(batch, col::ETH_TYPE),
            vlan_outer: column(batch, col::VLAN_OUTER),
            vlan_inner: column(batch, col::VLAN_INNER),
            ip_version: column(batch, col::IP_VERSION),
            src_addr: column(batch, col::SRC_ADDR),
            dst_addr: column(batch, col::DST_ADDR),
            ip_proto: column(batch, col::IP_PROTO),
            ip_ttl: column(batch, col::IP_TTL),
            ip_id: column(batch, col::IP_ID),
            frag_offset: column(batch, col::FRAG_OFFSET),
            more_fragments: column(batch, col::MORE_FRAGMENTS),
            dont_fragment: column(batch, col::DONT_FRAGMENT),
            src_port: column(batch, col::SRC_PORT),
            dst_port: column(batch, col::DST_PORT),
            tcp_flags: column(batch, col::TCP_FLAGS),
            icmp_type: column(batch, col::ICMP_TYPE),
            icmp_code: column(batch, col::ICMP_CODE),
            data: column(batch, col::DATA),
            rows: batch.num_rows(),
        }
    }

    /// Returns the number of rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Returns true if the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Returns the record of row `row` (which must be below [`len`](Self::len)).
    #[inline]
    pub fn record(&self, row: usize) -> PacketRecord {
        PacketRecord {
            ts_nanos: opt(self.ts, row).unwrap_or(0),
            wire_len: opt(self.wire_len, row).unwrap_or(0),
            cap_len: opt(self.cap_len, row).unwrap_or(0),
            link_type: LinkType(opt(self.link_type, row).unwrap_or(0)),
            iface: opt(self.iface, row).unwrap_or(0),
            headers: PacketHeaders {
                status: opt(self.status, row)
                    .and_then(DecodeStatus::from_code)
                    .unwrap_or_default(),
                src_mac: fixed(self.eth_src, row),
                dst_mac: fixed(self.eth_dst, row),
                eth_type: opt(self.eth_type, row),
                vlan_outer: opt(self.vlan_outer, row),
                vlan_inner: opt(self.vlan_inner, row),
                ip_version: opt(self.ip_version, row),
                src_addr: fixed(self.src_addr, row).map(Addr16),
                dst_addr: fixed(self.dst_addr, row).map(Addr16),
                ip_proto: opt(self.ip_proto, row),
                ip_ttl: opt(self.ip_ttl, row),
                // Not a column: flows are built from it at ingest.
                ip_len: None,
                ip_id: opt(self.ip_id, row),
                frag_offset: opt(self.frag_offset, row),
                more_fragments: opt(self.more_fragments, row),
                dont_fragment: opt(self.dont_fragment, row),
                src_port: opt(self.src_port, row),
                dst_port: opt(self.dst_port, row),
                tcp_flags: opt(self.tcp_flags, row),
                icmp_type: opt(self.icmp_type, row),
                icmp_code: opt(self.icmp_code, row),
            },
        }
    }

    /// Returns the stored bytes of row `row`, or an empty slice if the column is not projected.
    pub fn data(&self, row: usize) -> &'a [u8] {
        self.data.map_or(&[], |array| array.value(row))
    }
}

#[inline]
fn fixed<const N: usize>(array: Option<&FixedSizeBinaryArray>, row: usize) -> Option<[u8; N]> {
    let array = array?;
    if array.is_null(row) {
        return None;
    }
    array.value(row).try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_record() -> PacketRecord {
        PacketRecord {
            ts_nanos: 1_330_000_000_123_456_789,
            wire_len: 1514,
            cap_len: 1514,
            link_type: LinkType::ETHERNET,
            iface: 2,
            headers: PacketHeaders {
                status: DecodeStatus::Complete,
                src_mac: Some([0, 1, 2, 3, 4, 5]),
                dst_mac: Some([6, 7, 8, 9, 10, 11]),
                eth_type: Some(0x0800),
                vlan_outer: Some(100),
                ip_version: Some(4),
                src_addr: Some(Addr16::from_v4_bytes([10, 0, 0, 1])),
                dst_addr: Some(Addr16::from_v4_bytes([192, 168, 1, 2])),
                ip_proto: Some(6),
                ip_ttl: Some(64),
                ip_id: Some(4321),
                frag_offset: Some(0),
                more_fragments: Some(false),
                dont_fragment: Some(true),
                src_port: Some(443),
                dst_port: Some(51000),
                tcp_flags: Some(0x18),
                ..PacketHeaders::default()
            },
        }
    }

    #[test]
    fn builder_and_view_round_trip_every_field() {
        let full = sample_record();
        let empty = PacketRecord {
            headers: PacketHeaders {
                status: DecodeStatus::NonIp,
                eth_type: Some(0x0806),
                ..PacketHeaders::default()
            },
            ..PacketRecord::default()
        };
        let mut builder = PacketBatchBuilder::with_capacity(2, 64);
        builder.append(&full, b"abc");
        builder.append(&empty, b"");
        assert_eq!(builder.len(), 2);
        let batch = builder.finish();
        assert!(builder.is_empty());
        assert_eq!(batch.schema(), packets_schema());

        let view = PacketBatchView::new(&batch);
        assert_eq!(view.len(), 2);
        assert_eq!(view.record(0), full);
        assert_eq!(view.data(0), b"abc");
        assert_eq!(view.record(1), empty);
        assert_eq!(view.data(1), b"");
    }
}
