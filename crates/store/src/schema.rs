//! The `packets` table: its Arrow schema, a builder that turns packet records into
//! record batches, and a view that reads them back row by row.
//!
//! The column set is the on-disk contract of packet segments; `docs/formats/segment.md`
//! documents it column by column. Any Arrow/Parquet tool reads it as is.

use std::sync::{Arc, LazyLock};

use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, BooleanArray, FixedSizeBinaryArray,
    PrimitiveArray, RecordBatch, TimestampNanosecondArray, UInt8Array, UInt16Array, UInt32Array,
    UInt64Array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    DataType, Field, Schema, SchemaRef, TimeUnit, TimestampNanosecondType, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use hindsight_model::{
    Addr16, DataForm, DecodeStatus, LinkType, PacketHeaders, PacketRecord, TunnelId, snap,
};

pub use hindsight_model::col;

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
        Field::new(col::TUNNEL, DataType::UInt16, true),
        Field::new(col::TUNNEL_SRC, DataType::FixedSizeBinary(ADDR_LEN), true),
        Field::new(col::TUNNEL_DST, DataType::FixedSizeBinary(ADDR_LEN), true),
        Field::new(col::TUNNEL_ID, DataType::UInt64, true),
        Field::new(col::MPLS_LABEL, DataType::UInt32, true),
        // Nullable only so that segments written before it read with this schema.
        Field::new(col::DATA_FORM, DataType::UInt8, true),
        Field::new(col::DATA, DataType::Binary, false),
    ]))
});

/// Returns the Arrow schema of the `packets` table.
pub fn packets_schema() -> SchemaRef {
    Arc::clone(&PACKETS_SCHEMA)
}

/// One nullable column being built: values (a default where null) and validity.
/// Unlike Arrow's builders, which start each batch empty, it starts each batch
/// with the capacity of the last, so building a batch does not regrow buffers.
#[derive(Debug)]
struct Nullable<T> {
    values: Vec<T>,
    valid: Vec<bool>,
    nulls: usize,
    /// The value stored where the column is null.
    fill: T,
}

impl<T: Copy + Default> Nullable<T> {
    fn with_capacity(capacity: usize) -> Self {
        Self::filled_with(capacity, T::default())
    }
}

impl<T: Copy> Nullable<T> {
    fn filled_with(capacity: usize, fill: T) -> Self {
        Self {
            values: Vec::with_capacity(capacity),
            valid: Vec::with_capacity(capacity),
            nulls: 0,
            fill,
        }
    }

    #[inline]
    fn push(&mut self, value: Option<T>) {
        self.values.push(value.unwrap_or(self.fill));
        self.valid.push(value.is_some());
        self.nulls += usize::from(value.is_none());
    }

    /// Moves the last value to position `to`, shifting the ones after it.
    fn move_last_to(&mut self, to: usize) {
        self.values[to..].rotate_right(1);
        self.valid[to..].rotate_right(1);
    }

    /// Takes the values and the null buffer (none if every value is valid).
    fn take(&mut self) -> (Vec<T>, Option<NullBuffer>) {
        let values = take_vec(&mut self.values);
        // The validity is packed into bits, so its vector stays for the next batch.
        let nulls = match std::mem::take(&mut self.nulls) {
            0 => None,
            all if all == self.valid.len() => Some(NullBuffer::new_null(all)),
            _ => Some(NullBuffer::new(pack_bools(&self.valid))),
        };
        self.valid.clear();
        (values, nulls)
    }
}

/// Packs booleans into an Arrow bitmap (bit i of byte i / 8 is `bools[i]`), eight
/// at a time: the eight bytes (each 0 or 1) read as a little-endian word, times
/// a constant that moves byte i's low bit to bit 56 + i, leave the eight bits in
/// the top byte (the other products fall below bit 56 at distinct places, or
/// past bit 63). Arrow's `From<&[bool]>` packs bit by bit.
fn pack_bools(bools: &[bool]) -> BooleanBuffer {
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let mut bytes = Vec::with_capacity(bools.len().div_ceil(8));
    let mut chunks = bools.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(std::array::from_fn(|i| u8::from(chunk[i])));
        bytes.push((word.wrapping_mul(GATHER) >> 56) as u8);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        bytes.push(
            rest.iter()
                .enumerate()
                .fold(0u8, |byte, (i, &bit)| byte | (u8::from(bit) << i)),
        );
    }
    BooleanBuffer::new(Buffer::from_vec(bytes), 0, bools.len())
}

/// A nullable fixed-width binary column of `N`-byte values.
#[derive(Debug)]
struct FixedBytes<const N: usize> {
    values: Nullable<[u8; N]>,
}

