//! The catalog: the list of sealed segments with their summaries (time range, rows,
//! size, checksum), the archive's level-2 index in Hyperion's terms.
//!
//! It is an append-only file of JSON lines (`catalog.jsonl`), one operation per
//! line, fsynced after each append. A crash can only tear the last line; a torn
//! last line is ignored on load and cut off when a writer next opens the catalog.
//! Any other unreadable line is corruption and reported with its byte offset.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Seek, Write};
use std::path::{Path, PathBuf};

use hindsight_model::SegmentId;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::segment::reader::TimeRange;

mod checkpoint;

pub use checkpoint::{BLOCK_ENTRIES, CHECKPOINT_EVERY_LINES, PrefixCheck};
use checkpoint::{Checkpoint, Covered, Head};

/// The summary of one sealed segment, as the catalog keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// Segment id.
    pub id: u64,
    /// Table the segment belongs to (`packets`, `flows`): a name held once,
    /// not allocated for each of an archive's 100,000 segments.
    pub table: Cow<'static, str>,
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

/// Removals (and the additions they cancel) a catalog holds at least before
/// it is compacted.
pub const COMPACT_MIN_DEAD_LINES: u64 = 1024;

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
    /// The live segments, in id order (a vector, not a map: built in one
    /// pass at load, and found by binary search; a removal shifts the rest,
    /// a few MB at 100,000 segments, once a seal).
    entries: Vec<CatalogEntry>,
    /// Largest segment id ever added, removed ones included, so ids are never reused.
    max_id_seen: Option<SegmentId>,
    /// Ids of removed segments: a file of one found on disk is a leftover of a
    /// removal interrupted between the catalog line and the unlink.
    removed: std::collections::BTreeSet<SegmentId>,
    /// Length of the valid prefix of the file; a torn tail lies beyond it.
    valid_len_bytes: u64,
    /// Lines in the valid prefix: live additions, and the removals and
    /// removed additions that [`compact`](Self::compact) drops.
    lines: u64,
    /// The file, open for appending, when this catalog belongs to the writer.
    appender: Option<File>,
    /// Lines the last checkpoint read or written covers (`checkpoint.rs`).
    checkpoint_lines: u64,
    /// For a reader's load of one window ([`load_within`](Self::load_within)),
    /// the window and what the checkpoint's blocks it did not read hold.
    partial: Option<Partial>,
}

