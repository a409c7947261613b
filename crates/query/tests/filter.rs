//! Oracle tests of the filter language: the packets of a capture that our
//! filters match are compared with the packets tshark (Wireshark filters) and
//! tcpdump (tcpdump filters) select from the same file.
//!
//! Two captures: the real `shared/data/lan-hour-2012.pcap` beside the repository
//! (or `$HINDSIGHT_TEST_PCAP`), 62,781 packets of IPv4 LAN traffic, and a small
//! synthetic one written by the test with IPv6, extension headers, VLAN and QinQ
//! tags, fragments and SCTP. Where we differ from the tools on purpose, the
//! tables below list the frames, as docs/filter-language.md documents.
//!
//! A missing capture or tool fails the test: `scripts/setup` installs the tools.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use hindsight_model::{LinkType, PacketRecord};
use hindsight_query::filter::{Filter, FilterSyntax};

/// One packet of the capture: its 1-based frame number and its record.
struct Packet {
    number: usize,
    record: PacketRecord,
}

fn capture_path() -> PathBuf {
    if let Some(path) = std::env::var_os("HINDSIGHT_TEST_PCAP") {
        return PathBuf::from(path);
    }
    Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/lan-hour-2012.pcap")
}

/// Fails the test when an oracle tool is missing: `scripts/setup` installs them.
fn require_tool(tool: &str) {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(found, "{tool} is not installed: run scripts/setup");
}

/// Reads a classic pcap file into records, decoding each frame with the decoder crate.
fn read_pcap(path: &Path) -> Vec<Packet> {
    let bytes = std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    assert!(
        bytes.len() >= 24,
        "{} is too short for a pcap header",
        path.display()
    );
    let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let (little_endian, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        other => panic!(
            "{}: not a classic pcap file (magic {other:#x})",
            path.display()
        ),
    };
    let read_u32 = |offset: usize| {
        let word = [
            bytes[offset],
            bytes[offset + 1],
            bytes[offset + 2],
            bytes[offset + 3],
        ];
        if little_endian {
            u32::from_le_bytes(word)
        } else {
            u32::from_be_bytes(word)
        }
    };
    let link_type = LinkType(u16::try_from(read_u32(20) & 0xffff).unwrap_or(0));
    let mut packets = Vec::new();
    let mut offset = 24;
    while offset + 16 <= bytes.len() {
        let seconds = i64::from(read_u32(offset));
        let fraction = i64::from(read_u32(offset + 4));
        let cap_len = read_u32(offset + 8);
        let wire_len = read_u32(offset + 12);
        let start = offset + 16;
        let end = start + cap_len as usize;
        assert!(end <= bytes.len(), "truncated record at offset {offset}");
        let data = &bytes[start..end];
        let ts_nanos = seconds * 1_000_000_000 + if nanos { fraction } else { fraction * 1_000 };
        packets.push(Packet {
            number: packets.len() + 1,
            record: PacketRecord {
                ts_nanos,
                wire_len,
                cap_len,
                link_type,
                iface: 0,
                headers: stand_in_decode::decode(link_type, data),
            },
        });
        offset = end;
    }
    packets
}

/// The capture, read once for all tests of this binary.
fn capture() -> &'static [Packet] {
    static PACKETS: OnceLock<Vec<Packet>> = OnceLock::new();
    PACKETS.get_or_init(|| {
        let path = capture_path();
        assert!(path.exists(), "missing capture {}", path.display());
        read_pcap(&path)
    })
}

fn ours(packets: &[Packet], filter: &Filter) -> BTreeSet<usize> {
    packets
        .iter()
        .filter(|packet| filter.matches(&packet.record))
        .map(|packet| packet.number)
        .collect()
}

