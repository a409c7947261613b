//! Where an archive's sealed segments are copied (`[archive] object_store`
//! in its `config.toml`), and the log of the copies made: what the archive
//! knows of its object store without a client of one (`hindsight_sql::objects`
//! copies and reads).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::CatalogEntry;

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
