//! Oracle test of tcpdump byte offsets: a table of filters reading the
//! packet's bytes (`proto[expr:size]`, `len`, named constants, every operator)
//! selects, on each of many real captures (the LAN capture beside the
//! repository, and tcpdump's, Wireshark's and nDPI's test captures fetched by
//! `scripts/fetch-fixtures`: Ethernet, VLAN, Linux cooked v1, raw IP, BSD
//! loopback, PPP, Cisco HDLC and Solaris ipnet captures, IPv4 and IPv6,
//! fragments, tunnels, short snap lengths; and the LAN capture rewritten to
//! the link types no fixture has, OpenBSD loopback, Linux cooked v2 and
//! PPPoE), exactly the packets `tcpdump -r` selects.

#[path = "../../decode/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hindsight_filter::{Filter, FilterSyntax, Verdict};
use hindsight_model::PacketRecord;
use support::{fixtures_dir, lan_hour, read_packets};

/// The filters, each a relation tcpdump users write (or a combination).
pub const FILTERS: &[&str] = &[
    "tcp[tcpflags] & tcp-syn != 0",
    "tcp[13] & (tcp-syn|tcp-ack) == tcp-syn",
    "tcp[tcpflags] & (tcp-fin|tcp-rst) != 0",
    "tcp[13] == 0x18",
    "tcp[tcpflags] & (tcp-ece|tcp-cwr) != 0",
    "tcp[0:2] == 443 or tcp[2:2] == 443",
    "tcp[2:2] > 1023 and tcp[0:2] > 1023",
    "(tcp[12] & 0xf0) >> 2 > 20",
    "ip[2:2] - ((ip[0] & 0xf) << 2) - ((tcp[12] & 0xf0) >> 2) > 0",
    "tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420",
    "tcp[((tcp[12] & 0xf0) >> 2):4] = 0x48545450",
    "tcp[((tcp[12] & 0xf0) >> 2):2] = 0x1603",
    "tcp[4:4] & 0xff == 0 and tcp[14:2] < 1024",
    "ip[0] & 0xf > 5",
    "ip[1] & 0xfc != 0",
    "ip[6] & 0x20 != 0",
    "ip[6:2] & 0x1fff != 0",
    "ip[6] & 0x40 != 0",
    "ip[8] < 5",
    "ip[8] == 64 or ip[8] == 128",
    "ip[9] == 17",
    "ip[12:4] == ip[16:4]",
    "ip[16] >= 224",
    "ip[2:2] > 1000",
    "ip[2:2] + 14 < len",
    "ip[0] >> 4 == 4 and ip[0] << 28 == 0x50000000",
    "ip[0] ^ 0x45 == 0",
    "ip[0] * 2 / 3 == 46",
    "ip[4:2] % 7 == 3",
    "-ip[0] == 0xffffffbb",
    "ip[40:4] > 0",
    "udp[0:2] == 53 or udp[2:2] == 53",
    "udp[4:2] > 512",
    "udp[2:2] == 443 and udp[8] & 0x80 != 0",
    "udp[12:4] == 0x2112a442",
    "icmp[icmptype] == icmp-echo",
    "icmp[icmptype] != icmp-echo and icmp[icmptype] != icmp-echoreply",
    "icmp[0] == 3 and icmp[1] == 3",
    "ip6[6] == 58",
    "ip6[6] == 17 and ip6[42:2] == 53",
    "icmp6[icmp6type] == icmp6-echo",
    "icmp6[icmp6type] == icmp6-neighborsolicit or icmp6[icmp6type] == icmp6-neighboradvert",
    "icmp6[0] >= 128",
    "ip6[0] & 0x0f != 0 or ip6[1] != 0",
    "ether[0] & 1 != 0",
    "ether[12:2] == 0x86dd",
    "ether[12:2] == 0x8100",
    "ether[0:4] == 0xffffffff",
    "arp[6:2] == 1",
    "arp[7] == 2",
    "len > 1000",
    "len <= 64",
    "not tcp[13] & 2 != 0",
    "tcp[13] & 2 != 0 or udp[0:2] == 53",
    "tcp[20:4] == 0",
    "tcp[13] % 3 == 1",
    "igmp[0] == 0x16",
    "port 80 and tcp[13] & 8 != 0",
    "host 192.168.1.1 or ip[9] == 1",
];

