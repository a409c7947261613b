//! `hindsight check [--repair]`: verifies the archive against what its catalog
//! and indexes say, and sets damage aside so the rest keeps answering.
//!
//! For every catalogued segment: the file is there, its size and CRC-32 are the
//! ones recorded when it was sealed, its footer reads, its format version is one
//! this build knows and it holds the rows the catalog says; a segment whose
//! bytes differ is decoded column by column to name the damaged row group and
//! column (every page header carries a CRC-32 of its page). The catalog's
//! unreadable lines are listed. For `packets` segments, the address index holds
//! as many postings as the segment has distinct addresses; postings of
//! segments the catalog no longer lists are stale. The connection index is
//! counted against the records of the `flows` segments.
//!
//! With `repair`, under the writer lock: unreadable catalog lines are dropped
//! (recovery then re-catalogues the files they named), damaged or missing
//! segments leave the catalog and their files move to `quarantine/` (never
//! deleted), their postings are purged, stale postings are purged and wrong
//! postings are rebuilt from the segment.

use std::path::{Path, PathBuf};

use hindsight_index::{AddressIndex, ConnectionIndex};
use hindsight_model::SegmentId;
use hindsight_store::archive::checksum_file;
use hindsight_store::segment::summary::SummaryKind;
use hindsight_store::{Archive, CatalogDamage, CatalogEntry, SegmentReader, Table};

use crate::IngestError;

/// What is wrong with one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentProblem {
    /// The segment.
    pub id: SegmentId,
    /// Its table.
    pub table: String,
    /// Its file, relative to the archive.
    pub file: String,
    /// What is wrong: missing, cut short, bytes changed (with the row group and
    /// column where they are), unreadable footer, newer format.
    pub problem: String,
}

/// What `check` found, and what it repaired.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Segments verified.
    pub segments_checked: usize,
    /// Their bytes, read and checksummed.
    pub bytes_checked: u64,
    /// Unreadable catalog lines (dropped by a repair).
    pub catalog_damage: Vec<CatalogDamage>,
    /// Damaged or missing segments (set aside by a repair).
    pub damaged: Vec<SegmentProblem>,
    /// Where a repair moved the damaged segments' files.
    pub quarantined: Vec<PathBuf>,
    /// Packets segments whose postings count differs from their distinct addresses
    /// (rebuilt by a repair), with (postings in the index, addresses in the segment).
    pub wrong_postings: Vec<(SegmentId, u64, u64)>,
    /// Catalogued packets segments without postings (the planner reads them whole;
    /// indexed by a repair).
    pub unindexed: Vec<SegmentId>,
    /// Segments with postings that the catalog does not list (purged by a repair).
    pub stale_postings: Vec<SegmentId>,
    /// Segment files a repair entered into the catalog again (after a dropped line).
    pub recatalogued: Vec<SegmentId>,
    /// Segments whose local file is gone or not its sealed size and whose
    /// copy in the archive's object store (`objects.log`, the catalog's size
    /// and CRC-32) answers for them: not damage, never set aside.
    pub from_copies: Vec<SegmentProblem>,
    /// Connection records in the `flows` segments.
    pub flow_records: u64,
    /// Connections (events) in the connection index, if it exists.
    pub connections_indexed: Option<u64>,
    /// Whether the connection index keeps only the newest connections (then it
    /// may hold fewer than the segments).
    pub connections_expire: bool,
    /// Whether the report comes from a repair.
    pub repaired: bool,
}

impl CheckReport {
    /// Whether anything is wrong (before a repair, or left after it).
    pub fn is_clean(&self) -> bool {
        self.catalog_damage.is_empty()
            && self.damaged.is_empty()
            && self.wrong_postings.is_empty()
            && self.unindexed.is_empty()
            && self.stale_postings.is_empty()
    }
}

/// Checks the archive at `root`, read-only: nothing is written.
pub fn check(root: &Path) -> Result<CheckReport, IngestError> {
    let archive = Archive::open_reader_checking_catalog(root)?;
    let mut report = CheckReport {
        catalog_damage: archive.catalog_damage().to_vec(),
        ..CheckReport::default()
    };
    let index = AddressIndex::open_read_only(&archive.index_dir())?;
    let distinct = check_segments(&archive, &mut report);
    if let Some(index) = &index {
        check_postings(&archive, index, &distinct, &mut report)?;
    }
    if let Some(connections) = ConnectionIndex::open_read_only(&archive.connections_dir())? {
        report.connections_indexed = Some(connections.count()?.0);
        report.connections_expire = connections.expiry().expires();
    }
    Ok(report)
}

