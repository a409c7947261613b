//! Connection records built by `hindsight ingest` from a real capture, checked
//! against nfpcapd (nfdump's pcap-to-flow converter) as the oracle, and the
//! connection index answering `hindsight flows`.

mod common;

use common::{archived_flows, fixtures_dir, hindsight, ingest, lan_hour, ok, require_tool};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use hindsight_model::{Addr16, FlowRecord};
use hindsight_store::{Archive, Table};

/// A unidirectional 5-tuple: proto, source, source port, destination, destination port.
type Tuple = (u8, Addr16, u16, Addr16, u16);

/// Packets and bytes per unidirectional 5-tuple, summed over all records: the
/// figures that do not depend on how timeouts cut connections into records.
fn per_direction(records: &[FlowRecord]) -> BTreeMap<Tuple, (u64, u64)> {
    let mut sums: BTreeMap<Tuple, (u64, u64)> = BTreeMap::new();
    for r in records {
        if r.packets_out > 0 {
            let sum = sums
                .entry((r.proto, r.src, r.src_port, r.dst, r.dst_port))
                .or_default();
            sum.0 += r.packets_out;
            sum.1 += r.bytes_out;
        }
        if r.packets_in > 0 {
            let sum = sums
                .entry((r.proto, r.dst, r.dst_port, r.src, r.src_port))
                .or_default();
            sum.0 += r.packets_in;
            sum.1 += r.bytes_in;
        }
    }
    sums
}

/// Runs nfpcapd on the capture and returns nfdump's records as per-direction sums
/// and the number of records.
fn nfpcapd_flows(capture: &Path, work: &Path) -> (BTreeMap<Tuple, (u64, u64)>, usize) {
    require_tool("nfpcapd");
    require_tool("nfdump");
    let dir = work.join("nfcapd");
    std::fs::create_dir_all(&dir).unwrap();
    ok(&Command::new("nfpcapd")
        .args(["-e", "300,60", "-w"])
        .arg(&dir)
        .arg("-r")
        .arg(capture)
        .stdin(Stdio::null())
        .output()
        .expect("run nfpcapd"));
    let csv = ok(&Command::new("nfdump")
        .args(["-q", "-o", "csv", "-R"])
        .arg(&dir)
        .output()
        .expect("run nfdump"));
    let mut sums: BTreeMap<Tuple, (u64, u64)> = BTreeMap::new();
    let mut records = 0;
    for line in csv.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        // ts,te,td,sa,da,sp,dp,pr,flg,fwd,stos,ipkt,ibyt,...
        let addr = |text: &str| Addr16::from(text.parse::<std::net::IpAddr>().expect(text));
        let proto = match fields[7] {
            "TCP" => 6,
            "UDP" => 17,
            "ICMP" => 1,
            "IGMP" => 2,
            "ICMP6" => 58,
            other => other.parse().expect(other),
        };
        let key = (
            proto,
            addr(fields[3]),
            fields[5].parse().unwrap(),
            addr(fields[4]),
            fields[6].parse().unwrap(),
        );
        let sum = sums.entry(key).or_default();
        sum.0 += fields[11].parse::<u64>().unwrap();
        sum.1 += fields[12].parse::<u64>().unwrap();
        records += 1;
    }
    (sums, records)
}

