//! The archive directory: its layout, the single-writer lock, and recovery after a crash.
//!
//! ```text
//! ARCHIVE/
//!   HINDSIGHT            marker: says this directory is a hindsight archive, and the
//!                        version of each of its formats (formats.rs)
//!   LOCK                 flock(2)ed by the one writer (ingest, serve)
//!   config.toml          the archive's settings (optional; expiration of the connection index)
//!   catalog.jsonl        the catalog of both tables (see catalog.rs)
//!   catalog.checkpoint   the catalog as of a prefix of catalog.jsonl, binary (catalog/checkpoint.rs)
//!   packets/             sealed segments seg-<id>.parquet, and .seg-<id>.parquet.tmp while writing
//!   flows/               the same for the flows table
//!   quarantine/          segment files recovery could not read, moved aside, never deleted
//!   index/               the RocksDB address postings of packet segments (hindsight-index)
//!   connections/         the RocksDB connection index with expiration (hindsight-index)
//! ```

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hindsight_model::SegmentId;

use crate::Table;
use crate::catalog::{Catalog, CatalogDamage, CatalogEntry, PrefixCheck};
use crate::error::{Result, StoreError};
use crate::formats::{MARKER_FILE, check_marker, current_marker, write_marker};
use crate::segment::reader::SegmentReader;
use crate::segment::reader::TimeRange;
use crate::segment::writer::{SealedSegment, sync_dir};
use crate::segment::{TEMP_SUFFIX, parse_segment_file_name, segment_file_name};

/// Name of the archive's settings file (read by the commands that write it).
pub const CONFIG_FILE: &str = "config.toml";
/// Name of the writer lock file.
const LOCK_FILE: &str = "LOCK";
/// Name of the catalog file.
const CATALOG_FILE: &str = "catalog.jsonl";
/// Directory of packet segments (`Table::Packets.name()`).
pub const PACKETS_DIR: &str = "packets";
/// Directory where unreadable segment files are moved by recovery.
const QUARANTINE_DIR: &str = "quarantine";
/// Directory of the RocksDB address index.
pub const INDEX_DIR: &str = "index";
/// Directory of the RocksDB connection index.
pub const CONNECTIONS_DIR: &str = "connections";

/// What opening an archive for writing found and repaired.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Temporary files of segments that were never sealed, now deleted.
    pub temp_files_removed: Vec<PathBuf>,
    /// Sealed segment files the catalog did not list yet (crash between rename and
    /// catalog append), now entered in the catalog.
    pub segments_recovered: Vec<SegmentId>,
    /// Segment files that could not be read, moved to `quarantine/`.
    pub segments_quarantined: Vec<PathBuf>,
    /// Files of segments the catalog says were removed (by expiration), left by a
    /// crash between the catalog line and the unlink; now deleted.
    pub removed_leftovers: Vec<PathBuf>,
}

impl RecoveryReport {
    /// Returns true if nothing needed repair.
    pub fn is_clean(&self) -> bool {
        *self == Self::default()
    }
}

/// An open archive directory, for reading or (holding the lock) for writing.
#[derive(Debug)]
pub struct Archive {
    root: PathBuf,
    catalog: Catalog,
    /// Unreadable catalog lines a reader skipped (a writer refuses them).
    catalog_damage: Vec<CatalogDamage>,
    /// Held for the life of a writer; the OS releases the lock if the process dies.
    _lock: Option<File>,
}

impl Archive {
    /// Opens the archive at `root` for writing, creating it if needed, taking the
    /// writer lock, and repairing what a crash may have left (see [`RecoveryReport`]).
    pub fn open_writer(root: &Path) -> Result<(Self, RecoveryReport)> {
        let (archive, report, _) = Self::open_writer_with(root, false)?;
        Ok((archive, report))
    }

    /// Opens the archive for writing as [`Self::open_writer`] does, after
    /// dropping the catalog's unreadable lines (returned): recovery then enters
    /// the segment files they named into the catalog again, from the files.
    /// For `hindsight check --repair`.
    pub fn open_for_repair(root: &Path) -> Result<(Self, RecoveryReport, Vec<CatalogDamage>)> {
        check_marker(root)?;
        Self::open_writer_with(root, true)
    }

