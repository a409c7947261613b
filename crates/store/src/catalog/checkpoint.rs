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
//! Layout (integers little-endian), in three parts, each under its own CRC-32:
//! - the head: the magic `HSCKPT03`; the covered prefix's length (u64), its
//!   CRC-32 (u32) and the CRC-32 of its last [`TAIL_BYTES`] (u32); the lines
//!   in that prefix (u64); the largest id (u8 flag, u64); the number of
//!   removed ids (u64); the number of blocks (u64); then the directory, a row
//!   per block: its first and last id, the smallest `min_ts` and the largest
//!   `max_ts` of its entries, its entries and the `packets` ones among them
//!   (u32 each), its offset and length in the file (u64 each) and its CRC-32
//!   (u32); then the CRC-32 of the head (u32);
//! - the removed ids (u64 each), then their CRC-32 (u32);
//! - the blocks, in id order, each of at most [`BLOCK_ENTRIES`] live entries
//!   (for each: id, rows, min_ts, max_ts, size, crc32 (u32), sealed_at, table
//!   (u8 length, bytes), file (u32 length, bytes), class (u8 flag, u32
//!   length, bytes)), one after the other to the end of the file.
//!
//! A reader that asks about one time window ([`Head::read`], then
//! [`Head::read_block`]) reads the head and only the blocks whose time span
//! overlaps it or that hold an id a later line names: a few kilobytes of an
//! archive of 16,000 segments, where reading the whole checkpoint into fresh
//! pages cost a one-hour question 12% of its time. Checkpoints of the earlier
//! layouts (`HSCKPT01`, `HSCKPT02`) are passed over, and the writer replaces
//! them.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use hindsight_model::SegmentId;

use super::CatalogEntry;
use crate::segment::reader::TimeRange;

/// Lines appended after the last checkpoint from which the writer writes a new one.
pub const CHECKPOINT_EVERY_LINES: u64 = 256;

const MAGIC: &[u8; 8] = b"HSCKPT03";

/// Live entries in one block of the checkpoint.
pub const BLOCK_ENTRIES: usize = 256;

/// The bytes at the end of the covered prefix whose CRC-32 a reader checks.
pub const TAIL_BYTES: u64 = 64 * 1024;

/// The head's fields before the directory.
const HEAD_FIXED: usize = 8 + 8 + 4 + 4 + 8 + 1 + 8 + 8 + 8;

/// One row of the directory.
const ROW_BYTES: usize = 8 * 4 + 4 + 4 + 8 + 8 + 4;

/// What a reader first reads of a checkpoint, in the hope that it holds the
/// whole head (the head of a checkpoint of 250,000 segments).
const HEAD_GUESS: usize = 64 * 1024;

/// How a load checks that the catalog file still holds the prefix a
/// checkpoint covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixCheck {
    /// Its length and the CRC-32 of its last [`TAIL_BYTES`]: readers.
    Tail,
    /// The CRC-32 of all of it: the writer and `hindsight check`.
    Whole,
}

/// The prefix of `catalog.jsonl` a checkpoint covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Covered {
    /// Its bytes.
    pub len: u64,
    /// Their CRC-32.
    pub crc: u32,
    /// The CRC-32 of the last [`TAIL_BYTES`] of them.
    pub tail_crc: u32,
}

/// The catalog as of a prefix of its file: borrowed from the writer's catalog
/// when it writes one, owned when a load reads one whole.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Checkpoint<'a> {
    pub covered: Covered,
    /// Lines in the covered bytes.
    pub lines: u64,
    pub max_id_seen: Option<SegmentId>,
    pub removed: Cow<'a, BTreeSet<SegmentId>>,
    /// The live entries, in id order.
    pub entries: Cow<'a, [CatalogEntry]>,
}

/// A block's row in the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Block {
    pub first_id: u64,
    pub last_id: u64,
    pub min_ts_nanos: i64,
    pub max_ts_nanos: i64,
    /// Its entries, and those of the `packets` table among them.
    pub entries: u32,
    pub packets: u32,
    /// Where its bytes are in the file, and their CRC-32.
    pub offset: u64,
    pub len: u64,
    crc: u32,
}

impl Block {
    /// Whether the block may hold an entry of a segment with rows in `time`.
    pub fn overlaps(&self, time: TimeRange) -> bool {
        time.overlaps(self.min_ts_nanos, self.max_ts_nanos)
    }

