//! Connections by a filter that names no address and no name the index keeps
//! (`udp port 53`, `http.response.code >= 500`, a JA3S, a state): a scan of
//! the `flows` segments whose time spans meet the window (the catalog's
//! spans, then each row group's `ts` statistics), then of the unsealed
//! tail's records, in segment and row order, one page at a time.
//!
//! A connection's place in that order is `SCAN | segment id (8) | row group
//! (4) | row (4)`, big-endian: the cursor a page ends with. The tail's
//! segments have later ids than every sealed one (one sequence), so a cursor
//! pages from the segments into the tail.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hindsight_index::{ConnEntry, Stored};
use hindsight_model::{FlowRecord, SegmentId};
use hindsight_store::flows::flow_records;
use hindsight_store::{Archive, FooterCache, SegmentReader, StoreError, Table};

use crate::connections::{ConnQuery, Connections};
use crate::{LimitExceeded, ReaderError};

/// The first byte of a scan's place.
const SCAN: u8 = 0xFD;

/// Length of a scan's place.
const PLACE_LEN: usize = 17;

/// Where a scan is: segment, row group and row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    segment: u64,
    group: u32,
    row: u32,
}

impl Place {
    fn encode(self) -> Vec<u8> {
        let mut place = Vec::with_capacity(PLACE_LEN);
        place.push(SCAN);
        place.extend_from_slice(&self.segment.to_be_bytes());
        place.extend_from_slice(&self.group.to_be_bytes());
        place.extend_from_slice(&self.row.to_be_bytes());
        place
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != PLACE_LEN || bytes[0] != SCAN {
            return None;
        }
        Some(Self {
            segment: u64::from_be_bytes(bytes[1..9].try_into().ok()?),
            group: u32::from_be_bytes(bytes[9..13].try_into().ok()?),
            row: u32::from_be_bytes(bytes[13..17].try_into().ok()?),
        })
    }
}

/// What a scan reads from: the snapshot's archive and footers, and the
/// tail's records of segments its catalog does not hold.
pub(crate) struct Source<'a> {
    pub archive: &'a Archive,
    pub footers: &'a FooterCache,
    pub tail: &'a [(SegmentId, Arc<[FlowRecord]>)],
    pub community_seed: u16,
}

/// One page of the connections of `query` that `keep` keeps, scanning.
pub(crate) fn scan(
    source: &Source<'_>,
    query: &ConnQuery,
    keep: &dyn Fn(&ConnEntry) -> bool,
) -> Result<Connections, ReaderError> {
    let after = match query.after.as_deref() {
        None => None,
        Some(bytes) => Some(Place::decode(bytes).ok_or_else(|| {
            ReaderError::Request(
                "the cursor is not one that a page of this filter's connections ended with"
                    .to_owned(),
            )
        })?),
    };
    let mut page = Page {
        query,
        keep,
        after,
        started: Instant::now(),
        connections: Connections {
            community_seed: source.community_seed,
            ..Connections::default()
        },
    };
    let time = query.time;
    let catalog = source.archive.catalog();
    let mut segments: Vec<_> = catalog
        .entries_of(Table::Flows)
        .filter(|entry| time.overlaps(entry.min_ts_nanos, entry.max_ts_nanos))
        .filter(|entry| after.is_none_or(|after| entry.id >= after.segment))
        .collect();
    segments.sort_by_key(|entry| entry.id);
    for entry in segments {
        let path = source.archive.segment_path(entry);
        match page.read_segment(entry.id, &path, source.footers) {
            Ok(true) => return Ok(page.connections),
            Ok(false) => {}
            Err(Stop::Limit(exceeded)) => return Err(ReaderError::Limit(exceeded)),
            Err(Stop::Damaged(error)) => page.connections.skipped.push(format!(
                "flows segment {} left out: {error}",
                path.display()
            )),
        }
    }
    let mut tail: Vec<_> = source
        .tail
        .iter()
        .filter(|(id, _)| catalog.get(*id).is_none())
        .filter(|(id, _)| after.is_none_or(|after| id.0 >= after.segment))
        .collect();
    tail.sort_by_key(|(id, _)| *id);
    for (id, records) in tail {
        for (row, record) in records.iter().enumerate() {
            let place = Place {
                segment: id.0,
                group: 0,
                row: u32::try_from(row).unwrap_or(u32::MAX),
            };
            if page.offer(place, record) {
                return Ok(page.connections);
            }
        }
    }
    Ok(page.connections)
}

/// The page a scan fills.
struct Page<'a> {
    query: &'a ConnQuery,
    keep: &'a dyn Fn(&ConnEntry) -> bool,
    after: Option<Place>,
    started: Instant,
    connections: Connections,
}

impl Page<'_> {
    /// Takes `record` at `place` if it passes; true once the page is full
    /// and another connection passes (the page's cursor is then set).
    fn offer(&mut self, place: Place, record: &FlowRecord) -> bool {
        let time = self.query.time;
        if record.first_ns < time.start_nanos
            || record.first_ns > time.end_nanos
            || self.after.is_some_and(|after| place <= after)
        {
            return false;
        }
        let Some(entry) = ConnEntry::of_record(record)
            .into_iter()
            .find(|entry| !entry.reverse)
        else {
            return false;
        };
        if !(self.keep)(&entry) {
            return false;
        }
        let connections = &mut self.connections;
        if connections.entries.len() >= self.query.limit {
            connections.next = connections.places.last().cloned();
            return true;
        }
        connections.entries.push(entry);
        connections.places.push(place.encode());
        false
    }

    /// Offers the rows of the segment `id` at `path` that may lie in the
    /// window; true once the page is full.
    fn read_segment(&mut self, id: u64, path: &Path, footers: &FooterCache) -> Result<bool, Stop> {
        let reader = SegmentReader::open_cached(path, footers)?;
        for group in reader.matching_row_groups(self.query.time, None)? {
            if let Some(timeout) = self.query.timeout
                && self.started.elapsed() > timeout
            {
                return Err(Stop::Limit(LimitExceeded::Time(timeout)));
            }
            let mut row = 0u32;
            for batch in reader.read(vec![group], None)? {
                let corrupt = |reason: String| StoreError::Corrupt {
                    path: path.to_owned(),
                    offset: 0,
                    reason,
                };
                let batch = batch.map_err(|e| corrupt(e.to_string()))?;
                let records = flow_records(&batch)
                    .ok_or_else(|| corrupt("not a flows segment".to_owned()))?;
                for record in &records {
                    let place = Place {
                        segment: id,
                        group: u32::try_from(group).unwrap_or(u32::MAX),
                        row,
                    };
                    row = row.saturating_add(1);
                    if self.offer(place, record) {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// Why a segment's scan stopped.
enum Stop {
    /// The segment could not be read: left out, and said.
    Damaged(StoreError),
    /// The request's bound: the whole scan stops.
    Limit(LimitExceeded),
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Self {
        Self::Damaged(error)
    }
}
