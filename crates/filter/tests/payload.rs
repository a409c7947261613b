//! Oracle test of Wireshark's byte tests: a table of `contains`, `matches`,
//! slice and payload filters selects, on real captures with application
//! payloads (nDPI's test captures fetched by `scripts/fetch-fixtures`, and the
//! LAN capture beside the repository), exactly the frames `tshark -Y` displays
//! (IP and TCP reassembly off, each packet on its own as hindsight tests it).

#[path = "../../decode/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use hindsight_filter::{Filter, FilterSyntax, Verdict};
use support::{fixtures_dir, read_packets};

/// The filters, as an analyst writes them.
const FILTERS: &[&str] = &[
    "frame contains \"GET\"",
    "frame contains \"HTTP/1.1\"",
    "tcp contains \"GET\"",
    "ip contains \"GET\"",
    "eth contains \"GET\"",
    "tcp.payload contains \"Host:\"",
    "tcp.payload contains 0d:0a:0d:0a",
    "tcp.payload[0:4] == \"GET \"",
    "tcp.payload[0:3] == 16:03:01",
    "tcp.payload[0:2] == 16:03",
    "tcp.payload[0] == 17",
    "tcp.payload matches \"^(get|post) /\"",
    "tcp.payload matches \"user-agent: [^\\\\r]*mozilla\"",
    "tcp.payload matches \"\\\\.exe\"",
    "udp.payload contains 00:00:01:00:01",
    "udp.payload[0:2] == 00:01",
    "udp.payload matches \"^\\\\x00\"",
    "udp.payload[-1] == 01",
    "udp.payload",
    "tcp.payload",
    "frame[12:2] == 08:00",
    "frame[12:2] == 86:dd",
    "frame[0:6] == ff:ff:ff:ff:ff:ff",
    "frame[-4:] == 00:00:00:00",
    "eth.src[0:1] == 00",
    "eth.dst[0:2] == ff:ff",
    "eth.addr[5] == 01",
    "ip[0] == 45",
    "ip[9] == 06",
    "ip[12:2] == c0:a8",
    "ip[12-13] == 0a:00",
    "ipv6[0] == 60",
    "ipv6[6] == 3a",
    "tcp[13] == 02",
    "tcp[13] == 18",
    "udp[0:2] == 00:35",
    "udp[2:2] == 00:35",
    "!(tcp.payload contains \"GET\")",
    "frame contains \"ssh\"",
    "frame matches \"ssh-2\\\\.0\"",
    "frame matches \"(?-i)SSH-2\\\\.0\"",
    "tcp.payload[0:4] != \"GET \"",
    "ip[1:] contains 00:00",
    "ip matches \"get\"",
    "tcp[20]",
    "ip[-1] == 01",
    "eth[12:2] == 08:00",
    "frame[100:4] == 00:00:00:00",
    "tcp.port == 80 && tcp.payload contains \"Content-Type\"",
];

const CAPTURES: &[&str] = &[
    "ndpi/exe_download.pcap",
    "ndpi/http_ipv6.pcap",
    "ndpi/ssh.pcap",
    "ndpi/smtp.pcap",
    "ndpi/sip.pcap",
    "ndpi/443-git.pcap",
    "ndpi/quic_q39.pcap",
    "ndpi/android.pcap",
    "ndpi/dnscrypt-v1-and-resolver-pings.pcap",
    "ndpi/http-manipulated.pcap",
    "ndpi/rtsp.pcap",
];

fn tshark(path: &Path, filter: &str) -> BTreeSet<usize> {
    let output = Command::new("tshark")
        .args([
            "-n",
            "-o",
            "ip.defragment:FALSE",
            "-o",
            "ipv6.defragment:FALSE",
        ])
        .args(["-o", "tcp.desegment_tcp_streams:FALSE"])
        .arg("-r")
        .arg(path)
        .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
        .output()
        .expect("run tshark (scripts/setup installs it)");
    assert!(
        output.status.success(),
        "tshark rejects {filter:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim().parse().expect("a frame number"))
        .collect()
}

#[test]
fn byte_tests_select_what_tshark_displays() {
    if !support::oracle_ready(&["tshark"], &[&fixtures_dir()]) {
        return;
    }
    let dir = fixtures_dir();
    let mut failures = Vec::new();
    let mut compared = 0;
    for name in CAPTURES {
        let path = dir.join(name);
        assert!(
            path.exists(),
            "missing {}: run scripts/fetch-fixtures",
            path.display()
        );
        let packets = read_packets(&path);
        // tshark's start-up dominates: four at a time.
        let expected: Vec<BTreeSet<usize>> = std::thread::scope(|scope| {
            let chunks: Vec<_> = FILTERS
                .chunks(FILTERS.len().div_ceil(4))
                .map(|chunk| {
                    let path = &path;
                    scope.spawn(move || {
                        chunk
                            .iter()
                            .map(|text| tshark(path, text))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            chunks
                .into_iter()
                .flat_map(|chunk| chunk.join().unwrap())
                .collect()
        });
        for (text, theirs) in FILTERS.iter().zip(expected) {
            let filter = Filter::parse_with(text, FilterSyntax::Wireshark)
                .unwrap_or_else(|error| panic!("{text}: {error}"));
            assert_eq!(
                Filter::parse(&filter.to_string()).unwrap(),
                filter,
                "{text}"
            );
            let ours: BTreeSet<usize> = packets
                .iter()
                .enumerate()
                .filter(|(_, (record, frame))| filter.test(record, frame) == Verdict::Match)
                .map(|(i, _)| i + 1)
                .collect();
            compared += 1;
            if ours != theirs {
                let only_ours: Vec<_> = ours.difference(&theirs).take(5).collect();
                let only_theirs: Vec<_> = theirs.difference(&ours).take(5).collect();
                failures.push(format!(
                    "{name} {text:?}: ours {} tshark {}; only ours {only_ours:?}, only tshark {only_theirs:?}",
                    ours.len(),
                    theirs.len()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {compared} (capture, filter) pairs differ from tshark:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(FILTERS.len() >= 30);
}
