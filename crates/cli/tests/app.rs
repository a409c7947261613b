//! Application fields against tshark 4.0: every capture of nDPI's and
//! Wireshark's test suites (fetched by `scripts/fetch-fixtures`) is ingested,
//! and for every connection each field tshark gives (the first DNS query name,
//! the first ClientHello's SNI and JA3, the first ServerHello's JA3S, the first
//! HTTP request's method, host, URI and user agent, the first response's
//! status, both SSH banners; for QUIC, the version and the hellos of the
//! Initials, which both decrypt) must equal the one hindsight keeps on the
//! connection's record. tshark reassembles out-of-order TCP segments, as
//! hindsight does.
//!
//! Left out of the comparison, because hindsight does not read them there:
//! - packets quoted in ICMP errors, TLS inside OpenVPN, and traffic tshark
//!   decrypts (WireGuard, TLS with keys in the capture: its HTTP);
//! - Google's pre-standard QUIC versions T050 and T051;
//! - the fuzzer-made captures (`fuzz-*`), which are only ingested (nothing may
//!   panic), and DNS names tshark prints with bytes outside printable ASCII or
//!   as a placeholder (`<Unknown extended label>`), which hindsight escapes;
//! - connections whose two ends are the same address and port (made by a
//!   packet generator), whose directions cannot be told apart;
//! - fields tshark does not give (hindsight may read more: TLS on ports tshark
//!   does not decode as TLS).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{archived_flows, fixtures_dir, hindsight, ok, require_tool};
use hindsight_model::{Addr16, FlowRecord, ip_proto};

/// The tshark fields read, in this order; `frame.protocols` tells which IP
/// layer is the innermost.
const FIELDS: [&str; 22] = [
    "frame.protocols",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "dns.qry.name",
    "tls.handshake.type",
    "tls.handshake.extensions_server_name",
    "tls.handshake.ja3",
    "tls.handshake.ja3s",
    "http.request.method",
    "http.host",
    "http.request.uri",
    "http.user_agent",
    "http.response.code",
    "ssh.protocol",
    "frame.number",
    "quic.version",
];

/// Where tshark is wrong, with why: (capture, the connection's lower port, field).
const KNOWN: [(&str, u16, &str); 1] = [
    // A request line with runs of spaces: tshark 4.0 does not take it for a
    // request (it gives no URI for it), and its first URI is the second request's.
    ("http-manipulated.pcap", 8080, "http_uri"),
];

/// Between the values of a field that occurs more than once in a packet.
const AGGREGATOR: &str = "\u{1f}";

/// A connection: protocol and its two endpoints in order.
type ConnKey = (u8, (Addr16, u16), (Addr16, u16));

fn conn_key(proto: u8, a: (Addr16, u16), b: (Addr16, u16)) -> ConnKey {
    if a <= b { (proto, a, b) } else { (proto, b, a) }
}

fn addr(text: &str) -> Option<Addr16> {
    text.parse::<IpAddr>().ok().map(Addr16::from)
}

