//! The column-chunk encoder of segments (`packets` and `flows`).
//!
//! The `parquet` crate's Arrow writer is general: it computes definition levels
//! value by value, encodes in mini-batches of 1,024 values, makes a
//! reference-counted buffer per fixed-size binary value and compresses through
//! a codec limited to zstd levels 1–22. For the flat, fixed schema of packet
//! headers that generality was about a third of the CPU time of ingest (and for
//! `flows` segments 0.13 of 2.78 CPU s). This encoder writes the same kind of
//! column chunk directly from Arrow's buffers:
//!
//! - data pages (v1) of `page_rows` rows (and at most `page_bytes` of values);
//! - definition levels as bit-packed runs copied from the Arrow validity bitmap
//!   (one RLE run when a page has no nulls or only nulls);
//! - values `PLAIN`, or for integer columns `BYTE_STREAM_SPLIT` or
//!   `DELTA_BINARY_PACKED` where asked, or for fixed-size binary columns
//!   `RLE_DICTIONARY` (a dictionary page, then bit-packed indices; `PLAIN` past
//!   65,536 distinct values in a chunk);
//! - each page compressed with zstd at any level zstd accepts (negative levels
//!   included), through a compression context reused across pages;
//! - chunk statistics, the page index (column and offset index) and
//!   split-block Bloom filters, in the structures the `parquet` crate writes
//!   to the footer (every chunk has an offset index: the file writer wants one
//!   for all columns or none).
//!
//! Every page header carries the CRC-32 of the page's stored bytes (the
//! `crc` field of Parquet's `PageHeader`), which readers check before they
//! decompress ([`PageSink`]). The chunk is spliced into the file with
//! `append_column`, so the file is an ordinary Parquet file; `tests` read every
//! column back with the crate's reader, which checks the CRCs.

use std::ops::Range;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, BooleanArray, FixedSizeBinaryArray};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{
    ArrowNativeType, DataType, Int32Type, Int64Type, TimeUnit, TimestampNanosecondType, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use arrow::util::bit_mask::set_bits;
use bytes::Bytes;
use hindsight_model::put_varint;
use parquet::basic::{
    BoundaryOrder, Compression, Encoding, EncodingMask, Type as PhysicalType, ZstdLevel,
};
use parquet::bloom_filter::Sbbf;
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::FixedLenByteArray;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ColumnChunkMetaData, ColumnIndexBuilder, OffsetIndexBuilder};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescPtr;

use super::RecentKeys;

/// How one column chunk is written.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ChunkOptions {
    /// Rows per data page.
    pub page_rows: usize,
    /// A page is closed once its encoded values reach this many bytes (0: no limit).
    pub page_bytes: usize,
    /// zstd level of the pages (any level zstd accepts, negative ones included).
    pub zstd_level: i32,
    /// Whether zstd stores literals (the bytes it found no earlier match for) raw
    /// rather than Huffman-coded, with a larger match table: for packet bytes,
    /// whose literals are mostly sequence numbers, checksums and payload, which
    /// Huffman coding barely shrinks (see [`Compressors`]).
    pub raw_literals: bool,
    /// Pages compressed as LZ4 blocks (Parquet's `LZ4_RAW`) instead of zstd.
    /// Readers create a codec for every column chunk they read, and the
    /// `parquet` crate's zstd codec makes a zstd compression and decompression
    /// context, each asking the CPU its features (`cpuid`, which traps to the
    /// hypervisor in a virtual machine); its LZ4 codec costs nothing to make.
    pub lz4: bool,
    /// Chunk statistics (min, max, null count).
    pub statistics: bool,
    /// Page statistics: the column index. (The offset index, where each page
    /// starts, is always written.)
    pub page_index: bool,
    /// The encoding of the values: `PLAIN` for any column; `BYTE_STREAM_SPLIT`
    /// and `DELTA_BINARY_PACKED` for integer columns; `RLE_DICTIONARY` for
    /// fixed-size binary columns (other types, or too many distinct values, are
    /// then written `PLAIN`).
    pub encoding: Encoding,
    /// A split-block Bloom filter of the values: (distinct values to size it for, false-positive probability).
    pub bloom: Option<(u64, f64)>,
}

impl ChunkOptions {
    /// The compressor settings of the pages: level and literal mode.
    fn zstd(&self) -> (i32, bool) {
        (self.zstd_level, self.raw_literals)
    }

    /// The codec the chunk's metadata names.
    fn compression(&self) -> Compression {
        if self.lz4 {
            Compression::LZ4_RAW
        } else {
            Compression::ZSTD(ZstdLevel::default())
        }
    }

    /// Compresses one page's bytes with the chunk's codec.
    fn compress(&self, zstd: &mut Compressors, page: &[u8]) -> Result<Vec<u8>> {
        if self.lz4 {
            Ok(super::lz4::compress(page))
        } else {
            zstd.compress(self.zstd(), page)
        }
    }
}

/// An encoded column chunk: its bytes (pages with their headers, from offset 0)
/// and what the file writer needs to splice it in.
pub(super) struct EncodedChunk {
    pub bytes: Bytes,
    pub close: ColumnCloseResult,
}