/// Every declared field, through the filters its declaration makes
/// (`FieldDef::examples`): a record that holds only the columns the filter
/// says it reads gets the verdict the whole record gets; and every packet it
/// matches has its source or destination address, and port, within the ranges
/// the planner prunes by.
#[test]
fn every_field_reads_only_its_columns_and_prunes_soundly() {
    use hindsight_query::filter::fields::FIELDS;
    use hindsight_store::schema::{PacketBatchBuilder, PacketBatchView};
    let packets = capture();
    let mut builder = PacketBatchBuilder::with_capacity(packets.len(), 0);
    for packet in packets {
        builder.append(&packet.record, &[]);
    }
    let batch = builder.finish();
    // The records as the archive holds them (its columns), whole.
    let whole = PacketBatchView::new(&batch);
    let mut failures = Vec::new();
    let mut matched = 0;
    for text in FIELDS.iter().flat_map(|def| def.examples()) {
        let filter = Filter::parse(&text).unwrap_or_else(|error| panic!("{text}: {error}"));
        let columns = filter.columns();
        let read: Vec<usize> = (0..batch.num_columns())
            .filter(|&at| columns.contains(batch.schema().field(at).name().as_str()))
            .collect();
        let projected = batch.project(&read).unwrap();
        let narrow = PacketBatchView::new(&projected);
        let addresses = filter.address_ranges();
        let ports = filter.port_ranges();
        // The builder keeps rows in time order: a row is named by its time.
        for row in 0..whole.len() {
            let record = whole.record(row);
            let at = timestamp(&record);
            let verdict = filter.matches(&record);
            if verdict != filter.matches(&narrow.record(row)) {
                failures.push(format!(
                    "{text}: the packet at {at} is {verdict} whole, not with columns {columns:?}"
                ));
                break;
            }
            if !verdict {
                continue;
            }
            matched += 1;
            let h = &record.headers;
            if let Some(ranges) = &addresses
                && ![h.src_addr, h.dst_addr]
                    .iter()
                    .flatten()
                    .any(|addr| ranges.iter().any(|(low, high)| low <= addr && addr <= high))
            {
                failures.push(format!(
                    "{text}: the packet at {at} matches outside {ranges:?}"
                ));
                break;
            }
            if let Some(ranges) = &ports
                && ![h.src_port, h.dst_port]
                    .iter()
                    .flatten()
                    .any(|port| ranges.iter().any(|(low, high)| low <= port && port <= high))
            {
                failures.push(format!(
                    "{text}: the packet at {at} matches outside ports {ranges:?}"
                ));
                break;
            }
        }
    }
    assert!(
        matched > 100_000,
        "the filters matched only {matched} packets"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Returns the frame numbers tshark displays for `filter`, with IP reassembly
/// off so that every fragment is a packet of its own, as in our records. TCP
/// sequence analysis and stream reassembly, which add no header field we
/// compare, are off too: they take a third of tshark's time.
fn tshark_frames(path: &Path, filter: &str) -> BTreeSet<usize> {
    let output = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-o", "ip.defragment:FALSE"])
        .args(["-o", "tcp.analyze_sequence_numbers:FALSE"])
        .args(["-o", "tcp.desegment_tcp_streams:FALSE"])
        .args(["-Y", filter])
        .args(["-T", "fields", "-e", "frame.number"])
        .output()
        .unwrap_or_else(|error| panic!("tshark: {error}"));
    assert!(
        output.status.success(),
        "tshark rejects {filter:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            line.trim()
                .parse()
                .unwrap_or_else(|_| panic!("tshark printed {line:?}"))
        })
        .collect()
}

/// Runs `jobs` on two threads (the machines have two cores) and returns the
/// results in order.
fn in_parallel<T: Send, R: Send>(jobs: Vec<T>, run: impl Fn(T) -> R + Sync) -> Vec<R> {
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let job = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                    let Some((index, job)) = job else { break };
                    let result = run(job);
                    results
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((index, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, result)| result).collect()
}

/// Wireshark filters with, where it differs, the text given to tshark 4.0 (which
/// has no `^^`): each pair must select the same frames.
const WIRESHARK_FILTERS: &[(&str, Option<&str>)] = &[
    ("tcp", None),
    ("udp", None),
    ("arp", None),
    ("icmp", None),
    ("ip.addr == 10.64.88.105", None),
    ("ip.addr != 10.64.88.105", None),
    ("!(ip.addr == 10.64.88.105)", None),
    ("ip.addr !== 10.64.88.105", None),
    ("ip.src == 10.64.94.0/24", None),
    ("ip.dst in {10.64.88.7, 10.151.119.2}", None),
    ("ip.src > 10.64.93.200 and ip.src <= 10.64.94.150", None),
    ("tcp.port == 10050", None),
    ("tcp.port != 10050", None),
    ("all tcp.port > 1024", None),
    ("tcp.dstport in {139, 445} || udp.dstport == 53", None),
    ("udp.port not in {53, 137..138, 1514}", None),
    ("tcp.flags.syn == 1 && tcp.flags.ack == 0", None),
    ("tcp.flags & 0x12 == 0x12", None),
    ("tcp.flags.reset", None),
    ("eth.addr == 08:00:27:8f:a4:be", None),
    ("eth.dst.ig == 1", None),
    ("eth.dst.ig == 0 && udp", None),
    ("ip.dsfield.dscp == 48", None),
    ("ip.dsfield.dscp in {46, 48} && udp", None),
    (
        "arp.src.proto_ipv4 == 10.64.88.105 || arp.dst.proto_ipv4 == 10.64.88.105",
        None,
    ),
    ("icmp.type == 3 && icmp.code == 3", None),
    ("not tcp and not udp", None),
    (
        "udp.port == 53 ^^ ip.src == 10.64.88.105",
        Some(
            "(udp.port == 53 && !(ip.src == 10.64.88.105)) || (!(udp.port == 53) && ip.src == 10.64.88.105)",
        ),
    ),
    (
        "tcp.port == 139 or udp.port == 137 and ip.src == 10.64.93.4",
        None,
    ),
];

/// Wireshark shows the IP and UDP headers quoted inside an ICMP error as fields
/// of the packet (`ip.addr`, `udp.port`, even `udp` match them); hindsight keeps
/// the outer headers only. Frames that differ must all be such ICMP errors.
const ICMP_ERROR_FILTER: &str = "icmp.type in {3, 4, 5, 11, 12}";

#[test]
fn wireshark_filters_match_what_tshark_displays() {
    let packets = capture();
    require_tool("tshark");
    let path = capture_path();
    let mut jobs: Vec<&str> = vec![ICMP_ERROR_FILTER];
    jobs.extend(
        WIRESHARK_FILTERS
            .iter()
            .map(|(ours, theirs)| theirs.unwrap_or(ours)),
    );
    let mut results = in_parallel(jobs, |filter| tshark_frames(&path, filter)).into_iter();
    let icmp_errors = results.next().unwrap_or_default();
    assert!(!icmp_errors.is_empty(), "the capture has ICMP errors");

    let mut report = Vec::new();
    for ((text, _), expected) in WIRESHARK_FILTERS.iter().zip(results) {
        let filter = Filter::parse_with(text, FilterSyntax::Wireshark)
            .unwrap_or_else(|error| panic!("{error}"));
        let actual = ours(packets, &filter);
        let missing: BTreeSet<usize> = expected.difference(&actual).copied().collect();
        let extra: BTreeSet<usize> = actual.difference(&expected).copied().collect();
        let unexplained: Vec<usize> = missing
            .iter()
            .chain(&extra)
            .filter(|number| !icmp_errors.contains(number))
            .copied()
            .collect();
        report.push(format!(
            "{text:<60} tshark {:>6} ours {:>6} (icmp-error differences {})",
            expected.len(),
            actual.len(),
            missing.len() + extra.len()
        ));
        assert!(
            unexplained.is_empty(),
            "{text:?}: {} frames differ from tshark outside ICMP errors, first {:?} \
             (tshark {} frames, ours {})",
            unexplained.len(),
            unexplained.iter().take(10).collect::<Vec<_>>(),
            expected.len(),
            actual.len()
        );
        assert!(!expected.is_empty() || actual.is_empty(), "{text:?}");
    }
    eprintln!("{}", report.join("\n"));
}

/// Returns the timestamps (`seconds.micros`) of the packets tcpdump prints for `filter`.
fn tcpdump_timestamps(path: &Path, filter: &str) -> Vec<String> {
    let output = Command::new("tcpdump")
        .args(["-nn", "-tt", "-q", "-r"])
        .arg(path)
        .arg(filter)
        .output()
        .unwrap_or_else(|error| panic!("tcpdump: {error}"));
    assert!(
        output.status.success(),
        "tcpdump rejects {filter:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut stamps: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    stamps.sort();
    stamps
}

fn timestamp(record: &PacketRecord) -> String {
    format!(
        "{}.{:06}",
        record.ts_nanos.div_euclid(1_000_000_000),
        record.ts_nanos.rem_euclid(1_000_000_000) / 1_000
    )
}

const TCPDUMP_FILTERS: &[&str] = &[
    "host 10.64.88.105",
    "host 10.64.88.105 or 10.64.94.199",
    "src 10.64.88.105 and not dst 10.151.119.2",
    "host 10.64.88.105 and not 10.151.119.2",
    "arp host 10.64.88.105",
    "ip host 10.64.88.105",
    "net 10.64",
    "net 10.64.88.0/24",
    "dst net 10.151.119.0 mask 255.255.255.0",
    "port 53 or 67",
    "tcp port 139",
    "src port 10050",
    "udp dst port 138",
    "portrange 130-140",
    "udp or arp and host 10.64.88.105",
    "udp or (arp and host 10.64.88.105)",
    "less 60",
    "greater 500",
    "icmp",
    "ip proto 17",
    "tcp",
    "not ip",
    "ether broadcast",
    "ether multicast",
    "multicast and not broadcast",
    "ether host 08:00:27:8f:a4:be",
    "ether src 08:00:27:8f:a4:be and tcp",
    "vlan",
];

#[test]
fn tcpdump_filters_match_what_tcpdump_prints() {
    let packets = capture();
    require_tool("tcpdump");
    let path = capture_path();
    let mut report = Vec::new();
    for text in TCPDUMP_FILTERS {
        let expected = tcpdump_timestamps(&path, text);
        let filter =
            Filter::parse_with(text, FilterSyntax::Bpf).unwrap_or_else(|error| panic!("{error}"));
        let mut actual: Vec<String> = packets
            .iter()
            .filter(|packet| filter.matches(&packet.record))
            .map(|packet| timestamp(&packet.record))
            .collect();
        actual.sort();
        report.push(format!(
            "{text:<45} tcpdump {:>6} ours {:>6}",
            expected.len(),
            actual.len()
        ));
        assert_eq!(
            actual.len(),
            expected.len(),
            "{text:?}: packet counts differ"
        );
        assert!(
            actual == expected,
            "{text:?}: the same number of packets but different ones"
        );
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn auto_syntax_reads_tcpdump_filters_as_tcpdump() {
    for text in TCPDUMP_FILTERS {
        let auto = Filter::parse(text).unwrap_or_else(|error| panic!("{error}"));
        let bpf =
            Filter::parse_with(text, FilterSyntax::Bpf).unwrap_or_else(|error| panic!("{error}"));
        // Text valid in both syntaxes (`tcp`, `icmp`, `vlan`, `not ip`) reads as Wireshark.
        if auto.syntax() == FilterSyntax::Bpf {
            assert_eq!(auto, bpf, "{text:?}");
        } else {
            assert!(
                Filter::parse_with(text, FilterSyntax::Wireshark).is_ok(),
                "{text:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// A small synthetic capture with what the real one lacks (IPv6, extension
// headers, VLAN and QinQ tags, fragments, SCTP), to pin down the documented
// differences from Wireshark and tcpdump.

const MAC_A: [u8; 6] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x05];
const MAC_B: [u8; 6] = [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
const V4_A: [u8; 4] = [192, 168, 1, 1];
const V4_B: [u8; 4] = [192, 168, 1, 2];
const V6_A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn ethernet(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&MAC_B);
    frame.extend_from_slice(&MAC_A);
    for (tpid, vlan_id) in tags {
        frame.extend_from_slice(&tpid.to_be_bytes());
        frame.extend_from_slice(&vlan_id.to_be_bytes());
    }
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(payload);
    frame.resize(frame.len().max(60), 0);
    frame
}

fn ipv4(proto: u8, ident: u16, flags_fragment: u16, payload: &[u8]) -> Vec<u8> {
    let total_len = u16::try_from(20 + payload.len()).unwrap_or(u16::MAX);
    let mut header = vec![0x45, 0];
    header.extend_from_slice(&total_len.to_be_bytes());
    header.extend_from_slice(&ident.to_be_bytes());
    header.extend_from_slice(&flags_fragment.to_be_bytes());
    header.extend_from_slice(&[64, proto, 0, 0]);
    header.extend_from_slice(&V4_A);
    header.extend_from_slice(&V4_B);
    let sum = header
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
        .sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    let checksum = !u16::try_from((folded & 0xffff) + (folded >> 16)).unwrap_or(0);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    header.extend_from_slice(payload);
    header
}

fn ipv6(next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut header = vec![0x60, 0, 0, 0];
    header.extend_from_slice(&u16::try_from(payload.len()).unwrap_or(0).to_be_bytes());
    header.extend_from_slice(&[next_header, 64]);
    header.extend_from_slice(&V6_A);
    header.extend_from_slice(&V6_B);
    header.extend_from_slice(payload);
    header
}

fn tcp_header(src_port: u16, dst_port: u16, flags: u8) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&src_port.to_be_bytes());
    header.extend_from_slice(&dst_port.to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0x03, 0xe8, 0, 0, 0, 0]);
    header
}

fn udp_header(src_port: u16, dst_port: u16) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&src_port.to_be_bytes());
    header.extend_from_slice(&dst_port.to_be_bytes());
    header.extend_from_slice(&[0, 12, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
    header
}

/// The frames of the synthetic capture; frame `n` (1-based) has timestamp `n` s.
fn synthetic_frames() -> Vec<Vec<u8>> {
    const TCP: u8 = 6;
    const UDP: u8 = 17;
    let sctp_common_header = [0x0b, 0x59, 0x0b, 0x59, 0, 0, 0, 1, 0, 0, 0, 0];
    let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
    arp.extend_from_slice(&MAC_A);
    arp.extend_from_slice(&V4_A);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&V4_B);
    let mut hop_by_hop = vec![TCP, 0, 1, 4, 0, 0, 0, 0];
    hop_by_hop.extend_from_slice(&tcp_header(22, 6000, 0x10));
    // Fragment header: next header UDP, offset 1 (8 bytes), last fragment.
    let mut fragment6 = vec![UDP, 0, 0, 8, 0, 0, 0, 99];
    fragment6.extend_from_slice(&[0x7a; 8]);
    vec![
        // 1: IPv4 TCP SYN to port 80.
        ethernet(
            &[],
            0x0800,
            &ipv4(TCP, 1, 0x4000, &tcp_header(1234, 80, 0x02)),
        ),
        // 2: first fragment of a UDP datagram to port 53.
        ethernet(
            &[],
            0x0800,
            &ipv4(
                UDP,
                7,
                0x2000,
                &[udp_header(5000, 53), vec![0x78; 8]].concat(),
            ),
        ),
        // 3: its second fragment: no UDP header.
        ethernet(&[], 0x0800, &ipv4(UDP, 7, 0x0002, &[0x79; 16])),
        // 4: 802.1Q VLAN 100, IPv4 TCP.
        ethernet(
            &[(0x8100, 100)],
            0x0800,
            &ipv4(TCP, 2, 0, &tcp_header(1, 2, 0x02)),
        ),
        // 5: QinQ, 802.1ad 200 outside 802.1Q 300, IPv4 UDP port 53.
        ethernet(
            &[(0x88a8, 200), (0x8100, 300)],
            0x0800,
            &ipv4(UDP, 3, 0, &udp_header(53, 53)),
        ),
        // 6: IPv6 TCP SYN-ACK.
        ethernet(&[], 0x86dd, &ipv6(TCP, &tcp_header(443, 5555, 0x12))),
        // 7: IPv6 hop-by-hop options, then TCP.
        ethernet(&[], 0x86dd, &ipv6(0, &hop_by_hop)),
        // 8: IPv6 non-first fragment of a UDP datagram.
        ethernet(&[], 0x86dd, &ipv6(44, &fragment6)),
        // 9: ICMPv6 echo request.
        ethernet(&[], 0x86dd, &ipv6(58, &[128, 0, 0, 0, 0, 1, 0, 1])),
        // 10: ARP request.
        ethernet(&[], 0x0806, &arp),
        // 11: ICMP echo request.
        ethernet(&[], 0x0800, &ipv4(1, 4, 0, &[8, 0, 0, 0, 0, 1, 0, 1])),
        // 12: SCTP, ports 2905.
        ethernet(&[], 0x0800, &ipv4(132, 5, 0, &sctp_common_header)),
        // 13: two 802.1Q tags, 10 outside 20, IPv4 UDP.
        ethernet(
            &[(0x8100, 10), (0x8100, 20)],
            0x0800,
            &ipv4(UDP, 6, 0, &udp_header(7, 9)),
        ),
    ]
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    bytes.extend_from_slice(&2u16.to_le_bytes());
    bytes.extend_from_slice(&4u16.to_le_bytes());
    for word in [0u32, 0, 65_535, 1] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    for (index, frame) in frames.iter().enumerate() {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let seconds = u32::try_from(index + 1).unwrap_or(u32::MAX);
        for word in [seconds, 0, len, len] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(frame);
    }
    std::fs::write(path, bytes).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
}

/// A synthetic capture written to a temporary file, removed on drop.
struct SyntheticCapture {
    path: PathBuf,
    packets: Vec<Packet>,
}

impl SyntheticCapture {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "hindsight-query-filter-{}.pcap",
            std::process::id()
        ));
        write_pcap(&path, &synthetic_frames());
        let packets = read_pcap(&path);
        Self { path, packets }
    }
}