/// The fields tshark gives each connection: the first value of each.
fn tshark_fields(capture: &Path) -> HashMap<ConnKey, BTreeMap<&'static str, String>> {
    let mut args = vec![
        "-o".to_owned(),
        "tcp.reassemble_out_of_order:TRUE".to_owned(),
        "-r".to_owned(),
        capture.to_str().unwrap().to_owned(),
        "-Y".to_owned(),
        "dns || tls.handshake.type == 1 || tls.handshake.type == 2 || http.request \
         || http.response || ssh.protocol"
            .to_owned(),
        "-T".to_owned(),
        "fields".to_owned(),
        "-E".to_owned(),
        "occurrence=a".to_owned(),
        "-E".to_owned(),
        format!("aggregator={AGGREGATOR}"),
    ];
    for field in FIELDS {
        args.extend(["-e".to_owned(), field.to_owned()]);
    }
    let output = Command::new("tshark")
        .args(&args)
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut out: HashMap<ConnKey, BTreeMap<&'static str, String>> = HashMap::new();
    for line in text.lines() {
        let values: Vec<Vec<&str>> = line
            .split('\t')
            .map(|v| {
                if v.is_empty() {
                    Vec::new()
                } else {
                    v.split(AGGREGATOR).collect()
                }
            })
            .collect();
        if values.len() != FIELDS.len() {
            continue;
        }
        let get = |name: &str| -> &[&str] {
            let i = FIELDS.iter().position(|f| *f == name).unwrap();
            &values[i]
        };
        let first = |name: &str| get(name).first().map(|v| (*v).to_owned());
        let protocols: Vec<&str> = get("frame.protocols")
            .first()
            .map(|p| p.split(':').collect())
            .unwrap_or_default();
        if protocols
            .iter()
            .any(|p| p.starts_with("icmp") || *p == "openvpn" || *p == "wg")
        {
            continue;
        }
        let innermost_v6 = protocols
            .iter()
            .rev()
            .find(|p| **p == "ip" || **p == "ipv6")
            .is_some_and(|p| *p == "ipv6");
        let (src, dst) = if innermost_v6 {
            (get("ipv6.src").last(), get("ipv6.dst").last())
        } else {
            (get("ip.src").last(), get("ip.dst").last())
        };
        let (Some(src), Some(dst)) = (src.and_then(|s| addr(s)), dst.and_then(|d| addr(d))) else {
            continue;
        };
        let port = |name: &str| get(name).last().and_then(|p| p.parse::<u16>().ok());
        let (proto, sport, dport) = match (port("tcp.srcport"), port("udp.srcport")) {
            (Some(sport), _) => (ip_proto::TCP, sport, port("tcp.dstport").unwrap()),
            (None, Some(sport)) => (ip_proto::UDP, sport, port("udp.dstport").unwrap()),
            _ => continue,
        };
        let key = conn_key(proto, (src, sport), (dst, dport));
        let fields = out.entry(key).or_default();
        let mut put = |field: &'static str, value: Option<String>| {
            if let Some(value) = value {
                fields.entry(field).or_insert(value);
            }
        };
        let dns_port = [sport, dport].iter().any(|p| [53, 5353, 5355].contains(p));
        if dns_port
            && let Some(name) = first("dns.qry.name")
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
            && !name.starts_with('<')
        {
            put("dns_query", Some(name));
        }
        // TLS over TCP, and in QUIC's Initials (but Google's T050 and T051,
        // whose frames are gQUIC's).
        let quic = protocols.contains(&"quic");
        if quic && first("quic.version").is_some_and(|v| v.starts_with("0x5430353")) {
            continue;
        }
        if proto != ip_proto::TCP && !quic {
            continue;
        }
        let types = get("tls.handshake.type");
        if types.contains(&"1") && !get("tls.handshake.ja3").is_empty() {
            put("ja3", first("tls.handshake.ja3"));
            put("tls_sni", first("tls.handshake.extensions_server_name"));
            if quic {
                put("quic_version", first("quic.version"));
            }
        }
        if types.contains(&"2") {
            put("ja3s", first("tls.handshake.ja3s"));
        }
        if quic {
            continue;
        }
        // HTTP that tshark decrypted from TLS is not on the wire.
        if !protocols.contains(&"tls") {
            if !get("http.request.method").is_empty() {
                put("http_method", first("http.request.method"));
                put("http_host", first("http.host"));
                put("http_uri", first("http.request.uri"));
                put("http_user_agent", first("http.user_agent"));
            }
            put("http_status", first("http.response.code"));
        }
        // Banners by sender: `ssh_a` from the connection key's first endpoint.
        if let Some(banner) = first("ssh.protocol") {
            let from_first = (src, sport) == (key.1.0, key.1.1);
            put(if from_first { "ssh_a" } else { "ssh_b" }, Some(banner));
        }
    }
    out
}

/// The value hindsight keeps for `field` on `record`.
fn ours(record: &FlowRecord, field: &str) -> Option<String> {
    let app = record.app.as_deref()?;
    let dns = app.dns.as_ref();
    let tls = app.tls.as_ref();
    let http = app.http.as_ref();
    let ssh = app.ssh.as_ref();
    match field {
        "dns_query" => dns.map(|d| d.query.clone()),
        "ja3" => tls.and_then(|t| t.ja3.clone()),
        "tls_sni" => tls.and_then(|t| t.sni.clone()),
        "ja3s" => tls.and_then(|t| t.ja3s.clone()),
        "http_method" => http.and_then(|h| h.method.clone()),
        "http_host" => http.and_then(|h| h.host.clone()),
        "http_uri" => http.and_then(|h| h.uri.clone()),
        "http_user_agent" => http.and_then(|h| h.user_agent.clone()),
        "http_status" => http.and_then(|h| h.status).map(|s| s.to_string()),
        "ssh_client" => ssh.and_then(|s| s.client.clone()),
        "ssh_server" => ssh.and_then(|s| s.server.clone()),
        "quic_version" => app.quic_version.map(|v| format!("{v:#010x}")),
        other => panic!("no field {other}"),
    }
}

