//! A `packets` segment's summaries: its packets counted by minute and by
//! header fields (Hyperion's per-segment summaries, ClickHouse's aggregate
//! projections). An aggregation whose filter and groups read only a
//! summary's fields (`tcp`, `host 10.1.2.3`, `udp port 53`, SYNs without
//! ACK; packets and bytes per protocol, per source, per hour) adds up a few
//! hundred or thousand summary rows per segment instead of decoding tens of
//! thousands of packets. There are three ([`SummaryKind`]):
//! - **services**, by the link, network and tunnel layers' fields, the ports
//!   (those from 1024 up merged into one), TCP flags and ICMP type and code
//!   ([`SERVICE_DIMENSIONS`]);
//! - **hosts**, by the layers' fields and the addresses ([`HOST_DIMENSIONS`]);
//! - **flows**, by the layers' fields, the addresses and the exact ports and
//!   ICMP type and code ([`FLOW_DIMENSIONS`]): every conversation, for
//!   what the other two cannot answer (`count(DISTINCT src_addr)` by
//!   `dst_port`, `tcp port 8080`). It is written only while it has at most
//!   half as many rows as the segment ([`FLOWS_MAX_SHARE`]); a scan of
//!   random ports would make it as large as the rows.
//!
//! The hosts summary is made from the flows summary's groups, not the rows,
//! so a packet is grouped twice at ingest, not three times.
//!
//! Each is a small Parquet file of its own, written inside the segment file
//! after the last row group and before the footer, where other Parquet
//! readers (DuckDB, pyarrow) do not look; the footer's key-value metadata
//! ([`SummaryKind::key`]) says where it is and its CRC-32. It is part of the
//! segment, so it is sealed, checksummed in the catalog, copied, expired and
//! compacted with it. Segments written before them have none; they are read.
//!
//! A summary's rows are grouped by its dimensions and by `ts`, the minute
//! (`SUMMARY_GRANULE_NS`, from the epoch) the packets fall in; each carries
//! `packets`, `wire_bytes` and `cap_bytes`. A reader checks its CRC, its
//! schema and that its packets add up to the segment's rows before any of it
//! becomes an answer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeBinaryArray, FixedSizeBinaryBuilder, RecordBatch,
    TimestampNanosecondArray, UInt64Array,
};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Field, Schema, SchemaRef, TimeUnit, TimestampNanosecondType, UInt8Type, UInt16Type,
    UInt32Type,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::Encoding;
use parquet::errors::ParquetError;
use parquet::schema::types::ColumnDescPtr;

use crate::schema::{col, packets_schema};
use crate::segment::chunk::{ChunkOptions, Compressors, encode_column};
use crate::segment::reader::check_layout;

/// The time granule of a summary row: a minute, counted from the epoch.
pub const SUMMARY_GRANULE_NS: i64 = 60_000_000_000;

/// The fields of the link, network and tunnel layers, by which both
/// summaries are grouped.
const LAYER_DIMENSIONS: [&str; 10] = [
    col::IFACE,
    col::LINK_TYPE,
    col::STATUS,
    col::ETH_TYPE,
    col::VLAN_OUTER,
    col::VLAN_INNER,
    col::MPLS_LABEL,
    col::TUNNEL,
    col::IP_VERSION,
    col::IP_PROTO,
];

/// `first` then `then`, in a constant.
const fn joined<const A: usize, const B: usize, const N: usize>(
    first: [&'static str; A],
    then: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N, "the joined length is the sum of both");
    let mut out = [""; N];
    let mut i = 0;
    while i < A {
        out[i] = first[i];
        i += 1;
    }
    while i < N {
        out[i] = then[i - A];
        i += 1;
    }
    out
}

/// The `packets` columns the hosts summary is grouped by (with `ts`, the
/// minute): the link, network and tunnel layers, addresses included.
pub const HOST_DIMENSIONS: [&str; 12] = joined(LAYER_DIMENSIONS, [col::SRC_ADDR, col::DST_ADDR]);

/// The integer `packets` columns the flows summary is grouped by: the
/// layers' fields, then the ports and ICMP type and code, as they are.
const FLOW_INTS: [&str; 14] = joined(
    LAYER_DIMENSIONS,
    [col::SRC_PORT, col::DST_PORT, col::ICMP_TYPE, col::ICMP_CODE],
);

/// The `packets` columns the flows summary is grouped by (with `ts`): the
/// hosts summary's, and the ports and ICMP type and code, as they are.
pub const FLOW_DIMENSIONS: [&str; 16] = joined(FLOW_INTS, [col::SRC_ADDR, col::DST_ADDR]);

/// The flows summary is written only if it has at most this share of the
/// segment's rows (as a fraction `1 / FLOWS_MAX_SHARE`); past it, reading
/// it would save little over the rows.
pub const FLOWS_MAX_SHARE: u64 = 2;

/// The `packets` columns the services summary is grouped by (with `ts`):
/// the hosts summary's but the addresses, and the transport's ports (each
/// from [`SERVICE_PORTS_BELOW`] up held as [`PORT_ABOVE`]), TCP flags and
/// ICMP type and code.
pub const SERVICE_DIMENSIONS: [&str; 15] = joined(
    LAYER_DIMENSIONS,
    [
        col::SRC_PORT,
        col::DST_PORT,
        col::TCP_FLAGS,
        col::ICMP_TYPE,
        col::ICMP_CODE,
    ],
);