/// What a catalog loaded for one window did not read: `entries` holds every
/// live segment with rows in `window`, and some others.
#[derive(Clone, Copy, Debug)]
struct Partial {
    window: TimeRange,
    /// The segments of the blocks not read, and the `packets` ones among them.
    segments: usize,
    packets: usize,
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
    /// The writer's load: a checkpoint's whole prefix is checked.
    pub fn load(path: &Path) -> Result<Self> {
        let (catalog, damage) = Self::load_lenient(path, PrefixCheck::Whole)?;
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
    /// take the archive down; the writer does not. `check` says how much of
    /// the prefix a checkpoint covers is read to check that the file still
    /// holds it (`checkpoint.rs`): with [`PrefixCheck::Tail`] damage inside
    /// that prefix is not looked for (the checkpoint answers for it).
    pub fn load_lenient(path: &Path, check: PrefixCheck) -> Result<(Self, Vec<CatalogDamage>)> {
        Self::load_with(path, check, None)
    }

    /// Loads the catalog at `path` for a reader that asks about `window`
    /// only, leniently as [`load_lenient`](Self::load_lenient) with
    /// [`PrefixCheck::Tail`]: of a checkpoint it reads the head and the
    /// blocks whose time span overlaps `window` or that hold an id a later
    /// line names, not the rest (`checkpoint.rs`). The catalog is then
    /// partial: it lists every live segment with rows in `window` (and some
    /// others), and it counts the segments it does not list
    /// ([`len`](Self::len), [`count_of`](Self::count_of)). Without a valid
    /// checkpoint it is the whole catalog.
    pub fn load_within(path: &Path, window: TimeRange) -> Result<(Self, Vec<CatalogDamage>)> {
        if window == TimeRange::ALL {
            return Self::load_lenient(path, PrefixCheck::Tail);
        }
        Self::load_with(path, PrefixCheck::Tail, Some(window))
    }

    fn load_with(
        path: &Path,
        check: PrefixCheck,
        window: Option<TimeRange>,
    ) -> Result<(Self, Vec<CatalogDamage>)> {
        let mut damage = Vec::new();
        let file = match File::open(path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io("open catalog", path)(e)),
        };
        let read_error = |e| StoreError::io("read catalog", path)(e);
        // Read through a buffer of 1 MiB that stays in the CPU's cache, not
        // into one of the file's size: the catalog of 100,000 segments is
        // 23 MB, and faulting in a fresh buffer for it cost more than reading.
        let mut reader = file.map(|file| std::io::BufReader::with_capacity(1 << 20, file));
        // Additions into a vector in line order (ids increasing, as the
        // writer appends them), and the line of each apart from it: a
        // removal cancels the additions of its id on lines before it.
        let mut adds: Vec<CatalogEntry> = Vec::new();
        let mut added_at: Vec<u64> = Vec::new();
        let mut removed_at: BTreeMap<SegmentId, u64> = BTreeMap::new();
        let mut max_id_seen = None;
        let mut valid_len = 0u64;
        let mut lines = 0u64;
        // The order of each addition and removal: a removal cancels the
        // additions before it.
        let mut order = 0u64;
        let mut checkpoint_lines = 0u64;
        // A window's load: the checkpoint's head, whose blocks are read
        // once the lines after it are.
        let mut head = None;
        if let Some(reader) = reader.as_mut()
            && window.is_some()
        {
            if let Some((file, found)) = Self::head_for(path, reader)? {
                max_id_seen = found.max_id_seen;
                valid_len = found.covered.len;
                lines = found.lines;
                checkpoint_lines = found.lines;
                order = 2;
                head = Some((file, found));
            }
        } else if let Some(reader) = reader.as_mut()
            && let Some(checkpoint) = Self::checkpoint_for(path, reader, check)?
        {
            // The covered prefix, as of the checkpoint: its removals come
            // before its live entries, which come before every later line.
            removed_at.extend(checkpoint.removed.iter().map(|&id| (id, 0)));
            added_at = vec![1; checkpoint.entries.len()];
            adds = checkpoint.entries.into_owned();
            max_id_seen = checkpoint.max_id_seen;
            valid_len = checkpoint.covered.len;
            lines = checkpoint.lines;
            checkpoint_lines = checkpoint.lines;
            order = 2;
        }
        let mut line = Vec::with_capacity(512);
        while let Some(reader) = reader.as_mut() {
            line.clear();
            let read = reader.read_until(b'\n', &mut line).map_err(read_error)?;
            let Some(body) = line.strip_suffix(b"\n") else {
                // No newline (or nothing): the last append was torn by a crash.
                break;
            };
            match parse_line(body) {
                Ok(CatalogOp::Add(entry)) => {
                    max_id_seen = max_id_seen.max(Some(entry.segment_id()));
                    adds.push(entry);
                    added_at.push(order);
                }
                Ok(CatalogOp::Remove { id }) => {
                    // A compacted catalog may hold the largest id only here.
                    max_id_seen = max_id_seen.max(Some(SegmentId(id)));
                    removed_at.insert(SegmentId(id), order);
                }
                Err(error) => {
                    let last = reader.fill_buf().map_err(read_error)?.is_empty();
                    if last {
                        // A complete but unreadable last line is also a torn
                        // append (the newline reached the disk before the rest).
                        let _ = error;
                        break;
                    }
                    damage.push(CatalogDamage {
                        offset: valid_len,
                        reason: format!("unreadable catalog line: {error}"),
                    });
                }
            }
            valid_len += read as u64;
            lines += 1;
            order += 1;
        }
        let mut partial = None;
        if let (Some(window), Some((file, head))) = (window, head) {
            // The blocks the window needs: those that may hold a segment
            // with rows in it, and those holding an id a later line adds
            // or removes (so that the line applies as in a whole load).
            let named = |block: &checkpoint::Block| {
                adds.iter().any(|entry| block.spans(entry.segment_id()))
                    || removed_at.keys().any(|&id| block.spans(id))
            };
            let mut read = Vec::new();
            let mut left = Partial {
                window,
                segments: 0,
                packets: 0,
            };
            for block in &head.blocks {
                if !block.overlaps(window) && !named(block) {
                    left.segments += block.entries as usize;
                    left.packets += block.packets as usize;
                    continue;
                }
                match Head::read_block(&file, block) {
                    Some(entries) => read.extend(entries),
                    // A damaged block: the whole load passes over the
                    // checkpoint and reads every line.
                    None => return Self::load_with(path, check, None),
                }
            }
            added_at.splice(0..0, std::iter::repeat_n(1, read.len()));
            adds.splice(0..0, read);
            partial = Some(left);
        }
        let mut line_of = added_at.into_iter();
        let mut entries = adds;
        if !removed_at.is_empty() {
            entries.retain(|entry| {
                let line = line_of.next().unwrap_or(0);
                removed_at
                    .get(&entry.segment_id())
                    .is_none_or(|&removal| removal < line)
            });
        }
        // Ids are appended in increasing order; recovery may add a lower
        // one. A later addition of an id replaces an earlier one.
        if !entries.is_sorted_by(|a, b| a.id < b.id) {
            entries.reverse();
            entries.sort_by_key(|entry| entry.id);
            entries.dedup_by_key(|entry| entry.id);
        }
        let removed = removed_at.into_keys().collect();
        let catalog = Self {
            path: path.to_owned(),
            entries,
            max_id_seen,
            removed,
            valid_len_bytes: valid_len,
            lines,
            appender: None,
            checkpoint_lines,
            partial,
        };
        Ok((catalog, damage))
    }

    /// The checkpoint's file and head for a window's load, if there is a
    /// valid one and `reader` (the catalog, at its start) ends its covered
    /// prefix with the tail it names; `reader` is then past the prefix.
    /// Otherwise `None`, with `reader` back at the start.
    fn head_for(
        path: &Path,
        reader: &mut std::io::BufReader<File>,
    ) -> Result<Option<(File, Head)>> {
        let Ok(file) = File::open(checkpoint::path_of(path)) else {
            return Ok(None);
        };
        let Some(head) = Head::read(&file) else {
            return Ok(None);
        };
        let read_error = |e| StoreError::io("read catalog", path)(e);
        if checkpoint::holds_prefix(reader, &head.covered, PrefixCheck::Tail).map_err(read_error)? {
            return Ok(Some((file, head)));
        }
        reader.rewind().map_err(read_error)?;
        Ok(None)
    }

