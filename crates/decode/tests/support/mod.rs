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

/// Whether an oracle test can run here: each of `tools` on the `PATH` and
/// each of `files` present. Without them the test says by name what is
/// missing and is skipped, so that `cargo test` runs on a clone with only
/// Rust installed. Under `scripts/test` (which installs the tools and fetches
/// the captures, and sets `HINDSIGHT_REQUIRE_ORACLES`) or CI (`CI` set) a
/// missing one fails the test instead.
pub fn oracle_ready(tools: &[&str], files: &[&Path]) -> bool {
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
    };
    let mut missing: Vec<String> = tools
        .iter()
        .filter(|tool| !on_path(tool))
        .map(|tool| format!("{tool} (scripts/setup installs it)"))
        .collect();
    missing.extend(files.iter().filter(|file| !file.exists()).map(|file| {
        format!(
            "{} (scripts/fetch-fixtures fetches the captures)",
            file.display()
        )
    }));
    if missing.is_empty() {
        return true;
    }
    let what = missing.join(", ");
    let required = ["HINDSIGHT_REQUIRE_ORACLES", "CI"];
    assert!(
        required.iter().all(|name| std::env::var_os(name).is_none()),
        "missing: {what}"
    );
    eprintln!("skipped: missing {what}");
    false
}
