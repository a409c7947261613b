//! Lookups by name against tshark 4.0: real captures (nDPI's test suite,
//! fetched by `scripts/fetch-fixtures`) are ingested, and for every name
//! tshark finds (DNS query names, TLS server names, HTTP hosts, JA3s) the
//! connections `hindsight flows` lists for `FIELD == "NAME"`, for a domain
//! and its subdomains (`FIELD matches "(^|\\.)DOMAIN$"`) and for `contains`
//! are the connections whose first packet carrying the field passes the same
//! filter in `tshark -Y` (hindsight keeps each connection's first
//! transaction); and `hindsight query` with the filter returns exactly the
//! packets of those connections. HTTP over UDP (SSDP), which hindsight does
//! not read, is left out.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::{fixtures_dir, hindsight, ingest, ok, require_tool};

/// A connection, as two sorted endpoints and the protocol.
type Conn = (String, (String, String), (String, String));

/// The captures read, and the fields looked up in each.
const CAPTURES: [&str; 4] = [
    "1kxun.pcap",
    "google_ssl.pcap",
    "facebook.pcap",
    "quic.pcap",
];

/// (Wireshark field, tshark's field to print its value).
const FIELDS: [&str; 4] = [
    "dns.qry.name",
    "tls.handshake.extensions_server_name",
    "http.host",
    "tls.handshake.ja3",
];

/// tshark's rows for `filter`: frame number, the connection, stream, and
/// the value of `field`.
fn tshark(capture: &Path, filter: &str, field: &str) -> Vec<(u64, Conn, String, String)> {
    let output = Command::new("tshark")
        .args(["-n", "-o", "tcp.reassemble_out_of_order:TRUE", "-r"])
        .arg(capture)
        .args(["-Y", filter, "-T", "fields", "-E", "occurrence=f"])
        .args(["-e", "frame.number", "-e", "ip.src", "-e", "ip.dst"])
        .args(["-e", "ipv6.src", "-e", "ipv6.dst", "-e", "tcp.srcport"])
        .args([
            "-e",
            "tcp.dstport",
            "-e",
            "udp.srcport",
            "-e",
            "udp.dstport",
        ])
        .args(["-e", "tcp.stream", "-e", "udp.stream", "-e", field])
        .output()
        .expect("tshark runs");
    assert!(output.status.success(), "tshark -Y {filter}: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let (src, dst) = match f[1].is_empty() {
                true => (f[3], f[4]),
                false => (f[1], f[2]),
            };
            let (proto, sport, dport, stream) = match f[5].is_empty() {
                true => ("17", f[7], f[8], format!("u{}", f[10])),
                false => ("6", f[5], f[6], format!("t{}", f[9])),
            };
            let mut ends = [
                (src.to_owned(), sport.to_owned()),
                (dst.to_owned(), dport.to_owned()),
            ];
            ends.sort();
            let [a, b] = ends;
            Some((
                f[0].parse().ok()?,
                (proto.to_owned(), a, b),
                stream,
                f[11].to_owned(),
            ))
        })
        .collect()
}

/// The connections `hindsight flows FILTER` lists.
fn flows(archive: &Path, filter: &str) -> BTreeSet<Conn> {
    let output = hindsight(&[
        "flows",
        "--archive",
        archive.to_str().unwrap(),
        "--format",
        "jsonl",
        "--limit",
        "100000",
        filter,
    ]);
    ok(&output)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let end = |a: &str, p: &str| (v[a].as_str().unwrap().to_owned(), v[p].to_string());
            let mut ends = [end("orig_addr", "orig_port"), end("resp_addr", "resp_port")];
            ends.sort();
            let [a, b] = ends;
            (v["proto"].to_string(), a, b)
        })
        .collect()
}

/// The timestamps of the packets `hindsight query FILTER` returns.
fn packets(archive: &Path, filter: &str) -> Vec<String> {
    let out = archive.with_extension("out.pcap");
    let output = hindsight(&[
        "query",
        "--archive",
        archive.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        filter,
    ]);
    ok(&output);
    frame_times(&out, None)
}

fn frame_times(capture: &Path, filter: Option<&str>) -> Vec<String> {
    let mut command = Command::new("tshark");
    command.args(["-n", "-r"]).arg(capture);
    if let Some(filter) = filter {
        command.args(["-Y", filter]);
    }
    let output = command
        .args(["-T", "fields", "-e", "frame.time_epoch"])
        .output()
        .expect("tshark runs");
    let mut times: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    times.sort();
    times
}

/// The domain one label up (`www.example.com` → `example.com`), if it has two.
fn parent(name: &str) -> Option<&str> {
    let (_, rest) = name.split_once('.')?;
    rest.contains('.').then_some(rest)
}