    /// The checkpoint of the catalog at `path` if there is a valid one and
    /// `reader` (the catalog, at its start) holds the prefix it covers, by
    /// `check`; `reader` is then past the prefix. Otherwise `None`, with
    /// `reader` back at the start.
    fn checkpoint_for(
        path: &Path,
        reader: &mut std::io::BufReader<File>,
        check: PrefixCheck,
    ) -> Result<Option<Checkpoint<'static>>> {
        let Some(checkpoint) = Checkpoint::read(&checkpoint::path_of(path)) else {
            return Ok(None);
        };
        let read_error = |e| StoreError::io("read catalog", path)(e);
        if checkpoint::holds_prefix(reader, &checkpoint.covered, check).map_err(read_error)? {
            return Ok(Some(checkpoint));
        }
        reader.rewind().map_err(read_error)?;
        Ok(None)
    }

    /// Writes a checkpoint of the whole file as it is now (the writer's
    /// catalog only), if [`CHECKPOINT_EVERY_LINES`] lines came after the last
    /// one or `now`. A checkpoint that cannot be written is left out: readers
    /// then parse more lines.
    fn checkpoint(&mut self, now: bool) {
        if self.appender.is_none()
            || (!now && self.lines < self.checkpoint_lines + CHECKPOINT_EVERY_LINES)
        {
            return;
        }
        let Ok(mut file) = File::open(&self.path) else {
            return;
        };
        let Ok(Some((covered_crc, tail_crc))) =
            checkpoint::prefix_crcs(&mut file, self.valid_len_bytes)
        else {
            return;
        };
        let checkpoint = Checkpoint {
            covered: Covered {
                len: self.valid_len_bytes,
                crc: covered_crc,
                tail_crc,
            },
            lines: self.lines,
            max_id_seen: self.max_id_seen,
            removed: Cow::Borrowed(&self.removed),
            entries: Cow::Borrowed(&self.entries),
        };
        let path = checkpoint::path_of(&self.path);
        if replace(
            &path,
            "checkpoint.new",
            &checkpoint.encode(),
            Durability::Unsynced,
        )
        .is_ok()
        {
            self.checkpoint_lines = self.lines;
        }
    }

    /// Rewrites the catalog at `path` without its unreadable lines (and without
    /// a torn last line): the readable lines, in order, into a temporary file
    /// that replaces the catalog once it is durable. Returns the lines dropped.
    /// Only for the archive's writer (`hindsight check --repair`).
    pub fn drop_damaged_lines(path: &Path) -> Result<Vec<CatalogDamage>> {
        let (_, damage) = Self::load_lenient(path, PrefixCheck::Whole)?;
        if damage.is_empty() {
            return Ok(damage);
        }
        forget_checkpoint(path)?;
        let text = std::fs::read(path).map_err(StoreError::io("read catalog", path))?;
        let mut kept = Vec::with_capacity(text.len());
        for line in text.split_inclusive(|&b| b == b'\n') {
            let whole = line.last() == Some(&b'\n');
            let body = line.strip_suffix(b"\n").unwrap_or(line);
            if whole && parse_line(body).is_ok() {
                kept.extend_from_slice(line);
            }
        }
        replace(path, "jsonl.repair", &kept, Durability::Synced)?;
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
        catalog.checkpoint(false);
        Ok(catalog)
    }

    /// Returns the path of the catalog file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Returns every live segment, by id.
    pub fn entries(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.iter()
    }

    /// Returns the entries of the segments of `table`, in id order.
    pub fn entries_of(&self, table: crate::Table) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.iter().filter(move |e| e.table == table.name())
    }

    /// Returns the entry of segment `id`.
    pub fn get(&self, id: SegmentId) -> Option<&CatalogEntry> {
        self.position(id).ok().and_then(|at| self.entries.get(at))
    }

    /// Returns the number of live segments (of a partial catalog, those it
    /// does not list too).
    pub fn len(&self) -> usize {
        self.entries.len() + self.partial.map_or(0, |partial| partial.segments)
    }

    /// Returns true if the catalog holds no segment.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Returns the number of live segments of `table` (of a partial
    /// catalog, those it does not list too).
    pub fn count_of(&self, table: crate::Table) -> usize {
        let unlisted = self.partial.map_or(0, |partial| match table {
            crate::Table::Packets => partial.packets,
            crate::Table::Flows => partial.segments - partial.packets,
        });
        self.entries_of(table).count() + unlisted
    }

    /// Whether the catalog lists every live segment with rows in `time`:
    /// always, unless it was loaded for a window
    /// ([`load_within`](Self::load_within)) that does not hold `time`.
    pub fn lists(&self, time: TimeRange) -> bool {
        self.partial.is_none_or(|partial| {
            partial.window.start_nanos <= time.start_nanos
                && time.end_nanos <= partial.window.end_nanos
        })
    }

    /// Returns the largest segment id ever added (removed ones included), if any.
    pub fn max_id(&self) -> Option<SegmentId> {
        self.max_id_seen
    }

    /// Appends a sealed segment and makes the append durable.
    pub fn add(&mut self, entry: CatalogEntry) -> Result<()> {
        self.append(&CatalogOp::Add(entry.clone()))?;
        self.max_id_seen = self.max_id_seen.max(Some(entry.segment_id()));
        match self.position(entry.segment_id()) {
            Ok(at) => {
                if let Some(slot) = self.entries.get_mut(at) {
                    *slot = entry;
                }
            }
            Err(at) => self.entries.insert(at, entry),
        }
        self.checkpoint(false);
        Ok(())
    }

    /// Records the removal of a segment and makes it durable.
    pub fn remove(&mut self, id: SegmentId) -> Result<()> {
        self.append(&CatalogOp::Remove { id: id.0 })?;
        if let Ok(at) = self.position(id) {
            self.entries.remove(at);
        }
        self.removed.insert(id);
        self.checkpoint(false);
        Ok(())
    }

    /// Where segment `id` is in `entries`, or where it would go.
    fn position(&self, id: SegmentId) -> std::result::Result<usize, usize> {
        self.entries.binary_search_by_key(&id.0, |entry| entry.id)
    }

    /// Returns true if segment `id` was removed (of a catalog loaded for a
    /// window, only the removals after its checkpoint are known).
    pub fn was_removed(&self, id: SegmentId) -> bool {
        self.removed.contains(&id)
    }

    /// The ids of removed segments this catalog still records (of one
    /// loaded for a window, those removed after its checkpoint).
    pub fn removed_ids(&self) -> impl Iterator<Item = SegmentId> + '_ {
        self.removed.iter().copied()
    }

    /// True when most of the file's lines are removals and the additions
    /// they cancel (at least [`COMPACT_MIN_DEAD_LINES`]): a recorder whose
    /// retention cycles the disk would otherwise keep a line for every
    /// segment it ever sealed, and every reader would parse them all.
    pub fn wants_compaction(&self) -> bool {
        let live = self.entries.len() as u64;
        let dead = self.lines.saturating_sub(live);
        dead >= COMPACT_MIN_DEAD_LINES && dead > live
    }

    /// Rewrites the file with one line per live segment, in id order, and a
    /// removal for each id of `keep_removed` (removed segments whose files may
    /// still be on disk, for recovery to delete) and for the largest id ever
    /// used if no live segment has it (ids are never reused). The new file
    /// replaces the old one once durable (a crash leaves one or the other
    /// whole; readers notice the new inode). Only for the archive's writer.
    pub fn compact(&mut self, keep_removed: &[SegmentId]) -> Result<()> {
        if self.appender.is_none() {
            return Err(StoreError::Io {
                action: "compact catalog",
                path: self.path.clone(),
                source: std::io::Error::other("catalog was opened read-only"),
            });
        }
        let encode = |op: &CatalogOp, text: &mut Vec<u8>| {
            serde_json::to_writer(&mut *text, op).map_err(|e| StoreError::Io {
                action: "encode catalog line",
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?;
            text.push(b'\n');
            Ok::<(), StoreError>(())
        };
        let mut removed: std::collections::BTreeSet<SegmentId> = keep_removed
            .iter()
            .copied()
            .filter(|id| self.removed.contains(id))
            .collect();
        let max_live = self.entries.last().map(CatalogEntry::segment_id);
        if let Some(max) = self.max_id_seen.filter(|&max| Some(max) > max_live) {
            removed.insert(max);
        }
        let mut text = Vec::new();
        for id in &removed {
            encode(&CatalogOp::Remove { id: id.0 }, &mut text)?;
        }
        for entry in &self.entries {
            encode(&CatalogOp::Add(entry.clone()), &mut text)?;
        }
        forget_checkpoint(&self.path)?;
        replace(&self.path, "jsonl.compact", &text, Durability::Synced)?;
        self.appender = Some(
            OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(StoreError::io("open catalog for append", &self.path))?,
        );
        self.lines = (removed.len() + self.entries.len()) as u64;
        self.removed = removed;
        self.valid_len_bytes = text.len() as u64;
        self.checkpoint(true);
        Ok(())
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
        self.lines += 1;
        Ok(())
    }
}

/// Deletes the checkpoint of the catalog at `path` before the catalog is
/// rewritten: a reader checks only the tail of the prefix a checkpoint
/// covers, so none may outlive the file it was made from, even across a
/// crash between the rewrite and the next checkpoint.
fn forget_checkpoint(path: &Path) -> Result<()> {
    let checkpoint = checkpoint::path_of(path);
    match std::fs::remove_file(&checkpoint) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(StoreError::io("remove catalog checkpoint", &checkpoint)(e))
        }
        _ => Ok(()),
    }
}