#[test]
fn flows_of_a_real_capture_match_nfpcapd_per_direction() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let summary = ingest(&lan_hour(), &archive);
    let records = archived_flows(&archive);
    assert!(
        summary.contains(&format!("flows: {} connection records", records.len())),
        "{summary}"
    );
    let ours = per_direction(&records);
    let (theirs, their_records) = nfpcapd_flows(&lan_hour(), work.path());

    // Every IP packet of the capture is in exactly one record, with its IP bytes.
    let total = |sums: &BTreeMap<Tuple, (u64, u64)>| {
        sums.values()
            .fold((0, 0), |(p, b), (sp, sb)| (p + sp, b + sb))
    };
    assert_eq!(total(&ours), (62_038, 3_718_480));
    assert_eq!(total(&ours), total(&theirs));
    let differing: Vec<_> = ours
        .iter()
        .filter(|(key, sum)| theirs.get(key) != Some(sum))
        .take(5)
        .collect();
    assert!(differing.is_empty(), "differ from nfpcapd: {differing:?}");
    assert_eq!(ours.len(), theirs.len());

    // SQL sees the same records in the `flows` table.
    let sql = ok(&hindsight(&[
        "sql",
        "SELECT count(*) AS records, sum(packets_out + packets_in) AS packets, \
         sum(bytes_out + bytes_in) AS bytes FROM flows",
        "--format",
        "csv",
        "--archive",
        archive.to_str().unwrap(),
    ]));
    assert_eq!(
        sql.lines().nth(1),
        Some(format!("{},62038,3718480", records.len()).as_str()),
        "{sql}"
    );

    // Records differ in number only by pairing: hindsight joins both directions
    // of a connection in one record, nfpcapd keeps one record per direction.
    // Both cut at the same 300 s active and 60 s idle timeouts, and nfpcapd also
    // cuts records at its 5-minute file rotation, so it has a few more.
    let one_way: usize = records
        .iter()
        .map(|r| usize::from(r.packets_out > 0) + usize::from(r.packets_in > 0))
        .sum();
    assert!(
        one_way <= their_records && their_records - one_way < their_records / 10,
        "hindsight {one_way} one-way halves of {} records, nfpcapd {their_records} records",
        records.len()
    );
}

#[test]
fn the_flows_table_derives_the_uids_its_segments_do_not_keep() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    ingest(&lan_hour(), &archive);
    let archive_arg = archive.to_str().unwrap();
    let records = archived_flows(&archive);
    // Records built from packets keep no uid in their segments.
    assert!(!records.is_empty() && records.iter().all(|r| r.uid.is_empty()));
    let sql = ok(&hindsight(&[
        "sql",
        "SELECT uid FROM flows ORDER BY ts, uid",
        "--format",
        "csv",
        "--archive",
        archive_arg,
    ]));
    let uids: Vec<&str> = sql.lines().skip(1).collect();
    let mut expected: Vec<(i64, String)> = records
        .iter()
        .map(|r| (r.first_ns, r.derived_uid()))
        .collect();
    expected.sort();
    let expected: Vec<&str> = expected.iter().map(|(_, uid)| uid.as_str()).collect();
    assert_eq!(uids, expected);
    let distinct: std::collections::BTreeSet<&str> = uids.iter().copied().collect();
    assert_eq!(distinct.len(), uids.len());
    assert!(uids.iter().all(|uid| uid.len() == 18
        && uid.starts_with('P')
        && uid.bytes().all(|b| b.is_ascii_alphanumeric())));
    // The first connection's uid, as versions that kept uids stored it.
    assert_eq!(uids.first(), Some(&"P4QlGoCF7qiF1BV6L2"));
    // A condition on uid selects by the derived value.
    let one = ok(&hindsight(&[
        "sql",
        &format!(
            "SELECT count(*) AS n, min(ts) AS ts FROM flows WHERE uid = '{}'",
            uids[100]
        ),
        "--format",
        "csv",
        "--archive",
        archive_arg,
    ]));
    assert!(
        one.lines().nth(1).unwrap_or_default().starts_with("1,"),
        "{one}"
    );
}

