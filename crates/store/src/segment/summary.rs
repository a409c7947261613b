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
//! so a packet is grouped twice at ingest, not three times. Which of the
//! three an archive's segments carry is its `[packets] summaries`
//! ([`SummarySet`]; all by default); without flows, hosts is grouped from
//! the rows.
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
    Array, ArrayRef, AsArray, FixedSizeBinaryArray, RecordBatch, TimestampNanosecondArray,
    UInt64Array,
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

    /// Its name in the archive's configuration (`[packets] summaries`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::Hosts => "hosts",
            Self::Flows => "flows",
        }
    }

    /// The kind of a configuration name ([`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
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

/// Which summaries `packets` segments carry: the archive's `[packets]
/// summaries`. They cost ingest CPU (at 1 M packets of a LAN's traffic, all
/// three 1.13 G instructions on top of 7.05 G, services alone 0.23 G) and
/// answer aggregations without reading rows; a segment without one is
/// answered from its rows, the same answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SummarySet(u8);

impl SummarySet {
    /// All three: the default.
    pub const ALL: Self = Self(0b111);
    /// None: aggregations read the rows.
    pub const NONE: Self = Self(0);

    /// The set of `kinds`.
    pub fn of(kinds: impl IntoIterator<Item = SummaryKind>) -> Self {
        Self(
            kinds
                .into_iter()
                .fold(0, |bits, kind| bits | 1 << kind.position()),
        )
    }

    /// Whether it holds `kind`.
    pub fn contains(self, kind: SummaryKind) -> bool {
        self.0 & 1 << kind.position() != 0
    }

    /// Its kinds, in [`SummaryKind::ALL`]'s order.
    pub fn kinds(self) -> impl Iterator<Item = SummaryKind> {
        SummaryKind::ALL
            .into_iter()
            .filter(move |&kind| self.contains(kind))
    }
}

impl Default for SummarySet {
    fn default() -> Self {
        Self::ALL
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
            // Without an early exit, so that it is vectorised: a test a
            // value with one was a fifth of `add`.
            let all = values.iter().fold(true, |all, &v| all & (v == first));
            all.then(|| first.into())
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
            _ if valid == len => Some((held(value?, port), false)),
            _ => None,
        }
    }

    /// Calls `set` with each of `items` and the value its row (from
    /// `start`) has as a key holds it (see [`held`]), then `null` with each
    /// whose row is null.
    fn set_each<T>(
        &self,
        start: usize,
        items: &mut [T],
        port: bool,
        set: impl Fn(&mut T, u32),
        null: impl Fn(&mut T),
    ) {
        fn each<V: Copy + Into<u32>, T>(
            values: &[V],
            items: &mut [T],
            port: bool,
            set: &impl Fn(&mut T, u32),
        ) {
            for (item, &value) in items.iter_mut().zip(values) {
                set(item, held(value.into(), port));
            }
        }
        let rows = start..start + items.len();
        let nulls = match self {
            Ints::U8(a) => {
                each(&a.values()[rows], items, port, &set);
                a.nulls()
            }
            Ints::U16(a) => {
                each(&a.values()[rows], items, port, &set);
                a.nulls()
            }
            Ints::U32(a) => {
                each(&a.values()[rows], items, port, &set);
                a.nulls()
            }
        };
        for_nulls(nulls, start, items, null);
    }

    /// Sets dimension `i` of `keys` from the rows from `start` on; a port
    /// as [`held`] says if `port`.
    fn fill(&self, i: usize, start: usize, keys: &mut [Key], port: bool) {
        self.set_each(
            start,
            keys,
            port,
            |key, value| key.ints[i] = value,
            // A null's value slot holds anything: it must not split groups.
            |key| {
                key.ints[i] = 0;
                key.nulls |= 1 << i;
            },
        );
    }

    /// The bits a value of it takes in a packed [`Code`]; `None` for a
    /// 32-bit column.
    fn bits(&self) -> Option<u32> {
        match self {
            Ints::U8(_) => Some(8),
            Ints::U16(_) => Some(16),
            Ints::U32(_) => None,
        }
    }

    /// Packs the rows from `start` into `codes` where `at` says (a port as
    /// [`held`] says if `port`), a null as 0 with its bit of word 1 set.
    fn pack(&self, start: usize, codes: &mut [Code], at: &Packed, port: bool) {
        let mask = !(((1u64 << at.bits) - 1) << at.shift);
        self.set_each(
            start,
            codes,
            port,
            |code, value| code[at.word] |= u64::from(value) << at.shift,
            |code| {
                code[at.word] &= mask;
                code[1] |= 1 << at.null;
            },
        );
    }
}