    fn open_writer_with(
        root: &Path,
        repair_catalog: bool,
    ) -> Result<(Self, RecoveryReport, Vec<CatalogDamage>)> {
        fs::create_dir_all(root).map_err(StoreError::io("create archive directory", root))?;
        make_private(root)?;
        let marker = root.join(MARKER_FILE);
        if !marker.exists() {
            // A new archive may hold its settings file before anything else.
            let non_empty = fs::read_dir(root)
                .map_err(StoreError::io("list archive directory", root))?
                .flatten()
                .any(|entry| entry.file_name() != CONFIG_FILE);
            if non_empty {
                return Err(StoreError::NotAnArchive {
                    path: root.to_owned(),
                    reason: "the directory is not empty and has no HINDSIGHT marker file; \
                             refusing to write into it"
                        .to_owned(),
                });
            }
            fs::write(&marker, current_marker())
                .map_err(StoreError::io("write marker", &marker))?;
        }
        let found = check_marker(root)?;
        let lock_path = root.join(LOCK_FILE);
        let lock = File::create(&lock_path).map_err(StoreError::io("create lock", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: root.to_owned(),
                });
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(StoreError::io("lock archive", &lock_path)(e));
            }
        }
        for dir in [Table::Packets.name(), Table::Flows.name(), QUARANTINE_DIR] {
            let path = root.join(dir);
            fs::create_dir_all(&path).map_err(StoreError::io("create directory", &path))?;
        }
        write_marker(root, Some(&found))?;
        sync_dir(root)?;
        let dropped = if repair_catalog {
            Catalog::drop_damaged_lines(&root.join(CATALOG_FILE))?
        } else {
            Vec::new()
        };
        let catalog = Catalog::open_for_append(&root.join(CATALOG_FILE))?;
        let mut archive = Self {
            root: root.to_owned(),
            catalog,
            catalog_damage: Vec::new(),
            _lock: Some(lock),
        };
        let report = archive.recover()?;
        archive.compact_catalog_if_due()?;
        Ok((archive, report, dropped))
    }

    /// Opens the archive at `root` for reading: no lock, no repair. Segments sealed by a
    /// running writer after this call are not seen.
    pub fn open_reader(root: &Path) -> Result<Self> {
        Self::open_reader_with(root, |catalog| {
            Catalog::load_lenient(catalog, PrefixCheck::Tail)
        })
    }

    /// [`open_reader`](Self::open_reader), reading every catalog line a
    /// checkpoint covers through its CRC-32 (`hindsight check`): a line
    /// damaged there is then found, as it is not when a reader trusts the
    /// checkpoint's verified copy of it.
    pub fn open_reader_checking_catalog(root: &Path) -> Result<Self> {
        Self::open_reader_with(root, |catalog| {
            Catalog::load_lenient(catalog, PrefixCheck::Whole)
        })
    }

    /// [`open_reader`](Self::open_reader) for questions about `window` only:
    /// its catalog lists every segment with rows in the window and counts
    /// the rest without reading them ([`Catalog::load_within`]), so a
    /// one-hour question costs the same in an archive of a day or a year.
    pub fn open_reader_within(root: &Path, window: TimeRange) -> Result<Self> {
        Self::open_reader_with(root, |catalog| Catalog::load_within(catalog, window))
    }

    /// Checks that `root` is an archive this build reads (its marker file),
    /// opening nothing else: for a question that needs one of its indexes
    /// and not its catalog.
    pub fn check_reader(root: &Path) -> Result<()> {
        check_marker(root).map(drop)
    }

    /// The directory of the RocksDB connection index of the archive at `root`.
    pub fn connections_dir_of(root: &Path) -> PathBuf {
        root.join(CONNECTIONS_DIR)
    }

    /// A reader of the archive at `root`, its catalog loaded by `load`.
    fn open_reader_with(
        root: &Path,
        load: impl FnOnce(&Path) -> Result<(Catalog, Vec<CatalogDamage>)>,
    ) -> Result<Self> {
        check_marker(root)?;
        let (catalog, catalog_damage) = load(&root.join(CATALOG_FILE))?;
        Ok(Self {
            root: root.to_owned(),
            catalog,
            catalog_damage,
            _lock: None,
        })
    }

    /// The catalog lines this reader could not read and skipped: segments they
    /// added are not seen (`hindsight check --repair` brings them back).
    pub fn catalog_damage(&self) -> &[CatalogDamage] {
        &self.catalog_damage
    }

    /// Sets a damaged segment aside: its file (if any is left) moves to
    /// `quarantine/`, and the catalog no longer lists it. Returns where the file went.
    /// The caller removes its postings from the address index.
    pub fn quarantine_segment(&mut self, id: SegmentId) -> Result<Option<PathBuf>> {
        let Some(entry) = self.catalog.get(id).cloned() else {
            return Ok(None);
        };
        let path = self.segment_path(&entry);
        let quarantine = self.root.join(QUARANTINE_DIR);
        let target = path.file_name().map(|name| quarantine.join(name));
        let moved = match &target {
            Some(target) => match fs::rename(&path, target) {
                Ok(()) => Some(target.clone()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(StoreError::io("quarantine segment", &path)(e)),
            },
            None => None,
        };
        if moved.is_some() {
            sync_dir(&quarantine)?;
        }
        // The file is gone from the table directory before the catalog says so:
        // a crash in between leaves a catalogued segment without a file, which
        // the next check finds again.
        self.catalog.remove(id)?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(moved)
    }

    /// Returns the archive root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Returns the directory of packet segments.
    pub fn packets_dir(&self) -> PathBuf {
        self.table_dir(Table::Packets)
    }

    /// Returns the directory of the segments of `table`.
    pub fn table_dir(&self, table: Table) -> PathBuf {
        self.root.join(table.name())
    }

    /// Returns the directory of the RocksDB connection index.
    pub fn connections_dir(&self) -> PathBuf {
        Self::connections_dir_of(&self.root)
    }

    /// Returns the directory of the RocksDB index.
    pub fn index_dir(&self) -> PathBuf {
        self.root.join(INDEX_DIR)
    }

    /// Returns the catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Returns the absolute path of a catalogued segment's file.
    pub fn segment_path(&self, entry: &CatalogEntry) -> PathBuf {
        self.root.join(&entry.file)
    }

    /// What is wrong with a catalogued segment's file that a `stat` shows: gone,
    /// unreadable, or not the size it was sealed at. `None` if it looks whole
    /// (damage inside it is for the pages' checksums, or `checksum_file`).
    pub fn segment_file_problem(&self, entry: &CatalogEntry) -> Option<String> {
        match fs::metadata(self.segment_path(entry)) {
            Ok(metadata) if metadata.len() == entry.size_bytes => None,
            Ok(metadata) if metadata.len() < entry.size_bytes => Some(format!(
                "cut short: {} bytes, the catalog says {}",
                metadata.len(),
                entry.size_bytes
            )),
            Ok(metadata) => Some(format!(
                "{} bytes, the catalog says {}",
                metadata.len(),
                entry.size_bytes
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some("the file is missing".to_owned())
            }
            Err(e) => Some(format!("cannot read the file: {e}")),
        }
    }

    /// Returns the id the next segment must take.
    pub fn next_segment_id(&self) -> SegmentId {
        SegmentId(self.catalog.max_id().map_or(1, |id| id.0 + 1))
    }

    /// Enters a sealed segment in the catalog, durably.
    pub fn register(&mut self, sealed: &SealedSegment) -> Result<CatalogEntry> {
        self.register_in_class(sealed, None)
    }

    /// [`Self::register`] for a segment of a retention class.
    pub fn register_in_class(
        &mut self,
        sealed: &SealedSegment,
        class: Option<&str>,
    ) -> Result<CatalogEntry> {
        let file_name = sealed
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let entry = CatalogEntry {
            id: sealed.id.0,
            table: sealed.table.name().into(),
            file: format!("{}/{file_name}", sealed.table.name()),
            rows: sealed.rows,
            min_ts_nanos: sealed.min_ts_nanos,
            max_ts_nanos: sealed.max_ts_nanos,
            size_bytes: sealed.size_bytes,
            crc32: sealed.crc32,
            sealed_at_nanos: now_nanos(),
            class: class.map(str::to_owned),
        };
        self.catalog.add(entry.clone())?;
        Ok(entry)
    }

    /// Removes a segment: the catalog line first (durable), then the file. A crash
    /// in between leaves a file that recovery deletes, never one it re-catalogues.
    pub fn remove_segment(&mut self, id: SegmentId) -> Result<()> {
        let Some(entry) = self.catalog.get(id).cloned() else {
            return Ok(());
        };
        self.catalog.remove(id)?;
        let path = self.segment_path(&entry);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("remove segment", &path)(e)),
        }
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        self.compact_catalog_if_due()
    }

    /// Compacts the catalog once most of its lines are removals and what they
    /// removed ([`Catalog::wants_compaction`]), so that it grows with the live
    /// segments, not with every segment retention ever expired. A removed
    /// segment whose file is still in its table's directory (an unlink that
    /// failed) keeps its removal line, for recovery to delete the file.
    fn compact_catalog_if_due(&mut self) -> Result<()> {
        if !self.catalog.wants_compaction() {
            return Ok(());
        }
        let on_disk: Vec<SegmentId> = self
            .catalog
            .removed_ids()
            .filter(|&id| {
                Table::ALL
                    .iter()
                    .any(|&table| self.table_dir(table).join(segment_file_name(id)).exists())
            })
            .collect();
        self.catalog.compact(&on_disk)
    }

    fn recover(&mut self) -> Result<RecoveryReport> {
        let mut report = RecoveryReport::default();
        for table in Table::ALL {
            self.recover_table(table, &mut report)?;
        }
        Ok(report)
    }

    fn recover_table(&mut self, table: Table, report: &mut RecoveryReport) -> Result<()> {
        let before = (
            report.temp_files_removed.len(),
            report.segments_recovered.len(),
            report.segments_quarantined.len(),
            report.removed_leftovers.len(),
        );
        let dir = self.table_dir(table);
        let mut names: Vec<(String, PathBuf)> = Vec::new();
        for dirent in fs::read_dir(&dir).map_err(StoreError::io("list segments", &dir))? {
            let dirent = dirent.map_err(StoreError::io("list segments", &dir))?;
            let name = dirent.file_name().to_string_lossy().into_owned();
            names.push((name, dirent.path()));
        }
        names.sort();
        for (name, path) in names {
            if name.ends_with(TEMP_SUFFIX) {
                fs::remove_file(&path).map_err(StoreError::io("remove unsealed segment", &path))?;
                report.temp_files_removed.push(path);
                continue;
            }
            let Some(id) = parse_segment_file_name(&name) else {
                continue;
            };
            if self.catalog.get(id).is_some() {
                continue;
            }
            if self.catalog.was_removed(id) {
                // A removal interrupted after its catalog line: finish it.
                fs::remove_file(&path).map_err(StoreError::io("remove expired segment", &path))?;
                report.removed_leftovers.push(path);
                continue;
            }
            match summarize_orphan(table, id, &path) {
                Ok(sealed) => {
                    self.register(&sealed)?;
                    report.segments_recovered.push(id);
                }
                Err(_) => {
                    let target = self.root.join(QUARANTINE_DIR).join(&name);
                    fs::rename(&path, &target)
                        .map_err(StoreError::io("quarantine segment", &path))?;
                    report.segments_quarantined.push(target);
                }
            }
        }
        let after = (
            report.temp_files_removed.len(),
            report.segments_recovered.len(),
            report.segments_quarantined.len(),
            report.removed_leftovers.len(),
        );
        if after != before {
            sync_dir(&dir)?;
        }
        Ok(())
    }
}

