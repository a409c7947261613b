//! The address postings of one segment, collected while it is written: for every
//! distinct source or destination address, the granules (row ranges) where it
//! occurs, and, for an address seen at most `covering_rows` times, its whole rows
//! (a covering posting, `hindsight_model::CoveredRowsBuilder`), so the query for a
//! rare address never opens the segment.
//!
//! Covering rows are bounded: an address stops being covered at its
//! `covering_rows + 1`-th row, and the covering rows held at any time never exceed
//! `max(COVERING_FLOOR_BYTES, covering_bytes_per_row × rows written)`; an address
//! seen first when that budget is spent keeps granules only. Granules are always
//! complete, so a query is exact whatever was covered.

use arrow::array::{Array, FixedSizeBinaryArray, RecordBatch};
use foldhash::HashMap;
use hindsight_model::{Addr16, CoveredRowsBuilder, GRANULE_ROWS, GranuleSet};

use super::RecentKeys;
use crate::schema::{PacketBatchView, col};

/// Slots of the collector's cache of recently seen addresses.
const SEEN_SLOTS: usize = 64;

/// Covering rows a segment may hold regardless of its size.
pub const COVERING_FLOOR_BYTES: u64 = 64 * 1024;

/// Limits of covering postings; `rows: 0` turns them off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoveringLimits {
    /// An address with more rows than this in a segment is not covered.
    pub rows: u32,
    /// Budget of encoded covering bytes per row of the segment (with a floor of
    /// [`COVERING_FLOOR_BYTES`]).
    pub bytes_per_row: u32,
}

#[derive(Debug, Default)]
struct Posting {
    granules: GranuleSet,
    /// `None` once the address has too many rows or the budget was spent.
    covered: Option<CoveredRowsBuilder>,
}

/// Collects the postings of one segment, batch by batch.
#[derive(Debug)]
pub(crate) struct PostingsCollector {
    limits: CoveringLimits,
    /// Where each address's posting is in `postings`.
    slots: HashMap<Addr16, u32>,
    postings: Vec<(Addr16, Posting)>,
    covered_bytes: u64,
}

/// The postings of a sealed segment, sorted by address.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentPostings {
    /// Every distinct address with the granules where it occurs.
    pub granules: Vec<(Addr16, GranuleSet)>,
    /// The addresses with a covering posting, and its encoded rows.
    pub covered: Vec<(Addr16, Vec<u8>)>,
}

impl PostingsCollector {
    pub(crate) fn new(limits: CoveringLimits) -> Self {
        Self {
            limits,
            slots: HashMap::default(),
            postings: Vec::new(),
            covered_bytes: 0,
        }
    }

