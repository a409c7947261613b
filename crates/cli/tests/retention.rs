//! Retention classes (`[[retention.class]]`, Hyperion's per-stream guarantees):
//! a small guaranteed class keeps its span while busy traffic cycles the
//! archive's disk bound several times, and holds exactly what `tcpdump -r`
//! selects from the inputs for its filter.

mod common;

use common::{PacketKey, hindsight, ingest_whole, lan_hour_shifted, ok, read_frames, require_tool};

use std::path::{Path, PathBuf};
use std::process::Command;

/// What `tcpdump -r capture filter` selects.
fn tcpdump(dir: &Path, capture: &Path, filter: &str) -> Vec<PacketKey> {
    let out = dir.join("tcpdump.pcap");
    let status = Command::new("tcpdump")
        .arg("-r")
        .arg(capture)
        .arg("-w")
        .arg(&out)
        .arg(filter)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    read_frames(&out)
}

/// What the archive answers for `filter`, as frames.
fn query(archive: &Path, filter: &str) -> Vec<PacketKey> {
    let out = archive.parent().unwrap().join("answer.pcap");
    ok(&hindsight(&[
        "query",
        filter,
        "-o",
        out.to_str().unwrap(),
        "--archive",
        archive.to_str().unwrap(),
    ]));
    read_frames(&out)
}

#[test]
fn a_guaranteed_dns_class_keeps_its_span_while_busy_traffic_cycles_the_disk() {
    require_tool("tcpdump");
    require_tool("editcap");
    let dir = tempfile::tempdir().unwrap();
    let hours = 8;
    let captures: Vec<PathBuf> = (0..hours)
        .map(|h| lan_hour_shifted(dir.path(), h))
        .collect();
    let archive = dir.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    // About 1.7 MB of segments an hour: the 2 MB the busy traffic may have
    // hold little more than one hour of the eight, while DNS (about 65 kB an
    // hour) is guaranteed 1 MB.
    let max_bytes = 3_000_000u64;
    std::fs::write(
        archive.join("config.toml"),
        format!(
            "[packets]\nmax_bytes = {max_bytes}\n\n[[retention.class]]\nname = \"dns\"\nfilter = \"udp port 53\"\nmin_bytes = 1000000\n"
        ),
    )
    .unwrap();
    for capture in &captures {
        ingest_whole(capture, &archive, &["--segment-packets", "8192"]);
    }

    // The busy traffic has cycled the bound: its first hours are gone, and
    // the packets' segments fit in it (each class keeps its newest segment).
    let stats: serde_json::Value = serde_json::from_str(&ok(&hindsight(&[
        "stats",
        "--json",
        "--archive",
        archive.to_str().unwrap(),
    ])))
    .unwrap();
    let classes = stats["retention_classes"].as_array().unwrap();
    assert_eq!(classes.len(), 2, "{stats:#}");
    let (busy, dns) = (&classes[0], &classes[1]);
    assert_eq!(busy["name"], "default");
    assert_eq!(dns["name"], "dns");
    assert_eq!(dns["min_bytes"], 1_000_000);
    let on_disk = stats["bytes_on_disk"].as_u64().unwrap();
    assert!(on_disk <= max_bytes, "{on_disk} bytes");
    let busy_packets = busy["packets"].as_u64().unwrap();
    let written_per_hour = 62_781 - 390;
    assert!(
        busy_packets < 2 * written_per_hour,
        "the busy class kept {busy_packets} packets of {}",
        u64::from(hours) * written_per_hour
    );
    let first_hour = tcpdump(dir.path(), &captures[0], "not (udp port 53)");
    let kept: std::collections::HashSet<PacketKey> =
        query(&archive, "not (udp port 53)").into_iter().collect();
    assert!(first_hour.iter().all(|frame| !kept.contains(frame)));

    // The DNS class still holds every hour: exactly what tcpdump selects
    // from the eight inputs, byte for byte.
    let mut expected: Vec<PacketKey> = captures
        .iter()
        .flat_map(|capture| tcpdump(dir.path(), capture, "udp port 53"))
        .collect();
    expected.sort();
    let mut dns_kept = query(&archive, "udp port 53");
    dns_kept.sort();
    assert_eq!(dns_kept.len(), expected.len());
    assert!(dns_kept == expected, "the DNS class lost packets");
    assert_eq!(dns["packets"], expected.len());
    assert_eq!(dns["first"], stats_first(&expected));
    ok(&hindsight(&[
        "check",
        "--archive",
        archive.to_str().unwrap(),
    ]));
}

/// The first packet's time of `frames`, as `stats` prints it.
fn stats_first(frames: &[PacketKey]) -> String {
    let first = frames.iter().map(|f| f.0).min().unwrap();
    let seconds = first.div_euclid(1_000_000_000);
    let nanos = first.rem_euclid(1_000_000_000);
    let date = Command::new("date")
        .args(["-u", "-d", &format!("@{seconds}"), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .unwrap();
    format!(
        "{}.{nanos:09}Z",
        String::from_utf8_lossy(&date.stdout).trim()
    )
}
