//! The connection index of Diventi: every connection record is inserted twice into
//! an embedded RocksDB, keyed by each of its two addresses, so "what did A talk to
//! between t1 and t2" is one range scan; count-based expiration keeps the N newest
//! events and never more than N + k (see [`Expiry`]).
//!
//! Key (46 bytes, byte order = scan order):
//! `addr (16) | ts (8, big-endian, sign bit flipped) | peer (16) | port (2) |
//! peer port (2) | proto (1) | flags (1: bit 0 = reverse, addr is the responder)`.
//! This is the paper's Table 2 widened to IPv6 (IPv4 stored IPv4-mapped) plus the
//! protocol, so a TCP and a UDP connection with the same ports and start time
//! cannot overwrite each other.
//!
//! Value ([`ConnSummary`], 8–13 bytes): source, state, TCP flags, four log2 scales
//! (bytes and packets each way, as the paper keeps an exponent instead of a count)
//! and the duration in milliseconds as a varint. The exact counters stay in the
//! `flows` segments. Layouts are in `docs/formats/index.md`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hindsight_model::app::{NameKind, NameLookup};
pub use hindsight_model::connection::{
    ConnEntry, ConnSummary, DEFAULT_COMMUNITY_SEED, Expiry, scale, scale_range,
};
use hindsight_model::{Addr16, AppFields, FlowRecord, FlowSource, FlowState, SegmentId};
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{
    BlockBasedIndexType, ColumnFamilyDescriptor, DB, Direction, IngestExternalFileOptions,
    IteratorMode, MergeOperands, Options, SstFileWriter, WriteBatch, WriteOptions,
};

use crate::histogram::TimestampHistogram;
use crate::{IndexError, Result, rocks};

/// Column family of connection entries (two per connection).
const CF_CONNECTIONS: &str = "connections";
/// Column family of the persisted timestamp histogram: key interval number
/// (i64, big-endian, sign bit flipped), value the event count (u64 little-endian,
/// summed by an associative merge operator so each write batch adds its counts).
const CF_HISTOGRAM: &str = "histogram";
/// Column family of the Community ID keys: key `hash (8) | ts (8) | the
/// originator's address (16)`, the first 8 bytes of the connection's Community
/// ID hash (with the index's seed), its start and its originator, which lead to
/// its entry in `connections`; value empty; one per connection. Keys written
/// before (`hash | ts | the originator's connection key (46)`, value the
/// summary) are still read.
const CF_COMMUNITY: &str = "community";
/// Bytes of the Community ID hash a key starts with.
const COMMUNITY_PREFIX: usize = 8;
/// Length of a Community ID key.
const COMMUNITY_KEY_LEN: usize = COMMUNITY_PREFIX + 8 + 16;
/// Length of a Community ID key of the first layout, which held the whole
/// connection key.
const COMMUNITY_KEY_LEN_V1: usize = COMMUNITY_PREFIX + 8 + KEY_LEN;
/// Column family of the name keys: key `kind (1) | name (lowercased; a
/// domain's labels reversed) | 0 | ts (8) | originator (16) | originator port
/// (2) | responder (16) | responder port (2) | proto (1)`, which leads to the
/// connection's entry under its originator; value empty, or the name as sent
/// where it is not all lowercase. One key per name of a connection
/// ([`AppFields::names`]).
const CF_NAMES: &str = "names";
/// Bytes of a name key after the name's terminating 0.
const NAME_TAIL: usize = 8 + 16 + 2 + 16 + 2 + 1;
/// Column family of settings that must survive a restart: key `cutoff`, value the
/// expiration cutoff (i64 big-endian nanoseconds).
const CF_META: &str = "meta";
const META_CUTOFF: &[u8] = b"cutoff";
/// Key in `meta` of the seed the Community ID keys are hashed with (u16
/// big-endian), written when the index is created; absent in indexes written
/// before the seed was configurable, whose keys use seed 0.
const META_COMMUNITY_SEED: &[u8] = b"community-seed";
/// Key in `meta` of the last `flows` segment whose records are all in the index
/// (u64 big-endian segment id); see [`ConnectionIndex::flows_mark`].
const META_FLOWS_MARK: &[u8] = b"flows-indexed-through";
/// Name prefix of the table files written before they are ingested.
const TABLE_PREFIX: &str = "staged-";
/// Staged entries from which a commit writes a table file rather than a write
/// batch (see [`ConnectionIndex::commit`]).
pub const TABLE_COMMIT_BYTES: usize = 4 << 20;

/// Length of a connection key.
pub const KEY_LEN: usize = 16 + 8 + 16 + 2 + 2 + 1 + 1;
/// Bit of the key's flags byte set on the entry keyed by the responder.
const FLAG_REVERSE: u8 = 0x01;
/// "No cutoff yet": nothing is expired.
const NO_CUTOFF: i64 = i64::MIN;

/// Appends a summary as the index stores it.
fn encode_summary(summary: &ConnSummary, out: &mut Vec<u8>) {
    out.push(summary.source as u8);
    out.push(summary.state as u8);
    out.extend_from_slice(&summary.tcp_flags.to_be_bytes());
    out.extend_from_slice(&[
        summary.bytes_out_scale,
        summary.bytes_in_scale,
        summary.packets_out_scale,
        summary.packets_in_scale,
    ]);
    hindsight_model::put_varint(out, u64::from(summary.duration_ms));
}