/// Ports below this are held as they are in the services summary; the
/// others, ephemeral ports mostly, all as [`PORT_ABOVE`]. So a test of a port
/// against a constant below it (`port 53`, `tcp.port < 1024`) is true or
/// false alike for every port it merges.
pub const SERVICE_PORTS_BELOW: u16 = 1024;

/// The port the services summary holds for any from [`SERVICE_PORTS_BELOW`] up.
pub const PORT_ABOVE: u16 = u16::MAX;

/// The packets of a summary row.
pub const PACKETS: &str = "packets";
/// The sum of their `wire_len`.
pub const WIRE_BYTES: &str = "wire_bytes";
/// The sum of their `cap_len`.
pub const CAP_BYTES: &str = "cap_bytes";

/// Integer dimensions a summary may have, at most.
const INTS: usize = 15;

/// The summaries a `packets` segment carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SummaryKind {
    /// By [`HOST_DIMENSIONS`]: who talked, over which protocols.
    Hosts,
    /// By [`SERVICE_DIMENSIONS`]: which services and flags, not who.
    Services,
    /// By [`FLOW_DIMENSIONS`]: who talked to whom on which ports.
    Flows,
}

impl SummaryKind {
    /// All, the smaller first: services, hosts, flows.
    pub const ALL: [Self; 3] = [Self::Services, Self::Hosts, Self::Flows];

    /// Its place in [`ALL`](Self::ALL): the order summaries are written and
    /// tried in.
    pub fn position(self) -> usize {
        match self {
            Self::Services => 0,
            Self::Hosts => 1,
            Self::Flows => 2,
        }
    }

    /// The footer's key-value metadata that locates it:
    /// `<offset> <length> <crc32 in hex>`, offset and length in bytes of the file.
    pub fn key(self) -> &'static str {
        match self {
            Self::Hosts => "hindsight.summary",
            Self::Services => "hindsight.summary.services",
            Self::Flows => "hindsight.summary.flows",
        }
    }

    /// The columns it is grouped by (with `ts`).
    pub fn dimensions(self) -> &'static [&'static str] {
        match self {
            Self::Hosts => &HOST_DIMENSIONS,
            Self::Services => &SERVICE_DIMENSIONS,
            Self::Flows => &FLOW_DIMENSIONS,
        }
    }

    /// The integer dimensions: all but the addresses.
    fn ints(self) -> &'static [&'static str] {
        match self {
            Self::Hosts => &LAYER_DIMENSIONS,
            Self::Services => &SERVICE_DIMENSIONS,
            Self::Flows => &FLOW_INTS,
        }
    }

    fn has_addresses(self) -> bool {
        self != Self::Services
    }

    /// Whether it holds ports from [`SERVICE_PORTS_BELOW`] up merged as
    /// [`PORT_ABOVE`] (the services summary) rather than as they are.
    pub fn merges_ports(self) -> bool {
        self == Self::Services
    }

    /// Its schema: `ts` and the dimensions as `packets` has them, then the
    /// three sums.
    pub fn schema(self) -> SchemaRef {
        static SCHEMAS: OnceLock<[SchemaRef; 3]> = OnceLock::new();
        let schemas = SCHEMAS.get_or_init(|| {
            Self::ALL.map(|kind| {
                let packets = packets_schema();
                let mut fields: Vec<Field> = std::iter::once(col::TS)
                    .chain(kind.dimensions().iter().copied())
                    .filter_map(|name| packets.field_with_name(name).ok().cloned())
                    .collect();
                fields.extend(
                    [PACKETS, WIRE_BYTES, CAP_BYTES]
                        .map(|name| Field::new(name, DataType::UInt64, false)),
                );
                Arc::new(Schema::new(fields))
            })
        });
        Arc::clone(&schemas[self.position()])
    }
}

/// One group: the minute and every dimension, nulls marked in `nulls`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Key {
    minute: i64,
    ints: [u32; INTS],
    /// Bit `i` set: integer dimension `i` is null; bits `INTS` and `INTS +
    /// 1`, the addresses.
    nulls: u32,
    src: [u8; 16],
    dst: [u8; 16],
}

/// Sums of one group.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    packets: u64,
    wire_bytes: u64,
    cap_bytes: u64,
}