/// The captures: the LAN hour and fixtures of every layout.
fn captures() -> Vec<PathBuf> {
    let dir = fixtures_dir();
    let mut paths = vec![lan_hour()];
    for name in [
        "tcpdump/print-flags.pcap",
        "tcpdump/icmpv6.pcap",
        "tcpdump/QinQpacket.pcap",
        "tcpdump/resp_3_malicious.pcap",
        "tcpdump/spb.pcap",
        "ndpi/http_ipv6.pcap",
        "ndpi/dnscrypt-v1-and-resolver-pings.pcap",
        "ndpi/synscan.pcap",
        "ndpi/4in4tunnel.pcap",
        "ndpi/quic_q39.pcap",
        "ndpi/443-git.pcap",
        "ndpi/smtp.pcap",
        "ndpi/modbus.pcap",
        "ndpi/sip.pcap",
        "ndpi/ssh.pcap",
        "ndpi/http-manipulated.pcap",
        "ndpi/android.pcap",
        "ndpi/rtsp.pcap",
        "ndpi/exe_download.pcap",
        "ndpi/1kxun.pcap",
        "ndpi/tor.pcap",
        "ndpi/anydesk.pcap",
        // One or more of each other link type the decoder reads.
        "tcpdump/dns-badcookie.pcap", // BSD loopback (DLT_NULL)
        "tcpdump/ospf-gmpls.pcap",    // BSD loopback
        "wireshark/protobuf_test_default_value.pcapng", // BSD loopback, TCP
        "wireshark/protobuf_udp_addressbook_with_image_ts.pcapng", // BSD loopback
        "tcpdump/bgp_vpn_attrset.pcap", // PPP
        "tcpdump/lspping-fec-ldp.pcap", // PPP
        "tcpdump/heapoverflow-ppp_hdlc_if_print.pcap", // PPP in HDLC framing
        "tcpdump/HDLC.pcap",          // Cisco HDLC
        "tcpdump/ISIS_p2p_adjacency.pcap", // Cisco HDLC
        "tcpdump/RADIUS-RFC3162.pcap", // Linux cooked v1
        "tcpdump/babel.pcap",         // Linux cooked v1
        "tcpdump/babel_rtt.pcap",     // raw IP
        "tcpdump/bgp-addpath.pcap",   // raw IP
        "wireshark/tls12-dsb.pcapng", // raw IPv4
        "tcpdump/ipv6-rthdr-oobr.pcap", // raw IPv6
        "tcpdump/e1000g.pcap",        // Solaris ipnet
    ] {
        paths.push(dir.join(name));
    }
    paths
}

/// The first packets of the LAN capture rewritten to link types that no
/// fixture has: OpenBSD loopback (a network-order address family), Linux
/// cooked v2 (a 20-byte header led by the ethertype) and PPPoE sessions (a
/// 6-byte PPPoE header, then the PPP protocol), written to `dir`.
fn rewritten_captures(dir: &Path) -> Vec<PathBuf> {
    use hindsight_capture::{PcapWriter, TimestampPrecision};
    use hindsight_model::LinkType;
    let packets = read_packets(&lan_hour());
    let mut paths = Vec::new();
    type Header = fn(u16, usize) -> Option<Vec<u8>>;
    let layouts: [(&str, LinkType, Header); 3] = [
        ("loop", LinkType::LOOP, |ethertype, _| {
            let family: u32 = match ethertype {
                0x0800 => 2,
                0x86dd => 24,
                _ => return None,
            };
            Some(family.to_be_bytes().to_vec())
        }),
        ("sll2", LinkType::LINUX_SLL2, |ethertype, _| {
            let mut header = vec![0u8; 20];
            header[0..2].copy_from_slice(&ethertype.to_be_bytes());
            header[8..10].copy_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
            header[11] = 6;
            Some(header)
        }),
        ("pppoe", LinkType::PPP_ETHER, |ethertype, payload| {
            let protocol: u16 = match ethertype {
                0x0800 => 0x0021,
                0x86dd => 0x0057,
                _ => return None,
            };
            let length = u16::try_from(payload + 2).ok()?;
            let mut header = vec![0x11, 0x00, 0x12, 0x34];
            header.extend_from_slice(&length.to_be_bytes());
            header.extend_from_slice(&protocol.to_be_bytes());
            Some(header)
        }),
    ];
    for (name, link_type, header) in layouts {
        let path = dir.join(format!("lan-hour-{name}.pcap"));
        let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut out = PcapWriter::new(file, link_type, 65535, TimestampPrecision::Nanos).unwrap();
        for (record, frame) in packets.iter().take(20_000) {
            let Some(ethertype) = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]))
            else {
                continue;
            };
            let payload = &frame[14..];
            let Some(mut bytes) = header(ethertype, payload.len()) else {
                continue;
            };
            bytes.extend_from_slice(payload);
            let wire = record.wire_len - 14 + (bytes.len() - payload.len()) as u32;
            out.write_frame(record.ts_nanos, wire, &bytes).unwrap();
        }
        out.flush().unwrap();
        paths.push(path);
    }
    paths
}