/// The summary at the start of `bytes`, and the bytes after it.
fn decode_summary(bytes: &[u8]) -> Option<(ConnSummary, &[u8])> {
    let (head, mut varint) = bytes.split_at_checked(8)?;
    let mut duration_ms = 0u32;
    let mut shift = 0u32;
    loop {
        let (&byte, rest) = varint.split_first()?;
        varint = rest;
        if shift > 28 {
            return None;
        }
        duration_ms |= u32::from(byte & 0x7f).checked_shl(shift)?;
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    let decoded = ConnSummary {
        source: FlowSource::from_code(head[0])?,
        state: FlowState::from_code(head[1])?,
        tcp_flags: u16::from_be_bytes([head[2], head[3]]),
        bytes_out_scale: head[4],
        bytes_in_scale: head[5],
        packets_out_scale: head[6],
        packets_in_scale: head[7],
        duration_ms,
    };
    Some((decoded, varint))
}

/// How the index stores an entry: its key and value.
pub trait Stored: Sized {
    /// The two entries the index holds for `record` once it is committed (under
    /// its source address, then under its destination), as a scan returns them.
    fn of_record(record: &FlowRecord) -> Vec<Self>;
    /// The entry's key in the index: entries are ordered by it, and a page's
    /// cursor is the key of its last entry.
    fn key(&self) -> [u8; KEY_LEN];
    /// The entry as the index stores it: its key and its value (how a
    /// cluster's nodes hand entries to the node that merges them).
    fn stored(&self) -> ([u8; KEY_LEN], Vec<u8>);
    /// An entry from its stored key and value; `None` if they are not one.
    fn from_stored(key: &[u8], value: &[u8]) -> Option<Self>;
}

impl Stored for ConnEntry {
    fn of_record(record: &FlowRecord) -> Vec<ConnEntry> {
        let key = encode_key(record);
        let mut value = Vec::with_capacity(16);
        encode_value(record, &mut value);
        [key, reversed(&key)]
            .iter()
            .filter_map(|key| decode_entry(key, &value))
            .collect()
    }

    fn key(&self) -> [u8; KEY_LEN] {
        let mut key = entry_key(
            self.addr,
            self.ts_ns,
            self.peer,
            self.port,
            self.peer_port,
            self.proto,
        );
        if self.reverse {
            key[45] = FLAG_REVERSE;
        }
        key
    }

    fn stored(&self) -> ([u8; KEY_LEN], Vec<u8>) {
        let mut value = Vec::with_capacity(12);
        encode_summary(&self.summary, &mut value);
        if let Some(app) = &self.app {
            app.encode(&mut value);
        }
        (self.key(), value)
    }

    fn from_stored(key: &[u8], value: &[u8]) -> Option<Self> {
        decode_entry(key, value)
    }
}

fn ts_bytes(ts_ns: i64) -> [u8; 8] {
    ((ts_ns as u64) ^ (1 << 63)).to_be_bytes()
}

fn ts_from_bytes(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// Returns the start of the key range of `addr` at `ts_ns`.
fn key_prefix(addr: Addr16, ts_ns: i64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(&addr.0);
    key[16..].copy_from_slice(&ts_bytes(ts_ns));
    key
}

/// The key of a record's entry under its source address (see [`reversed`] for
/// the one under its destination).
fn encode_key(record: &FlowRecord) -> [u8; KEY_LEN] {
    entry_key(
        record.src,
        record.first_ns,
        record.dst,
        record.src_port,
        record.dst_port,
        record.proto,
    )
}

/// The key of an entry under `addr` (flags clear): address, start, peer,
/// ports, protocol.
fn entry_key(
    addr: Addr16,
    ts_ns: i64,
    peer: Addr16,
    port: u16,
    peer_port: u16,
    proto: u8,
) -> [u8; KEY_LEN] {
    let mut key = [0u8; KEY_LEN];
    key[..24].copy_from_slice(&key_prefix(addr, ts_ns));
    key[24..40].copy_from_slice(&peer.0);
    key[40..42].copy_from_slice(&port.to_be_bytes());
    key[42..44].copy_from_slice(&peer_port.to_be_bytes());
    key[44] = proto;
    key
}

/// The key of a record's entry under its destination, from the key under its
/// source: the address and the peer change places, and so do the ports.
fn reversed(key: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    let mut reversed = *key;
    reversed[..16].copy_from_slice(&key[24..40]);
    reversed[24..40].copy_from_slice(&key[..16]);
    reversed[40..42].copy_from_slice(&key[42..44]);
    reversed[42..44].copy_from_slice(&key[40..42]);
    reversed[45] = key[45] ^ FLAG_REVERSE;
    reversed
}

/// Returns the timestamp of a key, if it is long enough to have one.
fn key_ts(key: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = key.get(16..24)?.try_into().ok()?;
    Some(ts_from_bytes(bytes))
}

fn decode_entry(key: &[u8], value: &[u8]) -> Option<ConnEntry> {
    if key.len() != KEY_LEN {
        return None;
    }
    let addr = Addr16(key[..16].try_into().ok()?);
    let peer = Addr16(key[24..40].try_into().ok()?);
    let (summary, rest) = decode_summary(value)?;
    let app = match rest.is_empty() {
        true => None,
        false => Some(Box::new(AppFields::decode(rest)?)),
    };
    Some(ConnEntry {
        addr,
        ts_ns: key_ts(key)?,
        peer,
        port: u16::from_be_bytes([key[40], key[41]]),
        peer_port: u16::from_be_bytes([key[42], key[43]]),
        proto: key[44],
        reverse: key[45] & FLAG_REVERSE != 0,
        summary,
        app,
    })
}

/// A record's value in the index: its summary, then its application fields
/// if it has any.
fn encode_value(record: &FlowRecord, out: &mut Vec<u8>) {
    encode_summary(&ConnSummary::of(record), out);
    if let Some(app) = record.app.as_deref().filter(|app| !app.is_empty()) {
        app.encode(out);
    }
}

/// The name keys of a record (see [`CF_NAMES`]), each with its value.
fn name_keys(record: &FlowRecord, out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
    let Some(app) = record.app.as_deref() else {
        return;
    };
    for (kind, name) in app.names() {
        let Some(lower) = kind.key(name) else {
            continue;
        };
        let mut key = Vec::with_capacity(2 + lower.len() + NAME_TAIL);
        key.push(kind as u8);
        key.extend_from_slice(&lower);
        key.push(0);
        let entry = encode_key(record);
        key.extend_from_slice(&entry[16..24]);
        key.extend_from_slice(&entry[..16]);
        key.extend_from_slice(&entry[40..42]);
        key.extend_from_slice(&entry[24..40]);
        key.extend_from_slice(&entry[42..45]);
        let original = match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => name.as_bytes().to_vec(),
            false => Vec::new(),
        };
        out.push((key, original));
    }
}

/// The originator's connection key a name key leads to, and the name's
/// lowercased key bytes; `None` if `key` is not a name key.
fn split_name_key(key: &[u8]) -> Option<(NameKind, &[u8], [u8; KEY_LEN])> {
    let (&kind, rest) = key.split_first()?;
    let kind = NameKind::from_code(kind)?;
    let name_len = rest.len().checked_sub(NAME_TAIL + 1)?;
    let (name, tail) = rest.split_at_checked(name_len)?;
    let (&0, tail) = tail.split_first()? else {
        return None;
    };
    let mut entry = [0u8; KEY_LEN];
    entry[16..24].copy_from_slice(tail.get(..8)?);
    entry[..16].copy_from_slice(tail.get(8..24)?);
    entry[40..42].copy_from_slice(tail.get(24..26)?);
    entry[24..40].copy_from_slice(tail.get(26..42)?);
    entry[42..45].copy_from_slice(tail.get(42..45)?);
    Some((kind, name, entry))
}

/// The compaction filter: drops entries whose timestamp is before the cutoff
/// current when the compaction started.
struct ExpireFilter {
    cutoff: i64,
    ts_at: TsAt,
}

/// Where in a key the timestamp starts.
#[derive(Clone, Copy)]
enum TsAt {
    /// At this byte (16: connections; 8: community).
    Start(usize),
    /// [`NAME_TAIL`] bytes before the end (names).
    NameTail,
}

impl TsAt {
    fn ts(self, key: &[u8]) -> Option<i64> {
        let at = match self {
            TsAt::Start(at) => at,
            TsAt::NameTail => key.len().checked_sub(NAME_TAIL)?,
        };
        let bytes: [u8; 8] = key.get(at..at + 8)?.try_into().ok()?;
        Some(ts_from_bytes(bytes))
    }
}

impl CompactionFilter for ExpireFilter {
    fn filter(&mut self, _level: u32, key: &[u8], _value: &[u8]) -> Decision {
        match self.ts_at.ts(key) {
            Some(ts) if ts < self.cutoff => Decision::Remove,
            _ => Decision::Keep,
        }
    }

    fn name(&self) -> &CStr {
        c"hindsight-expire"
    }
}

/// Makes one [`ExpireFilter`] per compaction with the cutoff of that moment.
struct ExpireFilterFactory {
    cutoff: Arc<AtomicI64>,
    ts_at: TsAt,
}

impl CompactionFilterFactory for ExpireFilterFactory {
    type Filter = ExpireFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> ExpireFilter {
        ExpireFilter {
            cutoff: self.cutoff.load(Ordering::Acquire),
            ts_at: self.ts_at,
        }
    }

    fn name(&self) -> &CStr {
        c"hindsight-expire-factory"
    }
}

fn add_counts(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let read = |bytes: &[u8]| bytes.try_into().map(u64::from_le_bytes).unwrap_or(0);
    let mut total = existing.map_or(0, read);
    for operand in operands {
        total = total.wrapping_add(read(operand));
    }
    Some(total.to_le_bytes().to_vec())
}

/// What one scan returned: entries in key order, and where to resume.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnPage {
    /// The entries, ordered by address, then time, then peer.
    pub entries: Vec<ConnEntry>,
    /// The key to pass as `after` to get the next page; `None` if this is the last.
    pub next: Option<Vec<u8>>,
    /// For a page of a name lookup, each entry's name key (its place in the
    /// lookup's order); empty for a page of addresses.
    pub places: Vec<Vec<u8>>,
}

