//! The histogram's two paths give the same counts: the columnar path (the
//! filter as a DataFusion expression over the `packets` columns) against the
//! row path (the packet search, checked against tshark and tcpdump by the
//! CLI's tests), for filters naming every field the columns hold, on
//! lan-hour-2012.pcap and on real captures of tunnels, VLANs, IPv6, ARP and
//! other link types, fragments; and the row path's answer is tcpdump's count.

use std::path::{Path, PathBuf};
use std::process::Command;

use hindsight_filter::Filter;
use hindsight_ingest::{IngestOptions, Ingestor};
use hindsight_query::search::SearchRequest;
use hindsight_reader::{HistogramMethod, Limits, Reader, Snapshot};
use hindsight_sql::{ColumnarFilter, TimeBuckets};
use hindsight_store::TimeRange;

fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets it"))
}

fn lan_hour() -> PathBuf {
    let path = manifest_dir().join("../../../shared/data/lan-hour-2012.pcap");
    assert!(path.exists(), "missing capture {}", path.display());
    path
}

fn fixtures() -> PathBuf {
    std::env::var_os("HINDSIGHT_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../.fixtures"))
}

fn ingest(root: &Path, captures: &[PathBuf]) {
    let mut options = IngestOptions {
        partition_nanos: 600 * 1_000_000_000,
        ..IngestOptions::default()
    };
    // Summaries for the fixtures' small segments too.
    options.segment.summary_min_rows = 0;
    let (mut ingestor, _) = Ingestor::open(root, options).unwrap();
    for capture in captures {
        let outcome = ingestor.ingest_file(capture, &mut |_| {}).unwrap();
        assert!(outcome.error.is_none(), "{}", capture.display());
    }
    ingestor.finish().unwrap();
}

fn request(filter: &str, time: TimeRange) -> SearchRequest {
    SearchRequest {
        filter: Filter::parse(filter).unwrap_or_else(|e| panic!("{filter}: {e}")),
        time,
        limit: None,
        with_data: false,
        capture_only: true,
    }
}

/// Compares the two paths for every filter over `time`; returns the
/// mismatches, the filters that took the row path when asked for columnar and
/// those some segment's summary answered.
fn compare(
    snapshot: &Snapshot,
    filters: &[&str],
    time: TimeRange,
    buckets: usize,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let limits = Limits::default();
    let mut mismatches = Vec::new();
    let mut by_rows = Vec::new();
    let mut summarised = Vec::new();
    for filter in filters {
        let request = request(filter, time);
        let columnar = snapshot
            .histogram(&request, None, buckets, &limits, HistogramMethod::Columnar)
            .unwrap_or_else(|e| panic!("{filter}: {e}"));
        let rows = snapshot
            .histogram(&request, None, buckets, &limits, HistogramMethod::Rows)
            .unwrap();
        assert_eq!(rows.method, "rows");
        assert!(
            columnar.incomplete.is_empty() && rows.incomplete.is_empty(),
            "{filter}: {:?} {:?}",
            columnar.incomplete,
            rows.incomplete
        );
        if columnar.method != "columnar" {
            by_rows.push((*filter).to_owned());
        }
        if columnar.summarised > 0 {
            summarised.push((*filter).to_owned());
        }
        if (columnar.start_ns, columnar.bucket_ns, &columnar.counts)
            != (rows.start_ns, rows.bucket_ns, &rows.counts)
        {
            mismatches.push(format!(
                "{filter:?}: columnar {} {:?} against rows {} {:?}",
                columnar.total, columnar.counts, rows.total, rows.counts
            ));
        }
    }
    (mismatches, by_rows, summarised)
}

