//! Segment files: immutable, time-partitioned Parquet files of one table (`packets`, `flows`).
//!
//! A segment is born as a hidden temporary file (`.seg-<id>.parquet.tmp`), written
//! row group by row group, fsynced, renamed to `seg-<id>.parquet` and its directory
//! fsynced ([`writer`]). Readers prune row groups by timestamp statistics and address
//! Bloom filters before decoding anything ([`reader`]). `docs/formats/segment.md`
//! is the format reference.

mod chunk;
mod cluster;
pub mod footers;
mod lz4;
pub mod postings;
pub mod reader;
pub mod summary;
pub mod writer;

use hindsight_model::SegmentId;

/// Key of the Parquet key-value metadata entry holding the segment format version.
pub const FORMAT_VERSION_KEY: &str = "hindsight.format_version";
/// The segment format version this build writes (bumped on any incompatible change):
/// 5 since the rows of a `packets` row group are grouped by host, not in time
/// order (a reader puts them back in it); 4 since `flows.uid` is null where the uid is derived from the row; 3 since `packets.data` may leave out the IP length and IPv4 checksum too
/// (`data_form` codes above 8); 2 since it leaves out header fields
/// (`data_form`); version 1 segments hold the frames' bytes verbatim and read as
/// such.
pub const FORMAT_VERSION: u32 = 5;
/// Key of the Parquet key-value metadata entry naming the table (`packets`, `flows`).
pub const TABLE_KEY: &str = "hindsight.table";

/// Prefix of sealed segment file names.
const SEGMENT_PREFIX: &str = "seg-";
/// Extension of sealed segment files.
const SEGMENT_SUFFIX: &str = ".parquet";
/// Extension of temporary (unsealed) segment files; they are deleted on recovery.
pub const TEMP_SUFFIX: &str = ".tmp";

/// Returns the file name of sealed segment `id`: `seg-000000000042.parquet`.
pub fn segment_file_name(id: SegmentId) -> String {
    format!("{SEGMENT_PREFIX}{id}{SEGMENT_SUFFIX}")
}

/// Returns the hidden file name segment `id` has while being written.
pub fn temp_file_name(id: SegmentId) -> String {
    format!(".{}{TEMP_SUFFIX}", segment_file_name(id))
}

/// Returns the id of a sealed segment file name, or `None` for any other name.
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(SegmentId)
}

/// A direct-mapped cache of recently seen 128-bit keys (addresses, MACs), each
/// with a value: the segment writer's per-row lookups (dictionary indices,
/// postings) mostly repeat a few keys, and find them here without hashing.
/// `N` (the slots) is a power of two.
#[derive(Debug)]
struct RecentKeys<V, const N: usize> {
    slots: [Option<(u128, V)>; N],
}

impl<V: Copy, const N: usize> RecentKeys<V, N> {
    fn new() -> Self {
        const { assert!(N.is_power_of_two()) };
        Self { slots: [None; N] }
    }

    #[inline]
    fn slot(key: u128) -> usize {
        let folded = (key as u64) ^ ((key >> 64) as u64);
        (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - N.ilog2())) as usize
    }

    /// The value cached for `key`, if `key` holds its slot.
    #[inline]
    fn get(&self, key: u128) -> Option<V> {
        match self.slots[Self::slot(key)] {
            Some((k, value)) if k == key => Some(value),
            _ => None,
        }
    }

    /// Caches `value` for `key`, in place of whatever held its slot.
    #[inline]
    fn insert(&mut self, key: u128, value: V) {
        self.slots[Self::slot(key)] = Some((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_keys_hold_the_last_key_of_each_slot() {
        let mut cache = RecentKeys::<u32, 8>::new();
        assert_eq!(cache.get(0), None);
        cache.insert(0, 7);
        assert_eq!(cache.get(0), Some(7));
        cache.insert(0, 9);
        assert_eq!(cache.get(0), Some(9));
        // Nine keys in eight slots: at least one was displaced, the last stays.
        for key in 1..=9u128 {
            cache.insert(key << 64 | key, key as u32);
        }
        assert_eq!(cache.get(9 << 64 | 9), Some(9));
        let held = (1..=9u128)
            .filter(|&k| cache.get(k << 64 | k) == Some(k as u32))
            .count();
        assert!(held < 9, "{held}");
    }

    #[test]
    fn segment_file_names_round_trip() {
        let id = SegmentId(42);
        assert_eq!(segment_file_name(id), "seg-000000000042.parquet");
        assert_eq!(parse_segment_file_name(&segment_file_name(id)), Some(id));
        assert_eq!(temp_file_name(id), ".seg-000000000042.parquet.tmp");
        assert_eq!(parse_segment_file_name(&temp_file_name(id)), None);
        assert_eq!(parse_segment_file_name("seg-.parquet"), None);
        assert_eq!(parse_segment_file_name("seg-12a.parquet"), None);
    }
}
