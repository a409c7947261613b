//! The catalog's checkpoint (`catalog.checkpoint`): the catalog as of a prefix
//! of `catalog.jsonl`, in a binary form that loads without parsing a line.
//!
//! A reader that finds a checkpoint takes the prefix it covers from it and
//! parses only the lines after it: the lines of an archive of 100,000
//! segments cost 36.5 ms to parse, and every `hindsight` process paid for
//! them. The checkpoint is used only if its own bytes pass their CRC-32 and
//! the file still holds the prefix it was made from. How that is checked
//! depends on who loads ([`PrefixCheck`]):
//! - a reader checks the prefix's length and the CRC-32 of its last
//!   [`TAIL_BYTES`] (a cost that does not grow with the archive). The
//!   entries it answers from are the checkpoint's, verified by their own
//!   CRC-32; the prefix's other bytes never become an answer. A rewrite of
//!   the catalog (a compaction, a repair) first deletes the checkpoint, so a
//!   checkpoint is stale only if something outside hindsight rewrote the
//!   file, and then its tail differs;
//! - the writer and `hindsight check` read the whole prefix through its
//!   CRC-32, so a line damaged inside it is still found and reported.
//!
//! Otherwise the catalog is read line by line, as without one: a damaged,
//! torn or stale checkpoint costs only the time it saved. Only the writer
//! writes it (a file beside the catalog, renamed over the old one), at most
//! every [`CHECKPOINT_EVERY_LINES`] appended lines and after a compaction;
//! it is not synced (a torn one is ignored).
//!
//! Layout (integers little-endian): the magic `HSCKPT02`; the covered prefix's
//! length (u64), its CRC-32 (u32) and the CRC-32 of its last [`TAIL_BYTES`]
//! (u32); the lines in that prefix (u64); the largest id (u8 flag, u64); the
//! removed ids (u64 count, u64 each); the live entries (u64 count; for each:
//! id, rows, min_ts, max_ts, size, crc32 (u32), sealed_at, table (u8 length,
//! bytes), file (u32 length, bytes), class (u8 flag, u32 length, bytes));
//! then the CRC-32 of everything before it (u32). A checkpoint of the first
//! layout (`HSCKPT01`, without the tail's CRC-32) is passed over, and the
//! writer replaces it.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use hindsight_model::SegmentId;

use super::CatalogEntry;

/// Lines appended after the last checkpoint from which the writer writes a new one.
pub const CHECKPOINT_EVERY_LINES: u64 = 256;

const MAGIC: &[u8; 8] = b"HSCKPT02";

/// The bytes at the end of the covered prefix whose CRC-32 a reader checks.
pub const TAIL_BYTES: u64 = 64 * 1024;

/// How a load checks that the catalog file still holds the prefix a
/// checkpoint covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixCheck {
    /// Its length and the CRC-32 of its last [`TAIL_BYTES`]: readers.
    Tail,
    /// The CRC-32 of all of it: the writer and `hindsight check`.
    Whole,
}

/// The catalog as of a prefix of its file: borrowed from the writer's catalog
/// when it writes one, owned when a load reads one.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Checkpoint<'a> {
    /// Bytes of `catalog.jsonl` it covers, their CRC-32, and the CRC-32 of
    /// the last [`TAIL_BYTES`] of them.
    pub covered_len: u64,
    pub covered_crc: u32,
    pub tail_crc: u32,
    /// Lines in those bytes.
    pub lines: u64,
    pub max_id_seen: Option<SegmentId>,
    pub removed: Cow<'a, BTreeSet<SegmentId>>,
    /// The live entries, in id order.
    pub entries: Cow<'a, [CatalogEntry]>,
}

/// Where the checkpoint of the catalog at `catalog` is.
pub(super) fn path_of(catalog: &Path) -> PathBuf {
    catalog.with_extension("checkpoint")
}