/// Whether [`replace`] syncs the new file and its directory.
#[derive(Clone, Copy, PartialEq)]
enum Durability {
    /// The file and its directory synced: the catalog itself.
    Synced,
    /// Not synced: the checkpoint, which a load passes over if it is torn.
    Unsynced,
}

/// Replaces the file at `path` with `text`: written whole to a file beside
/// it (extension `temp_extension`), renamed over it, the file and the
/// directory synced if `durability` says so (then a crash leaves the old file
/// or the new one whole). A failure before the rename leaves the old one in
/// use and removes the temporary file.
fn replace(path: &Path, temp_extension: &str, text: &[u8], durability: Durability) -> Result<()> {
    let temp = path.with_extension(temp_extension);
    let written = File::create(&temp)
        .and_then(|mut file| {
            file.write_all(text)?;
            if durability == Durability::Synced {
                file.sync_all()?;
            }
            Ok(())
        })
        .map_err(StoreError::io("write catalog", &temp))
        .and_then(|()| {
            std::fs::rename(&temp, path).map_err(StoreError::io("replace catalog", path))
        });
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(error);
    }
    if durability == Durability::Synced
        && let Some(dir) = path.parent()
    {
        crate::segment::writer::sync_dir(dir)?;
    }
    Ok(())
}

/// A table's name as an entry holds it: the names of the archive's tables
/// borrowed, not allocated for each entry; any other name copied.
fn table_name(name: &str) -> Cow<'static, str> {
    match name {
        name if name == crate::Table::Packets.name() => Cow::Borrowed(crate::Table::Packets.name()),
        name if name == crate::Table::Flows.name() => Cow::Borrowed(crate::Table::Flows.name()),
        name => Cow::Owned(name.to_owned()),
    }
}