/// Filters whose every field is a column: counted on the columnar path.
const COLUMNAR: &[&str] = &[
    "",
    "tcp",
    "udp",
    "ip",
    "ipv6",
    "arp",
    "icmp",
    "icmpv6",
    "igmp",
    "sctp",
    "!ip",
    "!ip && !ipv6",
    "eth",
    "vlan",
    "tcp.port == 10050",
    "tcp.dstport == 10051",
    "udp.port == 53",
    "udp.port in {137, 138, 139}",
    "udp.srcport in {53, 137..139, 67..68}",
    "tcp.dstport in {139, 445, 10050..10051}",
    "tcp.port > 65535",
    "tcp.port < 1024",
    "tcp.port > 100",
    "tcp.srcport >= 139",
    "udp.dstport != 137",
    "udp.port >= 1023",
    "tcp.port >= 1024",
    "tcp.port in {22, 80, 443}",
    "tcp.port >= 65535",
    "tcp.port <= 65535",
    "tcp.port < 1",
    "ip.ttl > 255",
    "tcp.port != 139",
    "tcp.port !== 139",
    "tcp.port === 139",
    "tcp.flags.syn == 1",
    "tcp.flags.syn == 1 && tcp.flags.ack == 0",
    "tcp.flags.reset == 1 || tcp.flags.fin == 1",
    "tcp.flags.push == 1 and tcp.flags.urg == 0 and tcp.flags.ece == 0 and tcp.flags.cwr == 0",
    "tcp.flags & 0x12",
    "tcp.flags & 0x12 == 0x12",
    "tcp.flags == 0x18",
    "tcp.flags.ae == 1",
    "tcp.flags.syn == 1 && ip.src == 10.64.88.105",
    "ip.src == 10.64.88.105",
    "ip.dst == 10.151.119.2",
    "ip.addr == 10.64.94.199",
    "ip.addr == 10.64.88.0/24",
    "!(ip.addr == 10.64.88.105)",
    "ip.addr != 10.64.88.105",
    "ip.addr === 10.64.88.0/24",
    "ip.src >= 10.64.88.0 && ip.src < 10.64.89.0",
    "ip.dst > 10.200.0.0",
    "ip.addr == 10.174.200.10",
    "ip.addr == 172.30.100.1",
    "frame.len > 1000",
    "frame.len <= 64",
    "frame.cap_len < 60",
    "frame.interface_id == 0",
    "ip.ttl < 64",
    "ip.ttl >= 128",
    "ip.id == 0",
    "ip.flags.df == 1",
    "ip.flags.mf == 1 || ip.frag_offset > 0",
    "ip.proto == 17 && frame.len > 200",
    "ip.version == 4",
    "ip.version == 6",
    "eth.type == 0x0806",
    "eth.type == 0x86dd",
    "eth.dst == ff:ff:ff:ff:ff:ff",
    "eth.addr == ff:ff:ff:ff:ff:ff",
    "eth.src > 00:50:00:00:00:00",
    "arp.src.proto_ipv4 == 10.64.88.0/24",
    "arp.dst.proto_ipv4 == 10.64.88.1",
    "icmp.type == 8 || icmp.type == 0",
    "icmp.code != 0",
    "icmpv6.type in {133..137}",
    "icmpv6.code == 0",
    "ipv6.src == fe80::/10",
    "ipv6.dst == ff02::/16",
    "ipv6.addr == ::/0",
    "ipv6.nxt == 17",
    "ipv6.hlim == 255",
    "vlan.id == 100",
    "vlan.id in {1..4094}",
    "tunnel",
    "tunnel.type == \"gre\"",
    "tunnel.addr == 10.0.0.0/8",
    "tunnel.src == 192.168.0.0/16",
    "mpls",
    "mpls.label > 16",
    "pppoes",
    "gre",
    "gre.key > 0",
    "vxlan",
    "vxlan.vni == 123",
    "geneve",
    "geneve.vni > 0",
    "gtp",
    "gtp.teid > 0",
    "tcp ^^ ip.src == 10.64.88.105",
    "tcp xor udp xor ip.ttl == 128",
    "(tcp.port == 139 || udp.port == 138) and ip.src == 10.64.88.7",
    // tcpdump syntax
    "host 10.64.88.105",
    "src host 10.64.88.7",
    "net 10.64.88.0/24",
    "port 53",
    "tcp port 10050",
    "udp and not port 53",
    "not tcp",
    "udp or icmp",
    "portrange 130-140",
    "host 10.64.94.199 and not port 139",
    "ether broadcast",
    "vlan and udp",
    "greater 1000",
    "less 64",
];

/// Filters over every declared field, made from its type (the table of
/// fields, `hindsight_filter::fields`, is what both paths derive from).
fn per_field() -> Vec<String> {
    hindsight_filter::fields::FIELDS
        .iter()
        .flat_map(|def| def.examples())
        .collect()
}

