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

static PACKETS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let ts_type = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    let fields = [
        Field::new(col::TS, ts_type, false),
        Field::new(col::IFACE, DataType::UInt32, false),
        Field::new(col::LINK_TYPE, DataType::UInt16, false),
        Field::new(col::WIRE_LEN, DataType::UInt32, false),
        Field::new(col::CAP_LEN, DataType::UInt32, false),
        Field::new(col::STATUS, DataType::UInt8, false),
    ]
    .into_iter()
    .chain(header_fields())
    .chain([
        // Nullable only so that segments written before it read with this schema.
        Field::new(col::DATA_FORM, DataType::UInt8, true),
        Field::new(col::DATA, DataType::Binary, false),
    ])
    .collect::<Vec<_>>();
    Arc::new(Schema::new(fields))
});

/// Returns the Arrow schema of the `packets` table.
pub fn packets_schema() -> SchemaRef {
    Arc::clone(&PACKETS_SCHEMA)
}

/// One nullable column being built: values (the default where null) and
/// validity. Unlike Arrow's builders, which start each batch empty, it starts
/// each batch with the capacity of the last, so building a batch does not
/// regrow buffers.
#[derive(Debug)]
struct Nullable<T> {
    values: Vec<T>,
    valid: Vec<bool>,
    nulls: usize,
}

