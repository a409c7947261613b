//! A sealed segment's coarse summary, what a node sends its index nodes: the
//! table, the time range, the counts and the signature of its addresses. It
//! is derived from the segment file alone (its two address columns), so any
//! archive can be summarised, whoever sealed it.
//!
//! Each summary names the segment it describes by a digest of its catalog
//! entry (id, table, times, rows, size and the file's CRC-32), and a node's
//! sync carries the digest of its whole catalog: the XOR of its entries'. An
//! index node whose summaries of a node do not add up to that digest (the
//! archive was replaced by one whose ids collide, an old upload was replayed)
//! knows them stale, drops them and asks the node again.

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
    /// The CRC-32 of its file, as its catalog entry holds it.
    pub crc32: u32,
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
            crc32: entry.crc32,
            distinct_addresses: addresses.len() as u64,
            addresses: AddressSignature::of(addresses),
        })
    }

    /// The digest of the catalog entry this summary describes.
    pub fn digest(&self) -> Digest {
        Digest::of_fields(
            self.id,
            &self.table,
            self.min_ts,
            self.max_ts,
            self.rows,
            self.bytes,
            self.crc32,
        )
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

/// A SHA-256 digest of catalog entries: of one, or the XOR of several (the
/// same whatever their order, and kept as entries come and go).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    fn of_fields(
        id: u64,
        table: &str,
        min_ts: i64,
        max_ts: i64,
        rows: u64,
        bytes: u64,
        crc32: u32,
    ) -> Self {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        hash.update(id.to_le_bytes());
        hash.update((table.len() as u64).to_le_bytes());
        hash.update(table.as_bytes());
        hash.update(min_ts.to_le_bytes());
        hash.update(max_ts.to_le_bytes());
        hash.update(rows.to_le_bytes());
        hash.update(bytes.to_le_bytes());
        hash.update(crc32.to_le_bytes());
        Self(hash.finalize().into())
    }

    /// The digest of one catalog entry.
    pub fn of_entry(entry: &CatalogEntry) -> Self {
        Self::of_fields(
            entry.id,
            &entry.table,
            entry.min_ts_nanos,
            entry.max_ts_nanos,
            entry.rows,
            entry.size_bytes,
            entry.crc32,
        )
    }

    /// The digest of a whole catalog.
    pub fn of_catalog<'a>(entries: impl IntoIterator<Item = &'a CatalogEntry>) -> Self {
        let mut all = Self::default();
        for entry in entries {
            all.toggle(Self::of_entry(entry));
        }
        all
    }

    /// The digest of the catalog entries `summaries` describe.
    pub fn of_summaries<'a>(summaries: impl IntoIterator<Item = &'a SegmentSummary>) -> Self {
        let mut all = Self::default();
        for summary in summaries {
            all.toggle(summary.digest());
        }
        all
    }

    /// Adds `other` to the set this digests, or removes it if it is in.
    pub fn toggle(&mut self, other: Self) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a ^= b;
        }
    }

    /// In lower-case hex.
    pub fn to_hex(self) -> String {
        crate::config::hex(&self.0)
    }

    /// From 64 hex digits.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 || !text.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(out))
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

    #[test]
    fn a_catalog_digest_is_its_entries_whatever_their_order() {
        let entry = |id: u64, crc32: u32| CatalogEntry {
            id,
            table: "packets".into(),
            file: format!("packets/{id}.seg"),
            rows: 10,
            min_ts_nanos: 1,
            max_ts_nanos: 2,
            size_bytes: 100,
            crc32,
            sealed_at_nanos: 3,
            class: None,
        };
        let (a, b, c) = (entry(1, 7), entry(2, 8), entry(3, 9));
        let all = Digest::of_catalog([&a, &b, &c]);
        assert_eq!(all, Digest::of_catalog([&c, &a, &b]));
        let mut held = Digest::of_catalog([&a, &b]);
        assert_ne!(held, all);
        held.toggle(Digest::of_entry(&c));
        assert_eq!(held, all);
        // The same id with other content is another entry.
        assert_ne!(Digest::of_catalog([&a, &b, &entry(3, 10)]), all);
        assert_eq!(Digest::from_hex(&all.to_hex()), Some(all));
        assert_eq!(Digest::from_hex("zz"), None);
        assert_eq!(Digest::from_hex(&"é".repeat(32)), None);
    }
}