/// zstd compression contexts of one thread, one per level and literal mode,
/// reused across pages.
///
/// With raw literals the match table has 2^13 entries; the other parameters are
/// zstd's for the level and the page's size. On the 5 M-packet benchmark's `data`
/// column (`ingest_stages --stages encode`), against Huffman-coded literals:
/// 0.412 → 0.320 CPU s, 16.73 → 17.56 bytes a packet (the whole archive 2% larger:
/// literals are mostly sequence numbers, checksums and payload, much of it
/// encrypted, which Huffman coding barely shrinks).
#[derive(Default)]
pub(super) struct Compressors(Vec<((i32, bool), zstd::bulk::Compressor<'static>)>);

/// Match table size (log2 entries) with raw literals.
const RAW_LITERALS_HASH_LOG: u32 = 13;

impl Compressors {
    fn compress(&mut self, (level, raw_literals): (i32, bool), source: &[u8]) -> Result<Vec<u8>> {
        let key = (level, raw_literals);
        let position = match self.0.iter().position(|(k, _)| *k == key) {
            Some(position) => position,
            None => {
                let mut compressor = zstd::bulk::Compressor::new(level).map_err(external)?;
                if raw_literals {
                    use zstd::zstd_safe::{CParameter, ParamSwitch};
                    compressor
                        .set_parameter(CParameter::LiteralCompressionMode(ParamSwitch::Disable))
                        .and_then(|()| {
                            compressor.set_parameter(CParameter::HashLog(RAW_LITERALS_HASH_LOG))
                        })
                        .map_err(external)?;
                }
                self.0.push((key, compressor));
                self.0.len() - 1
            }
        };
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(source.len()));
        self.0[position]
            .1
            .compress_to_buffer(source, &mut out)
            .map_err(external)?;
        Ok(out)
    }
}

fn external(e: std::io::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

/// Encodes `array` as one column chunk of column `descr`. Supports the Arrow types
/// of the `packets` and `flows` tables (integers, timestamps, booleans, fixed-size
/// and variable binary, strings); anything else is an error.
pub(super) fn encode_column(
    array: &ArrayRef,
    descr: ColumnDescPtr,
    options: &ChunkOptions,
    zstd: &mut Compressors,
) -> Result<EncodedChunk> {
    // A validity buffer without a null is no nulls.
    let valid = array
        .logical_nulls()
        .filter(|nulls| nulls.null_count() > 0)
        .map(|nulls| nulls.into_inner());
    if valid.is_some() && descr.max_def_level() == 0 {
        return Err(ParquetError::General(format!(
            "column {} is required but the array has nulls",
            descr.path()
        )));
    }
    let valid = valid.as_ref();
    let mut write =
        |values: &dyn ChunkSource| values.write(valid, ColumnDescPtr::clone(&descr), options, zstd);
    match array.data_type() {
        DataType::UInt8 => write(&Ints(array.as_primitive::<UInt8Type>().values())),
        DataType::UInt16 => write(&Ints(array.as_primitive::<UInt16Type>().values())),
        DataType::UInt32 => write(&Ints(array.as_primitive::<UInt32Type>().values())),
        DataType::Int32 => write(&Ints(array.as_primitive::<Int32Type>().values())),
        DataType::Int64 => write(&Ints(array.as_primitive::<Int64Type>().values())),
        DataType::UInt64 => write(&Ints(array.as_primitive::<UInt64Type>().values())),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => write(&Ints(
            array.as_primitive::<TimestampNanosecondType>().values(),
        )),
        DataType::Boolean => write(&Bools(array.as_boolean())),
        DataType::FixedSizeBinary(_) => write(&FixedBytes::new(array.as_fixed_size_binary())?),
        DataType::Binary => write(&Binary {
            array: array.as_binary::<i32>(),
            bounds: options.statistics || options.page_index,
        }),
        // Strings are byte arrays to Parquet: the same buffers, seen as binary.
        DataType::Utf8 => {
            let strings = array.as_string::<i32>();
            let bytes = BinaryArray::new(
                strings.offsets().clone(),
                strings.values().clone(),
                strings.nulls().cloned(),
            );
            write(&Binary {
                array: &bytes,
                bounds: options.statistics || options.page_index,
            })
        }
        other => Err(ParquetError::General(format!(
            "column {}: no chunk encoder for Arrow type {other}",
            descr.path()
        ))),
    }
}

/// Any [`Values`] behind one object type, so one call site serves every column type.
trait ChunkSource {
    fn write(
        &self,
        valid: Option<&BooleanBuffer>,
        descr: ColumnDescPtr,
        options: &ChunkOptions,
        zstd: &mut Compressors,
    ) -> Result<EncodedChunk>;
}

impl<V: Values> ChunkSource for V {
    fn write(
        &self,
        valid: Option<&BooleanBuffer>,
        descr: ColumnDescPtr,
        options: &ChunkOptions,
        zstd: &mut Compressors,
    ) -> Result<EncodedChunk> {
        write_chunk(self, valid, descr, options, zstd)
    }
}

/// The values of one column as the chunk writer sees them.
trait Values {
    /// The values' order, for statistics.
    type Key: Ord + Copy;
    /// The Parquet physical type the values are written as.
    const PHYSICAL: PhysicalType;

    fn len(&self) -> usize;

    /// Appends the encoding of the valid values among `rows` to `out` and returns
    /// the smallest and largest of them (none if no row is valid). `valid` is the
    /// column's validity, given only when some row of `rows` is null.
    fn encode(
        &self,
        rows: Range<usize>,
        valid: Option<&BooleanBuffer>,
        encoding: Encoding,
        out: &mut Vec<u8>,
    ) -> Result<Option<(Self::Key, Self::Key)>>;

    /// The end of the page that starts at row `start`.
    fn page_end(&self, start: usize, options: &ChunkOptions) -> usize {
        (start + options.page_rows.max(1)).min(self.len())
    }

    /// A key as the page index stores it (little-endian, or the bytes themselves).
    fn key_bytes(&self, key: Self::Key) -> Vec<u8>;

    /// Chunk statistics.
    fn statistics(&self, min_max: Option<(Self::Key, Self::Key)>, nulls: u64) -> Statistics;

    /// Adds the valid values to a Bloom filter.
    fn insert_into(&self, _valid: Option<&BooleanBuffer>, _bloom: &mut Sbbf) {}

    /// Whether the values of `rows` (null slots included) change so rarely that
    /// the page is better written as deltas than as byte streams. Byte streams
    /// of such a page are long runs, which LZ4 stores as overlapping matches
    /// and `lz4_flex` expands one byte at a time: it was 40% of a busy-address
    /// query's time. Deltas store a run in a few bits.
    fn long_runs(&self, _rows: Range<usize>) -> bool {
        false
    }

    /// The chunk's dictionary: its distinct valid values and each row's index among
    /// them. None where the type has no dictionary encoder or the chunk has more
    /// than [`DICTIONARY_MAX_VALUES`] distinct values.
    fn dictionary(&self, _valid: Option<&BooleanBuffer>) -> Option<Dictionary<Self::Key>> {
        None
    }
}

/// The most distinct values a chunk is dictionary-encoded with; a chunk with more
/// is written `PLAIN`.
const DICTIONARY_MAX_VALUES: usize = 1 << 16;

/// The mean run of equal values from which a byte-stream-split page is
/// written as deltas instead ([`Values::long_runs`]).
const MIN_MEAN_RUN: usize = 16;

/// Slots of the dictionary builder's cache of recent keys.
const DICTIONARY_CACHE: usize = 256;

/// A chunk's dictionary: see [`Values::dictionary`].
struct Dictionary<K> {
    /// The distinct values in the order of their first row.
    keys: Vec<K>,
    /// The dictionary page's values (`PLAIN`).
    plain: Vec<u8>,
    /// Each row's index into `keys` (0 for a null row).
    indices: Vec<u32>,
}

impl<K: Ord + Copy> Dictionary<K> {
    /// Appends the indices of the valid rows among `rows` (`RLE_DICTIONARY`: the bit
    /// width, then bit-packed runs) and returns their smallest and largest value.
    fn encode(
        &self,
        rows: Range<usize>,
        valid: Option<&BooleanBuffer>,
        scratch: &mut Vec<u32>,
        out: &mut Vec<u8>,
    ) -> Option<(K, K)> {
        scratch.clear();
        match valid {
            None => scratch.extend_from_slice(&self.indices[rows]),
            Some(_) => for_each_valid_run(rows, valid, |run| {
                scratch.extend_from_slice(&self.indices[run]);
            }),
        }
        let width = (32 - (self.keys.len().max(2) as u32 - 1).leading_zeros()) as u8;
        out.push(width);
        put_bit_packed(scratch, width, out);
        // Page minimum and maximum over the indices seen: far fewer comparisons of
        // wide keys than rows.
        let mut seen = vec![false; self.keys.len()];
        for &i in scratch.iter() {
            seen[i as usize] = true;
        }
        seen.iter()
            .zip(&self.keys)
            .filter(|(seen, _)| **seen)
            .fold(None, |range, (_, &k)| widen(range, (k, k)))
    }
}

/// Appends `values` as bit-packed runs of the RLE/bit-packing hybrid (`width` bits
/// each, the last group of eight padded with zeros); runs are kept to 63 groups,
/// as the reference writers do.
fn put_bit_packed(values: &[u32], width: u8, out: &mut Vec<u8>) {
    for run in values.chunks(63 * 8) {
        let groups = run.len().div_ceil(8);
        put_varint(out, ((groups as u64) << 1) | 1);
        let padded = (0..groups * 8).map(|j| u64::from(run.get(j).copied().unwrap_or(0)));
        put_packed(padded, u32::from(width), out);
    }
}

/// Appends `values`, `width` bits each (at most 64), packed least significant bit
/// first; a last partial byte is padded with zeros.
fn put_packed(values: impl IntoIterator<Item = u64>, width: u32, out: &mut Vec<u8>) {
    // Eight bytes at a time: fewer than 64 bits are held between values, so a
    // value of up to 64 bits always fits the 128-bit accumulator.
    let mut acc: u128 = 0;
    let mut held = 0u32;
    for value in values {
        acc |= u128::from(value) << held;
        held += width;
        if held >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            held -= 64;
        }
    }
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..held.div_ceil(8) as usize]);
}

/// Widens the range `(lo, hi)` (none yet: empty) to include `from..=to`.
#[inline]
fn widen<K: Ord + Copy>(range: Option<(K, K)>, (from, to): (K, K)) -> Option<(K, K)> {
    Some(range.map_or((from, to), |(lo, hi)| (lo.min(from), hi.max(to))))
}

/// Calls `f` with each valid row of `rows`.
#[inline]
fn for_each_valid(rows: Range<usize>, valid: Option<&BooleanBuffer>, mut f: impl FnMut(usize)) {
    for_each_valid_run(rows, valid, |run| run.for_each(&mut f));
}