/// A scan request: addresses in `[low, high]` (a CIDR block or one address),
/// connections starting in `[start_ns, end_ns]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnScan {
    /// Lowest address.
    pub low: Addr16,
    /// Highest address.
    pub high: Addr16,
    /// Earliest start time, inclusive.
    pub start_ns: i64,
    /// Latest start time, inclusive.
    pub end_ns: i64,
}

/// The connection index of an archive.
#[derive(Debug)]
pub struct ConnectionIndex {
    path: PathBuf,
    db: DB,
    expiry: Expiry,
    cutoff: Arc<AtomicI64>,
    histogram: Mutex<TimestampHistogram>,
    /// Entries waiting for the next table file ([`ConnectionIndex::stage`]).
    staged: Mutex<Staged>,
    /// Table files written so far by this process (names of the temporary files).
    tables_written: AtomicU64,
    /// The seed of the Community ID keys.
    community_seed: u16,
}

/// Connection entries staged for the next table file, with their histogram counts.
///
/// A record is staged once, by its key under its source address; its entry under
/// the destination is derived from that key when the entries are written. Entry
/// `e` is record `e / 2`'s, under its source if `e` is even.
#[derive(Debug, Default)]
struct Staged {
    keys: Vec<[u8; KEY_LEN]>,
    /// Each record's Community ID hash prefix, as a big-endian integer.
    community: Vec<u64>,
    /// Each record's value, as (start, length) in `values`.
    spans: Vec<(u32, u32)>,
    values: Vec<u8>,
    counts: BTreeMap<i64, u64>,
    /// The records' name keys with their values.
    names: Vec<(Vec<u8>, Vec<u8>)>,
    /// Bytes of `names`' keys and values.
    name_bytes: usize,
}

impl Staged {
    fn bytes(&self) -> usize {
        self.keys.len() * (KEY_LEN + COMMUNITY_PREFIX + std::mem::size_of::<(u32, u32)>())
            + self.values.len()
            + self.names.len() * std::mem::size_of::<(Vec<u8>, Vec<u8>)>()
            + self.name_bytes
    }

    /// [`Self::bytes`] as allocated: each vector's capacity, not its length.
    fn allocated_bytes(&self) -> usize {
        self.keys.capacity() * KEY_LEN
            + self.community.capacity() * std::mem::size_of::<u64>()
            + self.spans.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.values.capacity()
            + self.names.capacity() * std::mem::size_of::<(Vec<u8>, Vec<u8>)>()
            + self.name_bytes
    }

    /// Sorts the name keys and drops repeated ones (the last staged wins).
    fn sorted_names(&mut self) -> &[(Vec<u8>, Vec<u8>)] {
        // Stable: among equal keys, the later staged is after.
        self.names.sort_by(|a, b| a.0.cmp(&b.0));
        self.names.reverse();
        self.names.dedup_by(|next, kept| next.0 == kept.0);
        self.names.reverse();
        &self.names
    }

    /// Calls `f` with the Community ID keys in key order (one per record), each
    /// key once.
    fn for_each_community<E>(
        &self,
        mut f: impl FnMut(&[u8; COMMUNITY_KEY_LEN]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // As integers: sorting 32-byte arrays compares them byte by byte.
        let mut order: Vec<(u64, u64, u128)> = self
            .keys
            .iter()
            .zip(&self.community)
            .map(|(key, &hash)| {
                (
                    hash,
                    u64::from_be_bytes(key[16..24].try_into().unwrap_or_default()),
                    u128::from_be_bytes(key[..16].try_into().unwrap_or_default()),
                )
            })
            .collect();
        order.sort_unstable();
        order.dedup();
        for (hash, ts, addr) in order {
            let mut key = [0u8; COMMUNITY_KEY_LEN];
            key[..COMMUNITY_PREFIX].copy_from_slice(&hash.to_be_bytes());
            key[COMMUNITY_PREFIX..COMMUNITY_PREFIX + 8].copy_from_slice(&ts.to_be_bytes());
            key[COMMUNITY_PREFIX + 8..].copy_from_slice(&addr.to_be_bytes());
            f(&key)?;
        }
        Ok(())
    }

    /// The key of entry `e`.
    fn key(&self, e: u32) -> [u8; KEY_LEN] {
        let key = &self.keys[(e / 2) as usize];
        if e.is_multiple_of(2) {
            *key
        } else {
            reversed(key)
        }
    }

    /// Calls `f` with the entries in key order, each key once: for equal keys the
    /// last staged wins, as the last write of a key would.
    ///
    /// The entries are gathered into a buffer [`GATHER_ENTRIES`] at a time before
    /// `f` sees them: staged in arrival order, they are scattered through tens of
    /// megabytes when read in key order, and copying a run of them in one tight
    /// loop lets their cache misses overlap, where `f` (a table file writer) would
    /// take them one at a time.
    fn for_each_in_key_order<E>(
        &self,
        mut f: impl FnMut(&[u8; KEY_LEN], &[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        // Sorted by address and time as integers, then the whole key, the latest
        // staged first among equal keys.
        let mut order: Vec<(u128, u64, u32)> = Vec::with_capacity(self.keys.len() * 2);
        for (i, key) in self.keys.iter().enumerate() {
            let ts = u64::from_be_bytes(key[16..24].try_into().unwrap_or_default());
            let source = u128::from_be_bytes(key[..16].try_into().unwrap_or_default());
            let destination = u128::from_be_bytes(key[24..40].try_into().unwrap_or_default());
            let e = 2 * i as u32;
            order.push((source, ts, e));
            order.push((destination, ts, e + 1));
        }
        let key = |e: u32| self.key(e);
        order.sort_unstable_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| key(a.2).cmp(&key(b.2)))
                .then(b.2.cmp(&a.2))
        });
        // `dedup_by` keeps the first of equal entries: the latest staged.
        order.dedup_by(|next, kept| {
            (next.0, next.1) == (kept.0, kept.1) && key(next.2) == key(kept.2)
        });
        let mut keys: Vec<[u8; KEY_LEN]> = Vec::with_capacity(GATHER_ENTRIES);
        let mut values: Vec<u8> = Vec::with_capacity(GATHER_ENTRIES * 16);
        let mut ends: Vec<usize> = Vec::with_capacity(GATHER_ENTRIES);
        for run in order.chunks(GATHER_ENTRIES) {
            keys.clear();
            values.clear();
            ends.clear();
            for &(_, _, e) in run {
                keys.push(key(e));
                let (start, len) = self.spans[(e / 2) as usize];
                values.extend_from_slice(&self.values[start as usize..(start + len) as usize]);
                ends.push(values.len());
            }
            let mut start = 0;
            for (key, &end) in keys.iter().zip(&ends) {
                f(key, &values[start..end])?;
                start = end;
            }
        }
        Ok(())
    }
}

/// Staged entries gathered at a time by [`Staged::for_each_in_key_order`].
const GATHER_ENTRIES: usize = 1024;

impl std::fmt::Debug for ExpireFilterFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpireFilterFactory").finish()
    }
}

impl ConnectionIndex {
    /// Opens (creating if needed) the connection index in `dir` for writing, with
    /// the expiration settings `expiry`. The histogram and the cutoff are read back
    /// from the database, so expiration continues where it stopped. Community
    /// IDs are keyed with the default seed.
    pub fn open(dir: &Path, expiry: Expiry) -> Result<Self> {
        Self::open_seeded(dir, expiry, DEFAULT_COMMUNITY_SEED)
    }