/// Reads one catalog line. The lines this catalog writes are read by
/// [`fast_line`], field by field (`serde_json`'s internally tagged enum
/// buffers each line into a tree before it reads it; with the rest of the
/// load's changes, 100,000 segments went from 130 to 47 ms); anything else,
/// escapes or other spacing included, by `serde_json`.
fn parse_line(line: &[u8]) -> serde_json::Result<CatalogOp> {
    match fast_line(line) {
        Some(op) => Ok(op),
        None => serde_json::from_slice(line),
    }
}

/// Reads a line in exactly the form `serde_json` writes a [`CatalogOp`]
/// (fields in declaration order, no spaces, strings without escapes), or
/// returns `None` so that `serde_json` reads it. What this accepts,
/// `serde_json` reads to the same operation (a test holds it to that).
fn fast_line(line: &[u8]) -> Option<CatalogOp> {
    let mut cursor = LineCursor { rest: line };
    if cursor.literal(b"{\"op\":\"remove\",\"id\":") {
        let id = cursor.unsigned()?;
        return (cursor.literal(b"}") && cursor.rest.is_empty())
            .then_some(CatalogOp::Remove { id });
    }
    if !cursor.literal(b"{\"op\":\"add\",\"id\":") {
        return None;
    }
    let id = cursor.unsigned()?;
    cursor.expect(b",\"table\":")?;
    let table = table_name(cursor.string()?);
    cursor.expect(b",\"file\":")?;
    let file = cursor.string()?.to_owned();
    cursor.expect(b",\"rows\":")?;
    let rows = cursor.unsigned()?;
    cursor.expect(b",\"min_ts_nanos\":")?;
    let min_ts_nanos = cursor.signed()?;
    cursor.expect(b",\"max_ts_nanos\":")?;
    let max_ts_nanos = cursor.signed()?;
    cursor.expect(b",\"size_bytes\":")?;
    let size_bytes = cursor.unsigned()?;
    cursor.expect(b",\"crc32\":")?;
    let crc32 = u32::try_from(cursor.unsigned()?).ok()?;
    cursor.expect(b",\"sealed_at_nanos\":")?;
    let sealed_at_nanos = cursor.signed()?;
    let class = if cursor.literal(b",\"class\":") {
        Some(cursor.string()?.to_owned())
    } else {
        None
    };
    cursor.expect(b"}")?;
    cursor
        .rest
        .is_empty()
        .then_some(CatalogOp::Add(CatalogEntry {
            id,
            table,
            file,
            rows,
            min_ts_nanos,
            max_ts_nanos,
            size_bytes,
            crc32,
            sealed_at_nanos,
            class,
        }))
}

/// The unread part of a catalog line.
struct LineCursor<'a> {
    rest: &'a [u8],
}

impl<'a> LineCursor<'a> {
    /// Consumes `text` if the line continues with it.
    fn literal(&mut self, text: &[u8]) -> bool {
        match self.rest.strip_prefix(text) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, text: &[u8]) -> Option<()> {
        self.literal(text).then_some(())
    }