impl Checkpoint<'_> {
    /// Encodes the checkpoint.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entries.len() * 96);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.covered_len.to_le_bytes());
        out.extend_from_slice(&self.covered_crc.to_le_bytes());
        out.extend_from_slice(&self.tail_crc.to_le_bytes());
        out.extend_from_slice(&self.lines.to_le_bytes());
        out.push(u8::from(self.max_id_seen.is_some()));
        out.extend_from_slice(&self.max_id_seen.map_or(0, |id| id.0).to_le_bytes());
        out.extend_from_slice(&(self.removed.len() as u64).to_le_bytes());
        for id in self.removed.iter() {
            out.extend_from_slice(&id.0.to_le_bytes());
        }
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for entry in self.entries.iter() {
            for value in [entry.id, entry.rows] {
                out.extend_from_slice(&value.to_le_bytes());
            }
            for value in [entry.min_ts_nanos, entry.max_ts_nanos] {
                out.extend_from_slice(&value.to_le_bytes());
            }
            out.extend_from_slice(&entry.size_bytes.to_le_bytes());
            out.extend_from_slice(&entry.crc32.to_le_bytes());
            out.extend_from_slice(&entry.sealed_at_nanos.to_le_bytes());
            let table = entry.table.as_bytes();
            let table = &table[..table.len().min(usize::from(u8::MAX))];
            out.push(table.len() as u8);
            out.extend_from_slice(table);
            out.extend_from_slice(&(entry.file.len() as u32).to_le_bytes());
            out.extend_from_slice(entry.file.as_bytes());
            match &entry.class {
                Some(class) => {
                    out.push(1);
                    out.extend_from_slice(&(class.len() as u32).to_le_bytes());
                    out.extend_from_slice(class.as_bytes());
                }
                None => out.push(0),
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

impl Checkpoint<'static> {
    /// Decodes [`encode`](Self::encode)'s output; `None` if the bytes are not
    /// a whole checkpoint whose CRC-32 matches (never a panic).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (body, crc) = bytes.split_last_chunk::<4>()?;
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return None;
        }
        let mut cursor = Cursor { rest: body };
        if cursor.take(MAGIC.len())? != MAGIC {
            return None;
        }
        let covered_len = cursor.u64()?;
        let covered_crc = cursor.u32()?;
        let tail_crc = cursor.u32()?;
        let lines = cursor.u64()?;
        let has_max = cursor.u8()?;
        let max = cursor.u64()?;
        let max_id_seen = match has_max {
            0 => None,
            1 => Some(SegmentId(max)),
            _ => return None,
        };
        let removed_count = cursor.count(8)?;
        let mut removed = BTreeSet::new();
        for _ in 0..removed_count {
            removed.insert(SegmentId(cursor.u64()?));
        }
        // An entry takes at least 58 bytes: the count cannot ask for more
        // memory than the bytes could hold.
        let entry_count = cursor.count(58)?;
        let mut entries = Vec::with_capacity(entry_count);
        for _ in 0..entry_count {
            let id = cursor.u64()?;
            let rows = cursor.u64()?;
            let min_ts_nanos = cursor.u64()? as i64;
            let max_ts_nanos = cursor.u64()? as i64;
            let size_bytes = cursor.u64()?;
            let crc32 = cursor.u32()?;
            let sealed_at_nanos = cursor.u64()? as i64;
            let table_len = usize::from(cursor.u8()?);
            let table = super::table_name(std::str::from_utf8(cursor.take(table_len)?).ok()?);
            let file_len = cursor.u32()? as usize;
            let file = std::str::from_utf8(cursor.take(file_len)?).ok()?.to_owned();
            let class = match cursor.u8()? {
                0 => None,
                1 => {
                    let len = cursor.u32()? as usize;
                    Some(std::str::from_utf8(cursor.take(len)?).ok()?.to_owned())
                }
                _ => return None,
            };
            if entries
                .last()
                .is_some_and(|last: &CatalogEntry| last.id >= id)
            {
                return None;
            }
            entries.push(CatalogEntry {
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
            });
        }
        // The largest id is at least every id listed: a writer that trusted
        // a lower one would give a new segment an id already used.
        let largest_listed = entries
            .last()
            .map(|entry: &CatalogEntry| entry.segment_id())
            .max(removed.last().copied());
        // And every line of the prefix holds at least its newline: a count
        // beyond that would overflow as the lines after it are counted on.
        if largest_listed > max_id_seen || lines > covered_len {
            return None;
        }
        cursor.rest.is_empty().then_some(Self {
            covered_len,
            covered_crc,
            tail_crc,
            lines,
            max_id_seen,
            removed: Cow::Owned(removed),
            entries: Cow::Owned(entries),
        })
    }

    /// Reads the checkpoint at `path`; `None` if there is none or it is not
    /// whole and valid.
    pub fn read(path: &Path) -> Option<Self> {
        Self::decode(&std::fs::read(path).ok()?)
    }
}

