//! Helpers shared by the black-box tests of the `hindsight` binary.

#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const LAN_HOUR: &str = "../../../shared/data/lan-hour-2012.pcap";

/// The shared real capture.
pub fn lan_hour() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(LAN_HOUR);
    assert!(path.exists(), "missing shared capture {}", path.display());
    path
}

/// Where `scripts/fetch-fixtures` put the fetched real captures and logs.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("HINDSIGHT_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.fixtures"))
}

/// Runs the `hindsight` binary with no standard input.
pub fn hindsight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hindsight")
}

/// Ingests `capture` into `archive` keeping whole packets (snap length 0), so
/// exported pcaps compare byte for byte with the capture; `options` are added.
pub fn ingest_whole(capture: &Path, archive: &Path, options: &[&str]) {
    let mut args = vec![
        "ingest",
        "--quiet",
        "--snaplen",
        "0",
        "--archive",
        archive.to_str().unwrap(),
        capture.to_str().unwrap(),
    ];
    args.extend(options);
    ok(&hindsight(&args));
}

/// Returns the standard output of a command that must have succeeded.
pub fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "command failed: {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Fails the test if a reference tool is missing.
pub fn require_tool(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "{tool} is not installed: run scripts/setup");
}

/// One packet as a capture file holds it: timestamp, wire length, captured bytes.
pub type PacketKey = (i64, u32, Vec<u8>);

/// Every frame of a capture file, in file order.
pub fn read_frames(path: &Path) -> Vec<PacketKey> {
    let mut reader = hindsight_capture::CaptureReader::open(path).expect("open capture");
    let mut packets = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.expect("read capture");
        packets.push((frame.ts_nanos, frame.wire_len, frame.data.to_vec()));
    }
    packets
}