    /// [`open`](Self::open), with Community IDs keyed with `seed`: a new index
    /// records it; an index created with another seed is refused
    /// ([`IndexError::Seed`]), since its keys would not be found.
    pub fn open_seeded(dir: &Path, expiry: Expiry, seed: u16) -> Result<Self> {
        let cutoff = Arc::new(AtomicI64::new(NO_CUTOFF));
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_keep_log_file_num(4);
        options.increase_parallelism(2);
        crate::memory::bound_memtables(&mut options);
        let mut connections = table_options();
        connections.set_compaction_filter_factory(ExpireFilterFactory {
            cutoff: Arc::clone(&cutoff),
            ts_at: TsAt::Start(16),
        });
        let mut community = table_options();
        community.set_compaction_filter_factory(ExpireFilterFactory {
            cutoff: Arc::clone(&cutoff),
            ts_at: TsAt::Start(COMMUNITY_PREFIX),
        });
        let mut names = table_options();
        names.set_compaction_filter_factory(ExpireFilterFactory {
            cutoff: Arc::clone(&cutoff),
            ts_at: TsAt::NameTail,
        });
        let mut histogram_options = small_family_options();
        histogram_options.set_merge_operator_associative("hindsight-add-u64", add_counts);
        let families = [
            ColumnFamilyDescriptor::new(CF_CONNECTIONS, connections),
            ColumnFamilyDescriptor::new(CF_HISTOGRAM, histogram_options),
            ColumnFamilyDescriptor::new(CF_META, small_family_options()),
            ColumnFamilyDescriptor::new(CF_COMMUNITY, community),
            ColumnFamilyDescriptor::new(CF_NAMES, names),
        ];
        let db = DB::open_cf_descriptors(&options, dir, families).map_err(rocks(dir))?;
        // Table files of a commit that did not finish (their entries are staged
        // again from the `flows` segments: see `flows_mark`).
        if let Ok(listing) = std::fs::read_dir(dir) {
            for file in listing.flatten() {
                if file.file_name().to_string_lossy().starts_with(TABLE_PREFIX) {
                    let _already_gone = std::fs::remove_file(file.path());
                }
            }
        }
        let index = Self {
            path: dir.to_owned(),
            db,
            expiry,
            cutoff,
            histogram: Mutex::new(TimestampHistogram::new(granularity_ns(&expiry))),
            staged: Mutex::default(),
            tables_written: AtomicU64::new(0),
            community_seed: seed,
        };
        index.load_state()?;
        index.settle_seed(seed)?;
        Ok(index)
    }

    /// Records `seed` in a new index, or checks it against the one recorded.
    fn settle_seed(&self, seed: u16) -> Result<()> {
        let stored = match self.stored_seed()? {
            Some(stored) => stored,
            None if self.is_empty()? => {
                let meta = self.family(CF_META)?;
                self.db
                    .put_cf(meta, META_COMMUNITY_SEED, seed.to_be_bytes())
                    .map_err(rocks(&self.path))?;
                return Ok(());
            }
            None => DEFAULT_COMMUNITY_SEED,
        };
        match stored == seed {
            true => Ok(()),
            false => Err(IndexError::Seed {
                path: self.path.clone(),
                stored,
                configured: seed,
            }),
        }
    }

    /// The seed recorded in the index, if one is.
    fn stored_seed(&self) -> Result<Option<u16>> {
        Ok(self
            .read_meta(META_COMMUNITY_SEED, "the Community ID seed")?
            .map(u16::from_be_bytes))
    }

    /// The value of `key` in `meta`, if it is set; `what` names it in the
    /// error when it is not `N` bytes long.
    fn read_meta<const N: usize>(&self, key: &[u8], what: &str) -> Result<Option<[u8; N]>> {
        let meta = self.family(CF_META)?;
        let Some(bytes) = self.db.get_cf(meta, key).map_err(rocks(&self.path))? else {
            return Ok(None);
        };
        let bytes = bytes
            .as_slice()
            .try_into()
            .map_err(|_| self.corrupt(CF_META, format!("{what} is not {N} bytes")))?;
        Ok(Some(bytes))
    }

    /// Returns true if the index holds no connection.
    fn is_empty(&self) -> Result<bool> {
        let mut iter = self.db.raw_iterator_cf(self.family(CF_CONNECTIONS)?);
        iter.seek_to_first();
        iter.status().map_err(rocks(&self.path))?;
        Ok(!iter.valid())
    }

    /// The seed the Community ID keys are hashed with (the archive's
    /// `[connections] community_id_seed` when the index was created).
    pub fn community_seed(&self) -> u16 {
        self.community_seed
    }

    /// The index's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the index in `dir` read-only; `None` if there is none yet.
    pub fn open_read_only(dir: &Path) -> Result<Option<Self>> {
        if !dir.join("CURRENT").exists() {
            return Ok(None);
        }
        let mut histogram_options = small_family_options();
        histogram_options.set_merge_operator_associative("hindsight-add-u64", add_counts);
        let mut families = vec![
            ColumnFamilyDescriptor::new(CF_CONNECTIONS, read_table_options()),
            ColumnFamilyDescriptor::new(CF_HISTOGRAM, histogram_options),
            ColumnFamilyDescriptor::new(CF_META, small_family_options()),
        ];
        // Indexes written before Community IDs were keys have no such family.
        let existing = DB::list_cf(&Options::default(), dir).unwrap_or_default();
        for optional in [CF_COMMUNITY, CF_NAMES] {
            if existing.iter().any(|name| name == optional) {
                families.push(ColumnFamilyDescriptor::new(optional, read_table_options()));
            }
        }
        let db =
            DB::open_cf_descriptors_read_only(&crate::read_only_options(), dir, families, false)
                .map_err(rocks(dir))?;
        let index = Self {
            path: dir.to_owned(),
            db,
            expiry: Expiry::OFF,
            cutoff: Arc::new(AtomicI64::new(NO_CUTOFF)),
            histogram: Mutex::new(TimestampHistogram::new(granularity_ns(&Expiry::OFF))),
            staged: Mutex::default(),
            tables_written: AtomicU64::new(0),
            community_seed: DEFAULT_COMMUNITY_SEED,
        };
        // The histogram serves a writer's cutoffs only; a reader needs the
        // cutoff, and reading the histogram grows with the span indexed (one
        // entry per `histogram_granularity_secs`: 480,000 for 8,000 hours).
        index.load_cutoff()?;
        let community_seed = index.stored_seed()?.unwrap_or(DEFAULT_COMMUNITY_SEED);
        Ok(Some(Self {
            community_seed,
            ..index
        }))
    }

