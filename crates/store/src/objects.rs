//! Where an archive's sealed segments are copied (`[archive] object_store`
//! in its `config.toml`), and the log of the copies made: what the archive
//! knows of its object store without a client of one (`hindsight_sql::objects`
//! copies and reads).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use hindsight_model::{Addr16, SegmentId};

use crate::segment::writer::sync_dir;
use crate::{Archive, CatalogEntry, SegmentReader, StoreError, Table};

/// The file of an archive that lists the segments copied.
pub const OBJECTS_LOG: &str = "objects.log";

/// Where an archive's segments are copied: `[archive]` of its `config.toml`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectStoreSettings {
    /// `s3://bucket/prefix`.
    pub url: String,
    /// The S3 endpoint, for a store other than AWS (`http://127.0.0.1:8333`).
    pub endpoint: Option<String>,
    /// The region (default `us-east-1`).
    pub region: Option<String>,
    /// Most bytes of local segment files (0: no bound): beyond it the local
    /// files of the oldest copied segments are removed ([`expire_local`]).
    pub local_max_bytes: u64,
}

/// The segments an archive has copied: id → (bytes, CRC-32).
pub type CopyLog = BTreeMap<u64, (u64, u32)>;

/// The segments the archive at `root` has copied.
pub fn read_log(root: &Path) -> CopyLog {
    let Ok(text) = std::fs::read_to_string(root.join(OBJECTS_LOG)) else {
        return BTreeMap::new();
    };
    // A line cut short by a crash is not a copy.
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let id = fields.next()?.parse().ok()?;
            let _file = fields.next()?;
            let size = fields.next()?.parse().ok()?;
            let crc = fields.next()?.parse().ok()?;
            fields.next().is_none().then_some((id, (size, crc)))
        })
        .collect()
}

/// Whether `log` lists a copy of `entry` whole: the catalog's size and CRC-32.
pub fn has_copy(log: &CopyLog, entry: &CatalogEntry) -> bool {
    log.get(&entry.id) == Some(&(entry.size_bytes, entry.crc32))
}

/// Enters `entry` in the log of copies, durably.
pub fn append_log(root: &Path, entry: &CatalogEntry) -> std::io::Result<()> {
    let path = root.join(OBJECTS_LOG);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(
        file,
        "{}\t{}\t{}\t{}",
        entry.id, entry.file, entry.size_bytes, entry.crc32
    )?;
    file.sync_data()
}

/// The directory of the addresses of `packets` segments held only as copies
/// (their local file removed): retention removes their postings with them.
pub const COPY_ONLY_DIR: &str = "copy-only";

fn copy_only_path(root: &Path, id: SegmentId) -> PathBuf {
    root.join(COPY_ONLY_DIR).join(format!("{}.addresses", id.0))
}

/// The addresses kept for segment `id`, held only as a copy, if they are.
pub fn copy_only_addresses(root: &Path, id: SegmentId) -> Option<Vec<Addr16>> {
    let bytes = std::fs::read(copy_only_path(root, id)).ok()?;
    if bytes.len() % 16 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(16)
            .map(|chunk| Addr16(chunk.try_into().unwrap_or([0; 16])))
            .collect(),
    )
}

/// Forgets the addresses kept for segment `id` (it has expired).
pub fn forget_copy_only(root: &Path, id: SegmentId) {
    let _ = std::fs::remove_file(copy_only_path(root, id));
}

/// Removes the local files of the oldest copied segments while the local
/// segment files take more than `max_bytes`: only segments whose copy the
/// log lists with the catalog's size and CRC-32, never the newest segment of
/// a table, and a `packets` segment's addresses kept first (durably), so that
/// retention can remove its postings. The catalog keeps every entry; queries
/// read such segments from their copies. Returns the segments whose local
/// file was removed.
pub fn expire_local(archive: &Archive, max_bytes: u64) -> crate::Result<Vec<SegmentId>> {
    if max_bytes == 0 {
        return Ok(Vec::new());
    }
    let root = archive.root();
    let copied = read_log(root);
    let mut local: Vec<&CatalogEntry> = archive
        .catalog()
        .entries()
        .filter(|entry| archive.segment_file_problem(entry).is_none())
        .collect();
    let mut total: u64 = local.iter().map(|entry| entry.size_bytes).sum();
    local.sort_by_key(|entry| (entry.max_ts_nanos, entry.id));
    let newest: BTreeSet<u64> = Table::ALL
        .iter()
        .filter_map(|table| {
            archive
                .catalog()
                .entries_of(*table)
                .max_by_key(|entry| (entry.max_ts_nanos, entry.id))
                .map(|entry| entry.id)
        })
        .collect();
    let mut removed = Vec::new();
    for entry in local {
        if total <= max_bytes {
            break;
        }
        if newest.contains(&entry.id) || !has_copy(&copied, entry) {
            continue;
        }
        let path = archive.segment_path(entry);
        if entry.table == Table::Packets.name() {
            let addresses: Vec<u8> = SegmentReader::open(&path)?
                .address_postings()?
                .into_iter()
                .flat_map(|(address, _)| address.0)
                .collect();
            let kept = copy_only_path(root, entry.segment_id());
            let dir = root.join(COPY_ONLY_DIR);
            std::fs::create_dir_all(&dir).map_err(StoreError::io("create", &dir))?;
            let temp = kept.with_extension("tmp");
            let write = || -> std::io::Result<()> {
                let mut file = std::fs::File::create(&temp)?;
                file.write_all(&addresses)?;
                file.sync_all()?;
                std::fs::rename(&temp, &kept)
            };
            write().map_err(StoreError::io("keep the addresses of", &kept))?;
            sync_dir(&dir)?;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("remove the local file", &path)(e)),
        }
        total -= entry.size_bytes;
        removed.push(entry.segment_id());
    }
    Ok(removed)
}
