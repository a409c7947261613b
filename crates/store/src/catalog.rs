//! The catalog: the list of sealed segments with their summaries (time range, rows,
//! size, checksum), the archive's level-2 index in Hyperion's terms.
//!
//! It is an append-only file of JSON lines (`catalog.jsonl`), one operation per
//! line, fsynced after each append. A crash can only tear the last line; a torn
//! last line is ignored on load and cut off when a writer next opens the catalog.
//! Any other unreadable line is corruption and reported with its byte offset.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use hindsight_model::SegmentId;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::segment::reader::TimeRange;

/// The summary of one sealed segment, as the catalog keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// Segment id.
    pub id: u64,
    /// Table the segment belongs to (`packets`, `flows`).
    pub table: String,
    /// Path of the segment file relative to the archive root.
    pub file: String,
    /// Number of rows.
    pub rows: u64,
    /// Smallest timestamp, ns since the epoch.
    pub min_ts_nanos: i64,
    /// Largest timestamp, ns since the epoch.
    pub max_ts_nanos: i64,
    /// File size in bytes.
    pub size_bytes: u64,
    /// CRC-32 (IEEE) of the file.
    pub crc32: u32,
    /// When the segment was sealed, ns since the epoch (wall clock).
    pub sealed_at_nanos: i64,
    /// The retention class of a `packets` segment (`[[retention.class]]`),
    /// absent for the default class and in catalogs written before classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

impl CatalogEntry {
    /// Returns the segment id as its newtype.
    pub fn segment_id(&self) -> SegmentId {
        SegmentId(self.id)
    }

    /// Returns true if the segment may hold rows in `time`.
    pub fn overlaps(&self, time: TimeRange) -> bool {
        time.overlaps(self.min_ts_nanos, self.max_ts_nanos)
    }
}

/// One line of the catalog file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum CatalogOp {
    /// A segment was sealed.
    Add(CatalogEntry),
    /// A segment was removed by retention.
    Remove { id: u64 },
}

/// The in-memory catalog, loaded from and appended to `catalog.jsonl`.
#[derive(Debug)]
pub struct Catalog {
    path: PathBuf,
    entries: BTreeMap<SegmentId, CatalogEntry>,
    /// Largest segment id ever added, removed ones included, so ids are never reused.
    max_id_seen: Option<SegmentId>,
    /// Ids of removed segments: a file of one found on disk is a leftover of a
    /// removal interrupted between the catalog line and the unlink.
    removed: std::collections::BTreeSet<SegmentId>,
    /// Length of the valid prefix of the file; a torn tail lies beyond it.
    valid_len_bytes: u64,
    /// The file, open for appending, when this catalog belongs to the writer.
    appender: Option<File>,
}

/// An unreadable line in the middle of the catalog, which a lenient load skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogDamage {
    /// Byte offset of the line in `catalog.jsonl`.
    pub offset: u64,
    /// Why it could not be read.
    pub reason: String,
}

impl Catalog {
    /// Loads the catalog at `path` for reading; a missing file is an empty catalog.
    /// An unreadable line other than a torn last one is corruption.
    pub fn load(path: &Path) -> Result<Self> {
        let (catalog, damage) = Self::load_lenient(path)?;
        match damage.into_iter().next() {
            None => Ok(catalog),
            Some(damage) => Err(StoreError::Corrupt {
                path: path.to_owned(),
                offset: damage.offset,
                reason: format!(
                    "{} (`hindsight check --repair` drops the line and re-catalogues its segment)",
                    damage.reason
                ),
            }),
        }
    }

