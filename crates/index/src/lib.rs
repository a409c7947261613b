//! The role of the index crate is to answer questions by address without opening
//! a segment, from embedded RocksDB databases:
//! - [`AddressIndex`]: "which segments (and granules) can hold packets of address A
//!   (or any address in a CIDR range)?";
//! - [`ConnectionIndex`] (module [`connections`]): "which connections did A have
//!   between t1 and t2?", answered from the index alone, Diventi's design with
//!   count-based expiration.
//!
//! At seal time the set of distinct addresses of a segment is written as postings
//! `addr | segment` together with a marker saying the segment is indexed, in one
//! atomic write batch. The index is derived data: a segment the catalog lists
//! without a marker (crash before the batch reached the WAL) is re-indexed from its
//! file, and the query planner scans every unmarked segment, so a lost batch can
//! cost time but never a result. Key layouts are in `docs/formats/index.md`.

pub mod connections;
mod histogram;
pub mod memory;

pub use connections::{
    ConnEntry, ConnPage, ConnScan, ConnSummary, ConnectionIndex, Expiry, ExpiryClock, Maintenance,
    Stored,
};
pub use histogram::TimestampHistogram;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use hindsight_model::{Addr16, GranuleSet, SegmentId};
use rocksdb::{ColumnFamilyDescriptor, DB, IteratorMode, Options, ReadOptions, WriteBatch};

/// Column family of postings: key `addr (16 bytes) | segment id (8 bytes, big-endian)`,
/// value the granules of the segment holding the address (`GranuleSet::encode`). Big-endian ids keep one address's segments in id order, and 16-byte
/// IPv4-mapped addresses make a CIDR range one contiguous key range.
const CF_POSTINGS: &str = "postings";
/// Column family of covering postings: the same keys as `postings`, for the
/// addresses a segment holds only a few rows of; value their whole rows
/// (`hindsight_model::CoveredRowsBuilder`). A query whose postings in a segment are
/// all covered is answered without opening the segment.
const CF_COVERING: &str = "covering";
/// Column family of indexed-segment markers: key `segment id (8 bytes, big-endian)`,
/// value the number of distinct addresses (u64 big-endian).
const CF_SEGMENTS: &str = "segments";

/// Length of a postings key.
const POSTING_KEY_LEN: usize = 16 + 8;

/// The segment id of a postings key; `None` if the key is not one.
fn posting_segment(key: &[u8]) -> Option<SegmentId> {
    if key.len() != POSTING_KEY_LEN {
        return None;
    }
    let id: [u8; 8] = key.get(16..)?.try_into().ok()?;
    Some(SegmentId(u64::from_be_bytes(id)))
}

/// An error of the address index or the connection index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// RocksDB reported an error.
    #[error("{} {}: {source}", which(path), path.display())]
    Rocks {
        /// The index directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: rocksdb::Error,
    },
    /// A key or value does not have the layout this version writes.
    #[error(
        "{} {}: corrupt entry in column family {family}: {reason}",
        which(path),
        path.display()
    )]
    Corrupt {
        /// The index directory.
        path: PathBuf,
        /// The column family of the entry.
        family: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The connection index keys Community IDs with another seed than the one
    /// it is opened with.
    #[error(
        "connection index {}: its Community ID keys are hashed with seed {stored}, not {configured}: \
         set `[connections] community_id_seed = {stored}` in the archive's config.toml \
         (a new seed needs a new archive)",
        path.display()
    )]
    Seed {
        /// The index directory.
        path: PathBuf,
        /// The seed the index was created with.
        stored: u16,
        /// The seed it was opened with.
        configured: u16,
    },
}

/// Which index a directory holds, by the name the archive gives it
/// (`ARCHIVE/connections` or `ARCHIVE/index`).
fn which(path: &Path) -> &'static str {
    match path.file_name().and_then(|name| name.to_str()) {
        Some("connections") => "connection index",
        _ => "address index",
    }
}