    fn family(&self, name: &'static str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| IndexError::Corrupt {
            path: self.path.clone(),
            family: name,
            reason: "column family is missing".to_owned(),
        })
    }

    fn corrupt(&self, family: &'static str, reason: String) -> IndexError {
        IndexError::Corrupt {
            path: self.path.clone(),
            family,
            reason,
        }
    }

    /// Reads the cutoff and the histogram back from the database. The persisted
    /// histogram may have been written with another granularity: its counts are
    /// re-binned into the configured one by interval start (rounding down keeps
    /// every count at or before its true time, so cutoffs stay safe).
    fn load_state(&self) -> Result<()> {
        self.load_cutoff()?;
        // The histogram in memory serves expiration alone (see `commit`).
        if !self.expiry.expires() {
            return Ok(());
        }
        let family = self.family(CF_HISTOGRAM)?;
        let mut histogram = self.lock_histogram();
        for item in self.db.iterator_cf(family, IteratorMode::Start) {
            let (key, value) = item.map_err(rocks(&self.path))?;
            let (Ok(key), Ok(value)) = (
                <[u8; 16]>::try_from(key.as_ref()),
                <[u8; 8]>::try_from(value.as_ref()),
            ) else {
                return Err(self.corrupt(CF_HISTOGRAM, "entry of the wrong size".to_owned()));
            };
            let start = ts_from_bytes(key[..8].try_into().unwrap_or_default());
            let bucket = histogram.bucket_of(start);
            histogram.add(bucket, u64::from_le_bytes(value));
        }
        Ok(())
    }

    /// Reads the cutoff back from the database.
    fn load_cutoff(&self) -> Result<()> {
        if let Some(bytes) = self.read_meta(META_CUTOFF, "cutoff")? {
            self.cutoff
                .store(i64::from_be_bytes(bytes), Ordering::Release);
        }
        Ok(())
    }

    fn lock_histogram(&self) -> std::sync::MutexGuard<'_, TimestampHistogram> {
        // A panic while holding the lock leaves counts that are still valid.
        self.histogram
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Returns the expiration settings.
    pub fn expiry(&self) -> Expiry {
        self.expiry
    }

    /// Returns the current cutoff: entries older than it are expired (dropped at
    /// their next compaction and never returned by scans). `None` before the
    /// index first held more than N events.
    pub fn cutoff(&self) -> Option<i64> {
        Some(self.cutoff.load(Ordering::Acquire)).filter(|&c| c != NO_CUTOFF)
    }

    /// Inserts the records, two entries each, and counts them in the histogram:
    /// [`stage`](Self::stage) then [`commit`](Self::commit) without a mark.
    pub fn insert(&self, records: &[FlowRecord]) -> Result<()> {
        self.stage(records);
        self.commit(None)
    }

    /// Stages the records, two entries each, for the next [`commit`](Self::commit).
    /// Staged entries are in memory only: neither durable nor visible to scans.
    pub fn stage(&self, records: &[FlowRecord]) {
        let width = granularity_ns(&self.expiry);
        let mut staged = self.lock_staged();
        let staged = &mut *staged;
        staged.keys.reserve(records.len());
        staged.community.reserve(records.len());
        staged.spans.reserve(records.len());
        for record in records {
            let start = staged.values.len();
            encode_value(record, &mut staged.values);
            // Offsets past 4 GiB cannot be staged (the sink commits at 64 MiB).
            let span = (
                u32::try_from(start).unwrap_or(u32::MAX),
                u32::try_from(staged.values.len() - start).unwrap_or(0),
            );
            let names = staged.names.len();
            name_keys(record, &mut staged.names);
            staged.name_bytes += staged.names[names..]
                .iter()
                .map(|(key, value)| key.len() + value.len())
                .sum::<usize>();
            staged.keys.push(encode_key(record));
            let hash = record.community_id_hash(self.community_seed);
            staged.community.push(u64::from_be_bytes(
                hash[..COMMUNITY_PREFIX].try_into().unwrap_or_default(),
            ));
            staged.spans.push(span);
            *staged
                .counts
                .entry(record.first_ns.div_euclid(width))
                .or_default() += 1;
        }
    }

    /// Returns the bytes of memory the staged entries take: what their
    /// vectors have allocated, which is up to twice what they hold (they
    /// double as they grow), so that a bound on it bounds the memory.
    pub fn staged_bytes(&self) -> usize {
        self.lock_staged().allocated_bytes()
    }

    /// Writes the staged entries into the index with their histogram counts and,
    /// if given, records `mark` as the last `flows` segment whose records are all
    /// in the index.
    ///
    /// At least [`TABLE_COMMIT_BYTES`] of entries go in as one table file,
    /// ingested into the `connections` family (no write-ahead log, no memtable),
    /// followed by one synced write batch with the counts and the mark. A crash
    /// between the two leaves the entries without their counts and the mark
    /// behind them: the caller stages those segments again (entries are keyed by
    /// their content, so writing one twice changes nothing). Fewer entries (a
    /// live capture's seal every minute) go in one write batch with the counts
    /// and the mark, through the write-ahead log and the memtable, so that small
    /// commits do not make small table files for compactions to rewrite.
    pub fn commit(&self, mark: Option<SegmentId>) -> Result<()> {
        let mut staged = std::mem::take(&mut *self.lock_staged());
        staged.sorted_names();
        let mut batch = WriteBatch::default();
        let mut synced = WriteOptions::default();
        if staged.bytes() >= TABLE_COMMIT_BYTES {
            self.write_table(&staged)?;
            synced.set_sync(true);
        } else if !staged.keys.is_empty() {
            let connections = self.family(CF_CONNECTIONS)?;
            staged
                .for_each_in_key_order(|key, value| {
                    batch.put_cf(connections, key, value);
                    Ok::<(), Infallible>(())
                })
                .unwrap_or_else(|never| match never {});
            let community = self.family(CF_COMMUNITY)?;
            staged
                .for_each_community(|key| {
                    batch.put_cf(community, key, []);
                    Ok::<(), Infallible>(())
                })
                .unwrap_or_else(|never| match never {});
            let names = self.family(CF_NAMES)?;
            for (key, value) in &staged.names {
                batch.put_cf(names, key, value);
            }
        }
        let meta = self.family(CF_META)?;
        let histogram_family = self.family(CF_HISTOGRAM)?;
        let width = granularity_ns(&self.expiry);
        for (&bucket, &count) in &staged.counts {
            batch.merge_cf(
                histogram_family,
                histogram_key(bucket.saturating_mul(width)),
                count.to_le_bytes(),
            );
        }
        if let Some(mark) = mark {
            batch.put_cf(meta, META_FLOWS_MARK, mark.0.to_be_bytes());
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.db
            .write_opt(batch, &synced)
            .map_err(rocks(&self.path))?;
        // The histogram in memory serves expiration alone: without it, it
        // would hold one interval per minute of the archive's whole span (12.6
        // MB at 500 M packets over 8,000 hours). The persisted counts are read
        // back if expiration is turned on later.
        if self.expiry.expires() {
            let mut histogram = self.lock_histogram();
            for (bucket, count) in staged.counts {
                histogram.add(bucket, count);
            }
        }
        Ok(())
    }

    /// Writes `staged`'s entries, in key order, to a table file and ingests it
    /// into the connections, then its Community ID keys into theirs.
    fn write_table(&self, staged: &Staged) -> Result<()> {
        self.ingest_table(CF_CONNECTIONS, |writer| {
            staged.for_each_in_key_order(|key, value| {
                writer.put(key, value).map_err(rocks(&self.path))
            })
        })?;
        self.ingest_table(CF_COMMUNITY, |writer| {
            staged.for_each_community(|key| writer.put(key, []).map_err(rocks(&self.path)))
        })?;
        if staged.names.is_empty() {
            return Ok(());
        }
        // Sorted and without repeats by `commit`.
        self.ingest_table(CF_NAMES, |writer| {
            for (key, value) in &staged.names {
                writer.put(key, value).map_err(rocks(&self.path))?;
            }
            Ok(())
        })
    }

    /// Writes a table file with `fill` and ingests it into `family`.
    fn ingest_table(
        &self,
        family: &'static str,
        fill: impl FnOnce(&mut SstFileWriter<'_>) -> Result<()>,
    ) -> Result<()> {
        let file = self.path.join(format!(
            "{TABLE_PREFIX}{}-{}.sst",
            std::process::id(),
            self.tables_written.fetch_add(1, Ordering::Relaxed)
        ));
        // LZ4, as for memtable flushes: a table file writer takes the bottommost
        // level's compression (zstd), which compactions apply later anyway.
        let mut options = table_options();
        options.set_bottommost_compression_type(rocksdb::DBCompressionType::Lz4);
        let mut writer = SstFileWriter::create(&options);
        writer.open(&file).map_err(rocks(&self.path))?;
        fill(&mut writer)?;
        writer.finish().map_err(rocks(&self.path))?;
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        let ingested = self.family(family).and_then(|family| {
            self.db
                .ingest_external_file_cf_opts(family, &ingest, vec![&file])
                .map_err(rocks(&self.path))
        });
        // Moved files are linked into the database; the name given is removed
        // either way.
        let _already_gone = std::fs::remove_file(&file);
        ingested
    }

    /// Returns the last `flows` segment whose records are all in the index, as
    /// recorded by [`commit`](Self::commit) or [`set_flows_mark`](Self::set_flows_mark).
    pub fn flows_mark(&self) -> Result<Option<SegmentId>> {
        Ok(self
            .read_meta(META_FLOWS_MARK, "flows mark")?
            .map(|bytes| SegmentId(u64::from_be_bytes(bytes))))
    }

    /// Records `mark` as the last `flows` segment whose records are all in the
    /// index (synced).
    pub fn set_flows_mark(&self, mark: SegmentId) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.family(CF_META)?, META_FLOWS_MARK, mark.0.to_be_bytes());
        let mut synced = WriteOptions::default();
        synced.set_sync(true);
        self.db.write_opt(batch, &synced).map_err(rocks(&self.path))
    }

    fn lock_staged(&self) -> std::sync::MutexGuard<'_, Staged> {
        // A panic while holding the lock leaves whole entries.
        self.staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Recomputes the cutoff from the histogram (the paper's periodic cutoff
    /// update) and persists it; forgets histogram intervals before it. Returns the
    /// cutoff now in force. The cutoff never moves back: the events at or after
    /// an earlier cutoff only grow in number.
    pub fn update_cutoff(&self) -> Result<Option<i64>> {
        let mut histogram = self.lock_histogram();
        let Some(computed) = histogram.cutoff(self.expiry.keep_events) else {
            return Ok(self.cutoff());
        };
        let cutoff = computed.max(self.cutoff.load(Ordering::Acquire));
        let meta = self.family(CF_META)?;
        let histogram_family = self.family(CF_HISTOGRAM)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(meta, META_CUTOFF, cutoff.to_be_bytes());
        for bucket in histogram.drop_before(cutoff) {
            batch.delete_cf(
                histogram_family,
                histogram_key(bucket.saturating_mul(histogram.width_ns())),
            );
        }
        self.db.write(batch).map_err(rocks(&self.path))?;
        self.cutoff.store(cutoff, Ordering::Release);
        Ok(Some(cutoff))
    }

    /// Compacts the whole connection family, so every entry passes the expiration
    /// filter (the paper's periodic compaction, run on our own schedule: see
    /// [`ExpiryClock`]).
    pub fn compact(&self) -> Result<()> {
        let mut options = rocksdb::CompactOptions::default();
        options.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        for name in [CF_CONNECTIONS, CF_COMMUNITY, CF_NAMES] {
            let family = self.family(name)?;
            self.db
                .compact_range_cf_opt(family, None::<&[u8]>, None::<&[u8]>, &options);
        }
        Ok(())
    }

    /// Flushes the memtables to table files (at a clean shutdown: the WAL makes
    /// writes durable anyway, but every read-only open would replay it).
    pub fn flush(&self) -> Result<()> {
        // Every family, so that no reader has to replay the write-ahead log.
        for name in [
            CF_CONNECTIONS,
            CF_HISTOGRAM,
            CF_META,
            CF_COMMUNITY,
            CF_NAMES,
        ] {
            let family = self.family(name)?;
            self.db.flush_cf(family).map_err(rocks(&self.path))?;
        }
        Ok(())
    }

    /// Returns one page of the connections of the addresses in `scan`, at most
    /// `limit` entries, resuming after key `after` (a [`ConnPage::next`]).
    /// Entries older than the cutoff are not returned even before their compaction.
    pub fn scan(&self, scan: &ConnScan, after: Option<&[u8]>, limit: usize) -> Result<ConnPage> {
        self.scan_where(scan, after, limit, &|_| true)
    }

    /// Like [`scan`](Self::scan), keeping only the entries `keep` accepts: a page
    /// holds up to `limit` of those, and its cursor resumes after the last one.
    pub fn scan_where(
        &self,
        scan: &ConnScan,
        after: Option<&[u8]>,
        limit: usize,
        keep: &dyn Fn(&ConnEntry) -> bool,
    ) -> Result<ConnPage> {
        let connections = self.family(CF_CONNECTIONS)?;
        let start_ns = scan.start_ns.max(self.cutoff.load(Ordering::Acquire));
        let mut page = ConnPage::default();
        if scan.low > scan.high || start_ns > scan.end_ns || limit == 0 {
            return Ok(page);
        }
        let mut iter = self.db.raw_iterator_cf(connections);
        match after {
            Some(key) => iter.seek(successor(key)),
            None => iter.seek(key_prefix(scan.low, start_ns)),
        }
        let mut last_key = Vec::new();
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            let Some(entry) = decode_entry(key, value) else {
                return Err(self.corrupt(
                    CF_CONNECTIONS,
                    format!("entry with a {}-byte key", key.len()),
                ));
            };
            if entry.addr > scan.high {
                break;
            }
            if entry.addr < scan.low {
                iter.seek(key_prefix(scan.low, start_ns));
                continue;
            }
            if entry.ts_ns < start_ns {
                // Same address, before the window: jump into it.
                iter.seek(key_prefix(entry.addr, start_ns));
                continue;
            }
            if entry.ts_ns > scan.end_ns {
                // Past this address's window: jump to the next address.
                match next_addr(entry.addr) {
                    Some(next) if next <= scan.high => {
                        iter.seek(key_prefix(next, start_ns));
                        continue;
                    }
                    _ => break,
                }
            }
            if !keep(&entry) {
                iter.next();
                continue;
            }
            if page.entries.len() == limit {
                page.next = Some(last_key);
                break;
            }
            last_key.clear();
            last_key.extend_from_slice(key);
            page.entries.push(entry);
            iter.next();
        }
        iter.status().map_err(rocks(&self.path))?;
        Ok(page)
    }

    /// Returns the connections whose Community ID (the index's seed) has
    /// hash `hash` and that start in `[start_ns, end_ns]`, at most `limit`, as
    /// their originator's entries; empty for an index written before Community
    /// IDs were keys ([`has_community_keys`](Self::has_community_keys) says).
    pub fn community(
        &self,
        hash: &[u8; 20],
        start_ns: i64,
        end_ns: i64,
        limit: usize,
    ) -> Result<Vec<ConnEntry>> {
        let Some(family) = self.db.cf_handle(CF_COMMUNITY) else {
            return Ok(Vec::new());
        };
        let start_ns = start_ns.max(self.cutoff.load(Ordering::Acquire));
        let mut found = Vec::new();
        if start_ns > end_ns {
            return Ok(found);
        }
        let prefix = &hash[..COMMUNITY_PREFIX];
        let mut seek = [0u8; COMMUNITY_PREFIX + 8];
        seek[..COMMUNITY_PREFIX].copy_from_slice(prefix);
        seek[COMMUNITY_PREFIX..].copy_from_slice(&ts_bytes(start_ns));
        let mut iter = self.db.raw_iterator_cf(family);
        iter.seek(seek);
        let connections = self.family(CF_CONNECTIONS)?;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if key.get(..COMMUNITY_PREFIX) != Some(prefix) {
                break;
            }
            let corrupt =
                || self.corrupt(CF_COMMUNITY, format!("entry with a {}-byte key", key.len()));
            if key.len() != COMMUNITY_KEY_LEN && key.len() != COMMUNITY_KEY_LEN_V1 {
                return Err(corrupt());
            }
            let ts = &key[COMMUNITY_PREFIX..COMMUNITY_PREFIX + 8];
            if ts_from_bytes(ts.try_into().unwrap_or_default()) > end_ns || found.len() >= limit {
                break;
            }
            let candidates = match key.len() {
                // The originator's entries that start then: the one with this
                // hash is the connection.
                COMMUNITY_KEY_LEN => {
                    self.entries_at(connections, &key[COMMUNITY_PREFIX + 8..], ts)?
                }
                _ => vec![decode_entry(&key[COMMUNITY_PREFIX + 8..], value).ok_or_else(corrupt)?],
            };
            for entry in candidates {
                // The whole hash, against the prefix's collisions.
                let (src, src_port, dst, dst_port) = entry.oriented();
                let record = FlowRecord {
                    src,
                    dst,
                    src_port,
                    dst_port,
                    proto: entry.proto,
                    ..FlowRecord::default()
                };
                if !entry.reverse
                    && found.len() < limit
                    && record.community_id_hash(self.community_seed) == *hash
                {
                    found.push(entry);
                }
            }
            iter.next();
        }
        iter.status().map_err(rocks(&self.path))?;
        Ok(found)
    }

    /// Returns one page of the connections that have a name `lookups` reads
    /// and start in `[start_ns, end_ns]`, at most `limit` of those `keep`
    /// accepts, as their originator's entries, in the order of the name keys
    /// (kind, lowercased name, start), resuming after name key `after` (a
    /// [`ConnPage::next`]). `name_ok` is asked once for each name (as sent)
    /// before its connections are read: false skips them. Empty for an index
    /// written before names were keys.
    #[allow(clippy::too_many_arguments)]
    pub fn names(
        &self,
        lookups: &[NameLookup],
        start_ns: i64,
        end_ns: i64,
        after: Option<&[u8]>,
        limit: usize,
        keep: &dyn Fn(&ConnEntry) -> bool,
        name_ok: &dyn Fn(NameKind, &str) -> bool,
    ) -> Result<ConnPage> {
        let mut page = ConnPage::default();
        let Some(family) = self.db.cf_handle(CF_NAMES) else {
            return Ok(page);
        };
        let start_ns = start_ns.max(self.cutoff.load(Ordering::Acquire));
        if start_ns > end_ns || limit == 0 {
            return Ok(page);
        }
        let connections = self.family(CF_CONNECTIONS)?;
        let mut iter = self.db.raw_iterator_cf(family);
        let mut pending = Vec::new();
        // The last name read, and whether `name_ok` took it.
        let mut verdict: Option<(Vec<u8>, Vec<u8>, bool)> = None;
        for (low, high) in name_ranges(lookups) {
            let from = match after {
                Some(after) if after >= high.as_slice() => continue,
                Some(after) if after >= low.as_slice() => successor(after),
                _ => low.clone(),
            };
            iter.seek(&from);
            while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
                if key >= high.as_slice() {
                    break;
                }
                let Some((kind, name, entry_key)) = split_name_key(key) else {
                    return Err(self.corrupt(CF_NAMES, format!("{}-byte key", key.len())));
                };
                // The name's keys: `kind | name | 0`.
                let group = &key[..key.len() - NAME_TAIL];
                let ts = key_ts(&entry_key).unwrap_or(i64::MIN);
                if ts < start_ns {
                    let mut seek = group.to_vec();
                    seek.extend_from_slice(&ts_bytes(start_ns));
                    iter.seek(seek);
                    continue;
                }
                if ts > end_ns {
                    // The next name: past `kind | name | 0`.
                    let mut seek = group.to_vec();
                    if let Some(last) = seek.last_mut() {
                        *last = 1;
                    }
                    iter.seek(seek);
                    continue;
                }
                let ok = match &verdict {
                    Some((known, known_value, ok)) if known == group && known_value == value => *ok,
                    _ => {
                        let text = match value.is_empty() {
                            true => kind.name_of_key(name),
                            false => String::from_utf8_lossy(value).into_owned(),
                        };
                        let ok = name_ok(kind, &text);
                        verdict = Some((group.to_vec(), value.to_vec(), ok));
                        ok
                    }
                };
                if ok {
                    pending.push((key.to_vec(), entry_key));
                    // Entries are read in batches (one multi-get each), no more
                    // at once than the page can still take.
                    if pending.len() >= (limit + 1 - page.entries.len()).clamp(1, 256)
                        && self.take_entries(connections, &mut pending, &mut page, limit, keep)?
                    {
                        return Ok(page);
                    }
                }
                iter.next();
            }
            iter.status().map_err(rocks(&self.path))?;
            if self.take_entries(connections, &mut pending, &mut page, limit, keep)? {
                return Ok(page);
            }
        }
        Ok(page)
    }

    /// Reads the entries of `pending` (name key, entry key), in order, into
    /// `page` as `keep` accepts them; true once the page is full and one more
    /// was accepted (the page's `next` is then its last name key).
    fn take_entries(
        &self,
        connections: &rocksdb::ColumnFamily,
        pending: &mut Vec<(Vec<u8>, [u8; KEY_LEN])>,
        page: &mut ConnPage,
        limit: usize,
        keep: &dyn Fn(&ConnEntry) -> bool,
    ) -> Result<bool> {
        if pending.is_empty() {
            return Ok(false);
        }
        let stored = self.db.batched_multi_get_cf(
            connections,
            pending.iter().map(|(_, entry_key)| entry_key),
            false,
        );
        for ((place, entry_key), stored) in pending.drain(..).zip(stored) {
            // Gone: expired before its name key was compacted away.
            let Some(stored) = stored.map_err(rocks(&self.path))? else {
                continue;
            };
            let entry = decode_entry(&entry_key, &stored).ok_or_else(|| {
                self.corrupt(CF_CONNECTIONS, "an entry that does not decode".to_owned())
            })?;
            if keep(&entry) {
                if page.entries.len() == limit {
                    // One more than the page holds: it ends here.
                    page.next = page.places.last().cloned();
                    return Ok(true);
                }
                page.entries.push(entry);
                page.places.push(place);
            }
        }
        Ok(false)
    }

    /// The entries of `connections` keyed by `addr` (16 bytes) that start at
    /// `ts` (8 key bytes): a Community ID key's connections.
    fn entries_at(
        &self,
        connections: &rocksdb::ColumnFamily,
        addr: &[u8],
        ts: &[u8],
    ) -> Result<Vec<ConnEntry>> {
        let mut prefix = [0u8; 24];
        prefix[..16].copy_from_slice(addr);
        prefix[16..].copy_from_slice(ts);
        let mut iter = self.db.raw_iterator_cf(connections);
        iter.seek(prefix);
        let mut entries = Vec::new();
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if key.get(..24) != Some(&prefix[..]) {
                break;
            }
            entries.push(decode_entry(key, value).ok_or_else(|| {
                self.corrupt(
                    CF_CONNECTIONS,
                    format!("entry with a {}-byte key", key.len()),
                )
            })?);
            iter.next();
        }
        iter.status().map_err(rocks(&self.path))?;
        Ok(entries)
    }

    /// Returns true if the index holds Community ID keys (indexes written
    /// before they were have none, and answer [`community`](Self::community)
    /// with nothing).
    pub fn has_community_keys(&self) -> bool {
        self.db.cf_handle(CF_COMMUNITY).is_some()
    }

    /// Counts the events (forward entries) and all entries in the index, reading
    /// every key. For tests and `stats`; a full scan.
    pub fn count(&self) -> Result<(u64, u64)> {
        let connections = self.family(CF_CONNECTIONS)?;
        let (mut events, mut entries) = (0u64, 0u64);
        let mut iter = self.db.raw_iterator_cf(connections);
        iter.seek_to_first();
        while let Some(key) = iter.key() {
            entries += 1;
            if key.len() == KEY_LEN && key[45] & FLAG_REVERSE == 0 {
                events += 1;
            }
            iter.next();
        }
        iter.status().map_err(rocks(&self.path))?;
        Ok((events, entries))
    }

    /// Counts the name keys, reading every one. For tests and `stats`.
    pub fn count_names(&self) -> Result<u64> {
        let Some(family) = self.db.cf_handle(CF_NAMES) else {
            return Ok(0);
        };
        let mut iter = self.db.raw_iterator_cf(family);
        iter.seek_to_first();
        let mut names = 0;
        while iter.valid() {
            names += 1;
            iter.next();
        }
        iter.status().map_err(rocks(&self.path))?;
        Ok(names)
    }

    /// Returns the timestamps of every forward entry (one per event), for tests.
    pub fn event_times(&self) -> Result<Vec<i64>> {
        let connections = self.family(CF_CONNECTIONS)?;
        let mut times = Vec::new();
        for item in self
            .db
            .iterator_cf(connections, IteratorMode::From(&[], Direction::Forward))
        {
            let (key, _) = item.map_err(rocks(&self.path))?;
            if key.len() == KEY_LEN && key[45] & FLAG_REVERSE == 0 {
                times.extend(key_ts(&key));
            }
        }
        Ok(times)
    }
}