#[test]
fn lookups_by_name_equal_tsharks_filters() {
    require_tool("tshark");
    let work = tempfile::tempdir().unwrap();
    let mut compared: BTreeMap<&str, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for name in CAPTURES {
        let capture = fixtures_dir().join("ndpi").join(name);
        let archive = work.path().join(name);
        ingest(&capture, &archive);
        for field in FIELDS {
            // Each connection's first packet with the field, and its value.
            let mut first: BTreeMap<String, (u64, Conn, String)> = BTreeMap::new();
            for (frame, conn, stream, value) in tshark(&capture, field, field) {
                // HTTP over UDP (SSDP) is not read.
                if field.starts_with("http.") && stream.starts_with('u') {
                    continue;
                }
                first.entry(stream).or_insert((frame, conn, value));
            }
            let values: BTreeSet<&str> = first.values().map(|(_, _, v)| v.as_str()).collect();
            let mut filters: Vec<(&str, String)> = Vec::new();
            for value in values.iter().take(12) {
                filters.push(("==", format!("{field} == \"{value}\"")));
                if field != "tls.handshake.ja3"
                    && let Some(domain) = parent(value)
                {
                    let pattern = format!("(^|\\\\.){}$", domain.replace('.', "\\\\."));
                    filters.push(("suffix", format!("{field} matches \"{pattern}\"")));
                }
                if let Some(part) = value.get(1..4) {
                    filters.push(("contains", format!("{field} contains \"{part}\"")));
                }
            }
            filters.sort();
            filters.dedup();
            for (how, filter) in filters {
                let passing: BTreeSet<u64> = tshark(&capture, &filter, field)
                    .iter()
                    .map(|r| r.0)
                    .collect();
                let expected: BTreeSet<Conn> = first
                    .values()
                    .filter(|(frame, _, _)| passing.contains(frame))
                    .map(|(_, conn, _)| conn.clone())
                    .collect();
                let got = flows(&archive, &filter);
                *compared.entry(how).or_default() += 1;
                if got != expected {
                    wrong.push(format!(
                        "{name}: flows {filter}: tshark {expected:?}, hindsight {got:?}"
                    ));
                    continue;
                }
                if how != "==" {
                    continue;
                }
                // The packets of those connections, as tshark selects them.
                let streams: Vec<String> = first
                    .iter()
                    .filter(|(_, (frame, _, _))| passing.contains(frame))
                    .map(|(stream, _)| stream.clone())
                    .collect();
                let select = |kind: char, field: &str| {
                    let ids: Vec<&str> = streams
                        .iter()
                        .filter_map(|s| s.strip_prefix(kind))
                        .collect();
                    (!ids.is_empty()).then(|| format!("{field} in {{{}}}", ids.join(",")))
                };
                let parts: Vec<String> = [select('t', "tcp.stream"), select('u', "udp.stream")]
                    .into_iter()
                    .flatten()
                    .collect();
                let expected = frame_times(&capture, Some(&parts.join(" || ")));
                let got = packets(&archive, &filter);
                *compared.entry("query").or_default() += 1;
                if got != expected {
                    wrong.push(format!(
                        "{name}: query {filter}: tshark {} packets, hindsight {}",
                        expected.len(),
                        got.len()
                    ));
                }
            }
        }
    }
    eprintln!("lookups compared with tshark: {compared:?}");
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    for (how, least) in [("==", 20), ("suffix", 5), ("contains", 20), ("query", 20)] {
        let n = compared.get(how).copied().unwrap_or(0);
        assert!(n >= least, "only {n} lookups by {how}");
    }
}

/// What cannot be answered says why: a packet query by a field the index does
/// not keep, a lookup with neither addresses nor a kept name, and a trigger
/// on a connection's field (a trigger tests packets as they arrive).
#[test]
fn what_names_cannot_answer_is_refused_with_the_reason() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("a");
    let capture = fixtures_dir().join("ndpi").join("1kxun.pcap");
    ingest(&capture, &archive);
    let archive = archive.to_str().unwrap();
    // Fails, saying `why`.
    let refused = |args: &[&str], why: &str| {
        let output = hindsight(args);
        assert!(!output.status.success(), "{args:?}");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(message.contains(why), "{args:?}: {message}");
    };
    let uri = "http.request.uri contains \"/\"";
    refused(
        &["query", "--archive", archive, uri],
        "not a name the connection index keeps",
    );
    // Connections are scanned for it instead.
    let scanned = ok(&hindsight(&[
        "flows",
        "--archive",
        archive,
        "--format",
        "jsonl",
        uri,
    ]));
    assert!(!scanned.is_empty());
    for line in scanned.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["http_uri"].as_str().unwrap().contains('/'), "{line}");
    }
    // With a kept name beside it, the URI is tested on its connections.
    let both = hindsight(&[
        "flows",
        "--archive",
        archive,
        "--format",
        "jsonl",
        "http.host == \"pic.1kxun.com\" && http.request.uri contains \".jpg\"",
    ]);
    let listed = ok(&both);
    assert!(!listed.is_empty());
    for line in listed.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["http_uri"].as_str().unwrap().contains(".jpg"), "{line}");
        assert_eq!(v["http_host"], "pic.1kxun.com");
    }
    refused(
        &[
            "record",
            "--archive",
            work.path().join("b").to_str().unwrap(),
            "-i",
            "hindsight-none0",
            "--trigger",
            "ja4 == \"t13d\"",
        ],
        "a trigger tests each packet",
    );
}