/// An integer column of a batch, whatever its width.
enum Ints<'a> {
    U8(&'a arrow::array::PrimitiveArray<UInt8Type>),
    U16(&'a arrow::array::PrimitiveArray<UInt16Type>),
    U32(&'a arrow::array::PrimitiveArray<UInt32Type>),
}

impl Ints<'_> {
    fn of(array: &ArrayRef) -> Option<Ints<'_>> {
        match array.data_type() {
            DataType::UInt8 => Some(Ints::U8(array.as_primitive())),
            DataType::UInt16 => Some(Ints::U16(array.as_primitive())),
            DataType::UInt32 => Some(Ints::U32(array.as_primitive())),
            _ => None,
        }
    }

    /// The value (as a key holds it: 0 for a null, a port from
    /// [`SERVICE_PORTS_BELOW`] up as [`PORT_ABOVE`] if `port`) and nullness
    /// every one of the `len` rows from `start` has; `None` if they differ.
    fn constant(&self, start: usize, len: usize, port: bool) -> Option<(u32, bool)> {
        fn same<T: Copy + PartialEq + Into<u32>>(values: &[T]) -> Option<u32> {
            let first = *values.first()?;
            values.iter().all(|&v| v == first).then(|| first.into())
        }
        let rows = start..start + len;
        let (value, nulls) = match self {
            Ints::U8(a) => (same(a.values().get(rows)?), a.nulls()),
            Ints::U16(a) => (same(a.values().get(rows)?), a.nulls()),
            Ints::U32(a) => (same(a.values().get(rows)?), a.nulls()),
        };
        let valid = validity(nulls, start, len).map_or(len, |(_, set)| set);
        match valid {
            // A null's value slot holds anything.
            0 => Some((0, true)),
            _ if valid == len => {
                let value = value?;
                let merged = port && value >= u32::from(SERVICE_PORTS_BELOW);
                Some((if merged { u32::from(PORT_ABOVE) } else { value }, false))
            }
            _ => None,
        }
    }

    /// Sets dimension `i` of `keys` from the rows from `start` on; a port
    /// from [`SERVICE_PORTS_BELOW`] up as [`PORT_ABOVE`] if `port`.
    fn fill(&self, i: usize, start: usize, keys: &mut [Key], port: bool) {
        fn values<T: Copy + Into<u32>>(i: usize, values: &[T], keys: &mut [Key]) {
            for (key, &value) in keys.iter_mut().zip(values) {
                key.ints[i] = value.into();
            }
        }
        let len = keys.len();
        let nulls = match self {
            Ints::U8(a) => {
                values(i, &a.values()[start..start + len], keys);
                a.nulls()
            }
            Ints::U16(a) => {
                values(i, &a.values()[start..start + len], keys);
                a.nulls()
            }
            Ints::U32(a) => {
                values(i, &a.values()[start..start + len], keys);
                a.nulls()
            }
        };
        if port {
            for key in keys.iter_mut() {
                if key.ints[i] >= u32::from(SERVICE_PORTS_BELOW) {
                    key.ints[i] = u32::from(PORT_ABOVE);
                }
            }
        }
        // A null's value slot holds anything: it must not split groups.
        for_nulls(nulls, start, keys, |key| {
            key.ints[i] = 0;
            key.nulls |= 1 << i;
        });
    }
}

/// The validity bits of the `len` rows from `start` and how many are set;
/// `None` if the column has no null at all.
fn validity(
    nulls: Option<&NullBuffer>,
    start: usize,
    len: usize,
) -> Option<(BooleanBuffer, usize)> {
    let valid = nulls
        .filter(|n| n.null_count() > 0)?
        .inner()
        .slice(start, len);
    let set = valid.count_set_bits();
    Some((valid, set))
}

/// Applies `null` to each of `keys` whose row (from `start`) is null in
/// `nulls`. A chunk null throughout (a VLAN, a tunnel, most often) or not at
/// all is handled without a test a row: that test took a quarter of
/// `SummaryBuilder::add`'s samples.
fn for_nulls(nulls: Option<&NullBuffer>, start: usize, keys: &mut [Key], null: impl Fn(&mut Key)) {
    let Some((valid, set)) = validity(nulls, start, keys.len()) else {
        return;
    };
    match set {
        0 => keys.iter_mut().for_each(null),
        set if set == keys.len() => {}
        _ => {
            for (key, valid) in keys.iter_mut().zip(valid.iter()) {
                if !valid {
                    null(key);
                }
            }
        }
    }
}