#[test]
fn the_connection_index_answers_by_address_and_network() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    ingest(&lan_hour(), &archive);
    let records = archived_flows(&archive);
    let dns = "10.174.200.10".parse::<std::net::IpAddr>().unwrap();
    let dns_flows = records
        .iter()
        .filter(|r| r.src.to_ip() == dns || r.dst.to_ip() == dns)
        .count();
    assert!(dns_flows > 50, "{dns_flows}");
    let archive_arg = archive.to_str().unwrap();
    let jsonl = ok(&hindsight(&[
        "flows",
        "--ip",
        "10.174.200.10",
        "--format",
        "jsonl",
        "--limit",
        "100000",
        "--archive",
        archive_arg,
    ]));
    assert_eq!(jsonl.lines().count(), dns_flows);
    for line in jsonl.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let orig = value["orig_addr"].as_str().unwrap();
        let resp = value["resp_addr"].as_str().unwrap();
        assert!(orig == "10.174.200.10" || resp == "10.174.200.10", "{line}");
    }

    // Pages of 7 add up to the same lines.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec![
            "flows",
            "--ip",
            "10.174.200.10",
            "--format",
            "jsonl",
            "--limit",
            "7",
            "--archive",
            archive_arg,
        ];
        if let Some(cursor) = &after {
            args.extend(["--after", cursor.as_str()]);
        }
        let output = hindsight(&args);
        paged.extend(ok(&output).lines().map(str::to_owned));
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        match stderr.split("--after ").nth(1) {
            Some(rest) => after = Some(rest.split_whitespace().next().unwrap().to_owned()),
            None => break,
        }
    }
    assert_eq!(paged, jsonl.lines().map(str::to_owned).collect::<Vec<_>>());

    // A network: every connection with an address in 10.64.93.0/24, each once per
    // address of the network it involves.
    let net = ok(&hindsight(&[
        "flows",
        "--ip",
        "10.64.93.0/24",
        "--format",
        "csv",
        "--limit",
        "100000",
        "--archive",
        archive_arg,
    ]));
    let in_net = |a: Addr16| a.to_string().starts_with("10.64.93.");
    let expected: usize = records
        .iter()
        .map(|r| usize::from(in_net(r.src)) + usize::from(in_net(r.dst)))
        .sum();
    assert_eq!(
        net.lines().count(),
        expected + 1,
        "header + one line per entry"
    );

    // A time window in the middle of the hour holds fewer.
    let windowed = ok(&hindsight(&[
        "flows",
        "--ip",
        "10.174.200.10",
        "--format",
        "jsonl",
        "--limit",
        "100000",
        "--between",
        "2012-11-23T17:20:00Z",
        "2012-11-23T17:30:00Z",
        "--archive",
        archive_arg,
    ]));
    let count = windowed.lines().count();
    assert!(count > 0 && count < dns_flows, "{count}");

    // Filters narrow the index's answer; each agrees with the same condition
    // evaluated on the archived records (the flows segments).
    let host = |r: &FlowRecord, a: &str| r.src.to_string() == a || r.dst.to_string() == a;
    type Expected<'a> = &'a dyn Fn(&FlowRecord) -> bool;
    let cases: [(&str, Expected); 4] = [
        ("host 10.64.94.199 and port 139", &|r| {
            host(r, "10.64.94.199") && (r.src_port == 139 || r.dst_port == 139)
        }),
        ("ip.src == 10.64.94.199 && udp", &|r| {
            r.src.to_string() == "10.64.94.199" && r.proto == 17
        }),
        ("ip.addr == 10.64.94.199 && tcp.flags.syn == 1", &|r| {
            host(r, "10.64.94.199") && r.proto == 6 && r.tcp_flags & 0x02 != 0
        }),
        ("host 10.64.94.199 and not tcp port 139", &|r| {
            host(r, "10.64.94.199") && !(r.proto == 6 && (r.src_port == 139 || r.dst_port == 139))
        }),
    ];
    for (filter, expected) in cases {
        let lines = ok(&hindsight(&[
            "flows",
            filter,
            "--format",
            "jsonl",
            "--limit",
            "100000",
            "--archive",
            archive_arg,
        ]));
        let want = records.iter().filter(|r| expected(r)).count();
        assert!(want > 0, "{filter}");
        assert_eq!(lines.lines().count(), want, "{filter}");
    }
    // Paging through a filtered answer gives the same lines.
    let filtered = ok(&hindsight(&[
        "flows",
        "host 10.64.94.199 and not tcp port 139",
        "--format",
        "jsonl",
        "--limit",
        "100000",
        "--archive",
        archive_arg,
    ]));
    let first_page = hindsight(&[
        "flows",
        "host 10.64.94.199 and not tcp port 139",
        "--format",
        "jsonl",
        "--limit",
        "2",
        "--archive",
        archive_arg,
    ]);
    let page = ok(&first_page);
    assert_eq!(page.lines().count(), 2);
    assert!(filtered.starts_with(&page));
    // A filter without an address is scanned (the test below): an index
    // lookup's cursor is not one of its pages'.
    let index_cursor = "00".repeat(40);
    let crossed_back = hindsight(&[
        "flows",
        "tcp.port == 80",
        "--after",
        &index_cursor,
        "--archive",
        archive_arg,
    ]);
    assert!(!crossed_back.status.success());
    assert!(
        String::from_utf8_lossy(&crossed_back.stderr)
            .contains("not one that a page of this filter"),
        "{}",
        String::from_utf8_lossy(&crossed_back.stderr)
    );

    // Bad input is an error naming it.
    let bad = hindsight(&["flows", "--ip", "10.0.0.300", "--archive", archive_arg]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("10.0.0.300"));
}