    /// Adds the addresses of `batch` (a `packets` or `flows` batch, or a projection
    /// holding at least one address column), whose first row is row `first_row`
    /// of the segment. Covering rows are taken only from full `packets` batches.
    pub(crate) fn collect(&mut self, batch: &RecordBatch, first_row: u64) {
        let covering = self.limits.rows > 0 && batch.column_by_name(col::DATA).is_some();
        let view = covering.then(|| PacketBatchView::new(batch));
        let budget = COVERING_FLOOR_BYTES
            .max(u64::from(self.limits.bytes_per_row) * (first_row + batch.num_rows() as u64));
        let columns = [col::SRC_ADDR, col::DST_ADDR].map(|name| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
        });
        let granule_rows = u64::from(GRANULE_ROWS);
        // Packets mostly repeat the addresses of recent ones: a repeat within a
        // granule of an address that is not covered needs no hashing. The cache
        // holds the granule last recorded for such addresses.
        let mut seen = RecentKeys::<u64, SEEN_SLOTS>::new();
        // Rows go in order, both columns of a row before the next, so that covering
        // rows of an address seen as source and as destination stay ascending.
        for row in 0..batch.num_rows() {
            for addresses in columns.iter().flatten() {
                if addresses.is_null(row) {
                    continue;
                }
                let Ok(bytes) = <[u8; 16]>::try_from(addresses.value(row)) else {
                    continue;
                };
                let segment_row = first_row + row as u64;
                let granule = segment_row / granule_rows;
                let key = u128::from_ne_bytes(bytes);
                if seen.get(key) == Some(granule) {
                    continue;
                }
                let slot = self.slot(Addr16(bytes));
                if !self.add(
                    slot,
                    segment_row,
                    view.as_ref().map(|view| (view, row)),
                    budget,
                ) {
                    seen.insert(key, granule);
                }
            }
        }
    }

    /// The slot of `address`'s posting, made if it has none.
    fn slot(&mut self, address: Addr16) -> usize {
        let next = self.postings.len() as u32;
        let slot = *self.slots.entry(address).or_insert(next);
        if slot == next {
            self.postings.push((address, Posting::default()));
        }
        slot as usize
    }

    /// Adds row `segment_row` to the posting in `slot`, with its whole row
    /// (`row` of `view`) if the posting covers it; false if the posting no
    /// longer covers rows.
    fn add(
        &mut self,
        slot: usize,
        segment_row: u64,
        view: Option<(&PacketBatchView<'_>, usize)>,
        budget: u64,
    ) -> bool {
        let Some((_, posting)) = self.postings.get_mut(slot) else {
            return false;
        };
        let new = posting.granules.is_empty();
        posting.granules.push_row(segment_row);
        let Some((view, row)) = view else {
            return false;
        };
        if new && self.covered_bytes < budget {
            let rows = CoveredRowsBuilder::new();
            self.covered_bytes += rows.encoded_len() as u64;
            posting.covered = Some(rows);
        }
        let Some(rows) = &mut posting.covered else {
            return false;
        };
        // A packet sent to itself: its row is already there.
        if rows.last_row() == Some(segment_row) {
            return true;
        }
        // A row of a damaged segment whose data form is unknown is not
        // covered: its address is looked up in the segment. (Read only for a
        // posting that covers: a busy address's rows need no form.)
        match view.data_form(row) {
            Some(form) if rows.rows() < self.limits.rows => {
                let before = rows.encoded_len();
                rows.push(segment_row, &view.record(row), form, view.data(row));
                self.covered_bytes += (rows.encoded_len() - before) as u64;
                true
            }
            _ => {
                self.covered_bytes -= rows.encoded_len() as u64;
                posting.covered = None;
                false
            }
        }
    }

    /// [`collect`](Self::collect) with the rows' addresses already numbered:
    /// `ids` holds each row's source and destination address ids (`NO_ADDRESS`
    /// for none), `addresses` the address of each id. Each distinct address is
    /// looked up once, not once a row.
    pub(crate) fn collect_numbered(
        &mut self,
        batch: &RecordBatch,
        first_row: u64,
        ids: &[(u32, u32)],
        addresses: &[Addr16],
    ) {
        let covering = self.limits.rows > 0 && batch.column_by_name(col::DATA).is_some();
        let view = covering.then(|| PacketBatchView::new(batch));
        let budget = COVERING_FLOOR_BYTES
            .max(u64::from(self.limits.bytes_per_row) * (first_row + batch.num_rows() as u64));
        let slots: Vec<usize> = addresses.iter().map(|&a| self.slot(a)).collect();
        // The granule last recorded for each id whose posting covers no rows
        // (a busy address's, mostly): another of its rows in that granule
        // changes nothing, so it is not added (as `collect` skips them).
        let mut recorded = vec![u64::MAX; addresses.len()];
        let granule_rows = u64::from(GRANULE_ROWS);
        for (row, &(src, dst)) in ids.iter().enumerate() {
            let segment_row = first_row + row as u64;
            let granule = segment_row / granule_rows;
            for id in [src, dst] {
                let (Some(&slot), Some(last)) =
                    (slots.get(id as usize), recorded.get_mut(id as usize))
                else {
                    continue;
                };
                if *last == granule {
                    continue;
                }
                if !self.add(
                    slot,
                    segment_row,
                    view.as_ref().map(|view| (view, row)),
                    budget,
                ) {
                    *last = granule;
                }
            }
        }
    }

    /// Returns the postings, sorted by address.
    pub(crate) fn finish(self) -> SegmentPostings {
        let mut granules = Vec::with_capacity(self.postings.len());
        let mut covered = Vec::new();
        for (address, posting) in self.postings {
            if let Some(rows) = posting.covered {
                covered.push((address, rows.finish()));
            }
            granules.push((address, posting.granules));
        }
        granules.sort_unstable_by_key(|(address, _)| *address);
        covered.sort_unstable_by_key(|(address, _)| *address);
        SegmentPostings { granules, covered }
    }
}