/// One step of a key's hash: `field` folded into `hash` (FxHash's step; the
/// hash is finished by [`finish_hash`]).
#[inline]
fn mix(hash: u64, field: u64) -> u64 {
    (hash.rotate_left(5) ^ field).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

/// A hash's last step, spreading every bit to the top and the bottom bits
/// the table uses (MurmurHash3's finaliser).
#[inline]
fn finish_hash(hash: u64) -> u64 {
    let hash = (hash ^ (hash >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let hash = (hash ^ (hash >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// A 16-byte address as two words, for [`mix`].
#[inline]
fn words(address: &[u8; 16]) -> [u64; 2] {
    let value = u128::from_ne_bytes(*address);
    [value as u64, (value >> 64) as u64]
}

/// The hash of `key`, of its first `ints` integer dimensions: as
/// [`SummaryBuilder::add`] makes it column by column, field by field. The
/// integer dimensions come first, then the minute, the addresses and the
/// null bits: the leading ones a chunk of rows shares are hashed once.
fn key_hash(key: &Key, ints: usize) -> u64 {
    let mut hash = 0;
    for &value in &key.ints[..ints] {
        hash = mix(hash, u64::from(value));
    }
    hash = mix(hash, key.minute as u64);
    for word in words(&key.src).into_iter().chain(words(&key.dst)) {
        hash = mix(hash, word);
    }
    finish_hash(mix(hash, u64::from(key.nulls)))
}

/// A hasher for keys that are hashes already ([`key_hash`]).
#[derive(Clone, Copy, Debug, Default)]
struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = mix(self.0, u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// No group: the end of a chain of groups of one hash.
const NO_GROUP: usize = usize::MAX;

/// Builds a segment's summary from its rows, batch by batch.
#[derive(Debug)]
pub struct SummaryBuilder {
    kind: SummaryKind,
    groups: Vec<(Key, Sums)>,
    /// Each group's key's hash ([`key_hash`]).
    hashes: Vec<u64>,
    /// The next group of the same hash, or [`NO_GROUP`].
    next: Vec<usize>,
    /// The first group of each hash.
    index: HashMap<u64, usize, std::hash::BuildHasherDefault<PassThrough>>,
    /// The groups of the last two keys looked up in `index`.
    recent: [usize; 2],
}

/// Rows whose keys are made at once (column by column), then grouped.
const KEY_CHUNK_ROWS: usize = 256;

/// Why a batch could not be summarised: a column missing or of another type.
fn schema_error(what: &str) -> ParquetError {
    ParquetError::General(format!(
        "summary: the batch's {what} is not as `packets` has it"
    ))
}

impl SummaryBuilder {
    /// A builder of a summary of `kind`.
    pub fn new(kind: SummaryKind) -> Self {
        Self {
            kind,
            groups: Vec::new(),
            hashes: Vec::new(),
            next: Vec::new(),
            index: HashMap::default(),
            recent: [0; 2],
        }
    }

    /// The kind of summary it builds.
    pub fn kind(&self) -> SummaryKind {
        self.kind
    }

    /// Adds a batch of `packets` rows.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), ParquetError> {
        let column = |name: &str| batch.column_by_name(name).ok_or_else(|| schema_error(name));
        let ts = column(col::TS)?
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| schema_error(col::TS))?;
        let wire = column(col::WIRE_LEN)?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| schema_error(col::WIRE_LEN))?;
        let cap = column(col::CAP_LEN)?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| schema_error(col::CAP_LEN))?;
        let mut ints = Vec::with_capacity(INTS);
        for &name in self.kind.ints() {
            let port = self.kind.merges_ports() && (name == col::SRC_PORT || name == col::DST_PORT);
            ints.push((
                Ints::of(column(name)?).ok_or_else(|| schema_error(name))?,
                port,
            ));
        }
        let address = |name: &str| -> Result<&FixedSizeBinaryArray, ParquetError> {
            column(name)?
                .as_fixed_size_binary_opt()
                .filter(|a| a.value_length() == 16)
                .ok_or_else(|| schema_error(name))
        };
        let addresses = if self.kind.has_addresses() {
            vec![address(col::SRC_ADDR)?, address(col::DST_ADDR)?]
        } else {
            Vec::new()
        };
        let mut keys = vec![Key::default(); KEY_CHUNK_ROWS];
        let mut hashes = [0u64; KEY_CHUNK_ROWS];
        let mut start = 0;
        while start < batch.num_rows() {
            let len = KEY_CHUNK_ROWS.min(batch.num_rows() - start);
            let keys = &mut keys[..len];
            // The leading integer dimensions every row of the chunk shares
            // (the link, network and tunnel fields mostly): set once in a
            // template and hashed once, not a row at a time.
            let mut template = Key::default();
            let mut shared = 0;
            for (i, (column, port)) in ints.iter().enumerate() {
                let Some((value, null)) = column.constant(start, len, *port) else {
                    break;
                };
                template.ints[i] = value;
                template.nulls |= u32::from(null) << i;
                shared = i + 1;
            }
            let shared_hash = template.ints[..shared]
                .iter()
                .fold(0, |hash, &value| mix(hash, u64::from(value)));
            // Column by column: one type dispatch per column, not per value.
            for (key, &ts) in keys.iter_mut().zip(&ts.values()[start..start + len]) {
                *key = Key {
                    minute: ts.div_euclid(SUMMARY_GRANULE_NS) * SUMMARY_GRANULE_NS,
                    ..template
                };
            }
            for (i, (column, port)) in ints.iter().enumerate().skip(shared) {
                column.fill(i, start, keys, *port);
            }
            for (i, array) in addresses.iter().enumerate() {
                let address: fn(&mut Key) -> &mut [u8; 16] = if i == 0 {
                    |key| &mut key.src
                } else {
                    |key| &mut key.dst
                };
                // The values of the rows from `start`, 16 bytes each; a
                // null's slot holds anything, and is zeroed below.
                let values = array.value_data()[start * 16..].chunks_exact(16);
                for (key, value) in keys.iter_mut().zip(values) {
                    address(key).copy_from_slice(value);
                }
                for_nulls(array.nulls(), start, keys, |key| {
                    key.nulls |= 1 << (INTS + i);
                    *address(key) = [0; 16];
                });
            }
            // Hashed column by column too ([`key_hash`]'s order): each row's
            // steps are independent of the others', so they overlap.
            let hashes = &mut hashes[..len];
            hashes.fill(shared_hash);
            for i in shared..ints.len() {
                for (hash, key) in hashes.iter_mut().zip(keys.iter()) {
                    *hash = mix(*hash, u64::from(key.ints[i]));
                }
            }
            for (hash, key) in hashes.iter_mut().zip(keys.iter()) {
                *hash = mix(*hash, key.minute as u64);
                let [a, b] = words(&key.src);
                let [c, d] = words(&key.dst);
                *hash = mix(mix(mix(mix(*hash, a), b), c), d);
            }
            for (hash, key) in hashes.iter_mut().zip(keys.iter()) {
                *hash = finish_hash(mix(*hash, u64::from(key.nulls)));
            }
            for (row, (key, &hash)) in keys.iter().zip(hashes.iter()).enumerate() {
                let at = start + row;
                let slot = self.slot(key, hash);
                let sums = &mut self.groups[slot].1;
                sums.packets += 1;
                sums.wire_bytes += u64::from(wire.value(at));
                sums.cap_bytes += u64::from(cap.value(at));
            }
            start += len;
        }
        Ok(())
    }

    /// The group of `key` (of hash `hash`), made if new. The rows of a host
    /// come together, its two directions in turn: many keys are one of the
    /// last two.
    fn slot(&mut self, key: &Key, hash: u64) -> usize {
        for at in self.recent {
            if self.hashes.get(at) == Some(&hash) && self.groups[at].0 == *key {
                return at;
            }
        }
        let at = match self.index.get(&hash) {
            Some(&first) => {
                let mut at = first;
                loop {
                    if self.groups[at].0 == *key {
                        break at;
                    }
                    match self.next[at] {
                        NO_GROUP => {
                            // A new key of a hash seen: linked after the first.
                            let new = self.push(key, hash);
                            self.next[new] = self.next[first];
                            self.next[first] = new;
                            break new;
                        }
                        next => at = next,
                    }
                }
            }
            None => {
                let new = self.push(key, hash);
                self.index.insert(hash, new);
                new
            }
        };
        self.recent = [at, self.recent[0]];
        at
    }

    /// A new group of `key`; its position.
    fn push(&mut self, key: &Key, hash: u64) -> usize {
        self.groups.push((*key, Sums::default()));
        self.hashes.push(hash);
        self.next.push(NO_GROUP);
        self.groups.len() - 1
    }

    /// Its groups so far: the rows of its summary.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// A builder of a coarser summary of `kind` holding this one's groups
    /// regrouped: `kind`'s integer dimensions must begin this one's, and
    /// its addresses be among this one's (hosts from flows).
    pub fn coarsen(&self, kind: SummaryKind) -> Result<SummaryBuilder, ParquetError> {
        let ints = kind.ints().len();
        let fits = self.kind.ints().starts_with(kind.ints())
            && (self.kind.has_addresses() || !kind.has_addresses())
            && self.kind.merges_ports() == kind.merges_ports();
        if !fits {
            return Err(ParquetError::General(format!(
                "summary: {kind:?} cannot be made from {:?}",
                self.kind
            )));
        }
        // Null bits of the integer dimensions kept, and of the addresses.
        let mut keep = (1u32 << ints) - 1;
        if kind.has_addresses() {
            keep |= 0b11 << INTS;
        }
        let mut coarse = SummaryBuilder::new(kind);
        for (key, sums) in &self.groups {
            let mut key = *key;
            key.ints[ints..].fill(0);
            key.nulls &= keep;
            if !kind.has_addresses() {
                key.src = [0; 16];
                key.dst = [0; 16];
            }
            let slot = coarse.slot(&key, key_hash(&key, ints));
            let into = &mut coarse.groups[slot].1;
            into.packets += sums.packets;
            into.wire_bytes += sums.wire_bytes;
            into.cap_bytes += sums.cap_bytes;
        }
        Ok(coarse)
    }

    /// The summary's rows, in minute order, as a batch of its kind's schema.
    pub fn finish(self) -> Result<RecordBatch, ParquetError> {
        // Sorted by minute, then the addresses (as big-endian numbers, the
        // order of their bytes), then the rest. The groups are sorted through
        // small keys, not moved: a flows group is 128 bytes, and sorting them
        // in place was 1.9% of an ingest. Keys are distinct: the order is the
        // same however they are sorted.
        let mut order: Vec<(i64, u128, u128, u32)> = self
            .groups
            .iter()
            .enumerate()
            .map(|(at, (key, _))| {
                let address = u128::from_be_bytes;
                (key.minute, address(key.src), address(key.dst), at as u32)
            })
            .collect();
        let all = &self.groups;
        order.sort_unstable_by(|a, b| {
            (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)).then_with(|| {
                let (x, y) = (&all[a.3 as usize].0, &all[b.3 as usize].0);
                x.ints.cmp(&y.ints).then(x.nulls.cmp(&y.nulls))
            })
        });
        let groups: Vec<&(Key, Sums)> = order.iter().map(|o| &all[o.3 as usize]).collect();
        let groups = &groups;
        let schema = self.kind.schema();
        let arrow_error = |e: arrow::error::ArrowError| ParquetError::ArrowError(e.to_string());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        columns.push(Arc::new(
            TimestampNanosecondArray::from_iter_values(groups.iter().map(|(k, _)| k.minute))
                .with_timezone_opt(match schema.field(0).data_type() {
                    DataType::Timestamp(_, zone) => zone.clone(),
                    _ => None,
                }),
        ));
        let ints = self.kind.ints().len();
        for i in 0..ints {
            let values: arrow::array::UInt32Array = groups
                .iter()
                .map(|(k, _)| (k.nulls & (1 << i) == 0).then_some(k.ints[i]))
                .collect();
            let field = schema.field(1 + i);
            columns.push(cast(&values, field.data_type()).map_err(arrow_error)?);
        }
        for i in 0..if self.kind.has_addresses() { 2 } else { 0 } {
            let mut builder = FixedSizeBinaryBuilder::with_capacity(groups.len(), 16);
            for (key, _) in groups {
                if key.nulls & (1 << (INTS + i)) != 0 {
                    builder.append_null();
                } else {
                    let value = if i == 0 { &key.src } else { &key.dst };
                    builder.append_value(value).map_err(arrow_error)?;
                }
            }
            columns.push(Arc::new(builder.finish()));
        }
        for sum in [
            |s: &Sums| s.packets,
            |s: &Sums| s.wire_bytes,
            |s: &Sums| s.cap_bytes,
        ] {
            columns.push(Arc::new(UInt64Array::from_iter_values(
                groups.iter().map(|(_, s)| sum(s)),
            )));
        }
        RecordBatch::try_new(schema, columns).map_err(arrow_error)
    }
}

/// Rows of a summary's data page.
const SUMMARY_PAGE_ROWS: usize = 1 << 14;

/// A summary of `kind` as the bytes of a Parquet file, to be written inside
/// the segment: one row group, each column written by the segment's own
/// chunk encoder (`chunk.rs`) in LZ4 pages. The minute and the flows
/// summary's exact ports are deltas (sorted by minute and address, the ports
/// mostly rise), addresses dictionaries, the other integers byte streams
/// (long runs of them deltas). The `parquet` crate's Arrow writer, with
/// dictionaries, took 4.3% of a 5 M-packet ingest's CPU for the three
/// summaries, most of it interning values; the summaries of that archive
/// are 6.59 MB this way and were 6.85 MB that way.
pub fn encode_summary(summary: &RecordBatch, kind: SummaryKind) -> Result<Vec<u8>, ParquetError> {
    // The columns come encoded, with their codec and encodings in their
    // chunk metadata: the writer only lays out the file and its footer.
    let (mut file, _) =
        ArrowWriter::try_new(Vec::new(), summary.schema(), None)?.into_serialized_writer()?;
    let descriptors: Vec<_> = (0..summary.num_columns())
        .map(|i| file.schema_descr().column(i))
        .collect();
    let mut zstd = Compressors::default();
    let mut row_group = file.next_row_group()?;
    for (i, (column, field)) in summary
        .columns()
        .iter()
        .zip(summary.schema().fields())
        .enumerate()
    {
        let options = ChunkOptions {
            page_rows: SUMMARY_PAGE_ROWS,
            page_bytes: 0,
            zstd_level: 0,
            raw_literals: false,
            lz4: true,
            statistics: false,
            page_index: false,
            encoding: match (field.name().as_str(), field.data_type()) {
                (_, DataType::FixedSizeBinary(_)) => Encoding::RLE_DICTIONARY,
                (col::TS, _) => Encoding::DELTA_BINARY_PACKED,
                (col::SRC_PORT | col::DST_PORT, _) if !kind.merges_ports() => {
                    Encoding::DELTA_BINARY_PACKED
                }
                _ => Encoding::BYTE_STREAM_SPLIT,
            },
            bloom: None,
        };
        let chunk = encode_column(
            column,
            ColumnDescPtr::clone(&descriptors[i]),
            &options,
            &mut zstd,
        )?;
        row_group.append_column(&chunk.bytes, chunk.close)?;
    }
    row_group.close()?;
    file.into_inner()
}

/// `kind`'s schema at `projection`, with `packets` last if it is not among them.
fn projected_schema(kind: SummaryKind, projection: Option<&[usize]>) -> Result<SchemaRef, String> {
    let schema = kind.schema();
    let Some(projection) = projection else {
        return Ok(schema);
    };
    let mut at = projection.to_vec();
    let packets = schema.index_of(PACKETS).map_err(|e| e.to_string())?;
    if !at.contains(&packets) {
        at.push(packets);
    }
    schema
        .project(&at)
        .map(Arc::new)
        .map_err(|e| format!("a projection of the summary: {e}"))
}

/// The most rows decoded in one batch: a summary's own footer says how
/// many it has, and a damaged one must not size a buffer.
const SUMMARY_BATCH_ROWS: usize = 1 << 20;

/// Where a summary lies in its segment file, from its key's value
/// ([`SummaryKind::key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryLocation {
    /// Its first byte's offset in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The CRC-32 (IEEE) of its bytes.
    pub crc32: u32,
}

impl SummaryLocation {
    /// The key-value metadata's text.
    pub fn to_text(self) -> String {
        format!("{} {} {:08x}", self.offset, self.len, self.crc32)
    }

    /// Parses [`to_text`](Self::to_text)'s form; `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split(' ');
        let offset = parts.next()?.parse().ok()?;
        let len = parts.next()?.parse().ok()?;
        let crc = parts.next()?;
        if crc.len() != 8 || parts.next().is_some() {
            return None;
        }
        let crc32 = u32::from_str_radix(crc, 16).ok()?;
        Some(Self { offset, len, crc32 })
    }
}

