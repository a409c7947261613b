//! Errors of capture sources.

/// An error reading a capture: damage is located by file name and byte offset (in
/// the uncompressed stream for gzip files).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file does not start like a pcap, pcapng or gzip file.
    #[error(
        "{file}: not a capture file: starts with {magic}; pcap, pcapng and gzip-compressed pcap/pcapng are supported"
    )]
    UnknownFormat {
        /// The file or source name.
        file: String,
        /// The first bytes, in hex.
        magic: String,
    },
    /// The file ends inside a header or a record.
    #[error("{file}: truncated at offset {offset}: {what}")]
    Truncated {
        /// The file or source name.
        file: String,
        /// Offset of the incomplete header or record.
        offset: u64,
        /// What was being read and how much was missing.
        what: String,
    },
    /// A header or record holds values no capture writer produces.
    #[error("{file}: corrupt at offset {offset}: {reason}")]
    Corrupt {
        /// The file or source name.
        file: String,
        /// Offset of the bad header or record.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The operating system failed to read.
    #[error("{file}: read error at offset {offset}: {error}")]
    Io {
        /// The file or source name.
        file: String,
        /// Offset the read started at.
        offset: u64,
        /// The underlying error.
        #[source]
        error: std::io::Error,
    },
}

impl CaptureError {
    /// Returns the byte offset the error refers to, if any.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::UnknownFormat { .. } => Some(0),
            Self::Truncated { offset, .. }
            | Self::Corrupt { offset, .. }
            | Self::Io { offset, .. } => Some(*offset),
        }
    }
}