/// Rebuilds the catalog summary of a sealed segment file the catalog does not list.
fn summarize_orphan(table: Table, id: SegmentId, path: &Path) -> Result<SealedSegment> {
    let reader = SegmentReader::open(path)?;
    let (min_ts_nanos, max_ts_nanos) = reader.time_bounds().unwrap_or((0, 0));
    let addresses = reader.address_postings()?;
    let (size_bytes, crc32) = checksum_file(path)?;
    Ok(SealedSegment {
        table,
        id,
        path: path.to_owned(),
        rows: reader.rows(),
        min_ts_nanos,
        max_ts_nanos,
        size_bytes,
        crc32,
        addresses,
        // Covering postings are built only while writing; granules suffice.
        covered: Vec::new(),
        // Not encoded here.
        column_cpu: Vec::new(),
    })
}

/// The CRC-32 of bytes already read, as [`checksum_file`] computes a file's.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Returns the size and CRC-32 of a file.
pub fn checksum_file(path: &Path) -> Result<(u64, u32)> {
    let mut file = File::open(path).map_err(StoreError::io("open for checksum", path))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(StoreError::io("read for checksum", path))?;
        if n == 0 {
            break;
        }
        hasher.update(buffer.get(..n).unwrap_or_default());
        size += n as u64;
    }
    Ok((size, hasher.finalize()))
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Makes what the writer of the archive at `root` creates private: the
/// directory `0700` (no other user reaches a file inside it, whatever the
/// file's own mode, so this also closes archives written before), and the
/// process's file creation mask `077`, so segments, indexes, the catalog and
/// dumps are `0600`. An operator who shares the archive with a group (a
/// service account that reads it) marks the directory set-group-ID
/// (`chgrp GROUP DIR; chmod 2750 DIR`): new files then take the directory's
/// group, and the modes are `2750` and `027` (`0640` files) instead.
pub fn make_private(root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(root)
        .map_err(StoreError::io("read the mode of", root))?
        .permissions()
        .mode();
    let (dir_mode, mask) = if mode & 0o2000 != 0 {
        (0o2750, 0o027)
    } else {
        (0o700, 0o077)
    };
    if mode & 0o7777 != dir_mode {
        fs::set_permissions(root, fs::Permissions::from_mode(dir_mode))
            .map_err(StoreError::io("set the mode of", root))?;
    }
    // SAFETY: umask only sets the process's creation mask; it cannot fail.
    unsafe { libc::umask(mask) };
    Ok(())
}