/// Calls `f` with each run of consecutive valid rows of `rows`, in order. Nulls
/// are few (a column's value missing for some packets), so the runs are long,
/// and a caller copies each as a slice rather than row by row; the runs come
/// from the validity bitmap a 64-bit word at a time.
#[inline]
fn for_each_valid_run(
    rows: Range<usize>,
    valid: Option<&BooleanBuffer>,
    mut f: impl FnMut(Range<usize>),
) {
    match valid {
        None => f(rows),
        Some(valid) => {
            let start = rows.start;
            for (from, to) in valid.slice(start, rows.len()).set_slices() {
                f(start + from..start + to);
            }
        }
    }
}

/// An integer type written as Parquet `INT32` or `INT64`.
trait Integer: ArrowNativeType + Ord {
    const INT64: bool;
    /// The value as the physical type's bits (sign-extended or zero-extended).
    fn bits(self) -> i64;
}

macro_rules! integer {
    ($($t:ty => $int64:expr),*) => {$(
        impl Integer for $t {
            const INT64: bool = $int64;
            #[inline]
            fn bits(self) -> i64 {
                self as i64
            }
        }
    )*};
}
integer!(u8 => false, u16 => false, u32 => false, i32 => false, i64 => true, u64 => true);

struct Ints<'a, T>(&'a [T]);

impl<T: Integer> Ints<'_, T> {
    const WIDTH: usize = if T::INT64 { 8 } else { 4 };

    #[inline]
    fn put(out: &mut [u8], value: T) {
        if T::INT64 {
            out.copy_from_slice(&value.bits().to_le_bytes());
        } else {
            out.copy_from_slice(&(value.bits() as i32).to_le_bytes());
        }
    }
}

impl<T: Integer> Values for Ints<'_, T> {
    type Key = T;
    const PHYSICAL: PhysicalType = if T::INT64 {
        PhysicalType::INT64
    } else {
        PhysicalType::INT32
    };

    fn len(&self) -> usize {
        self.0.len()
    }

    fn encode(
        &self,
        rows: Range<usize>,
        valid: Option<&BooleanBuffer>,
        encoding: Encoding,
        out: &mut Vec<u8>,
    ) -> Result<Option<(T, T)>> {
        // The valid values, borrowed when the page has no nulls.
        let gathered: Vec<T>;
        let values: &[T] = match valid {
            Some(_) => {
                let mut kept = Vec::with_capacity(rows.len());
                for_each_valid_run(rows, valid, |run| kept.extend_from_slice(&self.0[run]));
                gathered = kept;
                &gathered
            }
            None => &self.0[rows],
        };
        let min_max = values.iter().fold(None, |range, &v| widen(range, (v, v)));
        let start = out.len();
        match encoding {
            Encoding::PLAIN => {
                out.resize(start + values.len() * Self::WIDTH, 0);
                for (slot, &v) in out[start..].chunks_exact_mut(Self::WIDTH).zip(values) {
                    Self::put(slot, v);
                }
            }
            Encoding::BYTE_STREAM_SPLIT => {
                // Byte k of every value, then byte k + 1 of every value...: the
                // high bytes of small numbers become runs of zeros for zstd.
                let n = values.len();
                out.resize(start + n * Self::WIDTH, 0);
                let streams = &mut out[start..];
                let mut bytes = [0u8; 8];
                for (i, &v) in values.iter().enumerate() {
                    Self::put(&mut bytes[..Self::WIDTH], v);
                    for (k, &byte) in bytes[..Self::WIDTH].iter().enumerate() {
                        streams[k * n + i] = byte;
                    }
                }
            }
            Encoding::DELTA_BINARY_PACKED => {
                let bits: Vec<i64> = values
                    .iter()
                    .map(|&v| {
                        if T::INT64 {
                            v.bits()
                        } else {
                            i64::from(v.bits() as i32)
                        }
                    })
                    .collect();
                delta_binary_packed(&bits, T::INT64, out);
            }
            other => {
                return Err(ParquetError::General(format!(
                    "no {other} encoder for integers"
                )));
            }
        }
        Ok(min_max)
    }

    fn long_runs(&self, rows: Range<usize>) -> bool {
        let Some(page) = self.0.get(rows) else {
            return false;
        };
        let changes = page.windows(2).filter(|pair| pair[0] != pair[1]).count();
        changes * MIN_MEAN_RUN < page.len()
    }

    fn key_bytes(&self, key: T) -> Vec<u8> {
        let mut bytes = vec![0; Self::WIDTH];
        Self::put(&mut bytes, key);
        bytes
    }

    fn statistics(&self, min_max: Option<(T, T)>, nulls: u64) -> Statistics {
        let (min, max) = min_max.unzip();
        if T::INT64 {
            Statistics::int64(min.map(T::bits), max.map(T::bits), None, Some(nulls), false)
        } else {
            let int32 = |v: T| v.bits() as i32;
            Statistics::int32(min.map(int32), max.map(int32), None, Some(nulls), false)
        }
    }
}

struct Bools<'a>(&'a BooleanArray);

impl Values for Bools<'_> {
    type Key = bool;
    const PHYSICAL: PhysicalType = PhysicalType::BOOLEAN;

    fn len(&self) -> usize {
        self.0.len()
    }

    fn encode(
        &self,
        rows: Range<usize>,
        valid: Option<&BooleanBuffer>,
        _encoding: Encoding,
        out: &mut Vec<u8>,
    ) -> Result<Option<(bool, bool)>> {
        // PLAIN booleans: one bit per valid value, LSB first.
        let values = self.0.values();
        if valid.is_none() {
            // Every row: the page's bits as they are.
            let bits = values.slice(rows.start, rows.len());
            let set = bits.count_set_bits();
            let at = out.len();
            out.extend_from_slice(&bits.sliced());
            // Bits past the page's last row (the next rows') are padding: zeros.
            if !rows.len().is_multiple_of(8)
                && let Some(last) = out[at..].last_mut()
            {
                *last &= (1u8 << (rows.len() % 8)) - 1;
            }
            return Ok((!rows.is_empty()).then_some((set == rows.len(), set > 0)));
        }
        // The valid rows' bits, copied a run of valid rows at a time.
        let mut packed = vec![0u8; rows.len().div_ceil(8)];
        let (mut count, mut zeros) = (0usize, 0usize);
        for_each_valid_run(rows, valid, |run| {
            zeros += set_bits(
                &mut packed,
                values.values(),
                count,
                values.offset() + run.start,
                run.len(),
            );
            count += run.len();
        });
        out.extend_from_slice(&packed[..count.div_ceil(8)]);
        Ok((count > 0).then_some((zeros == 0, zeros < count)))
    }

    fn key_bytes(&self, key: bool) -> Vec<u8> {
        vec![u8::from(key)]
    }

    fn statistics(&self, min_max: Option<(bool, bool)>, nulls: u64) -> Statistics {
        let (min, max) = min_max.unzip();
        Statistics::boolean(min, max, None, Some(nulls), false)
    }
}

/// Fixed-size binary values of at most 16 bytes (MACs, addresses), ordered as
/// big-endian integers, which is their byte order.
struct FixedBytes<'a> {
    array: &'a FixedSizeBinaryArray,
    width: usize,
}

impl<'a> FixedBytes<'a> {
    const MAX_WIDTH: usize = 16;

    fn new(array: &'a FixedSizeBinaryArray) -> Result<Self> {
        let width = array.value_length() as usize;
        if width > Self::MAX_WIDTH {
            return Err(ParquetError::General(format!(
                "no chunk encoder for fixed-size binary values of {width} bytes"
            )));
        }
        Ok(Self { array, width })
    }

    #[inline]
    fn key(value: &[u8]) -> u128 {
        // Addresses and MACs without a call to memcpy.
        if let Ok(bytes) = <[u8; 16]>::try_from(value) {
            return u128::from_be_bytes(bytes);
        }
        if let Ok([a, b, c, d, e, f]) = <[u8; 6]>::try_from(value) {
            return u128::from(u64::from_be_bytes([a, b, c, d, e, f, 0, 0])) << 64;
        }
        let mut bytes = [0u8; Self::MAX_WIDTH];
        bytes[..value.len()].copy_from_slice(value);
        u128::from_be_bytes(bytes)
    }
}