/// The connections `hindsight flows` lists for `args`, followed page by
/// page through the cursors it prints: each as start (ns), protocol,
/// originator and responder with their ports.
fn listed_connections(archive: &str, args: &[&str], page: usize) -> Vec<String> {
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    let page = page.to_string();
    loop {
        let mut all = vec![
            "flows",
            "--archive",
            archive,
            "--format",
            "jsonl",
            "--limit",
        ];
        all.push(&page);
        all.extend(args);
        if let Some(cursor) = &after {
            all.extend(["--after", cursor.as_str()]);
        }
        let output = hindsight(&all);
        for line in ok(&output).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            listed.push(format!(
                "{} {} {} {} {} {}",
                v["start_ns"],
                v["proto"],
                v["orig_addr"].as_str().unwrap(),
                v["orig_port"],
                v["resp_addr"].as_str().unwrap(),
                v["resp_port"]
            ));
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        match stderr.split("add --after ").nth(1) {
            Some(rest) => after = Some(rest.split_whitespace().next().unwrap().to_owned()),
            None => return listed,
        }
    }
}

#[test]
fn connections_of_a_filter_without_addresses_are_scanned_as_sql_finds_them() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    // Segments of ten minutes: a page's cursor crosses segments.
    common::ingest_whole(&lan_hour(), &archive, &["--partition-secs", "600"]);
    let archive = archive.to_str().unwrap();
    let (start, end) = ("2012-11-23T17:10:00Z", "2012-11-23T17:45:00Z");
    let sql = |condition: &str| -> Vec<String> {
        let statement = format!(
            "SELECT CAST(ts AS BIGINT) AS ns, ip_proto, ip_str(src_addr) AS o, src_port, \
             ip_str(dst_addr) AS r, dst_port FROM flows \
             WHERE ts >= TIMESTAMP '{start}' AND ts < TIMESTAMP '{end}' AND ({condition})"
        );
        let csv = ok(&hindsight(&[
            "sql",
            "--archive",
            archive,
            "--format",
            "csv",
            &statement,
        ]));
        csv.lines()
            .skip(1)
            .map(|line| line.replace(',', " "))
            .collect()
    };
    let window = ["--between", start, end];
    for (filter, condition) in [
        (
            "udp port 53",
            "ip_proto = 17 AND (src_port = 53 OR dst_port = 53)",
        ),
        (
            "tcp && !(tcp.flags.fin == 1)",
            "ip_proto = 6 AND (tcp_flags & 1) = 0",
        ),
        ("icmp", "ip_proto = 1"),
        (
            "udp.dstport >= 1024 && !(udp.port == 137)",
            "ip_proto = 17 AND dst_port >= 1024 AND src_port <> 137 AND dst_port <> 137",
        ),
        (
            "dns.qry.type == 1 && dns.flags.rcode == 3",
            "dns_qtype = 1 AND dns_rcode = 3",
        ),
        ("service == \"dns\"", "service = 'dns'"),
        ("", "true"),
    ] {
        let mut args = window.to_vec();
        if !filter.is_empty() {
            args.push(filter);
        }
        let mut whole = listed_connections(archive, &args, 100_000);
        let paged = listed_connections(archive, &args, 37);
        let mut expected = sql(condition);
        assert!(!expected.is_empty(), "{filter}");
        // A page's order is the scan's: segment, then row.
        assert_eq!(paged, whole, "{filter}: pages of 37");
        whole.sort();
        expected.sort();
        assert_eq!(whole, expected, "{filter}");
    }

    // The first HTTP transaction's numbers, on a capture that has them.
    let http = work.path().join("http");
    ingest(&fixtures_dir().join("ndpi").join("1kxun.pcap"), &http);
    let http = http.to_str().unwrap();
    for (filter, condition, at_least) in [
        ("http.response.code >= 300", "http_status >= 300", 2),
        (
            "http.response.code == 200 && tcp.dstport == 80",
            "http_status = 200 AND dst_port = 80",
            2,
        ),
        ("http.response.code && !(service == \"http\")", "false", 0),
        (
            "service == \"dns\" || http.response.code < 200",
            "service = 'dns' OR http_status < 200",
            50,
        ),
    ] {
        let statement = format!(
            "SELECT CAST(ts AS BIGINT) AS ns, ip_proto, ip_str(src_addr) AS o, src_port, \
             ip_str(dst_addr) AS r, dst_port FROM flows WHERE {condition}"
        );
        let csv = ok(&hindsight(&[
            "sql",
            "--archive",
            http,
            "--format",
            "csv",
            &statement,
        ]));
        let mut expected: Vec<String> = csv
            .lines()
            .skip(1)
            .map(|line| line.replace(',', " "))
            .collect();
        let mut listed = listed_connections(http, &[filter], 5);
        assert!(expected.len() >= at_least, "{filter}: {expected:?}");
        listed.sort();
        expected.sort();
        assert_eq!(listed, expected, "{filter}");
    }
}