    /// Loads the catalog at `path` for reading, skipping unreadable lines (each
    /// an operation of its own: the rest still describes the archive) and
    /// returning where they are. Readers use it so that one damaged line does not
    /// take the archive down; the writer does not.
    pub fn load_lenient(path: &Path) -> Result<(Self, Vec<CatalogDamage>)> {
        let mut damage = Vec::new();
        let mut text = Vec::new();
        match File::open(path) {
            Ok(mut file) => {
                file.read_to_end(&mut text)
                    .map_err(StoreError::io("read catalog", path))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("open catalog", path)(e)),
        }
        let mut entries = BTreeMap::new();
        let mut removed = std::collections::BTreeSet::new();
        let mut max_id_seen = None;
        let mut offset = 0usize;
        let mut valid_len = 0usize;
        while offset < text.len() {
            let rest = text.get(offset..).unwrap_or_default();
            let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
                // No newline: the last append was torn by a crash.
                break;
            };
            let line = rest.get(..newline).unwrap_or_default();
            let line_end = offset + newline + 1;
            match serde_json::from_slice::<CatalogOp>(line) {
                Ok(CatalogOp::Add(entry)) => {
                    max_id_seen = max_id_seen.max(Some(entry.segment_id()));
                    entries.insert(entry.segment_id(), entry);
                }
                Ok(CatalogOp::Remove { id }) => {
                    entries.remove(&SegmentId(id));
                    removed.insert(SegmentId(id));
                }
                Err(error) if line_end == text.len() => {
                    // A complete but unreadable last line is also a torn append
                    // (the newline reached the disk before the rest).
                    let _ = error;
                    break;
                }
                Err(error) => damage.push(CatalogDamage {
                    offset: offset as u64,
                    reason: format!("unreadable catalog line: {error}"),
                }),
            }
            offset = line_end;
            valid_len = line_end;
        }
        let catalog = Self {
            path: path.to_owned(),
            entries,
            max_id_seen,
            removed,
            valid_len_bytes: valid_len as u64,
            appender: None,
        };
        Ok((catalog, damage))
    }

    /// Rewrites the catalog at `path` without its unreadable lines (and without
    /// a torn last line): the readable lines, in order, into a temporary file
    /// that replaces the catalog once it is durable. Returns the lines dropped.
    /// Only for the archive's writer (`hindsight check --repair`).
    pub fn drop_damaged_lines(path: &Path) -> Result<Vec<CatalogDamage>> {
        let (_, damage) = Self::load_lenient(path)?;
        if damage.is_empty() {
            return Ok(damage);
        }
        let text = std::fs::read(path).map_err(StoreError::io("read catalog", path))?;
        let mut kept = Vec::with_capacity(text.len());
        for line in text.split_inclusive(|&b| b == b'\n') {
            let whole = line.last() == Some(&b'\n');
            let body = line.strip_suffix(b"\n").unwrap_or(line);
            if whole && serde_json::from_slice::<CatalogOp>(body).is_ok() {
                kept.extend_from_slice(line);
            }
        }
        let temp = path.with_extension("jsonl.repair");
        let mut file = File::create(&temp).map_err(StoreError::io("create catalog", &temp))?;
        file.write_all(&kept)
            .and_then(|()| file.sync_all())
            .map_err(StoreError::io("write catalog", &temp))?;
        std::fs::rename(&temp, path).map_err(StoreError::io("replace catalog", path))?;
        if let Some(dir) = path.parent() {
            crate::segment::writer::sync_dir(dir)?;
        }
        Ok(damage)
    }

    /// Loads the catalog at `path` for appending, cutting off a torn last line.
    pub fn open_for_append(path: &Path) -> Result<Self> {
        let mut catalog = Self::load(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(StoreError::io("open catalog for append", path))?;
        file.set_len(catalog.valid_len_bytes)
            .map_err(StoreError::io("truncate torn catalog tail", path))?;
        catalog.appender = Some(file);
        Ok(catalog)
    }

    /// Returns the path of the catalog file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns every live segment, by id.
    pub fn entries(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.values()
    }

    /// Returns the entries of the segments of `table`, in id order.
    pub fn entries_of(&self, table: crate::Table) -> impl Iterator<Item = &CatalogEntry> {
        self.entries
            .values()
            .filter(move |e| e.table == table.name())
    }

    /// Returns the entry of segment `id`.
    pub fn get(&self, id: SegmentId) -> Option<&CatalogEntry> {
        self.entries.get(&id)
    }

    /// Returns the number of live segments.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Returns true if the catalog lists no segment.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Returns the largest segment id ever added (removed ones included), if any.
    pub fn max_id(&self) -> Option<SegmentId> {
        self.max_id_seen
    }

    /// Appends a sealed segment and makes the append durable.
    pub fn add(&mut self, entry: CatalogEntry) -> Result<()> {
        self.append(&CatalogOp::Add(entry.clone()))?;
        self.max_id_seen = self.max_id_seen.max(Some(entry.segment_id()));
        self.entries.insert(entry.segment_id(), entry);
        Ok(())
    }

    /// Records the removal of a segment and makes it durable.
    pub fn remove(&mut self, id: SegmentId) -> Result<()> {
        self.append(&CatalogOp::Remove { id: id.0 })?;
        self.entries.remove(&id);
        self.removed.insert(id);
        Ok(())
    }

    /// Returns true if segment `id` was removed.
    pub fn was_removed(&self, id: SegmentId) -> bool {
        self.removed.contains(&id)
    }

    fn append(&mut self, op: &CatalogOp) -> Result<()> {
        let Some(file) = self.appender.as_mut() else {
            return Err(StoreError::Io {
                action: "append to catalog",
                path: self.path.clone(),
                source: std::io::Error::other("catalog was opened read-only"),
            });
        };
        let mut line = serde_json::to_vec(op).map_err(|e| StoreError::Io {
            action: "encode catalog line",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push(b'\n');
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(StoreError::io("append to catalog", &self.path))?;
        self.valid_len_bytes += line.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64) -> CatalogEntry {
        CatalogEntry {
            id,
            table: "packets".to_owned(),
            file: format!("packets/seg-{id:012}.parquet"),
            rows: 10 * id,
            min_ts_nanos: 100 * id as i64,
            max_ts_nanos: 100 * id as i64 + 50,
            size_bytes: 1000,
            crc32: 7,
            sealed_at_nanos: 1,
            class: None,
        }
    }

    #[test]
    fn appends_survive_reload_and_removals_apply() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        catalog.add(entry(1)).unwrap();
        catalog.add(entry(2)).unwrap();
        catalog.add(entry(3)).unwrap();
        catalog.remove(SegmentId(2)).unwrap();
        drop(catalog);

        let catalog = Catalog::load(&path).unwrap();
        let ids: Vec<u64> = catalog.entries().map(|e| e.id).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(catalog.max_id(), Some(SegmentId(3)));
        assert_eq!(catalog.get(SegmentId(3)), Some(&entry(3)));
    }

    #[test]
    fn torn_last_line_is_ignored_then_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        catalog.add(entry(1)).unwrap();
        drop(catalog);
        let good_len = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"op":"add","id":2,"tab"#).unwrap();
        drop(file);

        let catalog = Catalog::load(&path).unwrap();
        assert_eq!(catalog.len(), 1);
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
        catalog.add(entry(2)).unwrap();
        assert_eq!(Catalog::load(&path).unwrap().len(), 2);
    }

    #[test]
    fn damaged_middle_line_is_corruption_with_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        catalog.add(entry(1)).unwrap();
        let first_len = std::fs::metadata(&path).unwrap().len();
        catalog.add(entry(2)).unwrap();
        catalog.add(entry(3)).unwrap();
        drop(catalog);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[first_len as usize + 3] = b'#';
        std::fs::write(&path, bytes).unwrap();

        let error = Catalog::load(&path).unwrap_err();
        assert!(
            matches!(error, StoreError::Corrupt { offset, .. } if offset == first_len),
            "{error}"
        );
    }
}