    /// A JSON number without sign, fraction or exponent that fits a `u64`.
    fn unsigned(&mut self) -> Option<u64> {
        let digits = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (number, rest) = self.rest.split_at_checked(digits)?;
        // JSON has no leading zeros: "01" is serde_json's error to report.
        if digits == 0 || (digits > 1 && number.first() == Some(&b'0')) {
            return None;
        }
        let mut value = 0u64;
        for &digit in number {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        // A fraction or an exponent: not a catalog integer.
        if matches!(rest.first(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.rest = rest;
        Some(value)
    }

    /// An integer that fits an `i64`.
    fn signed(&mut self) -> Option<i64> {
        if self.literal(b"-") {
            // serde_json reads "-0" as a float, which an integer field refuses.
            let magnitude = self.unsigned().filter(|&m| m > 0)?;
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(self.unsigned()?).ok()
        }
    }

    /// A JSON string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        let body = self.rest.strip_prefix(b"\"")?;
        let end = body
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        let (text, rest) = body.split_at_checked(end)?;
        self.rest = rest.strip_prefix(b"\"")?;
        std::str::from_utf8(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line the fast reader accepts, `serde_json` reads the same: the
    /// catalog's own lines, and each of them with every byte changed.
    #[test]
    fn fast_reader_agrees_with_serde_json() {
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for (id, class) in [(1, None), (u64::MAX, Some("dns".to_owned()))] {
            let mut add = entry(1);
            add.id = id;
            add.class = class;
            add.min_ts_nanos = if id == 1 { -5 } else { i64::MIN };
            add.max_ts_nanos = i64::MAX;
            add.crc32 = u32::MAX;
            lines.push(serde_json::to_vec(&CatalogOp::Add(add)).unwrap());
        }
        lines.push(serde_json::to_vec(&CatalogOp::Remove { id: 42 }).unwrap());
        let mut escaped = entry(7);
        escaped.file = "packets/a\"b\u{1}é.parquet".to_owned();
        lines.push(serde_json::to_vec(&CatalogOp::Add(escaped)).unwrap());
        let mut fast = 0;
        let mut compared = 0;
        for line in &lines {
            for at in 0..=line.len() {
                for byte in [
                    None,
                    Some(b'0'),
                    Some(b'9'),
                    Some(b'-'),
                    Some(b'"'),
                    Some(b' '),
                    Some(b'\\'),
                    Some(0xff),
                ] {
                    let mut changed = line.clone();
                    match (byte, at < line.len()) {
                        (None, _) => changed.truncate(at),
                        (Some(byte), true) => changed[at] = byte,
                        (Some(byte), false) => changed.push(byte),
                    }
                    let slow = serde_json::from_slice::<CatalogOp>(&changed);
                    if let Some(op) = fast_line(&changed) {
                        fast += 1;
                        let slow = slow.unwrap_or_else(|e| {
                            panic!(
                                "{}: fast read, serde_json: {e}",
                                String::from_utf8_lossy(&changed)
                            )
                        });
                        assert_eq!(format!("{op:?}"), format!("{slow:?}"));
                    }
                    compared += 1;
                }
            }
        }
        // The unchanged lines (escapes aside) take the fast path.
        assert!(fast_line(&lines[0]).is_some() && fast_line(&lines[2]).is_some());
        assert!(fast_line(&lines[3]).is_none());
        assert!(fast > 0 && compared > fast, "{fast} of {compared}");
    }

    /// What a load found, for comparing loads with and without a checkpoint.
    fn state(
        catalog: &Catalog,
    ) -> (
        Vec<CatalogEntry>,
        Option<SegmentId>,
        Vec<SegmentId>,
        u64,
        u64,
    ) {
        (
            catalog.entries().cloned().collect(),
            catalog.max_id(),
            catalog.removed_ids().collect(),
            catalog.lines,
            catalog.valid_len_bytes,
        )
    }

    /// The catalog at `path` loaded through its checkpoint, and loaded line by
    /// line (the checkpoint moved aside and back).
    fn both_loads(path: &Path) -> (Catalog, Catalog) {
        let with = Catalog::load(path).unwrap();
        let checkpoint = checkpoint::path_of(path);
        let aside = path.with_extension("aside");
        std::fs::rename(&checkpoint, &aside).unwrap();
        let without = Catalog::load(path).unwrap();
        std::fs::rename(&aside, &checkpoint).unwrap();
        (with, without)
    }

    /// The writer checkpoints every `CHECKPOINT_EVERY_LINES` lines and after a
    /// compaction; a load through the checkpoint (lines after it parsed)
    /// finds what a load of every line finds, through removals of
    /// checkpointed segments, re-additions, classes and a compaction.
    #[test]
    fn a_load_through_the_checkpoint_finds_what_every_line_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        let every = CHECKPOINT_EVERY_LINES;
        for id in 1..=every + 10 {
            let mut added = entry(id);
            if id % 7 == 0 {
                added.class = Some("dns".to_owned());
                added.table = "flows".into();
            }
            catalog.add(added).unwrap();
        }
        assert!(checkpoint::path_of(&path).exists());
        // Lines after the checkpoint: removals of checkpointed segments, one
        // of them added again, and new segments.
        for id in [3, 5, 200] {
            catalog.remove(SegmentId(id)).unwrap();
        }
        catalog.add(entry(5)).unwrap();
        catalog.add(entry(every + 20)).unwrap();
        let (with, without) = both_loads(&path);
        assert!(with.checkpoint_lines > 0 && without.checkpoint_lines == 0);
        assert_eq!(state(&with), state(&without));
        assert!(with.get(SegmentId(3)).is_none() && with.get(SegmentId(5)).is_some());
        assert!(with.was_removed(SegmentId(200)));

        // Enough removals for a compaction, which writes a checkpoint of the new file.
        for id in 6..=every {
            if id != 200 && catalog.get(SegmentId(id)).is_some() {
                catalog.remove(SegmentId(id)).unwrap();
            }
        }
        let lines_before = catalog.lines;
        catalog.compact(&[SegmentId(7)]).unwrap();
        assert!(catalog.lines < lines_before);
        assert_eq!(catalog.checkpoint_lines, catalog.lines);
        catalog.add(entry(every + 21)).unwrap();
        let (with, without) = both_loads(&path);
        assert_eq!(with.checkpoint_lines, catalog.lines - 1);
        assert_eq!(state(&with), state(&without));
        assert_eq!(state(&with), state(&catalog));
    }

    /// A load for one window reads the checkpoint blocks it needs and lists
    /// in the window what a whole load lists there, through lines after
    /// the checkpoint that remove and re-add ids of blocks outside the
    /// window; it counts the segments it does not list; a damaged block
    /// makes it a whole load.
    #[test]
    fn a_load_for_a_window_lists_in_it_what_a_whole_load_lists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        for id in 1..=1200 {
            let mut added = entry(id);
            if id % 7 == 0 {
                added.table = "flows".into();
            }
            catalog.add(added).unwrap();
        }
        // After the checkpoint of 1,024 lines (four blocks): a removal in
        // the first block and its id added again, a removal in the second.
        for id in [10, 300] {
            catalog.remove(SegmentId(id)).unwrap();
        }
        catalog.add(entry(10)).unwrap();
        drop(catalog);
        let file = File::open(checkpoint::path_of(&path)).unwrap();
        let head = Head::read(&file).unwrap();
        assert_eq!(head.blocks.len(), 4);
        let (whole, _) = Catalog::load_lenient(&path, PrefixCheck::Tail).unwrap();
        let in_window = |catalog: &Catalog, window| -> Vec<CatalogEntry> {
            catalog
                .entries()
                .filter(|e| e.overlaps(window))
                .cloned()
                .collect()
        };
        let hour = TimeRange {
            start_nanos: 100 * 700,
            end_nanos: 100 * 710,
        };
        let nothing = TimeRange {
            start_nanos: 1,
            end_nanos: 2,
        };
        for (window, listed) in [(hour, 3 * 256 + 176), (nothing, 2 * 256 + 176)] {
            let (within, damage) = Catalog::load_within(&path, window).unwrap();
            assert!(damage.is_empty());
            // The blocks of the window and of the ids the later lines name.
            assert_eq!(within.entries().count(), listed - 1, "{window:?}");
            assert_eq!(in_window(&within, window), in_window(&whole, window));
            assert_eq!(within.len(), whole.len());
            for table in [crate::Table::Packets, crate::Table::Flows] {
                assert_eq!(within.count_of(table), whole.count_of(table));
            }
            assert!(within.get(SegmentId(300)).is_none() && within.get(SegmentId(10)).is_some());
            assert_eq!(
                (within.max_id(), within.lines, within.valid_len_bytes),
                (whole.max_id(), whole.lines, whole.valid_len_bytes)
            );
            assert!(within.lists(window) && !within.lists(TimeRange::ALL));
        }
        assert!(whole.lists(TimeRange::ALL));

        // A damaged block the window needs: a whole load, the checkpoint
        // passed over.
        let mut bytes = std::fs::read(checkpoint::path_of(&path)).unwrap();
        bytes[head.blocks[2].offset as usize + 20] ^= 1;
        std::fs::write(checkpoint::path_of(&path), &bytes).unwrap();
        let (within, _) = Catalog::load_within(&path, hour).unwrap();
        assert!(within.partial.is_none() && within.checkpoint_lines == 0);
        assert_eq!(state(&within), state(&whole));
    }

    /// A damaged or torn checkpoint is passed over. A catalog line damaged
    /// inside the checkpoint's prefix is found and reported by a load that
    /// checks the whole prefix (the writer, `hindsight check`) and by a
    /// reader's load if it lies in the prefix's tail; a reader's load of a
    /// prefix whose tail is intact answers from the checkpoint, as the
    /// catalog was. A repair leaves no checkpoint of the file it replaced.
    #[test]
    fn damage_in_the_covered_lines_or_the_checkpoint_falls_back_to_the_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        // More lines than the tail a reader checks.
        for id in 1..=2 * CHECKPOINT_EVERY_LINES + 3 {
            catalog.add(entry(id)).unwrap();
        }
        drop(catalog);
        let expected = state(&Catalog::load(&path).unwrap());

        let checkpoint_path = checkpoint::path_of(&path);
        let good = std::fs::read(&checkpoint_path).unwrap();
        for damaged in [
            good[..good.len() - 1].to_vec(),
            good[..good.len() / 2].to_vec(),
            {
                let mut flipped = good.clone();
                flipped[40] ^= 1;
                flipped
            },
        ] {
            std::fs::write(&checkpoint_path, &damaged).unwrap();
            for check in [PrefixCheck::Tail, PrefixCheck::Whole] {
                let (loaded, damage) = Catalog::load_lenient(&path, check).unwrap();
                assert_eq!(loaded.checkpoint_lines, 0, "the checkpoint was passed over");
                assert_eq!((state(&loaded), damage), (expected.clone(), Vec::new()));
            }
        }
        std::fs::write(&checkpoint_path, &good).unwrap();
        let covered = Checkpoint::read(&checkpoint_path).unwrap().covered.len;
        assert!(covered > checkpoint::TAIL_BYTES, "{covered} bytes covered");
        let original = std::fs::read(&path).unwrap();

        // The file rewritten in place with one line damaged (same length),
        // once before the prefix's tail and once inside it.
        let tail_start = checkpoint::tail_start(covered);
        for (at, tail) in [(tail_start / 2, false), (covered - 100, true)] {
            let mut text = original.clone();
            let at = usize::try_from(at).unwrap();
            let line_start = text[..at].iter().rposition(|&b| b == b'\n').unwrap() + 1;
            text[line_start + 2] = b'#';
            std::fs::write(&path, &text).unwrap();
            let (whole, damage) = Catalog::load_lenient(&path, PrefixCheck::Whole).unwrap();
            assert_eq!(whole.checkpoint_lines, 0);
            assert_eq!(damage.len(), 1);
            assert_eq!(damage[0].offset, line_start as u64);
            assert_eq!(whole.len(), expected.0.len() - 1);
            assert!(Catalog::load(&path).is_err(), "the writer refuses it");
            let (reader, damage) = Catalog::load_lenient(&path, PrefixCheck::Tail).unwrap();
            if tail {
                assert_eq!(reader.checkpoint_lines, 0);
                assert_eq!(state(&reader), state(&whole));
            } else {
                assert!(reader.checkpoint_lines > 0 && damage.is_empty());
                assert_eq!(state(&reader), expected);
            }
        }

        // A repair drops the line, and with it the checkpoint of the old file.
        let dropped = Catalog::drop_damaged_lines(&path).unwrap();
        assert_eq!(dropped.len(), 1);
        assert!(!checkpoint_path.exists());
        let (reader, damage) = Catalog::load_lenient(&path, PrefixCheck::Tail).unwrap();
        assert!(damage.is_empty());
        assert_eq!(reader.len(), expected.0.len() - 1);
    }

    /// The checkpoint decoder refuses every truncation and every byte changed
    /// (it checks its CRC-32 first), and never panics on bytes whose CRC-32
    /// was made to match.
    #[test]
    fn checkpoint_decoding_refuses_damage_and_never_panics() {
        let mut entries: Vec<CatalogEntry> = (1..=3).map(entry).collect();
        entries[1].class = Some("dns".to_owned());
        let checkpoint = Checkpoint {
            covered: Covered {
                len: 1234,
                crc: 99,
                tail_crc: 98,
            },
            lines: 5,
            max_id_seen: Some(SegmentId(9)),
            removed: Cow::Owned([SegmentId(4), SegmentId(9)].into()),
            entries: Cow::Owned(entries),
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint));
        for at in 0..bytes.len() {
            assert_eq!(Checkpoint::decode(&bytes[..at]), None, "truncated at {at}");
            let mut changed = bytes.clone();
            changed[at] ^= 0x40;
            assert_eq!(Checkpoint::decode(&changed), None, "byte {at} changed");
            // The byte changed and the CRC-32s made to match: a valid
            // checkpoint or none, never a panic.
            for flip in [0x40, 0x01, 0xff] {
                let mut resealed = bytes.clone();
                resealed[at] ^= flip;
                checkpoint::reseal(&mut resealed);
                let _ = Checkpoint::decode(&resealed);
            }
        }
    }