/// One packet of a capture: its record and its captured bytes.
type Packet = (PacketRecord, Vec<u8>);

/// The indices of the packets tcpdump selects: it writes them to a file, which
/// is read back and matched in order against the capture.
fn tcpdump(path: &Path, filter: &str, packets: &[Packet], scratch: &Path) -> BTreeSet<usize> {
    let out = scratch.join("selected.pcap");
    let status = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(path)
        .arg("-w")
        .arg(&out)
        .arg("--")
        .arg(filter)
        .output()
        .expect("run tcpdump (scripts/setup installs it)");
    // A relation no packet of the link type can hold (`arp[]` behind BSD
    // loopback): tcpdump refuses to run it, which is selecting nothing.
    if String::from_utf8_lossy(&status.stderr).contains("expression rejects all packets") {
        return BTreeSet::new();
    }
    assert!(
        status.status.success(),
        "tcpdump rejects {filter:?}: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let selected = read_packets(&out);
    let mut indices = BTreeSet::new();
    let mut next = 0;
    for packet in &selected {
        while next < packets.len()
            && (packets[next].1 != packet.1 || packets[next].0.ts_nanos != packet.0.ts_nanos)
        {
            next += 1;
        }
        assert!(
            next < packets.len(),
            "tcpdump wrote a packet not in {}",
            path.display()
        );
        indices.insert(next);
        next += 1;
    }
    indices
}

#[test]
fn byte_offset_filters_select_what_tcpdump_selects() {
    if !support::oracle_ready(&["tcpdump"], &[&lan_hour(), &fixtures_dir()]) {
        return;
    }
    let scratch = std::env::temp_dir().join(format!("hindsight-offsets-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut failures = Vec::new();
    let mut compared = 0usize;
    let mut captures = captures();
    captures.extend(rewritten_captures(&scratch));
    for path in &captures {
        assert!(
            path.exists(),
            "missing {}: run scripts/fetch-fixtures",
            path.display()
        );
        let packets = read_packets(path);
        for text in FILTERS {
            let filter = Filter::parse_with(text, FilterSyntax::Bpf)
                .unwrap_or_else(|error| panic!("{text}: {error}"));
            let ours: BTreeSet<usize> = packets
                .iter()
                .enumerate()
                .filter(|(_, (record, frame))| filter.test(record, frame) == Verdict::Match)
                .map(|(i, _)| i)
                .collect();
            let theirs = tcpdump(path, text, &packets, &scratch);
            compared += 1;
            if ours != theirs {
                let only_ours: Vec<_> = ours.difference(&theirs).take(5).map(|i| i + 1).collect();
                let only_theirs: Vec<_> = theirs.difference(&ours).take(5).map(|i| i + 1).collect();
                failures.push(format!(
                    "{} {text:?}: ours {} tcpdump {}; frames only ours {only_ours:?}, only tcpdump {only_theirs:?}",
                    path.file_name().unwrap().to_string_lossy(),
                    ours.len(),
                    theirs.len()
                ));
            }
        }
    }
    std::fs::remove_dir_all(&scratch).unwrap();
    assert!(
        failures.is_empty(),
        "{} of {compared} (capture, filter) pairs differ from tcpdump:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(captures.len() >= 40 && FILTERS.len() >= 40);
}

#[test]
fn a_layer_behind_a_link_header_not_followed_is_unknown_not_false() {
    if !support::oracle_ready(&[], &[&fixtures_dir()]) {
        return;
    }
    // IEEE 802.11 with radiotap: where `ip[]` starts depends on the radiotap
    // and 802.11 headers' lengths, which hindsight's byte offsets do not
    // follow; the answer must say it does not know, not that nothing matched.
    let path = fixtures_dir().join("tcpdump/ieee802.11_exthdr.pcap");
    let packets = read_packets(&path);
    let filter = Filter::parse_with("tcp[13] & 2 != 0", FilterSyntax::Bpf).unwrap();
    assert!(!packets.is_empty());
    for (record, frame) in &packets {
        assert_eq!(filter.test(record, frame), Verdict::Unknown);
    }
    // The frame's own bytes are read on any link type.
    let link = Filter::parse_with("ether[0] & 0 == 0", FilterSyntax::Bpf).unwrap();
    let (record, frame) = &packets[0];
    assert_eq!(link.test(record, frame), Verdict::Match);
}