/// Options of the `connections` family, which its table files are also written with.
fn table_options() -> Options {
    let mut options = table_factory_options(crate::TABLE_BLOCK_BYTES);
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    options.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
    options.set_write_buffer_size(64 << 20);
    options
}

/// Options of the small families (the histogram, the meta keys): RocksDB's
/// own table options but for the block cache, which is the process's.
fn small_family_options() -> Options {
    let mut options = Options::default();
    options.set_block_based_table_factory(&crate::memory::block_options());
    options
}

/// Options a reader opens the entry families with: each table file's index is
/// partitioned (a top level of a few KiB over 4 KiB partitions), and the
/// partitions are read through the block cache when a lookup needs them.
/// Opening a table file then reads its top level only, not a whole index
/// that grows with the file, and a lookup reads the partitions its keys are
/// in (docs/ARCHITECTURE.md: the index's open went 6.4 → 2.9 ms at 50 M
/// packets).
fn read_table_options() -> Options {
    // A reader's block size is unused: each table file says its own.
    table_factory_options(4096)
}

/// [`read_table_options`] for table files written with data blocks of `block_bytes`.
fn table_factory_options(block_bytes: usize) -> Options {
    let mut block = crate::memory::block_options();
    block.set_block_size(block_bytes);
    block.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    block.set_metadata_block_size(4096);
    block.set_pin_top_level_index_and_filter(true);
    let mut options = Options::default();
    options.set_block_based_table_factory(&block);
    options
}

