//! The role of the capture crate is to turn capture files into [`Frame`]s and
//! frames back into pcap files: it reads pcap (µs and ns, either byte order) and
//! pcapng (several sections and interfaces, link types per interface, timestamp
//! resolutions and offsets), plain or gzip-compressed, and writes classic pcap.
//!
//! Readers never panic on hostile input: damage is an error naming the file and
//! byte offset, returned after every intact frame before it.
//!
//! [`Frame`]: hindsight_model::Frame

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

mod error;
mod reader;
mod writer;

pub use error::CaptureError;
pub use reader::{CaptureFormat, CaptureReader};
pub use writer::{PcapWriter, PcapngWriter, TimestampPrecision};