impl<const N: usize> FixedBytes<N> {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            values: Nullable::filled_with(capacity, [0; N]),
        }
    }

    fn array(&mut self) -> ArrayRef {
        let (values, nulls) = self.values.take();
        let bytes: Vec<u8> = values.into_flattened();
        Arc::new(FixedSizeBinaryArray::new(
            N as i32,
            Buffer::from_vec(bytes),
            nulls,
        ))
    }
}

/// Takes a vector, leaving an empty one with the same capacity in its place.
fn take_vec<T>(values: &mut Vec<T>) -> Vec<T> {
    let capacity = values.capacity();
    std::mem::replace(values, Vec::with_capacity(capacity))
}

fn primitive<T: ArrowPrimitiveType>(
    (values, nulls): (Vec<T::Native>, Option<NullBuffer>),
) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls))
}

/// How many rows back a packet that arrived late is moved to keep a batch in time
/// order. Captures are in order but for small inversions (lan-hour: 33 of 62,781
/// packets, a few microseconds late), and moving a row back a few places is far
/// cheaper than the writer sorting and copying the whole batch; a packet later
/// than this stays where it is and the segment writer sorts the batch.
const REORDER_ROWS: usize = 64;

/// Packet data a batch may hold: Arrow's `Binary` offsets are 32-bit, and one more
/// frame (at most 256 KiB) must still fit.
pub const MAX_BATCH_DATA_BYTES: usize = 1 << 30;

/// Accumulates packet records column by column and emits Arrow record batches.
/// A packet that arrives slightly late (at most [`REORDER_ROWS`] rows) is moved
/// back to its place in time order; rows of equal time keep their arrival order.
#[derive(Debug)]
pub struct PacketBatchBuilder {
    ts: Vec<i64>,
    iface: Vec<u32>,
    link_type: Vec<u16>,
    wire_len: Vec<u32>,
    cap_len: Vec<u32>,
    status: Vec<u8>,
    eth_src: FixedBytes<{ MAC_LEN as usize }>,
    eth_dst: FixedBytes<{ MAC_LEN as usize }>,
    eth_type: Nullable<u16>,
    vlan_outer: Nullable<u16>,
    vlan_inner: Nullable<u16>,
    ip_version: Nullable<u8>,
    src_addr: FixedBytes<{ ADDR_LEN as usize }>,
    dst_addr: FixedBytes<{ ADDR_LEN as usize }>,
    ip_proto: Nullable<u8>,
    ip_ttl: Nullable<u8>,
    ip_id: Nullable<u16>,
    frag_offset: Nullable<u16>,
    more_fragments: Nullable<bool>,
    dont_fragment: Nullable<bool>,
    src_port: Nullable<u16>,
    dst_port: Nullable<u16>,
    tcp_flags: Nullable<u16>,
    icmp_type: Nullable<u8>,
    icmp_code: Nullable<u8>,
    tunnel: Nullable<u16>,
    tunnel_src: FixedBytes<{ ADDR_LEN as usize }>,
    tunnel_dst: FixedBytes<{ ADDR_LEN as usize }>,
    tunnel_id: Nullable<u64>,
    mpls_label: Nullable<u32>,
    data_form: Vec<u8>,
    data_offsets: Vec<i32>,
    data: Vec<u8>,
}

impl PacketBatchBuilder {
    /// Returns a builder with room for `capacity` rows and `data_capacity` bytes of
    /// packet data; each batch starts with the capacity of the last.
    pub fn with_capacity(capacity: usize, data_capacity: usize) -> Self {
        let mut data_offsets = Vec::with_capacity(capacity + 1);
        data_offsets.push(0);
        Self {
            ts: Vec::with_capacity(capacity),
            iface: Vec::with_capacity(capacity),
            link_type: Vec::with_capacity(capacity),
            wire_len: Vec::with_capacity(capacity),
            cap_len: Vec::with_capacity(capacity),
            status: Vec::with_capacity(capacity),
            eth_src: FixedBytes::with_capacity(capacity),
            eth_dst: FixedBytes::with_capacity(capacity),
            eth_type: Nullable::with_capacity(capacity),
            vlan_outer: Nullable::with_capacity(capacity),
            vlan_inner: Nullable::with_capacity(capacity),
            ip_version: Nullable::with_capacity(capacity),
            src_addr: FixedBytes::with_capacity(capacity),
            dst_addr: FixedBytes::with_capacity(capacity),
            ip_proto: Nullable::with_capacity(capacity),
            ip_ttl: Nullable::with_capacity(capacity),
            ip_id: Nullable::with_capacity(capacity),
            frag_offset: Nullable::with_capacity(capacity),
            more_fragments: Nullable::with_capacity(capacity),
            dont_fragment: Nullable::with_capacity(capacity),
            src_port: Nullable::with_capacity(capacity),
            dst_port: Nullable::with_capacity(capacity),
            tcp_flags: Nullable::with_capacity(capacity),
            icmp_type: Nullable::with_capacity(capacity),
            icmp_code: Nullable::with_capacity(capacity),
            tunnel: Nullable::with_capacity(capacity),
            tunnel_src: FixedBytes::with_capacity(capacity),
            tunnel_dst: FixedBytes::with_capacity(capacity),
            tunnel_id: Nullable::with_capacity(capacity),
            mpls_label: Nullable::with_capacity(capacity),
            data_form: Vec::with_capacity(capacity),
            data_offsets,
            data: Vec::with_capacity(data_capacity),
        }
    }