/// The summary's batch from its Parquet bytes, or why they are not one
/// (`path` names the segment in errors): the columns of its kind's schema
/// at `projection` (in that order), or all, and `packets` in any case,
/// last if it was not asked for. Its CRC and its packets' total are the
/// caller's to check ([`SegmentReader::summary`](crate::SegmentReader::summary)).
pub fn decode(
    bytes: Vec<u8>,
    path: &Path,
    kind: SummaryKind,
    projection: Option<&[usize]>,
) -> Result<RecordBatch, String> {
    let schema = projected_schema(kind, projection)?;
    let bytes = bytes::Bytes::from(bytes);
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let metadata =
        ArrowReaderMetadata::load(&bytes, options).map_err(|e| format!("its footer: {e}"))?;
    check_layout(path, &metadata, bytes.len() as u64).map_err(|e| e.to_string())?;
    let mask = parquet::arrow::ProjectionMask::columns(
        metadata.metadata().file_metadata().schema_descr(),
        schema.fields().iter().map(|f| f.name().as_str()),
    );
    // One batch of all its rows: no concatenation after.
    let rows = usize::try_from(metadata.metadata().file_metadata().num_rows())
        .unwrap_or(0)
        .clamp(1, SUMMARY_BATCH_ROWS);
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes, metadata)
        .with_batch_size(rows)
        .with_projection(mask)
        .build()
        .map_err(|e| e.to_string())?;
    // The `parquet` crate's decoders panic on some pages whose header and
    // bytes disagree (its definition levels here; apache/arrow-rs#11121 for
    // others); a summary's CRC-32 keeps damage from them, and this keeps a
    // crafted one that matches it from taking the process down.
    let batches = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        reader.collect::<Result<Vec<_>, _>>()
    }))
    .map_err(|_| "the Parquet decoder failed on its pages".to_owned())?
    .map_err(|e| e.to_string())?;
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let parts: Vec<_> = batches
            .iter()
            .map(|b| b.column_by_name(field.name()).cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| format!("it has no column {}", field.name()))?;
        let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
        let column = match refs.as_slice() {
            [] => arrow::array::new_empty_array(field.data_type()),
            [_] => Arc::clone(&parts[0]),
            _ => arrow::compute::concat(&refs).map_err(|e| e.to_string())?,
        };
        // `ts` reads back with the zone "+00:00" (the Parquet logical type).
        let column = match (column.data_type(), field.data_type()) {
            (
                DataType::Timestamp(TimeUnit::Nanosecond, _),
                DataType::Timestamp(TimeUnit::Nanosecond, zone),
            ) => Arc::new(
                column
                    .as_primitive::<TimestampNanosecondType>()
                    .clone()
                    .with_timezone_opt(zone.clone()),
            ),
            (found, wanted) if found == wanted => column,
            (found, wanted) => {
                return Err(format!(
                    "its column {} is {found}, not {wanted}",
                    field.name()
                ));
            }
        };
        columns.push(column);
    }
    RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::array::{Array, AsArray, RecordBatch};
    use arrow::datatypes::{TimestampNanosecondType, UInt8Type, UInt16Type, UInt64Type};
    use hindsight_model::{Addr16, PacketHeaders, PacketRecord};

    use super::*;
    use crate::schema::PacketBatchBuilder;

    /// The dimensions the test varies, as a summary row holds them.
    type Dims = (
        i64,
        Option<u16>,
        Option<u8>,
        Option<u16>,
        Option<u16>,
        Option<u16>,
        Option<[u8; 16]>,
        Option<[u8; 16]>,
    );

    /// Rows whose VLAN, protocol, ports, flags and addresses change at
    /// irregular strides, so that some chunks of `KEY_CHUNK_ROWS` share their
    /// leading fields and others do not, across three minutes.
    fn rows(count: usize) -> Vec<PacketRecord> {
        (0..count)
            .map(|i| {
                let host = |n: usize| Addr16::from_v4_bytes([10, 0, 0, (n % 5) as u8]);
                let tcp = i % 7 != 3;
                PacketRecord {
                    ts_nanos: (i as i64) * 150_000_000,
                    wire_len: 60 + (i % 11) as u32,
                    cap_len: 60,
                    headers: PacketHeaders {
                        vlan_outer: (300..310).contains(&i).then_some(7),
                        ip_version: (i % 97 != 5).then_some(4),
                        ip_proto: (i % 97 != 5).then_some(if tcp { 6 } else { 17 }),
                        src_addr: (i % 97 != 5).then(|| host(i / 3)),
                        dst_addr: (i % 97 != 5).then(|| host(i / 5 + 1)),
                        src_port: (i % 97 != 5).then_some([53, 443, 50_000][i % 3]),
                        dst_port: (i % 97 != 5).then_some([80, 40_000][i % 2]),
                        tcp_flags: (tcp && i % 97 != 5).then_some([2, 16, 24][i % 3]),
                        ..PacketHeaders::default()
                    },
                    ..PacketRecord::default()
                }
            })
            .collect()
    }

    fn batch(rows: &[PacketRecord]) -> RecordBatch {
        let mut builder = PacketBatchBuilder::with_capacity(rows.len(), 4096);
        for row in rows {
            builder.append(row, &[0; 60]);
        }
        builder.finish()
    }

    /// Each summary row's dimensions and packets.
    fn summary_rows(summary: &RecordBatch) -> HashMap<Dims, u64> {
        let u16s = |name: &str| {
            summary
                .column_by_name(name)
                .map(|c| c.as_primitive::<UInt16Type>().clone())
        };
        let (vlan, sport, dport, flags) = (
            u16s(col::VLAN_OUTER).unwrap(),
            u16s(col::SRC_PORT).unwrap(),
            u16s(col::DST_PORT).unwrap(),
            u16s(col::TCP_FLAGS),
        );
        let proto = summary
            .column_by_name(col::IP_PROTO)
            .unwrap()
            .as_primitive::<UInt8Type>();
        let ts = summary
            .column_by_name(col::TS)
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        let packets = summary
            .column_by_name(PACKETS)
            .unwrap()
            .as_primitive::<UInt64Type>();
        let address = |name: &str, row: usize| {
            let column = summary.column_by_name(name)?.as_fixed_size_binary();
            column
                .is_valid(row)
                .then(|| column.value(row).try_into().unwrap())
        };
        let get = |a: &arrow::array::UInt16Array, row: usize| a.is_valid(row).then(|| a.value(row));
        (0..summary.num_rows())
            .map(|row| {
                let dims = (
                    ts.value(row),
                    get(&vlan, row),
                    proto.is_valid(row).then(|| proto.value(row)),
                    get(&sport, row),
                    get(&dport, row),
                    flags.as_ref().and_then(|f| get(f, row)),
                    address(col::SRC_ADDR, row),
                    address(col::DST_ADDR, row),
                );
                (dims, packets.value(row))
            })
            .collect()
    }

    /// The same rows grouped one at a time, as a summary of `kind` holds them.
    fn grouped(rows: &[PacketRecord], kind: SummaryKind) -> HashMap<Dims, u64> {
        let mut groups = HashMap::new();
        for row in rows {
            let h = &row.headers;
            let port = |p: Option<u16>| match p {
                Some(p) if kind.merges_ports() && p >= SERVICE_PORTS_BELOW => Some(PORT_ABOVE),
                other => other,
            };
            let address = |a: Option<Addr16>| {
                if kind.has_addresses() {
                    a.map(|a| a.0)
                } else {
                    None
                }
            };
            let dims = (
                row.ts_nanos.div_euclid(SUMMARY_GRANULE_NS) * SUMMARY_GRANULE_NS,
                h.vlan_outer,
                h.ip_proto,
                port(h.src_port),
                port(h.dst_port),
                if kind == SummaryKind::Services {
                    h.tcp_flags
                } else {
                    None
                },
                address(h.src_addr),
                address(h.dst_addr),
            );
            *groups.entry(dims).or_default() += 1;
        }
        groups
    }

    #[test]
    fn runs_of_one_key_group_as_their_rows_do() {
        // Each row repeated 1 to 40 times (runs across chunks and batches),
        // a millisecond apart (some across a minute's end), every other
        // repeat of some in the other direction, as a conversation's are.
        let rows: Vec<PacketRecord> = rows(400)
            .into_iter()
            .enumerate()
            .flat_map(|(i, row)| {
                (0..1 + (i * 7) % 40).map(move |k| {
                    let mut headers = row.headers;
                    if i % 3 != 0 && k % 2 == 1 {
                        let h = &mut headers;
                        (h.src_addr, h.dst_addr) = (h.dst_addr, h.src_addr);
                        (h.src_port, h.dst_port) = (h.dst_port, h.src_port);
                    }
                    PacketRecord {
                        ts_nanos: row.ts_nanos + k as i64 * 1_000_000,
                        headers,
                        ..row
                    }
                })
            })
            .collect();
        for kind in [SummaryKind::Services, SummaryKind::Flows] {
            let mut builder = SummaryBuilder::new(kind);
            for part in rows.chunks(999) {
                builder.add(&batch(part)).unwrap();
            }
            let summary = builder.finish().unwrap();
            assert_eq!(summary_rows(&summary), grouped(&rows, kind), "{kind:?}");
            let sum = |name: &str| {
                let column = summary.column_by_name(name).unwrap();
                column
                    .as_primitive::<UInt64Type>()
                    .values()
                    .iter()
                    .sum::<u64>()
            };
            let wire: u64 = rows.iter().map(|r| u64::from(r.wire_len)).sum();
            assert_eq!(sum(WIRE_BYTES), wire, "{kind:?}");
            assert_eq!(sum(CAP_BYTES), 60 * rows.len() as u64, "{kind:?}");
        }
    }

    #[test]
    fn rows_group_by_their_keys_whichever_fields_a_chunk_shares() {
        let rows = rows(1500);
        for kind in [SummaryKind::Services, SummaryKind::Flows] {
            let mut builder = SummaryBuilder::new(kind);
            // Two batches: a group goes on across them.
            builder.add(&batch(&rows[..700])).unwrap();
            builder.add(&batch(&rows[700..])).unwrap();
            let coarse = builder.coarsen(SummaryKind::Hosts);
            let summary = builder.finish().unwrap();
            let expected = grouped(&rows, kind);
            assert_eq!(summary.num_rows(), expected.len(), "{kind:?}");
            assert_eq!(summary_rows(&summary), expected, "{kind:?}");
            // Sorted by minute, then address.
            let ts = summary.column(0).as_primitive::<TimestampNanosecondType>();
            assert!(ts.values().windows(2).all(|w| w[0] <= w[1]));
            // It reads back as written.
            let bytes = encode_summary(&summary, kind).unwrap();
            let read = decode(bytes, Path::new("test"), kind, None).unwrap();
            assert_eq!(read, summary, "{kind:?}");
            if kind == SummaryKind::Flows {
                let hosts = coarse.unwrap().finish().unwrap();
                let packets = hosts
                    .column_by_name(PACKETS)
                    .unwrap()
                    .as_primitive::<UInt64Type>();
                assert_eq!(packets.values().iter().sum::<u64>(), rows.len() as u64);
            }
        }
    }
}