#[test]
fn ingest_keeps_the_newest_connections_it_is_told_to() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let archive_arg = archive.to_str().unwrap();
    ok(&hindsight(&[
        "ingest",
        "--quiet",
        "--keep-connections",
        "1000",
        "--partition-secs",
        "600",
        "--archive",
        archive_arg,
        lan_hour().to_str().unwrap(),
    ]));
    // The flows table keeps every record; the index keeps the newest 1000 and at
    // most one histogram interval (1 minute) more.
    let mut starts: Vec<i64> = archived_flows(&archive)
        .iter()
        .map(|r| r.first_ns)
        .collect();
    starts.sort_unstable();
    let newest_1000th = starts[starts.len() - 1000];
    let minute = 60_000_000_000i64;
    let cutoff = newest_1000th.div_euclid(minute) * minute;
    let bound = starts.iter().filter(|&&t| t >= cutoff).count();
    let listed = ok(&hindsight(&[
        "flows",
        "--ip",
        "0.0.0.0/0",
        "--format",
        "jsonl",
        "--limit",
        "1000000",
        "--archive",
        archive_arg,
    ]));
    let kept: Vec<i64> = listed
        .lines()
        .filter(|line| line.contains("\"address_is\":\"orig\""))
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            value["start_ns"].as_i64().unwrap()
        })
        .collect();
    assert!(
        kept.len() >= 1000 && kept.len() <= bound,
        "kept {} connections, expected 1000..={bound}",
        kept.len()
    );
    assert!(
        kept.iter().all(|&t| t >= cutoff),
        "an expired connection was listed"
    );

    // The flows table follows the same cutoff: segments whose records all start
    // before it are removed (ten-minute partitions give several to remove).
    let catalog = std::fs::read_to_string(archive.join("catalog.jsonl")).unwrap();
    let removed = catalog
        .lines()
        .filter(|l| l.contains("\"op\":\"remove\""))
        .count();
    assert!(removed > 0, "no flows segment expired:\n{catalog}");
    let reader = Archive::open_reader(&archive).unwrap();
    for entry in reader.catalog().entries_of(Table::Flows) {
        assert!(
            entry.max_ts_nanos >= cutoff,
            "segment {} should have expired",
            entry.id
        );
    }
    let left_on_disk = std::fs::read_dir(archive.join("flows")).unwrap().count();
    assert_eq!(
        left_on_disk,
        reader.catalog().entries_of(Table::Flows).count()
    );

    // The same limit set once in the archive's config.toml, no flag: the same index.
    let configured = work.path().join("configured");
    std::fs::create_dir_all(&configured).unwrap();
    std::fs::write(
        configured.join("config.toml"),
        "[connections]\nkeep = 1000\n",
    )
    .unwrap();
    let configured_arg = configured.to_str().unwrap();
    ok(&hindsight(&[
        "ingest",
        "--quiet",
        "--partition-secs",
        "600",
        "--archive",
        configured_arg,
        lan_hour().to_str().unwrap(),
    ]));
    let listed_configured = ok(&hindsight(&[
        "flows",
        "--ip",
        "0.0.0.0/0",
        "--format",
        "jsonl",
        "--limit",
        "1000000",
        "--archive",
        configured_arg,
    ]));
    assert_eq!(listed_configured, listed);
}

