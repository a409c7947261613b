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
    /// The segment sink thread stopped without saying why (it panicked).
    #[error("the segment writer thread stopped unexpectedly")]
    SinkStopped,
}