/// Checks the archive at `root` and repairs what it finds, under the writer lock
/// (no `ingest` or `serve` may hold it); returns what it found and did.
pub fn repair(root: &Path) -> Result<CheckReport, IngestError> {
    let (mut archive, recovery, dropped) = Archive::open_for_repair(root)?;
    let mut report = CheckReport {
        catalog_damage: dropped,
        recatalogued: recovery.segments_recovered.clone(),
        quarantined: recovery.segments_quarantined.clone(),
        repaired: true,
        ..CheckReport::default()
    };
    let index = AddressIndex::open(&archive.index_dir())?;
    let distinct = check_segments(&archive, &mut report);
    for problem in &report.damaged {
        if let Some(path) = archive.quarantine_segment(problem.id)? {
            report.quarantined.push(path);
        }
        if problem.table == Table::Packets.name() {
            index.purge_segment(problem.id)?;
        }
    }
    check_postings(&archive, &index, &distinct, &mut report)?;
    for &id in &report.stale_postings {
        index.purge_segment(id)?;
    }
    let rebuild: Vec<SegmentId> = report
        .wrong_postings
        .iter()
        .map(|&(id, _, _)| id)
        .chain(report.unindexed.iter().copied())
        .collect();
    for id in rebuild {
        let Some(entry) = archive.catalog().get(id).cloned() else {
            continue;
        };
        index.purge_segment(id)?;
        let reader = SegmentReader::open(&archive.segment_path(&entry))?;
        index.add_segment(id, &reader.address_postings()?, &[])?;
    }
    index.flush()?;
    if let Some(connections) = ConnectionIndex::open_read_only(&archive.connections_dir())? {
        report.connections_indexed = Some(connections.count()?.0);
        report.connections_expire = connections.expiry().expires();
    }
    Ok(report)
}

/// Verifies every catalogued segment; returns the distinct-address counts of the
/// sound `packets` segments.
fn check_segments(archive: &Archive, report: &mut CheckReport) -> Vec<(SegmentId, u64)> {
    let mut distinct = Vec::new();
    let entries: Vec<CatalogEntry> = archive.catalog().entries().cloned().collect();
    // The copies count only while the archive names its store.
    let copies = match crate::settings::archive_settings(archive.root(), None) {
        Ok(settings) if settings.objects.is_some() => {
            hindsight_store::objects::read_log(archive.root())
        }
        _ => Default::default(),
    };
    for entry in &entries {
        report.segments_checked += 1;
        if let Some(problem) = archive.segment_file_problem(entry)
            && hindsight_store::objects::has_copy(&copies, entry)
        {
            if entry.table == Table::Flows.name() {
                report.flow_records += entry.rows;
            }
            report.from_copies.push(SegmentProblem {
                id: entry.segment_id(),
                table: entry.table.to_string(),
                file: entry.file.clone(),
                problem,
            });
            continue;
        }
        let problem = match check_segment(archive, entry) {
            Ok((bytes, addresses)) => {
                report.bytes_checked += bytes;
                if entry.table == Table::Flows.name() {
                    report.flow_records += entry.rows;
                }
                if let Some(addresses) = addresses {
                    distinct.push((entry.segment_id(), addresses));
                }
                continue;
            }
            Err(problem) => problem,
        };
        report.damaged.push(SegmentProblem {
            id: entry.segment_id(),
            table: entry.table.to_string(),
            file: entry.file.clone(),
            problem,
        });
    }
    distinct
}