/// `value` as a key holds it: a port from [`SERVICE_PORTS_BELOW`] up as
/// [`PORT_ABOVE`] if `port`.
fn held(value: u32, port: bool) -> u32 {
    if port && value >= u32::from(SERVICE_PORTS_BELOW) {
        u32::from(PORT_ABOVE)
    } else {
        value
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
fn for_nulls<T>(nulls: Option<&NullBuffer>, start: usize, keys: &mut [T], null: impl Fn(&mut T)) {
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

/// A row's key packed in words for the builder's cache of recent keys
/// ([`SummaryBuilder::add`]), all but the layers' fields that a chunk of
/// rows shares (the interface, link type, VLANs, MPLS label and tunnel,
/// its *template*): word 0 the dimensions after the layers' (ports, flags,
/// ICMP), word 2 the layers' fields that change from packet to packet
/// (status, EtherType, IP version and protocol), word 1 the minute (shifted
/// up by 16) and the null bits ([`Packed::null`], and from
/// [`CODE_ADDRESS_NULL`] the addresses'), words 3 to 6 the addresses (0
/// for a null).
type Code = [u64; CODE_WORDS];

const CODE_WORDS: usize = 7;

/// Bit of word 1 of a [`Code`] set for a null source address (the
/// destination's is the next).
const CODE_ADDRESS_NULL: u32 = 14;

/// The layers' fields packed in word 2 of a [`Code`] rather than shared by
/// a chunk's rows: they change between a host's packets.
const PACKED_LAYERS: [&str; 4] = [col::STATUS, col::ETH_TYPE, col::IP_VERSION, col::IP_PROTO];

/// Where one integer dimension lies in a [`Code`].
#[derive(Clone, Copy, Debug)]
struct Packed {
    /// Its position among the kind's integer dimensions.
    dim: usize,
    word: usize,
    shift: u32,
    bits: u32,
    /// Its bit of word 1, set for a null.
    null: u32,
}

/// Where each packed dimension lies in a [`Code`], for the batch's column
/// widths; `None` if they do not fit (a 32-bit column among them).
fn packing(kind: SummaryKind, ints: &[(Ints<'_>, bool)]) -> Option<Vec<Packed>> {
    let mut packed = Vec::new();
    let mut shifts = [0u32; 3];
    for (dim, ((column, _), name)) in ints.iter().zip(kind.ints()).enumerate() {
        let word = if dim >= LAYER_DIMENSIONS.len() {
            0
        } else if PACKED_LAYERS.contains(name) {
            2
        } else {
            continue;
        };
        let bits = column.bits()?;
        let null = packed.len() as u32;
        packed.push(Packed {
            dim,
            word,
            shift: shifts[word],
            bits,
            null,
        });
        shifts[word] += bits;
    }
    let fits = shifts.iter().all(|&bits| bits <= 64) && packed.len() <= CODE_ADDRESS_NULL as usize;
    fits.then_some(packed)
}

/// One entry of the cache of recent keys: a code, the layers' fields it
/// goes with ([`SummaryBuilder::templates`]) and its group.
#[derive(Clone, Copy, Debug)]
struct Cached {
    code: Code,
    template: u32,
    group: u32,
}

/// An empty [`Cached`].
const NOT_CACHED: Cached = Cached {
    code: [0; CODE_WORDS],
    template: u32::MAX,
    group: u32::MAX,
};

/// No group: the end of a chain of groups of one hash.
const NO_GROUP: usize = usize::MAX;

/// A chunk of rows' timestamps and lengths, and where it starts in the batch.
struct Rows<'a> {
    ts: &'a [i64],
    wire: &'a [u32],
    cap: &'a [u32],
    start: usize,
}

/// The whole key of `code` with the shared fields of `template`, as the
/// column-by-column path makes it.
fn unpack(template: &Key, code: &Code, packing: &[Packed], addresses: usize) -> Key {
    let mut key = *template;
    key.minute = ((code[1] as i64) >> 16) * SUMMARY_GRANULE_NS;
    for p in packing {
        key.ints[p.dim] = ((code[p.word] >> p.shift) & ((1u64 << p.bits) - 1)) as u32;
        if code[1] & (1 << p.null) != 0 {
            key.nulls |= 1 << p.dim;
        }
    }
    for i in 0..addresses {
        let value = u128::from(code[3 + 2 * i]) | u128::from(code[4 + 2 * i]) << 64;
        let bytes = value.to_ne_bytes();
        if i == 0 {
            key.src = bytes;
        } else {
            key.dst = bytes;
        }
        if code[1] & (1 << (CODE_ADDRESS_NULL + i as u32)) != 0 {
            key.nulls |= 1 << (INTS + i);
        }
    }
    key
}

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
    /// The layers' fields of chunks seen (a key with the others 0): the
    /// `template` of a [`Cached`].
    templates: Vec<Key>,
    /// Recent keys' groups, by a hash of their [`Code`]: most rows find
    /// theirs here, without a whole key made, hashed and compared.
    cache: Vec<Cached>,
}

/// Entries of the cache of recent keys (a power of two) of the services
/// summary: its groups of a segment, in use all at once (a host's rows run
/// through every minute), are about 800 on a LAN's traffic.
const SERVICE_CACHE_ENTRIES: usize = 4096;

/// Entries of the cache of recent keys of the other summaries: the groups
/// of one host's conversations, whose rows come together in host order.
/// Small enough to stay in the first-level cache.
const CACHE_ENTRIES: usize = 256;

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
            templates: Vec::new(),
            cache: Vec::new(),
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
        if self.groups.capacity() == 0 {
            // Grown a doubling at a time, the groups were copied over and
            // over: the flows summary of a LAN's traffic has a group for
            // about every fifth row, the services summary for about every
            // eightieth. What is not used is not touched.
            let share = match self.kind {
                SummaryKind::Services => 64,
                SummaryKind::Hosts | SummaryKind::Flows => 4,
            };
            self.reserve(batch.num_rows() / share);
        }
        let packing = packing(self.kind, &ints);
        let mut codes = vec![[0u64; CODE_WORDS]; KEY_CHUNK_ROWS];
        let mut keys = vec![Key::default(); KEY_CHUNK_ROWS];
        let mut hashes = [0u64; KEY_CHUNK_ROWS];
        let mut start = 0;
        while start < batch.num_rows() {
            let len = KEY_CHUNK_ROWS.min(batch.num_rows() - start);
            let keys = &mut keys[..len];
            // Most chunks share the fields that are not packed: their keys
            // are packed and looked up in the cache.
            if let Some(packing) = &packing
                && let Some(template) = self.template(&ints, packing, start, len)
            {
                let rows = Rows {
                    ts: &ts.values()[start..start + len],
                    wire: &wire.values()[start..start + len],
                    cap: &cap.values()[start..start + len],
                    start,
                };
                self.add_packed(
                    &rows,
                    &template,
                    &ints,
                    packing,
                    &addresses,
                    &mut codes[..len],
                );
                start += len;
                continue;
            }
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
                // The values of the rows from `start`, 16 bytes each; a
                // null's slot holds anything, and is zeroed below. A loop
                // for each address, not a call through a function pointer a
                // row.
                let values = array.value_data()[start * 16..].chunks_exact(16);
                for (key, value) in keys.iter_mut().zip(values) {
                    let address = if i == 0 { &mut key.src } else { &mut key.dst };
                    address.copy_from_slice(value);
                }
                for_nulls(array.nulls(), start, keys, |key| {
                    key.nulls |= 1 << (INTS + i);
                    *(if i == 0 { &mut key.src } else { &mut key.dst }) = [0; 16];
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

    /// The fields every row of the `len` rows from `start` shares, those
    /// not packed in a [`Code`], as a key with the others 0; `None` if one
    /// differs between them.
    fn template(
        &self,
        ints: &[(Ints<'_>, bool)],
        packing: &[Packed],
        start: usize,
        len: usize,
    ) -> Option<Key> {
        let mut template = Key::default();
        for (dim, (column, port)) in ints.iter().enumerate() {
            if packing.iter().any(|p| p.dim == dim) {
                continue;
            }
            let (value, null) = column.constant(start, len, *port)?;
            template.ints[dim] = value;
            template.nulls |= u32::from(null) << dim;
        }
        Some(template)
    }

    /// Adds a chunk of rows that share `template`'s fields: each row's
    /// other fields packed in a [`Code`], column by column, and its group
    /// found in the cache by it; only a row the cache misses has its whole
    /// key made and looked up. The cache only maps codes to groups that
    /// `slot` made, so a key has one group whichever way it is found.
    fn add_packed(
        &mut self,
        rows: &Rows<'_>,
        template: &Key,
        ints: &[(Ints<'_>, bool)],
        packing: &[Packed],
        addresses: &[&FixedSizeBinaryArray],
        codes: &mut [Code],
    ) {
        let template_id = match self.templates.iter().rposition(|t| t == template) {
            Some(at) => at,
            None => {
                self.templates.push(*template);
                self.templates.len() - 1
            }
        } as u32;
        if self.cache.is_empty() {
            let entries = match self.kind {
                SummaryKind::Services => SERVICE_CACHE_ENTRIES,
                SummaryKind::Hosts | SummaryKind::Flows => CACHE_ENTRIES,
            };
            self.cache = vec![NOT_CACHED; entries];
        }
        for (code, &ts) in codes.iter_mut().zip(rows.ts) {
            *code = [0; CODE_WORDS];
            code[1] = (ts.div_euclid(SUMMARY_GRANULE_NS) as u64) << 16;
        }
        for at in packing {
            let (column, port) = &ints[at.dim];
            column.pack(rows.start, codes, at, *port);
        }
        for (i, array) in addresses.iter().enumerate() {
            let values = array.value_data()[rows.start * 16..].chunks_exact(16);
            for (code, value) in codes.iter_mut().zip(values) {
                let value = u128::from_ne_bytes(value.try_into().unwrap_or([0; 16]));
                code[3 + 2 * i] = value as u64;
                code[4 + 2 * i] = (value >> 64) as u64;
            }
            for_nulls(array.nulls(), rows.start, codes, |code| {
                code[1] |= 1 << (CODE_ADDRESS_NULL + i as u32);
                code[3 + 2 * i] = 0;
                code[4 + 2 * i] = 0;
            });
        }
        let words = if addresses.is_empty() { 3 } else { CODE_WORDS };
        let bits = self.cache.len().trailing_zeros();
        for (row, code) in codes.iter().enumerate() {
            let hash = code[..words]
                .iter()
                .fold(u64::from(template_id), |hash, &word| mix(hash, word));
            // Two ways: the entry the hash names and its neighbour, the
            // last found first, so two keys of one entry in use by turns
            // do not evict each other.
            let entry = (hash >> (64 - bits)) as usize & !1;
            // Word by word, inlined: `==` on the arrays called `memcmp`.
            let hit = |cached: &Cached| {
                let differ = cached
                    .code
                    .iter()
                    .zip(code)
                    .fold(0, |differ, (a, b)| differ | (a ^ b));
                cached.template == template_id && differ == 0
            };
            let group = if hit(&self.cache[entry]) {
                self.cache[entry].group as usize
            } else if hit(&self.cache[entry + 1]) {
                self.cache.swap(entry, entry + 1);
                self.cache[entry].group as usize
            } else {
                let key = unpack(template, code, packing, addresses.len());
                let group = self.slot(&key, key_hash(&key, ints.len()));
                self.cache[entry + 1] = self.cache[entry];
                self.cache[entry] = Cached {
                    code: *code,
                    template: template_id,
                    group: group as u32,
                };
                group
            };
            let sums = &mut self.groups[group].1;
            sums.packets += 1;
            sums.wire_bytes += u64::from(rows.wire[row]);
            sums.cap_bytes += u64::from(rows.cap[row]);
        }
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

    /// Room for `groups` more groups.
    fn reserve(&mut self, groups: usize) {
        self.groups.reserve(groups);
        self.hashes.reserve(groups);
        self.next.reserve(groups);
        self.index.reserve(groups);
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
        coarse.reserve(self.groups.len());
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

    /// The groups' positions sorted by minute, then by addresses (as
    /// big-endian numbers, the order of their bytes) and ports, then in the
    /// order the groups were made (the rows come in the same order every
    /// time, so the summary is the same too): a counting sort over the
    /// segment's minutes (a sort where they lie far apart), then a sort of
    /// small tuples within each minute. One sort by minute, addresses and
    /// then the whole key through the groups was most of `finish`.
    fn minute_order(&self) -> Vec<u32> {
        let minute = |at: usize| self.groups[at].0.minute.div_euclid(SUMMARY_GRANULE_NS);
        let count = self.groups.len();
        let (Some(low), Some(high)) = ((0..count).map(minute).min(), (0..count).map(minute).max())
        else {
            return Vec::new();
        };
        let span = usize::try_from(high.abs_diff(low)).unwrap_or(usize::MAX);
        if span >= count.max(1024) {
            let mut order: Vec<(i64, u32)> = (0..count).map(|at| (minute(at), at as u32)).collect();
            order.sort_unstable();
            return order.into_iter().map(|(_, at)| at).collect();
        }
        // Where each minute's groups begin, then each group put in its place.
        let bucket = |at: usize| minute(at).abs_diff(low) as usize;
        let mut starts = vec![0u32; span + 2];
        for at in 0..count {
            starts[bucket(at) + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut order = vec![0u32; count];
        for at in 0..count {
            let next = &mut starts[bucket(at)];
            order[*next as usize] = at as u32;
            *next += 1;
        }
        // Within each minute, by addresses and ports.
        let ports = match self.kind {
            SummaryKind::Hosts => None,
            SummaryKind::Services | SummaryKind::Flows => Some(LAYER_DIMENSIONS.len()),
        };
        let mut sorted: Vec<(u128, u128, u64, u32)> = order
            .iter()
            .map(|&at| {
                let key = &self.groups[at as usize].0;
                let ports = ports.map_or(0, |p| {
                    u64::from(key.ints[p]) << 32 | u64::from(key.ints[p + 1])
                });
                (
                    u128::from_be_bytes(key.src),
                    u128::from_be_bytes(key.dst),
                    ports,
                    at,
                )
            })
            .collect();
        let mut from = 0;
        for &end in &starts[..=span] {
            let end = end as usize;
            sorted[from..end].sort_unstable();
            from = end;
        }
        sorted.into_iter().map(|(.., at)| at).collect()
    }

    /// The summary's rows, in minute order, as a batch of its kind's schema.
    pub fn finish(self) -> Result<RecordBatch, ParquetError> {
        let order = self.minute_order();
        // Then every column in one pass over the groups in that order, each
        // group read once: a pass a column over groups scattered in memory
        // was most of what the sort left.
        let rows = order.len();
        let ints = self.kind.ints().len();
        let addresses = if self.kind.has_addresses() { 2 } else { 0 };
        let mut minutes = Vec::with_capacity(rows);
        let mut values: Vec<Vec<u32>> = (0..ints).map(|_| Vec::with_capacity(rows)).collect();
        let mut bytes: Vec<Vec<u8>> = (0..addresses)
            .map(|_| Vec::with_capacity(rows * 16))
            .collect();
        // Bit `i` of the null bits, per row, for dimensions that have a null.
        let mut valid: Vec<Vec<bool>> = vec![Vec::new(); INTS + 2];
        let mut sums: [Vec<u64>; 3] = std::array::from_fn(|_| Vec::with_capacity(rows));
        let mut any_null = 0u32;
        for (row, &at) in order.iter().enumerate() {
            let (key, group) = &self.groups[at as usize];
            minutes.push(key.minute);
            for (column, &value) in values.iter_mut().zip(&key.ints[..ints]) {
                column.push(value);
            }
            if addresses > 0 {
                bytes[0].extend_from_slice(&key.src);
                bytes[1].extend_from_slice(&key.dst);
            }
            // Null bits are rare: a dimension's validity is kept from its
            // first null on, all valid before it.
            let mut nulls = key.nulls;
            any_null |= nulls;
            while nulls != 0 {
                let bit = nulls.trailing_zeros() as usize;
                nulls &= nulls - 1;
                let column = &mut valid[bit];
                if column.is_empty() {
                    column.resize(row, true);
                }
            }
            let mut seen = any_null;
            while seen != 0 {
                let bit = seen.trailing_zeros() as usize;
                seen &= seen - 1;
                valid[bit].push(key.nulls & (1 << bit) == 0);
            }
            sums[0].push(group.packets);
            sums[1].push(group.wire_bytes);
            sums[2].push(group.cap_bytes);
        }
        let mut nulls_of = |bit: usize| -> Option<NullBuffer> {
            (any_null & (1 << bit) != 0).then(|| NullBuffer::from(std::mem::take(&mut valid[bit])))
        };
        let schema = self.kind.schema();
        let arrow_error = |e: arrow::error::ArrowError| ParquetError::ArrowError(e.to_string());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        columns.push(Arc::new(
            TimestampNanosecondArray::from(minutes).with_timezone_opt(
                match schema.field(0).data_type() {
                    DataType::Timestamp(_, zone) => zone.clone(),
                    _ => None,
                },
            ),
        ));
        for (i, column) in values.into_iter().enumerate() {
            let column = arrow::array::UInt32Array::new(column.into(), nulls_of(i));
            let field = schema.field(1 + i);
            columns.push(cast(&column, field.data_type()).map_err(arrow_error)?);
        }
        for (i, column) in bytes.into_iter().enumerate() {
            let array = FixedSizeBinaryArray::try_new(16, column.into(), nulls_of(INTS + i))
                .map_err(arrow_error)?;
            columns.push(Arc::new(array));
        }
        for sum in sums {
            columns.push(Arc::new(UInt64Array::from(sum)));
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
    fn a_key_has_one_group_whether_cached_packed_or_made_whole() {
        // Ports null and 0 and at both ends of their range, IP and not, in
        // chunks whose shared fields hold (keys packed and cached), in one
        // whose VLAN changes (keys made whole), the same keys in both; and a
        // chunk of another VLAN throughout, whose packed keys equal others'.
        let rows: Vec<PacketRecord> = (0..3000)
            .map(|i: usize| {
                let ip = i % 13 != 4;
                let port = [None, Some(0), Some(1), Some(1023), Some(1024), Some(65_535)];
                let host = |n: usize| Addr16::from_v4_bytes([10, 0, 1, (n % 3) as u8]);
                PacketRecord {
                    ts_nanos: (i as i64) * 50_000_000,
                    wire_len: 100 + (i % 5) as u32,
                    cap_len: 60,
                    headers: PacketHeaders {
                        vlan_outer: ((600..603).contains(&i) || (1256..1512).contains(&i))
                            .then_some(9),
                        ip_version: ip.then_some(4),
                        ip_proto: ip.then_some([6, 17][i % 2]),
                        src_addr: ip.then(|| host(i / 7)),
                        dst_addr: (ip && !i.is_multiple_of(11)).then(|| host(i / 2)),
                        src_port: if ip { port[i % 6] } else { None },
                        dst_port: if ip { port[(i / 6) % 6] } else { None },
                        tcp_flags: (ip && i.is_multiple_of(2)).then_some([0, 2, 18][i % 3]),
                        ..PacketHeaders::default()
                    },
                    ..PacketRecord::default()
                }
            })
            .collect();
        for kind in [SummaryKind::Services, SummaryKind::Flows] {
            let mut builder = SummaryBuilder::new(kind);
            for part in rows.chunks(1000) {
                builder.add(&batch(part)).unwrap();
            }
            let expected = grouped(&rows, kind);
            let summary = builder.finish().unwrap();
            assert_eq!(summary.num_rows(), expected.len(), "{kind:?}");
            assert_eq!(summary_rows(&summary), expected, "{kind:?}");
        }
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