    /// A checkpoint whose largest id is below an id it lists, or that
    /// counts more lines than its prefix has bytes, is refused (both found
    /// by the fuzz target `catalog_checkpoint`): the writer takes its next
    /// id from the one, and the load counts on from the other.
    #[test]
    fn checkpoint_decoding_refuses_a_largest_id_or_a_line_count_its_contents_contradict() {
        let with = |max_id_seen, removed: &[u64]| Checkpoint {
            covered: Covered {
                len: 1234,
                crc: 2,
                tail_crc: 3,
            },
            lines: 4,
            max_id_seen,
            removed: Cow::Owned(removed.iter().map(|&id| SegmentId(id)).collect()),
            entries: Cow::Owned((1..=3).map(entry).collect()),
        };
        for (max_id_seen, removed) in [
            (None, &[][..]),
            (Some(SegmentId(2)), &[]),
            (Some(SegmentId(3)), &[4]),
        ] {
            let checkpoint = with(max_id_seen, removed);
            assert_eq!(
                Checkpoint::decode(&checkpoint.encode()),
                None,
                "{checkpoint:?}"
            );
        }
        let checkpoint = with(Some(SegmentId(4)), &[4]);
        assert_eq!(Checkpoint::decode(&checkpoint.encode()), Some(checkpoint));
        let mut checkpoint = with(Some(SegmentId(4)), &[4]);
        checkpoint.lines = u64::MAX;
        assert_eq!(Checkpoint::decode(&checkpoint.encode()), None);
    }