/// Counts the data lines of a Zeek log (TSV: lines not starting with `#`).
fn zeek_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count()
}

#[test]
fn zeek_conn_logs_in_tsv_and_json_become_flows() {
    let zeek = fixtures_dir().join("zeek");
    let (tsv, json) = (zeek.join("conn.tsv.log"), zeek.join("conn.json.log"));
    assert!(tsv.exists() && json.exists(), "run scripts/fetch-fixtures");
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("archive");
    let archive_arg = archive.to_str().unwrap();
    let out = ok(&hindsight(&[
        "ingest",
        "--format",
        "zeek",
        "--archive",
        archive_arg,
        tsv.to_str().unwrap(),
        json.to_str().unwrap(),
    ]));
    let expected = zeek_lines(&tsv) + zeek_lines(&json);
    assert!(
        out.contains(&format!("ingested {expected} connection record(s)")),
        "{out}"
    );
    let records = archived_flows(&archive);
    assert_eq!(records.len(), expected);
    assert!(
        records
            .iter()
            .all(|r| r.source == hindsight_model::FlowSource::Zeek)
    );
    // The first TSV line, field by field.
    let first = records
        .iter()
        .find(|r| r.uid == "CoyZrY2g74UvMMgp4a")
        .expect("the first connection of the TSV log");
    assert_eq!(first.first_ns, 1_379_288_667_706_265_000);
    assert_eq!(first.src.to_string(), "192.168.33.10");
    assert_eq!((first.src_port, first.dst_port), (1032, 80));
    assert_eq!(
        (
            first.packets_out,
            first.bytes_out,
            first.packets_in,
            first.bytes_in
        ),
        (22, 1489, 31, 39641)
    );
    assert_eq!(first.state.name(), "RSTO");
    // SQL reads a Zeek uid as kept.
    let by_uid = ok(&hindsight(&[
        "sql",
        "SELECT count(*) AS n FROM flows WHERE uid = 'CoyZrY2g74UvMMgp4a'",
        "--format",
        "csv",
        "--archive",
        archive_arg,
    ]));
    assert_eq!(by_uid.lines().nth(1), Some("1"), "{by_uid}");
    // The connection index answers for an address of the log.
    let listed = ok(&hindsight(&[
        "flows",
        "--ip",
        "192.168.33.10",
        "--format",
        "csv",
        "--limit",
        "100000",
        "--archive",
        archive_arg,
    ]));
    let by_address = records
        .iter()
        .filter(|r| r.src.to_string() == "192.168.33.10" || r.dst.to_string() == "192.168.33.10")
        .count();
    assert_eq!(listed.lines().count(), by_address + 1);

    // A damaged log: bad lines are reported with their numbers, the rest is kept.
    let damaged = work.path().join("damaged.log");
    let text = std::fs::read_to_string(&tsv).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(10, "this is not a conn.log line");
    lines.insert(12, "1379288667.7\tCx\t10.0.0.300\t1\t10.0.0.1\t2\ttcp");
    std::fs::write(&damaged, lines.join("\n")).unwrap();
    let archive2 = work.path().join("archive2");
    let output = hindsight(&[
        "ingest",
        "--format",
        "zeek",
        "--archive",
        archive2.to_str().unwrap(),
        damaged.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("line 11") && stderr.contains("line 13"),
        "{stderr}"
    );
    assert!(stderr.contains("10.0.0.300"), "{stderr}");
    assert_eq!(archived_flows(&archive2).len(), zeek_lines(&tsv));
}

/// The records of a Zeek log, as JSON objects: JSON lines as they are, TSV
/// lines by their `#fields` (unset and empty fields left out; sets and vectors
/// as arrays of strings).
fn zeek_records(path: &Path) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut names: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with('{') {
            out.push(serde_json::from_str(line).unwrap());
        } else if let Some(fields) = line.strip_prefix("#fields\t") {
            names = fields.split('\t').collect();
        } else if !line.starts_with('#') {
            let mut record = serde_json::Map::new();
            for (name, value) in names.iter().zip(line.split('\t')) {
                if value == "-" || value == "(empty)" {
                    continue;
                }
                let list = ["answers", "TTLs", "resp_mime_types"].contains(name);
                let value = if list {
                    serde_json::json!(value.split(',').collect::<Vec<_>>())
                } else {
                    serde_json::json!(value)
                };
                record.insert((*name).to_owned(), value);
            }
            out.push(record);
        }
    }
    out
}