/// Checks one segment file against its catalog entry: its size, then its bytes
/// and footer. Returns the bytes read and, for a `packets` segment, its number of
/// distinct addresses; or what is wrong.
fn check_segment(archive: &Archive, entry: &CatalogEntry) -> Result<(u64, Option<u64>), String> {
    if let Some(problem) = archive.segment_file_problem(entry) {
        return Err(problem);
    }
    let path = &archive.segment_path(entry);
    let size = entry.size_bytes;
    let (_, crc) = checksum_file(path).map_err(|e| e.to_string())?;
    let reader = SegmentReader::open(path).map_err(|e| e.to_string())?;
    if crc != entry.crc32 {
        // Name where the changed bytes are, if a page shows it.
        let damage = reader
            .find_damage()
            .map(|damage| damage.to_string())
            .or_else(|| {
                SummaryKind::ALL
                    .into_iter()
                    .find_map(|kind| reader.summary(kind).err().map(|e| e.to_string()))
            });
        return Err(match damage {
            Some(damage) => format!("bytes changed since it was sealed: {damage}"),
            None => format!(
                "bytes changed since it was sealed (CRC-32 {crc:08x}, the catalog says {:08x})",
                entry.crc32
            ),
        });
    }
    if reader.rows() != entry.rows {
        return Err(format!(
            "{} rows, the catalog says {}",
            reader.rows(),
            entry.rows
        ));
    }
    for kind in SummaryKind::ALL {
        reader.summary(kind).map_err(|e| e.to_string())?;
    }
    let addresses = if entry.table == Table::Packets.name() {
        let postings = reader.address_postings().map_err(|e| e.to_string())?;
        Some(postings.len() as u64)
    } else {
        None
    };
    Ok((size, addresses))
}

/// Compares the address index with the sound `packets` segments.
fn check_postings(
    archive: &Archive,
    index: &AddressIndex,
    distinct: &[(SegmentId, u64)],
    report: &mut CheckReport,
) -> Result<(), IngestError> {
    let counts = index.posting_counts()?;
    let indexed = index.indexed_segments()?;
    let catalogued: std::collections::BTreeSet<SegmentId> = archive
        .catalog()
        .entries_of(Table::Packets)
        .map(CatalogEntry::segment_id)
        .collect();
    report.stale_postings = counts
        .keys()
        .chain(indexed.iter())
        .filter(|id| !catalogued.contains(id))
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for &(id, addresses) in distinct {
        if !indexed.contains(&id) {
            report.unindexed.push(id);
            continue;
        }
        let postings = counts.get(&id).copied().unwrap_or(0);
        if postings != addresses {
            report.wrong_postings.push((id, postings, addresses));
        }
    }
    Ok(())
}

impl CheckReport {
    /// The problems found (or repaired), and the connection index's count, a
    /// line each, as `hindsight check` prints them before its summary.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let done = |yes: &'static str| if self.repaired { yes } else { "" };
        for damage in &self.catalog_damage {
            lines.push(format!(
                "catalog.jsonl: byte {}: {}{}",
                damage.offset,
                damage.reason,
                done(" (line dropped)")
            ));
        }
        for id in &self.recatalogued {
            lines.push(format!("segment {}: catalogued again from its file", id.0));
        }
        for problem in &self.damaged {
            lines.push(format!(
                "segment {} ({}): {}{}",
                problem.id.0,
                problem.file,
                problem.problem,
                done(" (set aside)")
            ));
        }
        for path in &self.quarantined {
            lines.push(format!("  moved to {}", path.display()));
        }
        for copied in &self.from_copies {
            lines.push(format!(
                "segment {} ({}): {}; read from its copy in the object store",
                copied.id.0, copied.file, copied.problem
            ));
        }
        for (id, postings, addresses) in &self.wrong_postings {
            lines.push(format!(
                "segment {}: {postings} postings in the address index for {addresses} distinct \
                 addresses{}",
                id.0,
                done(" (rebuilt)")
            ));
        }
        for id in &self.unindexed {
            lines.push(format!(
                "segment {}: not in the address index (queries read it whole){}",
                id.0,
                done(" (indexed)")
            ));
        }
        for id in &self.stale_postings {
            lines.push(format!(
                "address index: postings of segment {}, which the catalog does not list{}",
                id.0,
                done(" (purged)")
            ));
        }
        if let Some(indexed) = self.connections_indexed {
            let note = if indexed > self.flow_records {
                " (the index keeps connections of segments removed or set aside)"
            } else if self.connections_expire {
                " (the index keeps the newest only)"
            } else {
                ""
            };
            lines.push(format!(
                "connection index: {indexed} connection(s); flows segments: {} record(s){note}",
                self.flow_records
            ));
        }
        lines
    }

    /// How many problems were found (or repaired).
    pub fn problems(&self) -> usize {
        self.catalog_damage.len()
            + self.damaged.len()
            + self.wrong_postings.len()
            + self.unindexed.len()
            + self.stale_postings.len()
    }
}