    fn entry(id: u64) -> CatalogEntry {
        CatalogEntry {
            id,
            table: "packets".into(),
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
    fn compaction_keeps_live_entries_the_largest_id_and_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        for id in 1..=1500 {
            catalog.add(entry(id)).unwrap();
        }
        for id in (1..=1500).filter(|id| id % 100 != 0 && *id != 1500) {
            catalog.remove(SegmentId(id)).unwrap();
        }
        catalog.remove(SegmentId(1500)).unwrap();
        assert!(catalog.wants_compaction());
        catalog.compact(&[SegmentId(7), SegmentId(100)]).unwrap();
        assert!(!catalog.wants_compaction());
        let text = std::fs::read_to_string(&path).unwrap();
        // 14 live, 7 (removed, kept), 1500 (the largest id, removed); 100 is live.
        assert_eq!(text.lines().count(), 16, "{text}");
        catalog.add(entry(1501)).unwrap();
        drop(catalog);
        let catalog = Catalog::load(&path).unwrap();
        let ids: Vec<u64> = catalog.entries().map(|e| e.id).collect();
        let mut expected: Vec<u64> = (100..1500).step_by(100).collect();
        expected.push(1501);
        assert_eq!(ids, expected);
        assert_eq!(catalog.get(SegmentId(300)), Some(&entry(300)));
        assert!(catalog.was_removed(SegmentId(7)) && !catalog.was_removed(SegmentId(8)));
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        catalog.remove(SegmentId(1501)).unwrap();
        for id in (100..1500).step_by(100) {
            catalog.remove(SegmentId(id)).unwrap();
        }
        catalog.compact(&[]).unwrap();
        drop(catalog);
        let catalog = Catalog::load(&path).unwrap();
        assert!(catalog.is_empty());
        assert_eq!(catalog.max_id(), Some(SegmentId(1501)));
    }

    /// Lines apply in order, whatever order the ids come in: a later addition
    /// of an id replaces an earlier one, and a removal cancels only what came
    /// before it.
    #[test]
    fn lines_apply_in_order_whatever_the_ids() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.jsonl");
        let line = |op: &CatalogOp| {
            let mut text = serde_json::to_vec(op).unwrap();
            text.push(b'\n');
            text
        };
        let mut again = entry(5);
        again.rows = 1;
        let text = [
            line(&CatalogOp::Add(entry(1))),
            line(&CatalogOp::Add(entry(5))),
            line(&CatalogOp::Remove { id: 4 }),
            line(&CatalogOp::Add(entry(3))),
            line(&CatalogOp::Add(entry(4))),
            line(&CatalogOp::Add(again.clone())),
            line(&CatalogOp::Remove { id: 1 }),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let catalog = Catalog::load(&path).unwrap();
        let ids: Vec<u64> = catalog.entries().map(|e| e.id).collect();
        assert_eq!(ids, vec![3, 4, 5]);
        assert_eq!(catalog.get(SegmentId(5)), Some(&again));
        assert_eq!(catalog.get(SegmentId(1)), None);
        assert_eq!(catalog.max_id(), Some(SegmentId(5)));
        let mut catalog = Catalog::open_for_append(&path).unwrap();
        catalog.add(entry(2)).unwrap();
        catalog.remove(SegmentId(4)).unwrap();
        let ids: Vec<u64> = catalog.entries().map(|e| e.id).collect();
        assert_eq!(ids, vec![2, 3, 5]);
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