impl Values for FixedBytes<'_> {
    type Key = u128;
    const PHYSICAL: PhysicalType = PhysicalType::FIXED_LEN_BYTE_ARRAY;

    fn len(&self) -> usize {
        self.array.len()
    }

    fn encode(
        &self,
        rows: Range<usize>,
        valid: Option<&BooleanBuffer>,
        _encoding: Encoding,
        out: &mut Vec<u8>,
    ) -> Result<Option<(u128, u128)>> {
        let (data, width) = (self.array.value_data(), self.width);
        let start = out.len();
        if valid.is_none() {
            out.extend_from_slice(&data[rows.start * width..rows.end * width]);
        } else {
            for_each_valid_run(rows, valid, |run| {
                out.extend_from_slice(&data[run.start * width..run.end * width]);
            });
        }
        Ok(out[start..]
            .chunks_exact(width)
            .map(Self::key)
            .fold(None, |range, k| widen(range, (k, k))))
    }

    fn key_bytes(&self, key: u128) -> Vec<u8> {
        key.to_be_bytes()[..self.width].to_vec()
    }

    fn statistics(&self, min_max: Option<(u128, u128)>, nulls: u64) -> Statistics {
        let (min, max) = min_max.unzip();
        let value = |k: u128| FixedLenByteArray::from(self.key_bytes(k));
        Statistics::fixed_len_byte_array(min.map(value), max.map(value), None, Some(nulls), false)
    }

    fn dictionary(&self, valid: Option<&BooleanBuffer>) -> Option<Dictionary<u128>> {
        let (data, width) = (self.array.value_data(), self.width);
        let rows = self.array.len();
        let mut positions: foldhash::HashMap<u128, u32> = foldhash::HashMap::default();
        let mut keys = Vec::new();
        let mut plain = Vec::new();
        let mut indices = vec![0u32; rows];
        // A row group holds a few dozen distinct addresses, so nearly every row
        // is found in the cache without hashing.
        let mut cache = RecentKeys::<u32, DICTIONARY_CACHE>::new();
        let mut full = false;
        for_each_valid(0..rows, valid, |row| {
            if full {
                return;
            }
            let value = &data[row * width..(row + 1) * width];
            let key = Self::key(value);
            let index = match cache.get(key) {
                Some(index) => index,
                None => {
                    let next = keys.len() as u32;
                    let index = *positions.entry(key).or_insert(next);
                    if index == next {
                        keys.push(key);
                        plain.extend_from_slice(value);
                        full = keys.len() > DICTIONARY_MAX_VALUES;
                    }
                    cache.insert(key, index);
                    index
                }
            };
            indices[row] = index;
        });
        (!full).then_some(Dictionary {
            keys,
            plain,
            indices,
        })
    }

    fn insert_into(&self, valid: Option<&BooleanBuffer>, bloom: &mut Sbbf) {
        // Consecutive repeats (a conversation's packets) are inserted once.
        let mut last: Option<&[u8]> = None;
        for_each_valid(0..self.array.len(), valid, |row| {
            let v = self.array.value(row);
            if last != Some(v) {
                bloom.insert(v);
                last = Some(v);
            }
        });
    }
}

struct Binary<'a> {
    array: &'a BinaryArray,
    /// Whether minima and maxima are wanted (statistics or the page index): for
    /// packet bytes they are not, and comparing them costs.
    bounds: bool,
}

impl<'a> Values for Binary<'a> {
    type Key = &'a [u8];
    const PHYSICAL: PhysicalType = PhysicalType::BYTE_ARRAY;

    fn len(&self) -> usize {
        self.array.len()
    }

    fn encode(
        &self,
        rows: Range<usize>,
        valid: Option<&BooleanBuffer>,
        _encoding: Encoding,
        out: &mut Vec<u8>,
    ) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let array: &'a BinaryArray = self.array;
        let offsets = array.value_offsets();
        out.reserve(offsets[rows.end].as_usize() - offsets[rows.start].as_usize() + 4 * rows.len());
        let mut min_max: Option<(&'a [u8], &'a [u8])> = None;
        for_each_valid(rows, valid, |row| {
            let v = array.value(row);
            // Values are at most i32::MAX bytes: Arrow's offsets are i32.
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
            if self.bounds {
                min_max = widen(min_max, (v, v));
            }
        });
        Ok(min_max)
    }

    fn page_end(&self, start: usize, options: &ChunkOptions) -> usize {
        let end = (start + options.page_rows.max(1)).min(self.len());
        if options.page_bytes == 0 {
            return end;
        }
        // The first row past `page_bytes` of values closes the page.
        let offsets = self.array.value_offsets();
        let limit = offsets[start].as_usize() + options.page_bytes;
        let past = offsets[start + 1..=end].partition_point(|&o| o.as_usize() < limit);
        (start + past + 1).min(end)
    }

    fn key_bytes(&self, key: &[u8]) -> Vec<u8> {
        key.to_vec()
    }

    fn statistics(&self, min_max: Option<(&[u8], &[u8])>, nulls: u64) -> Statistics {
        let (min, max) = min_max.unzip();
        let value = |v: &[u8]| parquet::data_type::ByteArray::from(v.to_vec());
        Statistics::byte_array(min.map(value), max.map(value), None, Some(nulls), false)
    }
}