impl<T: Copy + Default> Nullable<T> {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            values: Vec::with_capacity(capacity),
            valid: Vec::with_capacity(capacity),
            nulls: 0,
        }
    }

    #[inline]
    fn push(&mut self, value: Option<T>) {
        self.values.push(value.unwrap_or_default());
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

/// How a header column's values are held: the Arrow type, the value a builder
/// keeps, and the array it is read back from.
trait Stored: Copy {
    /// What a builder keeps of a value (the value stored where it is null is
    /// the default).
    type Value: Copy + Default;
    /// The array the column is read from.
    type Array: Array + 'static;
    fn data_type() -> DataType;
    fn store(self) -> Self::Value;
    fn array(column: (Vec<Self::Value>, Option<NullBuffer>)) -> ArrayRef;
    /// The value at `row`, known not null; `None` if the array cannot hold
    /// one (a damaged segment's column of another width).
    fn load(array: &Self::Array, row: usize) -> Option<Self>;
}

macro_rules! stored_primitive {
    ($($ty:ty => $arrow:ty, $data_type:ident;)*) => {$(
        impl Stored for $ty {
            type Value = $ty;
            type Array = PrimitiveArray<$arrow>;
            fn data_type() -> DataType {
                DataType::$data_type
            }
            #[inline]
            fn store(self) -> $ty {
                self
            }
            fn array(column: (Vec<$ty>, Option<NullBuffer>)) -> ArrayRef {
                primitive::<$arrow>(column)
            }
            #[inline]
            fn load(array: &Self::Array, row: usize) -> Option<$ty> {
                Some(array.value(row))
            }
        }
    )*};
}
stored_primitive! {
    u8 => UInt8Type, UInt8;
    u16 => UInt16Type, UInt16;
    u32 => UInt32Type, UInt32;
    u64 => UInt64Type, UInt64;
}

impl Stored for bool {
    type Value = bool;
    type Array = BooleanArray;
    fn data_type() -> DataType {
        DataType::Boolean
    }
    #[inline]
    fn store(self) -> bool {
        self
    }
    fn array((values, nulls): (Vec<bool>, Option<NullBuffer>)) -> ArrayRef {
        Arc::new(BooleanArray::new(pack_bools(&values), nulls))
    }
    #[inline]
    fn load(array: &BooleanArray, row: usize) -> Option<bool> {
        Some(array.value(row))
    }
}

/// A value held as `N` bytes (`FixedSizeBinary(N)`).
trait FixedWidth<const N: usize>: Copy {
    fn bytes(self) -> [u8; N];
    fn from_bytes(bytes: [u8; N]) -> Self;
}

impl FixedWidth<6> for [u8; 6] {
    fn bytes(self) -> [u8; 6] {
        self
    }
    fn from_bytes(bytes: [u8; 6]) -> Self {
        bytes
    }
}

impl FixedWidth<16> for Addr16 {
    fn bytes(self) -> [u8; 16] {
        self.0
    }
    fn from_bytes(bytes: [u8; 16]) -> Self {
        Addr16(bytes)
    }
}

macro_rules! stored_fixed {
    ($($ty:ty => $n:literal),*) => {$(
        impl Stored for $ty {
            type Value = [u8; $n];
            type Array = FixedSizeBinaryArray;
            fn data_type() -> DataType {
                DataType::FixedSizeBinary($n)
            }
            #[inline]
            fn store(self) -> [u8; $n] {
                FixedWidth::bytes(self)
            }
            fn array((values, nulls): (Vec<[u8; $n]>, Option<NullBuffer>)) -> ArrayRef {
                let bytes = Buffer::from_vec(values.into_flattened());
                Arc::new(FixedSizeBinaryArray::new($n, bytes, nulls))
            }
            #[inline]
            fn load(array: &FixedSizeBinaryArray, row: usize) -> Option<Self> {
                array.value(row).try_into().ok().map(FixedWidth::from_bytes)
            }
        }
    )*};
}
stored_fixed!([u8; 6] => 6, Addr16 => 16);

impl Stored for TunnelId {
    type Value = u64;
    type Array = UInt64Array;
    fn data_type() -> DataType {
        DataType::UInt64
    }
    #[inline]
    fn store(self) -> u64 {
        self.to_u64()
    }
    fn array(column: (Vec<u64>, Option<NullBuffer>)) -> ArrayRef {
        primitive::<UInt64Type>(column)
    }
    #[inline]
    fn load(array: &UInt64Array, row: usize) -> Option<Self> {
        Some(TunnelId::from_u64(array.value(row)))
    }
}

/// The header columns' fields of the schema, their builders and their views.
macro_rules! header_columns {
    ($($(#[$doc:meta])* $konst:ident = $name:literal, $field:ident: $ty:ty;)*) => {
        fn header_fields() -> [Field; col::HEADERS.len()] {
            [$(Field::new(col::$konst, <$ty as Stored>::data_type(), true)),*]
        }

        /// The header columns being built.
        #[derive(Debug)]
        struct HeaderColumns {
            $($field: Nullable<<$ty as Stored>::Value>,)*
        }

        impl HeaderColumns {
            fn with_capacity(capacity: usize) -> Self {
                Self { $($field: Nullable::with_capacity(capacity),)* }
            }

            #[inline]
            fn push(&mut self, h: &PacketHeaders) {
                $(self.$field.push(h.$field.map(Stored::store));)*
            }

            fn move_last_to(&mut self, to: usize) {
                $(self.$field.move_last_to(to);)*
            }

            fn arrays(&mut self, columns: &mut Vec<ArrayRef>) {
                $(columns.push(<$ty as Stored>::array(self.$field.take()));)*
            }
        }

        /// The header columns of a batch (those it has).
        #[derive(Debug)]
        struct HeaderViews<'a> {
            $($field: Option<&'a <$ty as Stored>::Array>,)*
        }

        impl<'a> HeaderViews<'a> {
            fn new(batch: &'a RecordBatch) -> Self {
                Self { $($field: column(batch, col::$konst),)* }
            }

            #[inline]
            fn read(&self, row: usize, status: DecodeStatus) -> PacketHeaders {
                PacketHeaders {
                    status,
                    // Not a column: flows are built from it at ingest.
                    ip_len: None,
                    $($field: self.$field
                        .filter(|array| !array.is_null(row))
                        .and_then(|array| <$ty as Stored>::load(array, row)),)*
                }
            }
        }
    };
}
hindsight_model::packet_header_columns!(header_columns);

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
    headers: HeaderColumns,
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
            headers: HeaderColumns::with_capacity(capacity),
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
        self.headers.push(h);
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
        self.headers.move_last_to(to);
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
        let offsets = take_vec(&mut self.data_offsets);
        self.data_offsets.push(0);
        let data = BinaryArray::new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(take_vec(&mut self.data)),
            None,
        );
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(ts),
            primitive::<UInt32Type>((take_vec(&mut self.iface), None)),
            primitive::<UInt16Type>((take_vec(&mut self.link_type), None)),
            primitive::<UInt32Type>((take_vec(&mut self.wire_len), None)),
            primitive::<UInt32Type>((take_vec(&mut self.cap_len), None)),
            primitive::<UInt8Type>((take_vec(&mut self.status), None)),
        ];
        self.headers.arrays(&mut columns);
        columns.extend([
            primitive::<UInt8Type>((take_vec(&mut self.data_form), None)),
            Arc::new(data),
        ]);
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
    headers: HeaderViews<'a>,
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
fn opt<T: ArrowPrimitiveType>(array: Option<&PrimitiveArray<T>>, row: usize) -> Option<T::Native> {
    array
        .filter(|array| !array.is_null(row))
        .map(|array| array.value(row))
}

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
            headers: HeaderViews::new(batch),
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
            headers: self.headers.read(
                row,
                opt(self.status, row)
                    .and_then(DecodeStatus::from_code)
                    .unwrap_or_default(),
            ),
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