/// Ingests `capture` and compares; returns the fields compared and the
/// mismatches.
fn compare(capture: &Path, work: &Path) -> (BTreeMap<&'static str, usize>, Vec<String>) {
    let archive = work.join(capture.file_name().unwrap());
    let name = capture.file_name().unwrap().to_string_lossy().into_owned();
    let output = hindsight(&[
        "ingest",
        "--quiet",
        "--archive",
        archive.to_str().unwrap(),
        capture.to_str().unwrap(),
    ]);
    let mut counts = BTreeMap::new();
    let mut wrong = Vec::new();
    if name.starts_with("fuzz-") {
        // A damaged capture is refused with a message (exit 1), never a crash.
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "{name}: {output:?}"
        );
        return (counts, wrong);
    }
    ok(&output);
    // The records of each connection in time order: a late segment after a
    // close makes a second record of the same connection, which tshark's
    // conversation includes.
    let mut records: HashMap<ConnKey, Vec<FlowRecord>> = HashMap::new();
    let mut flows = archived_flows(&archive);
    flows.sort_by_key(|r| r.first_ns);
    for record in flows {
        let key = conn_key(
            record.proto,
            (record.src, record.src_port),
            (record.dst, record.dst_port),
        );
        records.entry(key).or_default().push(record);
    }
    for (key, fields) in tshark_fields(capture) {
        for (field, expected) in fields {
            // A banner is the client's when its sender is the originator.
            // Both ends the same: which way a packet goes cannot be told.
            if key.1 == key.2 {
                continue;
            }
            let field = match (field, records.get(&key).and_then(|r| r.first())) {
                ("ssh_a" | "ssh_b", Some(record)) => {
                    let from_first = field == "ssh_a";
                    let orig_first = (record.src, record.src_port) == key.1;
                    if from_first == orig_first {
                        "ssh_client"
                    } else {
                        "ssh_server"
                    }
                }
                ("ssh_a", None) => "ssh_client",
                ("ssh_b", None) => "ssh_server",
                (field, _) => field,
            };
            if KNOWN.contains(&(name.as_str(), key.1.1.min(key.2.1), field)) {
                continue;
            }
            *counts.entry(field).or_default() += 1;
            let got = records
                .get(&key)
                .and_then(|r| r.iter().find_map(|r| ours(r, field)));
            if got.as_deref() != Some(expected.as_str()) {
                wrong.push(format!(
                    "{name} {key:?} {field}: tshark {expected:?}, hindsight {got:?}"
                ));
            }
        }
    }
    (counts, wrong)
}

fn captures(dir: &str) -> Vec<PathBuf> {
    let dir = fixtures_dir().join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}: run scripts/fetch-fixtures", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".pcap")
                || name.ends_with(".pcapng")
                || name.ends_with(".pcap.gz")
                || name.ends_with(".pcapng.gz")
                || name.ends_with(".cap")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn application_fields_equal_tsharks_on_real_captures() {
    require_tool("tshark");
    let work = tempfile::tempdir().unwrap();
    let mut files = captures("ndpi");
    files.extend(captures("wireshark"));
    // Two threads: the machine CI runs on has two cores.
    let halves: Vec<Vec<PathBuf>> = vec![
        files.iter().step_by(2).cloned().collect(),
        files.iter().skip(1).step_by(2).cloned().collect(),
    ];
    // Each thread gives each capture's result; they are added up once.
    let results: Vec<(BTreeMap<&'static str, usize>, Vec<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = halves
            .iter()
            .map(|half| {
                let work = work.path();
                scope.spawn(move || {
                    half.iter()
                        .map(|capture| compare(capture, work))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (c, w) in results {
        for (field, n) in c {
            *counts.entry(field).or_insert(0) += n;
        }
        wrong.extend(w);
    }
    eprintln!("compared with tshark: {counts:?}");
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // Enough of each kind that the comparison means something.
    for (field, least) in [
        ("dns_query", 440),
        ("tls_sni", 490),
        ("ja3", 700),
        ("ja3s", 580),
        ("http_host", 1050),
        ("http_uri", 1070),
        ("http_user_agent", 1060),
        ("http_status", 210),
        ("quic_version", 10),
        ("ssh_client", 1),
        ("ssh_server", 1),
    ] {
        let n = counts.get(field).copied().unwrap_or(0);
        assert!(n >= least, "only {n} {field} compared");
    }
}