/// Writes the pages of one column chunk and gathers its metadata.
fn write_chunk<V: Values>(
    values: &V,
    valid: Option<&BooleanBuffer>,
    descr: ColumnDescPtr,
    options: &ChunkOptions,
    zstd: &mut Compressors,
) -> Result<EncodedChunk> {
    if descr.physical_type() != V::PHYSICAL {
        return Err(ParquetError::General(format!(
            "column {} is {} in the schema but {} in the batch",
            descr.path(),
            descr.physical_type(),
            V::PHYSICAL
        )));
    }
    let nullable = descr.max_def_level() > 0;
    let integer = matches!(V::PHYSICAL, PhysicalType::INT32 | PhysicalType::INT64);
    let dictionary = match options.encoding {
        Encoding::RLE_DICTIONARY => values.dictionary(valid),
        Encoding::PLAIN => None,
        Encoding::BYTE_STREAM_SPLIT | Encoding::DELTA_BINARY_PACKED if integer => None,
        other => {
            return Err(ParquetError::General(format!(
                "column {}: no chunk encoder for {other} of {}",
                descr.path(),
                V::PHYSICAL
            )));
        }
    };
    let encoding = match (&dictionary, options.encoding) {
        (Some(_), _) => Encoding::RLE_DICTIONARY,
        // Too many distinct values (or no dictionary encoder): plain values.
        (None, Encoding::RLE_DICTIONARY) => Encoding::PLAIN,
        (None, encoding) => encoding,
    };
    let rows = values.len();
    let mut pages = PageSink::default();
    let (mut compressed_bytes, mut uncompressed_bytes) = (0u64, 0u64);
    if let Some(dictionary) = &dictionary {
        let compressed = options.compress(zstd, &dictionary.plain)?;
        let spec = pages.write(
            PageKind::Dictionary {
                values: dictionary.keys.len(),
            },
            &compressed,
            dictionary.plain.len(),
        )?;
        compressed_bytes += spec.compressed_size as u64;
        uncompressed_bytes += spec.uncompressed_size as u64;
    }
    let first_data_page = compressed_bytes;
    let mut scratch = Vec::new();
    let mut offsets = OffsetIndexBuilder::new();
    let mut index = options
        .page_index
        .then(|| ColumnIndexBuilder::new(V::PHYSICAL));
    let mut chunk_min_max: Option<(V::Key, V::Key)> = None;
    // Whether page minima and maxima never fall (and never rise): the index's boundary order.
    let (mut ascending, mut descending) = (true, true);
    let mut last_page: Option<(V::Key, V::Key)> = None;
    let mut chunk_nulls = 0u64;
    let mut page = Vec::new();
    // Whether a page of a byte-stream-split chunk was written as deltas.
    let mut deltas = false;
    let mut start = 0;
    while start < rows {
        let end = values.page_end(start, options);
        page.clear();
        let nulls = if nullable {
            put_definition_levels(start..end, valid, &mut page)
        } else {
            0
        };
        // Encoders see the validity only for pages with a null, so pages without
        // one take their fast paths without counting again.
        let page_valid = valid.filter(|_| nulls > 0);
        // Long runs of one value as deltas: see `Values::long_runs`.
        let page_encoding =
            if encoding == Encoding::BYTE_STREAM_SPLIT && values.long_runs(start..end) {
                deltas = true;
                Encoding::DELTA_BINARY_PACKED
            } else {
                encoding
            };
        let min_max = match &dictionary {
            Some(dictionary) => dictionary.encode(start..end, page_valid, &mut scratch, &mut page),
            None => values.encode(start..end, page_valid, page_encoding, &mut page)?,
        };
        let compressed = options.compress(zstd, &page)?;
        let spec = pages.write(
            PageKind::Data {
                values: end - start,
                encoding: page_encoding,
            },
            &compressed,
            page.len(),
        )?;
        offsets.append_offset_and_size(spec.offset as i64, spec.compressed_size as i32);
        offsets.append_row_count((end - start) as i64);
        compressed_bytes += spec.compressed_size as u64;
        uncompressed_bytes += spec.uncompressed_size as u64;
        chunk_nulls += nulls;
        if let Some((lo, hi)) = min_max {
            chunk_min_max = widen(chunk_min_max, (lo, hi));
            if let Some((last_lo, last_hi)) = last_page {
                ascending &= last_lo <= lo && last_hi <= hi;
                descending &= last_lo >= lo && last_hi >= hi;
            }
            last_page = Some((lo, hi));
        }
        if let Some(index) = index.as_mut() {
            match min_max {
                Some((lo, hi)) => {
                    index.append(
                        false,
                        values.key_bytes(lo),
                        values.key_bytes(hi),
                        nulls as i64,
                    );
                }
                None => index.append(true, Vec::new(), Vec::new(), nulls as i64),
            }
        }
        start = end;
    }
    let bytes = Bytes::from(pages.bytes);

    let mut encodings = vec![encoding];
    if deltas {
        encodings.push(Encoding::DELTA_BINARY_PACKED);
    }
    if dictionary.is_some() {
        // The dictionary page's values.
        encodings.push(Encoding::PLAIN);
    }
    if nullable {
        encodings.push(Encoding::RLE);
    }
    let mut metadata = ColumnChunkMetaData::builder(descr)
        .set_compression(options.compression())
        .set_encodings_mask(EncodingMask::new_from_encodings(encodings.iter()))
        .set_total_compressed_size(compressed_bytes as i64)
        .set_total_uncompressed_size(uncompressed_bytes as i64)
        .set_num_values(rows as i64)
        .set_dictionary_page_offset(dictionary.is_some().then_some(0))
        .set_data_page_offset(first_data_page as i64);
    if options.statistics {
        metadata = metadata.set_statistics(values.statistics(chunk_min_max, chunk_nulls));
    }
    let column_index = match index {
        Some(mut index) => {
            index.set_boundary_order(if last_page.is_none() {
                BoundaryOrder::UNORDERED
            } else if ascending {
                BoundaryOrder::ASCENDING
            } else if descending {
                BoundaryOrder::DESCENDING
            } else {
                BoundaryOrder::UNORDERED
            });
            Some(index.build()?)
        }
        None => None,
    };
    let bloom_filter = match options.bloom {
        Some((ndv, fpp)) => {
            let mut bloom = Sbbf::new_with_ndv_fpp(ndv.max(1), fpp)?;
            match &dictionary {
                Some(dictionary) => {
                    for &key in &dictionary.keys {
                        bloom.insert(values.key_bytes(key).as_slice());
                    }
                }
                None => values.insert_into(valid, &mut bloom),
            }
            bloom.fold_to_target_fpp(fpp);
            Some(bloom)
        }
        None => None,
    };
    Ok(EncodedChunk {
        close: ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: rows as u64,
            metadata: metadata.build()?,
            bloom_filter,
            column_index,
            offset_index: Some(offsets.build()),
        },
        bytes,
    })
}

/// The pages of one column chunk, each behind its Thrift page header (the
/// compact protocol, as the Parquet format defines it), written into memory.
/// Headers carry the CRC-32 of the page's stored (compressed) bytes, which the
/// `parquet` crate's reader checks (its `crc` feature) and the crate's own page
/// writer does not write.
#[derive(Default)]
struct PageSink {
    bytes: Vec<u8>,
}

/// What a page holds.
#[derive(Clone, Copy, Debug)]
enum PageKind {
    /// A dictionary page of `values` PLAIN values.
    Dictionary { values: usize },
    /// A v1 data page of `values` values (with nulls), levels RLE.
    Data { values: usize, encoding: Encoding },
}

/// Where a page went in the chunk, as the offset index and the chunk's sizes count it.
#[derive(Clone, Copy, Debug)]
struct WrittenPage {
    /// Offset of the page header in the chunk.
    offset: u64,
    /// Header and stored bytes.
    compressed_size: usize,
    /// Header and uncompressed bytes.
    uncompressed_size: usize,
}

/// Thrift compact protocol field types.
const THRIFT_I32: u8 = 5;
const THRIFT_STRUCT: u8 = 12;
const THRIFT_BOOL_FALSE: u8 = 2;

impl PageSink {
    /// Appends a page: its header, then `stored` (the compressed bytes);
    /// `uncompressed` is the page's size before compression.
    fn write(&mut self, kind: PageKind, stored: &[u8], uncompressed: usize) -> Result<WrittenPage> {
        let size = |n: usize| {
            i32::try_from(n).map_err(|_| ParquetError::General(format!("page of {n} bytes")))
        };
        let offset = self.bytes.len() as u64;
        let out = &mut self.bytes;
        let page_type = match kind {
            PageKind::Data { .. } => 0,
            PageKind::Dictionary { .. } => 2,
        };
        // PageHeader: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, 4 crc.
        thrift_i32_field(out, 1, page_type);
        thrift_i32_field(out, 1, size(uncompressed)?);
        thrift_i32_field(out, 1, size(stored.len())?);
        thrift_i32_field(out, 1, crc32fast::hash(stored) as i32);
        match kind {
            PageKind::Data { values, encoding } => {
                // 5 data_page_header: 1 num_values, 2 encoding, 3 definition and
                // 4 repetition level encodings.
                out.push((1 << 4) | THRIFT_STRUCT);
                thrift_i32_field(out, 1, size(values)?);
                thrift_i32_field(out, 1, thrift_encoding(encoding)?);
                thrift_i32_field(out, 1, thrift_encoding(Encoding::RLE)?);
                thrift_i32_field(out, 1, thrift_encoding(Encoding::RLE)?);
                out.push(0);
            }
            PageKind::Dictionary { values } => {
                // 7 dictionary_page_header: 1 num_values, 2 encoding, 3 is_sorted.
                out.push((3 << 4) | THRIFT_STRUCT);
                thrift_i32_field(out, 1, size(values)?);
                thrift_i32_field(out, 1, thrift_encoding(Encoding::PLAIN)?);
                out.push((1 << 4) | THRIFT_BOOL_FALSE);
                out.push(0);
            }
        }
        out.push(0);
        let header = out.len() - offset as usize;
        out.extend_from_slice(stored);
        Ok(WrittenPage {
            offset,
            compressed_size: header + stored.len(),
            uncompressed_size: header + uncompressed,
        })
    }
}

/// Appends an i32 field `delta` ids after the previous one (compact protocol:
/// the delta and the type in one byte, then the zigzag varint).
fn thrift_i32_field(out: &mut Vec<u8>, delta: u8, value: i32) {
    out.push((delta << 4) | THRIFT_I32);
    put_varint(out, ((value << 1) ^ (value >> 31)) as u32 as u64);
}

/// The Thrift value of an encoding this encoder writes.
fn thrift_encoding(encoding: Encoding) -> Result<i32> {
    Ok(match encoding {
        Encoding::PLAIN => 0,
        Encoding::RLE => 3,
        Encoding::DELTA_BINARY_PACKED => 5,
        Encoding::RLE_DICTIONARY => 8,
        Encoding::BYTE_STREAM_SPLIT => 9,
        other => {
            return Err(ParquetError::General(format!(
                "no page header for encoding {other}"
            )));
        }
    })
}