/// Returns the key of a histogram interval starting at `start_ns`.
fn histogram_key(start_ns: i64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&ts_bytes(start_ns));
    key
}

fn granularity_ns(expiry: &Expiry) -> i64 {
    i64::try_from(expiry.histogram_granularity.as_nanos())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// The ranges `[low, high)` of name keys the lookups read, in key order,
/// overlapping ones merged.
fn name_ranges(lookups: &[NameLookup]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let with = |kind: NameKind, name: &[u8], last: u8| {
        let mut key = Vec::with_capacity(name.len() + 2);
        key.push(kind as u8);
        key.extend_from_slice(name);
        key.push(last);
        key
    };
    let mut ranges: Vec<(Vec<u8>, Vec<u8>)> = lookups
        .iter()
        .filter_map(|lookup| match lookup {
            NameLookup::Exact(kind, name) => {
                let name = kind.key(name)?;
                Some((with(*kind, &name, 0), with(*kind, &name, 1)))
            }
            NameLookup::Subdomains(kind, domain) => {
                let domain = kind.key(domain)?;
                Some((with(*kind, &domain, b'.'), with(*kind, &domain, b'.' + 1)))
            }
            NameLookup::All(kind) => Some((vec![*kind as u8], vec![*kind as u8 + 1])),
        })
        .collect();
    ranges.sort();
    let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match merged.last_mut() {
            Some(last) if low <= last.1 => {
                if high > last.1 {
                    last.1 = high;
                }
            }
            _ => merged.push((low, high)),
        }
    }
    merged
}

