//! Oracle test of tunnel decoding: for every packet of real captures with
//! tunnels and other link layers (tcpdump's and nDPI's test captures, fetched by
//! `scripts/fetch-fixtures`) and of a capture this test writes (ERSPAN, GRE with
//! keys, FabricPath, GTP-U extension headers, PPTP, MPLS pseudowires...), the
//! innermost addresses and ports the decoder gives equal tshark's innermost
//! `ip.src`/`ip.dst`/`ipv6.src`/`ipv6.dst` and TCP/UDP/SCTP ports.
//!
//! "Innermost" is read from tshark's `frame.protocols`: the last `ip` or `ipv6`
//! layer before any ICMP layer (whose quoted header hindsight does not decode),
//! and the transport layer right after it.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use hindsight_model::{PacketHeaders, tunnel};
use support::{fixtures_dir, read_packets};

/// The real captures compared, under the fixtures directory.
const CAPTURES: &[&str] = &[
    "tcpdump/geneve.pcap",
    "tcpdump/vxlan.pcap",
    "tcpdump/nsh-over-vxlan-gpe.pcap",
    "tcpdump/mpls-over-udp.pcap",
    "tcpdump/mpls-traceroute.pcap",
    "tcpdump/mpls-ldp-hello.pcap",
    "tcpdump/pppoes.pcap",
    "tcpdump/HDLC.pcap",
    "tcpdump/QinQpacket.pcap",
    "tcpdump/gre-heapoverflow-1.pcap",
    "tcpdump/gre-heapoverflow-2.pcap",
    "tcpdump/hdlc_slarp.pcapng",
    "ndpi/4in4tunnel.pcap",
    "ndpi/4in6tunnel.pcap",
    "ndpi/6in4tunnel.pcap",
    "ndpi/6in6tunnel.pcap",
    "ndpi/ipv6_in_gtp.pcap",
    "ndpi/gtp_false_positive.pcapng",
];

/// What tshark and the decoder say of one packet's innermost layers.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Innermost {
    src: Option<String>,
    dst: Option<String>,
    ports: Option<(u16, u16)>,
}

fn ours(headers: &PacketHeaders) -> Innermost {
    let ip = headers.ip_version.is_some();
    if !ip && headers.tunnel_src.is_some() {
        // ARP inside a tunnel: tshark's innermost IP header is the outer one,
        // which hindsight keeps as the tunnel's addresses.
        return Innermost {
            src: headers.tunnel_src.map(|a| a.to_string()),
            dst: headers.tunnel_dst.map(|a| a.to_string()),
            ports: None,
        };
    }
    let transported = matches!(headers.ip_proto, Some(6 | 17 | 132));
    Innermost {
        src: headers.src_addr.filter(|_| ip).map(|a| a.to_string()),
        dst: headers.dst_addr.filter(|_| ip).map(|a| a.to_string()),
        ports: headers
            .src_port
            .zip(headers.dst_port)
            .filter(|_| transported),
    }
}

/// Frame number → (tshark's innermost layers, number of IP layers it saw).
fn tshark(path: &Path) -> BTreeMap<usize, (Innermost, usize)> {
    let fields = [
        "frame.number",
        "frame.protocols",
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
        "tcp.srcport",
        "tcp.dstport",
        "udp.srcport",
        "udp.dstport",
        "sctp.srcport",
        "sctp.dstport",
    ];
    let mut command = Command::new("tshark");
    command.arg("-n").arg("-r").arg(path).args(["-T", "fields"]);
    for field in fields {
        command.args(["-e", field]);
    }
    command.args(["-E", "occurrence=a", "-E", "aggregator=,"]);
    let output = command
        .output()
        .expect("run tshark (scripts/setup installs it)");
    assert!(
        output.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut frames = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let columns: Vec<Vec<&str>> = line
            .split('\t')
            .map(|column| column.split(',').filter(|v| !v.is_empty()).collect())
            .collect();
        let number: usize = columns[0][0].parse().expect("frame number");
        let protocols: Vec<&str> = columns[1]
            .first()
            .map_or(vec![], |p| p.split(':').collect());
        // Walk the layers up to ICMP, counting IP layers of each family.
        let (mut v4, mut v6) = (0usize, 0usize);
        let mut last_ip = None;
        let mut transport = None;
        let mut counts = BTreeMap::<&str, usize>::new();
        for layer in &protocols {
            match *layer {
                "icmp" | "icmpv6" => break,
                "ip" => {
                    v4 += 1;
                    last_ip = Some(("ip", v4 - 1));
                    transport = None;
                }
                "ipv6" => {
                    v6 += 1;
                    last_ip = Some(("ipv6", v6 - 1));
                    transport = None;
                }
                "tcp" | "udp" | "sctp" => {
                    let seen = counts.entry(*layer).or_default();
                    if transport.is_none() && last_ip.is_some() {
                        transport = Some((*layer, *seen));
                    }
                    *seen += 1;
                }
                _ => {}
            }
        }
        let pick = |column: usize, index: usize| columns[column].get(index).map(|v| v.to_string());
        let (src, dst) = match last_ip {
            Some(("ip", index)) => (pick(2, index), pick(3, index)),
            Some((_, index)) => (pick(4, index), pick(5, index)),
            None => (None, None),
        };
        let ports = transport.and_then(|(layer, index)| {
            let column = match layer {
                "tcp" => 6,
                "udp" => 8,
                _ => 10,
            };
            let port = |column: usize| columns[column].get(index)?.parse::<u16>().ok();
            port(column).zip(port(column + 1))
        });
        frames.insert(number, (Innermost { src, dst, ports }, v4 + v6));
    }
    frames
}