/// The file naming the `serve` process that captures into the archive: its
/// unsealed tail is in that process's memory, so the command-line tools ask it
/// (through its API) to answer with the tail, instead of reading the sealed
/// segments alone.
pub const SERVING_FILE: &str = "serving.json";

/// What [`SERVING_FILE`] says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Serving {
    /// The process.
    pub pid: u32,
    /// Where its API answers (`http://127.0.0.1:8080`).
    pub url: String,
}

impl Serving {
    /// Writes the file of the archive at `root` (whole or not at all).
    pub fn write(&self, root: &Path) -> std::io::Result<()> {
        let path = root.join(SERVING_FILE);
        let temp = root.join(format!("{SERVING_FILE}{TEMP_SUFFIX}"));
        fs::write(
            &temp,
            serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )?;
        fs::rename(&temp, &path)
    }

    /// The serving process of the archive at `root`, if the file names one that
    /// runs (a process that died leaves the file behind).
    pub fn find(root: &Path) -> Option<Self> {
        let text = fs::read(root.join(SERVING_FILE)).ok()?;
        let serving: Self = serde_json::from_slice(&text).ok()?;
        Path::new("/proc")
            .join(serving.pid.to_string())
            .exists()
            .then_some(serving)
    }

    /// Removes the file if it still names this process.
    pub fn remove(root: &Path) {
        let path = root.join(SERVING_FILE);
        let ours = fs::read(&path)
            .ok()
            .and_then(|text| serde_json::from_slice::<Self>(&text).ok())
            .is_some_and(|serving| serving.pid == std::process::id());
        if ours {
            let _ = fs::remove_file(path);
        }
    }
}
