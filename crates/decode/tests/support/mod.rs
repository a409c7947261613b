//! Helpers shared by the oracle tests of the decoder and of the filter
//! language (the filter's tests include this file by path): where the real
//! captures are, and a capture read into decoded records with their bytes.

#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};

use hindsight_capture::CaptureReader;
use hindsight_model::PacketRecord;

fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
}

/// The captures `scripts/fetch-fixtures` fetches (or `$HINDSIGHT_FIXTURES`).
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("HINDSIGHT_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../.fixtures"))
}

/// The LAN capture beside the repository (or `$HINDSIGHT_TEST_PCAP`).
pub fn lan_hour() -> PathBuf {
    std::env::var_os("HINDSIGHT_TEST_PCAP")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../../shared/data/lan-hour-2012.pcap"))
}

/// Every packet of a capture, decoded, with its captured bytes, in file order.
pub fn read_packets(path: &Path) -> Vec<(PacketRecord, Vec<u8>)> {
    let mut reader =
        CaptureReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut packets = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        packets.push((hindsight_decode::record(&frame), frame.data.to_vec()));
    }
    packets
}