/// Result of the index.
pub type Result<T, E = IndexError> = std::result::Result<T, E>;

/// The per-segment address postings of an archive.
#[derive(Debug)]
pub struct AddressIndex {
    path: PathBuf,
    db: DB,
    /// The indexed segments of a read-only handle, read once when first asked:
    /// such a handle sees the index as of its open, so the set cannot change,
    /// and a lookup need not read the whole family again (which grew with the
    /// archive). `None` for a writer's handle.
    indexed: Option<OnceLock<Arc<BTreeSet<SegmentId>>>>,
}

impl AddressIndex {
    /// Opens (creating if needed) the index in `dir` for reading and writing.
    pub fn open(dir: &Path) -> Result<Self> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        options.set_keep_log_file_num(4);
        memory::bound_memtables(&mut options);
        let families = [CF_POSTINGS, CF_SEGMENTS, CF_COVERING]
            .map(|name| ColumnFamilyDescriptor::new(name, written_table_options()));
        let db = DB::open_cf_descriptors(&options, dir, families).map_err(rocks(dir))?;
        Ok(Self {
            path: dir.to_owned(),
            db,
            indexed: None,
        })
    }

    /// Opens the index in `dir` read-only (a running writer may hold it open);
    /// returns `None` if there is no index there yet.
    pub fn open_read_only(dir: &Path) -> Result<Option<Self>> {
        if !dir.join("CURRENT").exists() {
            return Ok(None);
        }
        let options = read_only_options();
        let all = [CF_POSTINGS, CF_SEGMENTS, CF_COVERING];
        let db = match DB::open_cf_for_read_only(&options, dir, all, false) {
            Ok(db) => db,
            Err(_) => {
                // An index written before covering postings existed lacks their
                // family: open the families it has (listing them reads the
                // manifest once more, so only in this case).
                let present = DB::list_cf(&options, dir).map_err(rocks(dir))?;
                let families = all
                    .into_iter()
                    .filter(|name| present.iter().any(|p| p == name));
                DB::open_cf_for_read_only(&options, dir, families, false).map_err(rocks(dir))?
            }
        };
        Ok(Some(Self {
            path: dir.to_owned(),
            db,
            indexed: Some(OnceLock::new()),
        }))
    }

    /// Bytes the memtables of every family hold now (mutable, immutable and
    /// being flushed), as RocksDB counts them.
    #[cfg(test)]
    fn memtable_bytes(&self) -> u64 {
        [CF_POSTINGS, CF_SEGMENTS, CF_COVERING]
            .into_iter()
            .filter_map(|name| self.db.cf_handle(name))
            .filter_map(|family| {
                self.db
                    .property_int_value_cf(family, "rocksdb.size-all-mem-tables")
                    .ok()
                    .flatten()
            })
            .sum()
    }

    fn family(&self, name: &'static str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| IndexError::Corrupt {
            path: self.path.clone(),
            family: name,
            reason: "column family is missing".to_owned(),
        })
    }

    /// Writes the postings of segment `id`, its covering postings (encoded rows of
    /// rare addresses) and its marker in one atomic batch.
    pub fn add_segment(
        &self,
        id: SegmentId,
        postings_of_segment: &[(Addr16, GranuleSet)],
        covered: &[(Addr16, Vec<u8>)],
    ) -> Result<()> {
        let postings = self.family(CF_POSTINGS)?;
        let segments = self.family(CF_SEGMENTS)?;
        let mut batch = WriteBatch::default();
        for (address, granules) in postings_of_segment {
            batch.put_cf(postings, posting_key(*address, id), granules.encode());
        }
        if !covered.is_empty() {
            let covering = self.family(CF_COVERING)?;
            for (address, rows) in covered {
                batch.put_cf(covering, posting_key(*address, id), rows);
            }
        }
        let addresses = postings_of_segment;
        batch.put_cf(
            segments,
            id.0.to_be_bytes(),
            (addresses.len() as u64).to_be_bytes(),
        );
        self.db.write(batch).map_err(rocks(&self.path))
    }

    /// Deletes the postings of segment `id` and its marker in one atomic batch.
    pub fn remove_segment(&self, id: SegmentId, addresses: &[Addr16]) -> Result<()> {
        let postings = self.family(CF_POSTINGS)?;
        let segments = self.family(CF_SEGMENTS)?;
        let covering = self.family(CF_COVERING)?;
        let mut batch = WriteBatch::default();
        for address in addresses {
            batch.delete_cf(postings, posting_key(*address, id));
            batch.delete_cf(covering, posting_key(*address, id));
        }
        batch.delete_cf(segments, id.0.to_be_bytes());
        self.db.write(batch).map_err(rocks(&self.path))
    }

    /// Counts the postings of every segment, reading the whole postings family
    /// (for `hindsight check`: a segment's postings are its distinct addresses).
    pub fn posting_counts(&self) -> Result<BTreeMap<SegmentId, u64>> {
        let postings = self.family(CF_POSTINGS)?;
        let mut counts = BTreeMap::new();
        let mut iter = self.db.raw_iterator_cf(postings);
        iter.seek_to_first();
        while let Some(key) = iter.key() {
            let id = posting_segment(key).ok_or_else(|| IndexError::Corrupt {
                path: self.path.clone(),
                family: CF_POSTINGS,
                reason: format!("key of {} bytes, expected {POSTING_KEY_LEN}", key.len()),
            })?;
            *counts.entry(id).or_default() += 1;
            iter.next();
        }
        iter.status().map_err(rocks(&self.path))?;
        Ok(counts)
    }

    /// Deletes every posting (covering ones too) and the marker of segment `id`
    /// without knowing its addresses, by reading both families whole: for a
    /// segment whose file is damaged or gone. Returns the postings deleted.
    pub fn purge_segment(&self, id: SegmentId) -> Result<u64> {
        let mut batch = WriteBatch::default();
        let mut deleted = 0u64;
        for name in [CF_POSTINGS, CF_COVERING] {
            let Some(family) = self.db.cf_handle(name) else {
                continue;
            };
            let mut iter = self.db.raw_iterator_cf(family);
            iter.seek_to_first();
            while let Some(key) = iter.key() {
                if posting_segment(key) == Some(id) {
                    batch.delete_cf(family, key);
                    deleted += 1;
                }
                iter.next();
            }
            iter.status().map_err(rocks(&self.path))?;
        }
        batch.delete_cf(self.family(CF_SEGMENTS)?, id.0.to_be_bytes());
        self.db.write(batch).map_err(rocks(&self.path))?;
        Ok(deleted)
    }

    /// Returns the segments whose postings are in the index.
    pub fn indexed_segments(&self) -> Result<BTreeSet<SegmentId>> {
        self.indexed_within(ALL_SEGMENTS)
    }

    /// Returns the segments `ids` (inclusive) whose postings are in the index:
    /// the markers of those segments only (keys are big-endian ids).
    fn indexed_within(&self, ids: (SegmentId, SegmentId)) -> Result<BTreeSet<SegmentId>> {
        let segments = self.family(CF_SEGMENTS)?;
        let mut ids_found = BTreeSet::new();
        if ids.0 > ids.1 {
            return Ok(ids_found);
        }
        let mut read = ReadOptions::default();
        if let Some(after) = ids.1.0.checked_add(1) {
            read.set_iterate_upper_bound(after.to_be_bytes());
        }
        let start = ids.0.0.to_be_bytes();
        let mode = IteratorMode::From(&start, rocksdb::Direction::Forward);
        for item in self.db.iterator_cf_opt(segments, read, mode) {
            let (key, _) = item.map_err(rocks(&self.path))?;
            let bytes: [u8; 8] = key.as_ref().try_into().map_err(|_| IndexError::Corrupt {
                path: self.path.clone(),
                family: CF_SEGMENTS,
                reason: format!("key of {} bytes, expected 8", key.len()),
            })?;
            ids_found.insert(SegmentId(u64::from_be_bytes(bytes)));
        }
        Ok(ids_found)
    }

    /// Returns the indexed segments holding at least one address in one of the
    /// inclusive `ranges` (as source or destination), each with the granules where
    /// such addresses occur.
    pub fn segments_with(
        &self,
        ranges: &[(Addr16, Addr16)],
    ) -> Result<BTreeMap<SegmentId, GranuleSet>> {
        Ok(self.postings_in(ranges, ALL_SEGMENTS)?.0)
    }

    /// Returns the granules of each segment holding an address in `ranges`, and
    /// how many postings (addresses) each segment has there.
    fn postings_in(
        &self,
        ranges: &[(Addr16, Addr16)],
        ids: (SegmentId, SegmentId),
    ) -> Result<(Granules, PostingCounts)> {
        let mut granules: BTreeMap<SegmentId, GranuleSet> = BTreeMap::new();
        let mut postings: BTreeMap<SegmentId, usize> = BTreeMap::new();
        self.scan(CF_POSTINGS, ranges, ids, |id, value| {
            let decoded = GranuleSet::decode(value).ok_or("undecodable granule list")?;
            granules.entry(id).or_default().union_with(&decoded);
            *postings.entry(id).or_default() += 1;
            Ok(())
        })?;
        Ok((granules, postings))
    }

    /// Calls `visit` with the segment id and value of every entry of `family` whose
    /// address lies in one of `ranges` and whose segment in `ids` (inclusive),
    /// in key order. Keys are address then segment, so for one address the
    /// scan reads only the entries of `ids`; a range of addresses reads every
    /// entry of its addresses and leaves out the others.
    fn scan(
        &self,
        name: &'static str,
        ranges: &[(Addr16, Addr16)],
        ids: (SegmentId, SegmentId),
        mut visit: impl FnMut(SegmentId, &[u8]) -> std::result::Result<(), &'static str>,
    ) -> Result<()> {
        let Some(family) = self.db.cf_handle(name) else {
            // Only the covering family may be missing (an older index), and
            // then nothing is covered.
            return if name == CF_COVERING {
                Ok(())
            } else {
                self.family(name).map(|_| ())
            };
        };
        let corrupt = |reason: String| IndexError::Corrupt {
            path: self.path.clone(),
            family: name,
            reason,
        };
        for &(low, high) in ranges {
            let start = posting_key(low, ids.0);
            let end = posting_key(high, ids.1);
            // A raw iterator bounded above: no key or value copied per entry, and
            // RocksDB stops at the range's end instead of reading the next block.
            let mut options = ReadOptions::default();
            if let Some(bound) = key_after(&end) {
                options.set_iterate_upper_bound(bound);
            }
            let mut iter = self.db.raw_iterator_cf_opt(family, options);
            iter.seek(start);
            while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
                if key > end.as_slice() {
                    break;
                }
                let Some(id) = key
                    .get(16..POSTING_KEY_LEN)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                else {
                    return Err(corrupt(format!(
                        "key of {} bytes, expected {POSTING_KEY_LEN}",
                        key.len()
                    )));
                };
                let id = SegmentId(u64::from_be_bytes(id));
                if ids.0 <= id && id <= ids.1 {
                    visit(id, value).map_err(|reason| corrupt(reason.to_owned()))?;
                }
                iter.next();
            }
            iter.status().map_err(rocks(&self.path))?;
        }
        Ok(())
    }

    /// Returns what the index knows of where addresses in `ranges` can occur: a
    /// segment may hold them unless it is indexed and its postings lack them; and
    /// for the segments where every posting in the ranges is covering, the rows.
    pub fn lookup(&self, ranges: &[(Addr16, Addr16)]) -> Result<AddressLookup> {
        self.lookup_within(ranges, ALL_SEGMENTS)
    }

    /// [`Self::lookup`] for the segments `ids` (inclusive) only: what a query
    /// whose window spans those segments reads, so that a one-hour question
    /// reads an hour's postings however long the archive.
    pub fn lookup_within(
        &self,
        ranges: &[(Addr16, Addr16)],
        ids: (SegmentId, SegmentId),
    ) -> Result<AddressLookup> {
        let (holding, postings_per_segment) = self.postings_in(ranges, ids)?;
        let mut covered = CoveredPostings::new();
        self.scan(CF_COVERING, ranges, ids, |id, value| {
            covered.entry(id).or_default().push(value.to_vec());
            Ok(())
        })?;
        covered.retain(|id, rows| postings_per_segment.get(id) == Some(&rows.len()));
        // The markers of the segments in `ids` only: a one-hour question
        // reads an hour's (the whole family was 9% of a rare-address query
        // at 500 M packets). A read-only handle that once read them all
        // keeps them; one asked about every segment reads them all once.
        let indexed = match &self.indexed {
            Some(once) if let Some(set) = once.get() => Arc::clone(set),
            Some(once) if ids == ALL_SEGMENTS => {
                let set = Arc::new(self.indexed_segments()?);
                Arc::clone(once.get_or_init(|| set))
            }
            _ => Arc::new(self.indexed_within(ids)?),
        };
        Ok(AddressLookup {
            indexed,
            holding,
            covered,
        })
    }

    /// Makes every write so far durable (flushes the WAL to disk).
    pub fn sync(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(rocks(&self.path))
    }

    /// Flushes the memtables to table files (at a clean shutdown): the WAL alone
    /// makes writes durable, but every read-only open (each query) would replay it.
    pub fn flush(&self) -> Result<()> {
        for name in [CF_POSTINGS, CF_SEGMENTS, CF_COVERING] {
            let family = self.family(name)?;
            self.db.flush_cf(family).map_err(rocks(&self.path))?;
        }
        Ok(())
    }
}

