//! Helpers shared by the black-box tests of the `hindsight` binary.

#![allow(dead_code)] // each test crate uses its own subset

pub mod browser;
pub mod seaweedfs;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const LAN_HOUR: &str = "../../../shared/data/lan-hour-2012.pcap";

/// The shared real capture.
pub fn lan_hour() -> PathBuf {
    let path = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join(LAN_HOUR);
    assert!(path.exists(), "missing shared capture {}", path.display());
    path
}

/// Where `scripts/fetch-fixtures` put the fetched real captures and logs.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("HINDSIGHT_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(
                &std::env::var_os("CARGO_MANIFEST_DIR")
                    .expect("cargo test sets CARGO_MANIFEST_DIR"),
            )
            .join("../../.fixtures")
        })
}

/// Runs the `hindsight` binary with no standard input.
pub fn hindsight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hindsight")
}

/// Runs the `hindsight` binary with `input` as its standard input.
pub fn hindsight_with_input(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hindsight");
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        // A reader that stops early closes the pipe: that is not the test's error.
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("run hindsight");
    let _ = writer.join();
    output
}

/// Ingests `capture` into `archive` with the defaults; returns the summary printed.
pub fn ingest(capture: &Path, archive: &Path) -> String {
    ok(&hindsight(&[
        "ingest",
        "--quiet",
        "--archive",
        archive.to_str().unwrap(),
        capture.to_str().unwrap(),
    ]))
}

/// lan-hour with its timestamps `hours` later (editcap -t), as pcap in `dir`.
pub fn lan_hour_shifted(dir: &Path, hours: u32) -> PathBuf {
    let out = dir.join(format!("lan-hour+{hours}h.pcap"));
    let status = Command::new("editcap")
        .args(["-F", "pcap", "-t", &(hours * 3600).to_string()])
        .arg(lan_hour())
        .arg(&out)
        .status()
        .expect("run editcap");
    assert!(status.success());
    out
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

/// Checks the text exposition format: every sample is `name{labels} value` with
/// a valid name and a number, and follows its family's HELP and TYPE lines.
pub fn assert_prometheus_text(text: &str) {
    let mut typed = std::collections::HashSet::new();
    let mut helped = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap();
            let kind = parts.next().unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert!(!name.ends_with("_total") || kind == "counter", "{line}");
            typed.insert(name.to_owned());
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
                && !name.as_bytes()[0].is_ascii_digit(),
            "bad metric name in {line:?}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "{line:?}"
            );
        }
        assert!(value.parse::<f64>().is_ok(), "bad value in {line:?}");
        assert!(
            typed.contains(name) && helped.contains(name),
            "no HELP/TYPE before {line:?}"
        );
    }
    assert!(typed.len() >= 8, "{text}");
}

/// Every connection record in the `flows` segments of `archive`, in catalog order.
pub fn archived_flows(archive: &Path) -> Vec<hindsight_model::FlowRecord> {
    use hindsight_store::{Archive, SegmentReader, Table};
    let archive = Archive::open_reader(archive).expect("open archive");
    let mut records = Vec::new();
    for entry in archive.catalog().entries_of(Table::Flows) {
        let reader = SegmentReader::open(&archive.segment_path(entry)).expect("open segment");
        let groups = (0..reader.row_groups()).collect();
        for batch in reader.read(groups, None).expect("read segment") {
            let batch = batch.expect("decode segment");
            records.extend(hindsight_store::flows::flow_records(&batch).expect("a flows batch"));
        }
    }
    records
}

/// A free UDP port of 127.0.0.1 (free when asked).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("bind a free port")
        .port()
}

/// Waits until something listens on UDP `port` of 127.0.0.1.
pub fn wait_bound(port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on udp port {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// nfcapd writing into `dir` and repeating every export packet it receives to
/// `repeat_to` (`ADDRESS:PORT`), listening once this returns: it and its port.
pub fn start_nfcapd(dir: &Path, repeat_to: &str) -> (std::process::Child, u16) {
    std::fs::create_dir_all(dir).unwrap();
    let port = free_udp_port();
    let child = Command::new("nfcapd")
        .args(["-t", "3600", "-b", "127.0.0.1", "-p", &port.to_string()])
        .arg("-w")
        .arg(dir)
        .args(["-R", &repeat_to.replace(':', "/")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nfcapd");
    wait_bound(port);
    (child, port)
}

/// An HTTP client that hands back every status (tests look at errors too).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(120)))
        .build()
        .into()
}

/// A statement that makes 1.2 GB in one projection, which no cancel can
/// stop: twenty 60 MB strings joined, each call under the 64 MiB one call
/// may make, nothing an operator reserves. `from` ends the inner `SELECT`
/// (`"FROM live_packets LIMIT 1"`, or nothing).
pub fn wide_projection(from: &str) -> String {
    let columns: Vec<String> = (0..20)
        .map(|i| format!("repeat('{}', 60000000) AS c{i}", char::from(b'a' + i)))
        .collect();
    let joined: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    format!(
        "SELECT length({}) AS n FROM (SELECT {} {from})",
        joined.join(" || "),
        columns.join(", ")
    )
}