/// Returns the smallest key greater than `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// Returns the address after `addr`, if any.
fn next_addr(addr: Addr16) -> Option<Addr16> {
    u128::from_be_bytes(addr.0)
        .checked_add(1)
        .map(|n| Addr16(n.to_be_bytes()))
}

/// Decides when the periodic parts of expiration are due: a cutoff update every
/// `cutoff_interval` and a full compaction every `compaction_interval`, measured
/// on whatever clock the caller passes (wall time in the service, simulated time
/// in the bound test).
#[derive(Clone, Copy, Debug)]
pub struct ExpiryClock {
    expiry: Expiry,
    next_cutoff: Option<Duration>,
    next_compaction: Option<Duration>,
}

/// What an [`ExpiryClock`] says is due now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Due {
    /// Recompute the cutoff.
    pub cutoff: bool,
    /// Compact everything.
    pub compaction: bool,
}

impl ExpiryClock {
    /// Returns a clock whose first deadlines are one interval after the first tick.
    pub fn new(expiry: Expiry) -> Self {
        Self {
            expiry,
            next_cutoff: None,
            next_compaction: None,
        }
    }

    /// Returns what is due at time `now` (any monotonic clock) and moves the
    /// deadlines of what it returns one interval on.
    pub fn tick(&mut self, now: Duration) -> Due {
        if !self.expiry.expires() {
            return Due::default();
        }
        let mut due = Due::default();
        let cutoff_at = *self
            .next_cutoff
            .get_or_insert(now + self.expiry.cutoff_interval);
        if now >= cutoff_at {
            due.cutoff = true;
            self.next_cutoff = Some(now + self.expiry.cutoff_interval);
        }
        let compaction_at = *self
            .next_compaction
            .get_or_insert(now + self.expiry.compaction_interval);
        if now >= compaction_at {
            due.compaction = true;
            self.next_compaction = Some(now + self.expiry.compaction_interval);
        }
        due
    }
}

/// A thread that runs expiration on wall-clock time for a shared index: cutoff
/// updates and full compactions as [`ExpiryClock`] says, off the ingest path.
/// Stopped (and joined) on drop.
#[derive(Debug)]
pub struct Maintenance {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Maintenance {
    /// Starts maintenance of `index`; errors are reported to `on_error` and the
    /// thread carries on (a failed compaction is retried at the next interval).
    pub fn start(
        index: Arc<ConnectionIndex>,
        on_error: impl Fn(IndexError) + Send + 'static,
    ) -> Self {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("index-expiry".to_owned())
            .spawn(move || {
                let started = std::time::Instant::now();
                let mut clock = ExpiryClock::new(index.expiry());
                let tick = index
                    .expiry()
                    .cutoff_interval
                    .min(index.expiry().compaction_interval)
                    .clamp(Duration::from_millis(10), Duration::from_secs(1));
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(tick)
                {
                    let due = clock.tick(started.elapsed());
                    if due.cutoff
                        && let Err(error) = index.update_cutoff()
                    {
                        on_error(error);
                    }
                    if due.compaction
                        && let Err(error) = index.compact()
                    {
                        on_error(error);
                    }
                }
            })
            .ok();
        Self {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.stop = None;
        if let Some(thread) = self.thread.take() {
            let _ignored = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use hindsight_model::{Addr16, FlowRecord};

    use super::{ConnSummary, decode_entry, encode_key, reversed};

    #[test]
    fn the_reversed_key_is_the_entry_under_the_destination() {
        let record = FlowRecord {
            first_ns: 1_353_690_088_364_246_000,
            src: Addr16::from_v4_bytes([10, 151, 119, 2]),
            dst: Addr16([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            src_port: 2802,
            dst_port: 53,
            proto: 17,
            ..FlowRecord::default()
        };
        let mut value = Vec::new();
        super::encode_summary(&ConnSummary::of(&record), &mut value);
        let forward = encode_key(&record);
        let source = decode_entry(&forward, &value).expect("source entry");
        let destination = decode_entry(&reversed(&forward), &value).expect("destination entry");
        assert_eq!(
            (
                source.addr,
                source.port,
                source.peer,
                source.peer_port,
                source.reverse
            ),
            (record.src, 2802, record.dst, 53, false)
        );
        assert_eq!(
            (
                destination.addr,
                destination.port,
                destination.peer,
                destination.peer_port,
                destination.reverse
            ),
            (record.dst, 53, record.src, 2802, true)
        );
        for entry in [&source, &destination] {
            assert_eq!((entry.ts_ns, entry.proto), (record.first_ns, 17));
        }
        assert_eq!(reversed(&reversed(&forward)), forward);
    }
}