/// A JSON value as text (a string's contents, a number's digits).
fn text_of(value: &serde_json::Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The fields hindsight should give each uid of dns, ssl and http logs: for
/// each protocol, those of the uid's first record by `ts` (as hindsight keeps
/// a connection's first transaction). Cipher suites are named as tshark names
/// them (`tshark -G values`).
fn expected_app_fields(logs: &[&Path]) -> BTreeMap<String, hindsight_model::AppFields> {
    use hindsight_model::app::{DnsFields, HttpFields, TlsFields};
    let values = Command::new("tshark")
        .args(["-G", "values"])
        .output()
        .unwrap();
    let ciphers: BTreeMap<String, u16> = String::from_utf8_lossy(&values.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() == 4 && f[1] == "tls.handshake.ciphersuite")
                .then(|| (f[3].to_owned(), f[2].parse().unwrap()))
        })
        .collect();
    let mut first: BTreeMap<(String, usize), (f64, hindsight_model::AppFields)> = BTreeMap::new();
    for (kind, log) in logs.iter().enumerate() {
        for r in zeek_records(log) {
            let get = |name: &str| r.get(name).map(text_of);
            let list = |name: &str| -> Vec<String> {
                r.get(name)
                    .and_then(|v| v.as_array())
                    .map(|items| items.iter().map(text_of).collect())
                    .unwrap_or_default()
            };
            let mut app = hindsight_model::AppFields::default();
            if let Some(query) = get("query") {
                let answers = list("answers");
                // The transaction id is no column of the flows table.
                app.dns = Some(DnsFields {
                    id: 0,
                    query,
                    qtype: get("qtype").map_or(0, |q| q.parse().unwrap()),
                    rcode: get("rcode").map(|c| c.parse().unwrap()),
                    ttls: list("TTLs")
                        .iter()
                        .map(|t| t.parse::<f64>().unwrap().round() as u32)
                        .collect(),
                    answers,
                });
            } else if get("method").is_some() || get("trans_depth").is_some() {
                app.http = Some(HttpFields {
                    method: get("method"),
                    host: get("host"),
                    uri: get("uri"),
                    user_agent: get("user_agent"),
                    status: get("status_code").map(|c| c.parse().unwrap()),
                    content_type: list("resp_mime_types").into_iter().next(),
                });
            } else if r.contains_key("cipher") || r.contains_key("server_name") {
                let version = get("version").map(|v| match v.as_str() {
                    "TLSv10" => 0x0301,
                    "TLSv11" => 0x0302,
                    "TLSv12" => 0x0303,
                    "TLSv13" => 0x0304,
                    other => panic!("version {other}"),
                });
                app.tls = Some(TlsFields {
                    sni: get("server_name"),
                    version,
                    cipher: get("cipher").map(|c| ciphers[&c]),
                    ..TlsFields::default()
                });
            } else {
                continue;
            }
            let ts: f64 = get("ts").unwrap().parse().unwrap();
            let key = (get("uid").unwrap(), kind);
            if first.get(&key).is_none_or(|(kept, _)| ts < *kept) {
                first.insert(key, (ts, app));
            }
        }
    }
    let mut by_uid: BTreeMap<String, hindsight_model::AppFields> = BTreeMap::new();
    for ((uid, _), (_, app)) in first {
        let merged = by_uid.entry(uid).or_default();
        merged.dns = merged.dns.take().or(app.dns);
        merged.tls = merged.tls.take().or(app.tls);
        merged.http = merged.http.take().or(app.http);
    }
    by_uid
}