/// Compares one capture; returns (tunnelled packets, packets compared).
fn compare(path: &Path) -> (usize, usize) {
    let expected = tshark(path);
    let (mut tunnelled, mut compared) = (0, 0);
    let mut differences = Vec::new();
    for (index, (record, _)) in read_packets(path).iter().enumerate() {
        let number = index + 1;
        let headers = record.headers;
        let Some((theirs, ip_layers)) = expected.get(&number) else {
            continue;
        };
        if headers.tunnel.is_some() || *ip_layers > 1 {
            tunnelled += 1;
        }
        let mine = ours(&headers);
        // Ports are compared where both decoded a transport header (a cut-off
        // one is not a field for tshark either).
        let same = mine.src == theirs.src
            && mine.dst == theirs.dst
            && (mine.ports == theirs.ports || mine.ports.is_none() || theirs.ports.is_none());
        if !same {
            differences.push(format!(
                "frame {number}: ours {mine:?} ({}), tshark {theirs:?}",
                tunnel::names(headers.tunnel.unwrap_or(0))
            ));
        }
        compared += 1;
    }
    assert!(
        differences.is_empty(),
        "{}: {} of {compared} packets differ from tshark:\n{}",
        path.display(),
        differences.len(),
        differences
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    (tunnelled, compared)
}

#[test]
fn innermost_addresses_and_ports_equal_tsharks_on_real_captures() {
    if !support::oracle_ready(&["tshark"], &[&support::fixtures_dir()]) {
        return;
    }
    let dir = fixtures_dir();
    let mut total = (0, 0);
    for capture in CAPTURES {
        let path = dir.join(capture);
        assert!(
            path.exists(),
            "missing {}: run scripts/fetch-fixtures",
            path.display()
        );
        let (tunnelled, compared) = compare(&path);
        eprintln!("{capture:<40} {compared:>5} packets, {tunnelled:>5} in tunnels");
        total = (total.0 + tunnelled, total.1 + compared);
    }
    assert!(total.0 > 100, "only {} tunnelled packets compared", total.0);
}

// ---- A capture of the encapsulations the fixtures lack, written here. ----

fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x45, 0];
    out.extend(((20 + payload.len()) as u16).to_be_bytes());
    out.extend([0x12, 0x34, 0, 0, 64, proto, 0, 0]);
    out.extend(src);
    out.extend(dst);
    out.extend_from_slice(payload);
    out
}

fn ipv6(next: u8, src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x60, 0, 0, 0];
    out.extend((payload.len() as u16).to_be_bytes());
    out.extend([next, 64]);
    out.extend(src.parse::<std::net::Ipv6Addr>().unwrap().octets());
    out.extend(dst.parse::<std::net::Ipv6Addr>().unwrap().octets());
    out.extend_from_slice(payload);
    out
}

fn udp(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(src.to_be_bytes());
    out.extend(dst.to_be_bytes());
    out.extend(((8 + payload.len()) as u16).to_be_bytes());
    out.extend([0, 0]);
    out.extend_from_slice(payload);
    out
}

fn tcp(src: u16, dst: u16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(src.to_be_bytes());
    out.extend(dst.to_be_bytes());
    out.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    out
}