/// Appends the definition levels of `rows` (max level 1), length-prefixed as in a v1
/// data page, and returns the number of nulls among them.
fn put_definition_levels(
    rows: Range<usize>,
    valid: Option<&BooleanBuffer>,
    out: &mut Vec<u8>,
) -> u64 {
    let len = rows.len();
    let length_at = out.len();
    out.extend_from_slice(&[0; 4]);
    let bits = valid.map(|valid| valid.slice(rows.start, len));
    let set = bits.as_ref().map_or(len, BooleanBuffer::count_set_bits);
    if set == len || set == 0 {
        // One RLE run of the level (bit width 1: one byte).
        put_varint(out, (len as u64) << 1);
        out.push(u8::from(set == len));
    } else if let Some(bits) = bits {
        // Bit-packed runs: groups of eight levels are exactly the validity bytes.
        // Runs are kept to 63 groups, as the reference writers do.
        let packed = bits.sliced();
        for run in packed.as_slice()[..len.div_ceil(8)].chunks(63) {
            put_varint(out, ((run.len() as u64) << 1) | 1);
            out.extend_from_slice(run);
        }
    }
    let levels = (out.len() - length_at - 4) as u32;
    out[length_at..length_at + 4].copy_from_slice(&levels.to_le_bytes());
    (len - set) as u64
}