#[test]
fn zeek_dns_ssl_and_http_logs_join_their_connections_with_their_fields_intact() {
    require_tool("tshark");
    let zeek = fixtures_dir().join("zeek");
    let work = tempfile::tempdir().unwrap();
    for form in ["tsv", "json"] {
        let log = |name: &str| zeek.join(format!("{name}.{form}.log"));
        let (conn, dns, ssl, http) = (log("conn"), log("dns"), log("ssl"), log("http"));
        assert!(http.exists(), "run scripts/fetch-fixtures");
        let archive = work.path().join(form);
        // A log hindsight does not read is skipped, with a message.
        let files = work.path().join(format!("files.{form}.log"));
        std::fs::write(
            &files,
            "{\"_path\":\"files\",\"ts\":1575413155.9,\"fuid\":\"FAbjvB2sWxQoaj6bye\"}\n",
        )
        .unwrap();
        // The conn.log first on the command line: the application logs are
        // read first anyway.
        let out = ok(&hindsight(&[
            "ingest",
            "--format",
            "zeek",
            "--archive",
            archive.to_str().unwrap(),
            conn.to_str().unwrap(),
            dns.to_str().unwrap(),
            ssl.to_str().unwrap(),
            http.to_str().unwrap(),
            files.to_str().unwrap(),
        ]));
        assert!(out.contains("skipped, a Zeek files log"), "{out}");
        let expected = expected_app_fields(&[&dns, &ssl, &http]);
        let records = archived_flows(&archive);
        let conn_uids: std::collections::BTreeSet<&str> =
            records.iter().map(|r| r.uid.as_str()).collect();
        let unjoined = expected
            .keys()
            .filter(|uid| !conn_uids.contains(uid.as_str()))
            .count();
        if unjoined > 0 {
            assert!(
                out.contains(&format!(
                    "{unjoined} connection(s) of the dns/ssl/http/ssh logs have no conn.log record"
                )),
                "{out}"
            );
        }
        let mut joined = 0;
        for record in &records {
            match expected.get(&record.uid) {
                Some(app) => {
                    joined += 1;
                    assert_eq!(
                        record.app.as_deref(),
                        Some(app),
                        "{form} uid {}",
                        record.uid
                    );
                }
                None => assert!(record.app.is_none(), "{form} uid {}", record.uid),
            }
        }
        let protocols = |pick: fn(&hindsight_model::AppFields) -> bool| {
            records
                .iter()
                .filter(|r| r.app.as_deref().is_some_and(pick))
                .count()
        };
        let (with_dns, with_tls, with_http) = (
            protocols(|a| a.dns.is_some()),
            protocols(|a| a.tls.is_some()),
            protocols(|a| a.http.is_some()),
        );
        eprintln!(
            "{form}: {joined} of {} connections joined ({with_dns} dns, {with_tls} ssl, {with_http} http), {unjoined} uids unjoined",
            records.len()
        );
        // The JSON sample's http.log holds no connection of its conn.log.
        assert!(
            with_dns > 0 && with_tls > 0 && (with_http > 0 || form == "json"),
            "{form}"
        );

        // The connection index keys the joined names: every HTTP host and SNI
        // finds its connections, with the fields.
        let mut names: BTreeMap<(String, String), usize> = BTreeMap::new();
        for record in &records {
            let Some(app) = record.app.as_deref() else {
                continue;
            };
            if let Some(host) = app.http.as_ref().and_then(|h| h.host.clone()) {
                *names.entry(("http.host".to_owned(), host)).or_default() += 1;
            }
            if let Some(sni) = app.tls.as_ref().and_then(|t| t.sni.clone()) {
                *names
                    .entry(("tls.handshake.extensions_server_name".to_owned(), sni))
                    .or_default() += 1;
            }
        }
        for ((field, name), count) in &names {
            let listed = ok(&hindsight(&[
                "flows",
                &format!("{field} == \"{name}\""),
                "--format",
                "jsonl",
                "--limit",
                "100000",
                "--archive",
                archive.to_str().unwrap(),
            ]));
            let rows: Vec<serde_json::Value> = listed
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(rows.len(), *count, "{form}: {field} == {name}");
            let column = if field == "http.host" {
                "http_host"
            } else {
                "tls_sni"
            };
            assert!(rows.iter().all(|r| r[column] == name.as_str()), "{listed}");
        }
    }
}