/// Granules by segment.
type Granules = BTreeMap<SegmentId, GranuleSet>;
/// Number of postings (addresses) by segment.
type PostingCounts = BTreeMap<SegmentId, usize>;

/// Covering postings by segment: one encoded posting per address
/// (`hindsight_model::decode_covered_rows`).
pub type CoveredPostings = BTreeMap<SegmentId, Vec<Vec<u8>>>;

/// The answer of [`AddressIndex::lookup`] for one set of address ranges.
#[derive(Debug)]
pub struct AddressLookup {
    indexed: Arc<BTreeSet<SegmentId>>,
    holding: BTreeMap<SegmentId, GranuleSet>,
    covered: CoveredPostings,
}

impl AddressLookup {
    /// Returns false only for a segment the index covers whose postings hold none
    /// of the addresses; unindexed segments (not yet re-indexed after a crash) may
    /// hold anything.
    pub fn may_hold(&self, id: SegmentId) -> bool {
        !self.indexed.contains(&id) || self.holding.contains_key(&id)
    }

    /// How many granules hold the addresses, over every segment.
    pub fn granule_count(&self) -> usize {
        self.holding.values().map(|set| set.granules().len()).sum()
    }

    /// How many segments answer from covering postings.
    pub fn covered_count(&self) -> usize {
        self.covered.len()
    }

