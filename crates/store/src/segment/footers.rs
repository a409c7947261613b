//! Parsed footers of segment files, kept by a long-lived reader.
//!
//! Opening a segment reads and parses its footer and page index and checks
//! them (`SegmentReader::open`): about a tenth of a busy-address query that
//! reads one page per column of 80 segments. A segment file never changes
//! once sealed, so a reader that answers many queries (`serve`, a
//! `PacketSearch` used more than once) keeps the parsed footers here, bounded
//! in bytes (the `parquet` crate's own estimate of each footer's heap size);
//! the least recently used go first. An entry is used only while the file
//! has the length and modification time it had when its footer was read, so
//! a file replaced in place (a copy restored from object storage) is read
//! again. The pages themselves are still read from the file and checked
//! against their CRCs on every query.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use parquet::arrow::arrow_reader::ArrowReaderMetadata;

/// Parsed segment footers, at most a configured number of bytes of them.
#[derive(Debug)]
pub struct FooterCache {
    limit_bytes: AtomicUsize,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_path: HashMap<PathBuf, Entry>,
    bytes: usize,
    /// Counts uses, to find the least recently used.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    /// What the file's `stat` said when its footer was read.
    identity: (u64, Option<SystemTime>),
    metadata: ArrowReaderMetadata,
    bytes: usize,
    used: u64,
}

impl FooterCache {
    /// The bound of `serve`'s reader unless configured: about 1,500 footers
    /// of the default segments (42 kB each, parsed, on the 5 M-packet
    /// benchmark's archive).
    pub const DEFAULT_BYTES: usize = 64 << 20;

    /// A cache holding at most `limit_bytes` of footers (0: none).
    pub fn new(limit_bytes: usize) -> Self {
        Self {
            limit_bytes: AtomicUsize::new(limit_bytes),
            entries: Mutex::default(),
        }
    }

    /// Bounds the cache to `limit_bytes` from now on, dropping footers to fit.
    pub fn set_limit(&self, limit_bytes: usize) {
        self.limit_bytes.store(limit_bytes, Ordering::Relaxed);
        let mut entries = self.lock();
        Self::trim(&mut entries, 0, limit_bytes);
    }

    /// Drops the least recently used footers until `incoming` more bytes fit
    /// within `limit_bytes`.
    fn trim(entries: &mut Entries, incoming: usize, limit_bytes: usize) {
        while !entries.by_path.is_empty() && entries.bytes + incoming > limit_bytes {
            let Some(oldest) = entries
                .by_path
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(path, _)| path.clone())
            else {
                break;
            };
            if let Some(old) = entries.by_path.remove(&oldest) {
                entries.bytes -= old.bytes;
            }
        }
    }

    /// Bytes of footers held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Footers held.
    pub fn len(&self) -> usize {
        self.lock().by_path.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The footer of `path` read when the file had `identity`, if held.
    pub(crate) fn get(
        &self,
        path: &Path,
        identity: (u64, Option<SystemTime>),
    ) -> Option<ArrowReaderMetadata> {
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        let entry = entries.by_path.get_mut(path)?;
        if entry.identity != identity {
            return None;
        }
        entry.used = clock;
        Some(entry.metadata.clone())
    }

    /// Keeps the footer of `path`, read when the file had `identity`,
    /// dropping the least recently used to stay within the bound.
    pub(crate) fn put(
        &self,
        path: &Path,
        identity: (u64, Option<SystemTime>),
        metadata: &ArrowReaderMetadata,
    ) {
        let bytes = metadata.metadata().memory_size() + path.as_os_str().len();
        let limit_bytes = self.limit_bytes.load(Ordering::Relaxed);
        if bytes > limit_bytes {
            return;
        }
        let mut entries = self.lock();
        entries.clock += 1;
        let used = entries.clock;
        if let Some(old) = entries.by_path.remove(path) {
            entries.bytes -= old.bytes;
        }
        Self::trim(&mut entries, bytes, limit_bytes);
        entries.bytes += bytes;
        entries.by_path.insert(
            path.to_owned(),
            Entry {
                identity,
                metadata: metadata.clone(),
                bytes,
                used,
            },
        );
    }
}