fn eth(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
    ];
    out.extend(kind.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn inner_tcp() -> Vec<u8> {
    ipv4(6, [192, 168, 7, 1], [192, 168, 7, 2], &tcp(40000, 443))
}

fn outer(proto: u8, payload: &[u8]) -> Vec<u8> {
    eth(0x0800, &ipv4(proto, [10, 0, 0, 1], [10, 0, 0, 2], payload))
}

/// Frames of every encapsulation, with what the decoder must say of them beyond
/// the addresses tshark is asked for: (frame, tunnel bits, identifier).
fn synthetic() -> Vec<(Vec<u8>, u16, Option<u32>)> {
    let gre = |flags: u16, protocol: u16, extra: &[u8], payload: &[u8]| {
        let mut out = flags.to_be_bytes().to_vec();
        out.extend(protocol.to_be_bytes());
        out.extend_from_slice(extra);
        out.extend_from_slice(payload);
        out
    };
    let inner_eth = eth(0x0800, &inner_tcp());
    let mut frames = vec![
        // GRE with a key, IPv4 inside.
        (
            outer(47, &gre(0x2000, 0x0800, &[0, 0, 0x30, 0x39], &inner_tcp())),
            tunnel::GRE,
            Some(12345),
        ),
        // GRE with checksum, key and sequence, Ethernet inside (TEB).
        (
            outer(
                47,
                &gre(
                    0xb000,
                    0x6558,
                    &[0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1],
                    &inner_eth,
                ),
            ),
            tunnel::GRE,
            Some(7),
        ),
        // GRE carrying IPv6.
        (
            outer(
                47,
                &gre(
                    0,
                    0x86dd,
                    &[],
                    &ipv6(17, "2001:db8::a", "2001:db8::b", &udp(5353, 53, b"q")),
                ),
            ),
            tunnel::GRE,
            None,
        ),
        // ERSPAN type II: sequence number, 8-byte header, Ethernet.
        (
            outer(
                47,
                &gre(
                    0x1000,
                    0x88be,
                    &[0, 0, 0, 9],
                    &[&[0x10, 0x01, 0, 0x2a, 0, 0, 0, 0][..], &inner_eth].concat(),
                ),
            ),
            tunnel::GRE | tunnel::ERSPAN,
            None,
        ),
        // ERSPAN type III without the platform subheader.
        (
            outer(
                47,
                &gre(
                    0x1000,
                    0x22eb,
                    &[0, 0, 0, 3],
                    &[
                        &[0x20, 0x01, 0, 0x2a, 0, 0, 0, 1, 0, 0, 0, 0][..],
                        &inner_eth,
                    ]
                    .concat(),
                ),
            ),
            tunnel::GRE | tunnel::ERSPAN,
            None,
        ),
        // PPTP: GRE version 1 with a call ID, PPP, IPv4.
        (
            outer(
                47,
                &gre(
                    0x3001,
                    0x880b,
                    &[0, 44, 0, 5, 0, 0, 0, 1],
                    &[&[0xff, 0x03, 0x00, 0x21][..], &inner_tcp()].concat(),
                ),
            ),
            tunnel::GRE,
            Some(5),
        ),
        // 4in4, 6in4, 4in6, 6in6.
        (outer(4, &inner_tcp()), tunnel::IPIP, None),
        (
            outer(41, &ipv6(6, "2001:db8::1", "2001:db8::2", &tcp(1, 2))),
            tunnel::IPIP,
            None,
        ),
        (
            eth(0x86dd, &ipv6(4, "2001:db8::1", "2001:db8::2", &inner_tcp())),
            tunnel::IPIP,
            None,
        ),
        (
            eth(
                0x86dd,
                &ipv6(
                    41,
                    "2001:db8::1",
                    "2001:db8::2",
                    &ipv6(17, "fd00::1", "fd00::2", &udp(1000, 2000, b"x")),
                ),
            ),
            tunnel::IPIP,
            None,
        ),
        // VXLAN with a VNI; Geneve with an option.
        (
            outer(
                17,
                &udp(
                    50000,
                    4789,
                    &[&[0x08, 0, 0, 0, 0, 0x10, 0x20, 0][..], &inner_eth].concat(),
                ),
            ),
            tunnel::VXLAN,
            Some(0x1020),
        ),
        (
            outer(
                17,
                &udp(
                    50000,
                    6081,
                    &[
                        &[
                            0x01, 0, 0x65, 0x58, 0, 0, 0x42, 0, 0, 0x01, 0x01, 0x01, 0, 0, 0, 0,
                        ][..],
                        &inner_eth,
                    ]
                    .concat(),
                ),
            ),
            tunnel::GENEVE,
            Some(0x42),
        ),
        // GTP-U G-PDU with a sequence number and a PDU session container extension.
        (
            outer(
                17,
                &udp(2152, 2152, &{
                    // The length counts what follows the first 8 bytes.
                    let length = (8 + inner_tcp().len()) as u16;
                    let [high, low] = length.to_be_bytes();
                    let header = [
                        0x36, 0xff, high, low, 0, 0, 0x01, 0x02, 0, 1, 0, 0x85, 1, 0x10, 0x09, 0,
                    ];
                    [&header[..], &inner_tcp()].concat()
                }),
            ),
            tunnel::GTP,
            Some(0x0102),
        ),
        // MPLS, two labels, IPv4; MPLS with a pseudowire control word and Ethernet.
        (
            eth(
                0x8847,
                &[&[0, 0x01, 0x00, 64, 0, 0x02, 0x01, 64][..], &inner_tcp()].concat(),
            ),
            tunnel::MPLS,
            None,
        ),
        (
            eth(
                0x8847,
                &[&[0, 0x03, 0x01, 64, 0, 0, 0, 0][..], &inner_eth].concat(),
            ),
            tunnel::MPLS,
            None,
        ),
        // PPPoE session with IPv4.
        (
            eth(
                0x8864,
                &[&[0x11, 0, 0, 1, 0, 42, 0x00, 0x21][..], &inner_tcp()].concat(),
            ),
            tunnel::PPPOE,
            None,
        ),
        // 802.1ad outer tag and 802.1Q inner tag.
        (
            eth(
                0x88a8,
                &[&[0, 10, 0x81, 0, 0, 20, 0x08, 0][..], &inner_tcp()].concat(),
            ),
            0,
            None,
        ),
        // GRE inside VXLAN: nested, the outermost identifier is kept.
        (
            outer(
                17,
                &udp(
                    50000,
                    4789,
                    &[
                        &[0x08, 0, 0, 0, 0, 0, 0x05, 0][..],
                        &eth(
                            0x0800,
                            &ipv4(
                                47,
                                [172, 16, 0, 1],
                                [172, 16, 0, 2],
                                &gre(0x2000, 0x0800, &[0, 0, 0, 9], &inner_tcp()),
                            ),
                        ),
                    ]
                    .concat(),
                ),
            ),
            tunnel::VXLAN | tunnel::GRE,
            Some(5),
        ),
    ];
    // Cisco FabricPath: outer addresses, the tag, then the host's frame.
    let mut fabricpath = vec![
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x89, 0x03, 0x00, 0x3f,
    ];
    fabricpath.extend(inner_eth.clone());
    frames.push((fabricpath, tunnel::FABRICPATH, None));
    frames
}

fn write_pcap(path: &Path, link_type: u32, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend(0xa1b2_c3d4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend([0; 8]);
    out.extend(65535u32.to_le_bytes());
    out.extend(link_type.to_le_bytes());
    for (i, frame) in frames.iter().enumerate() {
        out.extend((1_700_000_000u32 + i as u32).to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((frame.len() as u32).to_le_bytes());
        out.extend((frame.len() as u32).to_le_bytes());
        out.extend_from_slice(frame);
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn every_encapsulation_decodes_as_tshark_does_with_its_fields() {
    if !support::oracle_ready(&["tshark"], &[]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hindsight-tunnels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let frames = synthetic();
    let path = dir.join("tunnels.pcap");
    write_pcap(
        &path,
        1,
        &frames
            .iter()
            .map(|(frame, ..)| frame.clone())
            .collect::<Vec<_>>(),
    );
    let (_, compared) = compare(&path);
    assert_eq!(compared, frames.len());
    for (i, (frame, bits, id)) in frames.iter().enumerate() {
        let headers = hindsight_decode::decode(hindsight_model::LinkType::ETHERNET, frame);
        assert_eq!(
            headers.tunnel.unwrap_or(0),
            *bits,
            "frame {}: {headers:?}",
            i + 1
        );
        assert_eq!(headers.tunnel_id.map(|t| t.id), *id, "frame {}", i + 1);
        assert!(headers.src_addr.is_some(), "frame {}", i + 1);
        if *bits & (tunnel::GRE | tunnel::IPIP | tunnel::VXLAN | tunnel::GENEVE | tunnel::GTP) != 0
        {
            assert_eq!(
                headers.tunnel_src.map(|a| a.to_string()).as_deref(),
                Some("10.0.0.1")
                    .filter(|_| frame[12..14] == [8, 0])
                    .or(Some("2001:db8::1")),
                "frame {}",
                i + 1
            );
        }
    }
    // PPP and Cisco HDLC link types.
    let ppp = vec![
        [&[0xff, 0x03, 0x00, 0x21][..], &inner_tcp()].concat(),
        [
            &[0x00, 0x57][..],
            &ipv6(6, "2001:db8::1", "2001:db8::2", &tcp(1, 2)),
        ]
        .concat(),
    ];
    let ppp_path = dir.join("ppp.pcap");
    write_pcap(&ppp_path, 9, &ppp);
    assert_eq!(compare(&ppp_path).1, 2);
    let chdlc = vec![[&[0x0f, 0x00, 0x08, 0x00][..], &inner_tcp()].concat()];
    let chdlc_path = dir.join("chdlc.pcap");
    write_pcap(&chdlc_path, 104, &chdlc);
    assert_eq!(compare(&chdlc_path).1, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