    /// Returns the number of rows appended since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.ts.len()
    }

    /// Returns true if no row was appended since the last [`finish`](Self::finish).
    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    /// Appends one packet: its record and the bytes to keep (already cut to the snap
    /// length), which are stored without the header fields the record holds.
    #[inline]
    pub fn append(&mut self, record: &PacketRecord, data: &[u8]) {
        let h = &record.headers;
        self.ts.push(record.ts_nanos);
        self.iface.push(record.iface);
        self.link_type.push(record.link_type.0);
        self.wire_len.push(record.wire_len);
        self.cap_len.push(record.cap_len);
        self.status.push(h.status as u8);
        self.eth_src.values.push(h.src_mac);
        self.eth_dst.values.push(h.dst_mac);
        self.eth_type.push(h.eth_type);
        self.vlan_outer.push(h.vlan_outer);
        self.vlan_inner.push(h.vlan_inner);
        self.ip_version.push(h.ip_version);
        self.src_addr.values.push(h.src_addr.map(|a| a.0));
        self.dst_addr.values.push(h.dst_addr.map(|a| a.0));
        self.ip_proto.push(h.ip_proto);
        self.ip_ttl.push(h.ip_ttl);
        self.ip_id.push(h.ip_id);
        self.frag_offset.push(h.frag_offset);
        self.more_fragments.push(h.more_fragments);
        self.dont_fragment.push(h.dont_fragment);
        self.src_port.push(h.src_port);
        self.dst_port.push(h.dst_port);
        self.tcp_flags.push(h.tcp_flags);
        self.icmp_type.push(h.icmp_type);
        self.icmp_code.push(h.icmp_code);
        self.tunnel.push(h.tunnel);
        self.tunnel_src.values.push(h.tunnel_src.map(|a| a.0));
        self.tunnel_dst.values.push(h.tunnel_dst.map(|a| a.0));
        self.tunnel_id.push(h.tunnel_id.map(TunnelId::to_u64));
        self.mpls_label.push(h.mpls_label);
        let form = snap::strip(record, data, &mut self.data);
        self.data_form.push(form.code());
        self.data_offsets.push(
            i32::try_from(self.data.len())
                .expect("callers finish a batch before MAX_BATCH_DATA_BYTES of packet data"),
        );
        let rows = self.ts.len();
        if rows >= 2 && self.ts[rows - 2] > record.ts_nanos {
            self.reorder_last();
        }
    }

    /// Moves the last row, which is earlier than the one before it, back to its
    /// place in time order, if that is at most [`REORDER_ROWS`] rows back. Rows
    /// of equal time keep their arrival order.
    #[cold]
    fn reorder_last(&mut self) {
        let last = self.ts.len() - 1;
        let ts = self.ts[last];
        let window = last.saturating_sub(REORDER_ROWS);
        if window > 0 && self.ts[window - 1] > ts {
            return;
        }
        let to = window + self.ts[window..last].partition_point(|&t| t <= ts);
        self.ts[to..].rotate_right(1);
        self.iface[to..].rotate_right(1);
        self.link_type[to..].rotate_right(1);
        self.wire_len[to..].rotate_right(1);
        self.cap_len[to..].rotate_right(1);
        self.status[to..].rotate_right(1);
        self.eth_src.values.move_last_to(to);
        self.eth_dst.values.move_last_to(to);
        self.eth_type.move_last_to(to);
        self.vlan_outer.move_last_to(to);
        self.vlan_inner.move_last_to(to);
        self.ip_version.move_last_to(to);
        self.src_addr.values.move_last_to(to);
        self.dst_addr.values.move_last_to(to);
        self.ip_proto.move_last_to(to);
        self.ip_ttl.move_last_to(to);
        self.ip_id.move_last_to(to);
        self.frag_offset.move_last_to(to);
        self.more_fragments.move_last_to(to);
        self.dont_fragment.move_last_to(to);
        self.src_port.move_last_to(to);
        self.dst_port.move_last_to(to);
        self.tcp_flags.move_last_to(to);
        self.icmp_type.move_last_to(to);
        self.icmp_code.move_last_to(to);
        self.tunnel.move_last_to(to);
        self.tunnel_src.values.move_last_to(to);
        self.tunnel_dst.values.move_last_to(to);
        self.tunnel_id.move_last_to(to);
        self.mpls_label.move_last_to(to);
        self.data_form[to..].rotate_right(1);
        // Packet bytes: row i is data[offsets[i]..offsets[i + 1]].
        let offsets = &mut self.data_offsets;
        let moved = offsets[last + 1] - offsets[last];
        let start = offsets[to] as usize;
        self.data[start..].rotate_right(moved as usize);
        for row in (to + 1..=last).rev() {
            offsets[row] = offsets[row - 1] + moved;
        }
    }

    /// Returns the bytes of packet data appended since the last [`finish`](Self::finish).
    /// Callers finish a batch once it passes [`MAX_BATCH_DATA_BYTES`].
    pub fn data_bytes(&self) -> usize {
        self.data.len()
    }

    /// Returns the rows appended so far as a record batch and resets the builder.
    pub fn finish(&mut self) -> RecordBatch {
        let ts = PrimitiveArray::<TimestampNanosecondType>::new(
            ScalarBuffer::from(take_vec(&mut self.ts)),
            None,
        )
        .with_timezone("UTC");
        let (more_fragments, more_fragments_nulls) = self.more_fragments.take();
        let (dont_fragment, dont_fragment_nulls) = self.dont_fragment.take();
        let offsets = take_vec(&mut self.data_offsets);
        self.data_offsets.push(0);
        let data = BinaryArray::new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(take_vec(&mut self.data)),
            None,
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(ts),
            primitive::<UInt32Type>((take_vec(&mut self.iface), None)),
            primitive::<UInt16Type>((take_vec(&mut self.link_type), None)),
            primitive::<UInt32Type>((take_vec(&mut self.wire_len), None)),
            primitive::<UInt32Type>((take_vec(&mut self.cap_len), None)),
            primitive::<UInt8Type>((take_vec(&mut self.status), None)),
            self.eth_src.array(),
            self.eth_dst.array(),
            primitive::<UInt16Type>(self.eth_type.take()),
            primitive::<UInt16Type>(self.vlan_outer.take()),
            primitive::<UInt16Type>(self.vlan_inner.take()),
            primitive::<UInt8Type>(self.ip_version.take()),
            self.src_addr.array(),
            self.dst_addr.array(),
            primitive::<UInt8Type>(self.ip_proto.take()),
            primitive::<UInt8Type>(self.ip_ttl.take()),
            primitive::<UInt16Type>(self.ip_id.take()),
            primitive::<UInt16Type>(self.frag_offset.take()),
            Arc::new(BooleanArray::new(
                pack_bools(&more_fragments),
                more_fragments_nulls,
            )),
            Arc::new(BooleanArray::new(
                pack_bools(&dont_fragment),
                dont_fragment_nulls,
            )),
            primitive::<UInt16Type>(self.src_port.take()),
            primitive::<UInt16Type>(self.dst_port.take()),
            primitive::<UInt16Type>(self.tcp_flags.take()),
            primitive::<UInt8Type>(self.icmp_type.take()),
            primitive::<UInt8Type>(self.icmp_code.take()),
            primitive::<UInt16Type>(self.tunnel.take()),
            self.tunnel_src.array(),
            self.tunnel_dst.array(),
            primitive::<UInt64Type>(self.tunnel_id.take()),
            primitive::<UInt32Type>(self.mpls_label.take()),
            primitive::<UInt8Type>((take_vec(&mut self.data_form), None)),
            Arc::new(data),
        ];
        RecordBatch::try_new(packets_schema(), columns)
            .expect("builder columns match the packets schema by construction")
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
    tunnel: Option<&'a UInt16Array>,
    tunnel_src: Option<&'a FixedSizeBinaryArray>,
    tunnel_dst: Option<&'a FixedSizeBinaryArray>,
    tunnel_id: Option<&'a UInt64Array>,
    mpls_label: Option<&'a UInt32Array>,
    data_form: Option<&'a UInt8Array>,
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
primitive_accessor!(UInt64Array, u64);
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
            tunnel: column(batch, col::TUNNEL),
            tunnel_src: column(batch, col::TUNNEL_SRC),
            tunnel_dst: column(batch, col::TUNNEL_DST),
            tunnel_id: column(batch, col::TUNNEL_ID),
            mpls_label: column(batch, col::MPLS_LABEL),
            data_form: column(batch, col::DATA_FORM),
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
                tunnel: opt(self.tunnel, row),
                tunnel_src: fixed(self.tunnel_src, row).map(Addr16),
                tunnel_dst: fixed(self.tunnel_dst, row).map(Addr16),
                tunnel_id: opt(self.tunnel_id, row).map(TunnelId::from_u64),
                mpls_label: opt(self.mpls_label, row),
            },
        }
    }

    /// Returns the stored bytes of row `row`, or an empty slice if the column is
    /// not projected. They leave out the header fields [`data_form`](Self::data_form)
    /// names; [`hindsight_model::snap::restore`] puts them back from the record.
    pub fn data(&self, row: usize) -> &'a [u8] {
        self.data.map_or(&[], |array| array.value(row))
    }

    /// Returns the form of row `row`'s stored bytes, `None` if its code is not a
    /// form (a damaged segment). Segments without the column are verbatim.
    pub fn data_form(&self, row: usize) -> Option<DataForm> {
        match self.data_form {
            None => Some(DataForm::VERBATIM),
            Some(forms) if forms.is_null(row) => Some(DataForm::VERBATIM),
            Some(forms) => DataForm::from_code(forms.value(row)),
        }
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
                tunnel: Some(hindsight_model::tunnel::GRE),
                tunnel_src: Some(Addr16::from_v4_bytes([172, 16, 0, 1])),
                tunnel_dst: Some(Addr16::from_v4_bytes([172, 16, 0, 2])),
                tunnel_id: Some(TunnelId {
                    kind: hindsight_model::tunnel::GRE,
                    id: 0xdead_beef,
                }),
                mpls_label: Some(0xfffff),
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
            ts_nanos: full.ts_nanos + 1,
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

    #[test]
    fn packed_booleans_equal_arrows_bit_by_bit_packing() {
        for len in [0, 1, 7, 8, 9, 63, 64, 65, 1000] {
            for pattern in 0..4u64 {
                let bools: Vec<bool> = (0..len as u64)
                    .map(|i| match pattern {
                        0 => true,
                        1 => false,
                        2 => i % 3 == 0,
                        _ => (i * 0x9e37_79b9) >> 7 & 1 == 1,
                    })
                    .collect();
                assert_eq!(
                    pack_bools(&bools),
                    BooleanBuffer::from(bools.as_slice()),
                    "{len} {pattern}"
                );
            }
        }
    }

    #[test]
    fn late_packets_move_back_into_time_order_with_all_their_fields() {
        // Arrival order of times (ms): a few late by a little, one later than
        // REORDER_ROWS rows can reach, and ties that keep their arrival order.
        let mut arrivals: Vec<i64> = (0..200).map(|i| i * 10).collect();
        arrivals.insert(50, 455); // late by one row
        arrivals.insert(120, 1_101); // late by a few rows
        arrivals.insert(160, 1_101); // a tie with the row above, arriving later
        arrivals.push(5); // later than REORDER_ROWS rows back: stays last
        let record = |i: usize, ms: i64| {
            let mut r = sample_record();
            r.ts_nanos = ms * 1_000_000;
            r.wire_len = i as u32;
            r.headers.src_port = (!i.is_multiple_of(3)).then_some(i as u16);
            r.headers.src_addr =
                (!i.is_multiple_of(5)).then(|| Addr16::from_v4_bytes([10, 0, 0, i as u8]));
            r.headers.more_fragments = (!i.is_multiple_of(7)).then_some(i.is_multiple_of(2));
            r
        };
        let data = |i: usize| vec![i as u8; i % 9];
        let mut builder = PacketBatchBuilder::with_capacity(16, 64);
        for (i, &ms) in arrivals.iter().enumerate() {
            builder.append(&record(i, ms), &data(i));
        }
        let batch = builder.finish();
        let view = PacketBatchView::new(&batch);
        // The expected order: a stable sort of the arrivals, except the last.
        let mut expected: Vec<usize> = (0..arrivals.len() - 1).collect();
        expected.sort_by_key(|&i| arrivals[i]);
        expected.push(arrivals.len() - 1);
        for (row, &i) in expected.iter().enumerate() {
            assert_eq!(view.record(row), record(i, arrivals[i]), "row {row}");
            assert_eq!(view.data(row), data(i), "row {row}");
        }
    }
}
