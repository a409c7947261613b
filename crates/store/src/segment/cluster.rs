//! The order of a `packets` row group's rows in its file: grouped by host, as the
//! lightweight-persistence thesis groups packets by address (§3.2.4), so that the
//! packets of a busy address lie together and a query for it decodes a few pages
//! instead of every page of the segment.
//!
//! Each row is keyed by its conversation: the busier of its two addresses in
//! the row group (the *host*) and then the other one. Rows are ordered by host,
//! then by peer, then by time, so every address's rows form one run in its own
//! host group plus one run in the group of each busier peer. Rows without
//! addresses come last.
//!
//! Time order is restored when the rows are read (`SegmentRead` in the query
//! crate sorts each row group's rows by timestamp, stably). For that to give
//! back the capture's order exactly, rows with the same timestamp must keep
//! their order relative to each other: a run of rows with equal timestamps
//! takes the key of its first row, so it stays together and in order.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, FixedSizeBinaryArray,
    PrimitiveArray, RecordBatch, UInt32Array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use arrow::compute::take;
use arrow::datatypes::{
    DataType, TimeUnit, TimestampNanosecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow::error::ArrowError;
use foldhash::HashMap;
use hindsight_model::Addr16;

use super::RecentKeys;
use crate::schema::col;

/// Id of "no address" (a row without an IP layer).
pub(crate) const NO_ADDRESS: u32 = u32::MAX;

/// Slots of the cache of recently seen addresses.
const RECENT_SLOTS: usize = 64;

/// The order of a row group's rows grouped by host, and their addresses numbered.
#[derive(Debug)]
pub(crate) struct HostOrder {
    /// The rows to take, in order; `None` if they are in that order already.
    pub order: Option<UInt32Array>,
    /// Each row's source and destination address ids ([`NO_ADDRESS`] for none),
    /// in the new order.
    pub ids: Vec<(u32, u32)>,
    /// The address of each id.
    pub addresses: Vec<Addr16>,
}

/// Returns the row order that groups `batch`'s rows by host, with the rows'
/// addresses numbered; `None` if the batch has no timestamp or address columns.
pub(crate) fn host_order(batch: &RecordBatch) -> Option<HostOrder> {
    let rows = batch.num_rows();
    let ts = batch
        .column_by_name(col::TS)?
        .as_primitive_opt::<TimestampNanosecondType>()?
        .values();
    let [src, dst] = [col::SRC_ADDR, col::DST_ADDR].map(|name| {
        batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
    });
    let (src, dst) = (src?, dst?);
    if u32::try_from(rows).is_err() {
        return None;
    }
    // Time order first (stable: equal timestamps keep the capture's order).
    let mut by_time: Vec<u32> = (0..rows as u32).collect();
    if !ts.windows(2).all(|pair| pair[0] <= pair[1]) {
        by_time.sort_by_key(|&row| ts[row as usize]);
    }

    // Dense ids of the addresses, and how many rows each is in.
    let mut ids: HashMap<u128, u32> = HashMap::default();
    let mut recent = RecentKeys::<u32, RECENT_SLOTS>::new();
    let mut counts: Vec<u32> = Vec::new();
    let mut addresses: Vec<Addr16> = Vec::new();
    let mut id_of = |column: &FixedSizeBinaryArray, row: usize| -> u32 {
        if column.is_null(row) {
            return NO_ADDRESS;
        }
        let Ok(bytes) = <[u8; 16]>::try_from(column.value(row)) else {
            return NO_ADDRESS;
        };
        let key = u128::from_ne_bytes(bytes);
        let id = match recent.get(key) {
            Some(id) => id,
            None => {
                let next = counts.len() as u32;
                let id = *ids.entry(key).or_insert(next);
                if id == next {
                    counts.push(0);
                    addresses.push(Addr16(bytes));
                }
                recent.insert(key, id);
                id
            }
        };
        counts[id as usize] += 1;
        id
    };
    let pairs: Vec<(u32, u32)> = by_time
        .iter()
        .map(|&row| (id_of(src, row as usize), id_of(dst, row as usize)))
        .collect();

    // Each row's (host, peer); a run of equal timestamps keeps its first row's.
    let count = |id: u32| counts.get(id as usize).copied().unwrap_or(0);
    let mut keys: Vec<(u32, u32)> = Vec::with_capacity(rows);
    for (position, &(a, b)) in pairs.iter().enumerate() {
        let tied =
            position > 0 && ts[by_time[position] as usize] == ts[by_time[position - 1] as usize];
        let key = match keys.last() {
            Some(&last) if tied => last,
            _ if a == NO_ADDRESS => (b, NO_ADDRESS),
            _ if b == NO_ADDRESS => (a, NO_ADDRESS),
            // The busier address is the host; on a tie, the one seen first.
            _ if (count(a), std::cmp::Reverse(a)) >= (count(b), std::cmp::Reverse(b)) => (a, b),
            _ => (b, a),
        };
        keys.push(key);
    }

    // Counting sort by host (stable, so time order holds within a host), then
    // a stable sort by peer within each host's group.
    let hosts = counts.len() + 1;
    let slot = |host: u32| {
        if host == NO_ADDRESS {
            hosts - 1
        } else {
            host as usize
        }
    };
    let mut starts = vec![0usize; hosts + 1];
    for &(host, _) in &keys {
        starts[slot(host) + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut cursor = starts.clone();
    let mut order = vec![(0u32, 0u32); rows];
    for (position, &(host, peer)) in keys.iter().enumerate() {
        let at = &mut cursor[slot(host)];
        order[*at] = (peer, position as u32);
        *at += 1;
    }
    for group in starts.windows(2) {
        if let Some(rows) = order.get_mut(group[0]..group[1])
            && rows.len() > 1
        {
            rows.sort_by_key(|&(peer, _)| peer);
        }
    }
    let ids = order
        .iter()
        .map(|&(_, position)| pairs[position as usize])
        .collect();
    let unchanged = order
        .iter()
        .enumerate()
        .all(|(at, &(_, position))| by_time[position as usize] as usize == at);
    let order = (!unchanged).then(|| {
        UInt32Array::from_iter_values(
            order
                .into_iter()
                .map(|(_, position)| by_time[position as usize]),
        )
    });
    Some(HostOrder {
        order,
        ids,
        addresses,
    })
}

/// `batch`'s rows in `order`. A column that reads the same in any order
/// (null throughout, or without nulls and one value throughout: a VLAN, a
/// tunnel, the interface, mostly) is kept as it is instead of gathered: the
/// gather of every column was 7% of an ingest's CPU. Integer, timestamp and
/// boolean columns are gathered here ([`gather_bits`]), each distinct
/// validity bitmap once: arrow's `take` tests one bit a closure call, and
/// the layers' columns share one bitmap (null where a row has no IP layer),
/// so that was over half of the gather. Used both ways: into host order at
/// the seal, back into time order when a row group is read.
pub(crate) fn reorder(batch: &RecordBatch, order: &UInt32Array) -> Result<RecordBatch, ArrowError> {
    let indices = order.values();
    // Each validity bitmap gathered so far, with the one it was gathered from.
    let mut gathered: Vec<(NullBuffer, Option<NullBuffer>)> = Vec::new();
    let mut nulls_of = |column: &dyn Array| -> Option<NullBuffer> {
        let nulls = column.nulls().filter(|n| n.null_count() > 0)?;
        if let Some((_, done)) = gathered.iter().find(|(from, _)| from == nulls) {
            return done.clone();
        }
        let done = NullBuffer::new(gather_bits(nulls.inner(), indices));
        let done = (done.null_count() > 0).then_some(done);
        gathered.push((nulls.clone(), done.clone()));
        done
    };
    let columns = batch
        .columns()
        .iter()
        .map(|column| {
            if any_order(column.as_ref()) {
                return Ok(ArrayRef::clone(column));
            }
            let array: ArrayRef = match column.data_type() {
                DataType::UInt8 => gather::<UInt8Type>(column, indices, nulls_of(column)),
                DataType::UInt16 => gather::<UInt16Type>(column, indices, nulls_of(column)),
                DataType::UInt32 => gather::<UInt32Type>(column, indices, nulls_of(column)),
                DataType::UInt64 => gather::<UInt64Type>(column, indices, nulls_of(column)),
                DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                    gather::<TimestampNanosecondType>(column, indices, nulls_of(column))
                }
                DataType::Boolean => Arc::new(BooleanArray::new(
                    gather_bits(column.as_boolean().values(), indices),
                    nulls_of(column),
                )),
                _ => take(column.as_ref(), order, None)?,
            };
            Ok(array)
        })
        .collect::<Result<Vec<_>, ArrowError>>()?;
    RecordBatch::try_new(batch.schema(), columns)
}

/// The values of a primitive `column` at `indices`, with `nulls`: as
/// arrow's `take` gives them (a null's slot holds the value it held).
fn gather<T: ArrowPrimitiveType>(
    column: &ArrayRef,
    indices: &[u32],
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    let column = column.as_primitive::<T>();
    let values = column.values();
    let taken: ScalarBuffer<T::Native> = indices.iter().map(|&i| values[i as usize]).collect();
    Arc::new(PrimitiveArray::<T>::new(taken, nulls).with_data_type(column.data_type().clone()))
}

/// The bits of `bits` at `indices`, a word of 64 at a time.
fn gather_bits(bits: &BooleanBuffer, indices: &[u32]) -> BooleanBuffer {
    let (bytes, offset) = (bits.values(), bits.offset());
    let bit = |i: u32| {
        let at = offset + i as usize;
        u64::from(bytes[at >> 3] >> (at & 7) & 1)
    };
    let words: Vec<u64> = indices
        .chunks(64)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0, |word, (j, &i)| word | bit(i) << j)
        })
        .collect();
    BooleanBuffer::new(Buffer::from_vec(words), 0, indices.len())
}