    /// Keeps only what `other` (a lookup of other addresses in the same index)
    /// also holds: the segments and granules where both sets of addresses
    /// occur, as every packet between them has both. Covering postings stay
    /// this lookup's.
    pub fn intersect(&mut self, other: &AddressLookup) {
        self.holding.retain(|id, granules| {
            if !other.indexed.contains(id) {
                return true;
            }
            let Some(theirs) = other.holding.get(id) else {
                return false;
            };
            granules.intersect_with(theirs);
            !granules.is_empty()
        });
        let holding = &self.holding;
        self.covered.retain(|id, _| holding.contains_key(id));
    }

    /// Returns the granules of each indexed segment where the addresses occur, and
    /// the covering postings of the segments where all those addresses are covered
    /// (one encoded posting per address; `hindsight_model::decode_covered_rows`).
    pub fn into_parts(self) -> (BTreeMap<SegmentId, GranuleSet>, CoveredPostings) {
        (self.holding, self.covered)
    }
}

/// Uncompressed bytes of a data block in the table files the indexes write.
/// Every read opens a table file by reading its whole block index into
/// memory, and the index holds one key per data block: with RocksDB's 4 KiB
/// (under 1 KiB once compressed) that was 2.4 MB for each 68 MB table of
/// connections and 35 bytes of every 1.8 KB of postings, read again by
/// every query, so a query's open grew with the archive (docs/ARCHITECTURE.md).
/// At 32 KiB a lookup decompresses a larger block in each file it seeks in
/// (tens of microseconds) and opening one reads an eighth as much.
pub(crate) const TABLE_BLOCK_BYTES: usize = 32 * 1024;