#[cfg(test)]
mod tests {
    use hindsight_model::{PacketHeaders, PacketRecord, decode_covered_rows};

    use super::*;
    use crate::schema::PacketBatchBuilder;
    use crate::segment::cluster::NO_ADDRESS;

    fn packet(row: u32, src: Addr16, dst: Addr16) -> PacketRecord {
        PacketRecord {
            ts_nanos: i64::from(row) * 1000,
            wire_len: 100,
            cap_len: 100,
            headers: PacketHeaders {
                src_addr: Some(src),
                dst_addr: Some(dst),
                ..PacketHeaders::default()
            },
            ..PacketRecord::default()
        }
    }

    /// Rare addresses are covered with exactly their rows, busy ones are not, and
    /// a flood of one-packet addresses stops at the byte budget.
    #[test]
    fn covering_follows_the_row_limit_and_the_byte_budget() {
        let server = Addr16::from_v4_bytes([10, 0, 0, 1]);
        let rare = Addr16::from_v4_bytes([10, 0, 0, 2]);
        let mut builder = PacketBatchBuilder::with_capacity(1024, 64 * 1024);
        let mut records = Vec::new();
        for row in 0..20_000u32 {
            // 5 packets between the server and `rare` (both directions), and a
            // scan of the server to 19,995 distinct addresses.
            let (src, dst) = if row % 4000 == 0 {
                if row % 8000 == 0 {
                    (server, rare)
                } else {
                    (rare, server)
                }
            } else {
                let n = row.to_be_bytes();
                (server, Addr16::from_v4_bytes([172, n[1], n[2], n[3]]))
            };
            records.push(packet(row, src, dst));
        }
        let mut collector = PostingsCollector::new(CoveringLimits {
            rows: 8,
            bytes_per_row: 4,
        });
        let mut first_row = 0u64;
        for chunk in records.chunks(1000) {
            for record in chunk {
                builder.append(record, &[0xab; 40]);
            }
            let batch = builder.finish();
            collector.collect(&batch, first_row);
            first_row += batch.num_rows() as u64;
        }
        assert!(
            collector.covered_bytes <= 4 * 20_000 + 200,
            "{}",
            collector.covered_bytes
        );
        let postings = collector.finish();
        assert_eq!(postings.granules.len(), 2 + 19_995);
        let covered: HashMap<Addr16, Vec<u8>> = postings.covered.into_iter().collect();
        assert!(!covered.contains_key(&server), "the server has 20,000 rows");
        let rows = decode_covered_rows(&covered[&rare]).unwrap();
        let numbers: Vec<u64> = rows.iter().map(|r| r.row).collect();
        assert_eq!(numbers, [0, 4000, 8000, 12_000, 16_000]);
        for row in &rows {
            assert_eq!(row.record, records[row.row as usize]);
            assert_eq!(row.data, [0xab; 40]);
        }
        let scanned = covered.len() - 1;
        assert!(
            scanned > 100 && scanned < 19_995,
            "{scanned} scanned addresses covered: the budget must stop the flood"
        );
    }

