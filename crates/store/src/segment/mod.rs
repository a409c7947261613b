//! Segment files: immutable, time-partitioned Parquet files of one table (`packets`, `flows`).
//!
//! A segment is born as a hidden temporary file (`.seg-<id>.parquet.tmp`), written
//! row group by row group, fsynced, renamed to `seg-<id>.parquet` and its directory
//! fsynced ([`writer`]). Readers prune row groups by timestamp statistics and address
//! Bloom filters before decoding anything ([`reader`]). `docs/formats/segment.md`
//! is the format reference.

mod chunk;
pub mod postings;
pub mod reader;
pub mod writer;

use hindsight_model::SegmentId;

/// Key of the Parquet key-value metadata entry holding the segment format version.
pub const FORMAT_VERSION_KEY: &str = "hindsight.format_version";
/// The segment format version this build writes (bumped on any incompatible change).
pub const FORMAT_VERSION: &str = "1";
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

#[cfg(test)]
mod tests {
    use super::*;

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
