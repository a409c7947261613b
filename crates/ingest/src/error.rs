//! Errors of ingest.

/// An error of ingest: a damaged capture (reported, not fatal to the archive) or a
/// failure of the archive itself.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The capture source is damaged or unreadable.
    #[error(transparent)]
    Capture(#[from] hindsight_capture::CaptureError),
    /// The archive (segments, catalog) failed.
    #[error(transparent)]
    Store(#[from] hindsight_store::StoreError),
    /// The address index failed.
    #[error(transparent)]
    Index(#[from] hindsight_index::IndexError),
    /// A flow log could not be opened or read.
    #[error("cannot read flow log {}: {source}", path.display())]
    Log {
        /// The log file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The archive's filesystem is full, or under its free-space floor with
    /// nothing the retention may expire: writing stopped, every sealed segment
    /// is kept.
    #[error(
        "the filesystem at {} (holding the archive {}) has {free_bytes} bytes free{}: {reason}; \
         writing stopped and every sealed segment is kept",
        mount.display(),
        archive.display(),
        if *min_free_bytes > 0 { format!(", under [packets] min_free_bytes ({min_free_bytes})") } else { String::new() }
    )]
    DiskFull {
        /// The archive's directory.
        archive: std::path::PathBuf,
        /// The mount point of its filesystem.
        mount: std::path::PathBuf,
        /// Bytes free when writing stopped.
        free_bytes: u64,
        /// The configured floor (0: none).
        min_free_bytes: u64,
        /// Why it stopped rather than expiring.
        reason: String,
    },
    /// A change of settings a running writer cannot take.
    #[error("{0}: that takes a restart")]
    Reload(String),
    /// The segment sink thread stopped without saying why (it panicked).
    #[error("the segment writer thread stopped unexpectedly")]
    SinkStopped,
}