    /// Numbered addresses give the postings `collect` gives, though rows of an
    /// address that covers nothing are skipped within a granule: covered,
    /// busy and budget-stopped addresses, a packet sent to itself, rows in
    /// several granules and batches.
    #[test]
    fn numbered_addresses_give_the_same_postings() {
        let server = Addr16::from_v4_bytes([10, 0, 0, 1]);
        let rare = Addr16::from_v4_bytes([10, 0, 0, 2]);
        let records: Vec<PacketRecord> = (0..30_000u32)
            .map(|row| match row % 15_000 {
                0 => packet(row, server, rare),
                1 => packet(row, rare, rare),
                2 => packet(row, rare, server),
                n if n % 7 == 0 => packet(row, server, server),
                _ => {
                    let n = (row / 5).to_be_bytes();
                    packet(row, Addr16::from_v4_bytes([172, n[1], n[2], n[3]]), server)
                }
            })
            .collect();
        let limits = CoveringLimits {
            rows: 8,
            bytes_per_row: 3,
        };
        let (mut plain, mut numbered) = (
            PostingsCollector::new(limits),
            PostingsCollector::new(limits),
        );
        let mut builder = PacketBatchBuilder::with_capacity(1024, 64 * 1024);
        let mut first_row = 0u64;
        for chunk in records.chunks(10_000) {
            let mut addresses: Vec<Addr16> = Vec::new();
            let mut numbers: HashMap<Addr16, u32> = HashMap::default();
            let mut id_of = |address: Addr16| {
                *numbers.entry(address).or_insert_with(|| {
                    addresses.push(address);
                    addresses.len() as u32 - 1
                })
            };
            let mut ids = Vec::new();
            for (i, record) in chunk.iter().enumerate() {
                builder.append(record, &[i as u8; 30]);
                let headers = &record.headers;
                ids.push((
                    headers.src_addr.map_or(NO_ADDRESS, &mut id_of),
                    headers.dst_addr.map_or(NO_ADDRESS, &mut id_of),
                ));
            }
            let batch = builder.finish();
            plain.collect(&batch, first_row);
            numbered.collect_numbered(&batch, first_row, &ids, &addresses);
            first_row += batch.num_rows() as u64;
        }
        let (plain, numbered) = (plain.finish(), numbered.finish());
        let covered: HashMap<Addr16, Vec<u8>> = plain.covered.iter().cloned().collect();
        assert_eq!(decode_covered_rows(&covered[&rare]).unwrap().len(), 6);
        assert!(!covered.contains_key(&server));
        assert!(covered.len() > 2 && plain.granules.len() > covered.len() + 100);
        assert_eq!(numbered, plain);
    }

    /// A conversation in consecutive rows, both directions: every row of a covered
    /// address is in its posting, though repeats within a granule are skipped for
    /// addresses that are not covered.
    #[test]
    fn repeated_addresses_keep_every_covered_row() {
        let (a, b) = (
            Addr16::from_v4_bytes([10, 0, 0, 1]),
            Addr16::from_v4_bytes([10, 0, 0, 2]),
        );
        let busy = Addr16::from_v4_bytes([10, 0, 0, 3]);
        let records: Vec<PacketRecord> = (0..40u32)
            .map(|row| match row {
                0..6 if row % 2 == 0 => packet(row, a, b),
                0..6 => packet(row, b, a),
                _ => packet(row, busy, busy),
            })
            .collect();
        let mut builder = PacketBatchBuilder::with_capacity(64, 4096);
        for record in &records {
            builder.append(record, &[0xcd; 20]);
        }
        let mut collector = PostingsCollector::new(CoveringLimits {
            rows: 8,
            bytes_per_row: 64,
        });
        collector.collect(&builder.finish(), 0);
        let postings = collector.finish();
        let covered: HashMap<Addr16, Vec<u8>> = postings.covered.into_iter().collect();
        for address in [a, b] {
            let rows = decode_covered_rows(&covered[&address]).unwrap();
            let numbers: Vec<u64> = rows.iter().map(|r| r.row).collect();
            assert_eq!(numbers, [0, 1, 2, 3, 4, 5], "{address:?}");
        }
        assert!(!covered.contains_key(&busy), "34 rows, over the limit of 8");
        assert_eq!(postings.granules.len(), 3);
    }
}