/// The CRC-32 of the first `len` bytes read from `reader`; `None` if it ends
/// before them.
pub(super) fn crc_of_prefix(reader: &mut impl Read, len: u64) -> std::io::Result<Option<u32>> {
    Ok(hash_next(reader, len)?.map(crc32fast::Hasher::finalize))
}

/// The CRC-32s a checkpoint keeps of the first `len` bytes read from
/// `reader` (all of them, and their last [`TAIL_BYTES`]), in one pass;
/// `None` if it ends before them.
pub(super) fn prefix_crcs(reader: &mut impl Read, len: u64) -> std::io::Result<Option<(u32, u32)>> {
    let head_len = tail_start(len);
    let Some(mut whole) = hash_next(reader, head_len)? else {
        return Ok(None);
    };
    let Some(tail) = hash_next(reader, len - head_len)? else {
        return Ok(None);
    };
    whole.combine(&tail);
    Ok(Some((whole.finalize(), tail.finalize())))
}

/// The next `len` bytes read from `reader` through a CRC-32; `None` if it
/// ends before them.
fn hash_next(reader: &mut impl Read, len: u64) -> std::io::Result<Option<crc32fast::Hasher>> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; (1 << 20).min(usize::try_from(len).unwrap_or(usize::MAX))];
    let mut left = len;
    while left > 0 {
        let want = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        let read = reader.read(&mut buffer[..want])?;
        if read == 0 {
            return Ok(None);
        }
        hasher.update(&buffer[..read]);
        left -= read as u64;
    }
    Ok(Some(hasher))
}

/// Whether `reader` (a catalog file) holds the prefix `checkpoint` covers, by
/// `check`; `reader` is then just past it, at any position otherwise.
pub(super) fn holds_prefix(
    reader: &mut (impl Read + Seek),
    checkpoint: &Checkpoint<'_>,
    check: PrefixCheck,
) -> std::io::Result<bool> {
    Ok(match check {
        PrefixCheck::Whole => {
            crc_of_prefix(reader, checkpoint.covered_len)? == Some(checkpoint.covered_crc)
        }
        PrefixCheck::Tail => {
            let start = tail_start(checkpoint.covered_len);
            reader.seek(SeekFrom::Start(start))?;
            crc_of_prefix(reader, checkpoint.covered_len - start)? == Some(checkpoint.tail_crc)
        }
    })
}

/// Where the last [`TAIL_BYTES`] of a prefix of `len` bytes start.
pub(super) fn tail_start(len: u64) -> u64 {
    len.saturating_sub(TAIL_BYTES)
}

struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A count of items of at least `min_bytes` each, no more than the bytes left could hold.
    fn count(&mut self, min_bytes: usize) -> Option<usize> {
        let count = usize::try_from(self.u64()?).ok()?;
        (count <= self.rest.len() / min_bytes).then_some(count)
    }
}