/// The fields whose values no column holds as an integer: filters over them
/// take the row path.
const ROW_FIELDS: &[&str] = &["community_id", "eth.dst.ig"];

/// Filters that read what the columns do not hold: the row path.
const ROWS: &[&str] = &[
    "tcp[13] & 2 != 0",
    "tcp.payload contains \"SMB\"",
    "dns.qry.name contains \"local\"",
];

#[test]
fn the_columnar_histogram_counts_what_the_row_search_counts() {
    let work = tempfile::tempdir().unwrap();
    let lan = work.path().join("lan");
    ingest(&lan, &[lan_hour()]);
    let reader = Reader::open(&lan).unwrap();
    let snapshot = reader.snapshot().unwrap();
    let mut failures = Vec::new();
    // The whole span in 60 buckets, and a window cutting segments in 7.
    let first = 1_353_690_039_425_111_000i64;
    let window = TimeRange {
        start_nanos: first + 700_000_000_000,
        end_nanos: first + 2_900_000_000_000,
    };
    // Every declared field, filtered the same way on both paths; only the
    // fields no column holds take the row path.
    let fields = per_field();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    let (mismatches, by_rows, _) = compare(&snapshot, &fields, TimeRange::ALL, 20);
    failures.extend(mismatches.into_iter().map(|m| format!("per field: {m}")));
    let expected: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|filter| ROW_FIELDS.iter().any(|name| filter.contains(name)))
        .collect();
    assert_eq!(by_rows, expected, "the row path");
    for (time, buckets) in [(TimeRange::ALL, 60), (window, 7)] {
        let (mismatches, by_rows, summarised) = compare(&snapshot, COLUMNAR, time, buckets);
        failures.extend(mismatches);
        assert!(by_rows.is_empty(), "took the row path: {by_rows:?}");
        // Minute-wide buckets (and ten-minute ones): the summaries answer
        // every filter on their fields, the rows of a segment across the
        // window's edge are read.
        for filter in [
            "tcp",
            "ip.addr == 10.64.88.0/24",
            "vlan.id == 100",
            "ipv6",
            "!ip",
            "udp.port == 53",
            "port 53",
            "tcp.port < 1024",
            "tcp.flags.syn == 1 && tcp.flags.ack == 0",
            "icmp.type == 8 || icmp.type == 0",
            // The flows summary: exact ports, with the addresses.
            "tcp.port == 10050",
            "tcp.dstport in {139, 445, 10050..10051}",
            "(tcp.port == 139 || udp.port == 138) and ip.src == 10.64.88.7",
        ] {
            assert!(
                summarised.iter().any(|f| f == filter),
                "{filter}: {summarised:?}"
            );
        }
        for filter in [
            "",
            "ip.ttl < 64",
            "frame.len > 1000",
            "tcp.flags.syn == 1 && ip.src == 10.64.88.105",
        ] {
            assert!(
                !summarised.iter().any(|f| f == filter),
                "{filter}: {summarised:?}"
            );
        }
        let (mismatches, by_rows, _) = compare(&snapshot, ROWS, time, buckets);
        failures.extend(mismatches);
        assert_eq!(by_rows.len(), ROWS.len(), "{by_rows:?}");
    }
    // DataFusion's grouped count (what reads copies in an object store)
    // counts the same.
    let session = snapshot.sql(&Limits::default()).unwrap();
    for filter in ["", "tcp", "udp.port == 53 || arp", "host 10.174.200.10"] {
        let request = request(filter, TimeRange::ALL);
        let rows = snapshot
            .histogram(
                &request,
                None,
                13,
                &Limits::default(),
                HistogramMethod::Rows,
            )
            .unwrap();
        let counts = session
            .count_by_time(
                &ColumnarFilter::of(&request.filter).unwrap(),
                TimeRange::ALL,
                TimeBuckets {
                    start_ns: rows.start_ns,
                    width_ns: rows.bucket_ns,
                    count: rows.counts.len(),
                },
                &hindsight_sql::Limits::default(),
            )
            .unwrap();
        assert_eq!(counts, rows.counts, "{filter}");
    }
    // The row path is tcpdump's count (lan-hour holds no ICMP errors or
    // tunnels where the two tools' layers differ).
    for filter in [
        "tcp",
        "udp and not port 53",
        "host 10.174.200.10",
        "ether broadcast",
    ] {
        let output = Command::new("tcpdump")
            .args(["-nn", "-q", "-r"])
            .arg(lan_hour())
            .arg(filter)
            .output()
            .expect("run tcpdump");
        assert!(output.status.success());
        let expected = String::from_utf8_lossy(&output.stdout).lines().count() as u64;
        let histogram = snapshot
            .histogram(
                &request(filter, TimeRange::ALL),
                None,
                10,
                &Limits::default(),
                HistogramMethod::Auto,
            )
            .unwrap();
        assert_eq!(histogram.total, expected, "{filter}");
    }
    // Real captures of other link types, tunnels, VLANs and IPv6, in one archive.
    let dir = fixtures();
    let mut captures: Vec<PathBuf> = [
        "QinQpacket.pcap",
        "geneve.pcap",
        "vxlan.pcap",
        "mpls-traceroute.pcap",
        "mpls-over-udp.pcap",
        "pppoes.pcap",
        "ahcp.pcapng",
        "icmpv6.pcap",
        "ipv6-routing-header.pcap",
        "babel.pcap",
        "ikev2four.pcap",
        "forces2.pcap",
        "arp-too-long-tha.pcap",
        "e1000g.pcap",
        "ip6_frag_asan.pcap",
    ]
    .iter()
    .map(|name| dir.join("tcpdump").join(name))
    .collect();
    captures.extend(
        [
            "4in4tunnel.pcap",
            "6in4tunnel.pcap",
            "4in6tunnel.pcap",
            "ipv6_in_gtp.pcap",
            "dns_fragmented.pcap",
        ]
        .iter()
        .map(|name| dir.join("ndpi").join(name)),
    );
    for capture in &captures {
        assert!(
            capture.exists(),
            "run scripts/fetch-fixtures first ({} missing)",
            capture.display()
        );
    }
    let mixed = work.path().join("mixed");
    ingest(&mixed, &captures);
    let reader = Reader::open(&mixed).unwrap();
    let snapshot = reader.snapshot().unwrap();
    let (mismatches, by_rows, summarised) = compare(&snapshot, COLUMNAR, TimeRange::ALL, 25);
    failures.extend(mismatches.into_iter().map(|m| format!("fixtures: {m}")));
    let (mismatches, _, _) = compare(&snapshot, &fields, TimeRange::ALL, 25);
    failures.extend(
        mismatches
            .into_iter()
            .map(|m| format!("fixtures, per field: {m}")),
    );
    assert!(by_rows.is_empty(), "took the row path: {by_rows:?}");
    assert!(summarised.len() > 30, "fixtures: {summarised:?}");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // A segment file gone: both paths count without it and name it.
    let lan_reader = Reader::open(&lan).unwrap();
    let lan_snapshot = lan_reader.snapshot().unwrap();
    let gone = std::fs::read_dir(lan.join("packets"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .min()
        .unwrap();
    std::fs::remove_file(&gone).unwrap();
    let tcp = request("tcp", TimeRange::ALL);
    let (columnar, rows) = (
        lan_snapshot
            .histogram(
                &tcp,
                None,
                30,
                &Limits::default(),
                HistogramMethod::Columnar,
            )
            .unwrap(),
        lan_snapshot
            .histogram(&tcp, None, 30, &Limits::default(), HistogramMethod::Rows)
            .unwrap(),
    );
    assert_eq!(columnar.counts, rows.counts);
    let name = gone.file_name().unwrap().to_string_lossy().into_owned();
    for answer in [&columnar, &rows] {
        assert!(
            answer.incomplete.iter().any(|line| line.contains(&name)),
            "{} does not name {name}: {:?}",
            answer.method,
            answer.incomplete
        );
    }
    // Each capture has matches for some filter that the other path must find.
    let nonzero = COLUMNAR
        .iter()
        .filter(|filter| {
            snapshot
                .histogram(
                    &request(filter, TimeRange::ALL),
                    None,
                    1,
                    &Limits::default(),
                    HistogramMethod::Columnar,
                )
                .unwrap()
                .total
                > 0
        })
        .count();
    assert!(nonzero > 40, "only {nonzero} filters match the fixtures");
}
