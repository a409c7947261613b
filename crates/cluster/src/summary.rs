//! A sealed segment's coarse summary, what a node sends its index nodes: the
//! table, the time range, the counts and the signature of its addresses. It
//! is derived from the segment file alone (its two address columns), so any
//! archive can be summarised, whoever sealed it.

use std::path::Path;

use hindsight_model::Addr16;
use hindsight_store::{CatalogEntry, SegmentReader};
use serde::{Deserialize, Serialize};

use crate::signature::AddressSignature;

/// The summary of one sealed segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentSummary {
    /// The segment's id in its node's catalog.
    pub id: u64,
    /// `packets` or `flows`.
    pub table: String,
    /// Its first and last timestamps, ns since the epoch.
    pub min_ts: i64,
    /// See `min_ts`.
    pub max_ts: i64,
    /// Its rows.
    pub rows: u64,
    /// Its size on disk, bytes.
    pub bytes: u64,
    /// Its distinct addresses.
    pub distinct_addresses: u64,
    /// The signature of its addresses.
    pub addresses: AddressSignature,
}

impl SegmentSummary {
    /// Summarises the segment of `entry` in the archive at `root`.
    pub fn build(root: &Path, entry: &CatalogEntry) -> hindsight_store::Result<Self> {
        let reader = SegmentReader::open(&root.join(&entry.file))?;
        let addresses: Vec<Addr16> = reader
            .address_postings()?
            .into_iter()
            .map(|(addr, _)| addr)
            .collect();
        Ok(Self {
            id: entry.id,
            table: entry.table.to_string(),
            min_ts: entry.min_ts_nanos,
            max_ts: entry.max_ts_nanos,
            rows: entry.rows,
            bytes: entry.size_bytes,
            distinct_addresses: addresses.len() as u64,
            addresses: AddressSignature::of(addresses),
        })
    }

    /// Whether the segment may hold rows in `[start, end]` with an address in
    /// one of `ranges` (`None`: any address).
    pub fn may_hold(&self, start: i64, end: i64, ranges: Option<&[(Addr16, Addr16)]>) -> bool {
        if self.max_ts < start || self.min_ts > end {
            return false;
        }
        match ranges {
            None => true,
            Some(ranges) => ranges
                .iter()
                .any(|&(low, high)| self.addresses.may_hold(low, high)),
        }
    }
}

/// Segment ids as inclusive ranges, in order: how a node names what its
/// catalog holds in few bytes (ids are allocated in order, and retention
/// removes the oldest).
pub fn id_ranges(ids: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut ids: Vec<u64> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for id in ids {
        match ranges.last_mut() {
            Some((_, high)) if *high + 1 == id => *high = id,
            _ => ranges.push((id, id)),
        }
    }
    ranges
}

/// Whether `id` is in one of `ranges` (sorted, as [`id_ranges`] makes them).
pub fn in_ranges(ranges: &[(u64, u64)], id: u64) -> bool {
    let at = ranges.partition_point(|&(_, high)| high < id);
    ranges.get(at).is_some_and(|&(low, _)| low <= id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_as_ranges() {
        let ranges = id_ranges([7, 1, 2, 3, 9, 10, 3]);
        assert_eq!(ranges, vec![(1, 3), (7, 7), (9, 10)]);
        for (id, held) in [
            (0, false),
            (1, true),
            (3, true),
            (4, false),
            (7, true),
            (8, false),
            (10, true),
            (11, false),
        ] {
            assert_eq!(in_ranges(&ranges, id), held, "{id}");
        }
        assert!(id_ranges([]).is_empty());
    }
}
