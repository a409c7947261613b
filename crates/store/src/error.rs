//! Errors of the archive store.

use std::path::PathBuf;

/// An error of the archive store: segment files, the catalog, the archive directory.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating-system I/O error on `path`.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done ("create segment", "fsync", ...).
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A Parquet encoding or decoding error in a segment file.
    #[error("segment {}: {source}", path.display())]
    Parquet {
        /// The segment file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A file of the archive holds bytes that cannot be what hindsight wrote.
    #[error("corrupt {}: at offset {offset}: {reason}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damage within the file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A segment written by a newer hindsight, in a format this build does not know.
    #[error(
        "segment {} has format version {found}; this build reads versions up to {supported} \
         (upgrade hindsight to read it)",
        path.display()
    )]
    NewerFormat {
        /// The segment file.
        path: PathBuf,
        /// The version the file names.
        found: String,
        /// The newest version this build reads.
        supported: u32,
    },
    /// Another process holds the archive's writer lock.
    #[error("archive {} is locked by another writer (another `hindsight ingest` or `serve`?)", path.display())]
    Locked {
        /// The archive directory.
        path: PathBuf,
    },
    /// A part of the archive is in a format version this build does not read
    /// (`Archive`'s marker names each part's version).
    #[error(
        "archive {}: {what} is format version {found}; this build reads versions {oldest} to {current} ({})",
        path.display(),
        if found > current { "a newer hindsight wrote it: upgrade hindsight to read it" }
        else { "an older hindsight wrote it: open it with that version" }
    )]
    FormatVersion {
        /// The archive directory.
        path: PathBuf,
        /// The part, as a user knows it ("the connection index (connections/)").
        what: &'static str,
        /// The version the marker names.
        found: u32,
        /// The oldest version this build reads.
        oldest: u32,
        /// The version this build writes.
        current: u32,
    },
    /// The directory is not a hindsight archive.
    #[error("{} is not a hindsight archive: {reason}", path.display())]
    NotAnArchive {
        /// The directory.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
}

impl StoreError {
    /// Returns a closure wrapping an `io::Error` with an action and path, for `map_err`.
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    /// Returns a closure wrapping a Parquet error with the segment path, for `map_err`.
    pub fn parquet(path: impl Into<PathBuf>) -> impl FnOnce(parquet::errors::ParquetError) -> Self {
        let path = path.into();
        move |source| Self::Parquet { path, source }
    }
}

/// Result of the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