    /// Whether `id` lies in the block's span of ids.
    pub fn spans(&self, id: SegmentId) -> bool {
        (self.first_id..=self.last_id).contains(&id.0)
    }
}

/// A checkpoint's head: what it covers and where its blocks are.
#[derive(Debug, PartialEq)]
pub(super) struct Head {
    pub covered: Covered,
    pub lines: u64,
    pub max_id_seen: Option<SegmentId>,
    pub blocks: Vec<Block>,
    /// Where the removed ids are, and how many.
    removed_at: u64,
    removed_count: u64,
}

/// Where the checkpoint of the catalog at `catalog` is.
pub(super) fn path_of(catalog: &Path) -> PathBuf {
    catalog.with_extension("checkpoint")
}

impl Checkpoint<'_> {
    /// Encodes the checkpoint.
    pub fn encode(&self) -> Vec<u8> {
        let mut blocks = Vec::with_capacity(self.entries.len() * 96);
        let mut rows = Vec::new();
        for chunk in self.entries.chunks(BLOCK_ENTRIES) {
            let start = blocks.len();
            for entry in chunk {
                encode_entry(entry, &mut blocks);
            }
            rows.push(Block {
                first_id: chunk[0].id,
                last_id: chunk[chunk.len() - 1].id,
                min_ts_nanos: chunk.iter().map(|e| e.min_ts_nanos).min().unwrap_or(0),
                max_ts_nanos: chunk.iter().map(|e| e.max_ts_nanos).max().unwrap_or(0),
                entries: chunk.len() as u32,
                packets: packets_in(chunk) as u32,
                offset: start as u64,
                len: (blocks.len() - start) as u64,
                crc: crc32fast::hash(&blocks[start..]),
            });
        }
        let head_len = HEAD_FIXED + rows.len() * ROW_BYTES + 4;
        let blocks_at = (head_len + self.removed.len() * 8 + 4) as u64;
        let mut out = Vec::with_capacity(blocks_at as usize + blocks.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.covered.len.to_le_bytes());
        out.extend_from_slice(&self.covered.crc.to_le_bytes());
        out.extend_from_slice(&self.covered.tail_crc.to_le_bytes());
        out.extend_from_slice(&self.lines.to_le_bytes());
        out.push(u8::from(self.max_id_seen.is_some()));
        out.extend_from_slice(&self.max_id_seen.map_or(0, |id| id.0).to_le_bytes());
        out.extend_from_slice(&(self.removed.len() as u64).to_le_bytes());
        out.extend_from_slice(&(rows.len() as u64).to_le_bytes());
        for row in &rows {
            for value in [row.first_id, row.last_id] {
                out.extend_from_slice(&value.to_le_bytes());
            }
            for value in [row.min_ts_nanos, row.max_ts_nanos] {
                out.extend_from_slice(&value.to_le_bytes());
            }
            out.extend_from_slice(&row.entries.to_le_bytes());
            out.extend_from_slice(&row.packets.to_le_bytes());
            out.extend_from_slice(&(blocks_at + row.offset).to_le_bytes());
            out.extend_from_slice(&row.len.to_le_bytes());
            out.extend_from_slice(&row.crc.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        let removed_at = out.len();
        for id in self.removed.iter() {
            out.extend_from_slice(&id.0.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[removed_at..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&blocks);
        out
    }
}

fn encode_entry(entry: &CatalogEntry, out: &mut Vec<u8>) {
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

impl Head {
    /// The head's length, from the first [`HEAD_FIXED`] bytes of a
    /// checkpoint; `None` if they are not a head of this layout.
    fn len_of(bytes: &[u8]) -> Option<usize> {
        if bytes.len() < HEAD_FIXED || &bytes[..MAGIC.len()] != MAGIC {
            return None;
        }
        let blocks = u64::from_le_bytes(bytes[HEAD_FIXED - 8..HEAD_FIXED].try_into().ok()?);
        usize::try_from(blocks)
            .ok()?
            .checked_mul(ROW_BYTES)?
            .checked_add(HEAD_FIXED + 4)
    }

    /// Decodes the head at the start of `bytes` of a checkpoint `file_len`
    /// bytes long; `None` if it is not whole, its CRC-32 does not match, or
    /// its directory does not tile the rest of the file (never a panic).
    fn decode(bytes: &[u8], file_len: u64) -> Option<Self> {
        let head_len = Self::len_of(bytes)?;
        let (body, crc) = bytes.get(..head_len)?.split_last_chunk::<4>()?;
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return None;
        }
        let mut cursor = Cursor {
            rest: &body[MAGIC.len()..],
        };
        let covered = Covered {
            len: cursor.u64()?,
            crc: cursor.u32()?,
            tail_crc: cursor.u32()?,
        };
        let lines = cursor.u64()?;
        let has_max = cursor.u8()?;
        let max = cursor.u64()?;
        let max_id_seen = match has_max {
            0 => None,
            1 => Some(SegmentId(max)),
            _ => return None,
        };
        let removed_count = cursor.u64()?;
        let block_count = cursor.u64()?;
        let removed_at = head_len as u64;
        // The blocks follow the removed ids and their CRC-32, one after
        // the other, to the end of the file.
        let mut next = removed_count.checked_mul(8)?.checked_add(removed_at + 4)?;
        let mut blocks = Vec::with_capacity(usize::try_from(block_count).ok()?);
        for _ in 0..block_count {
            let block = Block {
                first_id: cursor.u64()?,
                last_id: cursor.u64()?,
                min_ts_nanos: cursor.u64()? as i64,
                max_ts_nanos: cursor.u64()? as i64,
                entries: cursor.u32()?,
                packets: cursor.u32()?,
                offset: cursor.u64()?,
                len: cursor.u64()?,
                crc: cursor.u32()?,
            };
            let ordered = blocks
                .last()
                .is_none_or(|last: &Block| last.last_id < block.first_id);
            if block.offset != next
                || !ordered
                || block.first_id > block.last_id
                || block.min_ts_nanos > block.max_ts_nanos
                || block.entries == 0
                || block.packets > block.entries
                // An entry takes at least 58 bytes: the count cannot ask
                // for more memory than the block's bytes could hold.
                || u64::from(block.entries) * 58 > block.len
            {
                return None;
            }
            next = next.checked_add(block.len)?;
            blocks.push(block);
        }
        // The largest id is at least every id listed (the removed ones are
        // checked when they are read): a writer that trusted a lower one
        // would give a new segment an id already used. And every line of
        // the prefix holds at least its newline: a count beyond that would
        // overflow as the lines after it are counted on.
        let largest = blocks.last().map(|block| SegmentId(block.last_id));
        if next != file_len || largest > max_id_seen || lines > covered.len {
            return None;
        }
        Some(Self {
            covered,
            lines,
            max_id_seen,
            blocks,
            removed_at,
            removed_count,
        })
    }

    /// Reads the head of the checkpoint in `file`; `None` if it is not a
    /// whole and valid head of this layout.
    pub fn read(file: &File) -> Option<Self> {
        let file_len = file.metadata().ok()?.len();
        let mut bytes = vec![0u8; usize::try_from(file_len).ok()?.min(HEAD_GUESS)];
        file.read_exact_at(&mut bytes, 0).ok()?;
        let head_len = Self::len_of(&bytes)?;
        if head_len > bytes.len() {
            if head_len as u64 > file_len {
                return None;
            }
            bytes.resize(head_len, 0);
            file.read_exact_at(&mut bytes, 0).ok()?;
        }
        Self::decode(&bytes, file_len)
    }

    /// Reads the entries of `block` from `file`; `None` if they do not pass
    /// their CRC-32 or do not agree with the block's row.
    pub fn read_block(file: &File, block: &Block) -> Option<Vec<CatalogEntry>> {
        let mut bytes = vec![0u8; usize::try_from(block.len).ok()?];
        file.read_exact_at(&mut bytes, block.offset).ok()?;
        decode_block(&bytes, block)
    }

    /// The removed ids, from `bytes` of the whole checkpoint.
    fn removed(&self, bytes: &[u8]) -> Option<BTreeSet<SegmentId>> {
        let start = usize::try_from(self.removed_at).ok()?;
        let end = usize::try_from(self.removed_count)
            .ok()?
            .checked_mul(8)?
            .checked_add(start)?;
        let (ids, crc) = bytes.get(start..end.checked_add(4)?)?.split_at(end - start);
        if crc32fast::hash(ids) != u32::from_le_bytes(crc.try_into().ok()?) {
            return None;
        }
        let removed: BTreeSet<SegmentId> = ids
            .chunks_exact(8)
            .map(|id| SegmentId(u64::from_le_bytes(id.try_into().unwrap_or_default())))
            .collect();
        (removed.last().copied() <= self.max_id_seen).then_some(removed)
    }
}

/// The entries of the `packets` table among `entries` (a block's row counts them).
fn packets_in(entries: &[CatalogEntry]) -> usize {
    entries
        .iter()
        .filter(|e| e.table == crate::Table::Packets.name())
        .count()
}

/// The entries of `block` from its bytes; `None` if they do not pass their
/// CRC-32 or do not agree with its row (ids, time span, counts).
fn decode_block(bytes: &[u8], block: &Block) -> Option<Vec<CatalogEntry>> {
    if crc32fast::hash(bytes) != block.crc {
        return None;
    }
    let mut cursor = Cursor { rest: bytes };
    let mut entries: Vec<CatalogEntry> = Vec::with_capacity(block.entries as usize);
    for _ in 0..block.entries {
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
        let in_order = entries.last().is_none_or(|last| last.id < id);
        let in_block = block.spans(SegmentId(id))
            && block.min_ts_nanos <= min_ts_nanos
            && max_ts_nanos <= block.max_ts_nanos;
        if !in_order || !in_block {
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
    let packets = packets_in(&entries);
    let ends = entries.first().map(|e| e.id) == Some(block.first_id)
        && entries.last().map(|e| e.id) == Some(block.last_id);
    (cursor.rest.is_empty() && ends && packets == block.packets as usize).then_some(entries)
}

impl Checkpoint<'static> {
    /// Decodes [`encode`](Self::encode)'s output; `None` if the bytes are not
    /// a whole checkpoint whose CRC-32s match (never a panic).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let head = Head::decode(bytes, bytes.len() as u64)?;
        let removed = head.removed(bytes)?;
        let total: usize = head.blocks.iter().map(|b| b.entries as usize).sum();
        let mut entries = Vec::with_capacity(total);
        for block in &head.blocks {
            let start = usize::try_from(block.offset).ok()?;
            let end = start.checked_add(usize::try_from(block.len).ok()?)?;
            entries.extend(decode_block(bytes.get(start..end)?, block)?);
        }
        Some(Self {
            covered: head.covered,
            lines: head.lines,
            max_id_seen: head.max_id_seen,
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

/// Makes every CRC-32 of a checkpoint's bytes match what they cover, as far
/// as its directory can be followed: for tests that change a field and
/// want the decoder to see the change, not a CRC-32 that fails.
#[cfg(test)]
pub(super) fn reseal(bytes: &mut [u8]) {
    let Some(head_len) = Head::len_of(bytes).filter(|&len| len <= bytes.len()) else {
        return;
    };
    let field = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let set_crc = |bytes: &mut [u8], start: u64, end: u64, at: usize| {
        if start <= end && end <= bytes.len() as u64 && at + 4 <= bytes.len() {
            let crc = crc32fast::hash(&bytes[start as usize..end as usize]);
            bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
    };
    let removed_end = field(bytes, HEAD_FIXED - 16)
        .saturating_mul(8)
        .saturating_add(head_len as u64);
    if let Ok(at) = usize::try_from(removed_end) {
        set_crc(bytes, head_len as u64, removed_end, at);
    }
    for row in (HEAD_FIXED..head_len - 4).step_by(ROW_BYTES) {
        let (offset, len) = (field(bytes, row + 40), field(bytes, row + 48));
        set_crc(bytes, offset, offset.saturating_add(len), row + 56);
    }
    set_crc(bytes, 0, head_len as u64 - 4, head_len - 4);
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

/// Whether `reader` (a catalog file) holds the prefix `covered`, by
/// `check`; `reader` is then just past it, at any position otherwise.
pub(super) fn holds_prefix(
    reader: &mut (impl Read + Seek),
    covered: &Covered,
    check: PrefixCheck,
) -> std::io::Result<bool> {
    Ok(match check {
        PrefixCheck::Whole => crc_of_prefix(reader, covered.len)? == Some(covered.crc),
        PrefixCheck::Tail => {
            let start = tail_start(covered.len);
            reader.seek(SeekFrom::Start(start))?;
            crc_of_prefix(reader, covered.len - start)? == Some(covered.tail_crc)
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
}