/// Options of a family of the address index as its writer opens it (what
/// its table files are written with).
fn written_table_options() -> Options {
    let mut block = memory::block_options();
    block.set_block_size(TABLE_BLOCK_BYTES);
    let mut options = Options::default();
    options.set_block_based_table_factory(&block);
    options
}

/// Every segment id, for a lookup or a scan that is not limited to a window.
const ALL_SEGMENTS: (SegmentId, SegmentId) = (SegmentId(0), SegmentId(u64::MAX));

/// Table files a read-only index keeps open at once: RocksDB's least (it
/// raises anything lower to 20, of which 10 are its own files). It opens a
/// quarter of the rest (2) at the database's open, where 64 opened 13 table
/// files a lookup mostly did not need, 5.8% of a connection lookup's samples
/// at 500 M packets.
const READ_ONLY_OPEN_FILES: i32 = 20;

/// Options of a read-only open, which every query pays for: table files are
/// opened on the calling thread (RocksDB's default starts 16 threads per column
/// family to open them, which costs more than opening a few files).
pub(crate) fn read_only_options() -> Options {
    let mut options = Options::default();
    options.set_max_file_opening_threads(1);
    options.set_skip_stats_update_on_db_open(true);
    // Table files are opened when a read first needs them, not all at open
    // (what `-1`, the default, does): opening then costs the same for a
    // month of table files as for an hour's, and a lookup opens the few its
    // key range touches. At most this many stay open.
    options.set_max_open_files(READ_ONLY_OPEN_FILES);
    // Blocks are read through the process's one cache (`serve` opens readers
    // again and again; each would otherwise make a cache per family).
    options.set_block_based_table_factory(&memory::block_options());
    options
}