impl Drop for SyntheticCapture {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Wireshark filters on the synthetic capture: the frames only we match and the
/// frames only tshark matches, each a documented difference
/// (docs/filter-language.md, "Known differences").
const SYNTHETIC_WIRESHARK: &[(&str, &[usize], &[usize])] = &[
    ("tcp", &[], &[]),
    ("udp", &[], &[]),
    ("sctp", &[], &[]),
    ("icmp", &[], &[]),
    ("icmpv6", &[], &[]),
    ("ip", &[], &[]),
    ("ipv6", &[], &[]),
    ("arp", &[], &[]),
    ("vlan", &[], &[]),
    ("ip.version == 6", &[], &[]),
    ("ip.frag_offset == 2", &[], &[]),
    ("ip.flags.mf == 1", &[], &[]),
    ("ip.proto == 17", &[], &[]),
    ("udp.port == 53", &[], &[]),
    ("tcp.port == 80 || tcp.flags == 0x012", &[], &[]),
    ("ipv6.addr == 2001:db8::/32 && ipv6.hlim == 64", &[], &[]),
    ("sctp.port == 2905", &[], &[]),
    ("icmpv6.type == 128 || icmp.type == 8", &[], &[]),
    ("vlan.id == 100 || vlan.id == 300", &[], &[]),
    ("vlan.id == 10 && vlan.id == 20", &[], &[]),
    // An 802.1ad outer tag is `ieee8021ad.id` in Wireshark.
    ("vlan.id == 200", &[5], &[]),
    // Our eth.type is the ethertype after the VLAN tags.
    ("eth.type == 0x0800", &[4, 5, 13], &[]),
    ("eth.type == 0x8100", &[], &[4, 13]),
    // Our ipv6.nxt is the upper-layer protocol after extension headers.
    ("ipv6.nxt == 6", &[7], &[]),
    ("ipv6.nxt == 17", &[8], &[]),
    ("ipv6.nxt == 0 || ipv6.nxt == 44", &[], &[7, 8]),
];

#[test]
fn synthetic_capture_matches_tshark_up_to_documented_differences() {
    require_tool("tshark");
    let capture = SyntheticCapture::new();
    assert_eq!(capture.packets.len(), 13);
    let mut failures = Vec::new();
    for (text, only_ours, only_tshark) in SYNTHETIC_WIRESHARK {
        let filter = Filter::parse_with(text, FilterSyntax::Wireshark)
            .unwrap_or_else(|error| panic!("{error}"));
        let actual = ours(&capture.packets, &filter);
        let expected = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(&capture.path)
            .args(["-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"])
            .args(["-Y", text, "-T", "fields", "-e", "frame.number"])
            .output()
            .map(|output| {
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .filter_map(|line| line.trim().parse::<usize>().ok())
                    .collect::<BTreeSet<usize>>()
            })
            .unwrap_or_else(|error| panic!("tshark: {error}"));
        let extra: Vec<usize> = actual.difference(&expected).copied().collect();
        let missing: Vec<usize> = expected.difference(&actual).copied().collect();
        if (extra.as_slice(), missing.as_slice()) != (*only_ours, *only_tshark) {
            failures.push(format!(
                "{text:?}: only ours {extra:?} (expected {only_ours:?}), only tshark {missing:?} (expected {only_tshark:?})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// tcpdump filters on the synthetic capture, with the frames only we match and
/// the frames only tcpdump matches (documented differences).
const SYNTHETIC_TCPDUMP: &[(&str, &[usize], &[usize])] = &[
    ("ip6", &[], &[]),
    ("arp", &[], &[]),
    ("icmp", &[], &[]),
    ("icmp6", &[], &[]),
    ("less 60", &[], &[]),
    ("ether src 00:01:02:03:04:05", &[], &[]),
    ("vlan 100", &[], &[]),
    ("vlan 200", &[], &[]),
    ("sctp port 2905", &[], &[]),
    // tcpdump's primitives do not see through VLAN tags unless told `vlan`.
    ("ip", &[4, 5, 13], &[]),
    ("ip proto 17", &[5, 13], &[]),
    ("udp", &[5, 13], &[]),
    ("port 53", &[5], &[]),
    ("host 192.168.1.1", &[4, 5, 13], &[]),
    // tcpdump's `tcp` does not look past a hop-by-hop header; ours does.
    ("tcp", &[4, 7], &[]),
    // Our IPv6 protocol is the one after the extension headers.
    ("ip6 proto 44", &[], &[8]),
    // tcpdump's `vlan ID` tests the outermost tag; ours either tag.
    ("vlan 300", &[5], &[]),
    ("vlan 20", &[13], &[]),
];

#[test]
fn synthetic_capture_matches_tcpdump_up_to_documented_differences() {
    require_tool("tcpdump");
    let capture = SyntheticCapture::new();
    let mut failures = Vec::new();
    for (text, only_ours, only_tcpdump) in SYNTHETIC_TCPDUMP {
        let filter =
            Filter::parse_with(text, FilterSyntax::Bpf).unwrap_or_else(|error| panic!("{error}"));
        let actual = ours(&capture.packets, &filter);
        let expected: BTreeSet<usize> = tcpdump_timestamps(&capture.path, text)
            .iter()
            .filter_map(|stamp| stamp.split('.').next()?.parse().ok())
            .collect();
        let extra: Vec<usize> = actual.difference(&expected).copied().collect();
        let missing: Vec<usize> = expected.difference(&actual).copied().collect();
        if (extra.as_slice(), missing.as_slice()) != (*only_ours, *only_tcpdump) {
            failures.push(format!(
                "{text:?}: only ours {extra:?} (expected {only_ours:?}), only tcpdump {missing:?} (expected {only_tcpdump:?})"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Temporary stand-in for `hindsight_decode::decode` until the decoder crate lands.
mod stand_in_decode {
    use hindsight_model::{Addr16, DecodeStatus, LinkType, PacketHeaders};

    fn be16(data: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]))
    }

    pub fn decode(link_type: LinkType, data: &[u8]) -> PacketHeaders {
        let mut h = PacketHeaders::default();
        if link_type != LinkType::ETHERNET || data.len() < 14 {
            h.status = DecodeStatus::UnsupportedLinkType;
            return h;
        }
        h.dst_mac = data.get(0..6).and_then(|b| b.try_into().ok());
        h.src_mac = data.get(6..12).and_then(|b| b.try_into().ok());
        let mut at = 12;
        let mut et = be16(data, at).unwrap_or(0);
        while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
            let tci = be16(data, at + 2).unwrap_or(0) & 0xfff;
            if h.vlan_outer.is_none() {
                h.vlan_outer = Some(tci);
            } else if h.vlan_inner.is_none() {
                h.vlan_inner = Some(tci);
            }
            at += 4;
            et = be16(data, at).unwrap_or(0);
        }
        at += 2;
        h.eth_type = Some(et);
        let ip = &data[at.min(data.len())..];
        match et {
            0x0806 => {
                h.status = DecodeStatus::NonIp;
                if ip.len() >= 28 && be16(ip, 2) == Some(0x0800) {
                    let spa: [u8; 4] = ip[14..18].try_into().unwrap_or_default();
                    let tpa: [u8; 4] = ip[24..28].try_into().unwrap_or_default();
                    h.src_addr = Some(Addr16::from_v4_bytes(spa));
                    h.dst_addr = Some(Addr16::from_v4_bytes(tpa));
                }
            }
            0x0800 if ip.len() >= 20 => {
                let ihl = usize::from(ip[0] & 0xf) * 4;
                h.ip_version = Some(4);
                h.ip_dscp = Some(ip[1] >> 2);
                h.ip_id = be16(ip, 4);
                let frag = be16(ip, 6).unwrap_or(0);
                h.dont_fragment = Some(frag & 0x4000 != 0);
                h.more_fragments = Some(frag & 0x2000 != 0);
                h.frag_offset = Some(frag & 0x1fff);
                h.ip_ttl = Some(ip[8]);
                h.ip_proto = Some(ip[9]);
                h.src_addr = Some(Addr16::from_v4_bytes(
                    ip[12..16].try_into().unwrap_or_default(),
                ));
                h.dst_addr = Some(Addr16::from_v4_bytes(
                    ip[16..20].try_into().unwrap_or_default(),
                ));
                if frag & 0x1fff != 0 {
                    h.status = DecodeStatus::Fragment;
                    return h;
                }
                let l4 = &ip[ihl.min(ip.len())..];
                match ip[9] {
                    6 | 17 | 132 => {
                        h.src_port = be16(l4, 0);
                        h.dst_port = be16(l4, 2);
                        if ip[9] == 6 {
                            h.tcp_flags = be16(l4, 12).map(|w| w & 0x1ff);
                        }
                    }
                    1 => {
                        h.icmp_type = l4.first().copied();
                        h.icmp_code = l4.get(1).copied();
                    }
                    _ => {}
                }
            }
            0x86dd if ip.len() >= 40 => {
                h.ip_version = Some(6);
                h.ip_dscp = Some((ip[0] & 0xf) << 2 | ip[1] >> 6);
                h.ip_ttl = Some(ip[7]);
                h.src_addr = Some(Addr16(ip[8..24].try_into().unwrap_or_default()));
                h.dst_addr = Some(Addr16(ip[24..40].try_into().unwrap_or_default()));
                let mut next = ip[6];
                let mut at = 40;
                loop {
                    match next {
                        0 | 43 | 60 => {
                            next = ip.get(at).copied().unwrap_or(59);
                            at += (usize::from(ip.get(at + 1).copied().unwrap_or(0)) + 1) * 8;
                        }
                        44 => {
                            let offset = be16(ip, at + 2).unwrap_or(0);
                            next = ip.get(at).copied().unwrap_or(59);
                            h.frag_offset = Some(offset >> 3);
                            h.more_fragments = Some(offset & 1 != 0);
                            at += 8;
                            if offset >> 3 != 0 {
                                h.ip_proto = Some(next);
                                h.status = DecodeStatus::Fragment;
                                return h;
                            }
                        }
                        _ => break,
                    }
                }
                h.ip_proto = Some(next);
                let l4 = &ip[at.min(ip.len())..];
                match next {
                    6 | 17 | 132 => {
                        h.src_port = be16(l4, 0);
                        h.dst_port = be16(l4, 2);
                        if next == 6 {
                            h.tcp_flags = be16(l4, 12).map(|w| w & 0x1ff);
                        }
                    }
                    58 => {
                        h.icmp_type = l4.first().copied();
                        h.icmp_code = l4.get(1).copied();
                    }
                    _ => {}
                }
            }
            _ => h.status = DecodeStatus::NonIp,
        }
        h
    }
}