fn put_zigzag(out: &mut Vec<u8>, value: i64) {
    put_varint(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Values per block and miniblocks per block of `DELTA_BINARY_PACKED`.
const DELTA_BLOCK: usize = 128;
const DELTA_MINIBLOCKS: usize = 4;

/// Appends `values` encoded `DELTA_BINARY_PACKED` (deltas computed in the physical
/// type's width: 64 bits if `int64`, else 32).
fn delta_binary_packed(values: &[i64], int64: bool, out: &mut Vec<u8>) {
    let mini_len = DELTA_BLOCK / DELTA_MINIBLOCKS;
    put_varint(out, DELTA_BLOCK as u64);
    put_varint(out, DELTA_MINIBLOCKS as u64);
    put_varint(out, values.len() as u64);
    put_zigzag(out, values.first().copied().unwrap_or(0));
    let delta = |pair: &[i64]| {
        if int64 {
            pair[1].wrapping_sub(pair[0])
        } else {
            i64::from((pair[1] as i32).wrapping_sub(pair[0] as i32))
        }
    };
    let deltas: Vec<i64> = values.windows(2).map(delta).collect();
    for block in deltas.chunks(DELTA_BLOCK) {
        let min = block.iter().copied().min().unwrap_or(0);
        put_zigzag(out, min);
        let widths_at = out.len();
        out.extend_from_slice(&[0; DELTA_MINIBLOCKS]);
        for (i, mini) in block.chunks(mini_len).enumerate() {
            // Deltas relative to the block's minimum. In the physical width:
            // 32-bit deltas are sign-extended, so `d - min` is below 2^32 and is
            // what 32-bit wrapping arithmetic gives.
            let ored = mini
                .iter()
                .fold(0u64, |ored, &d| ored | d.wrapping_sub(min) as u64);
            let width = 64 - ored.leading_zeros();
            out[widths_at + i] = width as u8;
            if width == 0 {
                // Equal deltas (a run, for byte-stream-split pages written as
                // deltas): the miniblock has no bytes.
                continue;
            }
            // A miniblock is always mini_len values wide; the tail is zero padding.
            let relative = mini.iter().map(|&d| d.wrapping_sub(min) as u64);
            let padding = std::iter::repeat_n(0, mini_len - mini.len());
            put_packed(relative.chain(padding), width, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        BinaryArray, BooleanArray, FixedSizeBinaryArray, RecordBatch, TimestampNanosecondArray,
        UInt8Array, UInt16Array, UInt32Array, UInt64Array,
    };
    use arrow::datatypes::{Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::page_index::column_index::ColumnIndexMetaData;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// Writes `batch` as one row group whose chunks all come from `encode_column`,
    /// then reads it back with the parquet crate's reader.
    fn round_trip(batch: &RecordBatch, options: &ChunkOptions) -> (RecordBatch, Bytes) {
        let (mut file, _) = ArrowWriter::try_new(Vec::new(), batch.schema(), None)
            .unwrap()
            .into_serialized_writer()
            .unwrap();
        let descrs: Vec<_> = (0..batch.num_columns())
            .map(|i| file.schema_descr().column(i))
            .collect();
        let mut zstd = Compressors::default();
        let mut group = file.next_row_group().unwrap();
        for (column, descr) in batch.columns().iter().zip(descrs) {
            let chunk = encode_column(column, descr, options, &mut zstd).unwrap();
            group.append_column(&chunk.bytes, chunk.close).unwrap();
        }
        group.close().unwrap();
        let bytes = Bytes::from(file.into_inner().unwrap());
        let read = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>();
        let read = arrow::compute::concat_batches(&batch.schema(), &read).unwrap();
        (read, bytes)
    }

    fn sample(rows: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
            Field::new("u8", DataType::UInt8, true),
            Field::new("u16", DataType::UInt16, true),
            Field::new("u32", DataType::UInt32, false),
            Field::new("u64", DataType::UInt64, false),
            Field::new("flag", DataType::Boolean, true),
            Field::new("addr", DataType::FixedSizeBinary(16), true),
            Field::new("data", DataType::Binary, false),
        ]));
        // Deterministic values with every page shape: no nulls, some, all.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let ts: Vec<i64> = (0..rows as i64)
            .map(|i| 1_700_000_000_000_000_000 + i * 1_000 - (i % 7) * 300)
            .collect();
        let u8s: Vec<Option<u8>> = (0..rows)
            .map(|i| (i % 3 != 0 && !(5000..6000).contains(&i)).then(|| next() as u8))
            .collect();
        let u16s: Vec<Option<u16>> = (0..rows)
            .map(|i| (i >= 9000).then(|| next() as u16))
            .collect();
        let u32s: Vec<u32> = (0..rows).map(|_| next() as u32).collect();
        let u64s: Vec<u64> = (0..rows).map(|_| next()).collect();
        let flags: Vec<Option<bool>> = (0..rows)
            .map(|i| (i % 5 != 0).then(|| next() % 2 == 0))
            .collect();
        let addrs: Vec<Option<[u8; 16]>> = (0..rows)
            .map(|i| (i % 11 != 0).then(|| (u128::from(next() % 50)).to_be_bytes()))
            .collect();
        let data: Vec<Vec<u8>> = (0..rows)
            .map(|i| (0..(i % 200)).map(|_| next() as u8).collect())
            .collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(TimestampNanosecondArray::from(ts).with_timezone("UTC")),
                Arc::new(UInt8Array::from(u8s)),
                Arc::new(UInt16Array::from(u16s)),
                Arc::new(UInt32Array::from(u32s)),
                Arc::new(UInt64Array::from(u64s)),
                Arc::new(BooleanArray::from(flags)),
                Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(addrs.into_iter(), 16)
                        .unwrap(),
                ),
                Arc::new(BinaryArray::from_iter_values(data)),
            ],
        )
        .unwrap()
    }

    fn options() -> ChunkOptions {
        ChunkOptions {
            page_rows: 1000,
            page_bytes: 16 * 1024,
            zstd_level: 3,
            raw_literals: false,
            lz4: false,
            statistics: true,
            page_index: true,
            encoding: Encoding::PLAIN,
            bloom: Some((1000, 0.01)),
        }
    }

    #[test]
    fn every_column_type_reads_back_equal() {
        let batch = sample(12_345);
        let (read, _) = round_trip(&batch, &options());
        assert_eq!(read, batch);
    }

    /// Every page header carries the CRC-32 of its stored bytes, and a byte
    /// changed in any page of any column is an error of the reader, never data.
    #[test]
    fn every_page_carries_a_crc_and_damage_is_an_error() {
        let batch = sample(12_345);
        let (_, bytes) = round_trip(&batch, &options());
        let reader = SerializedFileReader::new(bytes.clone()).unwrap();
        let group = reader.metadata().row_group(0);
        let mut pages = 0;
        for column in 0..group.num_columns() {
            let mut page_reader = reader
                .get_row_group(0)
                .unwrap()
                .get_column_page_reader(column)
                .unwrap();
            while let Some(page) = page_reader.get_next_page().unwrap() {
                let _ = page;
                pages += 1;
            }
        }
        assert!(pages > group.num_columns(), "{pages}");
        for column in 0..group.num_columns() {
            let chunk = group.column(column);
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or(chunk.data_page_offset()) as usize;
            let end = start + chunk.compressed_size() as usize;
            // A byte in the middle of the chunk, and its last byte (a page's data).
            for at in [start + (end - start) / 2, end - 1] {
                let mut damaged = bytes.to_vec();
                damaged[at] ^= 0x01;
                let result = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(damaged))
                    .and_then(|builder| builder.build())
                    .map(|reader| reader.collect::<std::result::Result<Vec<_>, _>>());
                let failed = match result {
                    Err(_) | Ok(Err(_)) => true,
                    Ok(Ok(read)) => {
                        let read = arrow::compute::concat_batches(&batch.schema(), &read).unwrap();
                        assert_eq!(read, batch, "column {column}: damage at {at} read as data");
                        false
                    }
                };
                assert!(
                    failed,
                    "column {column}: damage at byte {at} went unnoticed"
                );
            }
        }
    }

    /// Raw literals read back the same, and are really raw: text that Huffman
    /// coding shrinks takes more bytes with them.
    #[test]
    fn raw_literals_read_back_equal_and_are_not_huffman_coded() {
        let lines: Vec<Vec<u8>> = (0..5_000u32)
            .map(|i| {
                let n = i.wrapping_mul(2_654_435_761);
                format!("GET /{n:x}/{} HTTP/1.1 host {}", n % 977, n % 31).into_bytes()
            })
            .collect();
        let array: ArrayRef = Arc::new(BinaryArray::from_iter_values(&lines));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "data",
                DataType::Binary,
                false,
            )])),
            vec![array],
        )
        .unwrap();
        let mut sizes = Vec::new();
        for raw_literals in [false, true] {
            let (read, bytes) = round_trip(
                &batch,
                &ChunkOptions {
                    zstd_level: 1,
                    raw_literals,
                    ..options()
                },
            );
            assert_eq!(read, batch, "raw literals: {raw_literals}");
            sizes.push(bytes.len());
        }
        assert!(sizes[1] > sizes[0] * 11 / 10, "{sizes:?}");
    }

    #[test]
    fn arrays_sliced_at_odd_offsets_read_back_equal() {
        // Row groups are slices of larger batches: validity bitmaps and boolean
        // values then start mid-byte.
        let batch = sample(9_000);
        for (offset, len) in [(3, 5_000), (1_001, 7_777), (8_191, 809)] {
            let slice = batch.slice(offset, len);
            for encoding in [Encoding::PLAIN, Encoding::BYTE_STREAM_SPLIT] {
                let ints = slice.project(&[1, 2, 3, 4]).unwrap();
                let (read, _) = round_trip(
                    &ints,
                    &ChunkOptions {
                        encoding,
                        ..options()
                    },
                );
                assert_eq!(read, ints, "{encoding} at {offset}");
            }
            for encoding in [Encoding::PLAIN, Encoding::RLE_DICTIONARY] {
                let options = ChunkOptions {
                    encoding,
                    ..options()
                };
                let (read, _) = round_trip(&slice, &options);
                assert_eq!(read, slice, "all columns, {encoding} at {offset}");
            }
        }
    }

    #[test]
    fn booleans_without_nulls_read_back_equal_with_their_statistics() {
        // A page without nulls copies its value bits as they are: pages that
        // start and end mid-byte, in arrays sliced mid-byte.
        let bits: Vec<bool> = (0..10_000u32)
            .map(|i| {
                i.wrapping_mul(2_654_435_761) >> 31 == 1
                    || i % 7 == 0
                    || (4_000..4_100).contains(&i)
            })
            .collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "bit",
            DataType::Boolean,
            false,
        )]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(BooleanArray::from(bits.clone()))]).unwrap();
        // The last case is all true: its minimum is true.
        let cases = [
            (0, 10_000),
            (3, 5_000),
            (1_001, 7_777),
            (9_990, 10),
            (4_003, 90),
        ];
        for (offset, len) in cases {
            let slice = batch.slice(offset, len);
            let options = ChunkOptions {
                page_rows: 999,
                ..options()
            };
            let (read, bytes) = round_trip(&slice, &options);
            assert_eq!(read, slice, "at {offset}");
            let reader = SerializedFileReader::new(bytes).unwrap();
            let values = &bits[offset..offset + len];
            match reader
                .metadata()
                .row_group(0)
                .column(0)
                .statistics()
                .unwrap()
            {
                Statistics::Boolean(s) => {
                    assert_eq!(s.min_opt(), Some(&values.iter().all(|&b| b)), "at {offset}");
                    assert_eq!(s.max_opt(), Some(&values.iter().any(|&b| b)), "at {offset}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn integer_encodings_and_negative_levels_read_back_equal() {
        let batch = sample(10_007);
        let integers = batch.project(&[0, 1, 2, 3, 4]).unwrap();
        for encoding in [Encoding::DELTA_BINARY_PACKED, Encoding::BYTE_STREAM_SPLIT] {
            for level in [-5, 1, 3] {
                let (read, _) = round_trip(
                    &integers,
                    &ChunkOptions {
                        encoding,
                        zstd_level: level,
                        ..options()
                    },
                );
                assert_eq!(read, integers, "{encoding}, zstd level {level}");
            }
        }
    }

    /// Byte-stream-split pages whose values come in long runs are written as
    /// deltas; the others stay byte streams. Runs swing between the extremes of
    /// each width, so deltas wrap in 32 and in 64 bits.
    #[test]
    fn pages_of_long_runs_are_deltas_and_read_back_equal() {
        let rows = 10_000;
        let schema = Arc::new(Schema::new(vec![
            Field::new("u8", DataType::UInt8, true),
            Field::new("u32", DataType::UInt32, false),
            Field::new("u64", DataType::UInt64, false),
        ]));
        // Rows 0..3000: runs of 40; 3000..6000: a new value every row; from
        // 6000: one value. Every fifth run of u8 is null.
        let run = |i: usize| if (3000..6000).contains(&i) { i } else { i / 40 };
        let u8s: Vec<Option<u8>> = (0..rows)
            .map(|i| (run(i) % 5 != 0).then_some(if run(i) % 2 == 0 { 0 } else { u8::MAX }))
            .collect();
        let u32s: Vec<u32> = (0..rows)
            .map(|i| if run(i) % 2 == 0 { 0 } else { u32::MAX - 7 })
            .collect();
        let u64s: Vec<u64> = (0..rows)
            .map(|i| if run(i) % 2 == 0 { 1 } else { u64::MAX })
            .collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt8Array::from(u8s)),
                Arc::new(UInt32Array::from(u32s)),
                Arc::new(UInt64Array::from(u64s)),
            ],
        )
        .unwrap();
        let options = ChunkOptions {
            encoding: Encoding::BYTE_STREAM_SPLIT,
            lz4: true,
            ..options()
        };
        let (read, bytes) = round_trip(&batch, &options);
        assert_eq!(read, batch);
        let reader = SerializedFileReader::new(bytes).unwrap();
        let row_group = reader.get_row_group(0).unwrap();
        for column in 1..3 {
            let mut encodings = Vec::new();
            let mut pages = row_group.get_column_page_reader(column).unwrap();
            while let Some(page) = pages.get_next_page().unwrap() {
                encodings.push(page.encoding());
            }
            // Pages of 1,000 rows: three of runs, three of changes, four of one value.
            let expected: Vec<Encoding> = (0..10)
                .map(|page| {
                    if (3..6).contains(&page) {
                        Encoding::BYTE_STREAM_SPLIT
                    } else {
                        Encoding::DELTA_BINARY_PACKED
                    }
                })
                .collect();
            assert_eq!(encodings, expected, "column {column}");
        }
    }

    #[test]
    fn integer_encodings_are_refused_for_other_types() {
        let batch = sample(10);
        let (file, _) = ArrowWriter::try_new(Vec::new(), batch.schema(), None)
            .unwrap()
            .into_serialized_writer()
            .unwrap();
        let options = ChunkOptions {
            encoding: Encoding::BYTE_STREAM_SPLIT,
            ..options()
        };
        let descr = file.schema_descr().column(6);
        let error = encode_column(
            batch.column(6),
            descr,
            &options,
            &mut Compressors::default(),
        )
        .err()
        .unwrap();
        assert!(error.to_string().contains("BYTE_STREAM_SPLIT"), "{error}");
    }

    #[test]
    fn offsets_statistics_page_index_and_bloom_filters_are_those_of_the_data() {
        for encoding in [Encoding::PLAIN, Encoding::RLE_DICTIONARY] {
            check_metadata(&ChunkOptions {
                encoding,
                ..options()
            });
        }
    }

    /// Checks the footer of `sample(5_000)` written with `options` against the data.
    fn check_metadata(options: &ChunkOptions) {
        let batch = sample(5_000);
        let (_, bytes) = round_trip(&batch, options);
        let reader = SerializedFileReader::new_with_options(
            bytes,
            parquet::file::serialized_reader::ReadOptionsBuilder::new()
                .with_page_index()
                .with_reader_properties(
                    parquet::file::properties::ReaderProperties::builder()
                        .set_read_bloom_filter(true)
                        .build(),
                )
                .build(),
        )
        .unwrap();
        let metadata = reader.metadata();
        let group = metadata.row_group(0);
        // u32: no nulls, statistics over all values.
        let u32s = batch.column(3).as_primitive::<UInt32Type>().values();
        match group.column(3).statistics().unwrap() {
            Statistics::Int32(s) => {
                assert_eq!(*s.min_opt().unwrap() as u32, *u32s.iter().min().unwrap());
                assert_eq!(*s.max_opt().unwrap() as u32, *u32s.iter().max().unwrap());
                assert_eq!(s.null_count_opt(), Some(0));
            }
            other => panic!("u32 statistics {other:?}"),
        }
        // Addresses: byte-wise min and max of the valid values.
        let addrs = batch.column(6).as_fixed_size_binary();
        match group.column(6).statistics().unwrap() {
            Statistics::FixedLenByteArray(s) => {
                assert_eq!(
                    s.min_opt().unwrap().data(),
                    addrs.iter().flatten().min().unwrap()
                );
                assert_eq!(
                    s.max_opt().unwrap().data(),
                    addrs.iter().flatten().max().unwrap()
                );
                assert_eq!(s.null_count_opt(), Some(addrs.null_count() as u64));
            }
            other => panic!("address statistics {other:?}"),
        }
        // Booleans with nulls: the smallest and largest valid value, per chunk
        // and per page.
        let flags = batch.column(5).as_boolean();
        match group.column(5).statistics().unwrap() {
            Statistics::Boolean(s) => {
                assert_eq!(s.min_opt().copied(), flags.iter().flatten().min());
                assert_eq!(s.max_opt().copied(), flags.iter().flatten().max());
                assert_eq!(s.null_count_opt(), Some(flags.null_count() as u64));
            }
            other => panic!("boolean statistics {other:?}"),
        }
        let Some(ColumnIndexMetaData::BOOLEAN(index)) =
            metadata.column_index().map(|index| &index[0][5])
        else {
            panic!("no boolean column index");
        };
        for (page, rows) in flags.iter().collect::<Vec<_>>().chunks(1000).enumerate() {
            let valid = rows.iter().flatten();
            assert_eq!(index.min_value(page), valid.clone().min());
            assert_eq!(index.max_value(page), valid.max());
        }
        // u8: nulls counted.
        assert_eq!(
            group.column(1).statistics().unwrap().null_count_opt(),
            Some(batch.column(1).null_count() as u64)
        );
        // Pages of 1,000 rows: 5 pages, located where the pages are.
        let offsets = &metadata.offset_index().unwrap()[0][0].page_locations;
        assert_eq!(offsets.len(), 5);
        assert_eq!(
            offsets
                .iter()
                .map(|p| p.first_row_index)
                .collect::<Vec<_>>(),
            [0, 1000, 2000, 3000, 4000]
        );
        // The Bloom filter holds every address and hardly anything else.
        let row_group = reader.get_row_group(0).unwrap();
        let bloom = row_group.get_column_bloom_filter(6).unwrap();
        let addrs = batch.column(6).as_fixed_size_binary();
        for v in addrs.iter().flatten() {
            assert!(bloom.check(v));
        }
        let absent = (1000..2000u128)
            .filter(|i| bloom.check(&i.to_be_bytes()[..]))
            .count();
        assert!(absent < 100, "{absent} false positives in 1000");
        // Address pages: minimum and maximum of each page's valid values.
        let Some(ColumnIndexMetaData::FIXED_LEN_BYTE_ARRAY(index)) =
            metadata.column_index().map(|index| &index[0][6])
        else {
            panic!("no address column index");
        };
        for (page, rows) in addrs.iter().collect::<Vec<_>>().chunks(1000).enumerate() {
            let valid = rows.iter().flatten();
            assert_eq!(index.min_value(page), valid.clone().min().copied());
            assert_eq!(index.max_value(page), valid.max().copied());
        }
    }

    #[test]
    fn dictionary_encoded_addresses_read_back_equal() {
        let batch = sample(20_011);
        let options = ChunkOptions {
            encoding: Encoding::RLE_DICTIONARY,
            ..options()
        };
        let (read, bytes) = round_trip(&batch, &options);
        assert_eq!(read, batch);
        let reader = SerializedFileReader::new(bytes).unwrap();
        let addr = reader.metadata().row_group(0).column(6);
        assert!(addr.dictionary_page_offset().unwrap() < addr.data_page_offset());
        assert!(addr.encodings().any(|e| e == Encoding::RLE_DICTIONARY));
        let group = reader.get_row_group(0).unwrap();
        let mut pages = group.get_column_page_reader(6).unwrap();
        let first = pages.get_next_page().unwrap().unwrap();
        assert_eq!(first.page_type(), parquet::basic::PageType::DICTIONARY_PAGE);
        assert_eq!(first.num_values(), 50);
        // Other types have no dictionary encoder: plain values.
        let u32s = reader.metadata().row_group(0).column(3);
        assert_eq!(u32s.dictionary_page_offset(), None);
        assert!(u32s.encodings().all(|e| e == Encoding::PLAIN));
    }

    #[test]
    fn dictionary_edge_cases_read_back_equal() {
        let options = ChunkOptions {
            encoding: Encoding::RLE_DICTIONARY,
            ..options()
        };
        let schema = Arc::new(Schema::new(vec![Field::new(
            "addr",
            DataType::FixedSizeBinary(6),
            true,
        )]));
        let column = |values: Vec<Option<[u8; 6]>>| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(values.into_iter(), 6)
                        .unwrap(),
                )],
            )
            .unwrap()
        };
        let one = |i: u64| i.to_be_bytes()[2..].try_into().unwrap();
        let cases = [
            // One value throughout.
            column((0..3000).map(|_| Some(one(7))).collect()),
            // Only nulls.
            column((0..3000).map(|_| None).collect()),
            // A null page between valid ones.
            column(
                (0..3000)
                    .map(|i| (!(1000..2000).contains(&i)).then(|| one(i % 3)))
                    .collect(),
            ),
            // More distinct values than a dictionary holds: written plain.
            column((0..70_000).map(|i| Some(one(i))).collect()),
        ];
        for batch in cases {
            let (read, _) = round_trip(&batch, &options);
            assert_eq!(read, batch);
        }
    }

    #[test]
    fn definition_levels_are_runs_of_the_validity_bits() {
        let mut out = Vec::new();
        let valid = BooleanBuffer::from(vec![true; 20]);
        assert_eq!(put_definition_levels(3..13, Some(&valid), &mut out), 0);
        assert_eq!(out, [2, 0, 0, 0, 10 << 1, 1]);
        out.clear();
        let mixed = BooleanBuffer::from((0..20).map(|i| i % 3 != 0).collect::<Vec<_>>());
        // Rows 1..11: valid except 3, 6, 9: bits 1101101101.
        assert_eq!(put_definition_levels(1..11, Some(&mixed), &mut out), 3);
        assert_eq!(out, [3, 0, 0, 0, (2 << 1) | 1, 0b1101_1011, 0b0000_0010]);
    }
}