/// The least key greater than every key starting with `key` (`None` if `key` is
/// all 0xff bytes): an exclusive upper bound for an iterator.
fn key_after(key: &[u8]) -> Option<Vec<u8>> {
    let mut next = key.to_vec();
    while let Some(last) = next.pop() {
        if last < u8::MAX {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

fn posting_key(address: Addr16, id: SegmentId) -> [u8; POSTING_KEY_LEN] {
    let mut key = [0u8; POSTING_KEY_LEN];
    let (addr, segment) = key.split_at_mut(16);
    addr.copy_from_slice(&address.0);
    segment.copy_from_slice(&id.0.to_be_bytes());
    key
}

fn rocks(path: &Path) -> impl FnOnce(rocksdb::Error) -> IndexError + '_ {
    // The path is copied only on an error: this is made for every put of a
    // commit (a copy and a free each were 8% of the commit's instructions).
    move |source| IndexError::Rocks {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> Addr16 {
        Addr16::from_v4_bytes([a, b, c, d])
    }

    /// The index must answer exactly as a naive map from segment to address set.
    #[test]
    fn range_lookups_agree_with_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let index = AddressIndex::open(dir.path()).unwrap();
        let mut model: BTreeMap<SegmentId, Vec<(Addr16, GranuleSet)>> = BTreeMap::new();
        // A deterministic pseudo-random spread of addresses over 40 segments.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for segment in 1..=40u64 {
            let mut addresses: BTreeMap<Addr16, GranuleSet> = BTreeMap::new();
            for _ in 0..25 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let [a, b, c, d, e, ..] = state.to_le_bytes();
                addresses
                    .entry(v4(10 + a % 3, b % 4, c, d))
                    .or_default()
                    .push_row(u64::from(e) * 1000);
            }
            let addresses: Vec<(Addr16, GranuleSet)> = addresses.into_iter().collect();
            index
                .add_segment(SegmentId(segment), &addresses, &[])
                .unwrap();
            model.insert(SegmentId(segment), addresses);
        }
        let removed: Vec<Addr16> = model
            .remove(&SegmentId(7))
            .unwrap()
            .into_iter()
            .map(|(address, _)| address)
            .collect();
        index.remove_segment(SegmentId(7), &removed).unwrap();

        let queries = [
            vec![(v4(10, 1, 2, 3), v4(10, 1, 2, 3))],
            vec![(v4(10, 0, 0, 0), v4(10, 255, 255, 255))],
            vec![
                (v4(11, 2, 0, 0), v4(11, 2, 255, 255)),
                (v4(12, 0, 7, 0), v4(12, 0, 7, 255)),
            ],
            vec![(v4(99, 0, 0, 0), v4(99, 0, 0, 0))],
        ];
        for ranges in queries {
            let mut expected: BTreeMap<SegmentId, GranuleSet> = BTreeMap::new();
            for (id, postings) in &model {
                for (address, granules) in postings {
                    if ranges.iter().any(|(lo, hi)| lo <= address && address <= hi) {
                        expected.entry(*id).or_default().union_with(granules);
                    }
                }
            }
            assert_eq!(
                index.segments_with(&ranges).unwrap(),
                expected,
                "{ranges:?}"
            );
            // A window's segments: only their postings.
            let (within, _) = index
                .lookup_within(&ranges, (SegmentId(10), SegmentId(25)))
                .unwrap()
                .into_parts();
            expected.retain(|id, _| (10..=25).contains(&id.0));
            assert_eq!(within, expected, "{ranges:?} within segments 10 to 25");
        }
        let indexed = index.indexed_segments().unwrap();
        assert_eq!(indexed.len(), 39);
        assert!(!indexed.contains(&SegmentId(7)));

        // An address no segment holds, in a window with the unindexed
        // segment 7: only that one may hold it, for a writer's handle and a
        // reader's, before and after the reader has read every marker.
        let nowhere = [(v4(99, 0, 0, 0), v4(99, 0, 0, 0))];
        let check = |index: &AddressIndex| {
            let lookup = index
                .lookup_within(&nowhere, (SegmentId(5), SegmentId(12)))
                .unwrap();
            for id in 5..=12 {
                assert_eq!(lookup.may_hold(SegmentId(id)), id == 7, "segment {id}");
            }
            let empty = index
                .lookup_within(&nowhere, (SegmentId(1), SegmentId(0)))
                .unwrap();
            assert_eq!(empty.granule_count(), 0);
        };
        check(&index);
        drop(index);
        let reader = AddressIndex::open_read_only(dir.path()).unwrap().unwrap();
        check(&reader);
        assert!(!reader.lookup(&nowhere).unwrap().may_hold(SegmentId(30)));
        check(&reader);
    }

    /// A segment is answered from covering postings only when every posting of the
    /// query's ranges in it is covering; removal takes them away with the postings.
    #[test]
    fn covering_postings_answer_only_fully_covered_segments() {
        let dir = tempfile::tempdir().unwrap();
        let index = AddressIndex::open(dir.path()).unwrap();
        let (rare, busy, other) = (v4(10, 0, 0, 1), v4(10, 0, 0, 2), v4(10, 0, 0, 3));
        let granules: GranuleSet = [0].into_iter().collect();
        index
            .add_segment(
                SegmentId(1),
                &[
                    (rare, granules.clone()),
                    (busy, granules.clone()),
                    (other, granules.clone()),
                ],
                &[
                    (rare, b"rows of rare".to_vec()),
                    (other, b"rows of other".to_vec()),
                ],
            )
            .unwrap();
        index
            .add_segment(SegmentId(2), &[(busy, granules.clone())], &[])
            .unwrap();
        let covered = |ranges: &[(Addr16, Addr16)]| index.lookup(ranges).unwrap().into_parts().1;
        assert_eq!(
            covered(&[(rare, rare)]),
            BTreeMap::from([(SegmentId(1), vec![b"rows of rare".to_vec()])])
        );
        assert_eq!(
            covered(&[(rare, rare), (other, other)]),
            BTreeMap::from([(
                SegmentId(1),
                vec![b"rows of rare".to_vec(), b"rows of other".to_vec()]
            )])
        );
        assert!(covered(&[(rare, other)]).is_empty(), "busy is in the range");
        assert!(covered(&[(busy, busy)]).is_empty());
        index
            .remove_segment(SegmentId(1), &[rare, busy, other])
            .unwrap();
        assert!(covered(&[(rare, rare)]).is_empty());
        index.flush().unwrap();
        drop(index);
        let reader = AddressIndex::open_read_only(dir.path()).unwrap().unwrap();
        let (holding, covering) = reader.lookup(&[(busy, busy)]).unwrap().into_parts();
        assert_eq!(holding, BTreeMap::from([(SegmentId(2), granules)]));
        assert!(covering.is_empty());
    }

    #[test]
    fn read_only_open_sees_committed_postings() {
        let dir = tempfile::tempdir().unwrap();
        assert!(AddressIndex::open_read_only(dir.path()).unwrap().is_none());
        let writer = AddressIndex::open(dir.path()).unwrap();
        let granules: GranuleSet = [0, 2].into_iter().collect();
        writer
            .add_segment(SegmentId(3), &[(v4(1, 2, 3, 4), granules.clone())], &[])
            .unwrap();
        writer.sync().unwrap();
        let reader = AddressIndex::open_read_only(dir.path()).unwrap().unwrap();
        let found = reader
            .segments_with(&[(v4(1, 2, 3, 4), v4(1, 2, 3, 4))])
            .unwrap();
        assert_eq!(found, BTreeMap::from([(SegmentId(3), granules)]));
    }

    #[test]
    fn read_only_open_reads_an_index_without_covering_postings() {
        // An index written before covering postings existed has no such family.
        let dir = tempfile::tempdir().unwrap();
        let mut writer = AddressIndex::open(dir.path()).unwrap();
        let granules: GranuleSet = [1].into_iter().collect();
        writer
            .add_segment(SegmentId(7), &[(v4(10, 0, 0, 1), granules.clone())], &[])
            .unwrap();
        writer.db.drop_cf(CF_COVERING).unwrap();
        writer.sync().unwrap();
        drop(writer);
        let reader = AddressIndex::open_read_only(dir.path()).unwrap().unwrap();
        let range = [(v4(10, 0, 0, 1), v4(10, 0, 0, 1))];
        assert_eq!(
            reader.segments_with(&range).unwrap(),
            BTreeMap::from([(SegmentId(7), granules)])
        );
        assert!(reader.lookup(&range).unwrap().may_hold(SegmentId(7)));
    }
}