/// Whether `column` reads the same in any row order.
fn any_order(column: &dyn Array) -> bool {
    fn one_value<T: PartialEq>(values: &[T]) -> bool {
        values
            .first()
            .is_none_or(|first| values.iter().all(|v| v == first))
    }
    match column.null_count() {
        n if n == column.len() => return true,
        0 => {}
        _ => return false,
    }
    match column.data_type() {
        DataType::UInt8 => one_value(column.as_primitive::<UInt8Type>().values()),
        DataType::UInt16 => one_value(column.as_primitive::<UInt16Type>().values()),
        DataType::UInt32 => one_value(column.as_primitive::<UInt32Type>().values()),
        DataType::UInt64 => one_value(column.as_primitive::<UInt64Type>().values()),
        DataType::FixedSizeBinary(width) => {
            // One value throughout: the values' bytes equal themselves
            // shifted by one value (one comparison, not one a value).
            let column = column.as_fixed_size_binary();
            let width = usize::try_from(*width).unwrap_or(0);
            let data = column.value_data();
            let bytes = data.get(..column.len() * width).unwrap_or(data);
            width > 0 && bytes.get(width..) == bytes.get(..bytes.len().saturating_sub(width))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::PacketBatchBuilder;
    use hindsight_model::{PacketHeaders, PacketRecord};

    fn v4(last: u8) -> Addr16 {
        Addr16::from_v4_bytes([10, 0, 0, last])
    }

    fn batch(rows: &[(i64, Option<(u8, u8)>)]) -> RecordBatch {
        let mut builder = PacketBatchBuilder::with_capacity(rows.len(), 4096);
        for &(ts_nanos, addresses) in rows {
            let record = PacketRecord {
                ts_nanos,
                wire_len: 60,
                cap_len: 60,
                headers: PacketHeaders {
                    src_addr: addresses.map(|(s, _)| v4(s)),
                    dst_addr: addresses.map(|(_, d)| v4(d)),
                    ..PacketHeaders::default()
                },
                ..PacketRecord::default()
            };
            builder.append(&record, &[0; 60]);
        }
        builder.finish()
    }

    fn order(rows: &[(i64, Option<(u8, u8)>)]) -> Vec<u32> {
        let batch = batch(rows);
        let grouped = host_order(&batch).unwrap();
        let order = grouped.order.as_ref().map_or_else(
            || (0..rows.len() as u32).collect(),
            |order| order.values().to_vec(),
        );
        // The ids are the rows' addresses, in the new order.
        let address = |id: u32| grouped.addresses.get(id as usize).copied();
        for (&(src, dst), &row) in grouped.ids.iter().zip(&order) {
            let expected = rows[row as usize].1.map(|(s, d)| (v4(s), v4(d)));
            assert_eq!(address(src).zip(address(dst)), expected);
        }
        order
    }

    #[test]
    fn rows_group_by_the_busier_address_then_by_peer_then_time() {
        // 1 is the busy host; 2 and 3 talk to it and to each other.
        let rows = [
            (10, Some((2, 1))),
            (11, Some((3, 1))),
            (12, Some((1, 2))),
            (13, Some((2, 3))),
            (14, None),
            (15, Some((1, 3))),
            (16, Some((1, 2))),
        ];
        // Hosts in the order they were first seen: host 2 (peer 3), then host 1
        // (peers 2 then 3, each in time order), then the row without addresses.
        assert_eq!(order(&rows), [3, 0, 2, 6, 1, 5, 4]);
    }

    #[test]
    fn equal_timestamps_stay_together_in_capture_order() {
        let rows = [
            (10, Some((1, 2))),
            (20, Some((3, 4))),
            (20, Some((1, 2))),
            (20, Some((3, 4))),
            (30, Some((1, 2))),
            (40, Some((3, 4))),
        ];
        // Hosts 1 and 3 have three rows each; the run at 20 goes with its first
        // row, (3, 4), in its order.
        let order = order(&rows);
        assert_eq!(order, [0, 4, 1, 2, 3, 5]);
        // Sorting by time, stably, gives the capture's order back.
        let mut restored = order.clone();
        restored.sort_by_key(|&row| rows[row as usize].0);
        assert_eq!(restored, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn rows_out_of_time_order_are_put_in_it() {
        let rows = [(10, Some((1, 2))), (20, Some((1, 2))), (30, Some((1, 2)))];
        // The builder keeps time order: shuffle its rows to 30, 10, 20.
        let shuffled =
            arrow::compute::take_record_batch(&batch(&rows), &UInt32Array::from(vec![2, 0, 1]))
                .unwrap();
        let order = host_order(&shuffled).unwrap().order.unwrap();
        assert_eq!(order.values().to_vec(), [1, 2, 0]);
    }

    #[test]
    fn a_reordered_batch_is_its_rows_taken_in_order() {
        // Addresses vary, ports are null throughout, the interface one value.
        let rows = [
            (1, Some((1, 2))),
            (2, Some((3, 4))),
            (3, None),
            (4, Some((1, 2))),
        ];
        let batch = batch(&rows);
        let order = UInt32Array::from(vec![3, 0, 2, 1]);
        let reordered = reorder(&batch, &order).unwrap();
        let taken = arrow::compute::take_record_batch(&batch, &order).unwrap();
        assert_eq!(reordered, taken);
        let kept = |name: &str| {
            let before = batch.column_by_name(name).unwrap();
            let after = reordered.column_by_name(name).unwrap();
            before.to_data().buffers()[0].as_ptr() == after.to_data().buffers()[0].as_ptr()
        };
        assert!(kept(col::IFACE) && kept(col::SRC_PORT));
        assert!(!kept(col::SRC_ADDR) && !kept(col::TS));
    }

    #[test]
    fn a_gathered_batch_equals_arrows_take_across_words_and_offsets() {
        // Nulls in four patterns (no IP layer, no ports, no fragment flags, no TTL),
        // booleans of both values, 150 rows: three words of bits and a part.
        let mut builder = PacketBatchBuilder::with_capacity(150, 4096);
        for row in 0..150u16 {
            let ip = row % 7 != 3;
            let ports = ip && row % 5 != 1;
            let record = PacketRecord {
                ts_nanos: i64::from(row * 13 % 150),
                wire_len: 60 + u32::from(row),
                cap_len: 60,
                headers: PacketHeaders {
                    ip_version: ip.then_some(4),
                    src_addr: ip.then(|| v4((row % 11) as u8)),
                    dst_addr: ip.then(|| v4((row % 3) as u8)),
                    // Null in as many rows of the slice as the IP layer
                    // (21), in others: a bitmap must not stand for another
                    // of the same count.
                    ip_ttl: (row % 7 != 4 && row != 5).then_some((row % 64) as u8),
                    ip_id: ip.then_some(row * 31),
                    more_fragments: (ip && row % 4 != 0).then_some(row % 3 == 0),
                    dont_fragment: ip.then_some(row % 2 == 0),
                    src_port: ports.then_some(1000 + row),
                    dst_port: ports.then_some(53),
                    ..PacketHeaders::default()
                },
                ..PacketRecord::default()
            };
            builder.append(&record, &[0; 60]);
        }
        let whole = builder.finish();
        // A slice, so that every bitmap starts inside a byte.
        let batch = whole.slice(3, 141);
        let order: Vec<u32> = (0..141u32).map(|i| i * 53 % 141).collect();
        let order = UInt32Array::from(order);
        let reordered = reorder(&batch, &order).unwrap();
        let taken = arrow::compute::take_record_batch(&batch, &order).unwrap();
        assert_eq!(reordered, taken);
        for (column, field) in reordered.columns().iter().zip(batch.schema().fields()) {
            assert_eq!(column.data_type(), field.data_type(), "{}", field.name());
        }
    }

    #[test]
    fn fixed_size_values_read_the_same_in_any_order_only_when_one_value() {
        let array =
            |values: &[[u8; 6]]| FixedSizeBinaryArray::try_from_iter(values.iter()).unwrap();
        let (a, b) = ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7]);
        assert!(any_order(&array(&[a, a, a])));
        assert!(!any_order(&array(&[a, a, b])));
        assert!(!any_order(&array(&[b, a, a])));
        // A slice of one value, of an array of two.
        assert!(any_order(&array(&[b, a, a]).slice(1, 2)));
    }

    #[test]
    fn an_order_already_kept_is_not_returned() {
        let rows = [(1, Some((1, 2))), (2, Some((1, 2))), (3, None)];
        assert!(host_order(&batch(&rows)).unwrap().order.is_none());
    }
}
