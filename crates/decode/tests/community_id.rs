//! Oracle test of Community IDs: for every packet of real captures (the LAN
//! capture beside the repository and tcpdump's and nDPI's test captures fetched by
//! `scripts/fetch-fixtures`: TCP, UDP, ICMP, ICMPv6, SCTP, IPv4 and IPv6, and
//! tunnels), the Community ID of the decoded packet equals the one tshark's
//! `communityid` post-dissector gives, with the default seed and with seed 1.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use hindsight_model::community::community_id_text;
use support::{fixtures_dir, lan_hour, read_packets};

/// Frame number → Community ID, as tshark gives it with `seed`.
fn tshark(path: &Path, seed: u16) -> BTreeMap<u64, String> {
    let output = Command::new("tshark")
        .args(["-n", "--enable-protocol", "communityid"])
        // Each fragment on its own, as hindsight records it.
        .args(["-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"])
        .args(["-o", &format!("communityid.seed:{seed}")])
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-e", "frame.number", "-e", "communityid"])
        .output()
        .expect("run tshark (scripts/setup installs it)");
    assert!(
        output.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (number, id) = line.split_once('\t')?;
            let number = number.parse().ok()?;
            (!id.is_empty()).then(|| (number, id.to_owned()))
        })
        .collect()
}

fn compare(path: &Path, seed: u16) -> usize {
    let expected = tshark(path, seed);
    let mut ours = BTreeMap::new();
    for (index, (record, _)) in read_packets(path).iter().enumerate() {
        if let Some(hash) = record.headers.community_id_hash(seed) {
            ours.insert(index as u64 + 1, community_id_text(&hash));
        }
    }
    let differences: Vec<String> = expected
        .keys()
        .chain(ours.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|n| expected.get(n) != ours.get(n))
        .take(10)
        .map(|n| {
            format!(
                "frame {n}: ours {:?}, tshark {:?}",
                ours.get(n),
                expected.get(n)
            )
        })
        .collect();
    assert!(
        differences.is_empty(),
        "{} seed {seed}: Community IDs differ from tshark's:\n{}",
        path.display(),
        differences.join("\n")
    );
    expected.len()
}

#[test]
fn community_ids_equal_tsharks_on_real_captures() {
    if !support::oracle_ready(
        &["tshark"],
        &[&support::lan_hour(), &support::fixtures_dir()],
    ) {
        return;
    }
    let fixtures = fixtures_dir();
    let mut captures = vec![lan_hour()];
    for name in [
        "tcpdump/icmpv6.pcap",
        "tcpdump/forces1.pcap",
        "tcpdump/forces2.pcap",
        "tcpdump/geneve.pcap",
        "ndpi/http_ipv6.pcap",
        "ndpi/6in4tunnel.pcap",
        "ndpi/malformed_icmp.pcap",
        "ndpi/dnscrypt-v1-and-resolver-pings.pcap",
    ] {
        captures.push(fixtures.join(name));
    }
    for path in captures {
        assert!(
            path.exists(),
            "missing {}: run scripts/fetch-fixtures",
            path.display()
        );
        for seed in [0, 1] {
            let count = compare(&path, seed);
            eprintln!(
                "{:<50} seed {seed}: {count} Community IDs equal",
                path.display()
            );
        }
    }
}
